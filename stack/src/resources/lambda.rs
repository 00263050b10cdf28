//! `AWS::Lambda::Function`, `AWS::Lambda::EventSourceMapping`,
//! `AWS::Lambda::Url` and `AWS::Lambda::Permission`. The functions are cargo-lambda `bootstrap` zips on the
//! OS-only runtime; the mappings carry the whole failure-handling contract of
//! the stream consumer (bisect, partial batch responses, retries, record age,
//! filter and on-failure destination).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::expr::Expr;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Function {
    pub function_name: Expr,
    pub runtime: Runtime,
    pub handler: String,
    pub architectures: Vec<Expr>,
    pub memory_size: Expr,
    /// Seconds.
    pub timeout: u32,
    pub role: Expr,
    pub code: Code,
    pub logging_config: LoggingConfig,
    pub environment: Environment,
}

/// The runtime of Rust functions: a bare Amazon Linux that runs `bootstrap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Runtime {
    #[serde(rename = "provided.al2023")]
    ProvidedAl2023,
}

/// The deployment package, a zip already uploaded to S3.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Code {
    #[serde(rename = "S3Bucket")]
    pub s3_bucket: Expr,
    #[serde(rename = "S3Key")]
    pub s3_key: Expr,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LoggingConfig {
    pub log_format: LogFormat,
    pub log_group: Expr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LogFormat {
    #[serde(rename = "JSON")]
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Environment {
    pub variables: BTreeMap<String, Expr>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct EventSourceMapping {
    pub event_source_arn: Expr,
    pub function_name: Expr,
    /// Streams only; queues have no position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starting_position: Option<StartingPosition>,
    pub batch_size: Expr,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallelization_factor: Option<Expr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_retry_attempts: Option<Expr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_record_age_in_seconds: Option<Expr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bisect_batch_on_function_error: Option<bool>,
    pub function_response_types: Vec<FunctionResponseType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_criteria: Option<FilterCriteria>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_config: Option<DestinationConfig>,
    /// Which of the mapping's own metrics Lambda publishes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_config: Option<MetricsConfig>,
}

impl EventSourceMapping {
    /// A mapping with only the settings every source takes; the stream
    /// settings are filled in by the caller.
    pub fn new(event_source_arn: Expr, function_name: Expr, batch_size: Expr) -> Self {
        Self {
            event_source_arn,
            function_name,
            starting_position: None,
            batch_size,
            parallelization_factor: None,
            maximum_retry_attempts: None,
            maximum_record_age_in_seconds: None,
            bisect_batch_on_function_error: None,
            function_response_types: vec![FunctionResponseType::ReportBatchItemFailures],
            filter_criteria: None,
            destination_config: None,
            metrics_config: None,
        }
    }
}

/// `MetricsConfig`: the event source mapping metrics Lambda publishes in
/// `AWS/Lambda` under the `EventSourceMappingUUID` dimension
/// (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-lambda-eventsourcemapping-metricsconfig>).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MetricsConfig {
    pub metrics: Vec<MappingMetrics>,
}

/// A group of event source mapping metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MappingMetrics {
    /// `PolledEventCount`, `FilteredOutEventCount`, `InvokedEventCount`,
    /// `FailedInvokeEventCount`, `DroppedEventCount`,
    /// `OnFailureDestinationDeliveredEventCount` and `DeletedEventCount`.
    EventCount,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StartingPosition {
    TrimHorizon,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FunctionResponseType {
    ReportBatchItemFailures,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FilterCriteria {
    pub filters: Vec<Filter>,
}

impl FilterCriteria {
    /// Lambda takes each pattern as a JSON document inside a string.
    pub fn from_patterns(patterns: &[serde_json::Value]) -> Self {
        Self {
            filters: patterns
                .iter()
                .map(|p| Filter {
                    pattern: hybrid_counter::stream::filter::pattern_text(p),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Filter {
    pub pattern: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DestinationConfig {
    pub on_failure: OnFailure,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct OnFailure {
    pub destination: Expr,
}

/// A function URL. `AWS_IAM` means callers sign requests with SigV4 and need
/// `lambda:InvokeFunctionUrl`; no resource policy opens it to the public.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Url {
    pub auth_type: AuthType,
    pub target_function_arn: Expr,
}

/// `NONE` is deliberately not modelled: the URL takes only signed requests
/// (SECURITY.md, row 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AuthType {
    AwsIam,
}

/// `AWS::Lambda::Permission`: the function's resource policy lets one
/// service principal invoke it, from one source (`SourceArn`) only.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Permission {
    pub action: PermissionAction,
    pub function_name: Expr,
    /// A service principal, e.g. `events.amazonaws.com`.
    pub principal: String,
    pub source_arn: Expr,
}

/// What a permission allows; invoking is the only grant the kit makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PermissionAction {
    #[serde(rename = "lambda:InvokeFunction")]
    InvokeFunction,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn filter_patterns_are_compact_json_strings() {
        let criteria = FilterCriteria::from_patterns(&[json!({"eventName": ["INSERT"]})]);
        assert_eq!(
            serde_json::to_value(&criteria).unwrap(),
            json!({"Filters": [{"Pattern": "{\"eventName\":[\"INSERT\"]}"}]})
        );
    }
}
