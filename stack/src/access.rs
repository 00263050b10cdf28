//! What the kit's code calls on AWS and what IAM checks for it: the one
//! table the function roles are checked against and the operator's policy
//! is generated from.
//!
//! * [`OPERATIONS`]: each SDK operation the kit calls (by its fluent method
//!   name, `batch_get_item`) and the IAM actions that authorize it. Most are
//!   one action of the same name; a `TransactWriteItems` has no action of
//!   its own and is authorized per item as `UpdateItem`, `PutItem`,
//!   `DeleteItem` or `ConditionCheckItem`; `BatchGetItem` is its own action,
//!   which a `GetItem` grant does not cover; `StartMessageMoveTask` needs
//!   the receive side on the source queue and `SendMessage` on the
//!   destination.
//! * [`CALL_SITES`]: where the code makes each call (file and enclosing
//!   function), which components reach it, and on which of the stack's
//!   resources with which of the operation's actions.
//! * [`PLATFORM_USES`]: what AWS does with a function's role on its behalf:
//!   the event source mappings read their source and write the on-failure
//!   destination, Lambda writes the logs.
//!
//! The stack's tests (`stack/tests/access.rs`) scan the Rust sources of the
//! crates the functions and `counterctl` link for SDK calls and require each
//! to be a call site here, then require each role of the template to grant
//! exactly what its component's call sites and platform uses need, on the
//! right resource, under each `FailedBatchRecords` mode: adding an SDK call
//! without a grant, or keeping a grant nothing uses, fails them.
//! [`crate::policies::operator_policy`] renders the operator's entries as the IAM policy the
//! operator or CI role needs to run `counterctl`.
//!
//! Limits, stated where they bite: which components reach a call site, and
//! which table or queue it touches, are declared here, not derived from a
//! call graph (the tests only bound the components by the crates and cargo
//! features each one links); two calls of one operation in one function
//! count as one call site; the operator's policy covers `counterctl`'s own
//! calls, not what CloudFormation creates with the caller's credentials.

use serde_json::{Value, json};

use crate::expr::Expr;
use crate::failed_batches::{KEEP_PAYLOAD, KEEP_POINTER};
use crate::logical;
use crate::resources::iam::Action;
use hybrid_counter::keys::KIT_STATE_SCOPE;

use Action::*;

/// Who makes a call: one of the deployed functions (with its role), the
/// operator running `counterctl` (a person or CI, with the operator
/// policy), or a CI job that only plans limits (`counterctl limits
/// plan|export`, with the read-only policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    StreamCounter,
    DlqReprocessor,
    Api,
    DriftCheck,
    Operator,
    /// `counterctl limits plan|export` only: reads, never a write.
    LimitsPlanner,
}

impl Component {
    /// The deployed functions, each with a role of its own.
    pub const FUNCTIONS: [Component; 4] = [
        Component::StreamCounter,
        Component::DlqReprocessor,
        Component::Api,
        Component::DriftCheck,
    ];

    /// Its name, as the functions' physical names end (`counterctl` for the operator).
    pub fn name(self) -> &'static str {
        match self {
            Component::StreamCounter => "stream-counter",
            Component::DlqReprocessor => "dlq-reprocessor",
            Component::Api => "api",
            Component::DriftCheck => "drift-check",
            Component::Operator => "counterctl",
            Component::LimitsPlanner => "counterctl limits plan",
        }
    }

    /// The logical ids of the function's role and log group; `None` for the operator.
    pub fn role_and_log_group(self) -> Option<(&'static str, &'static str)> {
        match self {
            Component::StreamCounter => Some((logical::STREAM_COUNTER_ROLE, logical::STREAM_COUNTER_LOG_GROUP)),
            Component::DlqReprocessor => Some((logical::DLQ_REPROCESSOR_ROLE, logical::DLQ_REPROCESSOR_LOG_GROUP)),
            Component::Api => Some((logical::API_ROLE, logical::API_LOG_GROUP)),
            Component::DriftCheck => Some((logical::DRIFT_CHECK_ROLE, logical::DRIFT_CHECK_LOG_GROUP)),
            Component::Operator | Component::LimitsPlanner => None,
        }
    }
}

/// What a grant is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    ResourcesTable,
    CountersTable,
    /// The counters table, only under the partition key of the kit's own
    /// state ([`KIT_STATE_SCOPE`], `dynamodb:LeadingKeys`).
    KitState,
    ResourcesStream,
    Dlq1,
    Dlq2,
    /// The failed-batch bucket itself (`FailedBatchRecords=payload` only).
    FailedBatchBucket,
    /// Its objects (`payload` only).
    FailedBatchObjects,
    /// The limits file's object (`LimitsFileUri`, only when set).
    LimitsFile,
    /// The calling function's own log group.
    OwnLogGroup,
    /// The CloudFormation stack (its change sets are authorized on it).
    Stack,
    /// The bucket `counterctl deploy` uploads the zips and the template to.
    ArtifactsBucket,
    ArtifactsObjects,
    /// The stack's functions.
    Functions,
    /// Event source mappings (their ARNs end in a UUID nobody can predict).
    EventSourceMappings,
    /// The stack's alarms.
    Alarms,
    /// This account's IAM roles and users under `ScopeCallerPath`: the api's callers.
    IamRoles,
    IamUsers,
    /// `*`: for actions without resource-level permissions.
    Everything,
}

