//! Output names of the template, for callers that read a deployed stack
//! (the operator CLI, the end-to-end tests). The template is built from these
//! same constants, and a test checks that each one is an output.

pub const RESOURCES_TABLE: &str = "ResourcesTableName";
pub const RESOURCES_TABLE_ARN: &str = "ResourcesTableArn";
pub const RESOURCES_TABLE_STREAM_ARN: &str = "ResourcesTableStreamArn";
pub const COUNTERS_TABLE: &str = "CountersTableName";
pub const STREAM_COUNTER_FUNCTION: &str = "StreamCounterFunctionName";
pub const DLQ_REPROCESSOR_FUNCTION: &str = "DlqReprocessorFunctionName";
pub const API_FUNCTION: &str = "ApiFunctionName";
pub const API_FUNCTION_URL: &str = "ApiFunctionUrl";
pub const DLQ1_URL: &str = "Dlq1Url";
pub const DLQ1_ARN: &str = "Dlq1Arn";
pub const DLQ2_URL: &str = "Dlq2Url";
pub const DLQ2_ARN: &str = "Dlq2Arn";
/// UUID of the stream → stream counter event source mapping.
pub const STREAM_MAPPING_ID: &str = "StreamMappingId";
/// UUID of the DLQ1 → reprocessor event source mapping.
pub const DLQ1_MAPPING_ID: &str = "Dlq1MappingId";
pub const DLQ2_ALARM_NAME: &str = "Dlq2AlarmName";
pub const ITERATOR_AGE_ALARM_NAME: &str = "IteratorAgeAlarmName";
pub const DROPPED_EVENTS_ALARM_NAME: &str = "StreamDroppedEventsAlarmName";
pub const ON_FAILURE_DELIVERY_ALARM_NAME: &str = "StreamOnFailureDeliveryAlarmName";
pub const DRIFT_CHECK_FUNCTION: &str = "DriftCheckFunctionName";

/// The SNS topic the alarms notify (created, or the one passed in).
pub const ALARM_TOPIC_ARN: &str = "AlarmTopicArn";
pub const DASHBOARD_NAME: &str = "DashboardName";

/// The failed-batch bucket's name: only with `FailedBatchRecords=payload`,
/// so not in [`ALL`].
pub const FAILED_BATCH_BUCKET: &str = "FailedBatchBucketName";

/// Every output of every stack.
pub const ALL: [&str; 21] = [
    RESOURCES_TABLE,
    RESOURCES_TABLE_ARN,
    RESOURCES_TABLE_STREAM_ARN,
    COUNTERS_TABLE,
    STREAM_COUNTER_FUNCTION,
    DLQ_REPROCESSOR_FUNCTION,
    API_FUNCTION,
    API_FUNCTION_URL,
    DLQ1_URL,
    DLQ1_ARN,
    DLQ2_URL,
    DLQ2_ARN,
    STREAM_MAPPING_ID,
    DLQ1_MAPPING_ID,
    DLQ2_ALARM_NAME,
    ITERATOR_AGE_ALARM_NAME,
    DROPPED_EVENTS_ALARM_NAME,
    ON_FAILURE_DELIVERY_ALARM_NAME,
    DRIFT_CHECK_FUNCTION,
    ALARM_TOPIC_ARN,
    DASHBOARD_NAME,
];
