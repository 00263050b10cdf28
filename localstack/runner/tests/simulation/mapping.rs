//! The stream's event source mapping, played by the runner's own pure
//! functions ([`esm_runner::batch`]): batching, filter, partial batch
//! responses, retries, bisect, record age and the on-failure destination,
//! invoking [`hybrid_counter::stream::Processor::process_json`] as the
//! stream Lambda does, with crashes mid batch and duplicate deliveries. The
//! stream splits shards under load; a child shard is read only after its
//! parent is finished ([`esm_runner::batch::readable_shards`]), and old
//! records expire.

use std::collections::VecDeque;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::EventRecord as Record;
use esm_runner::Invocation;
use esm_runner::batch::{StreamVerdict, expired_prefix, may_retry, next_window, readable_shards, stream_verdict};
use hybrid_counter::keys;
use hybrid_counter::memory::STREAM_ARN;
use hybrid_counter::stream::filter;
use hybrid_counter::stream::record::created_at;
use hybrid_counter_aws::replay::OnFailureRecord;
use serde_json::Value;

use crate::lanes::{Deliveries, Lane, Task, join_all, key_text, lane_of, previous_sequence, seq};
use crate::rng::Rng;
use crate::world::Sim;

const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:000000000000:function:stream-counter";

/// A batch, or part of one after a bisect or a partial failure.
type Part = esm_runner::batch::Part<(Record, Value)>;

impl Sim {
    /// Plays the stream until the clients are done (phase one): every lane
    /// of every readable shard at once, a round at a time; a round ends
    /// when a shard splits or finishes, and the next one starts the lanes
    /// of the shards readable then (a child once its parent is finished).
    pub(crate) async fn mapping(&self) {
        let mut round = 0;
        while !self.done() {
            round += 1;
            let generation = self.shard_generation.get();
            let mut lanes: Vec<Task<'_>> = Vec::new();
            for (shard, closed) in self.readable() {
                for lane in 0..self.p.lanes {
                    let mut r = Rng::new(self.seed, 200 + 1_000 * round + u64::from(lane));
                    let at = Lane {
                        shard: shard.clone(),
                        lane,
                    };
                    lanes.push(Box::pin(async move {
                        // Each lane polls on its own beat, not in step
                        // with the others or with a split.
                        tokio::time::sleep(r.millis(0, 250)).await;
                        while !self.done() && self.shard_generation.get() == generation {
                            if !self.lane_step(&at, closed, &mut r).await {
                                if self.lanes_done.borrow().contains(&at) {
                                    return;
                                }
                                tokio::time::sleep(r.millis(50, 250)).await;
                            }
                            self.expire();
                        }
                    }));
                }
            }
            if lanes.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            join_all(lanes).await;
        }
    }

    /// The shards the mapping may read now (id, closed), by the runner's
    /// own rule ([`readable_shards`]: a child after its parent).
    fn readable(&self) -> Vec<(String, bool)> {
        let shards = self.store.stream_shards();
        let lineage: Vec<(&str, Option<&str>)> = shards
            .iter()
            .map(|s| (s.shard_id.as_str(), s.parent_shard_id.as_deref()))
            .collect();
        let finished = self.finished_shards.borrow();
        readable_shards(&lineage, |id| finished.contains(id))
            .into_iter()
            .map(|at| (shards[at].shard_id.clone(), shards[at].closed))
            .collect()
    }

    /// One pass over every lane of every readable shard, one after another
    /// (the drain); false when none read anything and no shard finished.
    pub(crate) async fn poll_all(&self, r: &mut Rng) -> bool {
        let generation = self.shard_generation.get();
        let mut progressed = false;
        for (shard, closed) in self.readable() {
            for lane in 0..self.p.lanes {
                let at = Lane {
                    shard: shard.clone(),
                    lane,
                };
                while self.lane_step(&at, closed, r).await {
                    progressed = true;
                }
            }
        }
        progressed || self.shard_generation.get() != generation
    }

    /// The stream splits one open shard now and then while the clients run.
    pub(crate) async fn stream_splitter(&self) {
        let mut r = Rng::new(self.seed, 800);
        let mut splits = self.p.splits.clone();
        splits.sort();
        let started = tokio::time::Instant::now();
        for at in splits {
            tokio::time::sleep_until(started + at).await;
            let open: Vec<String> = self
                .store
                .stream_shards()
                .into_iter()
                .filter(|s| !s.closed)
                .map(|s| s.shard_id)
                .collect();
            let shard = &open[r.range(0, open.len() as u64 - 1) as usize];
            let children = self.store.split_stream_shard(shard);
            self.bump(|s| s.stream_splits += 1);
            self.shard_generation.set(self.shard_generation.get() + 1);
            self.log(|| format!("stream: {shard} split into {children:?}"));
        }
    }

