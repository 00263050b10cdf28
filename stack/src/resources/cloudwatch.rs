//! `AWS::CloudWatch::Alarm`: the two signals an operator of the failure
//! pipeline acts on — messages stranded in DLQ2, and a stream consumer
//! falling behind (iterator age), which is what precedes records ageing out.

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
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Dimension {
    pub name: String,
    pub value: Expr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Statistic {
    Average,
    Maximum,
    Minimum,
    Sum,
    SampleCount,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ComparisonOperator {
    GreaterThanOrEqualToThreshold,
    GreaterThanThreshold,
    LessThanThreshold,
    LessThanOrEqualToThreshold,
}

/// How a period without data points is judged. An idle queue or an idle
/// stream publishes nothing, and idle is healthy: `notBreaching`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TreatMissingData {
    Breaching,
    NotBreaching,
    Ignore,
    Missing,
}
