//! `AWS::IAM::Role` with inline policies. Actions are a closed enum of the
//! exact API actions the kit calls, so a wildcard action cannot be written;
//! resources are expressions (`Fn::GetAtt`, `Fn::Sub`) naming the stack's
//! own tables, stream, queues and log groups.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::expr::Expr;

/// The only policy language version with policy variables.
pub const POLICY_VERSION: &str = "2012-10-17";

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Role {
    pub assume_role_policy_document: PolicyDocument,
    pub policies: Vec<InlinePolicy>,
}

impl Role {
    /// A role only `service` (e.g. `lambda.amazonaws.com`) may assume.
    pub fn for_service(service: &str, policies: Vec<InlinePolicy>) -> Self {
        Self {
            assume_role_policy_document: PolicyDocument::new(vec![Statement {
                sid: None,
                effect: Effect::Allow,
                principal: Some(Principal {
                    service: service.to_owned(),
                }),
                action: vec![Action::StsAssumeRole],
                resource: Vec::new(),
                condition: None,
            }]),
            policies,
        }
    }

    /// Every statement of the role's inline policies.
    pub fn permission_statements(&self) -> impl Iterator<Item = &Statement> {
        self.policies.iter().flat_map(|p| p.policy_document.statement.iter())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct InlinePolicy {
    pub policy_name: String,
    pub policy_document: PolicyDocument,
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
    /// operator → condition key → values, e.g.
    /// `ForAllValues:StringEquals` → `dynamodb:LeadingKeys` → a partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<BTreeMap<String, BTreeMap<String, Vec<String>>>>,
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

    /// The statement, granted only when `key` has only `values` under
    /// `operator`.
    pub fn when(mut self, operator: &str, key: &str, values: &[&str]) -> Self {
        self.condition.get_or_insert_with(BTreeMap::new).insert(
            operator.to_owned(),
            BTreeMap::from([(key.to_owned(), values.iter().map(|v| (*v).to_owned()).collect())]),
        );
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Effect {
    Allow,
    Deny,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Principal {
    pub service: String,
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
    DynamoDbQuery => "dynamodb:Query",
    DynamoDbScan => "dynamodb:Scan",
    DynamoDbDescribeStream => "dynamodb:DescribeStream",
    DynamoDbGetRecords => "dynamodb:GetRecords",
    DynamoDbGetShardIterator => "dynamodb:GetShardIterator",
    DynamoDbListStreams => "dynamodb:ListStreams",
    SqsSendMessage => "sqs:SendMessage",
    SqsReceiveMessage => "sqs:ReceiveMessage",
    SqsDeleteMessage => "sqs:DeleteMessage",
    SqsGetQueueAttributes => "sqs:GetQueueAttributes",
    SqsChangeMessageVisibility => "sqs:ChangeMessageVisibility",
    LogsCreateLogStream => "logs:CreateLogStream",
    LogsPutLogEvents => "logs:PutLogEvents",
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
}