    /// AWS's promise at the function: a record delivered for the first
    /// time never comes after a later record of the same item (retries
    /// and duplicates deliver again what was delivered; DLQ replays are
    /// not deliveries of the mapping).
    fn check_delivery_order(&self, records: &[(Record, Value)]) {
        let mut delivered = self.delivered.borrow_mut();
        let Deliveries { seen, highest } = &mut *delivered;
        for (record, event) in records {
            let n: u64 = seq(record).parse().unwrap_or_default();
            if !seen.insert(n) {
                continue;
            }
            let item = (
                key_text(event, keys::SCOPE).to_owned(),
                key_text(event, keys::ID).to_owned(),
            );
            let top = highest.entry(item.clone()).or_insert(n);
            if n < *top && self.order_violation.borrow().is_none() {
                *self.order_violation.borrow_mut() = Some(format!(
                    "the stream function got record {n} of {item:?} after its record {top}: out of order"
                ));
            }
            *top = (*top).max(n);
        }
    }

    fn advance(&self, at: &Lane, sequence_number: &str) {
        self.checkpoints
            .borrow_mut()
            .insert(at.clone(), sequence_number.to_owned());
    }

    /// Reads lane `at` on from its checkpoint and plays one batch of its
    /// records; false when there was nothing to read (and, on a `closed`
    /// shard, the lane is done with it).
    async fn lane_step(&self, at: &Lane, closed: bool, r: &mut Rng) -> bool {
        let after = self.checkpoints.borrow().get(at).cloned();
        // One GetRecords page, short enough that serializing it for the
        // filter costs little (a window that ends at the page is still one).
        let records = match self.store.stream_read(&at.shard, after.as_deref(), 64) {
            Ok(records) => records,
            Err(err) => {
                // The checkpoint fell behind the trim horizon: those records
                // are lost to the mapping (and to every DLQ).
                self.log(|| format!("mapping {at:?}: {err}; resuming at the trim horizon"));
                let horizon = self.store.stream_read(&at.shard, None, 1).unwrap_or_default();
                let resume = horizon.first().map(seq).and_then(|s| previous_sequence(&s));
                self.bump(|s| s.lost_under_mapping += 1);
                match resume {
                    Some(resume) => self.advance(at, &resume),
                    None => {
                        self.checkpoints.borrow_mut().remove(at);
                    }
                }
                return true;
            }
        };
        if records.is_empty() {
            if closed && self.lanes_done.borrow_mut().insert(at.clone()) {
                let all = (0..self.p.lanes).all(|lane| {
                    self.lanes_done.borrow().contains(&Lane {
                        shard: at.shard.clone(),
                        lane,
                    })
                });
                if all {
                    self.finished_shards.borrow_mut().insert(at.shard.clone());
                    self.shard_generation.set(self.shard_generation.get() + 1);
                    self.log(|| format!("mapping: {} finished", at.shard));
                }
            }
            return false;
        }
        let all: Vec<Value> = records.iter().map(|r| serde_json::to_value(r).unwrap()).collect();
        let mine: Vec<usize> = (0..records.len())
            .filter(|&i| lane_of(&all[i], self.p.lanes) == at.lane)
            .collect();
        let events: Vec<Value> = mine.iter().map(|&i| all[i].clone()).collect();
        let window = next_window(&events, &filter::patterns(), self.p.batch_size);
        let batch: Vec<(Record, Value)> = window
            .deliver
            .iter()
            .map(|&i| (records[mine[i]].clone(), events[i].clone()))
            .collect();
        if !batch.is_empty() {
            self.play_batch(at, batch, r).await;
        }
        // Past the window; when it took every record of the lane read, past
        // the other lanes' records read too.
        let past = if window.end == mine.len() {
            &records[records.len() - 1]
        } else {
            &records[mine[window.end - 1]]
        };
        self.advance(at, &seq(past));
        true
    }

    async fn play_batch(&self, at: &Lane, batch: Vec<(Record, Value)>, r: &mut Rng) {
        let in_flight = self.batches_in_flight.get() + 1;
        self.batches_in_flight.set(in_flight);
        self.bump(|s| s.most_batches_in_flight = s.most_batches_in_flight.max(in_flight));
        self.play_parts(at, batch, r).await;
        self.batches_in_flight.set(self.batches_in_flight.get() - 1);
    }

