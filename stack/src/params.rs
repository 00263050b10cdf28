//! Parameter names of the template, for callers that pass values at deploy
//! time (the operator CLI). The template is built from these same constants,
//! so a rename here is a compile error there, not a failed deploy.

/// Prefix of every physical name (tables, queues, functions, log groups, alarms).
pub const NAME_PREFIX: &str = "NamePrefix";
/// Limit for scopes without a per-scope override.
pub const DEFAULT_LIMIT: &str = "DefaultLimit";
/// The largest [`DEFAULT_LIMIT`] (its MaxValue), and the largest override
/// `counterctl limit set` and a limits file accept: one maximum, so every
/// override can be exported to a file and read back.
pub const MAX_LIMIT: u64 = hybrid_counter::limits::MAX_LIMIT;
/// Stream event source mapping: records per batch.
pub const STREAM_BATCH_SIZE: &str = "StreamBatchSize";
/// Stream event source mapping: concurrent batches per shard.
pub const PARALLELIZATION_FACTOR: &str = "ParallelizationFactor";
/// Stream event source mapping: retries before the on-failure destination.
pub const MAXIMUM_RETRY_ATTEMPTS: &str = "MaximumRetryAttempts";
/// Stream event source mapping: record age before the on-failure destination.
pub const MAXIMUM_RECORD_AGE_IN_SECONDS: &str = "MaximumRecordAgeInSeconds";
/// DLQ1 receives before a message moves to DLQ2.
pub const DLQ1_MAX_RECEIVE_COUNT: &str = "Dlq1MaxReceiveCount";
/// Number of eventual-counter shards.
pub const EC_SHARD_COUNT: &str = "EcShardCount";
/// Number of best-effort-counter shards.
pub const BE_SHARD_COUNT: &str = "BeShardCount";
/// Partition keys each scope's items are spread over (`scope#k`).
pub const SCOPE_KEY_SHARDS: &str = "ScopeKeyShards";
/// Resources keys per counters key (`scope#r`, `r mod N` its counters key).
pub const RESOURCE_KEY_SPREAD: &str = "ResourceKeySpread";
/// Memory of every function, MB.
pub const LAMBDA_MEMORY_SIZE: &str = "LambdaMemorySize";
/// Instruction set of every function (`arm64` or `x86_64`).
pub const LAMBDA_ARCHITECTURE: &str = "LambdaArchitecture";
/// S3 bucket holding the function zips.
pub const ARTIFACTS_BUCKET: &str = "ArtifactsBucket";
/// S3 key of the stream counter zip.
pub const STREAM_COUNTER_CODE_KEY: &str = "StreamCounterCodeKey";
/// S3 key of the DLQ reprocessor zip.
pub const DLQ_REPROCESSOR_CODE_KEY: &str = "DlqReprocessorCodeKey";
/// S3 key of the API zip.
pub const API_CODE_KEY: &str = "ApiCodeKey";
/// Iterator age (ms) above which the stream consumer counts as behind.
pub const ITERATOR_AGE_ALARM_MILLISECONDS: &str = "IteratorAgeAlarmMilliseconds";
/// An existing SNS topic for the alarms; empty: the stack creates one.
pub const ALARM_TOPIC_ARN: &str = "AlarmTopicArn";
/// An email address subscribed to the created alarm topic; empty: none.
pub const ALARM_EMAIL: &str = "AlarmEmail";
/// Age (s) of DLQ1's oldest message above which the reprocessor counts as
/// stuck.
pub const DLQ1_AGE_ALARM_SECONDS: &str = "Dlq1AgeAlarmSeconds";
/// How the API admits a create: `best-effort` or `strict` (reservations).
pub const ADMISSION_MODE: &str = "AdmissionMode";
/// How the stream consumer writes a batch: `batched` or `per-record`.
pub const PROCESSING_MODE: &str = "ProcessingMode";

/// Where the stream mapping sends a failed batch: `payload` (S3, with its
/// records) or `pointer` (DLQ1, its sequence range).
pub const FAILED_BATCH_RECORDS: &str = "FailedBatchRecords";
/// The IAM principal (besides the reprocessor) allowed to read the
/// failed-batch bucket: the operator's, for `counterctl redrive --replay`.
pub const OPERATOR_PRINCIPAL_ARN: &str = "OperatorPrincipalArn";

/// Schedule expression of the drift check (`rate(...)` or `cron(...)`);
/// empty: off.
pub const DRIFT_CHECK_SCHEDULE: &str = "DriftCheckSchedule";
/// Items one drift-check run may read.
pub const DRIFT_CHECK_READ_BUDGET: &str = "DriftCheckReadBudget";
/// S3 key of the drift check zip.
pub const DRIFT_CHECK_CODE_KEY: &str = "DriftCheckCodeKey";
/// The limits file the drift check compares the overrides with
/// (`s3://bucket/key`); empty: no comparison.
pub const LIMITS_FILE_URI: &str = "LimitsFileUri";

