//! `AWS::DynamoDB::Table`: the resources table (with its stream) and the
//! counters table.

use serde::Serialize;

use crate::expr::{Expr, OnlyIf};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Table {
    pub table_name: Expr,
    pub attribute_definitions: Vec<AttributeDefinition>,
    pub key_schema: Vec<KeySchemaElement>,
    pub billing_mode: BillingMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_specification: Option<StreamSpecification>,
    #[serde(rename = "SSESpecification")]
    pub sse_specification: SseSpecification,
    pub point_in_time_recovery_specification: PointInTimeRecoverySpecification,
    /// Capacity DynamoDB keeps ready for the table, set only when asked for
    /// ([`crate::capacity`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_throughput: Option<OnlyIf<WarmThroughput>>,
    /// The on-demand table's maximum request units per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_demand_throughput: Option<OnlyIf<OnDemandThroughput>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contributor_insights_specification: Option<OnlyIf<ContributorInsightsSpecification>>,
}

impl Table {
    /// A table keyed by two string attributes.
    pub fn keyed(table_name: Expr, partition_key: &str, sort_key: &str) -> Self {
        let string = |name: &str| AttributeDefinition {
            attribute_name: name.to_owned(),
            attribute_type: AttributeType::S,
        };
        Self {
            table_name,
            attribute_definitions: vec![string(partition_key), string(sort_key)],
            key_schema: vec![
                KeySchemaElement {
                    attribute_name: partition_key.to_owned(),
                    key_type: KeyType::Hash,
                },
                KeySchemaElement {
                    attribute_name: sort_key.to_owned(),
                    key_type: KeyType::Range,
                },
            ],
            billing_mode: BillingMode::PayPerRequest,
            stream_specification: None,
            sse_specification: SseSpecification { sse_enabled: true },
            point_in_time_recovery_specification: PointInTimeRecoverySpecification {
                point_in_time_recovery_enabled: true,
            },
            warm_throughput: None,
            on_demand_throughput: None,
            contributor_insights_specification: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeDefinition {
    pub attribute_name: String,
    pub attribute_type: AttributeType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AttributeType {
    S,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeySchemaElement {
    pub attribute_name: String,
    pub key_type: KeyType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum KeyType {
    Hash,
    Range,
}

/// On demand only: provisioned capacity would need throughput properties
/// the model does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BillingMode {
    PayPerRequest,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct StreamSpecification {
    pub stream_view_type: StreamViewType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StreamViewType {
    NewAndOldImages,
}

/// `SSEEnabled: true` encrypts with the AWS managed key `aws/dynamodb`, whose
/// key policy already admits callers that reach it through DynamoDB, so the
/// roles need no KMS statement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SseSpecification {
    #[serde(rename = "SSEEnabled")]
    pub sse_enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PointInTimeRecoverySpecification {
    pub point_in_time_recovery_enabled: bool,
}

/// `WarmThroughput`: read and write units per second the table can serve
/// at once (each may be left out with `Ref AWS::NoValue`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct WarmThroughput {
    pub read_units_per_second: Expr,
    pub write_units_per_second: Expr,
}

/// `OnDemandThroughput`: the most request units per second an on-demand
/// table serves (`-1` removes a maximum set earlier).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct OnDemandThroughput {
    pub max_read_request_units: Expr,
    pub max_write_request_units: Expr,
}

/// `ContributorInsightsSpecification`: CloudWatch Contributor Insights on
/// the table's keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContributorInsightsSpecification {
    pub enabled: bool,
    pub mode: ContributorInsightsMode,
}

/// Which requests Contributor Insights ranks keys by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ContributorInsightsMode {
    /// Throttled requests only.
    ThrottledKeys,
}
