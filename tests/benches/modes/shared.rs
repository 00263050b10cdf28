//! What the parts of `make bench` part 2 share (the consumers, the
//! request fan-out, the phase and latency figures, the tables' config):
//! `modes.rs` and its `sharded` and `throttling` parts use it, it uses none
//! of them.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::EventRecord as Record;
use hybrid_counter::store::meter::MeterSnapshot;
use hybrid_counter::stream::Processor;
use hybrid_counter::{CounterConfig, ResourceId, Scope, now_millis};
use hybrid_counter_aws::DynamoStore;
use serde::Serialize;

pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub const BATCH_SIZE: usize = 100;
/// What one DynamoDB item sustains (DESIGN §7).
pub const ITEM_WRITE_UNITS_PER_SECOND: f64 = 1000.0;

/// One phase (creates or deletes) of one design.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Phase {
    pub events: u64,
    pub seconds: f64,
    pub events_per_second: f64,
    pub invocations: u64,
    pub write_units: f64,
    pub write_units_per_event: f64,
    pub counter_item_writes_per_event: f64,
    pub transactions: u64,
    pub requests: u64,
    pub conflicts: u64,
    pub condition_cancels: u64,
    pub retries: u64,
    /// Counter writes with a net delta of 0 (one insert counted and one
    /// counted item deleted in one transaction): they only bump the
    /// counter's version so an audit sees the change (DESIGN §5a).
    pub version_only_counter_writes: u64,
    /// Write units per counted event without those writes: what the code
    /// before the audit-safety fix sent (2 WU each, a transactional write of
    /// a counter item under 1 KB).
    pub write_units_per_event_without_version_only: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

pub fn config(prefix: &str, shards: u32) -> CounterConfig {
    CounterConfig {
        resources_table: format!("{prefix}-resources"),
        counters_table: format!("{prefix}-counters"),
        default_limit: Some(u64::MAX / 2),
        eventual_shards: shards,
        best_effort_shards: 1,
        admission: Default::default(),
        scope_keys: Default::default(),
    }
}

/// A hash of `record`'s item key: its lane is the hash modulo the lanes,
/// its worker inside an invocation the high half modulo the workers.
pub fn key_hash(record: &Record) -> u64 {
    let mut hasher = DefaultHasher::new();
    let mut keys: Vec<_> = record
        .change
        .keys
        .iter()
        .map(|(k, v)| (k.clone(), format!("{v:?}")))
        .collect();
    keys.sort();
    keys.hash(&mut hasher);
    hasher.finish()
}

/// What one invocation did: counted events, retries, and the position in
/// its batch of the lowest record not completed, with why.
pub struct Invocation {
    pub events: u64,
    pub retries: u64,
    pub failed: Option<(usize, Option<String>)>,
}

/// One invocation on `batch` (records with their [`key_hash`]). With one
/// worker the processor gets the whole batch, records one after another in
/// per-record mode. With more, the batch is split by item key (each item's
/// records stay in order in one part) and the parts are processed at once,
/// the way a handler could spend the concurrency the batched design spends
/// on its transactions; the failure reported is the lowest record not
/// completed in any part, as a partial batch response would name it.
pub async fn invoke(
    processor: &Processor<DynamoStore>,
    batch: &[(u64, serde_json::Value)],
    workers: usize,
) -> Invocation {
    let workers = workers.max(1);
    let mut parts: Vec<Vec<(usize, serde_json::Value)>> = vec![Vec::new(); workers];
    for (at, (hash, record)) in batch.iter().enumerate() {
        parts[((hash >> 32) % workers as u64) as usize].push((at, record.clone()));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        let processor = processor.clone();
        tasks.spawn(async move {
            let records: Vec<serde_json::Value> = part.iter().map(|(_, r)| r.clone()).collect();
            let report = processor.process_json(&records, now_millis()).await;
            let failed = report.failed_sequence_number.as_deref().map(|seq| {
                let at = part
                    .iter()
                    .find(|(_, r)| r["dynamodb"]["SequenceNumber"].as_str() == Some(seq))
                    .map(|(at, _)| *at)
                    .expect("the failure names a record of the batch");
                (at, report.failure_reason.clone())
            });
            Invocation {
                events: u64::from(report.counted + report.deleted_counted),
                retries: u64::from(report.retries),
                failed,
            }
        });
    }
    let mut total = Invocation {
        events: 0,
        retries: 0,
        failed: None,
    };
    while let Some(part) = tasks.join_next().await {
        let part = part.expect("invocation part");
        total.events += part.events;
        total.retries += part.retries;
        if let Some(failed) = part.failed {
            total.failed = Some(match total.failed.take() {
                Some(other) if other.0 < failed.0 => other,
                _ => failed,
            });
        }
    }
    total
}

