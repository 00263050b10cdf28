//! `AWS::SNS::Topic` and `AWS::SNS::Subscription`: where the alarms send
//! their notifications, and an operator's email address on it.

use serde::Serialize;

use crate::expr::Expr;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Topic {
    pub topic_name: Expr,
    /// The KMS key that encrypts messages at rest.
    pub kms_master_key_id: Expr,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Subscription {
    pub topic_arn: Expr,
    pub protocol: Protocol,
    pub endpoint: Expr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Email,
}
