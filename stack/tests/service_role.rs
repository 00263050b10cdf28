//! The CloudFormation service role's actions (`stack::service_role`)
//! against the resource schemas CloudFormation publishes, as cfn-lint ships
//! them (`make tools`): for each resource type of the template, every
//! action its create, read, update and delete handlers may call is granted
//! or left out with a reason, and nothing else is granted. A type added to
//! the template, or an action added to a handler, fails this test until the
//! role says what to do with it. Then the policy itself: roles only with
//! the boundary, never the role itself, keys only by the stack's tag.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use serde_json::json;
use stack::access::OperatorScope;
use stack::service_role::{
    BOUNDED_ACTIONS, HANDLER_ACTIONS, max_stack_name_with_service_role, service_role_name, service_role_policy,
    service_role_trust_policy,
};

/// Handler actions left out, per resource type, each with the feature the
/// kit never uses there: granting them would only widen the role. Patterns
/// take IAM's `*`.
const NOT_USED: &[(&str, &str, &str)] = &[
    (
        "AWS::DynamoDB::Table",
        "dynamodb:*TableReplica",
        "global-table replicas (the kit cannot count on them)",
    ),
    (
        "AWS::DynamoDB::Table",
        "dynamodb:*KinesisStreamingDestination",
        "Kinesis streaming destinations",
    ),
    ("AWS::DynamoDB::Table", "dynamodb:*Import*", "importing a table from S3"),
    ("AWS::DynamoDB::Table", "kinesis:*", "Kinesis streaming destinations"),
    ("AWS::DynamoDB::Table", "logs:*", "the logs of an import from S3"),
    ("AWS::DynamoDB::Table", "s3:*", "the source of an import from S3"),
    (
        "AWS::DynamoDB::Table",
        "kms:*",
        "a customer managed key (the tables use the AWS managed key)",
    ),
    (
        "AWS::Lambda::Function",
        "kms:*",
        "a customer managed key for the environment variables",
    ),
    (
        "AWS::Lambda::EventSourceMapping",
        "kms:*",
        "a customer managed key for the filter criteria",
    ),
    ("AWS::Lambda::Function", "ec2:*", "functions in a VPC"),
    ("AWS::Lambda::Function", "elasticfilesystem:*", "EFS mounts"),
    ("AWS::Lambda::Function", "s3files:*", "file system mounts"),
    ("AWS::Lambda::Function", "lambda:GetCodeSigningConfig", "code signing"),
    (
        "AWS::Lambda::Function",
        "lambda:PutFunctionCodeSigningConfig",
        "code signing",
    ),
    (
        "AWS::Lambda::Function",
        "lambda:DeleteFunctionCodeSigningConfig",
        "code signing",
    ),
    ("AWS::Lambda::Function", "lambda:GetLayerVersion", "layers"),
    (
        "AWS::Lambda::Function",
        "lambda:AssociateRuntimeAlias",
        "runtime aliases",
    ),
    (
        "AWS::Lambda::Function",
        "lambda:PassCapacityProvider",
        "Lambda managed instances",
    ),
    (
        "AWS::Lambda::Function",
        "lambda:PutFunctionScalingConfig",
        "Lambda managed instances",
    ),
    (
        "AWS::IAM::Role",
        "iam:DeleteRolePermissionsBoundary",
        "removing the roles' permissions boundary (denied outright)",
    ),
    (
        "AWS::IAM::Role",
        "iam:*tachRolePolicy",
        "managed policies (the roles have inline policies only)",
    ),
    (
        "AWS::Logs::LogGroup",
        "logs:*DataProtectionPolicy",
        "data protection policies",
    ),
    ("AWS::Logs::LogGroup", "logs:*IndexPolic*", "field index policies"),
    ("AWS::Logs::LogGroup", "logs:*ResourcePolic*", "resource policies"),
    ("AWS::Logs::LogGroup", "logs:*KmsKey", "a customer managed key"),
    ("AWS::Logs::LogGroup", "logs:CreateLogDelivery", "log delivery"),
    (
        "AWS::Logs::LogGroup",
        "logs:PutBearerTokenAuthentication",
        "bearer token authentication",
    ),
    (
        "AWS::Logs::LogGroup",
        "logs:PutLogGroupDeletionProtection",
        "deletion protection",
    ),
    ("AWS::Logs::LogGroup", "firehose:*", "log delivery to Firehose"),
    (
        "AWS::Logs::LogGroup",
        "s3:REST.PUT.OBJECT",
        "log delivery to S3 (not an IAM action)",
    ),
    ("AWS::SNS::Topic", "iam:*", "delivery status logging"),
    ("AWS::SNS::Subscription", "iam:*", "delivery status logging"),
    (
        "AWS::Events::Rule",
        "iam:PassRole",
        "targets with a role (the drift check's target has none)",
    ),
    ("AWS::S3::Bucket", "iam:PassRole", "replication"),
    ("AWS::S3::Bucket", "s3tables:*", "S3 table buckets"),
    ("AWS::S3::Bucket", "s3:*Analytics*", "bucket analytics"),
    ("AWS::S3::Bucket", "s3:*Accelerate*", "transfer acceleration"),
    ("AWS::S3::Bucket", "s3:*Logging", "server access logging"),
    ("AWS::S3::Bucket", "s3:*Metadata*", "S3 metadata tables"),
    ("AWS::S3::Bucket", "s3:*Metrics*", "request metrics"),
    ("AWS::S3::Bucket", "s3:*Replication*", "replication"),
    ("AWS::S3::Bucket", "s3:*Website", "static websites"),
    ("AWS::S3::Bucket", "s3:*ObjectLock*", "Object Lock"),
    ("AWS::S3::Bucket", "s3:*IntelligentTiering*", "Intelligent-Tiering"),
    ("AWS::S3::Bucket", "s3:*Inventory*", "inventory"),
    ("AWS::S3::Bucket", "s3:*Abac", "attribute-based bucket access"),
    (
        "AWS::S3::Bucket",
        "s3:Put*Acl",
        "ACLs (object ownership is BucketOwnerEnforced)",
    ),
    (
        "AWS::S3::Bucket",
        "s3:DeleteObject",
        "emptying a bucket (CloudFormation never empties one; this one is retained)",
    ),
    ("AWS::S3::Bucket", "s3:DeleteBucketEncryption", "removing encryption"),
    (
        "AWS::S3::Bucket",
        "s3:TagResource",
        "S3 tags through the tagging API (the bucket's tags use PutBucketTagging)",
    ),
    ("AWS::S3::Bucket", "s3:UntagResource", "S3 tags through the tagging API"),
    (
        "AWS::S3::Bucket",
        "s3:ListTagsForResource",
        "S3 tags through the tagging API",
    ),
    ("AWS::S3::Bucket", "s3:*Cors", "CORS"),
    ("AWS::S3::Bucket", "s3:*CORS", "CORS"),
];

