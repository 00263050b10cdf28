//! The CloudFormation service role's actions (`stack::service_role`)
//! against the resource schemas CloudFormation publishes, as cfn-lint ships
//! them (`make tools`): for each resource type of the template, every
//! action its create, read, update and delete handlers may call is granted
//! or left out with a reason, and nothing else is granted. A type added to
//! the template, or an action added to a handler, fails this test until the
//! role says what to do with it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use stack::service_role::{HANDLER_ACTIONS, not_used};

/// cfn-lint's copy of the CloudFormation resource schemas (us-east-1).
fn schemas() -> PathBuf {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/lib");
    let python = std::fs::read_dir(&lib)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make tools`", lib.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|p| p.join("site-packages/cfnlint").is_dir())
        .unwrap_or_else(|| panic!("no cfnlint under {}; run `make tools`", lib.display()));
    python.join("site-packages/cfnlint/data/schemas")
}

/// Every action the handlers of `resource_type` may call (not `list`).
fn handler_actions(schemas: &Path, resource_type: &str) -> BTreeSet<String> {
    let providers: Value =
        serde_json::from_str(&std::fs::read_to_string(schemas.join("providers/us-east-1.json")).unwrap()).unwrap();
    let file = providers[resource_type]
        .as_str()
        .unwrap_or_else(|| panic!("no schema for {resource_type}"));
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schemas.join(format!("resources/{file}.json"))).unwrap())
            .unwrap();
    ["create", "read", "update", "delete"]
        .iter()
        .flat_map(|h| {
            schema["handlers"][h]["permissions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_service_role_grants_each_resource_types_handler_actions_or_says_why_not() {
    let schemas = schemas();
    let rendered = serde_json::to_value(stack::template()).unwrap();
    let used: BTreeSet<String> = rendered["Resources"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| r["Type"].as_str().unwrap().to_owned())
        .collect();
    let granted: BTreeMap<&str, BTreeSet<&str>> = HANDLER_ACTIONS
        .iter()
        .map(|(kind, actions)| (*kind, actions.iter().copied().collect()))
        .collect();
    assert_eq!(
        granted.keys().map(|k| k.to_string()).collect::<BTreeSet<_>>(),
        used,
        "the service role's types differ from the template's"
    );
    for kind in &used {
        let needed = handler_actions(&schemas, kind);
        for action in &needed {
            assert!(
                granted[kind.as_str()].contains(action.as_str()) || not_used(kind, action),
                "{kind}: {action} is neither granted nor left out with a reason"
            );
        }
        for action in &granted[kind.as_str()] {
            assert!(
                needed.contains(*action),
                "{kind}: {action} is granted but no handler calls it"
            );
            assert!(!not_used(kind, action), "{kind}: {action} is granted and left out");
        }
    }
}
