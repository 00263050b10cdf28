//! The CloudFormation service role a stack can be deployed with
//! (`counterctl deploy --role-arn`): CloudFormation then creates, updates
//! and deletes the stack's resources with this role's credentials, so the
//! person or CI principal running `counterctl` needs only its own calls
//! ([`crate::policies::operator_policy`]) and `iam:PassRole` on this one role
//! ("AWS CloudFormation service role":
//! <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-iam-servicerole.html>).
//!
//! [`HANDLER_ACTIONS`] lists, per resource type the template uses, the IAM
//! actions CloudFormation's resource handlers may call for it (the
//! `handlers` permissions of each type's resource schema), minus those of
//! features the kit's resources never set (`stack/tests/service_role.rs`
//! lists them with their reasons and compares this list with the schemas
//! cfn-lint ships, so a type added to the template without its actions
//! fails it). Each action is granted on the kit's own names
//! (`<NamePrefix>-…`, the roles CloudFormation names `<stack>-<logical
//! id>-…`) where IAM lets a grant name the resource.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::access::{Component, OperatorScope};
use crate::resources::iam::POLICY_VERSION;

/// The IAM actions CloudFormation may call to create, read, update and
/// delete each resource type of the template.
pub const HANDLER_ACTIONS: &[(&str, &[&str])] = &[
    (
        "AWS::DynamoDB::Table",
        &[
            "dynamodb:BatchWriteItem",
            "dynamodb:CreateTable",
            "dynamodb:DeleteItem",
            "dynamodb:DeleteResourcePolicy",
            "dynamodb:DeleteTable",
            "dynamodb:DescribeContinuousBackups",
            "dynamodb:DescribeContributorInsights",
            "dynamodb:DescribeTable",
            "dynamodb:DescribeTimeToLive",
            "dynamodb:GetItem",
            "dynamodb:GetResourcePolicy",
            "dynamodb:ListTagsOfResource",
            "dynamodb:PutItem",
            "dynamodb:PutResourcePolicy",
            "dynamodb:Query",
            "dynamodb:Scan",
            "dynamodb:TagResource",
            "dynamodb:UntagResource",
            "dynamodb:UpdateContinuousBackups",
            "dynamodb:UpdateContributorInsights",
            "dynamodb:UpdateItem",
            "dynamodb:UpdateTable",
            "dynamodb:UpdateTimeToLive",
            "iam:CreateServiceLinkedRole",
        ],
    ),
    (
        "AWS::SQS::Queue",
        &[
            "sqs:CreateQueue",
            "sqs:DeleteQueue",
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
            "sqs:ListQueueTags",
            "sqs:SetQueueAttributes",
            "sqs:TagQueue",
            "sqs:UntagQueue",
        ],
    ),
    ("AWS::SQS::QueuePolicy", &["sqs:SetQueueAttributes"]),
    (
        "AWS::Logs::LogGroup",
        &[
            "logs:CreateLogGroup",
            "logs:DeleteLogGroup",
            "logs:DeleteRetentionPolicy",
            "logs:DescribeLogGroups",
            "logs:ListTagsForResource",
            "logs:PutRetentionPolicy",
            "logs:TagResource",
            "logs:UntagResource",
        ],
    ),
    (
        "AWS::IAM::Role",
        &[
            "iam:CreateRole",
            "iam:DeleteRole",
            "iam:DeleteRolePolicy",
            "iam:GetRole",
            "iam:GetRolePolicy",
            "iam:ListAttachedRolePolicies",
            "iam:ListRolePolicies",
            "iam:PutRolePermissionsBoundary",
            "iam:PutRolePolicy",
            "iam:TagRole",
            "iam:UntagRole",
            "iam:UpdateAssumeRolePolicy",
            "iam:UpdateRole",
            "iam:UpdateRoleDescription",
        ],
    ),
    (
        "AWS::Lambda::Function",
        &[
            "iam:PassRole",
            "lambda:CreateFunction",
            "lambda:DeleteFunction",
            "lambda:DeleteFunctionConcurrency",
            "lambda:GetFunction",
            "lambda:GetFunctionCodeSigningConfig",
            "lambda:GetFunctionRecursionConfig",
            "lambda:GetFunctionScalingConfig",
            "lambda:GetRuntimeManagementConfig",
            "lambda:PublishVersion",
            "lambda:PutFunctionConcurrency",
            "lambda:PutFunctionRecursionConfig",
            "lambda:PutRuntimeManagementConfig",
            "lambda:TagResource",
            "lambda:UntagResource",
            "lambda:UpdateFunctionCode",
            "lambda:UpdateFunctionConfiguration",
            "s3:GetObject",
            "s3:GetObjectVersion",
        ],
    ),
    (
        "AWS::Lambda::EventSourceMapping",
        &[
            "lambda:CreateEventSourceMapping",
            "lambda:DeleteEventSourceMapping",
            "lambda:GetEventSourceMapping",
            "lambda:ListTags",
            "lambda:TagResource",
            "lambda:UntagResource",
            "lambda:UpdateEventSourceMapping",
        ],
    ),
    (
        "AWS::Lambda::Url",
        &[
            "lambda:CreateFunctionUrlConfig",
            "lambda:DeleteFunctionUrlConfig",
            "lambda:GetFunctionUrlConfig",
            "lambda:UpdateFunctionUrlConfig",
        ],
    ),
    (
        "AWS::Lambda::Permission",
        &["lambda:AddPermission", "lambda:GetPolicy", "lambda:RemovePermission"],
    ),
    (
        "AWS::CloudWatch::Alarm",
        &[
            "cloudwatch:DeleteAlarms",
            "cloudwatch:DescribeAlarms",
            "cloudwatch:ListTagsForResource",
            "cloudwatch:PutMetricAlarm",
            "cloudwatch:TagResource",
            "cloudwatch:UntagResource",
        ],
    ),
    (
        "AWS::CloudWatch::Dashboard",
        &[
            "cloudwatch:DeleteDashboards",
            "cloudwatch:GetDashboard",
            "cloudwatch:ListTagsForResource",
            "cloudwatch:PutDashboard",
            "cloudwatch:TagResource",
            "cloudwatch:UntagResource",
        ],
    ),
    (
        "AWS::S3::Bucket",
        &[
            "s3:CreateBucket",
            "s3:DeleteBucket",
            "s3:DeleteBucketLifecycle",
            "s3:GetBucketAcl",
            "s3:GetBucketNotification",
            "s3:GetBucketOwnershipControls",
            "s3:GetBucketPublicAccessBlock",
            "s3:GetBucketTagging",
            "s3:GetBucketVersioning",
            "s3:GetEncryptionConfiguration",
            "s3:GetLifecycleConfiguration",
            "s3:ListBucket",
            "s3:PutBucketNotification",
            "s3:PutBucketOwnershipControls",
            "s3:PutBucketPublicAccessBlock",
            "s3:PutBucketTagging",
            "s3:PutBucketVersioning",
            "s3:PutEncryptionConfiguration",
            "s3:PutLifecycleConfiguration",
        ],
    ),
    (
        "AWS::S3::BucketPolicy",
        &["s3:DeleteBucketPolicy", "s3:GetBucketPolicy", "s3:PutBucketPolicy"],
    ),
    (
        "AWS::Events::Rule",
        &[
            "events:DeleteRule",
            "events:DescribeRule",
            "events:ListTagsForResource",
            "events:ListTargetsByRule",
            "events:PutRule",
            "events:PutTargets",
            "events:RemoveTargets",
            "events:TagResource",
            "events:UntagResource",
        ],
    ),
    (
        "AWS::SNS::Topic",
        &[
            "sns:CreateTopic",
            "sns:DeleteTopic",
            "sns:GetDataProtectionPolicy",
            "sns:GetTopicAttributes",
            "sns:ListSubscriptionsByTopic",
            "sns:ListTagsForResource",
            "sns:PutDataProtectionPolicy",
            "sns:SetTopicAttributes",
            "sns:Subscribe",
            "sns:TagResource",
            "sns:Unsubscribe",
            "sns:UntagResource",
        ],
    ),
    (
        "AWS::SNS::Subscription",
        &[
            "sns:GetSubscriptionAttributes",
            "sns:SetSubscriptionAttributes",
            "sns:Subscribe",
            "sns:Unsubscribe",
        ],
    ),
    (
        "AWS::KMS::Key",
        &[
            "kms:CreateKey",
            "kms:DescribeKey",
            "kms:DisableKey",
            "kms:DisableKeyRotation",
            "kms:EnableKey",
            "kms:EnableKeyRotation",
            "kms:GetKeyPolicy",
            "kms:GetKeyRotationStatus",
            "kms:ListResourceTags",
            "kms:PutKeyPolicy",
            "kms:ScheduleKeyDeletion",
            "kms:TagResource",
            "kms:UntagResource",
            "kms:UpdateKeyDescription",
        ],
    ),
];