/// Whether [`NOT_USED`] leaves `action` out for `resource_type`.
fn not_used(resource_type: &str, action: &str) -> bool {
    NOT_USED
        .iter()
        .any(|(kind, pattern, _)| *kind == resource_type && matches(pattern, action))
}

/// Whether `value` matches `pattern` with IAM's `*` wildcard.
fn matches(pattern: &str, value: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pattern == value;
    }
    if !value.starts_with(first) || !value[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

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

fn scope() -> OperatorScope {
    OperatorScope {
        partition: "aws".to_owned(),
        region: "eu-west-1".to_owned(),
        account: "123456789012".to_owned(),
        stack_name: "orders".to_owned(),
        name_prefix: "orders".to_owned(),
        artifacts_bucket: "orders-artifacts-123456789012-eu-west-1".to_owned(),
    }
}

fn allows(policy: &Value) -> impl Iterator<Item = &Value> {
    policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["Effect"] == "Allow")
}

fn actions(statement: &Value) -> Vec<&str> {
    statement["Action"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect()
}

#[test]
fn the_service_role_touches_only_the_functions_roles_and_passes_them_only_to_lambda() {
    let policy = service_role_policy(&scope());
    let roles: Vec<Value> = ["StreamCounterRole", "DlqReprocessorRole", "ApiRole", "DriftCheckRole"]
        .iter()
        .map(|id| json!(format!("arn:aws:iam::123456789012:role/orders-{id}-*")))
        .collect();
    for statement in allows(&policy) {
        let actions = actions(statement);
        for action in &actions {
            assert!(!action.contains('*'), "{action}");
            if action.starts_with("iam:") && *action != "iam:CreateServiceLinkedRole" {
                assert_eq!(statement["Resource"], json!(roles), "{action}");
            }
        }
        if actions.contains(&"iam:PassRole") {
            assert_eq!(actions.len(), 1);
            assert_eq!(
                statement["Condition"]["StringEquals"]["iam:PassedToService"],
                "lambda.amazonaws.com"
            );
        }
    }
}

/// A template deployed with the role cannot create a role, or give one
/// a policy, above the boundary: every such grant requires it.
#[test]
fn roles_are_created_and_given_policies_only_with_the_kits_boundary() {
    let policy = service_role_policy(&scope());
    let boundary = "arn:aws:iam::123456789012:policy/hck-boundary-orders";
    let mut seen = BTreeSet::new();
    for statement in allows(&policy) {
        for action in actions(statement) {
            if BOUNDED_ACTIONS.contains(&action) {
                seen.insert(action);
                assert_eq!(
                    statement["Condition"],
                    json!({"StringEquals": {"iam:PermissionsBoundary": boundary}}),
                    "{action}"
                );
            }
        }
    }
    assert!(
        seen.contains("iam:CreateRole") && seen.contains("iam:PutRolePolicy"),
        "{seen:?}"
    );
    let denied: Vec<&Value> = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["Effect"] == "Deny")
        .collect();
    let denies = |action: &str, resource: &str| {
        denied.iter().any(|s| {
            actions(s).iter().any(|a| matches(a, action))
                && s["Resource"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| matches(r.as_str().unwrap(), resource))
        })
    };
    assert!(denies(
        "iam:DeleteRolePermissionsBoundary",
        "arn:aws:iam::123456789012:role/orders-ApiRole-X"
    ));
    for action in [
        "iam:CreatePolicyVersion",
        "iam:SetDefaultPolicyVersion",
        "iam:DeletePolicy",
    ] {
        assert!(denies(action, boundary), "{action}");
    }
    let own = format!("arn:aws:iam::123456789012:role/{}", service_role_name("orders"));
    for action in [
        "iam:PutRolePolicy",
        "iam:AttachRolePolicy",
        "iam:UpdateAssumeRolePolicy",
        "iam:DeleteRolePermissionsBoundary",
    ] {
        assert!(denies(action, &own), "{action}");
    }
}