impl Target {
    /// The template condition under which the target exists.
    pub fn only_if(self) -> Option<&'static str> {
        match self {
            Target::FailedBatchBucket | Target::FailedBatchObjects => Some(KEEP_PAYLOAD),
            Target::IamRoles | Target::IamUsers => Some(crate::params::SCOPE_BY_TAG),
            Target::LimitsFile => Some(logical::LIMITS_FILE_SET),
            _ => None,
        }
    }

    /// The target as the template names it for `component`'s role; `None`
    /// for the operator's targets, which are outside the template.
    pub fn in_template(self, component: Component) -> Option<Expr> {
        let arn = |id: &str| Expr::get_att(id, "Arn");
        match self {
            Target::ResourcesTable => Some(arn(logical::RESOURCES_TABLE)),
            Target::CountersTable | Target::KitState => Some(arn(logical::COUNTERS_TABLE)),
            Target::ResourcesStream => Some(Expr::get_att(logical::RESOURCES_TABLE, "StreamArn")),
            Target::Dlq1 => Some(arn(logical::DLQ1)),
            Target::Dlq2 => Some(arn(logical::DLQ2)),
            Target::FailedBatchBucket => Some(arn(logical::FAILED_BATCH_BUCKET)),
            Target::FailedBatchObjects => Some(Expr::sub(format!("${{{}.Arn}}/*", logical::FAILED_BATCH_BUCKET))),
            Target::LimitsFile => Some(limits_file_arn()),
            Target::OwnLogGroup => component.role_and_log_group().map(|(_, group)| arn(group)),
            Target::IamRoles => Some(scope_callers("role")),
            Target::IamUsers => Some(scope_callers("user")),
            Target::Stack
            | Target::ArtifactsBucket
            | Target::ArtifactsObjects
            | Target::Functions
            | Target::EventSourceMappings
            | Target::Alarms
            | Target::Everything => None,
        }
    }

    /// The condition block a grant on the target carries, if any.
    pub fn condition(self) -> Option<Value> {
        match self {
            Target::KitState => Some(json!({
                "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [KIT_STATE_SCOPE]}
            })),
            _ => None,
        }
    }
}

/// The roles and the users under `ScopeCallerPath`, as IAM ARNs name them
/// (`arn:aws:iam::<account>:role<path><name>`: the path is part of the ARN,
/// <https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-arns>).
pub fn scope_callers(kind: &str) -> Expr {
    Expr::sub(format!(
        "arn:${{AWS::Partition}}:iam::${{AWS::AccountId}}:{kind}${{{}}}*",
        crate::params::SCOPE_CALLER_PATH
    ))
}

/// The limits file's object as an ARN, `arn:<partition>:s3:::<bucket>/<key>`
/// from `LimitsFileUri`'s `s3://<bucket>/<key>` (only meaningful under
/// [`logical::LIMITS_FILE_SET`]).
pub fn limits_file_arn() -> Expr {
    Expr::join(
        "",
        vec![
            "arn:".into(),
            Expr::reference(crate::expr::AWS_PARTITION),
            ":s3:::".into(),
            Expr::select(1, Expr::split("s3://", Expr::reference(crate::params::LIMITS_FILE_URI))),
        ],
    )
}

/// An SDK operation and the IAM actions that authorize it.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    /// The SDK crate, e.g. `aws-sdk-dynamodb`.
    pub sdk: &'static str,
    /// The client's fluent method, e.g. `batch_get_item`.
    pub method: &'static str,
    /// Every call site needs all of these.
    pub required: &'static [Action],
    /// A call site needs those of these its request carries: the item
    /// actions of a transaction, `ListBucket` so a missing key reads
    /// `NoSuchKey` instead of `AccessDenied`, the template a change set
    /// reads from S3 with the caller's credentials.
    pub optional: &'static [Action],
}

const fn op(sdk: &'static str, method: &'static str, required: &'static [Action]) -> Operation {
    Operation {
        sdk,
        method,
        required,
        optional: &[],
    }
}

const DYNAMODB: &str = "aws-sdk-dynamodb";
const STREAMS: &str = "aws-sdk-dynamodbstreams";
const SQS: &str = "aws-sdk-sqs";
const S3: &str = "aws-sdk-s3";
const LAMBDA: &str = "aws-sdk-lambda";
const CLOUDFORMATION: &str = "aws-sdk-cloudformation";
const CLOUDWATCH: &str = "aws-sdk-cloudwatch";
const STS: &str = "aws-sdk-sts";
const IAM: &str = "aws-sdk-iam";