/// Only for the embedded emulator: an AWS principal that may also assume
/// the functions' roles, so the local runner runs each function with its
/// own role; empty (on AWS): the roles trust `lambda.amazonaws.com` alone.
pub const EMULATOR_ROLE_ASSUMER: &str = "EmulatorRoleAssumer";
/// Which scopes an API caller may act on: `none` (single trust) or
/// `principal-tag` (the caller's `hck-scope-prefix` IAM tag prefixes them).
pub const SCOPE_AUTHORIZATION: &str = "ScopeAuthorization";
/// The IAM path of the roles and users whose tags the api may read under
/// `principal-tag` (e.g. `/hck-callers/`): its callers must be created there.
pub const SCOPE_CALLER_PATH: &str = "ScopeCallerPath";
/// The template condition under which the api reads its callers' tags
/// (`ScopeAuthorization=principal-tag`).
pub const SCOPE_BY_TAG: &str = "ScopeByPrincipalTag";

/// Warm throughput of the resources table, read units per second; 0: not set.
pub const RESOURCES_TABLE_WARM_READ: &str = "ResourcesTableWarmReadUnitsPerSecond";
/// Warm throughput of the resources table, write units per second; 0: not set.
pub const RESOURCES_TABLE_WARM_WRITE: &str = "ResourcesTableWarmWriteUnitsPerSecond";
/// Most read request units per second of the resources table; 0: not set.
pub const RESOURCES_TABLE_MAX_READ: &str = "ResourcesTableMaxReadRequestUnits";
/// Most write request units per second of the resources table; 0: not set.
pub const RESOURCES_TABLE_MAX_WRITE: &str = "ResourcesTableMaxWriteRequestUnits";
/// Warm throughput of the counters table, read units per second; 0: not set.
pub const COUNTERS_TABLE_WARM_READ: &str = "CountersTableWarmReadUnitsPerSecond";
/// Warm throughput of the counters table, write units per second; 0: not set.
pub const COUNTERS_TABLE_WARM_WRITE: &str = "CountersTableWarmWriteUnitsPerSecond";
/// Most read request units per second of the counters table; 0: not set.
pub const COUNTERS_TABLE_MAX_READ: &str = "CountersTableMaxReadRequestUnits";
/// Most write request units per second of the counters table; 0: not set.
pub const COUNTERS_TABLE_MAX_WRITE: &str = "CountersTableMaxWriteRequestUnits";
/// CloudWatch Contributor Insights on both tables: `disabled` or `throttled-keys`.
pub const CONTRIBUTOR_INSIGHTS: &str = "ContributorInsights";

/// The IAM managed policy set as permissions boundary on every role of the
/// stack; empty: none (`stack::boundary`).
pub const ROLE_PERMISSIONS_BOUNDARY_ARN: &str = "RolePermissionsBoundaryArn";

/// Every parameter, in declaration order.
pub const ALL: [&str; 42] = [
    NAME_PREFIX,
    DEFAULT_LIMIT,
    STREAM_BATCH_SIZE,
    PARALLELIZATION_FACTOR,
    MAXIMUM_RETRY_ATTEMPTS,
    MAXIMUM_RECORD_AGE_IN_SECONDS,
    DLQ1_MAX_RECEIVE_COUNT,
    EC_SHARD_COUNT,
    BE_SHARD_COUNT,
    SCOPE_KEY_SHARDS,
    RESOURCE_KEY_SPREAD,
    LAMBDA_MEMORY_SIZE,
    LAMBDA_ARCHITECTURE,
    ARTIFACTS_BUCKET,
    STREAM_COUNTER_CODE_KEY,
    DLQ_REPROCESSOR_CODE_KEY,
    API_CODE_KEY,
    ITERATOR_AGE_ALARM_MILLISECONDS,
    ALARM_TOPIC_ARN,
    ALARM_EMAIL,
    DLQ1_AGE_ALARM_SECONDS,
    ADMISSION_MODE,
    PROCESSING_MODE,
    SCOPE_AUTHORIZATION,
    SCOPE_CALLER_PATH,
    FAILED_BATCH_RECORDS,
    OPERATOR_PRINCIPAL_ARN,
    DRIFT_CHECK_SCHEDULE,
    DRIFT_CHECK_READ_BUDGET,
    DRIFT_CHECK_CODE_KEY,
    LIMITS_FILE_URI,
    EMULATOR_ROLE_ASSUMER,
    ROLE_PERMISSIONS_BOUNDARY_ARN,
    RESOURCES_TABLE_WARM_READ,
    RESOURCES_TABLE_WARM_WRITE,
    RESOURCES_TABLE_MAX_READ,
    RESOURCES_TABLE_MAX_WRITE,
    COUNTERS_TABLE_WARM_READ,
    COUNTERS_TABLE_WARM_WRITE,
    COUNTERS_TABLE_MAX_READ,
    COUNTERS_TABLE_MAX_WRITE,
    CONTRIBUTOR_INSIGHTS,
];
