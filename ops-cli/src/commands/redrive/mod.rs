//! `counterctl redrive`: DLQ2's messages — stream ranges the reprocessor
//! gave up on — back into the failure pipeline once their cause is fixed
//! (DESIGN §4).
//!
//! By default they move to DLQ1, where the reprocessor replays them. On AWS
//! that is SQS's own message move task (`StartMessageMoveTask` from DLQ2 to
//! DLQ1, progress from `ListMessageMoveTasks`). It applies because DLQ2 is
//! the dead-letter queue of another SQS queue, DLQ1; the task only accepts
//! such a source ("currently limited to supporting message redrive from
//! queues that are configured as dead-letter queues (DLQs) of other Amazon
//! SQS queues only", SQS API reference, StartMessageMoveTask), so DLQ1,
//! fed by Lambda's on-failure destination, could not be a source. The
//! emulators lack the task, and a task cannot stop after `--max` messages,
//! so there counterctl moves the messages itself: receive from DLQ2, send
//! to DLQ1, and only then delete from DLQ2. A crash between the send and
//! the delete leaves a duplicate, which the idempotent replay absorbs;
//! never a lost range.
//!
//! `--replay` is for when the reprocessor itself is broken: each message is
//! parsed as a pointer to a range (`FailedBatchRecords=pointer`) or as the
//! S3 notification of a batch kept with its records (`payload`: the object
//! is read from the bucket), the batch is replayed here through the same
//! library code the reprocessor runs, and the message is deleted from DLQ2
//! once that succeeded. The operator's credentials may read far more than
//! the reprocessor's role, and anyone who can send to DLQ2 can forge a
//! notification: an object is read only from the stack's failed-batch
//! bucket (output `FailedBatchBucketName`), under
//! `aws/lambda/<stream mapping uuid>/` (output `StreamMappingId`) and up to
//! [`hybrid_counter_aws::failed_batch::MAX_OBJECT_BYTES`]; any other stays
//! in DLQ2 with the reason in the report.
//!
//! `--dry-run` peeks: messages are received, described (with the reason
//! of a permanent failure the reprocessor sent straight to DLQ2) and made
//! visible again at the end; nothing is sent, replayed or deleted.
//!
//! A message that is not moved or replayed stays in DLQ2. It is held
//! invisible for the rest of the run, so one run considers each message
//! once, and released when the run ends.
//!
//! This file runs the command and takes the path its method names; each
//! path has its file: `transfer` (receive, send, delete), `move_task`
//! (SQS's task), `replay` and `peek` (`--dry-run`), all but the task over
//! one pass of `receive`; `report` is what they add up to.

mod move_task;
mod peek;
mod receive;
mod replay;
mod report;
#[cfg(test)]
mod testing;
mod transfer;

use std::time::Instant;

use aws_sdk_sqs::Client;
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::failed_batch::{Dlq1Message, Expected, replay_payload};

pub use move_task::move_task;
pub use peek::peek;
use receive::{HOLD, RECEIVE_WAIT, SQS_BATCH};
pub use receive::{Limits, pace_delay};
pub use replay::replay_messages;
pub use report::{
    MOVED_NOT_DELETED, MessageProblem, MoveTask, Preview, QueueRef, REPLAYED_NOT_DELETED, RangeSummary, RedriveReport,
    Tally,
};
pub use transfer::move_messages;

use super::{Context, Location};
use crate::cli::Target;
use crate::config::{RedriveMethod, RedriveMode, RedriveOptions, redrive_method};
use crate::error::{self, Result};

