//! What each function of the core stack may do to the tables, the queues
//! and the stream: the role statements, one list per function, each call
//! of which `stack::access` lists.

use hybrid_counter::keys;

use crate::expr::Expr;
use crate::logical;
use crate::resources::iam::{Action, Statement};

/// What stream processing does to the tables (`stack::access` lists each
/// call). Inside `TransactWriteItems` each action is authorized as its
/// single-item operation (there is no `TransactWriteItems` IAM action): the
/// flag flip is an `UpdateItem`, the hard delete a `DeleteItem`. A soft
/// delete is decided on its item's current state: one `BatchGetItem` per
/// chunk in batched mode (its own action, which `GetItem` does not cover),
/// a `GetItem` per record in per-record mode.
fn resource_item_statements() -> Vec<Statement> {
    vec![
        Statement::allow(
            "ResourcesTableItems",
            &[
                Action::DynamoDbGetItem,
                Action::DynamoDbBatchGetItem,
                Action::DynamoDbUpdateItem,
                Action::DynamoDbDeleteItem,
            ],
            vec![arn(logical::RESOURCES_TABLE)],
        ),
        Statement::allow(
            "EventualCounter",
            &[Action::DynamoDbUpdateItem],
            vec![arn(logical::COUNTERS_TABLE)],
        ),
        layout_record(),
        kit_state_denied(),
        layout_record_read_only(),
    ]
}

/// The layout record ([`keys::LAYOUT_SCOPE`]): every function reads it at
/// start (`stack::access` lists the call); only counterctl writes it.
pub(crate) fn layout_record() -> Statement {
    Statement::allow(
        "LayoutRecord",
        &[Action::DynamoDbGetItem],
        vec![arn(logical::COUNTERS_TABLE)],
    )
    .when(
        "ForAllValues:StringEquals",
        "dynamodb:LeadingKeys",
        Expr::List(vec![keys::LAYOUT_SCOPE.into()]),
    )
}

/// The functions whose roles write the counters table may not write the
/// layout record, whatever their allows on the table say: a function could
/// otherwise stop every other one by recording another layout.
fn layout_record_read_only() -> Statement {
    Statement::deny(
        "LayoutRecordIsReadOnly",
        &[
            Action::DynamoDbPutItem,
            Action::DynamoDbUpdateItem,
            Action::DynamoDbDeleteItem,
            Action::DynamoDbBatchWriteItem,
            Action::DynamoDbPartiQlInsert,
            Action::DynamoDbPartiQlUpdate,
            Action::DynamoDbPartiQlDelete,
        ],
        vec![arn(logical::COUNTERS_TABLE)],
    )
    .when(
        "ForAnyValue:StringEquals",
        "dynamodb:LeadingKeys",
        Expr::List(vec![keys::LAYOUT_SCOPE.into()]),
    )
}

/// The partition of the kit's own state (the drift check's cursor) is the
/// drift check's alone: the request and stream roles are denied every item
/// action under its key, whatever their allows on the counters table say.
/// `ForAnyValue`: a request without a leading key (a Scan) is not matched.
fn kit_state_denied() -> Statement {
    Statement::deny(
        "KitStateIsNotOurs",
        crate::access::KIT_STATE_DENIED,
        vec![arn(logical::COUNTERS_TABLE)],
    )
    .when(
        "ForAnyValue:StringEquals",
        "dynamodb:LeadingKeys",
        Expr::List(vec![keys::KIT_STATE_SCOPE.into()]),
    )
}

pub(super) fn stream_counter_permissions() -> Vec<Statement> {
    let mut statements = resource_item_statements();
    statements.push(Statement::allow(
        "ResourcesStream",
        // The event source mapping reads the stream with the function's
        // role. ListStreams has no resource-level permissions, so on this
        // ARN it grants nothing; it is listed because Lambda's documented
        // set for stream sources names it, and granting it on `*` would be
        // the only wildcard resource in the stack.
        &[
            Action::DynamoDbDescribeStream,
            Action::DynamoDbGetRecords,
            Action::DynamoDbGetShardIterator,
            Action::DynamoDbListStreams,
        ],
        vec![stream_arn()],
    ));
    // The mapping sends a failed batch to its destination (DLQ1 or the
    // failed-batch bucket) as the function's role: those grants are in the
    // conditional policies of `failed_batches::stream_counter_policies`.
    statements
}

pub(super) fn dlq_reprocessor_permissions() -> Vec<Statement> {
    let mut statements = vec![
        Statement::allow(
            "Dlq1Consumer",
            // What the SQS event source mapping does as the function's role
            // (AWS documents these three; the mapping never changes a
            // message's visibility, nor does the reprocessor).
            &[
                Action::SqsReceiveMessage,
                Action::SqsDeleteMessage,
                Action::SqsGetQueueAttributes,
            ],
            vec![arn(logical::DLQ1)],
        ),
        Statement::allow(
            "ReplayStreamRange",
            // The reprocessor itself re-reads the failed sequence range from
            // the shard the message names: no DescribeStream.
            &[Action::DynamoDbGetRecords, Action::DynamoDbGetShardIterator],
            vec![stream_arn()],
        ),
        Statement::allow(
            "PermanentFailuresToDlq2",
            // A message that can never be replayed goes to DLQ2 at once.
            &[Action::SqsSendMessage],
            vec![arn(logical::DLQ2)],
        ),
    ];
    statements.extend(resource_item_statements());
    statements
}

pub(super) fn api_permissions() -> Vec<Statement> {
    vec![
        Statement::allow(
            "ResourcesTableRequestPath",
            // Create puts the item, delete reads it and soft-deletes it.
            &[
                Action::DynamoDbGetItem,
                Action::DynamoDbPutItem,
                Action::DynamoDbUpdateItem,
            ],
            vec![arn(logical::RESOURCES_TABLE)],
        ),
        Statement::allow(
            "CountersTableRequestPath",
            // One Query reads every counter of a scope (BE, EC shards, limit);
            // UpdateItem moves the best-effort counter. A gapless sequence
            // claim (`?sequence=true`) is one TransactWriteItems whose
            // Update of `sequence` and Put of `sequence#<n>` IAM checks as
            // UpdateItem and PutItem; GetItem reads `last_id` and a numbered
            // item back.
            &[
                Action::DynamoDbQuery,
                Action::DynamoDbUpdateItem,
                Action::DynamoDbGetItem,
                Action::DynamoDbPutItem,
            ],
            vec![arn(logical::COUNTERS_TABLE)],
        ),
        layout_record(),
        kit_state_denied(),
        layout_record_read_only(),
    ]
}

pub(crate) fn arn(logical_id: &str) -> Expr {
    Expr::get_att(logical_id, "Arn")
}

pub(super) fn stream_arn() -> Expr {
    Expr::get_att(logical::RESOURCES_TABLE, "StreamArn")
}