/// The tag the template puts on the key it creates (the alarm topic's),
/// valued with the stack's name: the service role administers only keys
/// carrying it with that value (ABAC for AWS KMS:
/// <https://docs.aws.amazon.com/kms/latest/developerguide/abac.html>).
pub const KEY_TAG: &str = "hck:stack";

/// The name the docs give the service role of `stack_name`: outside every
/// pattern of its own policy (`<stack>-<role logical id>-*`), and denied
/// every IAM change besides.
pub fn service_role_name(stack_name: &str) -> String {
    format!("hck-cfn-service-{stack_name}")
}

/// The longest random suffix CloudFormation appends to the names it
/// generates (`<stack>-<logical id>-<suffix>`).
const GENERATED_SUFFIX: usize = 13;
/// IAM's longest role name.
const ROLE_NAME_MAX: usize = 64;

/// The longest stack name whose generated role names keep the whole stack
/// name and logical id: CloudFormation shortens both in a longer one, and
/// the service role's patterns (`<stack>-<logical id>-*`) then match none
/// of the roles ("Resource type: name" in the CloudFormation user guide:
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-name.html>).
pub fn max_stack_name_with_service_role() -> usize {
    let longest = function_roles().map(str::len).max().expect("roles");
    ROLE_NAME_MAX - GENERATED_SUFFIX - longest - 2
}

