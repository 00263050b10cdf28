//! Runs the stream plans against a [`Store`]: records in shard order, each
//! retried with exponential backoff and full jitter on conflicts, throttling
//! and transient errors. The first record that cannot be completed stops the
//! batch and is reported by sequence number, so the event source mapping
//! checkpoints there and retries from it (everything before it is done;
//! everything after it is redelivered and absorbed by the idempotency flag).

use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde::Serialize;
use tracing::{debug, error, warn};

use super::plan::{self, CancelVerdict, DeleteDecision};
use super::record::{Change, ChangeRecord, DecodeError};
use crate::EpochMillis;
use crate::backoff::Backoff;
use crate::error::StoreError;
use crate::store::{ResourceKey, Store, Transaction};

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
    /// The partial batch response for Lambda: the first failed record, or
    /// nothing when all succeeded.
    pub fn to_response(&self) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        if let Some(seq) = &self.failed_sequence_number {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(seq.clone());
            response.batch_item_failures.push(failure);
        }
        response
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
#[derive(Debug, Clone)]
pub struct Processor<S> {
    store: S,
    backoff: Backoff,
    seed: Option<u64>,
    eventual_shards: u32,
}

impl<S: Store> Processor<S> {
    pub fn new(store: S) -> Self {
        Self {
            store,
            backoff: Backoff::default(),
            seed: None,
            eventual_shards: 1,
        }
    }

    /// Spreads the eventual counter over `shards` items (`eventual#<n>`).
    pub fn with_eventual_shards(mut self, shards: u32) -> Self {
        self.eventual_shards = shards.max(1);
        self
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
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

    /// Processes decoded records in order; stops at the first failure.
    pub async fn process(&self, records: impl IntoIterator<Item = Decoded>, now: EpochMillis) -> BatchReport {
        let mut rng = self.seed.map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let mut report = BatchReport::default();
        for decoded in records {
            let (seq, outcome) = match decoded {
                Ok(record) => {
                    let outcome = self.apply(&record.change, now, &mut rng, &mut report.retries).await;
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

    async fn apply(
        &self,
        change: &Change,
        now: EpochMillis,
        rng: &mut fastrand::Rng,
        retries: &mut u32,
    ) -> RecordOutcome {
        let mut last_error = String::new();
        for attempt in 0..self.backoff.max_attempts {
            if attempt > 0 {
                *retries += 1;
                tokio::time::sleep(self.backoff.delay(attempt - 1, rng)).await;
            }
            let step = match change {
                Change::Ignore(reason) => {
                    debug!(?reason, "ignored record");
                    return RecordOutcome::Ignored;
                }
                Change::Insert { key, incarnation } => {
                    let tx = plan::count_insert(key, incarnation, self.eventual_shards, now);
                    self.attempt(&tx, true, RecordOutcome::Counted).await
                }
                Change::SoftDelete { key, incarnation } => self.attempt_delete(key, incarnation, now).await,
            };
            match step {
                Step::Finished(outcome) => return outcome,
                Step::Again(why) => last_error = why,
            }
        }
        RecordOutcome::Failed(format!(
            "gave up after {} attempts: {last_error}",
            self.backoff.max_attempts
        ))
    }

    async fn attempt_delete(&self, key: &ResourceKey, incarnation: &str, now: EpochMillis) -> Step {
        let state = match self.store.get_resource(key).await {
            Ok(state) => state,
            Err(err) => return Step::from_store_error(err),
        };
        match plan::resolve_delete(key, incarnation, state.as_ref(), self.eventual_shards, now) {
            DeleteDecision::AlreadyDone(why) => {
                debug!(scope = %key.scope, id = %key.id, why, "delete already done");
                Step::Finished(RecordOutcome::AlreadyDone)
            }
            DeleteDecision::Write(tx) => {
                let success = if tx.counter.is_some() {
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
    use crate::store::NewResource;
    use crate::store::memory::{Fault, MemoryStore, Op};

    fn key(id: &str) -> ResourceKey {
        ResourceKey {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new(id).unwrap(),
        }
    }

    async fn put(store: &MemoryStore, id: &str, counted: bool, deleted: bool) {
        let item = ResourceItem {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new(id).unwrap(),
            counter_processed: counted,
            deleted,
            incarnation: "i".into(),
            created_at: 0,
        };
        store
            .put_resource(&NewResource {
                item,
                payload: Default::default(),
            })
            .await
            .unwrap();
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
    async fn conflicts_are_retried_until_the_transaction_goes_through() {
        let p = processor();
        put(p.store(), "a", false, false).await;
        for _ in 0..3 {
            p.store().inject(Op::Transact, Fault::Conflict);
        }
        let report = p.process([insert("1", "a")], 0).await;
        assert_eq!((report.counted, report.retries), (1, 3));
        assert!(report.to_response().batch_item_failures.is_empty());
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
        let response = report.to_response();
        assert_eq!(response.batch_item_failures.len(), 1);
        assert_eq!(response.batch_item_failures[0].item_identifier.as_deref(), Some("2"));
        // Record 3 was not attempted: the mapping redelivers it after "2".
        assert_eq!(transacts(&p), 1 + 4);
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
        assert!(report.to_response().batch_item_failures.is_empty());
    }
}
