//! Logical ids of the template's resources: the names intrinsics refer to,
//! and what a caller passes to `DescribeStackResource`. Changing one makes
//! CloudFormation replace the resource, so they are part of the contract.

pub const RESOURCES_TABLE: &str = "ResourcesTable";
pub const COUNTERS_TABLE: &str = "CountersTable";
pub const DLQ1: &str = "Dlq1";
pub const DLQ2: &str = "Dlq2";
/// Lets the failed-batch bucket's notifications into DLQ1 (`payload` only).
pub const DLQ1_POLICY: &str = "Dlq1Policy";
/// Keeps failed stream batches with their records (`payload` only).
pub const FAILED_BATCH_BUCKET: &str = "FailedBatchBucket";
pub const FAILED_BATCH_BUCKET_POLICY: &str = "FailedBatchBucketPolicy";

pub const STREAM_COUNTER_FUNCTION: &str = "StreamCounterFunction";
pub const STREAM_COUNTER_ROLE: &str = "StreamCounterRole";
pub const STREAM_COUNTER_LOG_GROUP: &str = "StreamCounterLogGroup";
pub const DLQ_REPROCESSOR_FUNCTION: &str = "DlqReprocessorFunction";
pub const DLQ_REPROCESSOR_ROLE: &str = "DlqReprocessorRole";
pub const DLQ_REPROCESSOR_LOG_GROUP: &str = "DlqReprocessorLogGroup";
pub const API_FUNCTION: &str = "ApiFunction";
pub const API_ROLE: &str = "ApiRole";
pub const API_LOG_GROUP: &str = "ApiLogGroup";
pub const API_FUNCTION_URL: &str = "ApiFunctionUrl";
pub const DRIFT_CHECK_FUNCTION: &str = "DriftCheckFunction";
pub const DRIFT_CHECK_ROLE: &str = "DriftCheckRole";
pub const DRIFT_CHECK_LOG_GROUP: &str = "DriftCheckLogGroup";
pub const DRIFT_CHECK_RULE: &str = "DriftCheckRule";
pub const DRIFT_CHECK_PERMISSION: &str = "DriftCheckPermission";

/// Condition: `DriftCheckSchedule` is not empty.
pub const DRIFT_CHECK_ENABLED: &str = "DriftCheckEnabled";
/// Condition: a limits file (`LimitsFileUri`) is set for the drift check.
pub const LIMITS_FILE_SET: &str = "LimitsFileSet";

pub const STREAM_MAPPING: &str = "StreamMapping";
pub const DLQ1_MAPPING: &str = "Dlq1Mapping";

pub const DLQ2_NOT_EMPTY_ALARM: &str = "Dlq2NotEmptyAlarm";
pub const ITERATOR_AGE_ALARM: &str = "IteratorAgeAlarm";
pub const DLQ1_AGE_ALARM: &str = "Dlq1OldestMessageAlarm";
pub const DRIFT_ALARM: &str = "DriftAlarm";
/// Only with a limits file: overrides differ from it.
pub const LIMITS_DRIFT_ALARM: &str = "LimitsDriftAlarm";
/// Only with a limits file: the drift check could not compare with it.
pub const LIMITS_FILE_ALARM: &str = "LimitsFileAlarm";
/// The stream mapping dropped records without an on-failure record.
pub const STREAM_DROPPED_EVENTS_ALARM: &str = "StreamDroppedEventsAlarm";
/// Lambda failed to deliver the stream mapping's on-failure records.
pub const STREAM_ON_FAILURE_DELIVERY_ALARM: &str = "StreamOnFailureDeliveryAlarm";
pub const ALARM_TOPIC: &str = "AlarmTopic";
pub const ALARM_TOPIC_KEY: &str = "AlarmTopicKey";
pub const ALARM_EMAIL_SUBSCRIPTION: &str = "AlarmEmailSubscription";
pub const DASHBOARD: &str = "Dashboard";

/// The errors alarm of the function `function` (a logical id).
pub fn errors_alarm(function: &str) -> String {
    format!("{function}ErrorsAlarm")
}

/// The throttles alarm of the function `function` (a logical id).
pub fn throttles_alarm(function: &str) -> String {
    format!("{function}ThrottlesAlarm")
}
