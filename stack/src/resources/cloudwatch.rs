//! `AWS::CloudWatch::Alarm` and `AWS::CloudWatch::Dashboard`: the signals
//! an operator acts on (which alarms the kit raises, and why, is
//! `crate::alarms`) and the one page that shows them.

use serde::Serialize;

use crate::expr::Expr;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Alarm {
    pub alarm_name: Expr,
    pub alarm_description: String,
    pub namespace: String,
    pub metric_name: String,
    pub dimensions: Vec<Dimension>,
    pub statistic: Statistic,
    /// Seconds.
    pub period: u32,
    pub evaluation_periods: u32,
    pub threshold: Expr,
    pub comparison_operator: ComparisonOperator,
    pub treat_missing_data: TreatMissingData,
    /// Notified when the alarm goes to `ALARM`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alarm_actions: Vec<Expr>,
    /// Notified when it goes back to `OK`.
    #[serde(rename = "OKActions", skip_serializing_if = "Vec::is_empty")]
    pub ok_actions: Vec<Expr>,
}

/// A dashboard; `DashboardBody` is the CloudWatch dashboard JSON as a
/// string (an `Fn::Sub`, so it can name the stack's resources).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Dashboard {
    pub dashboard_name: Expr,
    pub dashboard_body: Expr,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Dimension {
    pub name: String,
    pub value: Expr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Statistic {
    Maximum,
    Sum,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ComparisonOperator {
    GreaterThanOrEqualToThreshold,
    GreaterThanThreshold,
}

/// How a period without data points is judged. An idle queue or an idle
/// stream publishes nothing, and idle is healthy: `notBreaching`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TreatMissingData {
    NotBreaching,
}
