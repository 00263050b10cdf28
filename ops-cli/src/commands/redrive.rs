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
//! parsed as an on-failure record, its range is replayed here through the
//! same library code the reprocessor runs, and the message is deleted from
//! DLQ2 once that succeeded.
//!
//! `--dry-run` peeks: messages are received, described and made visible
//! again at the end; nothing is sent, replayed or deleted.
//!
//! A message that is not moved or replayed stays in DLQ2. It is held
//! invisible for the rest of the run, so one run considers each message
//! once, and released when the run ends.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use hybrid_counter::DynamoStore;
use hybrid_counter::stream::Processor;
use hybrid_counter::stream::replay::{OnFailureRecord, replay};
use indicatif::ProgressBar;
use serde::Serialize;

use super::{Context, Location};
use crate::cli::Target;
use crate::config::{RedriveMethod, RedriveMode, RedriveOptions, redrive_method};
use crate::error::{self, Error, Result};

/// Messages per `ReceiveMessage`, `SendMessageBatch` and `DeleteMessageBatch`.
const SQS_BATCH: u64 = 10;
/// How long a received message stays hidden while this run handles it.
const HOLD: Duration = Duration::from_secs(300);
/// Long-poll wait of each receive: an empty answer then means the queue has
/// no visible message, not that a short poll missed the servers holding some.
const RECEIVE_WAIT: Duration = Duration::from_secs(1);

/// A queue of the stack.
#[derive(Debug, Clone, Serialize)]
pub struct QueueRef {
    pub name: String,
    pub url: String,
    pub arn: String,
}

/// A message left in DLQ2, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageProblem {
    pub message_id: String,
    pub reason: String,
}

/// The stream range an on-failure record names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RangeSummary {
    pub condition: String,
    pub shard_id: String,
    pub start_sequence_number: String,
    pub end_sequence_number: String,
    pub batch_size: u32,
    pub stream_arn: String,
}

impl RangeSummary {
    fn of(record: &OnFailureRecord) -> Self {
        let info = &record.batch_info;
        Self {
            condition: record.request_context.condition.clone(),
            shard_id: info.shard_id.clone(),
            start_sequence_number: info.start_sequence_number.clone(),
            end_sequence_number: info.end_sequence_number.clone(),
            batch_size: info.batch_size,
            stream_arn: info.stream_arn.clone(),
        }
    }
}

