//! `AWS::Events::Rule` on a schedule: EventBridge invokes its targets
//! asynchronously at each tick of a `rate(...)` or `cron(...)` expression.
//! The kit uses it for the drift check; the target needs an
//! `AWS::Lambda::Permission` for `events.amazonaws.com` from the rule.

use serde::Serialize;

use crate::expr::Expr;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Rule {
    pub name: Expr,
    pub description: String,
    pub schedule_expression: Expr,
    pub state: RuleState,
    pub targets: Vec<Target>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RuleState {
    Enabled,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Target {
    pub arn: Expr,
    /// Unique among the rule's targets.
    pub id: String,
    /// EventBridge's own retries of a failed delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RetryPolicy {
    pub maximum_event_age_in_seconds: u32,
    pub maximum_retry_attempts: u32,
}
