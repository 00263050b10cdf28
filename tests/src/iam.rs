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
use aws_sdk_dynamodb::config::Credentials;
use serde_json::{Value, json};

/// The emulator's IAM mode in every test.
pub const IAM_MODE: &str = "strict";

/// `base` (the emulator, or a fault proxy in front of it) with the
/// credentials of the deployed `function`'s own execution role, obtained
/// by `base`'s caller (the `test` identity) as the local runner does.
/// Panics, naming the function and role, when they cannot be obtained.
pub async fn function_sdk_config(base: &SdkConfig, function: &str) -> SdkConfig {
    esm_runner::FunctionRoles::new(base)
        .sdk_config(base, function)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The stack an operator policy is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperatorScope {
    pub region: String,
    pub account: String,
    pub stack_name: String,
    /// The stack's `NamePrefix`.
    pub name_prefix: String,
}

/// The least-privilege policy of the operator (a person or CI) running
/// `counterctl` against the stack of `scope`: the tests' operator role
/// has exactly this.
///
/// The one place to swap when branch `iam` lands: its
/// `hybrid_counter_stack::access::operator_policy` generates this policy
/// from the stack model. Until then, this is the list `localstack/README.md`
/// documents ("Least privilege for that role"), spelled out per action for
/// the commands an operator runs: reads and writes on the two tables,
/// reads of the stream, the queues, the failed-batch bucket and the
/// functions' configuration, every statement scoped to the stack's prefix.
pub fn operator_policy(scope: &OperatorScope) -> Value {
    let OperatorScope {
        region: r,
        account: a,
        stack_name,
        name_prefix: p,
    } = scope;
    let table = |name: &str| format!("arn:aws:dynamodb:{r}:{a}:table/{p}-{name}");
    let queue = |name: &str| format!("arn:aws:sqs:{r}:{a}:{p}-{name}");
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Tables",
                "Effect": "Allow",
                "Action": [
                    "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                    "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem", "dynamodb:Query", "dynamodb:Scan",
                    "dynamodb:DescribeTable",
                ],
                "Resource": [table("resources"), table("counters")],
            },
            {
                "Sid": "Stream",
                "Effect": "Allow",
                "Action": ["dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"],
                "Resource": [format!("{}/stream/*", table("resources"))],
            },
            {
                "Sid": "Queues",
                "Effect": "Allow",
                "Action": [
                    "sqs:SendMessage", "sqs:SendMessageBatch", "sqs:ReceiveMessage", "sqs:DeleteMessage",
                    "sqs:DeleteMessageBatch", "sqs:ChangeMessageVisibility", "sqs:ChangeMessageVisibilityBatch",
                    "sqs:GetQueueAttributes", "sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks",
                ],
                "Resource": [queue("dlq1"), queue("dlq2")],
            },
            {
                "Sid": "FailedBatches",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [
                    format!("arn:aws:s3:::{p}-failed-batch-*"),
                    format!("arn:aws:s3:::{p}-failed-batch-*/*"),
                ],
            },
            {
                "Sid": "Functions",
                "Effect": "Allow",
                "Action": ["lambda:GetFunction", "lambda:GetFunctionConfiguration", "lambda:GetFunctionUrlConfig"],
                "Resource": [format!("arn:aws:lambda:{r}:{a}:function:{p}-*")],
            },
            {
                "Sid": "Mappings",
                "Effect": "Allow",
                // The emulator authorizes ListTags on `*` (by function name).
                "Action": ["lambda:ListEventSourceMappings", "lambda:GetEventSourceMapping", "lambda:ListTags"],
                "Resource": ["*"],
            },
            {
                "Sid": "Stack",
                "Effect": "Allow",
                "Action": ["cloudformation:DescribeStacks", "cloudformation:ListStackResources"],
                "Resource": [format!("arn:aws:cloudformation:{r}:{a}:stack/{stack_name}/*")],
            },
            {
                "Sid": "Alarms",
                "Effect": "Allow",
                "Action": ["cloudwatch:DescribeAlarms"],
                "Resource": [format!("arn:aws:cloudwatch:{r}:{a}:alarm:{p}-*")],
            },
        ],
    })
}

/// Temporary credentials of an operator role for `scope`'s stack, created
/// (or updated) by `admin`'s caller with [`operator_policy`] as its only
/// policy, trusting the account.
pub async fn operator_credentials(admin: &SdkConfig, scope: &OperatorScope) -> Credentials {
    let iam = aws_sdk_iam::Client::new(admin);
    let role_name = format!("{}-operator", scope.name_prefix);
    let trust = json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"AWS": format!("arn:aws:iam::{}:root", scope.account)},
            "Action": "sts:AssumeRole",
        }],
    });
    let created = iam
        .create_role()
        .role_name(&role_name)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await;
    let role_arn = match created {
        Ok(out) => out.role().map(|r| r.arn().to_owned()).expect("the created role"),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_entity_already_exists_exception()) =>
        {
            format!("arn:aws:iam::{}:role/{role_name}", scope.account)
        }
        Err(e) => panic!(
            "create the operator role {role_name}: {}",
            aws_sdk_iam::error::DisplayErrorContext(e)
        ),
    };
    iam.put_role_policy()
        .role_name(&role_name)
        .policy_name("operator")
        .policy_document(operator_policy(scope).to_string())
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "put the operator policy on {role_name}: {}",
                aws_sdk_iam::error::DisplayErrorContext(e)
            )
        });
    let out = aws_sdk_sts::Client::new(admin)
        .assume_role()
        .role_arn(&role_arn)
        .role_session_name("operator")
        .send()
        .await
        .unwrap_or_else(|e| panic!("assume {role_arn}: {}", aws_sdk_sts::error::DisplayErrorContext(e)));
    let keys = out.credentials().expect("the operator's credentials");
    Credentials::new(
        keys.access_key_id(),
        keys.secret_access_key(),
        Some(keys.session_token().to_owned()),
        None,
        "e2e-operator",
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
