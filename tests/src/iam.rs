//! IAM in the emulator tests. The emulator enforces identity policies
//! (`--iam strict`, [`IAM_MODE`]); the reserved `test` identity, which the
//! tests use to set up and inspect, bypasses them, so whatever stands for a
//! part of the kit runs with that part's credentials instead: each deployed
//! function with its own execution role ([`function_sdk_config`], the same
//! [`esm_runner::FunctionRoles`] the local runner hands the real binaries),
//! and `counterctl`'s operator commands with an operator role whose policy
//! is [`operator_policy`] ([`operator_credentials`]).
//!
//! What fakecloud 0.51.0 enforces, read from its source (`localstack/README.md`,
//! "What fakecloud 0.51.0 enforces", has the details): DynamoDB and its streams, SQS,
//! S3, SNS, KMS, Lambda, IAM/STS and Scheduler; not CloudFormation,
//! CloudWatch or Logs. A denial answers `AccessDeniedException` naming the
//! principal, action and resource, and is logged by the emulator; the
//! harness fails the test on any logged denial ([`crate::Emulator`]).

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
use serde_json::json;

/// The emulator's IAM mode in every test.
pub const IAM_MODE: &str = "strict";

/// `base` (the emulator, or a fault proxy in front of it) with the
/// credentials of the deployed `function`'s own execution role, obtained
/// by `base`'s caller (the `test` identity) as the local runner does.
/// Panics, naming the function and role, when they cannot be obtained.
pub async fn function_sdk_config(base: &SdkConfig, function: &str) -> SdkConfig {
    let credentials = esm_runner::FunctionRoles::new(base)
        .credentials(function)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    base.to_builder()
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .build()
}

/// The stack an operator policy is for, and the policy itself: the one
/// `counterctl policy operator` prints, generated from the stack model
/// (`stack::access`), so the documented policy is the tested one.
pub use stack::access::OperatorScope;

/// The operator policy the tests' operator role gets: exactly the one
/// `counterctl policy operator` prints (`stack::policies::operator_policy`),
/// plus one statement for where fakecloud 0.51.0 authorizes differently
/// from AWS, each named here so that it cannot hide a missing grant:
///
/// * it authorizes SQS's batch calls as actions of their own
///   (`sqs:SendMessageBatch`, ...); on AWS they need the single action's
///   permission (`sqs:SendMessage`, ...), which the generated policy grants
///   on the same queues;
/// * it authorizes `lambda:GetEventSourceMapping` and `lambda:ListTags` on
///   `*`; on AWS they are authorized on the mapping's and the function's
///   ARN, which the generated policy names.
pub fn operator_policy(scope: &OperatorScope) -> serde_json::Value {
    let mut policy = stack::policies::operator_policy(scope);
    let queues: Vec<String> = ["dlq1", "dlq2"]
        .iter()
        .map(|q| {
            format!(
                "arn:aws:sqs:{}:{}:{}-{q}",
                scope.region, scope.account, scope.name_prefix
            )
        })
        .collect();
    let shim = [
        json!({
            "Sid": "EmulatorSqsBatchActions",
            "Effect": "Allow",
            "Action": ["sqs:SendMessageBatch", "sqs:DeleteMessageBatch", "sqs:ChangeMessageVisibilityBatch"],
            "Resource": queues,
        }),
        json!({
            "Sid": "EmulatorLambdaReadsOnAnything",
            "Effect": "Allow",
            "Action": ["lambda:GetEventSourceMapping", "lambda:ListTags"],
            "Resource": ["*"],
        }),
    ];
    policy["Statement"]
        .as_array_mut()
        .expect("the generated policy's statements")
        .extend(shim);
    policy
}

/// Temporary credentials of an operator role for `scope`'s stack, created
/// (or updated) by `admin`'s caller with [`operator_policy`] as its only
/// policy, trusting the account.
pub async fn operator_credentials(admin: &SdkConfig, scope: &OperatorScope) -> Credentials {
    let role_name = format!("{}-operator", scope.name_prefix);
    role_credentials(
        admin,
        &scope.account,
        &role_name,
        "/",
        &operator_policy(scope),
        "operator",
    )
    .await
}

/// Temporary credentials (session `session`) of the role `path``name`,
/// created (or updated) by `admin`'s caller with `policy` as its only
/// inline policy, trusting `account`.
pub async fn role_credentials(
    admin: &SdkConfig,
    account: &str,
    name: &str,
    path: &str,
    policy: &serde_json::Value,
    session: &str,
) -> Credentials {
    let iam = aws_sdk_iam::Client::new(admin);
    let trust = json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"AWS": format!("arn:aws:iam::{account}:root")},
            "Action": "sts:AssumeRole",
        }],
    });
    let created = iam
        .create_role()
        .role_name(name)
        .path(path)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await;
    let role_arn = match created {
        Ok(out) => out.role().map(|r| r.arn().to_owned()).expect("the created role"),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_entity_already_exists_exception()) =>
        {
            format!("arn:aws:iam::{account}:role{path}{name}")
        }
        Err(e) => panic!("create the role {name}: {}", aws_sdk_iam::error::DisplayErrorContext(e)),
    };
    iam.put_role_policy()
        .role_name(name)
        .policy_name(session)
        .policy_document(policy.to_string())
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "put the policy on {name}: {}",
                aws_sdk_iam::error::DisplayErrorContext(e)
            )
        });
    let out = aws_sdk_sts::Client::new(admin)
        .assume_role()
        .role_arn(&role_arn)
        .role_session_name(session)
        .send()
        .await
        .unwrap_or_else(|e| panic!("assume {role_arn}: {}", aws_sdk_sts::error::DisplayErrorContext(e)));
    let keys = out.credentials().expect("the role's credentials");
    Credentials::new(
        keys.access_key_id(),
        keys.secret_access_key(),
        Some(keys.session_token().to_owned()),
        None,
        "e2e-role",
    )
}

/// The account the `admin` caller is in.
pub async fn account(admin: &SdkConfig) -> String {
    aws_sdk_sts::Client::new(admin)
        .get_caller_identity()
        .send()
        .await
        .expect("the emulator's account")
        .account()
        .expect("an account id")
        .to_owned()
}
