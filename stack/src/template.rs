//! The template document: parameters, resources and outputs, each a typed
//! struct keyed by logical id. Maps are `BTreeMap`s and structs serialize in
//! field order, so the same model always yields byte-identical YAML and the
//! committed template can be checked against the generator.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::expr::{Expr, Literal};
use crate::resources::cloudwatch::{Alarm, Dashboard};
use crate::resources::dynamodb::Table;
use crate::resources::events::Rule;
use crate::resources::iam::Role;
use crate::resources::kms::Key;
use crate::resources::lambda::{EventSourceMapping, Function, Permission, Url};
use crate::resources::logs::LogGroup;
use crate::resources::s3::{Bucket, BucketPolicy};
use crate::resources::sns::{Subscription, Topic};
use crate::resources::sqs::{Queue, QueuePolicy};

/// The only format version CloudFormation has ever defined.
pub const FORMAT_VERSION: &str = "2010-09-09";

/// A whole CloudFormation template.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Template {
    #[serde(rename = "AWSTemplateFormatVersion")]
    pub format_version: String,
    pub description: String,
    pub parameters: BTreeMap<String, Parameter>,
    /// Checks of the parameters' values together, which CloudFormation
    /// makes before it changes anything (`Rules`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<String, ParameterRule>,
    /// Named conditions (`Fn::Equals` and friends) that resources, outputs
    /// and `Fn::If` refer to.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub conditions: BTreeMap<String, Expr>,
    pub resources: BTreeMap<String, Resource>,
    pub outputs: BTreeMap<String, Output>,
}

impl Template {
    pub fn new(description: impl Into<String>) -> Self {
        Self {
            format_version: FORMAT_VERSION.to_owned(),
            description: description.into(),
            parameters: BTreeMap::new(),
            rules: BTreeMap::new(),
            conditions: BTreeMap::new(),
            resources: BTreeMap::new(),
            outputs: BTreeMap::new(),
        }
    }

    /// Adds a parameter; a logical id used twice is a bug in the model.
    pub fn parameter(&mut self, name: &str, parameter: Parameter) {
        let previous = self.parameters.insert(name.to_owned(), parameter);
        assert!(previous.is_none(), "parameter {name} defined twice");
    }

    /// Adds a rule; a name used twice is a bug in the model.
    pub fn rule(&mut self, name: &str, rule: ParameterRule) {
        let previous = self.rules.insert(name.to_owned(), rule);
        assert!(previous.is_none(), "rule {name} defined twice");
    }

    /// Adds a condition; a name used twice is a bug in the model.
    pub fn condition(&mut self, name: &str, condition: Expr) {
        let previous = self.conditions.insert(name.to_owned(), condition);
        assert!(previous.is_none(), "condition {name} defined twice");
    }

    /// Adds a resource; a logical id used twice is a bug in the model.
    pub fn resource(&mut self, logical_id: &str, resource: impl Into<Resource>) {
        let previous = self.resources.insert(logical_id.to_owned(), resource.into());
        assert!(previous.is_none(), "resource {logical_id} defined twice");
    }

    /// Adds an output; a logical id used twice is a bug in the model.
    pub fn output(&mut self, name: &str, description: &str, value: Expr) {
        let output = Output {
            description: description.to_owned(),
            value,
            condition: None,
        };
        let previous = self.outputs.insert(name.to_owned(), output);
        assert!(previous.is_none(), "output {name} defined twice");
    }

    /// Adds an output that exists only when the template condition
    /// `condition` holds.
    pub fn conditional_output(&mut self, name: &str, description: &str, value: Expr, condition: &str) {
        self.output(name, description, value);
        self.outputs.get_mut(name).expect("just added").condition = Some(condition.to_owned());
    }
}

/// A template rule: assertions on the parameters, each refusing the
/// deploy with its description when false (rule functions only: no
/// `{"Condition": ...}` inside).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ParameterRule {
    pub assertions: Vec<Assertion>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Assertion {
    pub assert: Expr,
    pub assert_description: String,
}

/// `Type` of a parameter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum ParameterType {
    #[default]
    String,
    Number,
}