/// Every SDK operation the kit's code calls.
pub const OPERATIONS: &[Operation] = &[
    op(DYNAMODB, "get_item", &[DynamoDbGetItem]),
    op(DYNAMODB, "batch_get_item", &[DynamoDbBatchGetItem]),
    op(DYNAMODB, "put_item", &[DynamoDbPutItem]),
    op(DYNAMODB, "update_item", &[DynamoDbUpdateItem]),
    op(DYNAMODB, "delete_item", &[DynamoDbDeleteItem]),
    op(DYNAMODB, "query", &[DynamoDbQuery]),
    op(DYNAMODB, "scan", &[DynamoDbScan]),
    Operation {
        sdk: DYNAMODB,
        method: "transact_write_items",
        required: &[],
        optional: &[
            DynamoDbUpdateItem,
            DynamoDbPutItem,
            DynamoDbDeleteItem,
            DynamoDbConditionCheckItem,
        ],
    },
    op(DYNAMODB, "describe_table", &[DynamoDbDescribeTable]),
    op(
        DYNAMODB,
        "describe_contributor_insights",
        &[DynamoDbDescribeContributorInsights],
    ),
    op(DYNAMODB, "delete_table", &[DynamoDbDeleteTable]),
    op(STREAMS, "describe_stream", &[DynamoDbDescribeStream]),
    op(STREAMS, "get_shard_iterator", &[DynamoDbGetShardIterator]),
    op(STREAMS, "get_records", &[DynamoDbGetRecords]),
    op(IAM, "list_role_tags", &[IamListRoleTags]),
    op(IAM, "list_user_tags", &[IamListUserTags]),
    op(SQS, "send_message", &[SqsSendMessage]),
    op(SQS, "send_message_batch", &[SqsSendMessage]),
    op(SQS, "receive_message", &[SqsReceiveMessage]),
    op(SQS, "delete_message_batch", &[SqsDeleteMessage]),
    op(SQS, "change_message_visibility_batch", &[SqsChangeMessageVisibility]),
    op(SQS, "get_queue_attributes", &[SqsGetQueueAttributes]),
    // https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html
    op(
        SQS,
        "start_message_move_task",
        &[
            SqsStartMessageMoveTask,
            SqsReceiveMessage,
            SqsDeleteMessage,
            SqsGetQueueAttributes,
            SqsSendMessage,
        ],
    ),
    op(SQS, "list_message_move_tasks", &[SqsListMessageMoveTasks]),
    Operation {
        sdk: S3,
        method: "get_object",
        required: &[S3GetObject],
        optional: &[S3ListBucket],
    },
    Operation {
        sdk: S3,
        method: "head_object",
        required: &[S3GetObject],
        optional: &[S3ListBucket],
    },
    op(S3, "put_object", &[S3PutObject]),
    op(S3, "head_bucket", &[S3ListBucket]),
    op(S3, "create_bucket", &[S3CreateBucket]),
    op(LAMBDA, "list_event_source_mappings", &[LambdaListEventSourceMappings]),
    op(LAMBDA, "get_event_source_mapping", &[LambdaGetEventSourceMapping]),
    op(LAMBDA, "get_function_url_config", &[LambdaGetFunctionUrlConfig]),
    op(LAMBDA, "list_tags", &[LambdaListTags]),
    op(LAMBDA, "tag_resource", &[LambdaTagResource]),
    op(LAMBDA, "update_event_source_mapping", &[LambdaUpdateEventSourceMapping]),
    op(CLOUDFORMATION, "describe_stacks", &[CloudFormationDescribeStacks]),
    op(
        CLOUDFORMATION,
        "describe_stack_events",
        &[CloudFormationDescribeStackEvents],
    ),
    op(
        CLOUDFORMATION,
        "list_stack_resources",
        &[CloudFormationListStackResources],
    ),
    op(CLOUDFORMATION, "get_template", &[CloudFormationGetTemplate]),
    Operation {
        sdk: CLOUDFORMATION,
        method: "create_change_set",
        required: &[CloudFormationCreateChangeSet],
        optional: &[S3GetObject],
    },
    op(
        CLOUDFORMATION,
        "describe_change_set",
        &[CloudFormationDescribeChangeSet],
    ),
    op(CLOUDFORMATION, "execute_change_set", &[CloudFormationExecuteChangeSet]),
    op(CLOUDFORMATION, "delete_change_set", &[CloudFormationDeleteChangeSet]),
    op(CLOUDFORMATION, "delete_stack", &[CloudFormationDeleteStack]),
    op(CLOUDWATCH, "describe_alarms", &[CloudWatchDescribeAlarms]),
    // No permission is required to call GetCallerIdentity.
    op(STS, "get_caller_identity", &[]),
];

/// The operation whose fluent method is `method`.
pub fn operation(method: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|o| o.method == method)
}

/// Some of an operation's actions on one target.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub on: Target,
    pub actions: &'static [Action],
}

const fn on(on: Target, actions: &'static [Action]) -> Grant {
    Grant { on, actions }
}

/// One SDK call in the kit's code.
#[derive(Debug, Clone, Copy)]
pub struct CallSite {
    /// Path from the workspace root.
    pub file: &'static str,
    /// The function the call is written in.
    pub function: &'static str,
    /// [`Operation::method`].
    pub operation: &'static str,
    /// The components whose code reaches it. Empty: only the local runner
    /// (`localstack/runner`), playing what Lambda does on AWS.
    pub by: &'static [Component],
    pub grants: &'static [Grant],
    pub why: &'static str,
}

use Component::{Api, DlqReprocessor, DriftCheck, LimitsPlanner, Operator, StreamCounter};
use Target::*;

const DYNAMO: &str = "aws/src/dynamo.rs";
const DRIFT: &str = "aws/src/drift.rs";
const LIMITS: &str = "aws/src/limits.rs";
const SQS_RS: &str = "aws/src/sqs.rs";
const S3_RS: &str = "aws/src/s3.rs";
const STREAMS_RS: &str = "aws/src/streams.rs";
const ESM_RS: &str = "aws/src/esm.rs";
const STATUS: &str = "ops-cli/src/commands/status.rs";
const CFN: &str = "ops-cli/src/commands/deploy/cfn.rs";
const PACKAGE: &str = "ops-cli/src/commands/deploy/package.rs";
const PROPOSAL: &str = "ops-cli/src/commands/deploy/proposal.rs";
const DESTROY: &str = "ops-cli/src/commands/deploy/destroy.rs";
const REPLICAS: &str = "ops-cli/src/commands/replicas.rs";
const MOVE_TASK: &str = "ops-cli/src/commands/redrive/move_task.rs";
const SCOPE_AUTH: &str = "handlers/api/src/scope_auth.rs";

const fn call(
    file: &'static str,
    function: &'static str,
    operation: &'static str,
    by: &'static [Component],
    grants: &'static [Grant],
    why: &'static str,
) -> CallSite {
    CallSite {
        file,
        function,
        operation,
        by,
        grants,
        why,
    }
}

