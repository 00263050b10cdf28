//! The policy `docs/api.md` gives API callers is the one the stack model
//! generates (`stack::policies::caller_policy`), so what a reader copies is
//! what the tests check: `lambda:InvokeFunctionUrl` and
//! `lambda:InvokeFunction` (both needed by new function URLs since October
//! 2025, <https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html>),
//! the second only through the function URL.

use std::path::Path;

use serde_json::Value;
use stack::access::OperatorScope;
use stack::policies::caller_policy;

/// The first fenced `json` block of `text` that is an IAM policy.
fn documented_policies(text: &str) -> Vec<Value> {
    text.split("```json\n")
        .skip(1)
        .filter_map(|block| block.split_once("\n```").map(|(json, _)| json))
        .filter_map(|json| serde_json::from_str::<Value>(json).ok())
        .filter(|v| v.get("Statement").is_some())
        .collect()
}

#[test]
fn the_caller_policy_in_docs_api_md_is_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let placeholders = OperatorScope {
        partition: "aws".to_owned(),
        region: "<region>".to_owned(),
        account: "<account>".to_owned(),
        stack_name: "<stack>".to_owned(),
        name_prefix: "<NamePrefix>".to_owned(),
        artifacts_bucket: String::new(),
    };
    let documented = documented_policies(&text);
    assert_eq!(documented, [caller_policy(&placeholders)], "{}", path.display());
}

#[test]
fn no_documented_caller_grant_lets_the_caller_invoke_directly() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    let text = std::fs::read_to_string(&path).unwrap();
    for policy in documented_policies(&text) {
        for statement in policy["Statement"].as_array().unwrap() {
            let actions = statement["Action"].to_string();
            if actions.contains("lambda:InvokeFunction\"") || actions.contains("lambda:*") {
                assert_eq!(
                    statement["Condition"]["Bool"]["lambda:InvokedViaFunctionUrl"], "true",
                    "{statement}"
                );
            }
        }
    }
}
