//! The readable diff of a change set: per resource, the action (add,
//! modify, remove, dynamic), the replacement flag as a warning, and the
//! property names that change with what causes them. Built from the
//! service's `Change` list; when the service gives a `Modify` without
//! details (the emulator lists every existing resource that way), the
//! property names come from comparing the deployed template and parameters
//! with the new ones, and resources that comparison finds unchanged are left
//! out. Pure: no I/O, unit-tested on SDK types built by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use aws_sdk_cloudformation::types::{
    Change, ChangeSource, RequiresRecreation, ResourceAttribute, ResourceChangeDetail,
};
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::cfn::{is_unknown, option_as_str};

/// What CloudFormation does to a resource (`Dynamic`: decided only during
/// the update, e.g. values from a nested stack), as the service says it.
pub use aws_sdk_cloudformation::types::ChangeAction as Action;
/// Whether a modified resource is replaced (a new physical resource).
pub use aws_sdk_cloudformation::types::Replacement;

/// An action in the JSON report, as it always was: its name (`"Add"`), or
/// `{"Other": "..."}` for one newer than the SDK (`"Unknown"` when the
/// service named none).
fn action_json<S: Serializer>(action: &Action, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    if is_unknown(action, Action::values()) {
        serializer.serialize_newtype_variant("Action", 5, "Other", action.as_str())
    } else {
        serializer.serialize_str(action.as_str())
    }
}

fn symbol(action: &Action) -> char {
    match action {
        Action::Add | Action::Import => '+',
        Action::Modify => '~',
        Action::Remove => '-',
        _ => '?',
    }
}

/// One changed property (or resource attribute such as `DeletionPolicy`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PropertyChange {
    pub name: String,
    /// `Always`, `Conditionally` or `Never`, when the service says.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "option_as_str")]
    pub requires_recreation: Option<RequiresRecreation>,
    /// What changes it: `template`, `parameter X`, `resource X`, ...
    pub causes: Vec<String>,
}

/// Where a resource's property names came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DetailsSource {
    Service,
    LocalComparison,
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceDiff {
    pub logical_id: String,
    pub resource_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical_id: Option<String>,
    #[serde(serialize_with = "action_json")]
    pub action: Action,
    /// `None` too when the service's value is newer than the SDK, as the
    /// report always had it.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "option_as_str")]
    pub replacement: Option<Replacement>,
    pub properties: Vec<PropertyChange>,
    pub details_source: DetailsSource,
}

/// A template parameter whose value changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParameterChange {
    pub name: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

/// The whole diff of one change set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    pub resources: Vec<ResourceDiff>,
    pub parameters: Vec<ParameterChange>,
    /// Resources the service listed as `Modify` without details that the
    /// template and parameter comparison finds unchanged.
    pub unchanged_omitted: Vec<String>,
}

impl Diff {
    /// The resource changes of a change set, in the service's order.
    pub fn from_changes(changes: &[Change]) -> Self {
        let resources = changes
            .iter()
            .filter_map(|change| change.resource_change())
            .map(|rc| {
                let properties = group_details(rc.details());
                ResourceDiff {
                    logical_id: rc.logical_resource_id().unwrap_or_default().to_owned(),
                    resource_type: rc.resource_type().unwrap_or_default().to_owned(),
                    physical_id: rc.physical_resource_id().filter(|p| !p.is_empty()).map(str::to_owned),
                    action: rc.action().cloned().unwrap_or_else(|| Action::from("Unknown")),
                    replacement: rc
                        .replacement()
                        .filter(|r| !is_unknown(*r, Replacement::values()))
                        .cloned(),
                    details_source: if properties.is_empty() {
                        DetailsSource::None
                    } else {
                        DetailsSource::Service
                    },
                    properties,
                }
            })
            .collect();
        Self {
            resources,
            ..Default::default()
        }
    }

