//! [`CALLS`]: which component calls which SDK operation, in which files,
//! on which of the stack's resources, with which of the operation's
//! actions. Keyed by operation, callers and the files or folders the calls
//! are written in, never by function: a rename needs no edit here, a call
//! moved to another file does (`stack/tests/access.rs` checks both ways).

use crate::resources::iam::Action::*;

use super::component::Component::{self, Api, DlqReprocessor, DriftCheck, LimitsPlanner, Operator, StreamCounter};
use super::target::Target::*;
use super::target::{Grant, on};

/// Some components' calls of one SDK operation: what they need of it.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// The SDK client's fluent method, e.g. `batch_get_item`.
    pub operation: &'static str,
    /// The components whose code makes the call. Empty: only the local
    /// runner (`localstack/runner`), playing what Lambda does on AWS.
    pub by: &'static [Component],
    /// Where its calls are written: files (`aws/src/dynamo/read.rs`) or
    /// folders (`ops-cli/src/commands/deploy/`) from the workspace root. A
    /// call of the operation is covered only in a file under one of them
    /// that one of `by` links; each must hold such a call.
    pub at: &'static [&'static str],
    pub grants: &'static [Grant],
    pub why: &'static str,
}

const fn call(
    operation: &'static str,
    by: &'static [Component],
    at: &'static [&'static str],
    grants: &'static [Grant],
    why: &'static str,
) -> Call {
    Call {
        operation,
        by,
        at,
        grants,
        why,
    }
}

/// A call of the operator's alone.
const fn operator(
    operation: &'static str,
    at: &'static [&'static str],
    grants: &'static [Grant],
    why: &'static str,
) -> Call {
    call(operation, &[Operator], at, grants, why)
}

