//! The DynamoDB stream poller: one task per mapping and shard, one batch in
//! flight per shard, so records of a shard reach the function in order and a
//! failing batch holds back the rest of its shard (and only its shard), as
//! on AWS.
//!
//! Error handling follows "Retain discarded records for a DynamoDB event
//! source in Lambda"
//! (https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html):
//! a failed invocation is retried until `MaximumRetryAttempts` or
//! `MaximumRecordAgeInSeconds` runs out; with `BisectBatchOnFunctionError`
//! a failed batch is split in two and each half retried, and "splitting
//! batches doesn't consume the retry quota"; what is given up on is
//! described to the on-failure destination and the mapping moves on: an SQS
//! queue gets the on-failure record (a pointer to the range), an S3 bucket
//! an object holding the record and the batch's records, written where and
//! as Lambda writes it (`hybrid_counter_aws::failed_batch`); the emulator's
//! own S3 event notification then announces it to the queue the bucket
//! names (fakecloud delivers S3 notifications to SQS itself).
//!
//! Checkpoints live in memory, per mapping and shard, and only move forward.
//! A restarted runner starts again from each mapping's starting position:
//! with `TRIM_HORIZON` that replays the whole retained stream, which the
//! handlers absorb because every write they make is idempotent.

use std::collections::VecDeque;

use aws_lambda_events::event::dynamodb::EventRecord as Record;
use hybrid_counter::stream::record::{created_at, sequence_number};
use hybrid_counter_aws::failed_batch::{FailedBatchObject, ObjectRef, object_key};
use hybrid_counter_aws::replay::OnFailureRecord;
use hybrid_counter_aws::s3::put_failed_batch;
use hybrid_counter_aws::streams::{Position, ShardReader};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::batch::{StreamVerdict, expired_prefix, may_retry, next_window, stream_verdict};
use crate::ctx::{Ctx, Drained};
use crate::discover::{Mapping, StartingPosition, StreamSettings, parse_bucket_arn};
use crate::error::{Error, sdk_message};
use crate::invoke::Invoke;

/// Records read from the shard per look-ahead; a batch never spans two reads.
const READ_AHEAD: usize = 1_000;

const RETRY_ATTEMPTS_EXHAUSTED: &str = "RetryAttemptsExhausted";
const RECORD_AGE_EXCEEDED: &str = "RecordAgeExceeded";

type Part = crate::batch::Part<(Record, Value)>;

/// Plays a shard from its checkpoint until it has no more records right now.
pub(crate) async fn drain_shard<I: Invoke>(
    ctx: &Ctx<I>,
    mapping: &Mapping,
    settings: &StreamSettings,
    shard_id: &str,
    shard_closed: bool,
) -> Result<Drained, Error> {
    let reader = ShardReader::new(ctx.streams.clone(), mapping.source_arn.clone());
    let shard = Shard {
        ctx,
        mapping,
        settings,
        shard_id,
    };
    let mut drained = Drained::default();
    loop {
        if ctx.stopping() {
            return Ok(drained);
        }
        let position = match ctx.checkpoint(&mapping.uuid, shard_id) {
            Some(seq) => Position::After(seq),
            None if settings.starting_position == StartingPosition::Latest => {
                // LATEST: begin after whatever the shard holds when the
                // mapping is first seen.
                let existing = read(&reader, shard_id, &Position::TrimHorizon, usize::MAX).await?;
                if let Some(last) = existing.last() {
                    ctx.advance(&mapping.uuid, shard_id, sequence_number(last));
                }
                continue;
            }
            None => Position::TrimHorizon,
        };
        let records = read(&reader, shard_id, &position, READ_AHEAD).await?;
        if records.is_empty() {
            drained.finished = shard_closed;
            return Ok(drained);
        }
        drained.progressed = true;
        let events: Vec<Value> = records
            .iter()
            .map(|r| serde_json::to_value(r).unwrap_or_default())
            .collect();
        let window = next_window(&events, &mapping.filters, mapping.batch_size);
        let filtered = window.end - window.deliver.len();
        let before = ctx.mapping_report(mapping);
        let batch: Vec<(Record, Value)> = window
            .deliver
            .iter()
            .map(|&i| (records[i].clone(), events[i].clone()))
            .collect();
        if !batch.is_empty() && !shard.play_batch(batch).await? {
            return Ok(drained); // stopping: the checkpoint stays where the batch got to
        }
        ctx.update_report(mapping, |r| {
            r.records_filtered += filtered as u64;
            r.records_polled += window.end as u64;
        });
        ctx.advance(&mapping.uuid, shard_id, sequence_number(&records[window.end - 1]));
        ctx.emit_mapping_metrics(mapping, &before);
    }
}