/// Every SDK call of the code the functions and `counterctl` run.
pub const CALL_SITES: &[CallSite] = &[
    // The api's scope check (`ScopeAuthorization=principal-tag` only).
    call(
        SCOPE_AUTH,
        "tag",
        "list_role_tags",
        &[Api],
        &[on(IamRoles, &[IamListRoleTags])],
        "the hck-scope-prefix tag of a caller's role",
    ),
    call(
        SCOPE_AUTH,
        "tag",
        "list_user_tags",
        &[Api],
        &[on(IamUsers, &[IamListUserTags])],
        "the hck-scope-prefix tag of a calling IAM user",
    ),
    // The store (aws/src/dynamo.rs): the request path, the stream
    // processor, the audit and the operator's own maintenance.
    call(
        DYNAMO,
        "update_best_effort",
        "update_item",
        &[Api, Operator],
        &[on(CountersTable, &[DynamoDbUpdateItem])],
        "a create's or delete's best-effort counter move (strict: the reservation)",
    ),
    call(
        DYNAMO,
        "send_transaction",
        "transact_write_items",
        &[StreamCounter, DlqReprocessor, Operator],
        &[
            on(CountersTable, &[DynamoDbUpdateItem]),
            on(ResourcesTable, &[DynamoDbUpdateItem, DynamoDbDeleteItem]),
        ],
        "Store::transact: the eventual counter's delta with each item's flag flip or hard delete (redrive --replay and verify run the processor too)",
    ),
    call(
        DYNAMO,
        "send_transaction",
        "transact_write_items",
        &[Api, Operator],
        &[on(CountersTable, &[DynamoDbUpdateItem, DynamoDbPutItem])],
        "Store::claim_sequence: Update of `sequence`, Put of `sequence#<n>` (counterctl seq claim)",
    ),
    call(
        DYNAMO,
        "get_consistent",
        "get_item",
        &[StreamCounter, DlqReprocessor, Api, Operator],
        &[on(ResourcesTable, &[DynamoDbGetItem])],
        "Store::get_resource: a delete's item (per-record stream mode, the request path)",
    ),
    call(
        DYNAMO,
        "get_consistent",
        "get_item",
        &[Api, Operator],
        &[on(CountersTable, &[DynamoDbGetItem])],
        "the sequence's last number and a numbered item read back; a limit override read back after an ambiguous write",
    ),
    call(
        DYNAMO,
        "uncount",
        "transact_write_items",
        &[Operator],
        &[
            on(CountersTable, &[DynamoDbUpdateItem]),
            on(ResourcesTable, &[DynamoDbUpdateItem]),
        ],
        "verify --failure-path takes its own items' count back",
    ),
    call(
        DYNAMO,
        "put_resource",
        "put_item",
        &[Api, Operator],
        &[on(ResourcesTable, &[DynamoDbPutItem])],
        "a create's item",
    ),
    call(
        DYNAMO,
        "get_resources",
        "batch_get_item",
        &[StreamCounter, DlqReprocessor, Operator],
        &[on(ResourcesTable, &[DynamoDbBatchGetItem])],
        "batched stream mode: a chunk's deletes read their items' state in one request",
    ),
    call(
        DYNAMO,
        "mark_deleted",
        "update_item",
        &[Api, Operator],
        &[on(ResourcesTable, &[DynamoDbUpdateItem])],
        "a delete's soft delete",
    ),
    call(
        DYNAMO,
        "counter_items",
        "query",
        &[Api, DriftCheck, Operator, LimitsPlanner],
        &[on(CountersTable, &[DynamoDbQuery])],
        "every counter of a scope, one Query (admission, audit, limits plan's usage)",
    ),
    call(
        DYNAMO,
        "send_repair",
        "transact_write_items",
        &[Operator],
        &[on(CountersTable, &[DynamoDbUpdateItem])],
        "audit --repair: counters set under the versions it read, or a strict raise under the shards' epoch",
    ),
    // The limit overrides (aws/src/limits.rs): `limit set|clear` and
    // `limits plan|apply|export`.
    call(
        LIMITS,
        "send_limit_write",
        "update_item",
        &[Operator],
        &[on(CountersTable, &[DynamoDbUpdateItem])],
        "counterctl limit set; limits apply, conditioned on the planned version and write token",
    ),
    call(
        LIMITS,
        "send_limit_write",
        "delete_item",
        &[Operator],
        &[on(CountersTable, &[DynamoDbDeleteItem])],
        "counterctl limit clear; limits apply, conditioned on the planned version and write token",
    ),
    call(
        LIMITS,
        "scan_limits",
        "scan",
        &[DriftCheck, Operator, LimitsPlanner],
        &[on(CountersTable, &[DynamoDbScan])],
        "limits plan|export, status --limits and the drift check's limits file: every override and its version",
    ),
    call(
        DYNAMO,
        "remove_scope_counters",
        "delete_item",
        &[Operator],
        &[on(CountersTable, &[DynamoDbDeleteItem])],
        "verify removes its own scopes' counters",
    ),
    call(
        DYNAMO,
        "scope_rows",
        "query",
        &[DriftCheck, Operator],
        &[on(ResourcesTable, &[DynamoDbQuery])],
        "a scope's items, for the audit",
    ),
    call(
        DYNAMO,
        "scan_scope_counts",
        "scan",
        &[Operator],
        &[on(ResourcesTable, &[DynamoDbScan])],
        "audit of every scope",
    ),
    call(
        DYNAMO,
        "scan_counters",
        "scan",
        &[Operator],
        &[on(CountersTable, &[DynamoDbScan])],
        "audit of every scope",
    ),
    // The drift check's comparison with the limits file (`LimitsFileUri`).
    call(
        S3_RS,
        "get_object_bytes",
        "get_object",
        &[DriftCheck],
        &[on(LimitsFile, &[S3GetObject])],
        "the limits file the overrides are compared with, that one object",
    ),
    // The drift check's cursor and last run.
    call(
        DRIFT,
        "scan_counter_keys",
        "scan",
        &[DriftCheck, Operator],
        &[on(CountersTable, &[DynamoDbScan])],
        "the scopes, keys only, from the cursor",
    ),
    call(
        DRIFT,
        "drift_state",
        "get_item",
        &[DriftCheck, Operator],
        &[on(KitState, &[DynamoDbGetItem])],
        "the drift check's state item",
    ),
    call(
        DRIFT,
        "put_drift_state",
        "put_item",
        &[DriftCheck, Operator],
        &[on(KitState, &[DynamoDbPutItem])],
        "the drift check's state item",
    ),
    // Streams.
    call(
        STREAMS_RS,
        "iterator",
        "get_shard_iterator",
        &[DlqReprocessor, Operator],
        &[on(ResourcesStream, &[DynamoDbGetShardIterator])],
        "a failed range's start (AT_SEQUENCE_NUMBER); verify's shard tips",
    ),
    call(
        STREAMS_RS,
        "shards",
        "describe_stream",
        &[Operator],
        &[on(ResourcesStream, &[DynamoDbDescribeStream])],
        "verify --failure-path finds the open shards",
    ),
    call(
        STREAMS_RS,
        "read_from",
        "get_records",
        &[Operator],
        &[on(ResourcesStream, &[DynamoDbGetRecords])],
        "verify --failure-path reads what it wrote",
    ),
    call(
        STREAMS_RS,
        "read_range",
        "get_records",
        &[DlqReprocessor, Operator],
        &[on(ResourcesStream, &[DynamoDbGetRecords])],
        "a failed range replayed (the reprocessor, redrive --replay)",
    ),
    // SQS.
    call(
        SQS_RS,
        "send",
        "send_message",
        &[DlqReprocessor],
        &[on(Dlq2, &[SqsSendMessage])],
        "a message that can never be replayed goes to DLQ2 at once",
    ),
    call(
        SQS_RS,
        "send",
        "send_message",
        &[Operator],
        &[on(Dlq1, &[SqsSendMessage])],
        "verify --failure-path puts its failed batch in DLQ1",
    ),
    call(
        SQS_RS,
        "receive",
        "receive_message",
        &[Operator],
        &[on(Dlq2, &[SqsReceiveMessage])],
        "redrive (peek, replay, move) reads DLQ2",
    ),
    call(
        SQS_RS,
        "delete_batch",
        "delete_message_batch",
        &[Operator],
        &[on(Dlq2, &[SqsDeleteMessage])],
        "redrive deletes what it moved or replayed",
    ),
    call(
        SQS_RS,
        "get_attributes",
        "get_queue_attributes",
        &[Operator],
        &[on(Dlq1, &[SqsGetQueueAttributes]), on(Dlq2, &[SqsGetQueueAttributes])],
        "queue depths (status, redrive)",
    ),
    // S3.
    call(
        S3_RS,
        "get_object_bytes",
        "get_object",
        &[DlqReprocessor, Operator],
        &[
            on(FailedBatchObjects, &[S3GetObject]),
            on(FailedBatchBucket, &[S3ListBucket]),
        ],
        "a failed batch kept with its records; ListBucket so a missing object is NoSuchKey (permanent), not AccessDenied (retried)",
    ),
    call(
        S3_RS,
        "put_failed_batch",
        "put_object",
        &[],
        &[on(FailedBatchObjects, &[S3PutObject])],
        "only the local runner, playing the stream mapping's S3 destination (PLATFORM_USES: the stream counter's role)",
    ),
    // Lambda.
    call(
        ESM_RS,
        "list_mappings",
        "list_event_source_mappings",
        &[Operator],
        &[on(Everything, &[LambdaListEventSourceMappings])],
        "status: the stack's mappings (no resource-level permission)",
    ),
    // The local take-over: only on the embedded emulator (`counterctl
    // deploy` and `local run` with the local target), never on AWS, so no
    // role or operator policy is granted it.
    call(
        ESM_RS,
        "take_over",
        "tag_resource",
        &[],
        &[on(Functions, &[LambdaTagResource])],
        "only on the embedded emulator: tags the function whose mapping the local runner plays",
    ),
    call(
        ESM_RS,
        "take_over",
        "update_event_source_mapping",
        &[],
        &[on(EventSourceMappings, &[LambdaUpdateEventSourceMapping])],
        "only on the embedded emulator: disables its own poller's copy of the mapping",
    ),
    call(
        ESM_RS,
        "get_mapping",
        "get_event_source_mapping",
        &[Operator],
        &[on(EventSourceMappings, &[LambdaGetEventSourceMapping])],
        "status and verify read a mapping by its UUID",
    ),
    call(
        STATUS,
        "api",
        "get_function_url_config",
        &[Operator],
        &[on(Functions, &[LambdaGetFunctionUrlConfig])],
        "status: the api's URL",
    ),
    call(
        STATUS,
        "api",
        "list_tags",
        &[Operator],
        &[on(Functions, &[LambdaListTags])],
        "status: the local runner's URL tag",
    ),
    call(
        STATUS,
        "mapping",
        "list_tags",
        &[Operator],
        &[on(Functions, &[LambdaListTags])],
        "status and verify: the runner's takeover and heartbeat tags on the mapping's function (emulators only)",
    ),
    // CloudWatch and CloudFormation.
    call(
        STATUS,
        "alarms",
        "describe_alarms",
        &[Operator],
        &[on(Alarms, &[CloudWatchDescribeAlarms])],
        "status: alarm states",
    ),
    call(
        CFN,
        "describe",
        "describe_stacks",
        &[Operator, LimitsPlanner],
        &[on(Stack, &[CloudFormationDescribeStacks])],
        "every command reads the stack's outputs",
    ),
    call(
        CFN,
        "create_change_set",
        "create_change_set",
        &[Operator],
        &[
            on(Stack, &[CloudFormationCreateChangeSet]),
            on(ArtifactsObjects, &[S3GetObject]),
        ],
        "plan and deploy; CloudFormation reads the uploaded template with the caller's credentials",
    ),
    call(
        CFN,
        "wait_change_set",
        "describe_change_set",
        &[Operator],
        &[on(Stack, &[CloudFormationDescribeChangeSet])],
        "plan and deploy",
    ),
    call(
        CFN,
        "all_changes",
        "describe_change_set",
        &[Operator],
        &[on(Stack, &[CloudFormationDescribeChangeSet])],
        "plan and deploy: the change set's further pages of changes",
    ),
    call(
        CFN,
        "delete_change_set",
        "delete_change_set",
        &[Operator],
        &[on(Stack, &[CloudFormationDeleteChangeSet])],
        "plan removes its change set",
    ),
    call(
        CFN,
        "newest_event_id",
        "describe_stack_events",
        &[Operator],
        &[on(Stack, &[CloudFormationDescribeStackEvents])],
        "deploy and destroy follow the events",
    ),
    call(
        CFN,
        "events_since",
        "describe_stack_events",
        &[Operator],
        &[on(Stack, &[CloudFormationDescribeStackEvents])],
        "deploy and destroy follow the events",
    ),
    call(
        "ops-cli/src/commands/deploy/mod.rs",
        "run",
        "execute_change_set",
        &[Operator],
        &[on(Stack, &[CloudFormationExecuteChangeSet])],
        "deploy",
    ),
    call(
        "ops-cli/src/commands/deploy/scope_keys.rs",
        "holds_items",
        "scan",
        &[Operator],
        &[on(ResourcesTable, &[DynamoDbScan])],
        "plan and deploy refuse a change of ScopeKeyShards while the resources table holds an item",
    ),
    call(
        PROPOSAL,
        "propose",
        "get_caller_identity",
        &[Operator],
        &[],
        "the account, for the artifacts bucket's name (no permission needed)",
    ),
    call(
        PROPOSAL,
        "deployed_template",
        "get_template",
        &[Operator],
        &[on(Stack, &[CloudFormationGetTemplate])],
        "plan compares with the deployed template",
    ),
    call(
        PROPOSAL,
        "remove_review_stack",
        "delete_stack",
        &[Operator],
        &[on(Stack, &[CloudFormationDeleteStack])],
        "a stack a plan left in REVIEW_IN_PROGRESS",
    ),
    call(
        CFN,
        "resources",
        "list_stack_resources",
        &[Operator],
        &[on(Stack, &[CloudFormationListStackResources])],
        "status: the stack's alarms; deploy: the tables a failed first create left (an emulator keeps them; \
         AWS's rollback deletes them)",
    ),
    call(
        CFN,
        "delete_rolled_back",
        "delete_stack",
        &[Operator],
        &[on(Stack, &[CloudFormationDeleteStack])],
        "deploy replaces a stack whose first create rolled back (ROLLBACK_COMPLETE)",
    ),
    call(
        DESTROY,
        "run",
        "delete_stack",
        &[Operator],
        &[on(Stack, &[CloudFormationDeleteStack])],
        "destroy",
    ),
    call(
        DESTROY,
        "delete_table",
        "delete_table",
        &[Operator],
        &[
            on(ResourcesTable, &[DynamoDbDeleteTable]),
            on(CountersTable, &[DynamoDbDeleteTable]),
        ],
        "destroy --delete-data",
    ),
    call(
        DESTROY,
        "delete_table",
        "describe_table",
        &[Operator],
        &[
            on(ResourcesTable, &[DynamoDbDescribeTable]),
            on(CountersTable, &[DynamoDbDescribeTable]),
        ],
        "destroy --delete-data waits for the deletion",
    ),
    call(
        REPLICAS,
        "read",
        "describe_table",
        &[Operator],
        &[
            on(ResourcesTable, &[DynamoDbDescribeTable]),
            on(CountersTable, &[DynamoDbDescribeTable]),
        ],
        "status and deploy: the tables' global-table replicas, warm throughput and maximum",
    ),
    call(
        REPLICAS,
        "read_contributor_insights",
        "describe_contributor_insights",
        &[Operator],
        &[
            on(ResourcesTable, &[DynamoDbDescribeContributorInsights]),
            on(CountersTable, &[DynamoDbDescribeContributorInsights]),
        ],
        "status: the tables' Contributor Insights",
    ),
    call(
        PACKAGE,
        "ensure_bucket",
        "head_bucket",
        &[Operator],
        &[on(ArtifactsBucket, &[S3ListBucket])],
        "deploy: is the artifacts bucket there",
    ),
    call(
        PACKAGE,
        "ensure_bucket",
        "create_bucket",
        &[Operator],
        &[on(ArtifactsBucket, &[S3CreateBucket])],
        "deploy: the first time",
    ),
    call(
        PACKAGE,
        "bucket_exists",
        "head_bucket",
        &[Operator],
        &[on(ArtifactsBucket, &[S3ListBucket])],
        "plan",
    ),
    call(
        PACKAGE,
        "remote",
        "head_object",
        &[Operator],
        &[
            on(ArtifactsObjects, &[S3GetObject]),
            on(ArtifactsBucket, &[S3ListBucket]),
        ],
        "deploy reuses a zip only if its SHA-256 checksum matches (ChecksumMode needs no other action; \
         ListBucket: a missing key is 404, not 403)",
    ),
    call(
        PACKAGE,
        "put",
        "put_object",
        &[Operator],
        &[on(ArtifactsObjects, &[S3PutObject])],
        "deploy uploads the zips and a template too large to inline, with their SHA-256 checksum",
    ),
    call(
        MOVE_TASK,
        "move_task",
        "start_message_move_task",
        &[Operator],
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
    call(
        MOVE_TASK,
        "move_task",
        "list_message_move_tasks",
        &[Operator],
        &[on(Dlq2, &[SqsListMessageMoveTasks])],
        "redrive follows the move task",
    ),
    call(
        "ops-cli/src/commands/redrive/receive.rs",
        "release",
        "change_message_visibility_batch",
        &[Operator],
        &[on(Dlq2, &[SqsChangeMessageVisibility])],
        "redrive --dry-run and peek hand messages back at once",
    ),
    call(
        "ops-cli/src/commands/redrive/transfer.rs",
        "move_messages",
        "send_message_batch",
        &[Operator],
        &[on(Dlq1, &[SqsSendMessage])],
        "redrive where no move task exists: send to DLQ1, then delete from DLQ2",
    ),
];

/// What AWS does with a function's role on its behalf.
#[derive(Debug, Clone, Copy)]
pub struct PlatformUse {
    pub by: Component,
    pub grant: Grant,
    /// The template condition under which it happens.
    pub when: Option<&'static str>,
    pub why: &'static str,
}

const LOGS_DOC: &str = "Lambda sends the function's logs with its execution role \
                        (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html)";

/// Everything a role needs that no code of its function calls.
pub const PLATFORM_USES: &[PlatformUse] = &[
    PlatformUse {
        by: StreamCounter,
        grant: on(
            ResourcesStream,
            &[
                DynamoDbDescribeStream,
                DynamoDbGetRecords,
                DynamoDbGetShardIterator,
                DynamoDbListStreams,
            ],
        ),
        when: None,
        why: "the stream mapping polls the stream with the function's role \
              (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/iam-policy-example-lamda-process-dynamodb-streams.html)",
    },
    PlatformUse {
        by: StreamCounter,
        grant: on(Dlq1, &[SqsSendMessage]),
        when: Some(KEEP_POINTER),
        why: "the stream mapping's SQS on-failure destination (https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html)",
    },
    PlatformUse {
        by: StreamCounter,
        grant: on(FailedBatchObjects, &[S3PutObject]),
        when: Some(KEEP_PAYLOAD),
        why: "the stream mapping's S3 on-failure destination: s3:PutObject and s3:ListBucket \
              (https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html)",
    },
    PlatformUse {
        by: StreamCounter,
        grant: on(FailedBatchBucket, &[S3ListBucket]),
        when: Some(KEEP_PAYLOAD),
        why: "the stream mapping's S3 on-failure destination: s3:PutObject and s3:ListBucket",
    },
    PlatformUse {
        by: DlqReprocessor,
        grant: on(Dlq1, &[SqsReceiveMessage, SqsDeleteMessage, SqsGetQueueAttributes]),
        when: None,
        why: "the SQS mapping receives and deletes with the function's role; AWS documents exactly these three \
              (AWSLambdaSQSQueueExecutionRole, https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html); \
              it never calls ChangeMessageVisibility",
    },
    PlatformUse {
        by: StreamCounter,
        grant: on(OwnLogGroup, &[LogsCreateLogStream, LogsPutLogEvents]),
        when: None,
        why: LOGS_DOC,
    },
    PlatformUse {
        by: DlqReprocessor,
        grant: on(OwnLogGroup, &[LogsCreateLogStream, LogsPutLogEvents]),
        when: None,
        why: LOGS_DOC,
    },
    PlatformUse {
        by: Api,
        grant: on(OwnLogGroup, &[LogsCreateLogStream, LogsPutLogEvents]),
        when: None,
        why: LOGS_DOC,
    },
    PlatformUse {
        by: DriftCheck,
        grant: on(OwnLogGroup, &[LogsCreateLogStream, LogsPutLogEvents]),
        when: None,
        why: LOGS_DOC,
    },
];

/// One needed `(action, target)`, and what needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    pub action: Action,
    pub on: Target,
    /// The template condition it holds under (`None`: always).
    pub when: Option<&'static str>,
}

