//! `AWS::KMS::Key`: the customer managed key of the alarm topic. The AWS
//! managed SNS key (`alias/aws/sns`) cannot be used there: its key policy
//! cannot be changed, so CloudWatch, which publishes the alarms, could not
//! encrypt with it and every notification would be dropped.

use serde::Serialize;

use crate::expr::Expr;
use crate::resources::iam::{ConditionBlock, add_condition};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Key {
    pub description: String,
    pub enable_key_rotation: bool,
    pub key_policy: KeyPolicy,
    /// The key's tags: `hck:stack`, which the CloudFormation service role's
    /// key grants are conditioned on (`stack::service_role`).
    pub tags: Vec<KeyTag>,
}

/// A tag of a key.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyTag {
    pub key: String,
    pub value: Expr,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyPolicy {
    pub version: String,
    pub statement: Vec<KeyStatement>,
}

/// A key policy statement. In a key policy `Resource: "*"` means this key
/// and nothing else.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyStatement {
    pub sid: String,
    pub effect: String,
    pub principal: KeyPrincipal,
    pub action: Vec<String>,
    pub resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<ConditionBlock>,
}

/// One kind of principal per statement: an account or role ARN (`AWS`), or
/// a service such as `cloudwatch.amazonaws.com`. A struct rather than an
/// enum: YAML would write an enum as a custom tag.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyPrincipal {
    #[serde(rename = "AWS", skip_serializing_if = "Option::is_none")]
    pub aws: Option<Expr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

impl KeyPrincipal {
    pub fn aws(arn: Expr) -> Self {
        Self {
            aws: Some(arn),
            service: None,
        }
    }

    pub fn service(service: &str) -> Self {
        Self {
            aws: None,
            service: Some(service.to_owned()),
        }
    }
}

impl KeyStatement {
    pub fn allow(sid: &str, principal: KeyPrincipal, actions: &[&str]) -> Self {
        Self {
            sid: sid.to_owned(),
            effect: "Allow".to_owned(),
            principal,
            action: actions.iter().map(|a| (*a).to_owned()).collect(),
            resource: "*".to_owned(),
            condition: None,
        }
    }

    /// The statement, with `operator: {key: value}` added to its condition block.
    pub fn when(mut self, operator: &str, key: &str, value: Expr) -> Self {
        add_condition(&mut self.condition, operator, key, value);
        self
    }
}