/// Every SDK operation the functions and `counterctl` call, one entry per
/// operation and set of callers, with the files its calls are in.
pub const CALLS: &[Call] = &[
    // The api's scope check (`ScopeAuthorization=principal-tag` only).
    call(
        "list_role_tags",
        &[Api],
        &["handlers/api/src/scope_auth.rs"],
        &[on(IamRoles, &[IamListRoleTags])],
        "the hck-scope-prefix tag of a caller's role",
    ),
    call(
        "list_user_tags",
        &[Api],
        &["handlers/api/src/scope_auth.rs"],
        &[on(IamUsers, &[IamListUserTags])],
        "the hck-scope-prefix tag of a calling IAM user",
    ),
    // The store (aws/src/dynamo/): the request path, the stream
    // processor, the audit and the operator's own maintenance; the limit
    // overrides (aws/src/limits.rs); the drift check's state (aws/src/drift.rs).
    call(
        "update_item",
        &[Api, Operator],
        &["aws/src/dynamo/request.rs", "aws/src/dynamo/store.rs"],
        &[
            on(CountersTable, &[DynamoDbUpdateItem]),
            on(ResourcesTable, &[DynamoDbUpdateItem]),
        ],
        "a create's or delete's best-effort counter move (strict: the reservation); a delete's soft delete",
    ),
    operator(
        "update_item",
        &["aws/src/limits.rs"],
        &[on(CountersTable, &[DynamoDbUpdateItem])],
        "counterctl limit set; limits apply, conditioned on the planned version and write token",
    ),
    call(
        "transact_write_items",
        &[StreamCounter, DlqReprocessor, Operator],
        &["aws/src/dynamo/transact.rs"],
        &[
            on(CountersTable, &[DynamoDbUpdateItem]),
            on(ResourcesTable, &[DynamoDbUpdateItem, DynamoDbDeleteItem]),
        ],
        "StreamStore::transact: the eventual counter's delta with each item's flag flip or hard delete (redrive --replay and verify run the processor too)",
    ),
    call(
        "transact_write_items",
        &[Api, Operator],
        &["aws/src/dynamo/transact.rs"],
        &[on(CountersTable, &[DynamoDbUpdateItem, DynamoDbPutItem])],
        "SequenceStore::claim_sequence: Update of `sequence`, Put of `sequence#<n>` (counterctl seq claim)",
    ),
    operator(
        "transact_write_items",
        &[
            "aws/src/dynamo/transact.rs",
            "aws/src/dynamo/admin.rs",
            "aws/src/limits.rs",
        ],
        &[
            on(
                CountersTable,
                &[DynamoDbUpdateItem, DynamoDbDeleteItem, DynamoDbConditionCheckItem],
            ),
            on(ResourcesTable, &[DynamoDbUpdateItem]),
        ],
        "verify --failure-path takes its own items' count back; audit --repair: counters set under the versions it \
         read, or a strict raise under the shards' epoch; counterctl limit set|clear and limits apply at \
         ScopeKeyShards > 1: every key's copy of the override in one transaction (apply checks the copies it does \
         not write)",
    ),
    call(
        "get_item",
        &[StreamCounter, DlqReprocessor, Api, Operator],
        &["aws/src/dynamo/read.rs"],
        &[on(ResourcesTable, &[DynamoDbGetItem])],
        "ResourceRead::get_resource: a delete's item (per-record stream mode, the request path)",
    ),
    call(
        "get_item",
        &[Api, Operator],
        &["aws/src/dynamo/read.rs"],
        &[on(CountersTable, &[DynamoDbGetItem])],
        "the sequence's last number and a numbered item read back; a limit override read back after an ambiguous write",
    ),
    call(
        "get_item",
        &[DriftCheck, Operator],
        &["aws/src/drift.rs"],
        &[on(KitState, &[DynamoDbGetItem])],
        "the drift check's state item",
    ),
    call(
        "get_item",
        &[Api, StreamCounter, DlqReprocessor, DriftCheck, Operator, LimitsPlanner],
        &["aws/src/layout.rs"],
        &[on(KitLayout, &[DynamoDbGetItem])],
        "the layout record, read by every function at start and by counterctl",
    ),
    operator(
        "put_item",
        &["aws/src/layout.rs"],
        &[on(KitLayout, &[DynamoDbPutItem])],
        "the layout record, created by counterctl deploy after its check of the parameters (attribute_not_exists)",
    ),
    call(
        "put_item",
        &[Api, Operator],
        &["aws/src/dynamo/store.rs"],
        &[on(ResourcesTable, &[DynamoDbPutItem])],
        "a create's item",
    ),
    call(
        "put_item",
        &[DriftCheck, Operator],
        &["aws/src/drift.rs"],
        &[on(KitState, &[DynamoDbPutItem])],
        "the drift check's state item",
    ),
    call(
        "batch_get_item",
        &[StreamCounter, DlqReprocessor, Operator],
        &["aws/src/dynamo/store.rs"],
        &[on(ResourcesTable, &[DynamoDbBatchGetItem])],
        "batched stream mode: a chunk's deletes read their items' state in one request",
    ),
    operator(
        "delete_item",
        &["aws/src/limits.rs", "aws/src/dynamo/admin.rs"],
        &[on(CountersTable, &[DynamoDbDeleteItem])],
        "counterctl limit clear; limits apply, conditioned on the planned version and write token; verify removes \
         its own scopes' counters",
    ),
    call(
        "query",
        &[Api, DriftCheck, Operator, LimitsPlanner],
        &["aws/src/dynamo/store.rs"],
        &[on(CountersTable, &[DynamoDbQuery])],
        "every counter of a scope, one Query (admission, audit, limits plan's usage)",
    ),
    call(
        "query",
        &[DriftCheck, Operator],
        &["aws/src/dynamo/admin.rs"],
        &[on(ResourcesTable, &[DynamoDbQuery])],
        "a scope's items, for the audit",
    ),
    call(
        "scan",
        &[DriftCheck, Operator, LimitsPlanner],
        &["aws/src/limits.rs", "aws/src/drift.rs"],
        &[on(CountersTable, &[DynamoDbScan])],
        "limits plan|export, status --limits and the drift check's limits file: every override and its version; \
         the drift check's scopes, keys only, from its cursor",
    ),
    operator(
        "scan",
        &["aws/src/dynamo/admin.rs"],
        &[on(ResourcesTable, &[DynamoDbScan]), on(CountersTable, &[DynamoDbScan])],
        "audit of every scope",
    ),
    // Streams.
    call(
        "get_shard_iterator",
        &[DlqReprocessor, Operator],
        &["aws/src/streams.rs"],
        &[on(ResourcesStream, &[DynamoDbGetShardIterator])],
        "a failed range's start (AT_SEQUENCE_NUMBER); verify's shard tips",
    ),
    operator(
        "describe_stream",
        &["aws/src/streams.rs"],
        &[on(ResourcesStream, &[DynamoDbDescribeStream])],
        "verify --failure-path finds the open shards",
    ),
    call(
        "get_records",
        &[DlqReprocessor, Operator],
        &["aws/src/streams.rs"],
        &[on(ResourcesStream, &[DynamoDbGetRecords])],
        "a failed range replayed (the reprocessor, redrive --replay); verify --failure-path reads what it wrote",
    ),
    // SQS.
    call(
        "send_message",
        &[DlqReprocessor],
        &["aws/src/sqs.rs"],
        &[on(Dlq2, &[SqsSendMessage])],
        "a message that can never be replayed goes to DLQ2 at once",
    ),
    operator(
        "send_message",
        &["aws/src/sqs.rs"],
        &[on(Dlq1, &[SqsSendMessage])],
        "verify --failure-path puts its failed batch in DLQ1",
    ),
    operator(
        "receive_message",
        &["aws/src/sqs.rs"],
        &[on(Dlq2, &[SqsReceiveMessage])],
        "redrive (peek, replay, move) reads DLQ2",
    ),
    operator(
        "delete_message_batch",
        &["aws/src/sqs.rs"],
        &[on(Dlq2, &[SqsDeleteMessage])],
        "redrive deletes what it moved or replayed",
    ),
    operator(
        "get_queue_attributes",
        &["aws/src/sqs.rs"],
        &[on(Dlq1, &[SqsGetQueueAttributes]), on(Dlq2, &[SqsGetQueueAttributes])],
        "queue depths (status, redrive)",
    ),
    operator(
        "start_message_move_task",
        &["ops-cli/src/commands/redrive/move_task.rs"],
        &[
            on(
                Dlq2,
                &[
                    SqsStartMessageMoveTask,
                    SqsReceiveMessage,
                    SqsDeleteMessage,
                    SqsGetQueueAttributes,
                ],
            ),
            on(Dlq1, &[SqsSendMessage]),
        ],
        "redrive on AWS: SQS moves DLQ2 to DLQ1 with the caller's permissions",
    ),
    operator(
        "list_message_move_tasks",
        &["ops-cli/src/commands/redrive/move_task.rs"],
        &[on(Dlq2, &[SqsListMessageMoveTasks])],
        "redrive follows the move task",
    ),
    operator(
        "change_message_visibility_batch",
        &["ops-cli/src/commands/redrive/receive.rs"],
        &[on(Dlq2, &[SqsChangeMessageVisibility])],
        "redrive --dry-run and peek hand messages back at once",
    ),
    operator(
        "send_message_batch",
        &["ops-cli/src/commands/redrive/transfer.rs"],
        &[on(Dlq1, &[SqsSendMessage])],
        "redrive where no move task exists: send to DLQ1, then delete from DLQ2",
    ),
    // S3.
    call(
        "get_object",
        &[DriftCheck],
        &["aws/src/s3.rs"],
        &[on(LimitsFile, &[S3GetObject])],
        "the limits file the overrides are compared with (`LimitsFileUri`), that one object",
    ),
    call(
        "get_object",
        &[DlqReprocessor, Operator],
        &["aws/src/s3.rs"],
        &[
            on(FailedBatchObjects, &[S3GetObject]),
            on(FailedBatchBucket, &[S3ListBucket]),
        ],
        "a failed batch kept with its records; ListBucket so a missing object is NoSuchKey (permanent), not AccessDenied (retried)",
    ),
    call(
        "put_object",
        &[],
        &["aws/src/s3.rs"],
        &[on(FailedBatchObjects, &[S3PutObject])],
        "only the local runner, playing the stream mapping's S3 destination (PLATFORM_USES: the stream counter's role)",
    ),
    operator(
        "put_object",
        &["ops-cli/src/commands/deploy/"],
        &[on(ArtifactsObjects, &[S3PutObject])],
        "deploy uploads the zips and a template too large to inline, with their SHA-256 checksum",
    ),
    operator(
        "head_bucket",
        &["ops-cli/src/commands/deploy/"],
        &[on(ArtifactsBucket, &[S3ListBucket])],
        "plan and deploy: is the artifacts bucket there",
    ),
    operator(
        "create_bucket",
        &["ops-cli/src/commands/deploy/"],
        &[on(ArtifactsBucket, &[S3CreateBucket])],
        "deploy: the first time",
    ),
    operator(
        "head_object",
        &["ops-cli/src/commands/deploy/"],
        &[
            on(ArtifactsObjects, &[S3GetObject]),
            on(ArtifactsBucket, &[S3ListBucket]),
        ],
        "deploy reuses a zip only if its SHA-256 checksum matches (ChecksumMode needs no other action; \
         ListBucket: a missing key is 404, not 403)",
    ),
    // Lambda.
    operator(
        "list_event_source_mappings",
        &["aws/src/esm.rs"],
        &[on(Everything, &[LambdaListEventSourceMappings])],
        "status: the stack's mappings (no resource-level permission)",
    ),
    operator(
        "get_event_source_mapping",
        &["aws/src/esm.rs"],
        &[on(EventSourceMappings, &[LambdaGetEventSourceMapping])],
        "status and verify read a mapping by its UUID",
    ),
    // The local take-over: only on the embedded emulator (`counterctl
    // deploy` and `local run` with the local target), never on AWS, so no
    // role or operator policy is granted it.
    call(
        "tag_resource",
        &[],
        &["aws/src/esm.rs"],
        &[on(Functions, &[LambdaTagResource])],
        "only on the embedded emulator: tags the function whose mapping the local runner plays",
    ),
    call(
        "update_event_source_mapping",
        &[],
        &["aws/src/esm.rs"],
        &[on(EventSourceMappings, &[LambdaUpdateEventSourceMapping])],
        "only on the embedded emulator: disables its own poller's copy of the mapping",
    ),
    operator(
        "get_function_url_config",
        &["ops-cli/src/commands/status/"],
        &[on(Functions, &[LambdaGetFunctionUrlConfig])],
        "status: the api's URL",
    ),
    operator(
        "list_tags",
        &["ops-cli/src/commands/status/"],
        &[on(Functions, &[LambdaListTags])],
        "status: the local runner's URL tag; status and verify: the runner's takeover and heartbeat tags on the \
         mapping's function (emulators only)",
    ),
    // CloudWatch and CloudFormation.
    operator(
        "describe_alarms",
        &["ops-cli/src/commands/status/"],
        &[on(Alarms, &[CloudWatchDescribeAlarms])],
        "status: alarm states",
    ),
    call(
        "describe_stacks",
        &[Operator, LimitsPlanner],
        &["ops-cli/src/commands/deploy/"],
        &[on(Stack, &[CloudFormationDescribeStacks])],
        "every command reads the stack's outputs",
    ),
    operator(
        "create_change_set",
        &["ops-cli/src/commands/deploy/"],
        &[
            on(Stack, &[CloudFormationCreateChangeSet]),
            on(ArtifactsObjects, &[S3GetObject]),
        ],
        "plan and deploy; CloudFormation reads the uploaded template with the caller's credentials",
    ),
    operator(
        "describe_change_set",
        &["ops-cli/src/commands/deploy/"],
        &[on(Stack, &[CloudFormationDescribeChangeSet])],
        "plan and deploy wait for the change set and read its further pages of changes",
    ),
    operator(
        "delete_change_set",
        &["ops-cli/src/commands/deploy/"],
        &[on(Stack, &[CloudFormationDeleteChangeSet])],
        "plan removes its change set",
    ),
    operator(
        "describe_stack_events",
        &["ops-cli/src/commands/deploy/"],
        &[on(Stack, &[CloudFormationDescribeStackEvents])],
        "deploy and destroy follow the events",
    ),
    operator(
        "execute_change_set",
        &["ops-cli/src/commands/deploy/"],
        &[on(Stack, &[CloudFormationExecuteChangeSet])],
        "deploy",
    ),
    operator(
        "get_caller_identity",
        &["ops-cli/src/commands/deploy/"],
        &[],
        "the account, for the artifacts bucket's name (no permission needed)",
    ),
    operator(
        "get_template",
        &["ops-cli/src/commands/deploy/"],
        &[on(Stack, &[CloudFormationGetTemplate])],
        "plan compares with the deployed template",
    ),
    operator(
        "delete_stack",
        &["ops-cli/src/commands/deploy/"],
        &[on(Stack, &[CloudFormationDeleteStack])],
        "destroy; a stack a plan left in REVIEW_IN_PROGRESS; deploy replaces a stack whose first create rolled back \
         (ROLLBACK_COMPLETE)",
    ),
    operator(
        "list_stack_resources",
        &["ops-cli/src/commands/deploy/"],
        &[on(Stack, &[CloudFormationListStackResources])],
        "status: the stack's alarms; deploy: the tables a failed first create left (an emulator keeps them; \
         AWS's rollback deletes them)",
    ),
    operator(
        "delete_table",
        &["ops-cli/src/commands/deploy/"],
        &[
            on(ResourcesTable, &[DynamoDbDeleteTable]),
            on(CountersTable, &[DynamoDbDeleteTable]),
        ],
        "destroy --delete-data",
    ),
    operator(
        "describe_table",
        &["ops-cli/src/commands/deploy/", "ops-cli/src/commands/replicas.rs"],
        &[
            on(ResourcesTable, &[DynamoDbDescribeTable]),
            on(CountersTable, &[DynamoDbDescribeTable]),
        ],
        "destroy --delete-data waits for the deletion; status and deploy: the tables' global-table replicas, warm \
         throughput and maximum",
    ),
    operator(
        "describe_contributor_insights",
        &["ops-cli/src/commands/replicas.rs"],
        &[
            on(ResourcesTable, &[DynamoDbDescribeContributorInsights]),
            on(CountersTable, &[DynamoDbDescribeContributorInsights]),
        ],
        "status: the tables' Contributor Insights",
    ),
];