/// What `component` needs: its call sites' grants and its platform uses,
/// each with the condition it holds under, and who needs it.
pub fn needs(component: Component) -> Vec<(Need, String)> {
    let mut out = Vec::new();
    for site in CALL_SITES.iter().filter(|s| s.by.contains(&component)) {
        for grant in site.grants {
            for &action in grant.actions {
                let need = Need {
                    action,
                    on: grant.on,
                    when: grant.on.only_if(),
                };
                out.push((need, format!("{} `{}` ({})", site.file, site.function, site.operation)));
            }
        }
    }
    for platform in PLATFORM_USES.iter().filter(|p| p.by == component) {
        for &action in platform.grant.actions {
            let need = Need {
                action,
                on: platform.grant.on,
                when: platform.when.or(platform.grant.on.only_if()),
            };
            out.push((need, platform.why.to_owned()));
        }
    }
    out
}

/// The actions the request and stream roles are explicitly denied on the
/// kit's own state partition: every item action of the counters table,
/// whatever their allows say.
pub const KIT_STATE_DENIED: &[Action] = &[
    DynamoDbGetItem,
    DynamoDbBatchGetItem,
    DynamoDbPutItem,
    DynamoDbUpdateItem,
    DynamoDbDeleteItem,
    DynamoDbConditionCheckItem,
    DynamoDbQuery,
];