/// The logical ids of the functions' roles.
fn function_roles() -> impl Iterator<Item = &'static str> {
    Component::FUNCTIONS
        .into_iter()
        .filter_map(|c| c.role_and_log_group().map(|(role, _)| role))
}

/// The IAM actions a role is created or given policies with: each only
/// with the kit's boundary (`iam:PermissionsBoundary`, IAM condition keys:
/// <https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsidentityandaccessmanagementiam.html>).
pub const BOUNDED_ACTIONS: [&str; 4] = [
    "iam:AttachRolePolicy",
    "iam:CreateRole",
    "iam:PutRolePermissionsBoundary",
    "iam:PutRolePolicy",
];

/// Where an action applies, and under which condition: the kit's
/// resources of the action's service, or everything for the actions IAM
/// authorizes on no resource. Some actions apply in two places.
fn placements(action: &str, scope: &OperatorScope) -> Vec<(Vec<String>, Option<Value>)> {
    let OperatorScope {
        partition: p,
        region: r,
        account: a,
        stack_name,
        name_prefix: prefix,
        artifacts_bucket,
    } = scope;
    let (service, name) = action.split_once(':').expect("service:Action");
    // The functions' roles, which CloudFormation names `<stack>-<logical id>-<suffix>`.
    let roles: Vec<String> = function_roles()
        .map(|id| format!("arn:{p}:iam::{a}:role/{stack_name}-{id}-*"))
        .collect();
    let keys = vec![format!("arn:{p}:kms:{r}:{a}:key/*")];
    let tagged = json!({"StringEquals": {format!("aws:ResourceTag/{KEY_TAG}"): stack_name}});
    let tagging = json!({"StringEquals": {format!("aws:RequestTag/{KEY_TAG}"): stack_name}});
    let one = |resources: Vec<String>| vec![(resources, None)];
    match (service, name) {
        ("dynamodb", _) => one(vec![format!("arn:{p}:dynamodb:{r}:{a}:table/{prefix}-*")]),
        ("sqs", _) => one(vec![format!("arn:{p}:sqs:{r}:{a}:{prefix}-*")]),
        ("logs", "DescribeLogGroups") => one(vec![format!("arn:{p}:logs:{r}:{a}:log-group:*")]),
        ("logs", _) => one(vec![format!("arn:{p}:logs:{r}:{a}:log-group:/aws/lambda/{prefix}-*")]),
        ("iam", "CreateServiceLinkedRole") => one(vec![format!("arn:{p}:iam::{a}:role/aws-service-role/*")]),
        ("iam", "PassRole") => vec![(
            roles,
            Some(json!({"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}})),
        )],
        ("iam", _) if BOUNDED_ACTIONS.contains(&action) => vec![(
            roles,
            Some(json!({"StringEquals": {"iam:PermissionsBoundary": crate::boundary::boundary_arn(scope)}})),
        )],
        ("iam", _) => one(roles),
        // The template's one permission lets EventBridge run the drift
        // check: the service role adds no other principal, so an operator's
        // template cannot open a function to direct invokes.
        ("lambda", "AddPermission") => vec![(
            vec![format!("arn:{p}:lambda:{r}:{a}:function:{prefix}-*")],
            Some(json!({"StringEquals": {"lambda:Principal": "events.amazonaws.com"}})),
        )],
        // Mappings only onto the stack's functions (`lambda:FunctionArn`);
        // their ids are not known in advance.
        ("lambda", "CreateEventSourceMapping" | "UpdateEventSourceMapping" | "DeleteEventSourceMapping") => vec![(
            vec!["*".to_owned()],
            Some(json!({"ArnLike": {"lambda:FunctionArn": format!("arn:{p}:lambda:{r}:{a}:function:{prefix}-*")}})),
        )],
        ("lambda", n) if n.contains("EventSourceMapping") => {
            one(vec![format!("arn:{p}:lambda:{r}:{a}:event-source-mapping:*")])
        }
        ("lambda", n) if n.ends_with("Tags") || n.to_ascii_lowercase().ends_with("tagresource") => one(vec![
            format!("arn:{p}:lambda:{r}:{a}:function:{prefix}-*"),
            format!("arn:{p}:lambda:{r}:{a}:event-source-mapping:*"),
        ]),
        ("lambda", _) => one(vec![format!("arn:{p}:lambda:{r}:{a}:function:{prefix}-*")]),
        ("cloudwatch", n) if n.contains("Dashboard") => {
            one(vec![format!("arn:{p}:cloudwatch::{a}:dashboard/{prefix}")])
        }
        ("cloudwatch", "ListTagsForResource" | "TagResource" | "UntagResource") => one(vec![
            format!("arn:{p}:cloudwatch:{r}:{a}:alarm:{prefix}-*"),
            format!("arn:{p}:cloudwatch::{a}:dashboard/{prefix}"),
        ]),
        ("cloudwatch", _) => one(vec![format!("arn:{p}:cloudwatch:{r}:{a}:alarm:{prefix}-*")]),
        // The zips the functions' code comes from.
        ("s3", "GetObject" | "GetObjectVersion") => one(vec![format!("arn:{p}:s3:::{artifacts_bucket}/*")]),
        ("s3", _) => one(vec![format!("arn:{p}:s3:::{prefix}-failed-batch-*")]),
        ("events", _) => one(vec![format!("arn:{p}:events:{r}:{a}:rule/{prefix}-*")]),
        ("sns", _) => one(vec![format!("arn:{p}:sns:{r}:{a}:{prefix}-*")]),
        // A new key has no ARN yet, and tagging it at creation needs a grant
        // not restricted to particular keys: only with the stack's tag.
        ("kms", "CreateKey") => vec![(vec!["*".to_owned()], Some(tagging))],
        ("kms", "TagResource") => vec![(vec!["*".to_owned()], Some(tagging)), (keys, Some(tagged))],
        // The stack's key has an id nobody can predict: only keys tagged with the stack.
        ("kms", _) => vec![(keys, Some(tagged))],
        _ => panic!("no resource known for {action}"),
    }
}

/// Where a statement applies: its resources and its condition, rendered.
type Place = (Vec<String>, String);

/// The service role's permissions policy: one statement per set of
/// resources and condition, with every handler action that applies there,
/// then the denies that keep the boundary in place: nobody removes it from
/// a role, changes the boundary policy, or changes the service role itself.
pub fn service_role_policy(scope: &OperatorScope) -> Value {
    let mut by_place: BTreeMap<Place, (Option<Value>, BTreeSet<&str>)> = BTreeMap::new();
    for (_, actions) in HANDLER_ACTIONS {
        for action in *actions {
            for (resources, condition) in placements(action, scope) {
                let key = (resources, condition.as_ref().map(Value::to_string).unwrap_or_default());
                by_place
                    .entry(key)
                    .or_insert_with(|| (condition, BTreeSet::new()))
                    .1
                    .insert(action);
            }
        }
    }
    let mut statements: Vec<Value> = by_place
        .into_iter()
        .enumerate()
        .map(|(i, ((resources, _), (condition, actions)))| {
            let mut statement = json!({
                "Sid": format!("Kit{i}"),
                "Effect": "Allow",
                "Action": actions.into_iter().collect::<Vec<_>>(),
                "Resource": resources,
            });
            if let Some(condition) = condition {
                statement["Condition"] = condition;
            }
            statement
        })
        .collect();
    let OperatorScope {
        partition: p,
        account: a,
        stack_name,
        ..
    } = scope;
    statements.extend([
        json!({
            "Sid": "NeverRemoveTheBoundary",
            "Effect": "Deny",
            "Action": ["iam:DeleteRolePermissionsBoundary"],
            "Resource": ["*"],
        }),
        json!({
            "Sid": "NeverChangeTheBoundaryPolicy",
            "Effect": "Deny",
            "Action": [
                "iam:CreatePolicyVersion",
                "iam:DeletePolicy",
                "iam:DeletePolicyVersion",
                "iam:SetDefaultPolicyVersion",
                "iam:TagPolicy",
                "iam:UntagPolicy",
            ],
            "Resource": [crate::boundary::boundary_arn(scope)],
        }),
        json!({
            "Sid": "NeverChangeThisRole",
            "Effect": "Deny",
            "Action": ["iam:*"],
            "Resource": [format!("arn:{p}:iam::{a}:role/{}", service_role_name(stack_name))],
        }),
    ]);
    json!({"Version": POLICY_VERSION, "Statement": statements})
}

/// Who may assume the service role: CloudFormation, as AWS's service role
/// page shows it.
pub fn service_role_trust_policy() -> Value {
    json!({
        "Version": POLICY_VERSION,
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": crate::policies::CLOUDFORMATION_SERVICE},
            "Action": "sts:AssumeRole",
        }],
    })
}
