//! The policies of the principals around a stack, rendered from the
//! access table ([`crate::access`]): the operator's (with or without a
//! CloudFormation service role) and an API caller's. The service role's
//! own policy is [`crate::service_role`], the roles' boundary
//! [`crate::boundary`].

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::access::{Component, OperatorScope, Target, needs};
use crate::resources::iam::Action::{IamPassRole, LambdaInvokeFunction, LambdaInvokeFunctionUrl};
use crate::resources::iam::POLICY_VERSION;

/// The least-privilege IAM policy of the operator (a person or the CI
/// role) running `counterctl` against the stack of `scope`: one statement
/// per target, the actions of every operator call on it. It does not
/// include what CloudFormation creates and deletes with the caller's
/// credentials (tables, functions, roles, queues, ...): grant that
/// separately or give the stack a CloudFormation service role.
pub fn operator_policy(scope: &OperatorScope) -> Value {
    policy_of(&[Component::Operator], scope)
}

/// The read-only policy of a CI job that runs `counterctl limits plan`
/// (and `limits export`) against the stack of `scope` on each pull request:
/// the stack's outputs, the Scan of the overrides and a Query of each
/// changed scope's counters. Nothing it grants writes.
pub fn limits_plan_policy(scope: &OperatorScope) -> Value {
    policy_of(&[Component::LimitsPlanner], scope)
}

/// One statement per target: every action the calls of `components`
/// need there, on the stack of `scope`, with the target's condition. The
/// limits file is left out: its object is a parameter's value (any bucket),
/// which `scope` does not know, and a boundary allowing every object would
/// be no boundary; under a permissions boundary, the administrator adds
/// that one object to it (docs/operations.md).
pub(crate) fn policy_of(components: &[Component], scope: &OperatorScope) -> Value {
    let mut by_target: BTreeMap<Target, BTreeSet<&'static str>> = BTreeMap::new();
    for component in components {
        for (need, _) in needs(*component) {
            by_target.entry(need.on).or_default().insert(need.action.as_str());
        }
    }
    let statements: Vec<Value> = by_target
        .into_iter()
        .filter_map(|(target, actions)| {
            // No ARN: the limits file, left out.
            let arn = scope.arn(target)?;
            let mut statement = json!({
                "Sid": format!("{target:?}"),
                "Effect": "Allow",
                "Action": actions.into_iter().collect::<Vec<_>>(),
                "Resource": [arn],
            });
            if let Some(condition) = target.condition() {
                statement["Condition"] = condition;
            }
            Some(statement)
        })
        .collect();
    json!({"Version": POLICY_VERSION, "Statement": statements})
}

/// The identity policy an API caller (a role or user of the stack's
/// account) needs, and no more. Since October 2025 a new function URL with
/// `AWS_IAM` auth requires both `lambda:InvokeFunctionUrl` and
/// `lambda:InvokeFunction` (Lambda developer guide, "Control access to
/// Lambda function URLs":
/// <https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html>); the
/// second only under `lambda:InvokedViaFunctionUrl`, so the caller cannot
/// `Invoke` the function directly with an event it wrote, naming another
/// principal as the function URL's caller (the api's scope check trusts
/// that name: `handlers/api/src/scope_auth.rs`).
pub fn caller_policy(scope: &OperatorScope) -> Value {
    // The api function, as `OperatorScope` names the stack's functions.
    let OperatorScope {
        partition: p,
        region: r,
        account: a,
        name_prefix: prefix,
        ..
    } = scope;
    let function = format!("arn:{p}:lambda:{r}:{a}:function:{prefix}-api");
    json!({
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": "CallTheFunctionUrl",
                "Effect": "Allow",
                "Action": [LambdaInvokeFunctionUrl.as_str()],
                "Resource": [function],
                "Condition": {"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}},
            },
            {
                "Sid": "InvokeOnlyThroughTheFunctionUrl",
                "Effect": "Allow",
                "Action": [LambdaInvokeFunction.as_str()],
                "Resource": [function],
                // Only requests through the function URL.
                "Condition": {"Bool": {"lambda:InvokedViaFunctionUrl": "true"}},
            },
        ],
    })
}

/// The principal that may use the CloudFormation service role.
pub const CLOUDFORMATION_SERVICE: &str = "cloudformation.amazonaws.com";