/// A template parameter with its constraints. CloudFormation checks them
/// before it changes anything, so a bad value fails the deploy up front.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Parameter {
    #[serde(rename = "Type")]
    pub kind: ParameterType,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Literal>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_values: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_pattern: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_value: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_value: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint_description: Option<String>,
    /// What the parameter changes in the running kit and what changing it
    /// on a live stack does: not part of the template, rendered into the
    /// configuration reference ([`crate::reference`]) beside `description`.
    #[serde(skip)]
    pub effect: Option<Effect>,
}

/// What a parameter does once deployed, for the configuration reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// What it changes at runtime, and in which resource.
    pub runtime: String,
    pub live_change: LiveChange,
    /// Why the live change is what it is, and what to do around it.
    pub note: String,
}

/// What changing a parameter on a deployed stack (`counterctl deploy
/// --param`) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveChange {
    /// Takes effect at the next invocation, poll or evaluation; no
    /// guarantee of the kit is weakened meanwhile.
    Safe,
    /// Safe once done, with a bounded window around the change in which a
    /// guarantee is weaker; the note bounds it and says what to do.
    Window,
    /// Replaces or breaks something that holds state or serves traffic:
    /// do not change it on a live stack.
    Unsafe,
    /// counterctl sets it on every deploy; it cannot be given with `--param`.
    Managed,
}

impl LiveChange {
    /// The word the reference shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Safe => "safe",
            Self::Window => "window",
            Self::Unsafe => "unsafe",
            Self::Managed => "set by counterctl",
        }
    }
}

impl Parameter {
    fn new(kind: ParameterType, description: &str) -> Self {
        Self {
            kind,
            description: description.to_owned(),
            ..Self::default()
        }
    }

    /// What the parameter changes at runtime and what a live change does.
    pub fn effect(mut self, runtime: &str, live_change: LiveChange, note: &str) -> Self {
        self.effect = Some(Effect {
            runtime: runtime.to_owned(),
            live_change,
            note: note.to_owned(),
        });
        self
    }

    pub fn string(description: &str) -> Self {
        Self::new(ParameterType::String, description)
    }

    /// A number parameter bounded by `min..=max`, the limits the service
    /// itself accepts.
    pub fn number(description: &str, default: i64, min: i64, max: i64) -> Self {
        Self {
            default: Some(Literal::Integer(default)),
            min_value: Some(min),
            max_value: Some(max),
            ..Self::new(ParameterType::Number, description)
        }
    }

    pub fn default_string(mut self, default: &str) -> Self {
        self.default = Some(Literal::String(default.to_owned()));
        self
    }

    pub fn allowed_values(mut self, values: &[&str]) -> Self {
        self.allowed_values = values.iter().map(|v| (*v).to_owned()).collect();
        self
    }

    pub fn pattern(mut self, pattern: &str, constraint_description: &str) -> Self {
        self.allowed_pattern = Some(pattern.to_owned());
        self.constraint_description = Some(constraint_description.to_owned());
        self
    }

    pub fn length(mut self, min: u32, max: u32) -> Self {
        self.min_length = Some(min);
        self.max_length = Some(max);
        self
    }
}

/// A stack output.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Output {
    pub description: String,
    pub value: Expr,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// What CloudFormation does with a resource's data when the stack deletes or
/// replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Policy {
    Delete,
    Retain,
    /// `Retain`, except when the operation that created the resource rolls
    /// back: then it is deleted (a `DeletionPolicy` only; `UpdateReplacePolicy`
    /// does not take it).
    RetainExceptOnCreate,
}

/// One resource: its typed properties (which also give its `Type`) and the
/// resource-level attributes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Resource {
    #[serde(flatten)]
    pub kind: ResourceKind,
    /// The template condition under which the resource exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Resources created before this one that no property refers to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<Policy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_replace_policy: Option<Policy>,
}

impl Resource {
    /// Keeps the resource (and its data) when the stack is deleted or the
    /// resource is replaced, but not when the operation that created it
    /// rolls back: a failed first create leaves nothing behind (the
    /// resource is new and empty then), so a retry does not meet its fixed
    /// name ("already exists"). `RetainExceptOnCreate`, CloudFormation's
    /// `DeletionPolicy` attribute:
    /// <https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html>.
    pub fn retained(kind: impl Into<ResourceKind>) -> Self {
        Self::with_policies(kind.into(), Some(Policy::RetainExceptOnCreate), Some(Policy::Retain))
    }