/// The recommended name of the service role is outside every resource
/// its own policy allows, for stack names that try to reach it.
#[test]
fn the_service_role_cannot_reach_itself() {
    for stack in ["orders", "hck", "hck-cfn-service", "hck-cfn-service-orders"] {
        let mut scope = scope();
        scope.stack_name = stack.to_owned();
        scope.name_prefix = stack.to_owned();
        let own = format!("arn:aws:iam::123456789012:role/{}", service_role_name(stack));
        for statement in allows(&service_role_policy(&scope)) {
            for resource in statement["Resource"].as_array().unwrap() {
                let resource = resource.as_str().unwrap();
                assert!(resource == "*" || !matches(resource, &own), "{resource} matches {own}");
            }
        }
    }
}

/// Key administration only on keys tagged with the stack: never on
/// every key of the account.
#[test]
fn key_actions_apply_only_to_keys_tagged_with_the_stack() {
    let policy = service_role_policy(&scope());
    for statement in allows(&policy) {
        if actions(statement).iter().any(|a| a.starts_with("kms:")) {
            assert!(actions(statement).iter().all(|a| a.starts_with("kms:")));
            let condition = statement["Condition"]["StringEquals"].as_object().unwrap();
            let (key, value) = condition.iter().next().unwrap();
            assert!(
                key == "aws:ResourceTag/hck:stack" || key == "aws:RequestTag/hck:stack",
                "{key}"
            );
            assert_eq!(value, "orders");
        }
        for action in actions(statement) {
            assert!(
                !["kms:CreateGrant", "kms:Decrypt", "kms:Encrypt", "kms:ListAliases"].contains(&action),
                "{action}"
            );
        }
    }
}

#[test]
fn long_stack_names_are_those_whose_role_names_cloudformation_shortens() {
    // "<stack>-DlqReprocessorRole-<13>" fits IAM's 64 characters.
    assert_eq!(max_stack_name_with_service_role(), 31);
}

#[test]
fn only_actions_iam_authorizes_on_no_resource_are_granted_on_everything() {
    let policy = service_role_policy(&scope());
    for statement in allows(&policy) {
        if statement["Resource"] == json!(["*"]) {
            for action in actions(statement) {
                assert!(
                    action.starts_with("lambda:") || ["kms:CreateKey", "kms:TagResource"].contains(&action),
                    "{action} on *"
                );
            }
        }
    }
}

#[test]
fn not_used_patterns_match_as_iam_wildcards() {
    assert!(not_used("AWS::DynamoDB::Table", "dynamodb:CreateTableReplica"));
    assert!(not_used("AWS::S3::Bucket", "s3:PutBucketCORS"));
    assert!(not_used("AWS::Lambda::Function", "ec2:DescribeVpcs"));
    assert!(!not_used("AWS::DynamoDB::Table", "dynamodb:CreateTable"));
    assert!(!not_used("AWS::S3::Bucket", "s3:PutBucketVersioning"));
    assert!(!not_used("AWS::Lambda::Function", "iam:PassRole"));
}

#[test]
fn the_trust_policy_lets_only_cloudformation_assume_it() {
    let trust = service_role_trust_policy();
    assert_eq!(
        trust["Statement"][0]["Principal"],
        json!({"Service": "cloudformation.amazonaws.com"})
    );
}
