//! Template adjustment for the embedded emulator (`--target local`).
//!
//! fakecloud 0.51 resolves every parameter `Ref` to a string, and its
//! resource provisioners read numeric properties only from JSON numbers: a
//! `Ref` to a `Number` parameter silently becomes the provisioner's default
//! (an event source mapping's `BatchSize` 10 instead of 100, its retries and
//! record age -1, `MemorySize` 128, an alarm without `Threshold`). The local
//! event source runner reads those settings back from the emulator, so they
//! must be right. For the local target only, the template is sent with such
//! `Ref`s replaced by the parameter's number; the parameters are still
//! passed, so the stack's parameters read the same as on AWS. Strings stay
//! where a string is required: under `Environment.Variables` and inside
//! intrinsic functions (`Fn::Sub`, `Fn::Join`, ...). AWS and LocalStack get
//! the template unchanged.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Replaces, in every resource's `Properties`, each `{"Ref": P}` whose `P`
/// is a `Number` parameter with `values[P]` as a JSON number. Returns the
/// parameters inlined.
pub fn inline_number_parameters(template: &mut Value, values: &BTreeMap<String, String>) -> BTreeSet<String> {
    let numbers: BTreeMap<String, Value> = template
        .get("Parameters")
        .and_then(Value::as_object)
        .map(|parameters| {
            parameters
                .iter()
                .filter(|(_, p)| p.get("Type").and_then(Value::as_str) == Some("Number"))
                .filter_map(|(name, _)| Some((name.clone(), number(values.get(name)?)?)))
                .collect()
        })
        .unwrap_or_default();
    let mut inlined = BTreeSet::new();
    if let Some(resources) = template.get_mut("Resources").and_then(Value::as_object_mut) {
        for resource in resources.values_mut() {
            if let Some(properties) = resource.get_mut("Properties") {
                inline(properties, &numbers, &mut inlined);
            }
        }
    }
    inlined
}

fn number(raw: &str) -> Option<Value> {
    let raw = raw.trim();
    raw.parse::<i64>().map(Value::from).ok().or_else(|| {
        raw.parse::<f64>()
            .ok()
            .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
    })
}

fn inline(value: &mut Value, numbers: &BTreeMap<String, Value>, inlined: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if map.len() == 1 {
                if let Some(Value::String(name)) = map.get("Ref") {
                    if let Some(number) = numbers.get(name) {
                        inlined.insert(name.clone());
                        *value = number.clone();
                    }
                    return;
                }
                // Intrinsic functions take (and produce) strings.
                if map.keys().next().is_some_and(|k| k.starts_with("Fn::")) {
                    return;
                }
            }
            for (key, child) in map.iter_mut() {
                // Environment variable values must be strings.
                if key == "Environment" {
                    continue;
                }
                inline(child, numbers, inlined);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| inline(item, numbers, inlined)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn number_refs_in_properties_become_numbers_and_strings_stay_strings() {
        let mut template = json!({
            "Parameters": {
                "Batch": {"Type": "Number", "Default": 100},
                "Limit": {"Type": "Number"},
                "Prefix": {"Type": "String"},
            },
            "Resources": {
                "Mapping": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {
                    "BatchSize": {"Ref": "Batch"},
                    "FunctionName": {"Ref": "Prefix"},
                }},
                "Fn": {"Type": "AWS::Lambda::Function", "Properties": {
                    "Environment": {"Variables": {"LIMIT": {"Ref": "Limit"}}},
                    "Description": {"Fn::Join": ["-", [{"Ref": "Batch"}]]},
                }},
                "Queue": {"Type": "AWS::SQS::Queue", "Properties": {
                    "RedrivePolicy": {"maxReceiveCount": {"Ref": "Limit"}},
                }},
            }
        });
        let values: BTreeMap<String, String> = [("Batch", "25"), ("Limit", "5"), ("Prefix", "p")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let inlined = inline_number_parameters(&mut template, &values);
        assert_eq!(inlined.into_iter().collect::<Vec<_>>(), ["Batch", "Limit"]);
        let resources = &template["Resources"];
        assert_eq!(resources["Mapping"]["Properties"]["BatchSize"], json!(25));
        assert_eq!(
            resources["Mapping"]["Properties"]["FunctionName"],
            json!({"Ref": "Prefix"})
        );
        assert_eq!(
            resources["Fn"]["Properties"]["Environment"]["Variables"]["LIMIT"],
            json!({"Ref": "Limit"})
        );
        assert_eq!(
            resources["Fn"]["Properties"]["Description"],
            json!({"Fn::Join": ["-", [{"Ref": "Batch"}]]})
        );
        assert_eq!(
            resources["Queue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"],
            json!(5)
        );
    }

    #[test]
    fn the_kit_template_gets_its_numeric_settings_inlined() {
        let mut template = serde_json::to_value(stack::template()).unwrap();
        let values: BTreeMap<String, String> = [("StreamBatchSize", "100"), ("LambdaMemorySize", "256")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let inlined = inline_number_parameters(&mut template, &values);
        assert!(inlined.contains("StreamBatchSize") && inlined.contains("LambdaMemorySize"));
        assert_eq!(
            template["Resources"][stack::logical::STREAM_MAPPING]["Properties"]["BatchSize"],
            json!(100)
        );
        assert_eq!(
            template["Resources"][stack::logical::API_FUNCTION]["Properties"]["MemorySize"],
            json!(256)
        );
    }
}
