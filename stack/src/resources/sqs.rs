//! `AWS::SQS::Queue`, for the two dead-letter queues of the failure pipeline,
//! and `AWS::SQS::QueuePolicy`.

use serde::Serialize;

use crate::expr::Expr;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Queue {
    pub queue_name: Expr,
    /// Seconds; 1,209,600 (14 days) is the service maximum.
    pub message_retention_period: u32,
    pub sqs_managed_sse_enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility_timeout: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redrive_policy: Option<RedrivePolicy>,
}

/// Where SQS moves a message after `max_receive_count` receives. The service
/// spells these two keys in camelCase, unlike every other property.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RedrivePolicy {
    pub dead_letter_target_arn: Expr,
    pub max_receive_count: Expr,
}

/// `AWS::SQS::QueuePolicy`: who else may act on the queues (here: S3
/// sending the failed-batch bucket's notifications to DLQ1).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct QueuePolicy {
    pub queues: Vec<Expr>,
    pub policy_document: crate::resources::iam::PolicyDocument,
}