/// Consumes `records` with `lanes` concurrent consumers, as the event source
/// mapping would: batches of [`BATCH_SIZE`], retried from the first failure
/// the partial batch response names; `workers` per invocation ([`invoke`]).
pub async fn consume(processor: &Processor<DynamoStore>, records: Vec<Record>, lanes: usize, workers: usize) -> Phase {
    let mut per_lane: Vec<Vec<(u64, serde_json::Value)>> = vec![Vec::new(); lanes];
    for record in &records {
        let hash = key_hash(record);
        per_lane[(hash % lanes as u64) as usize].push((hash, serde_json::to_value(record).expect("a stream record")));
    }
    let before = processor.store().meter().snapshot();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for lane in per_lane {
        let processor = processor.clone();
        tasks.spawn(async move {
            let (mut at, mut invocations, mut events, mut retries, mut stuck) = (0, 0u64, 0u64, 0u64, 0);
            while at < lane.len() {
                let batch = &lane[at..(at + BATCH_SIZE).min(lane.len())];
                let report = invoke(&processor, batch, workers).await;
                invocations += 1;
                events += report.events;
                retries += report.retries;
                match report.failed {
                    None => at += batch.len(),
                    Some((failed, reason)) => {
                        stuck = if failed == 0 { stuck + 1 } else { 0 };
                        assert!(stuck < 50, "a batch keeps failing: {reason:?}");
                        at += failed;
                    }
                }
            }
            (invocations, events, retries)
        });
    }
    let mut phase = Phase::default();
    while let Some(done) = tasks.join_next().await {
        let (invocations, events, retries) = done.expect("consumer lane");
        phase.invocations += invocations;
        phase.events += events;
        phase.retries += retries;
    }
    phase.seconds = started.elapsed().as_secs_f64();
    let cost: MeterSnapshot = processor.store().meter().snapshot().since(&before);
    let per_event = |n: f64| n / phase.events.max(1) as f64;
    phase.events_per_second = phase.events as f64 / phase.seconds;
    phase.write_units = cost.write_units;
    phase.write_units_per_event = per_event(cost.write_units);
    phase.counter_item_writes_per_event = per_event(cost.counter_item_writes() as f64);
    phase.transactions = cost.transactions_committed;
    phase.requests = cost.requests.total();
    phase.conflicts = cost.transactions_cancelled.conflict;
    phase.condition_cancels = cost.transactions_cancelled.condition;
    phase.version_only_counter_writes = cost.version_only_counter_writes;
    phase.write_units_per_event_without_version_only =
        per_event(cost.write_units - 2.0 * cost.version_only_counter_writes as f64);
    phase
}

/// Runs `jobs` (scope, id) through `op` with `workers` concurrent callers.
pub async fn fan_out<F, Fut>(jobs: Vec<(Scope, ResourceId)>, workers: usize, op: F)
where
    F: Fn(Scope, ResourceId) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let queue = std::sync::Arc::new(std::sync::Mutex::new(jobs));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (queue, op) = (queue.clone(), op.clone());
        tasks.spawn(async move {
            loop {
                let job = queue.lock().expect("queue").pop();
                let Some((scope, id)) = job else { break };
                op(scope, id).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("worker");
    }
}

pub fn latency(mut samples: Vec<Duration>) -> Latency {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    Latency {
        samples: samples.len(),
        p50_ms: at(0.50).as_secs_f64() * 1000.0,
        p99_ms: at(0.99).as_secs_f64() * 1000.0,
    }
}