    /// Fills in what the service left out, from a local comparison of the
    /// deployed and the new template and parameters: property names of a
    /// detail-less `Modify`, and the parameter changes. A detail-less
    /// `Modify` the comparison finds unchanged is dropped (and named in
    /// `unchanged_omitted`): CloudFormation itself leaves such resources alone.
    pub fn enrich(&mut self, comparison: &Comparison) {
        self.parameters = comparison.parameters.clone();
        let mut kept = Vec::with_capacity(self.resources.len());
        for mut resource in std::mem::take(&mut self.resources) {
            if resource.action == Action::Modify && resource.details_source == DetailsSource::None {
                match comparison.resources.get(&resource.logical_id) {
                    Some(properties) if !properties.is_empty() => {
                        resource.properties = properties.clone();
                        resource.details_source = DetailsSource::LocalComparison;
                    }
                    Some(_) => {
                        self.unchanged_omitted.push(resource.logical_id);
                        continue;
                    }
                    // Not in both templates: nothing to compare, keep the service's word.
                    None => {}
                }
            }
            kept.push(resource);
        }
        self.resources = kept;
    }

    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    fn count(&self, action: &Action) -> usize {
        self.resources.iter().filter(|r| &r.action == action).count()
    }
}

/// The service's details grouped per property name, causes merged.
fn group_details(details: &[ResourceChangeDetail]) -> Vec<PropertyChange> {
    let mut grouped: Vec<PropertyChange> = Vec::new();
    for detail in details {
        let Some(target) = detail.target() else { continue };
        let name = match (target.attribute(), target.name()) {
            (Some(ResourceAttribute::Properties) | None, Some(name)) => name.to_owned(),
            (Some(attribute), _) => attribute.as_str().to_owned(),
            (None, None) => continue,
        };
        let cause = describe_cause(detail.change_source(), detail.causing_entity());
        let recreation = target.requires_recreation().cloned();
        match grouped.iter_mut().find(|p| p.name == name) {
            Some(existing) => {
                if !existing.causes.contains(&cause) {
                    existing.causes.push(cause);
                }
                // Keep the strongest recreation requirement.
                if rank(recreation.as_ref()) > rank(existing.requires_recreation.as_ref()) {
                    existing.requires_recreation = recreation;
                }
            }
            None => grouped.push(PropertyChange {
                name,
                requires_recreation: recreation,
                causes: vec![cause],
            }),
        }
    }
    grouped
}

fn rank(recreation: Option<&RequiresRecreation>) -> u8 {
    match recreation {
        Some(RequiresRecreation::Always) => 3,
        Some(RequiresRecreation::Conditionally) => 2,
        Some(RequiresRecreation::Never) => 1,
        _ => 0,
    }
}

fn describe_cause(source: Option<&ChangeSource>, entity: Option<&str>) -> String {
    let entity = entity.unwrap_or("?");
    match source {
        Some(ChangeSource::ParameterReference) => format!("parameter {entity}"),
        Some(ChangeSource::ResourceReference) => format!("resource {entity}"),
        Some(ChangeSource::ResourceAttribute) => format!("attribute {entity}"),
        Some(ChangeSource::DirectModification) => "template".to_owned(),
        Some(ChangeSource::Automatic) => "automatic".to_owned(),
        Some(other) => other.as_str().to_owned(),
        None => "unknown".to_owned(),
    }
}

/// The result of comparing a deployed template and parameters with new ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Same template tree and same parameter values.
    pub identical: bool,
    pub parameters: Vec<ParameterChange>,
    /// Per logical id present in both templates: what differs.
    pub resources: BTreeMap<String, Vec<PropertyChange>>,
}

