//! `AWS::IAM::Role` with inline policies. Actions are a closed enum of the
//! exact API actions the kit calls, so a wildcard action cannot be written;
//! resources are expressions (`Fn::GetAtt`, `Fn::Sub`) naming the stack's
//! own tables, stream, queues and log groups.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::expr::{Expr, OnlyIf};

/// The only policy language version with policy variables.
pub const POLICY_VERSION: &str = "2012-10-17";

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Role {
    pub assume_role_policy_document: PolicyDocument,
    pub policies: Vec<InlinePolicy>,
    /// The managed policy that caps what the role's policies can grant
    /// (IAM permissions boundaries:
    /// <https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies_boundaries.html>).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions_boundary: Option<Expr>,
}

impl Role {
    /// A role only `service` (e.g. `lambda.amazonaws.com`) may assume.
    pub fn for_service(service: &str, policies: Vec<InlinePolicy>) -> Self {
        Self {
            assume_role_policy_document: PolicyDocument::new(vec![Statement {
                sid: None,
                effect: Effect::Allow,
                principal: Some(Principal::Service(service.to_owned())),
                action: vec![Action::StsAssumeRole],
                resource: Vec::new(),
                condition: None,
            }]),
            policies,
            permissions_boundary: None,
        }
    }

    /// The role, capped by the permissions boundary `boundary` (an
    /// expression that may be `AWS::NoValue`: no boundary).
    pub fn bounded_by(mut self, boundary: Expr) -> Self {
        self.permissions_boundary = Some(boundary);
        self
    }

    /// The role, trusting also the AWS principal `aws` besides its service:
    /// an expression that may be `AWS::NoValue`, which leaves the service
    /// alone (the embedded emulator's runner assumes the roles locally).
    pub fn also_trusting(mut self, aws: Expr) -> Self {
        for statement in &mut self.assume_role_policy_document.statement {
            if let Some(Principal::Service(service)) = statement.principal.take() {
                statement.principal = Some(Principal::ServiceAndAws {
                    service,
                    aws: aws.clone(),
                });
            }
        }
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct InlinePolicy {
    pub policy_name: String,
    pub policy_document: PolicyDocument,
    /// The template condition under which the role has this policy: it is
    /// written as `Fn::If: [condition, policy, Ref: AWS::NoValue]`, so the
    /// role grants it only when the condition holds (and policy checkers
    /// still read each policy whole).
    pub only_if: Option<String>,
}

impl InlinePolicy {
    pub fn new(policy_name: &str, statements: Vec<Statement>) -> Self {
        Self {
            policy_name: policy_name.to_owned(),
            policy_document: PolicyDocument::new(statements),
            only_if: None,
        }
    }

    /// The policy, only when the template condition `condition` holds.
    pub fn only_if(mut self, condition: &str) -> Self {
        self.only_if = Some(condition.to_owned());
        self
    }
}

impl Serialize for InlinePolicy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "PascalCase")]
        struct Plain<'a> {
            policy_name: &'a str,
            policy_document: &'a PolicyDocument,
        }
        let plain = Plain {
            policy_name: &self.policy_name,
            policy_document: &self.policy_document,
        };
        match &self.only_if {
            None => plain.serialize(serializer),
            Some(condition) => OnlyIf::new(condition, plain).serialize(serializer),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PolicyDocument {
    pub version: String,
    pub statement: Vec<Statement>,
}

impl PolicyDocument {
    pub fn new(statement: Vec<Statement>) -> Self {
        Self {
            version: POLICY_VERSION.to_owned(),
            statement,
        }
    }
}

/// An IAM condition block: operator (`Bool`, `ArnEquals`, ...) to
/// condition key to value.
pub type ConditionBlock = BTreeMap<String, BTreeMap<String, Expr>>;

/// Adds `operator: {key: value}` to `block`, creating it if need be.
pub(crate) fn add_condition(block: &mut Option<ConditionBlock>, operator: &str, key: &str, value: Expr) {
    block
        .get_or_insert_with(BTreeMap::new)
        .entry(operator.to_owned())
        .or_default()
        .insert(key.to_owned(), value);
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Statement {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sid: Option<String>,
    pub effect: Effect,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<Principal>,
    pub action: Vec<Action>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource: Vec<Expr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<ConditionBlock>,
}

impl Statement {
    /// `Allow` `actions` on `resources`.
    pub fn allow(sid: &str, actions: &[Action], resources: Vec<Expr>) -> Self {
        Self {
            sid: Some(sid.to_owned()),
            effect: Effect::Allow,
            principal: None,
            action: actions.to_vec(),
            resource: resources,
            condition: None,
        }
    }

    /// The statement, for a resource policy: who it is about.
    pub fn for_principal(mut self, principal: Principal) -> Self {
        self.principal = Some(principal);
        self
    }

    /// The statement, with `operator: {key: value}` added to its condition block.
    pub fn when(mut self, operator: &str, key: &str, value: Expr) -> Self {
        add_condition(&mut self.condition, operator, key, value);
        self
    }

    /// `Deny` `actions` on `resources` (resource policies).
    pub fn deny(sid: &str, actions: &[Action], resources: Vec<Expr>) -> Self {
        Self {
            effect: Effect::Deny,
            ..Self::allow(sid, actions, resources)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Effect {
    Allow,
    Deny,
}

/// Who a resource policy's or trust policy's statement is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// An AWS service, e.g. `lambda.amazonaws.com`.
    Service(String),
    /// `*`: everyone (only in `Deny` statements of the kit).
    Anyone,
    /// An AWS service and an AWS principal (account or ARN), which may be an
    /// `Fn::If` yielding `AWS::NoValue`.
    ServiceAndAws { service: String, aws: Expr },
}

impl Serialize for Principal {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Principal::Service(service) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("Service", service)?;
                map.end()
            }
            Principal::Anyone => serializer.serialize_str("*"),
            Principal::ServiceAndAws { service, aws } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("Service", service)?;
                map.serialize_entry("AWS", aws)?;
                map.end()
            }
        }
    }
}

