//! [`OPERATIONS`]: each SDK operation the kit calls, by its fluent method
//! name, and the IAM actions that authorize it. Most are one action of the
//! same name; a `TransactWriteItems` is authorized per item, `BatchGetItem`
//! is its own action, a move task needs both queues' sides. Used by
//! `access.rs` to check each entry of `stack::access::CALLS`.

use stack::resources::iam::Action::{self, *};

/// An SDK operation and the IAM actions that authorize it.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    /// The SDK crate, e.g. `aws-sdk-dynamodb`.
    pub sdk: &'static str,
    /// The client's fluent method, e.g. `batch_get_item`.
    pub method: &'static str,
    /// Every call needs all of these.
    pub required: &'static [Action],
    /// A call needs those of these its request carries: the item
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
