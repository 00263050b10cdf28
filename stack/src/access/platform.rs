//! [`PLATFORM_USES`]: what AWS does with a function's role on its behalf,
//! which no code of the kit calls: the event source mappings read their
//! source and write the on-failure destination, Lambda writes the logs
//! (each function's own group, which `needs()` adds).

use crate::failed_batches::{KEEP_PAYLOAD, KEEP_POINTER};
use crate::resources::iam::Action::*;

use super::component::Component::{self, DlqReprocessor, StreamCounter};
use super::target::Target::*;
use super::target::{Grant, on};

/// What AWS does with a function's role on its behalf.
#[derive(Debug, Clone, Copy)]
pub struct PlatformUse {
    pub by: Component,
    pub grant: Grant,
    /// The template condition under which it happens.
    pub when: Option<&'static str>,
    pub why: &'static str,
}

/// Everything a role needs that no code of its function calls, but its
/// own log group, which [`needs`](super::needs::needs) adds for every function.
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
];
