//! What the fault tests share: the stand-in event source mapping they
//! deliver the stream with ([`deliver_like_a_mapping`]), the stream
//! processor's retries they use, the operations their fault plans name,
//! their report line, and the clean audit after the drain
//! ([`audit_clean`]).

use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::EventRecord as Record;
use hybrid_counter::audit::RepairMode;
use hybrid_counter::retry::Backoff;
use hybrid_counter::stream::Processor;
use hybrid_counter::{EpochMillis, Scope};
use hybrid_counter_aws::DynamoStore;

use crate::faults::{Conflicting, Fault, FaultPlan, FaultStats, Operation};
use crate::{Kit, deliver_with};

/// The stream processor's retries in these tests: the default shape, with
/// fewer and shorter waits, so that some faults outlast them and surface as
/// partial batch failures the "event source mapping" must retry.
pub const PROCESSOR_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(2),
    cap: Duration::from_millis(40),
    max_attempts: 4,
};

pub fn put() -> Operation {
    Operation::dynamodb("PutItem")
}

pub fn update() -> Operation {
    Operation::dynamodb("UpdateItem")
}

pub fn query() -> Operation {
    Operation::dynamodb("Query")
}

pub fn get() -> Operation {
    Operation::dynamodb("GetItem")
}

/// The batched processor reads the items of a batch's deletes in one
/// `BatchGetItem`; the per-record one with `GetItem`.
pub fn batch_get() -> Operation {
    Operation::dynamodb("BatchGetItem")
}

pub fn transact() -> Operation {
    Operation::dynamodb("TransactWriteItems")
}

/// What the stand-in event source mapping did.
#[derive(Debug, Default)]
pub struct Deliveries {
    pub invocations: u32,
    /// Invocations that reported a partial batch failure.
    pub partial_failures: u32,
}

/// A stream record's sequence number.
pub fn sequence_number(record: &Record) -> &str {
    hybrid_counter::stream::record::sequence_number(record)
}

/// Hands `records` to the stream handler in batches of 1 to 25 the way
/// the event source mapping does with `ReportBatchItemFailures`: a batch
/// that reports a failure is delivered again from the failed record on,
/// until it succeeds. The invariants of `scopes` are checked after every
/// invocation.
pub async fn deliver_like_a_mapping(
    processor: &Processor<DynamoStore>,
    kit: &Kit,
    scopes: &[Scope],
    mut records: &[Record],
    rng: &mut fastrand::Rng,
    seed: u64,
    deliveries: &mut Deliveries,
) {
    while !records.is_empty() {
        let (batch, later) = records.split_at(rng.usize(1..=25).min(records.len()));
        records = later;
        let mut rest = batch;
        for attempt in 0.. {
            assert!(attempt < 60, "seed {seed}: a batch still fails after 60 deliveries");
            deliveries.invocations += 1;
            let failed = deliver_with(processor, rest).await;
            for s in scopes {
                crate::assert_invariants(&kit.store, s).await;
            }
            let Some(first) = failed.first() else { break };
            deliveries.partial_failures += 1;
            assert_eq!(failed.len(), 1, "one checkpoint per response: {failed:?}");
            let at = rest
                .iter()
                .position(|r| sequence_number(r) == first)
                .unwrap_or_else(|| panic!("seed {seed}: the failure {first} is not a record of the batch"));
            rest = &rest[at..];
        }
    }
}

/// A short pause, as a fault.
pub const DELAY: Fault = Fault::Delay(Duration::from_millis(3));

/// Each kind of fault once on the next calls of `operation` (a conflict
/// only for `TransactWriteItems`), so no seed leaves a kind out.
pub fn each_kind_once(plan: FaultPlan, operation: Operation) -> FaultPlan {
    let mut faults = vec![DELAY, Fault::ApplyThenFail, Fault::Throttle, Fault::FailBefore];
    if operation == transact() {
        faults.push(Fault::TransactionConflict(Conflicting::One));
    }
    faults
        .into_iter()
        .fold(plan, |plan, fault| plan.next(operation.clone(), fault, 1))
}

/// The test's name, seed, time and the proxy's counters, on stderr
/// (`--nocapture` shows them; a failing test shows them anyway).
pub fn print_report(test: &str, seed: u64, started: Instant, stats: &FaultStats, notes: &str) {
    eprintln!(
        "{test}: seed {seed}, {:.1} s, {} faults injected, {} requests forwarded{notes}\n{stats}",
        started.elapsed().as_secs_f64(),
        stats.total_injected(),
        stats.total_forwarded()
    );
}

/// The audit at the end of every test, after the stream was drained:
/// no defect, EC == processed == live, nothing pending, BE <= live; then
/// `--repair` (BE may be raised to live, nothing else), and a second
/// audit finds no drift at all (the audits read at `now`, the repair
/// after the grace period). Returns the live count.
pub async fn audit_clean(store: &DynamoStore, s: &Scope, seed: u64, now: EpochMillis) -> u64 {
    let audit = crate::audit(store, s, RepairMode::None, 5, now)
        .await
        .expect("audit the scope");
    let counts = audit.counts;
    assert!(!audit.has_defect(), "seed {seed}: a defect in {s}: {audit:?}");
    assert_eq!(audit.eventual, counts.processed as i64, "seed {seed}: {audit:?}");
    assert_eq!(counts.processed, counts.live, "seed {seed}: {audit:?}");
    assert_eq!(
        (counts.pending_create, counts.pending_delete),
        (0, 0),
        "seed {seed}: {audit:?}"
    );
    assert!(audit.best_effort <= counts.live as i64, "seed {seed}: {audit:?}");
    // Once nothing is in flight (the grace period after the last write).
    let repair = crate::audit(store, s, RepairMode::Apply, 5, crate::after_grace())
        .await
        .expect("repair the scope");
    if let Some(planned) = repair.repair {
        assert_eq!(planned.eventual, None, "seed {seed}: EC needed a repair: {repair:?}");
        assert!(repair.repaired, "seed {seed}: {repair:?}");
    }
    let after = crate::audit(store, s, RepairMode::None, 5, now)
        .await
        .expect("audit again");
    assert!(
        after.findings.is_empty(),
        "seed {seed}: drift after the repair: {after:?}"
    );
    assert_eq!(
        (after.eventual, after.best_effort),
        (counts.live as i64, counts.live as i64)
    );
    counts.live
}

/// The SQS operations of the DLQs.
pub fn receive() -> Operation {
    Operation::sqs("ReceiveMessage")
}

pub fn send_batch() -> Operation {
    Operation::sqs("SendMessageBatch")
}

pub fn delete_batch() -> Operation {
    Operation::sqs("DeleteMessageBatch")
}
