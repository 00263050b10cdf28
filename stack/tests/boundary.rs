//! The permissions boundary (`stack::boundary`): every role of the
//! template carries it when given, and it allows every action any role
//! grants, so a boundary never refuses what a function needs.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use stack::access::OperatorScope;
use stack::boundary::{BOUNDARY_SET, boundary_policy};
use stack::params;

fn scope() -> OperatorScope {
    OperatorScope {
        partition: "aws".to_owned(),
        region: "eu-west-1".to_owned(),
        account: "123456789012".to_owned(),
        stack_name: "orders".to_owned(),
        name_prefix: "orders".to_owned(),
        artifacts_bucket: "orders-artifacts".to_owned(),
    }
}

fn roles(rendered: &Value) -> Vec<(&String, &Value)> {
    rendered["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::IAM::Role")
        .collect()
}

#[test]
fn every_role_of_the_template_carries_the_boundary_when_given() {
    let rendered = serde_json::to_value(stack::template()).unwrap();
    let roles = roles(&rendered);
    assert_eq!(roles.len(), 4);
    for (id, role) in roles {
        assert_eq!(
            role["Properties"]["PermissionsBoundary"],
            json!({"Fn::If": [BOUNDARY_SET, {"Ref": params::ROLE_PERMISSIONS_BOUNDARY_ARN}, {"Ref": "AWS::NoValue"}]}),
            "{id}"
        );
    }
    let parameter = &rendered["Parameters"][params::ROLE_PERMISSIONS_BOUNDARY_ARN];
    assert_eq!(parameter["Default"], "");
    let pattern = regex::Regex::new(parameter["AllowedPattern"].as_str().unwrap()).unwrap();
    for ok in [
        "",
        "arn:aws:iam::123456789012:policy/hck-boundary-orders",
        "arn:aws-cn:iam::123456789012:policy/a/b",
    ] {
        assert!(pattern.is_match(ok), "{ok}");
    }
    for refused in [
        "arn:aws:iam::123456789012:role/x",
        "arn:aws:iam::aws:policy/AdministratorAccess",
        "*",
    ] {
        assert!(!pattern.is_match(refused), "{refused}");
    }
}

#[test]
fn the_boundary_allows_every_action_the_roles_grant_and_nothing_else() {
    let rendered = serde_json::to_value(stack::template()).unwrap();
    let mut granted = BTreeSet::new();
    for (_, role) in roles(&rendered) {
        for policy in role["Properties"]["Policies"].as_array().unwrap() {
            let policy = policy.get("Fn::If").map(|f| &f[1]).unwrap_or(policy);
            for statement in policy["PolicyDocument"]["Statement"].as_array().unwrap() {
                if statement["Effect"] == "Allow" {
                    for action in statement["Action"].as_array().unwrap() {
                        granted.insert(action.as_str().unwrap().to_owned());
                    }
                }
            }
        }
    }
    let boundary = boundary_policy(&scope());
    let mut allowed = BTreeSet::new();
    for statement in boundary["Statement"].as_array().unwrap() {
        assert_eq!(statement["Effect"], "Allow");
        for resource in statement["Resource"].as_array().unwrap() {
            assert_ne!(resource, "*", "{statement}");
        }
        for action in statement["Action"].as_array().unwrap() {
            allowed.insert(action.as_str().unwrap().to_owned());
        }
    }
    assert_eq!(granted, allowed);
}