    async fn play_parts(&self, at: &Lane, batch: Vec<(Record, Value)>, r: &mut Rng) {
        let mut parts = VecDeque::from([Part::new(batch)]);
        while let Some(mut part) = parts.pop_front() {
            if let Some(max_age) = self.p.max_record_age {
                let created: Vec<_> = part.records.iter().map(|(r, _)| Some(created_at(r))).collect();
                let expired = expired_prefix(&created, self.now_system(), max_age);
                if expired > 0 {
                    let old: Vec<_> = part.records.drain(..expired).collect();
                    self.give_up(at, &old, "RecordAgeExceeded", part.invocations);
                    if part.records.is_empty() {
                        continue;
                    }
                }
            }
            let events: Vec<Value> = part.records.iter().map(|(_, e)| e.clone()).collect();
            self.check_delivery_order(&part.records);
            let invocation = self.invoke_stream(&events, r).await;
            part.invocations += 1;
            let seqs: Vec<String> = part.records.iter().map(|(r, _)| seq(r)).collect();
            let verdict = stream_verdict(&invocation, &seqs, true);
            self.log(|| format!("mapping: batch {}..{} -> {verdict:?}", seqs[0], seqs[seqs.len() - 1]));
            match verdict {
                StreamVerdict::Success => {
                    self.advance(at, &seqs[seqs.len() - 1]);
                    if self.stormy.get() && r.chance(self.p.duplicate_per_mille) {
                        // At-least-once: the same batch again.
                        self.bump(|s| s.duplicate_deliveries += 1);
                        let again = self.invoke_stream(&events, r).await;
                        self.log(|| format!("mapping: duplicate delivery -> {again:?}"));
                    }
                }
                StreamVerdict::RetryFrom(index) => {
                    self.bump(|s| s.partial_failures += 1);
                    if index > 0 {
                        self.advance(at, &seqs[index - 1]);
                    }
                    part.records.drain(..index);
                    self.retry_or_give_up(at, part, &mut parts, r).await;
                }
                StreamVerdict::Failed { function_error, .. } => {
                    let split = if function_error && self.p.bisect {
                        part.bisect()
                    } else {
                        Err(part)
                    };
                    match split {
                        Ok((first, second)) => {
                            self.bump(|s| s.bisects += 1);
                            parts.push_front(second);
                            parts.push_front(first);
                        }
                        Err(part) => self.retry_or_give_up(at, part, &mut parts, r).await,
                    }
                }
            }
        }
    }

    async fn retry_or_give_up(&self, at: &Lane, mut part: Part, parts: &mut VecDeque<Part>, r: &mut Rng) {
        if may_retry(part.retries, self.p.max_retries) {
            part.retries += 1;
            parts.push_front(part);
            tokio::time::sleep(r.millis(10, 500)).await;
        } else {
            self.give_up(at, &part.records, "RetryAttemptsExhausted", part.invocations);
        }
    }

    /// The on-failure destination: DLQ1 gets where the records are (the
    /// lane's shard and the first and last sequence numbers, a range that
    /// holds the other lanes' records too), not the records.
    fn give_up(&self, at: &Lane, records: &[(Record, Value)], condition: &str, invocations: u32) {
        let plain: Vec<Record> = records.iter().map(|(r, _)| r.clone()).collect();
        let on_failure = OnFailureRecord::for_batch(
            FUNCTION_ARN,
            condition,
            invocations,
            STREAM_ARN,
            &at.shard,
            &plain,
            self.now_system(),
        );
        let body = serde_json::to_string(&on_failure).unwrap();
        self.log(|| {
            format!(
                "mapping: gave up ({condition}) on {}..{} -> DLQ1",
                on_failure.batch_info.start_sequence_number, on_failure.batch_info.end_sequence_number
            )
        });
        self.bump(|s| s.batches_to_dlq1 += 1);
        self.send_dlq1(body);
        if let Some((last, _)) = records.last() {
            self.advance(at, &seq(last));
        }
    }

    /// The stream Lambda: `process_json` and its partial batch response,
    /// or a crash after part of the batch was processed.
    async fn invoke_stream(&self, events: &[Value], r: &mut Rng) -> Invocation {
        self.bump(|s| s.invocations += 1);
        if self.stormy.get() && r.chance(self.p.crash_per_mille) {
            let upto = r.range(0, events.len() as u64) as usize;
            self.processor.process_json(&events[..upto], self.now_stream()).await;
            self.bump(|s| s.handler_crashes += 1);
            return Invocation::error("Runtime.ExitError", "crashed mid-batch");
        }
        let report = self.processor.process_json(events, self.now_stream()).await;
        if report.batch_failure {
            return Invocation::error("Error", "a record without a sequence number failed");
        }
        Invocation::Response(serde_json::to_value(stream_counter::partial_batch_response(&report)).unwrap())
    }

    /// Trims records older than the retention.
    pub(crate) fn expire(&self) {
        if let Some(retention) = self.p.retention {
            let cutoff = self.now_ms() - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
            let n = self.store.trim_stream(cutoff);
            if n > 0 {
                self.log(|| format!("stream: {n} records expired"));
                self.bump(|s| s.records_expired += n as u64);
            }
        }
    }
}