/// [`operator_policy`] for an operator who deploys through a CloudFormation
/// service role (`counterctl deploy --role-arn`): the same, plus
/// `iam:PassRole` on that one role, and only to CloudFormation
/// (`iam:PassedToService`). CloudFormation then creates, updates and deletes
/// the stack's resources with the role's credentials, not the operator's
/// ("AWS CloudFormation service role":
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-iam-servicerole.html>).
pub fn operator_policy_with_service_role(scope: &OperatorScope, service_role_arn: &str) -> Value {
    let mut policy = operator_policy(scope);
    policy["Statement"].as_array_mut().expect("statements").push(json!({
        "Sid": "PassTheServiceRoleToCloudFormation",
        "Effect": "Allow",
        "Action": [IamPassRole.as_str()],
        "Resource": [service_role_arn],
        "Condition": {"StringEquals": {"iam:PassedToService": CLOUDFORMATION_SERVICE}},
    }));
    policy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> OperatorScope {
        OperatorScope::example()
    }

    #[test]
    fn the_operator_policy_names_only_the_stacks_resources_and_no_wildcard_action() {
        let policy = operator_policy(&scope());
        let statements = policy["Statement"].as_array().unwrap();
        assert!(!statements.is_empty());
        for statement in statements {
            assert_eq!(statement["Effect"], "Allow");
            for action in statement["Action"].as_array().unwrap() {
                assert!(!action.as_str().unwrap().contains('*'), "{statement}");
            }
            for resource in statement["Resource"].as_array().unwrap() {
                let resource = resource.as_str().unwrap();
                if resource == "*" {
                    // Only actions without resource-level permissions.
                    assert_eq!(
                        statement["Action"],
                        json!(["lambda:ListEventSourceMappings"]),
                        "{statement}"
                    );
                    continue;
                }
                assert!(
                    resource.contains(":hc-")
                        || resource.contains("/hc-")
                        || resource.contains(":::hc-")
                        || resource.contains("stack/hybrid-counter/")
                        || resource.contains(":::hybrid-counter-artifacts-123456789012-eu-west-1")
                        || resource.ends_with(":event-source-mapping:*"),
                    "{resource} is not one of the stack's resources"
                );
                assert!(resource.starts_with("arn:aws:"), "{resource}");
            }
        }
    }

    #[test]
    fn a_caller_may_invoke_the_api_function_only_through_its_url() {
        let policy = caller_policy(&scope());
        let statements = policy["Statement"].as_array().unwrap();
        let function = "arn:aws:lambda:eu-west-1:123456789012:function:hc-api";
        let actions: Vec<&Value> = statements
            .iter()
            .flat_map(|s| s["Action"].as_array().unwrap())
            .collect();
        assert_eq!(
            actions,
            [&json!("lambda:InvokeFunctionUrl"), &json!("lambda:InvokeFunction")]
        );
        for statement in statements {
            assert_eq!(statement["Effect"], "Allow");
            assert_eq!(statement["Resource"], json!([function]), "{statement}");
            if statement["Action"] == json!(["lambda:InvokeFunction"]) {
                // Without it the caller could Invoke directly, with an event naming anyone.
                assert_eq!(
                    statement["Condition"],
                    json!({"Bool": {"lambda:InvokedViaFunctionUrl": "true"}}),
                    "{statement}"
                );
            }
        }
    }

    #[test]
    fn with_a_service_role_the_operator_may_pass_only_that_role_only_to_cloudformation() {
        let role = "arn:aws:iam::123456789012:role/hc-cloudformation";
        let policy = operator_policy_with_service_role(&scope(), role);
        let passes: Vec<&Value> = policy["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["Action"].as_array().unwrap().contains(&json!("iam:PassRole")))
            .collect();
        assert_eq!(passes.len(), 1);
        assert_eq!(passes[0]["Resource"], json!([role]));
        assert_eq!(
            passes[0]["Condition"],
            json!({"StringEquals": {"iam:PassedToService": "cloudformation.amazonaws.com"}})
        );
        // Nothing else changes: the rest is the operator policy itself.
        let mut without = policy.clone();
        without["Statement"].as_array_mut().unwrap().pop();
        assert_eq!(without, operator_policy(&scope()));
    }
}