async fn read(reader: &ShardReader, shard_id: &str, position: &Position, max: usize) -> Result<Vec<Record>, Error> {
    reader
        .read(shard_id, position, max)
        .await
        .map_err(|e| Error::emulator("DynamoDB Streams", "GetRecords")(e.to_string()))
}

/// One shard of a stream mapping, as [`drain_shard`] plays it.
struct Shard<'a, I> {
    ctx: &'a Ctx<I>,
    mapping: &'a Mapping,
    settings: &'a StreamSettings,
    shard_id: &'a str,
}

impl<I: Invoke> Shard<'_, I> {
    /// Delivers one batch until every record of it is checkpointed past:
    /// processed, or given up on. Returns false when the runner is stopping.
    async fn play_batch(&self, batch: Vec<(Record, Value)>) -> Result<bool, Error> {
        let Self {
            ctx,
            mapping,
            settings,
            shard_id,
        } = *self;
        let mut parts = VecDeque::from([Part::new(batch)]);
        while let Some(mut part) = parts.pop_front() {
            if ctx.stopping() {
                return Ok(false);
            }
            if let Some(max_age) = settings.maximum_record_age {
                let created: Vec<_> = part.records.iter().map(|(r, _)| Some(created_at(r))).collect();
                let expired = expired_prefix(&created, ctx.now(), max_age);
                if expired > 0 {
                    let old: Vec<_> = part.records.drain(..expired).collect();
                    self.give_up(&old, RECORD_AGE_EXCEEDED, part.invocations).await?;
                    if part.records.is_empty() {
                        continue;
                    }
                }
            }
            let payload = json!({ "Records": part.records.iter().map(|(_, e)| e).collect::<Vec<_>>() });
            let invocation = match ctx.invoker.invoke(&mapping.function_name, payload).await {
                Ok(invocation) => invocation,
                Err(err) => {
                    // Lambda could not invoke (the runtime is down): retried
                    // until the records are too old, without using up retries.
                    warn!(mapping = %mapping.uuid, %shard_id, error = %err, "could not invoke; retrying the batch");
                    parts.push_front(part);
                    ctx.pause().await;
                    continue;
                }
            };
            part.invocations += 1;
            let sequence_numbers: Vec<String> = part
                .records
                .iter()
                .map(|(r, _)| sequence_number(r).to_owned())
                .collect();
            ctx.update_report(mapping, |r| {
                r.invocations += 1;
                r.records_delivered += part.records.len() as u64;
            });
            let verdict = stream_verdict(&invocation, &sequence_numbers, mapping.report_batch_item_failures);
            debug!(mapping = %mapping.uuid, %shard_id, records = part.records.len(), ?verdict, "stream batch invoked");
            match verdict {
                StreamVerdict::Success => {
                    ctx.advance(&mapping.uuid, shard_id, &sequence_numbers[sequence_numbers.len() - 1]);
                }
                StreamVerdict::RetryFrom(index) => {
                    ctx.update_report(mapping, |r| {
                        r.partial_failures += 1;
                        r.records_failed_invoke += (part.records.len() - index) as u64;
                    });
                    if index > 0 {
                        ctx.advance(&mapping.uuid, shard_id, &sequence_numbers[index - 1]);
                    }
                    part.records.drain(..index);
                    self.retry_or_give_up(part, &mut parts).await?;
                }
                StreamVerdict::Failed { function_error, reason } => {
                    ctx.update_report(mapping, |r| {
                        r.function_errors += u64::from(function_error);
                        r.records_failed_invoke += part.records.len() as u64;
                    });
                    info!(mapping = %mapping.uuid, %shard_id, records = part.records.len(), %reason, "stream batch failed");
                    // Lambda bisects when the function returns an error, not
                    // when it returned an unusable partial batch response.
                    let split = if function_error && settings.bisect_batch_on_function_error {
                        part.bisect()
                    } else {
                        Err(part)
                    };
                    match split {
                        Ok((first, second)) => {
                            ctx.update_report(mapping, |r| r.bisects += 1);
                            parts.push_front(second);
                            parts.push_front(first);
                        }
                        Err(part) => self.retry_or_give_up(part, &mut parts).await?,
                    }
                }
            }
        }
        Ok(true)
    }

    async fn retry_or_give_up(&self, mut part: Part, parts: &mut VecDeque<Part>) -> Result<(), Error> {
        if may_retry(part.retries, self.settings.maximum_retry_attempts) {
            part.retries += 1;
            self.ctx.update_report(self.mapping, |r| r.retries += 1);
            parts.push_front(part);
            self.ctx.pause().await;
            Ok(())
        } else {
            self.give_up(&part.records, RETRY_ATTEMPTS_EXHAUSTED, part.invocations)
                .await
        }
    }

    /// Abandons `records` (in shard order, not empty): describes them to the
    /// on-failure destination in Lambda's format (to SQS no records, only where
    /// they are; to S3 the records too) and checkpoints past them. Sending is retried until it succeeds, so
    /// a record is never skipped without its description reaching the queue.
    async fn give_up(&self, records: &[(Record, Value)], condition: &str, invocations: u32) -> Result<(), Error> {
        let Self {
            ctx,
            mapping,
            settings,
            shard_id,
        } = *self;
        let plain: Vec<Record> = records.iter().map(|(r, _)| r.clone()).collect();
        let count = plain.len() as u64;
        match &settings.on_failure_destination {
            Some(destination) => {
                let now = ctx.now();
                let on_failure = OnFailureRecord::for_batch(
                    &mapping.function_arn,
                    condition,
                    invocations,
                    &mapping.source_arn,
                    shard_id,
                    &plain,
                    now,
                );
                let body = serde_json::to_string(&on_failure).unwrap_or_default();
                // An S3 destination keeps the batch with its records, as Lambda
                // writes it; the bucket's own notification (the emulator's)
                // announces the object to DLQ1.
                let kept = parse_bucket_arn(destination).map(|bucket| {
                    let object = ObjectRef {
                        bucket: bucket.to_owned(),
                        key: object_key(&mapping.uuid, shard_id, now),
                    };
                    (object, FailedBatchObject::new(on_failure.clone(), plain.clone()))
                });
                loop {
                    let sent = match &kept {
                        Some((object, batch)) => put_failed_batch(&ctx.s3, object, batch)
                            .await
                            .map_err(Error::emulator("S3", "PutObject")),
                        None => send_on_failure(ctx, destination, &body).await,
                    };
                    match sent {
                        Ok(()) => break,
                        Err(err) if ctx.stopping() => return Err(err),
                        Err(err) => {
                            warn!(mapping = %mapping.uuid, %destination, error = %err, "could not send the on-failure record; retrying");
                            ctx.pause().await;
                        }
                    }
                }
                warn!(
                    mapping = %mapping.uuid,
                    %shard_id,
                    %condition,
                    start = %on_failure.batch_info.start_sequence_number,
                    end = %on_failure.batch_info.end_sequence_number,
                    records = count,
                    %destination,
                    "gave up on a batch; described it to the on-failure destination"
                );
                ctx.update_report(mapping, |r| {
                    r.batches_to_on_failure += 1;
                    r.records_to_on_failure += count;
                });
            }
            None => {
                warn!(mapping = %mapping.uuid, %shard_id, %condition, records = count, "gave up on a batch with no on-failure destination: its records are skipped");
                ctx.update_report(mapping, |r| r.records_discarded += count);
            }
        }
        if let Some((last, _)) = records.last() {
            ctx.advance(&mapping.uuid, shard_id, sequence_number(last));
        }
        Ok(())
    }
}

async fn send_on_failure<I: Invoke>(ctx: &Ctx<I>, destination: &str, body: &str) -> Result<(), Error> {
    let url = ctx.queue_url(destination).await?;
    ctx.sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .map_err(|e| Error::emulator("SQS", "SendMessage")(sdk_message(e)))?;
    Ok(())
}