macro_rules! actions {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// An IAM action, by its exact name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Action {
            $($(#[$doc])* $variant,)*
        }

        impl Action {
            /// The action as IAM spells it, `service:Operation`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Action::$variant => $name,)*
                }
            }
        }
    };
}

actions! {
    StsAssumeRole => "sts:AssumeRole",
    DynamoDbGetItem => "dynamodb:GetItem",
    DynamoDbPutItem => "dynamodb:PutItem",
    /// Also what a transaction's `Update` action is authorized as: there is no
    /// `TransactWriteItems` IAM action.
    DynamoDbUpdateItem => "dynamodb:UpdateItem",
    /// Also what a transaction's `Delete` action is authorized as.
    DynamoDbDeleteItem => "dynamodb:DeleteItem",
    /// What a transaction's `ConditionCheck` action is authorized as.
    DynamoDbConditionCheckItem => "dynamodb:ConditionCheckItem",
    /// Its own action: a `GetItem` grant does not cover it.
    DynamoDbBatchGetItem => "dynamodb:BatchGetItem",
    /// Its own action, as are PartiQL's writes: only in `Deny` statements,
    /// so that a grant added some day cannot reach a reserved partition.
    DynamoDbBatchWriteItem => "dynamodb:BatchWriteItem",
    DynamoDbPartiQlInsert => "dynamodb:PartiQLInsert",
    DynamoDbPartiQlUpdate => "dynamodb:PartiQLUpdate",
    DynamoDbPartiQlDelete => "dynamodb:PartiQLDelete",
    DynamoDbQuery => "dynamodb:Query",
    DynamoDbScan => "dynamodb:Scan",
    DynamoDbDescribeTable => "dynamodb:DescribeTable",
    DynamoDbDescribeContributorInsights => "dynamodb:DescribeContributorInsights",
    DynamoDbDeleteTable => "dynamodb:DeleteTable",
    DynamoDbDescribeStream => "dynamodb:DescribeStream",
    DynamoDbGetRecords => "dynamodb:GetRecords",
    DynamoDbGetShardIterator => "dynamodb:GetShardIterator",
    DynamoDbListStreams => "dynamodb:ListStreams",
    SqsSendMessage => "sqs:SendMessage",
    SqsReceiveMessage => "sqs:ReceiveMessage",
    SqsDeleteMessage => "sqs:DeleteMessage",
    SqsGetQueueAttributes => "sqs:GetQueueAttributes",
    SqsChangeMessageVisibility => "sqs:ChangeMessageVisibility",
    SqsStartMessageMoveTask => "sqs:StartMessageMoveTask",
    SqsListMessageMoveTasks => "sqs:ListMessageMoveTasks",
    LogsCreateLogStream => "logs:CreateLogStream",
    LogsPutLogEvents => "logs:PutLogEvents",
    S3PutObject => "s3:PutObject",
    S3GetObject => "s3:GetObject",
    /// A `GetObject` naming a `versionId` is authorized as this, not as
    /// `s3:GetObject`: only in the bucket policy's `Deny` statements.
    S3GetObjectVersion => "s3:GetObjectVersion",
    /// What S3 replication reads each object as: only in `Deny` statements.
    S3GetObjectVersionForReplication => "s3:GetObjectVersionForReplication",
    /// Only in the bucket policy's `Deny` statements.
    S3DeleteObject => "s3:DeleteObject",
    /// A `DeleteObject` naming a `versionId` (the one that removes data in
    /// a versioned bucket): only in `Deny` statements.
    S3DeleteObjectVersion => "s3:DeleteObjectVersion",
    /// The api reads its callers' `hck-scope-prefix` tag
    /// (`ScopeAuthorization=principal-tag`).
    IamListRoleTags => "iam:ListRoleTags",
    IamListUserTags => "iam:ListUserTags",
    /// On the bucket: lets a missing object answer `NoSuchKey` rather than
    /// `AccessDenied`.
    S3ListBucket => "s3:ListBucket",
    S3CreateBucket => "s3:CreateBucket",
    /// Every S3 action: only in the bucket policy's `Deny` statements; the
    /// tests check that no role is granted it.
    S3Any => "s3:*",
    /// No resource-level permissions: only ever on `*` (the operator's policy).
    LambdaListEventSourceMappings => "lambda:ListEventSourceMappings",
    LambdaGetEventSourceMapping => "lambda:GetEventSourceMapping",
    LambdaGetFunctionUrlConfig => "lambda:GetFunctionUrlConfig",
    LambdaListTags => "lambda:ListTags",
    /// Only on the embedded emulator: the local take-over of a mapping.
    LambdaTagResource => "lambda:TagResource",
    LambdaUpdateEventSourceMapping => "lambda:UpdateEventSourceMapping",
    CloudFormationDescribeStacks => "cloudformation:DescribeStacks",
    CloudFormationDescribeStackEvents => "cloudformation:DescribeStackEvents",
    CloudFormationListStackResources => "cloudformation:ListStackResources",
    CloudFormationGetTemplate => "cloudformation:GetTemplate",
    CloudFormationCreateChangeSet => "cloudformation:CreateChangeSet",
    CloudFormationDescribeChangeSet => "cloudformation:DescribeChangeSet",
    CloudFormationExecuteChangeSet => "cloudformation:ExecuteChangeSet",
    CloudFormationDeleteChangeSet => "cloudformation:DeleteChangeSet",
    CloudFormationDeleteStack => "cloudformation:DeleteStack",
    CloudWatchDescribeAlarms => "cloudwatch:DescribeAlarms",
    /// The api's callers: a request to the function URL (caller policy only).
    LambdaInvokeFunctionUrl => "lambda:InvokeFunctionUrl",
    /// The api's callers, only under `lambda:InvokedViaFunctionUrl`
    /// (caller policy only).
    LambdaInvokeFunction => "lambda:InvokeFunction",
    /// The operator hands CloudFormation its service role (operator policy only).
    IamPassRole => "iam:PassRole",
}

impl Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn assume_role_document_names_the_service_and_no_resource() {
        let role = Role::for_service("lambda.amazonaws.com", Vec::new());
        assert_eq!(
            serde_json::to_value(&role.assume_role_policy_document).unwrap(),
            json!({
                "Version": "2012-10-17",
                "Statement": [{
                    "Effect": "Allow",
                    "Principal": {"Service": "lambda.amazonaws.com"},
                    "Action": ["sts:AssumeRole"],
                }]
            })
        );
    }

    #[test]
    fn a_role_also_trusting_a_principal_keeps_its_service_and_adds_the_principal_beside_it() {
        let local = Expr::when("Local", Expr::reference("Assumer"), Expr::no_value());
        let role = Role::for_service("lambda.amazonaws.com", Vec::new()).also_trusting(local);
        assert_eq!(
            serde_json::to_value(&role.assume_role_policy_document).unwrap()["Statement"][0]["Principal"],
            json!({
                "Service": "lambda.amazonaws.com",
                "AWS": {"Fn::If": ["Local", {"Ref": "Assumer"}, {"Ref": "AWS::NoValue"}]},
            })
        );
    }
}
