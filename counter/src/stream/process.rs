//! Runs the stream plans against a [`StreamStore`], retried with exponential
//! backoff and full jitter on conflicts, throttling and transient errors.
//!
//! [`Mode::Batched`] (the default) writes a batch as one transaction per
//! counter item — the net delta plus one flag flip or delete per record —
//! split at the transaction limit; [`Mode::PerRecord`] writes one
//! transaction per record, in shard order, and stays for comparison.
//! Either way, when something cannot be completed the batch stops and the
//! lowest sequence number not completed is reported, so the event source
//! mapping checkpoints there and retries from it (everything before it is
//! done; everything after it is redelivered and absorbed by the idempotency
//! flag and the delete's conditions).

use std::sync::Arc;

use futures_util::future::join_all;
use serde::Serialize;
use tracing::{debug, error, warn};

use super::plan::{self, BatchCancel, CancelVerdict, CounterGroup, DeleteDecision, Pending, ShardChoice};
use super::record::{Change, ChangeRecord, DecodeError};
use crate::error::StoreError;
use crate::retry::{Backoff, Retry, Sleeper};
use crate::scope_keys::ScopeKeys;
use crate::store::{IntoShared, ItemWrite, ResourceKey, StreamStore, Transaction};
use crate::time::EpochMillis;

/// Counter groups (scopes, or shards of them) of one batch written at once.
pub const GROUP_CONCURRENCY: usize = 8;

/// How a batch is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// One transaction per record: counter plus flag (the seed design).
    PerRecord,
    /// One transaction per counter item per batch, split at 100 actions.
    #[default]
    Batched,
}

impl Mode {
    /// Every mode, in the spelling of `PROCESSING_MODE` and of the stack's
    /// `ProcessingMode` parameter.
    pub const NAMES: [&'static str; 2] = ["batched", "per-record"];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Batched => "batched",
            Mode::PerRecord => "per-record",
        }
    }
}

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    Counted,
    DeletedCounted,
    DeletedUncounted,
    AlreadyDone,
    Ignored,
    Failed(String),
}

/// Totals of one batch, and where it stopped if it did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BatchReport {
    pub counted: u32,
    pub deleted_counted: u32,
    pub deleted_uncounted: u32,
    pub already_done: u32,
    pub ignored: u32,
    /// Retries spent on conflicts, throttling and transient errors.
    pub retries: u32,
    /// Sequence number of the first record that failed, if any.
    pub failed_sequence_number: Option<String>,
    pub failure_reason: Option<String>,
    /// A failed record without a sequence number: only failing the whole
    /// invocation makes the event source mapping retry (and bisect) it.
    pub batch_failure: bool,
}

impl BatchReport {
    /// Adds the counts and retries of part of the batch.
    fn add(&mut self, part: &BatchReport) {
        self.counted += part.counted;
        self.deleted_counted += part.deleted_counted;
        self.deleted_uncounted += part.deleted_uncounted;
        self.already_done += part.already_done;
        self.ignored += part.ignored;
        self.retries += part.retries;
    }

    fn record(&mut self, outcome: &RecordOutcome) {
        match outcome {
            RecordOutcome::Counted => self.counted += 1,
            RecordOutcome::DeletedCounted => self.deleted_counted += 1,
            RecordOutcome::DeletedUncounted => self.deleted_uncounted += 1,
            RecordOutcome::AlreadyDone => self.already_done += 1,
            RecordOutcome::Ignored => self.ignored += 1,
            RecordOutcome::Failed(_) => {}
        }
    }
}

/// A decoded record, or the failure to decode it (with its sequence number
/// when one was readable).
pub type Decoded = Result<ChangeRecord, (Option<String>, DecodeError)>;

/// The stream consumer's engine, shared by the stream handler and the DLQ
/// reprocessor.
/// It holds the store in an [`Arc`], so that a request path or an audit in
/// the same process can share it.
#[derive(Debug)]
pub struct Processor<S> {
    store: Arc<S>,
    backoff: Backoff,
    seed: Option<u64>,
    eventual_shards: u32,
    scope_keys: ScopeKeys,
    mode: Mode,
    clock: Option<crate::time::Clock>,
    sleeper: Sleeper,
}

impl<S> Clone for Processor<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            clock: self.clock.clone(),
            sleeper: self.sleeper.clone(),
            ..*self
        }
    }
}