/// Compares two templates (as JSON trees) and their parameter values.
/// A property changes when its tree differs or when it refers to a
/// parameter whose value changes (through `Ref` or a `${X}` in `Fn::Sub`).
/// The cause is "parameter X" when the property of `explain` (the template
/// as generated, before any values were inlined for the emulator; normally
/// `new_template` itself) refers to a changed parameter X, else "template".
pub fn compare(
    old_template: &Value,
    old_parameters: &BTreeMap<String, String>,
    new_template: &Value,
    new_parameters: &BTreeMap<String, String>,
    explain: &Value,
) -> Comparison {
    let names: BTreeSet<&String> = old_parameters.keys().chain(new_parameters.keys()).collect();
    let parameters: Vec<ParameterChange> = names
        .into_iter()
        .filter(|name| old_parameters.get(*name) != new_parameters.get(*name))
        .map(|name| ParameterChange {
            name: name.clone(),
            old: old_parameters.get(name).cloned(),
            new: new_parameters.get(name).cloned(),
        })
        .collect();
    let changed: BTreeSet<&str> = parameters.iter().map(|p| p.name.as_str()).collect();

    let empty = serde_json::Map::new();
    let resources_of = |t: &Value| {
        t.get("Resources")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let old_resources = resources_of(old_template);
    let new_resources = resources_of(new_template);
    let mut resources = BTreeMap::new();
    for (logical_id, new) in &new_resources {
        let Some(old) = old_resources.get(logical_id) else {
            continue;
        };
        let mut properties = Vec::new();
        let props = |r: &Value| r.get("Properties").and_then(Value::as_object).cloned();
        let (old_props, new_props) = (
            props(old).unwrap_or_else(|| empty.clone()),
            props(new).unwrap_or_default(),
        );
        let keys: BTreeSet<&String> = old_props.keys().chain(new_props.keys()).collect();
        let explained = explain
            .get("Resources")
            .and_then(|r| r.get(logical_id))
            .and_then(|r| r.get("Properties"));
        for key in keys {
            let (before, after) = (old_props.get(key), new_props.get(key));
            let mut referenced = BTreeSet::new();
            if let Some(property) = explained.and_then(|p| p.get(key)) {
                references(property, &mut referenced);
            }
            let mut causes: Vec<String> = referenced
                .into_iter()
                .filter(|r| changed.contains(r.as_str()))
                .map(|r| format!("parameter {r}"))
                .collect();
            if before != after && causes.is_empty() {
                causes.push("template".to_owned());
            }
            if !causes.is_empty() {
                properties.push(PropertyChange {
                    name: key.clone(),
                    requires_recreation: None,
                    causes,
                });
            }
        }
        for attribute in [
            "Type",
            "DeletionPolicy",
            "UpdateReplacePolicy",
            "DependsOn",
            "Condition",
            "Metadata",
        ] {
            if old.get(attribute) != new.get(attribute) {
                properties.push(PropertyChange {
                    name: attribute.to_owned(),
                    requires_recreation: None,
                    causes: vec!["template".to_owned()],
                });
            }
        }
        resources.insert(logical_id.clone(), properties);
    }
    Comparison {
        identical: parameters.is_empty() && old_template == new_template,
        parameters,
        resources,
    }
}

/// Names referenced by `Ref` and by `${Name}` in `Fn::Sub` strings.
fn references(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(name)) = map.get("Ref") {
                out.insert(name.clone());
            }
            if let Some(sub) = map.get("Fn::Sub") {
                let template = match sub {
                    Value::String(s) => Some(s.as_str()),
                    Value::Array(items) => items.first().and_then(Value::as_str),
                    _ => None,
                };
                if let Some(template) = template {
                    sub_references(template, out);
                }
            }
            for child in map.values() {
                references(child, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, out)),
        _ => {}
    }
}