/// Where the operator's policy applies: the names `counterctl` derives
/// from the stack name and the account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorScope {
    /// `aws`, `aws-cn`, `aws-us-gov`.
    pub partition: String,
    pub region: String,
    pub account: String,
    pub stack_name: String,
    /// The stack's `NamePrefix` (by default the stack name).
    pub name_prefix: String,
    pub artifacts_bucket: String,
}

impl OperatorScope {
    /// The ARN (pattern) of `target` in this stack and account; `None` for
    /// the limits file, whose object is a parameter's value (any bucket)
    /// that an operator scope does not know: only the drift check's role,
    /// in the template, reads it.
    pub fn arn(&self, target: Target) -> Option<String> {
        let OperatorScope {
            partition: p,
            region: r,
            account: a,
            stack_name,
            name_prefix: prefix,
            artifacts_bucket,
        } = self;
        let arn = match target {
            ResourcesTable => format!("arn:{p}:dynamodb:{r}:{a}:table/{prefix}-resources"),
            CountersTable | KitState => format!("arn:{p}:dynamodb:{r}:{a}:table/{prefix}-counters"),
            ResourcesStream => format!("arn:{p}:dynamodb:{r}:{a}:table/{prefix}-resources/stream/*"),
            Dlq1 => format!("arn:{p}:sqs:{r}:{a}:{prefix}-dlq1"),
            Dlq2 => format!("arn:{p}:sqs:{r}:{a}:{prefix}-dlq2"),
            // `<NamePrefix>-failed-batch-<8 hex digits of the stack id>`.
            FailedBatchBucket => format!("arn:{p}:s3:::{prefix}-failed-batch-*"),
            FailedBatchObjects => format!("arn:{p}:s3:::{prefix}-failed-batch-*/*"),
            OwnLogGroup => format!("arn:{p}:logs:{r}:{a}:log-group:/aws/lambda/{prefix}-*"),
            Stack => format!("arn:{p}:cloudformation:{r}:{a}:stack/{stack_name}/*"),
            ArtifactsBucket => format!("arn:{p}:s3:::{artifacts_bucket}"),
            ArtifactsObjects => format!("arn:{p}:s3:::{artifacts_bucket}/*"),
            Functions => format!("arn:{p}:lambda:{r}:{a}:function:{prefix}-*"),
            EventSourceMappings => format!("arn:{p}:lambda:{r}:{a}:event-source-mapping:*"),
            Alarms => format!("arn:{p}:cloudwatch:{r}:{a}:alarm:{prefix}-*"),
            IamRoles => format!("arn:{p}:iam::{a}:role/*"),
            IamUsers => format!("arn:{p}:iam::{a}:user/*"),
            Everything => "*".to_owned(),
            LimitsFile => return None,
        };
        Some(arn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::operator_policy;

    fn scope() -> OperatorScope {
        OperatorScope {
            partition: "aws".to_owned(),
            region: "eu-west-1".to_owned(),
            account: "123456789012".to_owned(),
            stack_name: "hybrid-counter".to_owned(),
            name_prefix: "hc".to_owned(),
            artifacts_bucket: "hybrid-counter-artifacts-123456789012-eu-west-1".to_owned(),
        }
    }

    #[test]
    fn the_operator_writes_the_drift_state_only_under_the_kit_state_key() {
        let policy = operator_policy(&scope());
        let kit_state = policy["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Sid"] == "KitState")
            .expect("a KitState statement");
        assert_eq!(
            kit_state["Condition"],
            json!({"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [KIT_STATE_SCOPE]}})
        );
        assert_eq!(kit_state["Action"], json!(["dynamodb:GetItem", "dynamodb:PutItem"]));
    }

    #[test]
    fn a_redrive_move_task_needs_the_receive_side_on_dlq2_and_send_on_dlq1() {
        let needs: Vec<Need> = needs(Component::Operator).into_iter().map(|(n, _)| n).collect();
        for action in [
            SqsStartMessageMoveTask,
            SqsReceiveMessage,
            SqsDeleteMessage,
            SqsGetQueueAttributes,
        ] {
            assert!(needs.iter().any(|n| n.action == action && n.on == Dlq2), "{action:?}");
        }
        assert!(needs.iter().any(|n| n.action == SqsSendMessage && n.on == Dlq1));
    }

    /// `limits plan|apply|export`: the Scan of every override, the
    /// conditioned writes and their read-back, each changed scope's usage
    /// (a Query of its counters), on the counters table; the drift check's
    /// limits file is never the operator's.
    #[test]
    fn the_operator_policy_covers_the_limits_commands() {
        let policy = operator_policy(&scope());
        let statements = policy["Statement"].as_array().unwrap();
        let counters = statements
            .iter()
            .find(|s| s["Sid"] == "CountersTable")
            .expect("a CountersTable statement");
        assert_eq!(
            counters["Resource"],
            json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/hc-counters"])
        );
        let actions = counters["Action"].as_array().unwrap();
        for action in [
            "dynamodb:Scan",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:GetItem",
            "dynamodb:Query",
        ] {
            assert!(actions.contains(&json!(action)), "{action}: {actions:?}");
        }
        assert!(statements.iter().all(|s| s["Sid"] != "LimitsFile"));
        let drift_check: Vec<Need> = needs(Component::DriftCheck).into_iter().map(|(n, _)| n).collect();
        assert!(
            drift_check
                .iter()
                .any(|n| n.action == S3GetObject && n.on == LimitsFile && n.when == Some(logical::LIMITS_FILE_SET))
        );
    }

    /// The CI plan job's policy reads the stack and the counters table
    /// and writes nothing.
    #[test]
    fn the_limits_plan_policy_reads_the_stack_and_the_counters_table_only() {
        let policy = crate::policies::limits_plan_policy(&scope());
        let statements: Vec<(String, Value, Value)> = policy["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["Sid"].as_str().unwrap().to_owned(),
                    s["Action"].clone(),
                    s["Resource"].clone(),
                )
            })
            .collect();
        assert_eq!(
            statements,
            vec![
                (
                    "CountersTable".to_owned(),
                    json!(["dynamodb:Query", "dynamodb:Scan"]),
                    json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/hc-counters"]),
                ),
                (
                    "Stack".to_owned(),
                    json!(["cloudformation:DescribeStacks"]),
                    json!(["arn:aws:cloudformation:eu-west-1:123456789012:stack/hybrid-counter/*"]),
                ),
            ]
        );
    }
}