impl<S: StreamStore> Processor<S> {
    /// The consumer over `store`: a store of its own, or an [`Arc`] shared
    /// with other users.
    pub fn new(store: impl IntoShared<S>) -> Self {
        Self {
            store: store.into_shared(),
            backoff: Backoff::default(),
            seed: None,
            eventual_shards: 1,
            scope_keys: ScopeKeys::ONE,
            mode: Mode::default(),
            clock: None,
            sleeper: Sleeper::tokio(),
        }
    }

    /// Stamps each transaction with `clock` when it is built (every try),
    /// not with the `now` the batch was handed: a counter's `updated_at` then
    /// says when it was written, however long the invocation retried. An
    /// audit relies on it ([`crate::audit::plan_repair_at`]).
    pub fn with_clock(mut self, clock: crate::time::Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The time to stamp a transaction built now.
    fn stamp(&self, handed: EpochMillis) -> EpochMillis {
        self.clock.as_ref().map_or(handed, |clock| clock.now().max(handed))
    }

    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Spreads the eventual counter over `shards` items (`eventual#<n>`).
    pub fn with_eventual_shards(mut self, shards: u32) -> Self {
        self.eventual_shards = shards.max(1);
        self
    }

    /// Counts each item on the counters key its resources key maps to
    /// ([`ScopeKeys::counters_key_of`]): the stack's scope keys.
    pub fn with_scope_keys(mut self, keys: ScopeKeys) -> Self {
        self.scope_keys = keys;
        self
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How retries wait (default: tokio's clock).
    pub fn with_sleeper(mut self, sleeper: Sleeper) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// A run of retries for one write, seeded from `rng`.
    fn retry(&self, rng: &mut fastrand::Rng) -> Retry {
        Retry::new(self.backoff, Some(rng.u64(..))).with_sleeper(self.sleeper.clone())
    }

    /// Makes the jitter reproducible (simulation and tests).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// Processes the raw JSON records of a Lambda stream event.
    pub async fn process_json(&self, records: &[serde_json::Value], now: EpochMillis) -> BatchReport {
        self.process(records.iter().map(ChangeRecord::from_json), now).await
    }

    /// Processes decoded records (in shard order) in the processor's mode.
    pub async fn process(&self, records: impl IntoIterator<Item = Decoded>, now: EpochMillis) -> BatchReport {
        let records: Vec<Decoded> = records.into_iter().collect();
        let first = records.first().and_then(|r| match r {
            Ok(record) => Some(record.sequence_number.as_str()),
            Err((seq, _)) => seq.as_deref(),
        });
        let shard = plan::ShardChoice::for_batch(self.eventual_shards, first).over(self.scope_keys);
        match self.mode {
            Mode::PerRecord => self.process_per_record(records, shard, now).await,
            Mode::Batched => self.process_batched(records, shard, now).await,
        }
    }

    /// One record after another; stops at the first failure.
    async fn process_per_record(&self, records: Vec<Decoded>, shard: ShardChoice, now: EpochMillis) -> BatchReport {
        let mut rng = self.seed.map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let mut report = BatchReport::default();
        for decoded in records {
            let (seq, outcome) = match decoded {
                Ok(record) => {
                    let outcome = self
                        .apply(&record.change, shard, now, &mut rng, &mut report.retries)
                        .await;
                    (Some(record.sequence_number), outcome)
                }
                Err((seq, err)) => {
                    error!(sequence_number = ?seq, error = %err, "undecodable stream record; reporting it as failed");
                    (seq, RecordOutcome::Failed(err.to_string()))
                }
            };
            report.record(&outcome);
            if let RecordOutcome::Failed(reason) = outcome {
                warn!(sequence_number = ?seq, %reason, "record failed; the batch is retried from it");
                report.batch_failure = seq.is_none();
                report.failed_sequence_number = seq;
                report.failure_reason = Some(reason);
                break;
            }
        }
        report
    }

    /// The records up to the first undecodable one, grouped per counter
    /// item; each group written in transactions of up to 100 actions,
    /// [`GROUP_CONCURRENCY`] groups at a time. Starts no further groups once
    /// one cannot be completed, and reports the lowest sequence number not
    /// completed.
    async fn process_batched(&self, records: Vec<Decoded>, shard: ShardChoice, now: EpochMillis) -> BatchReport {
        let mut rng = self.seed.map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let mut report = BatchReport::default();
        let undecodable = records.iter().position(Result::is_err);
        let decoded: Vec<&ChangeRecord> = records[..undecodable.unwrap_or(records.len())]
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .collect();
        for record in &decoded {
            if let Change::Ignore(reason) = &record.change {
                debug!(?reason, "ignored record");
                report.record(&RecordOutcome::Ignored);
            }
        }
        let groups = plan::group_batch(decoded.iter().enumerate().map(|(i, r)| (i, &r.change)), shard);
        // Groups write different counter items and different resource items
        // (all records of one item are in one group), so they are written
        // concurrently, a wave of GROUP_CONCURRENCY at a time: a batch
        // spread over many scopes costs a few round trips of latency, not
        // one per scope. When a group fails, no later wave starts; the
        // records not completed are the failed groups' leftovers and every
        // later wave's (records of groups that completed meanwhile are
        // done, and a redelivery finds them already processed).
        let mut failure: Option<(usize, String)> = None;
        let waves: Vec<&[CounterGroup]> = groups.chunks(GROUP_CONCURRENCY).collect();
        for (at, wave) in waves.iter().enumerate() {
            let seeds: Vec<u64> = wave.iter().map(|_| rng.u64(..)).collect();
            let outcomes = join_all(wave.iter().zip(seeds).map(|(group, seed)| async move {
                let (mut rng, mut report) = (fastrand::Rng::with_seed(seed), BatchReport::default());
                let result = self.write_group(group, now, &mut rng, &mut report).await;
                (result, report)
            }))
            .await;
            let (mut left, mut reason) = (Vec::new(), None);
            for (result, part) in outcomes {
                report.add(&part);
                if let Err((indexes, why)) = result {
                    left.extend(indexes);
                    reason.get_or_insert(why);
                }
            }
            if let Some(reason) = reason {
                let later = waves[at + 1..]
                    .iter()
                    .flat_map(|w| w.iter())
                    .flat_map(|g| g.records.iter());
                // A failed group always leaves the records it did not
                // complete; were none left, the batch is simply done.
                if let Some(lowest) = left.into_iter().chain(later.map(|p| p.index)).min() {
                    failure = Some((lowest, reason));
                }
                break;
            }
        }
        if let Some((index, reason)) = failure {
            let seq = decoded[index].sequence_number.clone();
            warn!(sequence_number = %seq, %reason, "batch stopped; it is retried from the lowest record not completed");
            report.failed_sequence_number = Some(seq);
            report.failure_reason = Some(reason);
        } else if let Some(Err((seq, err))) = undecodable.map(|at| &records[at]) {
            error!(sequence_number = ?seq, error = %err, "undecodable stream record; reporting it as failed");
            report.batch_failure = seq.is_none();
            report.failed_sequence_number = seq.clone();
            report.failure_reason = Some(err.to_string());
        }
        report
    }

    /// Writes one group chunk by chunk. On failure: the batch positions of
    /// the group's records not completed, and why.
    async fn write_group(
        &self,
        group: &CounterGroup,
        now: EpochMillis,
        rng: &mut fastrand::Rng,
        report: &mut BatchReport,
    ) -> Result<(), (Vec<usize>, String)> {
        let mut pending: Vec<Pending> = group.records.clone();
        while !pending.is_empty() {
            let chunk: Vec<Pending> = plan::next_chunk(&pending, plan::MAX_ITEMS_PER_TRANSACTION)
                .into_iter()
                .map(|at| pending[at].clone())
                .collect();
            let taken: std::collections::HashSet<usize> = chunk.iter().map(|p| p.index).collect();
            pending.retain(|p| !taken.contains(&p.index));
            if let Err((mut left, reason)) = self.write_chunk(group, chunk, now, rng, report).await {
                left.extend(pending.iter().map(|p| p.index));
                return Err((left, reason));
            }
        }
        Ok(())
    }

    /// Writes one chunk (distinct items) as one transaction: deletes decided
    /// on the items' current state, inserts found already counted dropped,
    /// the rest sent again.
    async fn write_chunk(
        &self,
        group: &CounterGroup,
        mut chunk: Vec<Pending>,
        now: EpochMillis,
        rng: &mut fastrand::Rng,
        report: &mut BatchReport,
    ) -> Result<(), (Vec<usize>, String)> {
        let mut retry = self.retry(rng);
        loop {
            let why = match self.try_chunk(group, &mut chunk, now, report).await {
                ChunkStep::Done => return Ok(()),
                ChunkStep::Resend => continue,
                ChunkStep::Fail(why) => return Err((chunk.iter().map(|p| p.index).collect(), why)),
                ChunkStep::Again(why) => why,
            };
            if !retry.pause().await {
                let why = format!("gave up after {} attempts: {why}", retry.max_attempts());
                return Err((chunk.iter().map(|p| p.index).collect(), why));
            }
            report.retries += 1;
        }
    }

    /// One attempt at a chunk; records it completes leave `chunk`.
    async fn try_chunk(
        &self,
        group: &CounterGroup,
        chunk: &mut Vec<Pending>,
        now: EpochMillis,
        report: &mut BatchReport,
    ) -> ChunkStep {
        let mut writes: Vec<(usize, ItemWrite)> = Vec::with_capacity(chunk.len());
        let mut finished = Vec::new();
        // Deletes are decided on their items' current state: one batched
        // consistent read for the chunk's deletes (distinct items).
        let deletes: Vec<ResourceKey> = chunk.iter().filter(|p| !p.is_insert).map(|p| p.key.clone()).collect();
        let mut states = if deletes.is_empty() {
            Vec::new()
        } else {
            match self.store.get_resources(&deletes).await {
                Ok(states) => states,
                Err(err) => return ChunkStep::from_store_error(err),
            }
        }
        .into_iter();
        for record in chunk.iter() {
            if record.is_insert {
                let write = ItemWrite::MarkCounted {
                    key: record.key.clone(),
                    incarnation: record.incarnation.clone(),
                };
                writes.push((record.index, write));
                continue;
            }
            let state = states.next().expect("one state per delete");
            match plan::delete_write(&record.key, &record.incarnation, state.as_ref()) {
                Ok(write) => writes.push((record.index, write)),
                Err(why) => {
                    debug!(scope = %record.key.scope, id = %record.key.id, why, "delete already done");
                    finished.push((record.index, RecordOutcome::AlreadyDone));
                }
            }
        }
        let finish = |chunk: &mut Vec<Pending>, report: &mut BatchReport, finished: Vec<(usize, RecordOutcome)>| {
            for (index, outcome) in finished {
                report.record(&outcome);
                chunk.retain(|p| p.index != index);
            }
        };
        if writes.is_empty() {
            finish(chunk, report, finished);
            return ChunkStep::Done;
        }
        let indexes: Vec<usize> = writes.iter().map(|(i, _)| *i).collect();
        let tx = plan::batch_transaction(
            &group.scope,
            &group.counter_name,
            writes.into_iter().map(|(_, w)| w).collect(),
            self.stamp(now),
        );
        match self.store.transact(&tx).await {
            Ok(()) => {
                finished.extend(indexes.iter().zip(&tx.items).map(|(i, w)| (*i, outcome_of(w))));
                finish(chunk, report, finished);
                ChunkStep::Done
            }
            Err(StoreError::Cancelled { reasons }) => match plan::interpret_batch_cancel(&tx, &reasons) {
                BatchCancel::Fail(why) => {
                    finish(chunk, report, finished);
                    ChunkStep::Fail(why)
                }
                BatchCancel::Retry {
                    done,
                    replan,
                    transient,
                } => {
                    finished.extend(done.iter().map(|at| (indexes[*at], RecordOutcome::AlreadyDone)));
                    finish(chunk, report, finished);
                    if chunk.is_empty() {
                        // Every record was done elsewhere; the conflict on the
                        // counter cancelled a write with nothing left to do.
                        ChunkStep::Done
                    } else if transient || !replan.is_empty() {
                        ChunkStep::Again(format!("transaction cancelled: {reasons:?}"))
                    } else {
                        // Only inserts already counted elsewhere: send the rest at once.
                        ChunkStep::Resend
                    }
                }
            },
            Err(err) => {
                finish(chunk, report, finished);
                ChunkStep::from_store_error(err)
            }
        }
    }

    async fn apply(
        &self,
        change: &Change,
        shard: ShardChoice,
        now: EpochMillis,
        rng: &mut fastrand::Rng,
        retries: &mut u32,
    ) -> RecordOutcome {
        let mut retry = self.retry(rng);
        loop {
            let step = match change {
                Change::Ignore(reason) => {
                    debug!(?reason, "ignored record");
                    return RecordOutcome::Ignored;
                }
                Change::Insert { key, incarnation } => {
                    let tx = plan::count_insert(key, incarnation, shard, self.stamp(now));
                    self.attempt(&tx, true, RecordOutcome::Counted).await
                }
                Change::SoftDelete { key, incarnation } => self.attempt_delete(key, incarnation, shard, now).await,
            };
            match step {
                Step::Finished(outcome) => return outcome,
                Step::Again(why) if !retry.pause().await => {
                    return RecordOutcome::Failed(format!("gave up after {} attempts: {why}", retry.max_attempts()));
                }
                Step::Again(_) => *retries += 1,
            }
        }
    }

    async fn attempt_delete(&self, key: &ResourceKey, incarnation: &str, shard: ShardChoice, now: EpochMillis) -> Step {
        let state = match self.store.get_resource(key).await {
            Ok(state) => state,
            Err(err) => return Step::from_store_error(err),
        };
        match plan::resolve_delete(key, incarnation, state.as_ref(), shard, self.stamp(now)) {
            DeleteDecision::AlreadyDone(why) => {
                debug!(scope = %key.scope, id = %key.id, why, "delete already done");
                Step::Finished(RecordOutcome::AlreadyDone)
            }
            DeleteDecision::Write(tx) => {
                let success = if matches!(tx.items[..], [ItemWrite::DeleteCounted { .. }]) {
                    RecordOutcome::DeletedCounted
                } else {
                    RecordOutcome::DeletedUncounted
                };
                self.attempt(&tx, false, success).await
            }
        }
    }

    async fn attempt(&self, tx: &Transaction, is_insert: bool, success: RecordOutcome) -> Step {
        match self.store.transact(tx).await {
            Ok(()) => Step::Finished(success),
            Err(StoreError::Cancelled { reasons }) => match plan::interpret_cancel(tx, &reasons, is_insert) {
                CancelVerdict::AlreadyDone => Step::Finished(RecordOutcome::AlreadyDone),
                CancelVerdict::Replan => Step::Again("item changed while deciding; re-reading it".into()),
                CancelVerdict::Retry => Step::Again(format!("transaction cancelled: {reasons:?}")),
                CancelVerdict::Fail(why) => Step::Finished(RecordOutcome::Failed(why)),
            },
            Err(err) => Step::from_store_error(err),
        }
    }
}

enum Step {
    Finished(RecordOutcome),
    Again(String),
}

/// What a committed item write did for its record.
fn outcome_of(write: &ItemWrite) -> RecordOutcome {
    match write {
        ItemWrite::MarkCounted { .. } => RecordOutcome::Counted,
        ItemWrite::DeleteCounted { .. } => RecordOutcome::DeletedCounted,
        ItemWrite::DeleteUncounted { .. } => RecordOutcome::DeletedUncounted,
    }
}

enum ChunkStep {
    /// Every record of the chunk is completed.
    Done,
    /// Some records were found done; send the others now.
    Resend,
    /// Retry after a backoff.
    Again(String),
    Fail(String),
}

impl ChunkStep {
    fn from_store_error(err: StoreError) -> Self {
        match Step::from_store_error(err) {
            Step::Again(why) => ChunkStep::Again(why),
            Step::Finished(RecordOutcome::Failed(why)) => ChunkStep::Fail(why),
            Step::Finished(outcome) => ChunkStep::Fail(format!("unexpected outcome {outcome:?}")),
        }
    }
}

impl Step {
    fn from_store_error(err: StoreError) -> Self {
        match err {
            // Transient and unavailable errors are retried: every write is
            // conditional, so a retry after an ambiguous failure that was in
            // fact applied fails its condition and reads as already done.
            StoreError::Transient(_) | StoreError::Unavailable(_) => Step::Again(err.to_string()),
            StoreError::Malformed(_)
            | StoreError::Rejected(_)
            | StoreError::Gone(_)
            | StoreError::ConditionFailed
            | StoreError::Cancelled { .. } => Step::Finished(RecordOutcome::Failed(err.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ids::{ResourceId, Scope};
    use crate::items::ResourceItem;
    use crate::keys;
    use crate::memory::{Fault, MemoryStore, Op};
    use crate::store::{NewResource, RequestStore};

    fn key(id: &str) -> ResourceKey {
        ResourceKey {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new(id).unwrap(),
        }
    }

    async fn put(store: &MemoryStore, id: &str, counted: bool, deleted: bool) {
        store.put_item("acct", id, "i", counted, deleted).await;
    }

    fn insert(seq: &str, id: &str) -> Decoded {
        Ok(ChangeRecord {
            sequence_number: seq.into(),
            change: Change::Insert {
                key: key(id),
                incarnation: "i".into(),
            },
        })
    }

    fn processor() -> Processor<MemoryStore> {
        Processor::new(MemoryStore::new())
            .with_backoff(Backoff {
                base: Duration::from_millis(10),
                cap: Duration::from_millis(100),
                max_attempts: 4,
            })
            .with_seed(1)
    }

    fn transacts(p: &Processor<MemoryStore>) -> usize {
        p.store().calls().iter().filter(|op| **op == Op::Transact).count()
    }

    fn eventual(p: &Processor<MemoryStore>) -> i64 {
        p.store().counter("acct", keys::EVENTUAL_NAME)
    }

    #[tokio::test(start_paused = true)]
    async fn a_retried_transaction_carries_the_time_it_was_sent_not_the_batchs() {
        let started = tokio::time::Instant::now();
        let p = processor().with_clock(crate::time::Clock::new(move || {
            1_000 + i64::try_from(started.elapsed().as_millis()).unwrap()
        }));
        put(p.store(), "a", false, false).await;
        for _ in 0..3 {
            p.store().inject(Op::Transact, Fault::Conflict);
        }
        // Handed the invocation's start (1,000); the write lands after three
        // backoffs.
        let report = p.process([insert("1", "a")], 1_000).await;
        assert_eq!(report.counted, 1);
        let written = p.store().counter_updated_at("acct", keys::EVENTUAL_NAME);
        assert!(written > 1_000, "stamped {written}, the batch's time");
        assert_eq!(written, 1_000 + i64::try_from(started.elapsed().as_millis()).unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn conflicts_are_retried_until_the_transaction_goes_through() {
        let p = processor();
        put(p.store(), "a", false, false).await;
        for _ in 0..3 {
            p.store().inject(Op::Transact, Fault::Conflict);
        }
        let report = p.process([insert("1", "a")], 0).await;
        assert_eq!((report.counted, report.retries), (1, 3));
        assert_eq!(report.failed_sequence_number, None);
        assert_eq!(eventual(&p), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn exhausted_retries_report_the_record_and_stop_the_batch() {
        let p = processor();
        for id in ["a", "b", "c"] {
            put(p.store(), id, false, false).await;
        }
        assert_eq!(p.process([insert("1", "a")], 0).await.counted, 1);
        for _ in 0..4 {
            p.store().inject(Op::Transact, Fault::Conflict);
        }
        let report = p.process([insert("2", "b"), insert("3", "c")], 0).await;
        assert_eq!(report.failed_sequence_number.as_deref(), Some("2"));
        assert!(!report.batch_failure);
        // Record 3 was not attempted: the mapping redelivers it after "2".
        assert_eq!(transacts(&p), 1 + 4);
        assert_eq!(eventual(&p), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_last_attempt_that_finds_every_record_done_finishes_the_batch_without_a_panic() {
        // Both items were counted by another worker. On the last attempt the
        // cancellation says so for each of them (`ConditionalCheckFailed`),
        // with a `TransactionConflict` on the counter: nothing is left to
        // write, so the batch is done, not failed at no record.
        let p = processor();
        for id in ["a", "b"] {
            put(p.store(), id, true, false).await;
        }
        for _ in 0..3 {
            p.store().inject(Op::Transact, Fault::Conflict);
        }
        p.store().inject(Op::Transact, Fault::ConflictOnCounter);
        let report = p.process([insert("1", "a"), insert("2", "b")], 0).await;
        assert_eq!(report.failed_sequence_number, None, "{report:?}");
        assert!(!report.batch_failure);
        assert_eq!((report.counted, report.already_done, report.retries), (0, 2, 3));
        assert_eq!(transacts(&p), 4);
        assert_eq!(eventual(&p), 0, "counted elsewhere, not here");
    }

    #[tokio::test(start_paused = true)]
    async fn mixed_reasons_drop_the_records_done_and_retry_the_rest() {
        // a is counted already, b is not: the conflict on the counter
        // cancels the transaction; a is done, b is sent again and counted.
        let p = processor();
        put(p.store(), "a", true, false).await;
        put(p.store(), "b", false, false).await;
        p.store().inject(Op::Transact, Fault::ConflictOnCounter);
        let report = p.process([insert("1", "a"), insert("2", "b")], 0).await;
        assert_eq!(report.failed_sequence_number, None, "{report:?}");
        assert_eq!((report.counted, report.already_done, report.retries), (1, 1, 1));
        assert_eq!(eventual(&p), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_and_ambiguous_errors_are_retried_without_double_counting() {
        let p = processor();
        put(p.store(), "a", false, false).await;
        p.store().inject(Op::Transact, Fault::Throttled);
        p.store().inject(Op::Transact, Fault::AppliedThenUnavailable);
        let report = p.process([insert("1", "a")], 0).await;
        // The retry after the applied-then-500 fails its condition: done.
        assert_eq!((report.counted, report.already_done, report.retries), (0, 1, 2));
        assert_eq!(eventual(&p), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_redelivered_insert_is_already_done() {
        let p = processor();
        put(p.store(), "a", false, false).await;
        let first = p.process([insert("1", "a")], 0).await;
        let again = p.process([insert("1", "a")], 0).await;
        assert_eq!((first.counted, again.counted, again.already_done), (1, 0, 1));
        assert_eq!(eventual(&p), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_racing_its_insert_is_decided_again_on_fresh_state() {
        // The item reads as never counted; its INSERT is counted by another
        // worker before our uncounted delete lands, so that delete fails its
        // condition and the record is decided again: a counted delete.
        let p = processor();
        put(p.store(), "a", false, true).await;
        p.store().after_next(Op::GetResource, |tables| {
            for resource in tables.resources.values_mut() {
                resource.state.counter_processed = true;
            }
            *tables.counters.entry(("acct".into(), "eventual".into())).or_default() += 1;
        });
        let delete = Ok(ChangeRecord {
            sequence_number: "9".into(),
            change: Change::SoftDelete {
                key: key("a"),
                incarnation: "i".into(),
            },
        });
        let report = p.process([delete], 0).await;
        assert_eq!(report.deleted_counted, 1, "{report:?}");
        assert_eq!(eventual(&p), 0);
        assert!(p.store().tables().resources.is_empty());
    }

    #[tokio::test]
    async fn undecodable_records_fail_by_sequence_number_or_fail_the_batch() {
        let p = processor();
        let report = p
            .process_json(&[serde_json::json!({"dynamodb": {"SequenceNumber": "5"}})], 0)
            .await;
        assert_eq!(report.failed_sequence_number.as_deref(), Some("5"));
        assert!(!report.batch_failure);
        let report = p.process_json(&[serde_json::json!(42)], 0).await;
        assert!(report.batch_failure);
        assert_eq!(report.failed_sequence_number, None);
    }
    fn delete(seq: &str, id: &str) -> Decoded {
        Ok(ChangeRecord {
            sequence_number: seq.into(),
            change: Change::SoftDelete {
                key: key(id),
                incarnation: "i".into(),
            },
        })
    }

    fn inserts(ids: impl IntoIterator<Item = usize>) -> Vec<Decoded> {
        ids.into_iter()
            .map(|n| insert(&n.to_string(), &format!("w{n}")))
            .collect()
    }

    #[tokio::test]
    async fn batched_is_the_default_mode() {
        assert_eq!(processor().mode(), Mode::Batched);
        assert_eq!(processor().with_mode(Mode::PerRecord).mode(), Mode::PerRecord);
    }

    #[tokio::test(start_paused = true)]
    async fn one_hundred_fifty_inserts_of_one_scope_take_two_transactions() {
        for (mode, expected) in [(Mode::Batched, 2), (Mode::PerRecord, 150)] {
            let p = processor().with_mode(mode);
            for n in 0..150 {
                put(p.store(), &format!("w{n}"), false, false).await;
            }
            let report = p.process(inserts(0..150), 0).await;
            assert_eq!(report.counted, 150, "{mode:?}");
            assert_eq!(transacts(&p), expected, "{mode:?}");
            assert_eq!(eventual(&p), 150, "{mode:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn items_already_counted_are_dropped_and_the_rest_committed() {
        let p = processor();
        for n in 0..10 {
            put(p.store(), &format!("w{n}"), false, false).await;
        }
        assert_eq!(p.process(inserts([2, 5, 7]), 0).await.counted, 3);
        assert_eq!(eventual(&p), 3);
        let report = p.process(inserts(0..10), 0).await;
        assert_eq!((report.counted, report.already_done, report.retries), (7, 3, 0));
        assert_eq!(report.failed_sequence_number, None);
        // One cancelled with the 3 reasons, one committed without them.
        assert_eq!(transacts(&p), 1 + 2);
        assert_eq!(eventual(&p), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_batch_twice_does_not_double_count() {
        let p = processor();
        for n in 0..5 {
            put(p.store(), &format!("w{n}"), false, false).await;
        }
        let first = p.process(inserts(0..5), 0).await;
        let again = p.process(inserts(0..5), 0).await;
        assert_eq!((first.counted, again.counted, again.already_done), (5, 0, 5));
        assert_eq!(eventual(&p), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn insert_and_delete_of_one_item_in_one_batch_count_then_uncount_it() {
        let p = processor();
        put(p.store(), "a", false, true).await;
        put(p.store(), "b", false, false).await;
        let report = p
            .process([insert("1", "a"), insert("2", "b"), delete("3", "a")], 0)
            .await;
        assert_eq!((report.counted, report.deleted_counted), (2, 1), "{report:?}");
        assert_eq!(
            transacts(&p),
            2,
            "the delete of a waits for the transaction counting it"
        );
        assert_eq!(eventual(&p), 1);
        let left: Vec<String> = p.store().tables().resources.keys().map(|(_, id)| id.clone()).collect();
        assert_eq!(left, vec!["b".to_string()]);
    }

    #[tokio::test(start_paused = true)]
    async fn delete_before_insert_leaves_eventual_count_exact_in_batches() {
        let p = processor();
        put(p.store(), "a", false, true).await;
        let report = p.process([delete("1", "a")], 0).await;
        assert_eq!(report.deleted_uncounted, 1);
        let late = p.process([insert("0", "a")], 0).await;
        assert_eq!(late.already_done, 1);
        assert_eq!(eventual(&p), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_batch_names_the_lowest_record_not_completed() {
        // Groups: acct [1, 3], other [2], written concurrently. The delete
        // (3) fails: 1 and 2 are done, 3 is the lowest not completed.
        let x = ResourceKey {
            scope: Scope::new("other").unwrap(),
            id: ResourceId::new("x").unwrap(),
        };
        let other = Ok(ChangeRecord {
            sequence_number: "2".into(),
            change: Change::Insert {
                key: x.clone(),
                incarnation: "i".into(),
            },
        });
        let p = processor();
        put(p.store(), "a", false, true).await;
        let item = ResourceItem {
            scope: x.scope.clone(),
            id: x.id.clone(),
            counter_processed: false,
            deleted: false,
            incarnation: "i".into(),
            created_at: 0,
            be_shard: None,
        };
        p.store()
            .put_resource(&NewResource {
                item,
                payload: Default::default(),
            })
            .await
            .unwrap();
        p.store().inject(Op::GetResource, Fault::Rejected);
        let report = p.process([insert("1", "a"), other.clone(), delete("3", "a")], 0).await;
        assert_eq!(report.counted, 2);
        assert_eq!(report.failed_sequence_number.as_deref(), Some("3"));
        assert_eq!(eventual(&p), 1, "a is counted, its delete not yet");
        assert_eq!(p.store().counter("other", keys::EVENTUAL_NAME), 1);
        // A redelivery from an earlier record (a bisected retry) lands
        // everything exactly once.
        let again = p.process([other, delete("3", "a")], 0).await;
        assert_eq!(again.failed_sequence_number, None, "{again:?}");
        assert_eq!((again.counted, again.already_done, again.deleted_counted), (0, 1, 1));
        assert_eq!(eventual(&p), 0);
        assert_eq!(p.store().counter("other", keys::EVENTUAL_NAME), 1);
    }
}