pub async fn run(ctx: &Context<'_>, options: &RedriveOptions) -> Result<RedriveReport> {
    let started = Instant::now();
    ctx.ui.step(format!("reading stack {}", ctx.config.stack_name));
    let deployed = super::deployed::deployed(ctx).await?;
    let output = |key: &str| deployed.output(key);
    let source = QueueRef {
        name: "dlq2".to_owned(),
        url: output(stack::outputs::DLQ2_URL)?,
        arn: output(stack::outputs::DLQ2_ARN)?,
    };
    let destination = QueueRef {
        name: "dlq1".to_owned(),
        url: output(stack::outputs::DLQ1_URL)?,
        arn: output(stack::outputs::DLQ1_ARN)?,
    };
    // A message of another stream than this one is never replayed.
    let stream_arn = output(stack::outputs::RESOURCES_TABLE_STREAM_ARN)?;
    let method = redrive_method(ctx.config.target, options);
    let sqs = &ctx.clients.sqs;
    let source_depth = queue_depth(sqs, &source.url).await?.visible;
    let mut notes = Vec::new();
    if ctx.config.target == Target::Aws && method == RedriveMethod::ReceiveSendDelete {
        notes.push(
            "a message move task cannot stop after --max messages: moved them by receive, send, delete".to_owned(),
        );
    }

    let limits = Limits {
        max: options.max,
        rate: options.rate,
        page: if method == RedriveMethod::Replay { 1 } else { SQS_BATCH },
        hold: HOLD,
        wait: RECEIVE_WAIT,
    };
    let expected = options.max.map_or(source_depth, |max| max.min(source_depth));
    let bar = ctx.ui.bar(
        expected,
        match method {
            RedriveMethod::Peek => "peeking at dlq2",
            RedriveMethod::Replay => "replaying dlq2",
            _ => "moving dlq2 -> dlq1",
        },
    );
    let tally = match method {
        RedriveMethod::Peek => peek(sqs, &source.url, options.mode, &stream_arn, limits, &bar).await?,
        RedriveMethod::ReceiveSendDelete => move_messages(sqs, &source.url, &destination.url, limits, &bar).await?,
        RedriveMethod::MessageMoveTask => {
            move_task(sqs, &source.arn, &destination.arn, options.rate, ctx.clients.poll, &bar).await?
        }
        RedriveMethod::Replay => {
            let config = deployed.checked_counter_config(ctx).await?;
            let processor = config
                .processor(DynamoStore::new(ctx.clients.dynamodb.clone(), &config))
                .with_clock(hybrid_counter::Clock::system());
            let (processor, streams, s3) = (&processor, &ctx.clients.dynamodbstreams, &ctx.clients.s3);
            let stream_arn = stream_arn.as_str();
            // Absent with `FailedBatchRecords=pointer`: no object is the stack's.
            let bucket = deployed.output(stack::outputs::FAILED_BATCH_BUCKET).ok();
            let mapping_uuid = output(stack::outputs::STREAM_MAPPING_ID)?;
            let expected = bucket.as_deref().map(|bucket| Expected::Stack {
                bucket,
                mapping_uuid: &mapping_uuid,
            });
            replay_messages(
                sqs,
                &source.url,
                stream_arn,
                limits,
                &bar,
                |message: Dlq1Message| async move {
                    let now = hybrid_counter::now_millis();
                    let outcome = match &message {
                        Dlq1Message::Pointer(record) => {
                            hybrid_counter_aws::replay::replay(processor, streams, &record.batch_info, now)
                                .await
                                .map(|_| ())
                        }
                        Dlq1Message::Object(object) => match expected {
                            None => Err(hybrid_counter_aws::replay::ReplayError::ForeignObject {
                                object: object.to_string(),
                                why: "the stack keeps no failed batches in S3 (FailedBatchRecords=pointer)".to_owned(),
                            }),
                            Some(expected) => {
                                match hybrid_counter_aws::s3::fetch_failed_batch(s3, object, expected, stream_arn).await
                                {
                                    Ok(batch) => replay_payload(processor, &batch, now).await.map(|_| ()),
                                    Err(err) => Err(err),
                                }
                            }
                        },
                        // Nothing to replay: deleting it is all there is to do.
                        Dlq1Message::S3TestEvent => Ok(()),
                    };
                    outcome.map_err(|e| e.to_string())
                },
            )
            .await?
        }
    };
    drop(bar);
    notes.extend(tally.notes);
    // A full pass that went through DLQ2 itself must account for every
    // message still there: a receive whose answer was lost hides messages
    // for the hold without anyone handling them.
    let full_pass = !options.dry_run
        && options.max.is_none()
        && tally.stopped_early.is_none()
        && matches!(method, RedriveMethod::ReceiveSendDelete | RedriveMethod::Replay);
    let left_behind = if full_pass {
        let depth = queue_depth(sqs, &source.url).await?;
        let accounted = (tally.failed.len() + tally.skipped.len()) as u64;
        let left = (depth.visible + depth.in_flight).saturating_sub(accounted);
        if left > 0 {
            notes.push(format!(
                "{} still holds about {left} message(s) this run did not handle ({} visible, {} in flight; the \
                 counts are approximate): received by a request whose answer was lost, by another consumer, or \
                 sent meanwhile. In-flight messages return after their visibility timeout (up to {} s): run \
                 redrive again then",
                source.name,
                depth.visible,
                depth.in_flight,
                HOLD.as_secs()
            ));
        }
        (left > 0).then_some(left)
    } else {
        None
    };
    if ctx.config.target == Target::Local && tally.moved > 0 {
        notes.push(
            "moved messages are replayed when the local runner plays dlq1 (`counterctl local run`, started by \
             `make deploy`)"
                .to_owned(),
        );
    }
    Ok(RedriveReport {
        location: Location::of(ctx),
        mode: options.mode,
        method,
        dry_run: options.dry_run,
        destination: (options.mode == RedriveMode::Move).then_some(destination),
        source,
        max: options.max,
        rate: options.rate,
        source_depth,
        moved: tally.moved,
        replayed: tally.replayed,
        failed: tally.failed,
        skipped: tally.skipped,
        preview: tally.preview,
        task: tally.task,
        stopped_early: tally.stopped_early,
        left_behind,
        notes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A queue's approximate message counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    pub visible: u64,
    /// Received and not yet deleted or back (`NotVisible`).
    pub in_flight: u64,
}

/// SQS's approximate visible and in-flight counts of the queue at `url`.
pub async fn queue_depth(sqs: &Client, url: &str) -> Result<Depth> {
    let depth = hybrid_counter_aws::sqs::depth(sqs, url)
        .await
        .map_err(error::aws("GetQueueAttributes"))?;
    Ok(Depth {
        visible: depth.visible,
        in_flight: depth.in_flight,
    })
}