fn sub_references(template: &str, out: &mut BTreeSet<String>) {
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        // `${!Literal}` is an escaped literal, `${A.B}` an attribute.
        if !name.starts_with('!') && !name.contains('.') {
            out.insert(name.to_owned());
        }
        rest = &after[end + 1..];
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.resources.is_empty() {
            writeln!(f, "  no resource changes")?;
        }
        let id_width = self.resources.iter().map(|r| r.logical_id.len()).max().unwrap_or(0);
        for resource in &self.resources {
            writeln!(
                f,
                "  {} {:<8} {:<id_width$}  {}",
                symbol(&resource.action),
                resource.action.as_str(),
                resource.logical_id,
                resource.resource_type,
            )?;
            for property in &resource.properties {
                let recreation = match property.requires_recreation {
                    Some(RequiresRecreation::Always) => ", requires replacement",
                    Some(RequiresRecreation::Conditionally) => ", may require replacement",
                    _ => "",
                };
                writeln!(
                    f,
                    "        {} ({}{recreation})",
                    property.name,
                    property.causes.join(", ")
                )?;
            }
            match resource.replacement {
                Some(Replacement::True) => writeln!(
                    f,
                    "        WARNING: will be REPLACED (Replacement: True): a new physical resource is created and the old one deleted"
                )?,
                Some(Replacement::Conditional) if resource.details_source == DetailsSource::LocalComparison => {
                    writeln!(
                        f,
                        "        warning: may be replaced (the service says Replacement: Conditional, without details)"
                    )?
                }
                Some(Replacement::Conditional) => {
                    writeln!(f, "        warning: may be replaced (Replacement: Conditional)")?
                }
                _ => {}
            }
        }
        if !self.parameters.is_empty() {
            writeln!(f, "  parameters:")?;
            for p in &self.parameters {
                writeln!(
                    f,
                    "    {}: {} -> {}",
                    p.name,
                    p.old.as_deref().unwrap_or("(none)"),
                    p.new.as_deref().unwrap_or("(none)")
                )?;
            }
        }
        let replaced = self
            .resources
            .iter()
            .filter(|r| r.replacement == Some(Replacement::True))
            .count();
        let maybe = self
            .resources
            .iter()
            .filter(|r| r.replacement == Some(Replacement::Conditional))
            .count();
        write!(
            f,
            "  {} to add, {} to modify, {} to remove",
            self.count(&Action::Add) + self.count(&Action::Import),
            self.count(&Action::Modify),
            self.count(&Action::Remove),
        )?;
        let dynamic = self.count(&Action::Dynamic);
        if dynamic > 0 {
            write!(f, ", {dynamic} dynamic")?;
        }
        if replaced > 0 {
            write!(f, "; {replaced} replaced")?;
        }
        if maybe > 0 {
            write!(f, "; {maybe} may be replaced")?;
        }
        writeln!(f)?;
        if !self.unchanged_omitted.is_empty() {
            writeln!(
                f,
                "  ({} resources the service listed as Modify without details are unchanged in template and parameters; not shown)",
                self.unchanged_omitted.len()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_cloudformation::types::{
        ChangeAction, ChangeType, EvaluationType, Replacement as SdkReplacement, RequiresRecreation, ResourceChange,
        ResourceTargetDefinition,
    };
    use serde_json::json;

    use super::*;

    fn change(action: ChangeAction, id: &str, kind: &str, replacement: Option<SdkReplacement>) -> ResourceChange {
        ResourceChange::builder()
            .action(action)
            .logical_resource_id(id)
            .resource_type(kind)
            .set_replacement(replacement)
            .build()
    }

    fn detail(
        name: &str,
        recreation: RequiresRecreation,
        source: ChangeSource,
        entity: Option<&str>,
    ) -> ResourceChangeDetail {
        ResourceChangeDetail::builder()
            .target(
                ResourceTargetDefinition::builder()
                    .attribute(ResourceAttribute::Properties)
                    .name(name)
                    .requires_recreation(recreation)
                    .build(),
            )
            .evaluation(EvaluationType::Static)
            .change_source(source)
            .set_causing_entity(entity.map(str::to_owned))
            .build()
    }

    fn wrap(rc: ResourceChange) -> Change {
        Change::builder()
            .r#type(ChangeType::Resource)
            .resource_change(rc)
            .build()
    }

    fn sample() -> Vec<Change> {
        let mut modify = change(
            ChangeAction::Modify,
            "StreamMapping",
            "AWS::Lambda::EventSourceMapping",
            Some(SdkReplacement::False),
        );
        modify.details = Some(vec![
            detail(
                "BatchSize",
                RequiresRecreation::Never,
                ChangeSource::ParameterReference,
                Some("StreamBatchSize"),
            ),
            detail(
                "BatchSize",
                RequiresRecreation::Never,
                ChangeSource::DirectModification,
                None,
            ),
        ]);
        let mut replace = change(
            ChangeAction::Modify,
            "ResourcesTable",
            "AWS::DynamoDB::Table",
            Some(SdkReplacement::True),
        );
        replace.details = Some(vec![detail(
            "KeySchema",
            RequiresRecreation::Always,
            ChangeSource::DirectModification,
            None,
        )]);
        vec![
            wrap(change(ChangeAction::Add, "Dlq3", "AWS::SQS::Queue", None)),
            wrap(modify),
            wrap(replace),
            wrap(change(ChangeAction::Remove, "OldAlarm", "AWS::CloudWatch::Alarm", None)),
            wrap(change(
                ChangeAction::Dynamic,
                "Nested",
                "AWS::CloudFormation::Stack",
                None,
            )),
        ]
    }

    #[test]
    fn service_changes_become_one_entry_per_resource_with_grouped_properties() {
        let diff = Diff::from_changes(&sample());
        assert_eq!(diff.resources.len(), 5);
        let mapping = &diff.resources[1];
        assert_eq!(mapping.action, Action::Modify);
        assert_eq!(mapping.details_source, DetailsSource::Service);
        assert_eq!(
            mapping.properties,
            [PropertyChange {
                name: "BatchSize".into(),
                requires_recreation: Some("Never".into()),
                causes: vec!["parameter StreamBatchSize".into(), "template".into()],
            }]
        );
        assert_eq!(diff.resources[2].replacement, Some(Replacement::True));
        assert_eq!(diff.resources[4].action, Action::Dynamic);
    }

    #[test]
    fn the_rendering_shows_actions_properties_and_replacement_warnings() {
        let text = Diff::from_changes(&sample()).to_string();
        let expected = [
            "  + Add      Dlq3            AWS::SQS::Queue",
            "  ~ Modify   StreamMapping   AWS::Lambda::EventSourceMapping",
            "        BatchSize (parameter StreamBatchSize, template)",
            "  ~ Modify   ResourcesTable  AWS::DynamoDB::Table",
            "        KeySchema (template, requires replacement)",
            "        WARNING: will be REPLACED (Replacement: True): a new physical resource is created and the old one deleted",
            "  - Remove   OldAlarm        AWS::CloudWatch::Alarm",
            "  ? Dynamic  Nested          AWS::CloudFormation::Stack",
            "  1 to add, 2 to modify, 1 to remove, 1 dynamic; 1 replaced",
            "",
        ]
        .join("\n");
        assert_eq!(text, expected);
    }

    #[test]
    fn a_conditional_replacement_is_a_warning() {
        let diff = Diff::from_changes(&[wrap(change(
            ChangeAction::Modify,
            "Fn",
            "AWS::Lambda::Function",
            Some(SdkReplacement::Conditional),
        ))]);
        let text = diff.to_string();
        assert!(
            text.contains("warning: may be replaced (Replacement: Conditional)"),
            "{text}"
        );
        assert!(
            text.ends_with("0 to add, 1 to modify, 0 to remove; 1 may be replaced\n"),
            "{text}"
        );
    }

    /// The JSON report's shape, unknown values included: an action is its
    /// name, or `{"Other": ...}` when newer than the SDK; a replacement
    /// newer than the SDK is left out.
    #[test]
    fn the_json_report_keeps_its_shape_for_values_newer_than_the_sdk() {
        let diff = Diff::from_changes(&[
            wrap(change(
                ChangeAction::Modify,
                "Fn",
                "AWS::Lambda::Function",
                Some(SdkReplacement::True),
            )),
            wrap(change(
                ChangeAction::from("Transmogrify"),
                "Odd",
                "AWS::SQS::Queue",
                Some(SdkReplacement::from("Sometimes")),
            )),
            wrap(ResourceChange::builder().logical_resource_id("Bare").build()),
        ]);
        let json = serde_json::to_value(&diff).unwrap();
        let resources = json["resources"].as_array().unwrap();
        assert_eq!(resources[0]["action"], json!("Modify"));
        assert_eq!(resources[0]["replacement"], json!("True"));
        assert_eq!(resources[1]["action"], json!({"Other": "Transmogrify"}));
        assert!(resources[1].get("replacement").is_none(), "{}", resources[1]);
        assert_eq!(resources[2]["action"], json!({"Other": "Unknown"}));
        assert!(diff.to_string().contains("  ? Transmogrify Odd"), "{diff}");
    }

    fn template(batch: Value, queue_name: &str) -> Value {
        json!({
            "Parameters": {"StreamBatchSize": {"Type": "Number"}},
            "Resources": {
                "StreamMapping": {"Type": "AWS::Lambda::EventSourceMapping",
                    "Properties": {"BatchSize": batch, "FunctionName": {"Ref": "Fn"}}},
                "Queue": {"Type": "AWS::SQS::Queue",
                    "Properties": {"QueueName": {"Fn::Sub": queue_name}}},
                "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {"TableName": "t"}},
            }
        })
    }

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn comparison_finds_parameter_driven_and_template_changes() {
        let old = template(json!({"Ref": "StreamBatchSize"}), "${NamePrefix}-q");
        let new = template(json!({"Ref": "StreamBatchSize"}), "${NamePrefix}-queue");
        let cmp = compare(
            &old,
            &params(&[("StreamBatchSize", "100"), ("NamePrefix", "p")]),
            &new,
            &params(&[("StreamBatchSize", "25"), ("NamePrefix", "p")]),
            &new,
        );
        assert!(!cmp.identical);
        assert_eq!(
            cmp.parameters,
            [ParameterChange {
                name: "StreamBatchSize".into(),
                old: Some("100".into()),
                new: Some("25".into())
            }]
        );
        assert_eq!(cmp.resources["StreamMapping"][0].name, "BatchSize");
        assert_eq!(cmp.resources["StreamMapping"][0].causes, ["parameter StreamBatchSize"]);
        assert_eq!(cmp.resources["Queue"][0].name, "QueueName");
        assert_eq!(cmp.resources["Queue"][0].causes, ["template"]);
        assert!(cmp.resources["Table"].is_empty());
    }

    #[test]
    fn an_inlined_value_that_changed_is_attributed_to_its_parameter() {
        // What the local target deploys: the number inlined, the generated template still referring to it.
        let raw = template(json!({"Ref": "StreamBatchSize"}), "q");
        let old = template(json!(100), "q");
        let new = template(json!(25), "q");
        let cmp = compare(
            &old,
            &params(&[("StreamBatchSize", "100")]),
            &new,
            &params(&[("StreamBatchSize", "25")]),
            &raw,
        );
        assert_eq!(cmp.resources["StreamMapping"].len(), 1);
        assert_eq!(cmp.resources["StreamMapping"][0].causes, ["parameter StreamBatchSize"]);
        assert!(cmp.resources["Queue"].is_empty());
    }

    #[test]
    fn sub_references_skip_literals_and_attributes() {
        let mut out = BTreeSet::new();
        sub_references("${A}-${!Literal}-${Res.Arn}-${AWS::Region}-${B}", &mut out);
        assert_eq!(out.into_iter().collect::<Vec<_>>(), ["A", "AWS::Region", "B"]);
    }

    #[test]
    fn identical_template_and_parameters_compare_identical() {
        let t = template(json!(5), "x");
        let p = params(&[("StreamBatchSize", "5")]);
        let cmp = compare(&t, &p, &t, &p, &t);
        assert!(cmp.identical);
        assert!(cmp.resources.values().all(Vec::is_empty));
    }

    #[test]
    fn enrichment_fills_detail_less_modifies_and_drops_unchanged_ones() {
        // What the emulator answers: every existing resource as a detail-less Modify.
        let changes: Vec<Change> = ["StreamMapping", "Queue", "Table"]
            .into_iter()
            .map(|id| wrap(change(ChangeAction::Modify, id, "T", Some(SdkReplacement::Conditional))))
            .collect();
        let old = template(json!({"Ref": "StreamBatchSize"}), "q");
        let cmp = compare(
            &old,
            &params(&[("StreamBatchSize", "100")]),
            &old,
            &params(&[("StreamBatchSize", "25")]),
            &old,
        );
        let mut diff = Diff::from_changes(&changes);
        diff.enrich(&cmp);
        assert_eq!(diff.resources.len(), 1);
        assert_eq!(diff.resources[0].logical_id, "StreamMapping");
        assert_eq!(diff.resources[0].details_source, DetailsSource::LocalComparison);
        assert_eq!(diff.unchanged_omitted, ["Queue", "Table"]);
        let text = diff.to_string();
        assert!(text.contains("BatchSize (parameter StreamBatchSize)"), "{text}");
        assert!(text.contains("StreamBatchSize: 100 -> 25"), "{text}");
        assert!(
            text.contains("2 resources the service listed as Modify without details"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_diff_says_so() {
        let diff = Diff::default();
        assert!(diff.is_empty());
        assert_eq!(
            diff.to_string(),
            "  no resource changes\n  0 to add, 0 to modify, 0 to remove\n"
        );
    }
}