    /// The resource with no condition, dependency or policy but these.
    fn with_policies(kind: ResourceKind, deletion: Option<Policy>, replace: Option<Policy>) -> Self {
        Self {
            kind,
            condition: None,
            depends_on: Vec::new(),
            deletion_policy: deletion,
            update_replace_policy: replace,
        }
    }

    /// The resource, created only when the template condition `condition` holds.
    pub fn only_if(mut self, condition: &str) -> Self {
        self.condition = Some(condition.to_owned());
        self
    }

    /// The resource, created after `logical_id`.
    pub fn after(mut self, logical_id: &str) -> Self {
        self.depends_on.push(logical_id.to_owned());
        self
    }

    /// Deletes the resource with the stack or on replacement, stated
    /// explicitly for stateful resources whose state is worth nothing without
    /// the stack (and whose fixed names would block re-creating it).
    pub fn deleted(kind: impl Into<ResourceKind>) -> Self {
        Self::with_policies(kind.into(), Some(Policy::Delete), Some(Policy::Delete))
    }
}

/// The resource types the kit uses; the variant names the `Type` and holds
/// the `Properties`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "Type", content = "Properties")]
pub enum ResourceKind {
    #[serde(rename = "AWS::DynamoDB::Table")]
    Table(Table),
    #[serde(rename = "AWS::SQS::Queue")]
    Queue(Queue),
    #[serde(rename = "AWS::Logs::LogGroup")]
    LogGroup(LogGroup),
    #[serde(rename = "AWS::IAM::Role")]
    Role(Role),
    #[serde(rename = "AWS::Lambda::Function")]
    Function(Function),
    #[serde(rename = "AWS::Lambda::EventSourceMapping")]
    EventSourceMapping(EventSourceMapping),
    #[serde(rename = "AWS::Lambda::Url")]
    Url(Url),
    #[serde(rename = "AWS::CloudWatch::Alarm")]
    Alarm(Alarm),
    #[serde(rename = "AWS::S3::Bucket")]
    Bucket(Bucket),
    #[serde(rename = "AWS::S3::BucketPolicy")]
    BucketPolicy(BucketPolicy),
    #[serde(rename = "AWS::SQS::QueuePolicy")]
    QueuePolicy(QueuePolicy),
    #[serde(rename = "AWS::Events::Rule")]
    Rule(Rule),
    #[serde(rename = "AWS::Lambda::Permission")]
    Permission(Permission),
    #[serde(rename = "AWS::CloudWatch::Dashboard")]
    Dashboard(Dashboard),
    #[serde(rename = "AWS::SNS::Topic")]
    Topic(Topic),
    #[serde(rename = "AWS::SNS::Subscription")]
    Subscription(Subscription),
    #[serde(rename = "AWS::KMS::Key")]
    Key(Key),
}

macro_rules! resource_from {
    ($($variant:ident),* $(,)?) => {
        $(
            impl From<$variant> for ResourceKind {
                fn from(properties: $variant) -> Self {
                    ResourceKind::$variant(properties)
                }
            }

            impl From<$variant> for Resource {
                fn from(properties: $variant) -> Self {
                    Resource::with_policies(properties.into(), None, None)
                }
            }
        )*
    };
}

resource_from!(
    Table,
    Queue,
    LogGroup,
    Role,
    Function,
    EventSourceMapping,
    Url,
    Alarm,
    Bucket,
    BucketPolicy,
    QueuePolicy,
    Rule,
    Permission,
    Dashboard,
    Topic,
    Subscription,
    Key
);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources::logs::LogGroup;

    #[test]
    fn resource_serializes_type_properties_and_policies() {
        let resource = Resource::retained(LogGroup {
            log_group_name: Expr::sub("/aws/lambda/${P}"),
            retention_in_days: 30,
        });
        assert_eq!(
            serde_json::to_value(&resource).unwrap(),
            json!({
                "Type": "AWS::Logs::LogGroup",
                "Properties": {"LogGroupName": {"Fn::Sub": "/aws/lambda/${P}"}, "RetentionInDays": 30},
                "DeletionPolicy": "RetainExceptOnCreate",
                "UpdateReplacePolicy": "Retain",
            })
        );
    }

    #[test]
    #[should_panic(expected = "defined twice")]
    fn a_logical_id_cannot_be_reused() {
        let mut template = Template::new("t");
        let group = || LogGroup {
            log_group_name: "g".into(),
            retention_in_days: 1,
        };
        template.resource("G", group());
        template.resource("G", group());
    }
}