/// What `--dry-run` found in one message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preview {
    pub message_id: String,
    /// `move`, `replay`, or `skip` (`--replay` of a message that is not an
    /// on-failure record).
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<RangeSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The message move task as `ListMessageMoveTasks` last reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MoveTask {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_handle: Option<String>,
    /// `COMPLETED`, `CANCELLED` or `FAILED`.
    pub status: String,
    pub moved: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_move: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

/// What a pass over DLQ2 did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub moved: u64,
    pub replayed: u64,
    pub failed: Vec<MessageProblem>,
    pub skipped: Vec<MessageProblem>,
    pub preview: Vec<Preview>,
    pub task: Option<MoveTask>,
    /// Why the pass stopped before the queue was empty.
    pub stopped_early: Option<String>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RedriveReport {
    #[serde(flatten)]
    pub location: Location,
    pub mode: RedriveMode,
    pub method: RedriveMethod,
    pub dry_run: bool,
    pub source: QueueRef,
    /// DLQ1, where moved messages go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<QueueRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<u32>,
    /// DLQ2's approximate number of visible messages at the start.
    pub source_depth: u64,
    pub moved: u64,
    pub replayed: u64,
    /// Messages that stay in DLQ2 because moving or replaying them failed.
    pub failed: Vec<MessageProblem>,
    /// Messages left in DLQ2 on purpose: `--replay` of a message that is
    /// not an on-failure record.
    pub skipped: Vec<MessageProblem>,
    /// `--dry-run`: every message seen and what would happen to it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preview: Vec<Preview>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<MoveTask>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// After a full pass: messages DLQ2 still holds (visible or in flight)
    /// beyond those this run reports as failed or skipped — received by a
    /// request whose answer was lost, or by another consumer. They come
    /// back after their visibility timeout; a later run handles them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_behind: Option<u64>,
    pub notes: Vec<String>,
    pub seconds: f64,
}

impl RedriveReport {
    /// Everything considered was moved or replayed (a dry run always
    /// succeeds): otherwise DLQ2 still holds something for an operator.
    pub fn succeeded(&self) -> bool {
        self.dry_run
            || (self.failed.is_empty()
                && self.skipped.is_empty()
                && self.stopped_early.is_none()
                && self.left_behind.is_none()
                && self.task.as_ref().is_none_or(|t| t.status == "COMPLETED"))
    }
}

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
        RedriveMethod::Peek => peek(sqs, &source.url, options.mode, limits, &bar).await?,
        RedriveMethod::ReceiveSendDelete => move_messages(sqs, &source.url, &destination.url, limits, &bar).await?,
        RedriveMethod::MessageMoveTask => {
            move_task(sqs, &source.arn, &destination.arn, options.rate, ctx.clients.poll, &bar).await?
        }
        RedriveMethod::Replay => {
            let config = deployed.counter_config()?;
            let processor = Processor::new(DynamoStore::new(ctx.clients.dynamodb.clone(), &config))
                .with_eventual_shards(config.eventual_shards)
                .with_clock(hybrid_counter::Clock::system());
            let (processor, streams) = (&processor, &ctx.clients.dynamodbstreams);
            replay_messages(sqs, &source.url, limits, &bar, |record: OnFailureRecord| async move {
                replay(processor, streams, &record.batch_info, hybrid_counter::now_millis())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
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
    let answer = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(error::aws("GetQueueAttributes"))?;
    let count = |name: &QueueAttributeName| {
        answer
            .attributes()
            .and_then(|a| a.get(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Depth {
        visible: count(&QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: count(&QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    })
}

/// How a pass goes through DLQ2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Messages to consider at most.
    pub max: Option<u64>,
    /// Messages per second at most.
    pub rate: Option<u32>,
    /// Messages per receive, 1 to 10.
    pub page: u64,
    /// Visibility timeout of a received message while it is handled.
    pub hold: Duration,
    /// Long-poll wait of a receive.
    pub wait: Duration,
}

/// How long to wait before receiving more when `sent` messages went out
/// `elapsed` after the start: message `n` (from 0) is due `n / rate`
/// seconds after the start, so a pass never exceeds the rate on average.
pub fn pace_delay(sent: u64, rate: Option<u32>, elapsed: Duration) -> Duration {
    match rate {
        Some(rate) if rate > 0 => Duration::from_secs_f64(sent as f64 / f64::from(rate)).saturating_sub(elapsed),
        _ => Duration::ZERO,
    }
}

/// Receives DLQ2's messages for one pass: each message once, paced, and
/// the ones left in the queue released at the end.
struct Receiver<'a> {
    sqs: &'a Client,
    url: &'a str,
    limits: Limits,
    started: Instant,
    seen: HashSet<String>,
    considered: u64,
    /// Receipt handles of messages that stay in DLQ2.
    held: Vec<String>,
}

impl<'a> Receiver<'a> {
    fn new(sqs: &'a Client, url: &'a str, limits: Limits) -> Self {
        Self {
            sqs,
            url,
            limits,
            started: Instant::now(),
            seen: HashSet::new(),
            considered: 0,
            held: Vec::new(),
        }
    }

    /// The next messages not seen yet in this pass; empty when the queue
    /// has no other visible message or `max` is reached.
    async fn next(&mut self) -> Result<Vec<Message>> {
        let remaining = self.limits.max.map_or(u64::MAX, |max| max - self.considered);
        let want = remaining
            .min(self.limits.page)
            .min(self.limits.rate.map_or(SQS_BATCH, u64::from))
            .clamp(0, SQS_BATCH);
        if want == 0 {
            return Ok(Vec::new());
        }
        let delay = pace_delay(self.considered, self.limits.rate, self.started.elapsed());
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let answer = self
            .sqs
            .receive_message()
            .queue_url(self.url)
            .max_number_of_messages(want as i32)
            .visibility_timeout(i32::try_from(self.limits.hold.as_secs()).unwrap_or(i32::MAX))
            .wait_time_seconds(i32::try_from(self.limits.wait.as_secs()).unwrap_or(20))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(error::aws("ReceiveMessage"))?;
        let mut fresh = Vec::new();
        for message in answer.messages.unwrap_or_default() {
            let id = message.message_id().unwrap_or_default().to_owned();
            if self.seen.insert(id) {
                fresh.push(message);
            } else {
                // Handled earlier in this pass and visible again (its hold
                // ran out): it stays where it is.
                self.hold(&message);
            }
        }
        self.considered += fresh.len() as u64;
        Ok(fresh)
    }

    /// Leaves `message` in DLQ2, visible again when the pass ends.
    fn hold(&mut self, message: &Message) {
        if let Some(handle) = message.receipt_handle() {
            self.held.push(handle.to_owned());
        }
    }

    /// Makes the held messages visible at once; a note when that failed
    /// (they then come back when their visibility timeout runs out).
    async fn release(self) -> Option<String> {
        let mut stuck = 0;
        let mut reason = String::new();
        for chunk in self.held.chunks(SQS_BATCH as usize) {
            let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .filter_map(|(n, handle)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(n.to_string())
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .build()
                        .ok()
                })
                .collect();
            match self
                .sqs
                .change_message_visibility_batch()
                .queue_url(self.url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => {
                    stuck += out.failed().len();
                    if let Some(failed) = out.failed().first() {
                        reason = format!("{}: {}", failed.code(), failed.message().unwrap_or_default());
                    }
                }
                Err(err) => {
                    stuck += chunk.len();
                    reason = error::aws("ChangeMessageVisibilityBatch")(err).to_string();
                }
            }
        }
        (stuck > 0).then(|| {
            format!(
                "{stuck} message(s) left in dlq2 could not be made visible again ({reason}); they reappear after \
                 {}s",
                self.limits.hold.as_secs()
            )
        })
    }
}

fn problem(message: &Message, reason: impl Into<String>) -> MessageProblem {
    MessageProblem {
        message_id: message.message_id().unwrap_or_default().to_owned(),
        reason: reason.into(),
    }
}

/// Receives DLQ2's messages, sends each to DLQ1 and deletes it from DLQ2
/// only once DLQ1 confirmed it. A failed receive after the first message
/// ends the pass early (reported), as does a failed send: the destination
/// is then likely down for every message.
pub async fn move_messages(
    sqs: &Client,
    source_url: &str,
    destination_url: &str,
    limits: Limits,
    bar: &ProgressBar,
) -> Result<Tally> {
    let mut rx = Receiver::new(sqs, source_url, limits);
    let mut tally = Tally::default();
    loop {
        let page = match rx.next().await {
            Ok(page) => page,
            Err(err) if rx.considered == 0 => return Err(err),
            Err(err) => {
                tally.stopped_early = Some(err.to_string());
                break;
            }
        };
        if page.is_empty() {
            break;
        }
        let entries: Vec<SendMessageBatchRequestEntry> = page
            .iter()
            .enumerate()
            .filter_map(|(n, m)| {
                SendMessageBatchRequestEntry::builder()
                    .id(n.to_string())
                    .message_body(m.body().unwrap_or_default())
                    .set_message_attributes(m.message_attributes.clone())
                    .build()
                    .ok()
            })
            .collect();
        let sent = sqs
            .send_message_batch()
            .queue_url(destination_url)
            .set_entries(Some(entries))
            .send()
            .await;
        let sent = match sent {
            Ok(sent) => sent,
            Err(err) => {
                let reason = error::aws("SendMessageBatch")(err).to_string();
                for message in &page {
                    tally
                        .failed
                        .push(problem(message, format!("not sent to dlq1 ({reason}); left in dlq2")));
                    rx.hold(message);
                }
                tally.stopped_early = Some(format!("sending to dlq1 failed: {reason}"));
                bar.inc(page.len() as u64);
                break;
            }
        };
        let mut delivered = Vec::new();
        for (n, message) in page.iter().enumerate() {
            let id = n.to_string();
            if sent.successful().iter().any(|s| s.id() == id) {
                delivered.push(message);
            } else {
                let why = sent.failed().iter().find(|f| f.id() == id).map_or_else(
                    || "not confirmed".to_owned(),
                    |f| format!("{}: {}", f.code(), f.message().unwrap_or_default()),
                );
                tally
                    .failed
                    .push(problem(message, format!("not sent to dlq1 ({why}); left in dlq2")));
                rx.hold(message);
            }
        }
        let deleted = delete(sqs, source_url, &delivered).await;
        for (message, result) in delivered.iter().zip(deleted) {
            match result {
                Ok(()) => tally.moved += 1,
                Err(reason) => tally.failed.push(problem(
                    message,
                    format!(
                        "sent to dlq1 but not deleted from dlq2 ({reason}); it returns to dlq2 and may be moved \
                         again, a duplicate the reprocessor absorbs"
                    ),
                )),
            }
        }
        bar.inc(page.len() as u64);
    }
    tally.notes.extend(rx.release().await);
    Ok(tally)
}

/// Deletes `messages` from the queue; one result per message, in order.
async fn delete(sqs: &Client, url: &str, messages: &[&Message]) -> Vec<std::result::Result<(), String>> {
    let mut results = Vec::with_capacity(messages.len());
    for chunk in messages.chunks(SQS_BATCH as usize) {
        let entries: Vec<DeleteMessageBatchRequestEntry> = chunk
            .iter()
            .enumerate()
            .filter_map(|(n, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(n.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .ok()
            })
            .collect();
        match sqs
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) => {
                for n in 0..chunk.len() {
                    let id = n.to_string();
                    results.push(if out.successful().iter().any(|s| s.id() == id) {
                        Ok(())
                    } else {
                        Err(out.failed().iter().find(|f| f.id() == id).map_or_else(
                            || "not confirmed".to_owned(),
                            |f| format!("{}: {}", f.code(), f.message().unwrap_or_default()),
                        ))
                    });
                }
            }
            Err(err) => {
                let reason = error::aws("DeleteMessageBatch")(err).to_string();
                results.extend(chunk.iter().map(|_| Err(reason.clone())));
            }
        }
    }
    results
}

/// Describes DLQ2's messages without changing anything: each is received,
/// parsed, and made visible again at the end.
pub async fn peek(sqs: &Client, url: &str, mode: RedriveMode, limits: Limits, bar: &ProgressBar) -> Result<Tally> {
    let mut rx = Receiver::new(sqs, url, limits);
    let mut tally = Tally::default();
    loop {
        let page = match rx.next().await {
            Ok(page) => page,
            Err(err) if rx.considered == 0 => return Err(err),
            Err(err) => {
                tally.stopped_early = Some(err.to_string());
                break;
            }
        };
        if page.is_empty() {
            break;
        }
        for message in &page {
            tally.preview.push(preview(message, mode));
            rx.hold(message);
        }
        bar.inc(page.len() as u64);
    }
    tally.notes.extend(rx.release().await);
    Ok(tally)
}

fn preview(message: &Message, mode: RedriveMode) -> Preview {
    let parsed = OnFailureRecord::from_body(message.body().unwrap_or_default());
    let action = match (mode, &parsed) {
        (RedriveMode::Move, _) => "move",
        (RedriveMode::Replay, Ok(_)) => "replay",
        (RedriveMode::Replay, Err(_)) => "skip",
    };
    Preview {
        message_id: message.message_id().unwrap_or_default().to_owned(),
        action: action.to_owned(),
        receive_count: message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|v| v.parse().ok()),
        range: parsed.as_ref().ok().map(RangeSummary::of),
        problem: parsed.err().map(|e| match mode {
            RedriveMode::Move => format!("{e}: the reprocessor will fail on it again"),
            RedriveMode::Replay => format!("{e}: it would stay in dlq2"),
        }),
    }
}

/// Replays DLQ2's messages one at a time with `replay_one` (normally the
/// library's range replay) and deletes each that succeeded. A message that
/// is not an on-failure record is skipped; one whose replay fails stays.
pub async fn replay_messages<F, Fut>(
    sqs: &Client,
    url: &str,
    limits: Limits,
    bar: &ProgressBar,
    replay_one: F,
) -> Result<Tally>
where
    F: Fn(OnFailureRecord) -> Fut,
    Fut: Future<Output = std::result::Result<(), String>>,
{
    let mut rx = Receiver::new(sqs, url, limits);
    let mut tally = Tally::default();
    loop {
        let page = match rx.next().await {
            Ok(page) => page,
            Err(err) if rx.considered == 0 => return Err(err),
            Err(err) => {
                tally.stopped_early = Some(err.to_string());
                break;
            }
        };
        if page.is_empty() {
            break;
        }
        for message in &page {
            match OnFailureRecord::from_body(message.body().unwrap_or_default()) {
                Err(err) => {
                    tally.skipped.push(problem(message, format!("{err}; left in dlq2")));
                    rx.hold(message);
                }
                Ok(record) => match replay_one(record).await {
                    Err(reason) => {
                        tally.failed.push(problem(message, format!("{reason}; left in dlq2")));
                        rx.hold(message);
                    }
                    Ok(()) => match delete(sqs, url, &[message]).await.remove(0) {
                        Ok(()) => tally.replayed += 1,
                        Err(reason) => tally.failed.push(problem(
                            message,
                            format!(
                                "replayed, but not deleted from dlq2 ({reason}); replaying it again changes nothing"
                            ),
                        )),
                    },
                },
            }
            bar.inc(1);
        }
    }
    tally.notes.extend(rx.release().await);
    Ok(tally)
}

/// Starts SQS's message move task from `source_arn` to `destination_arn`
/// and follows it with `ListMessageMoveTasks` until it ends. Interrupting
/// counterctl does not stop the task; `aws sqs cancel-message-move-task`
/// does.
pub async fn move_task(
    sqs: &Client,
    source_arn: &str,
    destination_arn: &str,
    rate: Option<u32>,
    poll: Duration,
    bar: &ProgressBar,
) -> Result<Tally> {
    let started = sqs
        .start_message_move_task()
        .source_arn(source_arn)
        .destination_arn(destination_arn)
        .set_max_number_of_messages_per_second(rate.and_then(|r| i32::try_from(r).ok()))
        .send()
        .await
        .map_err(error::aws("StartMessageMoveTask"))?;
    let handle = started.task_handle().map(str::to_owned);
    loop {
        let listed = sqs
            .list_message_move_tasks()
            .source_arn(source_arn)
            .max_results(10)
            .send()
            .await
            .map_err(error::aws("ListMessageMoveTasks"))?;
        // A task's handle is listed only while it runs; once it has ended,
        // the most recent task of the queue (listed first) is this one:
        // a queue runs one task at a time.
        let task = listed
            .results()
            .iter()
            .find(|t| handle.is_some() && t.task_handle() == handle.as_deref())
            .or_else(|| listed.results().first())
            .ok_or_else(|| Error::Aws {
                action: "ListMessageMoveTasks",
                message: format!("the message move task just started on {source_arn} is not listed"),
            })?;
        let moved = u64::try_from(task.approximate_number_of_messages_moved()).unwrap_or(0);
        let to_move = task
            .approximate_number_of_messages_to_move()
            .and_then(|n| u64::try_from(n).ok());
        if let Some(total) = to_move {
            bar.set_length(total);
        }
        bar.set_position(moved);
        let status = task.status().unwrap_or("UNKNOWN").to_owned();
        if !matches!(status.as_str(), "RUNNING" | "CANCELLING") {
            return Ok(Tally {
                moved,
                task: Some(MoveTask {
                    task_handle: handle,
                    status,
                    moved,
                    to_move,
                    failure_reason: task.failure_reason().map(str::to_owned),
                }),
                ..Tally::default()
            });
        }
        tokio::time::sleep(poll).await;
    }
}

impl fmt::Display for RedriveReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let route = match &self.destination {
            Some(destination) => format!("{} -> {}", self.source.name, destination.name),
            None => format!("{} (replayed here)", self.source.name),
        };
        writeln!(
            f,
            "Redrive {route} of stack {} (target {}, region {}): {}",
            self.location.stack_name,
            self.location.target,
            self.location.region,
            self.method.describe()
        )?;
        writeln!(
            f,
            "  {} held about {} message(s) at the start",
            self.source.name, self.source_depth
        )?;
        if self.dry_run {
            let count = |action: &str| self.preview.iter().filter(|p| p.action == action).count();
            writeln!(
                f,
                "  dry run, nothing was sent, replayed or deleted: would move {}, replay {}, skip {}",
                count("move"),
                count("replay"),
                count("skip")
            )?;
            for p in &self.preview {
                let what = match (&p.range, &p.problem) {
                    (Some(r), _) => format!(
                        "{} shard {} sequence {}..={} ({} record(s))",
                        r.condition, r.shard_id, r.start_sequence_number, r.end_sequence_number, r.batch_size
                    ),
                    (None, Some(problem)) => problem.clone(),
                    (None, None) => String::new(),
                };
                writeln!(f, "    {:<7} {}  {what}", p.action, p.message_id)?;
            }
        } else {
            writeln!(
                f,
                "  moved {}  replayed {}  failed {}  skipped {}",
                self.moved,
                self.replayed,
                self.failed.len(),
                self.skipped.len()
            )?;
        }
        if let Some(task) = &self.task {
            writeln!(
                f,
                "  move task {}: {} of {} moved{}",
                task.status,
                task.moved,
                task.to_move.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                task.failure_reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )?;
        }
        for (label, problems) in [("failed", &self.failed), ("skipped", &self.skipped)] {
            if !problems.is_empty() {
                writeln!(f, "  {label}:")?;
                for p in problems {
                    writeln!(f, "    {}: {}", p.message_id, p.reason)?;
                }
            }
        }
        if let Some(reason) = &self.stopped_early {
            writeln!(f, "  stopped early: {reason}")?;
        }
        if let Some(left) = self.left_behind {
            writeln!(
                f,
                "  left behind: about {left} message(s) still in {}",
                self.source.name
            )?;
        }
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
    use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchOutput;
    use aws_sdk_sqs::operation::list_message_move_tasks::ListMessageMoveTasksOutput;
    use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
    use aws_sdk_sqs::operation::send_message_batch::{SendMessageBatchError, SendMessageBatchOutput};
    use aws_sdk_sqs::operation::start_message_move_task::StartMessageMoveTaskOutput;
    use aws_sdk_sqs::types::error::QueueDoesNotExist;
    use aws_sdk_sqs::types::{
        BatchResultErrorEntry, ChangeMessageVisibilityBatchResultEntry, DeleteMessageBatchResultEntry,
        ListMessageMoveTasksResultEntry, SendMessageBatchResultEntry,
    };
    use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};

    use super::*;

    const SOURCE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/hck-dlq2";
    const DESTINATION: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/hck-dlq1";

    /// An on-failure record of a one-record batch, as an SQS body.
    fn record() -> String {
        use hybrid_counter::stream::replay::{RequestContext, ResponseContext, StreamBatchInfo};
        serde_json::to_string(&OnFailureRecord {
            request_context: RequestContext {
                request_id: "r".into(),
                function_arn: "arn:aws:lambda:us-east-1:123456789012:function:hck-stream-counter".into(),
                condition: "RetryAttemptsExhausted".into(),
                approximate_invoke_count: 2,
            },
            response_context: ResponseContext {
                status_code: 200,
                executed_version: "$LATEST".into(),
                function_error: Some("Unhandled".into()),
            },
            version: "1.0".into(),
            timestamp: "2026-01-01T00:00:00Z".into(),
            batch_info: StreamBatchInfo {
                shard_id: "shardId-1".into(),
                start_sequence_number: "800000000003126276362".into(),
                end_sequence_number: "800000000003126276362".into(),
                approximate_arrival_of_first_record: "2026-01-01T00:00:00Z".into(),
                approximate_arrival_of_last_record: "2026-01-01T00:00:00Z".into(),
                batch_size: 1,
                stream_arn: "arn:aws:dynamodb:us-east-1:123456789012:table/hck-resources/stream/x".into(),
            },
        })
        .unwrap()
    }

    /// A client answering from `rules` in order: any call out of that order
    /// fails the test.
    fn client(rules: &[&Rule]) -> Client {
        let interceptor = rules.iter().fold(
            MockResponseInterceptor::new().rule_mode(RuleMode::Sequential),
            |interceptor, rule| interceptor.with_rule(rule),
        );
        Client::from_conf(
            aws_sdk_sqs::Config::builder()
                .with_test_defaults()
                .region(aws_sdk_sqs::config::Region::new("us-east-1"))
                .http_client(create_mock_http_client())
                .interceptor(interceptor)
                .build(),
        )
    }

    fn limits() -> Limits {
        Limits {
            max: None,
            rate: None,
            page: SQS_BATCH,
            hold: HOLD,
            wait: Duration::ZERO,
        }
    }

    fn message(id: &str, body: &str) -> Message {
        Message::builder()
            .message_id(id)
            .receipt_handle(format!("handle-{id}"))
            .body(body)
            .build()
    }

    fn receive(messages: Vec<Message>) -> Rule {
        mock!(Client::receive_message).then_output(move || {
            ReceiveMessageOutput::builder()
                .set_messages(Some(messages.clone()))
                .build()
        })
    }

    fn receive_nothing() -> Rule {
        mock!(Client::receive_message).then_output(|| ReceiveMessageOutput::builder().build())
    }

    /// Confirms every entry sent (send) or deleted (delete), recording the
    /// bodies or receipt handles in `log`.
    fn send_ok(log: Arc<Mutex<Vec<String>>>) -> Rule {
        mock!(Client::send_message_batch)
            .match_requests(|req| req.queue_url() == Some(DESTINATION))
            .then_compute_output(move |req| {
                let mut out = SendMessageBatchOutput::builder()
                    .set_successful(Some(Vec::new()))
                    .set_failed(Some(Vec::new()));
                for entry in req.entries() {
                    log.lock().unwrap().push(format!("send {}", entry.message_body()));
                    out = out.successful(
                        SendMessageBatchResultEntry::builder()
                            .id(entry.id())
                            .message_id("new")
                            .md5_of_message_body("md5")
                            .build()
                            .unwrap(),
                    );
                }
                out.build().unwrap()
            })
    }

    fn delete_ok(log: Arc<Mutex<Vec<String>>>) -> Rule {
        mock!(Client::delete_message_batch)
            .match_requests(|req| req.queue_url() == Some(SOURCE))
            .then_compute_output(move |req| {
                let mut out = DeleteMessageBatchOutput::builder()
                    .set_successful(Some(Vec::new()))
                    .set_failed(Some(Vec::new()));
                for entry in req.entries() {
                    log.lock().unwrap().push(format!("delete {}", entry.receipt_handle()));
                    out = out.successful(DeleteMessageBatchResultEntry::builder().id(entry.id()).build().unwrap());
                }
                out.build().unwrap()
            })
    }

    fn release_ok(log: Arc<Mutex<Vec<String>>>) -> Rule {
        mock!(Client::change_message_visibility_batch)
            .match_requests(|req| req.entries().iter().all(|e| e.visibility_timeout() == Some(0)))
            .then_compute_output(move |req| {
                let mut out = ChangeMessageVisibilityBatchOutput::builder()
                    .set_successful(Some(Vec::new()))
                    .set_failed(Some(Vec::new()));
                for entry in req.entries() {
                    log.lock().unwrap().push(format!("release {}", entry.receipt_handle()));
                    out = out.successful(
                        ChangeMessageVisibilityBatchResultEntry::builder()
                            .id(entry.id())
                            .build()
                            .unwrap(),
                    );
                }
                out.build().unwrap()
            })
    }

    fn log() -> Arc<Mutex<Vec<String>>> {
        Arc::default()
    }

    #[test]
    fn pacing_spreads_messages_over_time_at_the_rate() {
        assert_eq!(pace_delay(0, Some(10), Duration::ZERO), Duration::ZERO);
        assert_eq!(pace_delay(10, Some(10), Duration::ZERO), Duration::from_secs(1));
        assert_eq!(
            pace_delay(10, Some(10), Duration::from_millis(400)),
            Duration::from_millis(600)
        );
        assert_eq!(pace_delay(10, Some(10), Duration::from_secs(5)), Duration::ZERO);
        assert_eq!(pace_delay(1_000, None, Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test]
    async fn each_message_is_sent_to_dlq1_before_it_is_deleted_from_dlq2() {
        let calls = log();
        let rules = [
            receive(vec![message("a", "first"), message("b", "second")]),
            send_ok(calls.clone()),
            delete_ok(calls.clone()),
            receive(vec![message("c", "third")]),
            send_ok(calls.clone()),
            delete_ok(calls.clone()),
            receive_nothing(),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 3);
        assert!(tally.failed.is_empty() && tally.stopped_early.is_none(), "{tally:?}");
        assert_eq!(
            *calls.lock().unwrap(),
            [
                "send first",
                "send second",
                "delete handle-a",
                "delete handle-b",
                "send third",
                "delete handle-c"
            ]
        );
    }

    #[tokio::test]
    async fn a_message_dlq1_did_not_accept_is_not_deleted_but_released() {
        let calls = log();
        let partial = mock!(Client::send_message_batch).then_output(|| {
            SendMessageBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .set_failed(Some(Vec::new()))
                .successful(
                    SendMessageBatchResultEntry::builder()
                        .id("0")
                        .message_id("new")
                        .md5_of_message_body("md5")
                        .build()
                        .unwrap(),
                )
                .failed(
                    BatchResultErrorEntry::builder()
                        .id("1")
                        .code("InternalError")
                        .message("try again")
                        .sender_fault(false)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap()
        });
        let rules = [
            receive(vec![message("a", "first"), message("b", "second")]),
            partial,
            delete_ok(calls.clone()),
            receive_nothing(),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 1);
        assert_eq!(tally.failed.len(), 1);
        assert_eq!(tally.failed[0].message_id, "b");
        assert!(tally.failed[0].reason.contains("InternalError: try again"), "{tally:?}");
        assert_eq!(*calls.lock().unwrap(), ["delete handle-a", "release handle-b"]);
    }

    #[tokio::test]
    async fn a_failed_send_deletes_nothing_stops_the_pass_and_releases_the_messages() {
        let calls = log();
        let down = mock!(Client::send_message_batch)
            .then_error(|| SendMessageBatchError::QueueDoesNotExist(QueueDoesNotExist::builder().build()));
        let rules = [
            receive(vec![message("a", "first"), message("b", "second")]),
            down,
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 0);
        assert_eq!(tally.failed.len(), 2, "{tally:?}");
        assert!(
            tally.stopped_early.as_deref().unwrap().contains("SendMessageBatch"),
            "{tally:?}"
        );
        assert_eq!(*calls.lock().unwrap(), ["release handle-a", "release handle-b"]);
    }

    #[tokio::test]
    async fn a_message_sent_but_not_deleted_is_reported_as_a_possible_duplicate() {
        let calls = log();
        let refused = mock!(Client::delete_message_batch).then_output(|| {
            DeleteMessageBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .set_failed(Some(Vec::new()))
                .failed(
                    BatchResultErrorEntry::builder()
                        .id("0")
                        .code("ReceiptHandleIsInvalid")
                        .sender_fault(true)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap()
        });
        let rules = [
            receive(vec![message("a", "first")]),
            send_ok(calls.clone()),
            refused,
            receive_nothing(),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 0);
        assert!(
            tally.failed[0].reason.contains("sent to dlq1 but not deleted")
                && tally.failed[0].reason.contains("duplicate"),
            "{tally:?}"
        );
        assert_eq!(*calls.lock().unwrap(), ["send first"]);
    }

    #[tokio::test]
    async fn max_stops_the_pass_after_that_many_messages() {
        let calls = log();
        let two_only = mock!(Client::receive_message)
            .match_requests(|req| req.max_number_of_messages() == Some(2))
            .then_output(|| {
                ReceiveMessageOutput::builder()
                    .messages(message("a", "first"))
                    .messages(message("b", "second"))
                    .build()
            });
        let rules = [two_only, send_ok(calls.clone()), delete_ok(calls.clone())];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let capped = Limits {
            max: Some(2),
            ..limits()
        };
        let tally = move_messages(&sqs, SOURCE, DESTINATION, capped, &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 2, "no third receive: {tally:?}");
    }

    #[tokio::test]
    async fn a_message_seen_again_in_the_same_pass_is_not_moved_twice() {
        let calls = log();
        let rules = [
            receive(vec![message("a", "first")]),
            send_ok(calls.clone()),
            delete_ok(calls.clone()),
            // Its hold ran out before the delete reached the queue: it is back.
            receive(vec![message("a", "first")]),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 1);
        assert_eq!(
            *calls.lock().unwrap(),
            ["send first", "delete handle-a", "release handle-a"]
        );
    }

    #[tokio::test]
    async fn a_dry_run_describes_every_message_and_makes_them_visible_again() {
        let calls = log();
        let rules = [
            receive(vec![message("a", &record()), message("b", "garbage")]),
            receive_nothing(),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = peek(&sqs, SOURCE, RedriveMode::Replay, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved + tally.replayed, 0);
        assert_eq!(tally.preview.len(), 2);
        assert_eq!(tally.preview[0].action, "replay");
        let range = tally.preview[0].range.as_ref().unwrap();
        assert_eq!(range.condition, "RetryAttemptsExhausted");
        assert_eq!(range.start_sequence_number, "800000000003126276362");
        assert_eq!(tally.preview[1].action, "skip");
        assert!(tally.preview[1].problem.is_some());
        assert_eq!(*calls.lock().unwrap(), ["release handle-a", "release handle-b"]);
    }

    #[tokio::test]
    async fn replay_deletes_only_what_it_replayed_and_skips_what_is_not_an_on_failure_record() {
        let calls = log();
        let rules = [
            receive(vec![message("a", &record())]),
            delete_ok(calls.clone()),
            receive(vec![message("b", "garbage")]),
            receive(vec![message("c", &record())]),
            receive_nothing(),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let attempts = Arc::new(Mutex::new(0));
        let counter = attempts.clone();
        let tally = replay_messages(
            &sqs,
            SOURCE,
            Limits { page: 1, ..limits() },
            &ProgressBar::hidden(),
            |record: OnFailureRecord| {
                let counter = counter.clone();
                async move {
                    assert_eq!(record.batch_info.batch_size, 1);
                    let mut n = counter.lock().unwrap();
                    *n += 1;
                    if *n == 1 {
                        Ok(())
                    } else {
                        Err("records 1..=2 of shard s are no longer in the stream".to_owned())
                    }
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(tally.replayed, 1);
        assert_eq!(tally.skipped.len(), 1);
        assert_eq!(tally.skipped[0].message_id, "b");
        assert!(
            tally.skipped[0].reason.contains("not an on-failure record"),
            "{tally:?}"
        );
        assert_eq!(tally.failed.len(), 1);
        assert!(tally.failed[0].reason.contains("no longer in the stream"), "{tally:?}");
        assert_eq!(
            *calls.lock().unwrap(),
            ["delete handle-a", "release handle-b", "release handle-c"]
        );
    }

    #[tokio::test]
    async fn the_move_task_is_followed_until_it_completes() {
        let start = mock!(Client::start_message_move_task)
            .match_requests(|req| {
                req.source_arn() == Some("arn:dlq2")
                    && req.destination_arn() == Some("arn:dlq1")
                    && req.max_number_of_messages_per_second() == Some(50)
            })
            .then_output(|| StartMessageMoveTaskOutput::builder().task_handle("task-1").build());
        let entry = |handle: Option<&str>, status: &str, moved: i64| {
            ListMessageMoveTasksResultEntry::builder()
                .set_task_handle(handle.map(str::to_owned))
                .status(status)
                .approximate_number_of_messages_moved(moved)
                .approximate_number_of_messages_to_move(3)
                .build()
        };
        let list = mock!(Client::list_message_move_tasks)
            .sequence()
            .output(move || {
                ListMessageMoveTasksOutput::builder()
                    .results(entry(Some("task-1"), "RUNNING", 1))
                    .build()
            })
            .output(move || {
                ListMessageMoveTasksOutput::builder()
                    .results(entry(None, "COMPLETED", 3))
                    .results(entry(None, "COMPLETED", 7))
                    .build()
            })
            .build();
        let sqs = client(&[&start, &list]);
        let bar = ProgressBar::hidden();
        let tally = move_task(&sqs, "arn:dlq2", "arn:dlq1", Some(50), Duration::ZERO, &bar)
            .await
            .unwrap();
        assert_eq!(tally.moved, 3);
        let task = tally.task.unwrap();
        assert_eq!((task.status.as_str(), task.to_move), ("COMPLETED", Some(3)));
        assert_eq!(task.task_handle.as_deref(), Some("task-1"));
        assert_eq!(bar.position(), 3);
    }

    #[test]
    fn a_failed_move_task_or_anything_left_behind_fails_the_report() {
        let report = |tally: Tally, dry_run: bool| RedriveReport {
            location: Location {
                stack_name: "hybrid-counter".into(),
                target: "aws".into(),
                region: "us-east-1".into(),
                endpoint: None,
            },
            mode: RedriveMode::Move,
            method: RedriveMethod::MessageMoveTask,
            dry_run,
            source: QueueRef {
                name: "dlq2".into(),
                url: SOURCE.into(),
                arn: "arn:dlq2".into(),
            },
            destination: None,
            max: None,
            rate: None,
            source_depth: 3,
            moved: tally.moved,
            replayed: tally.replayed,
            failed: tally.failed,
            skipped: tally.skipped,
            preview: tally.preview,
            task: tally.task,
            stopped_early: tally.stopped_early,
            left_behind: None,
            notes: tally.notes,
            seconds: 0.5,
        };
        let task = |status: &str| MoveTask {
            task_handle: None,
            status: status.into(),
            moved: 1,
            to_move: Some(3),
            failure_reason: Some("AccessDenied".into()),
        };
        let completed = report(
            Tally {
                moved: 3,
                task: Some(task("COMPLETED")),
                ..Tally::default()
            },
            false,
        );
        assert!(completed.succeeded());
        let failed = report(
            Tally {
                task: Some(task("FAILED")),
                ..Tally::default()
            },
            false,
        );
        assert!(!failed.succeeded());
        assert!(
            failed
                .to_string()
                .contains("move task FAILED: 1 of 3 moved (AccessDenied)"),
            "{failed}"
        );
        let skipped = report(
            Tally {
                skipped: vec![MessageProblem {
                    message_id: "m".into(),
                    reason: "not an on-failure record".into(),
                }],
                ..Tally::default()
            },
            false,
        );
        assert!(!skipped.succeeded());
        let json = serde_json::to_value(&skipped).unwrap();
        assert_eq!(json["skipped"][0]["message_id"], "m");
        assert_eq!(json["method"], "message-move-task");
        assert!(report(Tally::default(), true).succeeded());
        // Messages still in DLQ2 that the pass did not account for.
        let mut lost_receive = report(Tally::default(), false);
        assert!(lost_receive.succeeded());
        lost_receive.left_behind = Some(4);
        assert!(!lost_receive.succeeded());
        assert!(
            lost_receive
                .to_string()
                .contains("left behind: about 4 message(s) still in dlq2"),
            "{lost_receive}"
        );
        assert_eq!(serde_json::to_value(&lost_receive).unwrap()["left_behind"], 4);
    }
}
