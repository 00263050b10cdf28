//! What the emulator's IAM enforcement does, as the other tests rely on it:
//! a role's policy is evaluated with its conditions, a denial names the
//! action and resource and is reported by the harness, and a role that
//! trusts only Lambda cannot be assumed locally.

use aws_sdk_dynamodb::types::AttributeValue;
use e2e::Kit;
use serde_json::json;

const ACCOUNT: &str = "123456789012";

/// Creates `name`, trusting the account, with `policy` as its only policy;
/// returns its ARN.
async fn role(iam: &aws_sdk_iam::Client, name: &str, trust: serde_json::Value, policy: serde_json::Value) -> String {
    let arn = iam
        .create_role()
        .role_name(name)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .expect("create role")
        .role()
        .map(|r| r.arn().to_owned())
        .expect("role arn");
    iam.put_role_policy()
        .role_name(name)
        .policy_name("only")
        .policy_document(policy.to_string())
        .send()
        .await
        .expect("put role policy");
    arn
}

fn trusting(principal: serde_json::Value) -> serde_json::Value {
    json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole",
    }]})
}

#[tokio::test]
async fn a_leading_keys_condition_is_evaluated_and_a_denial_names_the_action_and_resource() {
    let kit = Kit::start(10).await;
    let sdk = kit.emulator.sdk_config().await;
    let table = format!(
        "arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/{}",
        kit.config.resources_table
    );
    let arn = role(
        &aws_sdk_iam::Client::new(&sdk),
        "one-partition",
        trusting(json!({"AWS": format!("arn:aws:iam::{ACCOUNT}:root")})),
        json!({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow",
            "Action": "dynamodb:GetItem",
            "Resource": table,
            "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["mine"]}},
        }]}),
    )
    .await;
    let credentials = aws_sdk_sts::Client::new(&sdk)
        .assume_role()
        .role_arn(&arn)
        .role_session_name("test")
        .send()
        .await
        .expect("the account may assume it")
        .credentials
        .expect("credentials");
    let as_role = sdk
        .to_builder()
        .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(
            aws_sdk_dynamodb::config::Credentials::new(
                credentials.access_key_id(),
                credentials.secret_access_key(),
                Some(credentials.session_token().to_owned()),
                None,
                "test",
            ),
        ))
        .build();
    let get = |scope: &str| {
        aws_sdk_dynamodb::Client::new(&as_role)
            .get_item()
            .table_name(&kit.config.resources_table)
            .key("scope", AttributeValue::S(scope.to_owned()))
            .key("id", AttributeValue::S("x".to_owned()))
            .send()
    };
    get("mine").await.expect("its own partition is allowed");
    let denied = get("theirs").await.expect_err("another partition is denied");
    let message = aws_sdk_dynamodb::error::DisplayErrorContext(&denied).to_string();
    assert!(
        message.contains("AccessDeniedException") && message.contains("dynamodb:GetItem") && message.contains(&table),
        "{message}"
    );
    let reported = kit.emulator.take_denials();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        reported[0].contains("action=dynamodb:GetItem") && reported[0].contains(&format!("resource={table}")),
        "{reported:?}"
    );
}

#[tokio::test]
async fn a_role_trusting_only_lambda_cannot_be_assumed_by_the_account() {
    let kit = Kit::start(10).await;
    let sdk = kit.emulator.sdk_config().await;
    let arn = role(
        &aws_sdk_iam::Client::new(&sdk),
        "lambda-only",
        trusting(json!({"Service": "lambda.amazonaws.com"})),
        json!({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": "*",
        }]}),
    )
    .await;
    let refused = aws_sdk_sts::Client::new(&sdk)
        .assume_role()
        .role_arn(&arn)
        .role_session_name("test")
        .send()
        .await
        .expect_err("only Lambda may assume it");
    let message = aws_sdk_sts::error::DisplayErrorContext(&refused).to_string();
    assert!(
        message.contains("AccessDenied") && message.contains("sts:AssumeRole"),
        "{message}"
    );
}
