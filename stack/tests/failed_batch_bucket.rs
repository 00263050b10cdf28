//! Who can read or remove a kept failed batch, by evaluating the
//! template's bucket policy for a request the way IAM does for a principal
//! of the account holding `s3:*` on `*`: an explicit `Deny` whose action,
//! resource and every condition match refuses the request, whatever the
//! principal's own policy allows (IAM policy evaluation logic:
//! <https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html>).
//! The emulators do not enforce bucket policies on versioned reads, so this
//! is a static check of the policy document itself.

use serde_json::{Value, json};
use stack::failed_batches::{HAS_OPERATOR_PRINCIPAL, OBJECT_READS_AND_DELETES};
use stack::{logical, params};

const BUCKET_ARN: &str = "arn:aws:s3:::hc-failed-batch-0a1b2c3d";
const REPROCESSOR_ROLE_ARN: &str = "arn:aws:iam::123456789012:role/hc-DlqReprocessorRole-X";
const REPROCESSOR_ROLE_ID: &str = "AROAREPROCESSOR";
const STREAM_ROLE_ID: &str = "AROASTREAMCOUNTER";
const OPERATOR: &str = "arn:aws:iam::123456789012:role/ops";

/// One request: who (as `aws:PrincipalArn` and `aws:userid` name it) does what.
struct Request<'a> {
    action: &'a str,
    principal_arn: &'a str,
    userid: String,
}

/// The deployed values the policy's expressions resolve to.
fn resolve(expr: &Value, operator_given: bool) -> Value {
    match expr {
        Value::String(_) => expr.clone(),
        Value::Array(items) => Value::Array(items.iter().map(|i| resolve(i, operator_given)).collect()),
        Value::Object(map) if map.len() == 1 => {
            let (key, arg) = map.iter().next().unwrap();
            match key.as_str() {
                "Ref" => match arg.as_str().unwrap() {
                    p if p == params::OPERATOR_PRINCIPAL_ARN => json!(if operator_given { OPERATOR } else { "" }),
                    other => panic!("unexpected Ref {other}"),
                },
                "Fn::GetAtt" => match (arg[0].as_str().unwrap(), arg[1].as_str().unwrap()) {
                    (id, "Arn") if id == logical::FAILED_BATCH_BUCKET => json!(BUCKET_ARN),
                    (id, "Arn") if id == logical::DLQ_REPROCESSOR_ROLE => json!(REPROCESSOR_ROLE_ARN),
                    other => panic!("unexpected GetAtt {other:?}"),
                },
                "Fn::Sub" => json!(
                    arg.as_str()
                        .unwrap()
                        .replace(&format!("${{{}.Arn}}", logical::FAILED_BATCH_BUCKET), BUCKET_ARN)
                        .replace(
                            &format!("${{{}.RoleId}}", logical::DLQ_REPROCESSOR_ROLE),
                            REPROCESSOR_ROLE_ID
                        )
                        .replace(&format!("${{{}.RoleId}}", logical::STREAM_COUNTER_ROLE), STREAM_ROLE_ID)
                ),
                "Fn::If" => {
                    assert_eq!(arg[0], HAS_OPERATOR_PRINCIPAL, "unexpected condition");
                    resolve(&arg[if operator_given { 1 } else { 2 }], operator_given)
                }
                other => panic!("unexpected intrinsic {other}"),
            }
        }
        other => panic!("unexpected expression {other}"),
    }
}

/// IAM's `*` wildcard (the only one the policy uses).
fn like(pattern: &str, value: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == value,
        Some((head, tail)) => value.starts_with(head) && value[head.len()..].ends_with(tail),
    }
}

fn as_list(value: Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.into_iter().map(|i| i.as_str().unwrap().to_owned()).collect(),
        Value::String(s) => vec![s],
        other => panic!("not a string or list: {other}"),
    }
}

/// Whether one condition operator's block holds for the request.
fn holds(operator: &str, key: &str, values: Vec<String>, request: &Request) -> bool {
    let actual = match key {
        "aws:userid" => request.userid.clone(),
        "aws:PrincipalArn" => request.principal_arn.to_owned(),
        "aws:SecureTransport" => "true".to_owned(),
        other => panic!("unexpected condition key {other}"),
    };
    match operator {
        "StringNotLike" => !values.iter().any(|v| like(v, &actual)),
        "ArnNotEquals" => !values.iter().any(|v| v == &actual),
        "Bool" => values.iter().any(|v| v == &actual),
        other => panic!("unexpected operator {other}"),
    }
}

/// Whether the bucket policy explicitly denies `request` on an object of the bucket.
fn denied(policy: &Value, request: &Request, operator_given: bool) -> bool {
    let object = format!("{BUCKET_ARN}/aws/lambda/uuid/shard/batch");
    policy["Statement"].as_array().unwrap().iter().any(|statement| {
        if statement["Effect"] != "Deny" {
            return false;
        }
        let actions = as_list(statement["Action"].clone());
        let action_matches = actions.iter().any(|a| like(a, request.action));
        let resources = as_list(resolve(&statement["Resource"], operator_given));
        let resource_matches = resources.iter().any(|r| like(r, &object));
        let conditions = statement["Condition"].as_object().cloned().unwrap_or_default();
        action_matches
            && resource_matches
            && conditions.iter().all(|(operator, block)| {
                block
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(key, values)| holds(operator, key, as_list(resolve(values, operator_given)), request))
            })
    })
}

fn bucket_policy() -> Value {
    let rendered = serde_json::to_value(stack::template()).unwrap();
    rendered["Resources"][logical::FAILED_BATCH_BUCKET_POLICY]["Properties"]["PolicyDocument"].clone()
}

/// The object actions that read a batch's records or remove one.
const READ_OR_REMOVE: [&str; 5] = [
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:GetObjectVersionForReplication",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
];

#[test]
fn a_principal_with_s3_star_cannot_read_a_failed_batch_by_version_nor_delete_it() {
    let policy = bucket_policy();
    let reader = "arn:aws:iam::123456789012:role/ReadOnlyAccessEngineer";
    for operator_given in [false, true] {
        for action in READ_OR_REMOVE {
            let request = Request {
                action,
                principal_arn: reader,
                userid: "AROAREADONLY:alice".to_owned(),
            };
            assert!(
                denied(&policy, &request, operator_given),
                "{action} by {reader} is not denied (operator given: {operator_given})"
            );
        }
    }
}

#[test]
fn the_reprocessor_and_the_operator_are_not_denied_reading_or_removing() {
    let policy = bucket_policy();
    for action in READ_OR_REMOVE {
        let reprocessor = Request {
            action,
            principal_arn: REPROCESSOR_ROLE_ARN,
            userid: format!("{REPROCESSOR_ROLE_ID}:hc-dlq-reprocessor"),
        };
        assert!(!denied(&policy, &reprocessor, false), "{action} by the reprocessor");
        let operator = Request {
            action,
            principal_arn: OPERATOR,
            userid: "AROAOPS:bob".to_owned(),
        };
        assert!(!denied(&policy, &operator, true), "{action} by the operator");
        assert!(
            denied(&policy, &operator, false),
            "{action} by a principal not named operator"
        );
    }
}

#[test]
fn the_denied_actions_are_every_read_and_delete_of_an_object() {
    let names: Vec<&str> = OBJECT_READS_AND_DELETES.iter().map(|a| a.as_str()).collect();
    assert_eq!(names, READ_OR_REMOVE);
}
