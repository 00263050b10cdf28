//! `make compare`: the counter approaches of the lab (`counter-lab`) side
//! by side on one private emulator, under the same workload and the same
//! injected faults. Numbers, not assertions. Writes
//! `target/compare/compare.json` and `COMPARISON.md`;
//! `tests/benches/compare_chart.py` draws `docs/comparison.png` from the JSON.
//!
//! The stack is deployed by `counterctl` ([`e2e::counterctl::deployed`]) and
//! the local runner plays its stream mapping in process the whole time
//! ([`e2e::in_process_runner`]), so the hybrid counter's eventual counter
//! is kept by the real pipeline. The callers of every strategy talk through
//! one fault proxy ([`e2e::faults::FaultProxy`]) with a plan seeded from
//! `HCK_FAULT_SEED` (printed); the pipeline through a second proxy without
//! faults, which only counts its requests.
//!
//! Per strategy (a fresh counter each): `COMPARE_CALLERS` concurrent
//! callers (8) share `COMPARE_OPS` changes (320): first three quarters
//! +1s against a threshold of two thirds of them (for the approaches that
//! take one), then the rest -1s. Every strategy gets the same SDK tuning
//! (the proxy's: standard retries, 3 attempts, 5-50 ms backoff).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use counter_lab::atomic::AtomicCounter;
use counter_lab::hybrid::Hybrid;
use counter_lab::ledger::Ledger;
use counter_lab::occ::{Check, Occ};
use counter_lab::strategy::{Place, Strategy};
use counter_lab::token_set::TokenSet;
use counter_lab::transaction::{TokenUse, TxMarker, TxToken};
use e2e::faults::{Fault, FaultKind, FaultPlan, FaultProxy, FaultStats, Operation};
use hybrid_counter::config::Admission;
use hybrid_counter::{CounterConfig, Scope};
use results::{Rates, Results, Row, Workload};
use shared::{env_number, latency};
use trips::{round_trips, since};

// Only the figures' helpers of the `modes` bench are used here.
#[allow(dead_code)]
#[path = "modes/shared.rs"]
mod shared;

#[path = "compare/changes.rs"]
mod changes;
#[path = "compare/hot_likes.rs"]
mod hot_likes;
#[path = "compare/likes.rs"]
mod likes;
#[path = "compare/report.rs"]
mod report;
#[path = "compare/results.rs"]
mod results;
#[path = "compare/trips.rs"]
mod trips;

const LAB_TABLE: &str = "counter-lab";

/// The DynamoDB operations the strategies send; each gets the same faults.
const OPERATIONS: [&str; 5] = ["GetItem", "PutItem", "UpdateItem", "Query", "TransactWriteItems"];

/// Those that write: an ambiguous failure of one may have applied a change.
const WRITES: [&str; 3] = ["PutItem", "UpdateItem", "TransactWriteItems"];

const RATES: Rates = Rates {
    fail_before: 0.02,
    apply_then_fail: 0.02,
    apply_then_fail_burst: 0.002,
    burst_length: 24,
    resend_bursts: 4,
    resend_burst_calls: 3,
    throttle: 0.02,
    transaction_conflict: 0.05,
};

/// `plan` with the random faults every DynamoDB request meets, the
/// callers' and the pipeline's.
fn random_faults(mut plan: FaultPlan) -> FaultPlan {
    for name in OPERATIONS {
        let op = || Operation::dynamodb(name);
        plan = plan
            .random(op(), Fault::ApplyThenFail, RATES.apply_then_fail)
            .random(op(), Fault::FailBefore, RATES.fail_before)
            .random(op(), Fault::Throttle, RATES.throttle);
        if name == "TransactWriteItems" {
            plan = plan.random(
                op(),
                Fault::TransactionConflict(e2e::faults::Conflicting::One),
                RATES.transaction_conflict,
            );
        }
    }
    plan
}

/// The callers' plan of a run of `changes` changes: the random faults, and
/// a fixed number of resend bursts ([`bursts`]): in each of those changes
/// the first calls of every write operation (as many as the SDK's
/// attempts) are answered 500 after they were applied.
fn callers_plan(seed: u64, changes: u64) -> FaultPlan {
    let mut plan = random_faults(FaultPlan::new(seed));
    for change in bursts(seed, changes) {
        for name in WRITES {
            plan = plan.next_in_change(
                change,
                Operation::dynamodb(name),
                Fault::ApplyThenFail,
                RATES.resend_burst_calls,
            );
        }
    }
    plan
}

/// The changes of a run that meet a resend burst.
fn bursts(seed: u64, changes: u64) -> Vec<u64> {
    counter_lab::bursts::burst_changes(seed, changes, RATES.resend_bursts)
}

/// The stream pipeline's plan: its requests belong to no change, so it
/// keeps the random bursts of 500s after apply, in order of calls.
fn pipeline_plan(seed: u64) -> FaultPlan {
    let mut plan = FaultPlan::new(seed);
    for name in OPERATIONS {
        plan = plan.bursts(
            Operation::dynamodb(name),
            Fault::ApplyThenFail,
            RATES.apply_then_fail_burst,
            RATES.burst_length,
        );
    }
    random_faults(plan)
}

/// `total` changes of `delta` shared by `callers` concurrent callers,
/// numbered from `first` (the fault proxy draws each change's faults by its
/// number); the latency of each.
async fn phase(
    strategy: &Arc<dyn Strategy>,
    callers: usize,
    (first, total): (u64, u64),
    delta: i64,
    threshold: Option<i64>,
) -> Vec<Duration> {
    let left = Arc::new(AtomicU64::new(total));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..callers {
        let (strategy, left) = (strategy.clone(), left.clone());
        tasks.spawn(async move {
            let mut samples = Vec::new();
            while let Ok(left_before) = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)) {
                let change = first + (total - left_before);
                let started = Instant::now();
                let _ = changes::as_change(change, strategy.apply(delta, threshold)).await;
                samples.push(started.elapsed());
            }
            samples
        });
    }
    let mut samples = Vec::new();
    while let Some(done) = tasks.join_next().await {
        samples.extend(done.expect("caller"));
    }
    samples
}

/// Reads the pipeline sends (`GetItem`, `BatchGetItem`, `Query`), each
/// charged 1 RU: its items are under 4 KB.
const PIPELINE_READS: [&str; 3] = ["GetItem", "BatchGetItem", "Query"];

/// The capacity the hybrid's stream pipeline caused, from its requests:
/// each counted record is one transactional write of its resource item
/// (the flag flip or the hard delete: 2 WU under 1 KB), each transaction
/// adds its counter item (2 WU); every read 1 RU.
fn pipeline_units(records: i64, stats: &FaultStats) -> (f64, f64) {
    let forwarded = |name: &str| {
        stats
            .forwarded
            .get(&Some(Operation::dynamodb(name)))
            .copied()
            .unwrap_or(0) as f64
    };
    let transactions = forwarded("TransactWriteItems");
    let reads: f64 = PIPELINE_READS.iter().map(|name| forwarded(name)).sum();
    (2.0 * records.max(0) as f64 + 2.0 * transactions, reads)
}

async fn run(
    strategy: Arc<dyn Strategy>,
    hybrid: Option<&Hybrid>,
    proxy: &FaultProxy,
    pipeline: &FaultProxy,
    workload: Workload,
    seed: u64,
) -> Row {
    // Every approach, and the hybrid's pipeline, starts the same plan afresh.
    proxy.restart_plan(callers_plan(seed, workload.increments + workload.decrements));
    pipeline.restart_plan(pipeline_plan(seed));
    let threshold = strategy.supports_threshold().then_some(workload.threshold);
    let units = |s: &dyn Strategy| {
        let m = s.meter().snapshot();
        (m.write_units, m.read_units)
    };
    let pipeline_before = pipeline.stats();
    let start_units = units(strategy.as_ref());
    let before = proxy.stats();
    let started = Instant::now();
    let mut samples = phase(&strategy, workload.callers, (0, workload.increments), 1, threshold).await;
    let mut busy = started.elapsed();
    let mut faulted = since(&proxy.stats(), &before);
    let after_increments = units(strategy.as_ref());
    let believed_after_increments = strategy.truth().snapshot().value;

    // Reads for the report go past the faults and are not charged to the changes.
    proxy.set_enabled(false);
    let peak = strategy.actual().await.expect("value after the +1s");
    let lost_best_effort = match hybrid {
        Some(hybrid) => {
            let (be, _) = hybrid.counters().await.expect("BE after the +1s");
            Some(counter_lab::hybrid::lost_increments(peak, be))
        }
        None => None,
    };
    proxy.set_enabled(true);

    let before_decrements = units(strategy.as_ref());
    let before = proxy.stats();
    let started = Instant::now();
    samples.extend(
        phase(
            &strategy,
            workload.callers,
            (workload.increments, workload.decrements),
            -1,
            None,
        )
        .await,
    );
    busy += started.elapsed();
    let last_change = Instant::now();
    let after = since(&proxy.stats(), &before);
    let end_units = units(strategy.as_ref());
    for (op, n) in after.forwarded {
        *faulted.forwarded.entry(op).or_default() += n;
    }
    for (key, n) in after.injected {
        *faulted.injected.entry(key).or_default() += n;
    }
    let write_units = (after_increments.0 - start_units.0) + (end_units.0 - before_decrements.0);
    let read_units = (after_increments.1 - start_units.1) + (end_units.1 - before_decrements.1);

    proxy.set_enabled(false);
    let (mut seconds_until_exact, mut best_effort, mut eventual) = (None, None, None);
    if let Some(hybrid) = hybrid {
        let deadline = last_change + Duration::from_secs(120);
        loop {
            let live = strategy.actual().await.expect("live items");
            let (be, ec) = hybrid.counters().await.expect("counters");
            let exact = ec == live;
            if exact || Instant::now() > deadline {
                if exact {
                    seconds_until_exact = Some(last_change.elapsed().as_secs_f64());
                } else {
                    eprintln!(
                        "{}: EC {ec} still not the {live} live items after 120 s",
                        strategy.name()
                    );
                }
                (best_effort, eventual) = (Some(be), Some(ec));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let pipeline_stats = since(&pipeline.stats(), &pipeline_before);
    let pipeline_trips = hybrid.map(|_| round_trips(&pipeline_stats));
    let value = strategy.actual().await.expect("final value");
    let before_read = units(strategy.as_ref());
    strategy.read().await.expect("final read");
    let read_units_per_read = units(strategy.as_ref()).1 - before_read.1;
    proxy.set_enabled(true);

    let truth = strategy.truth().snapshot();
    let ops = (workload.increments + workload.decrements) as f64;
    let ambiguous: u64 = WRITES
        .iter()
        .map(|name| faulted.injected(&Operation::dynamodb(name), FaultKind::ApplyThenFail))
        .sum();
    let drift = value - truth.value;
    // A write answered 500 after it was applied was charged all the same;
    // the emulator reports nothing for it: charged as the approach's mean
    // applied change.
    let applied_changes = (truth.applied as f64).max(1.0);
    let unreported_write_units = ambiguous as f64 * write_units / applied_changes;
    let (pipeline_write_units, pipeline_read_units) = match hybrid {
        // Creates that landed, then deletes that landed.
        Some(_) => pipeline_units(2 * peak - value, &pipeline_stats),
        None => (0.0, 0.0),
    };
    let extra_increments = peak - believed_after_increments;
    let extra_decrements = (peak - value) - (believed_after_increments - truth.value);
    Row {
        strategy: strategy.name().to_owned(),
        seed,
        threshold,
        truth: truth.value,
        value,
        drift,
        extra_increments,
        extra_decrements,
        peak,
        overshoot: threshold.map(|t| (peak - t).max(0)),
        lost_best_effort,
        applied: truth.applied,
        refused: truth.refused,
        errors: truth.errors,
        ambiguous_failures: ambiguous,
        faults: faulted.total_injected(),
        extra_per_1000_ambiguous: if ambiguous == 0 {
            0.0
        } else {
            (extra_increments + extra_decrements) as f64 * 1000.0 / ambiguous as f64
        },
        round_trips_per_op: round_trips(&faulted) as f64 / ops,
        write_units_per_op: write_units / ops,
        read_units_per_op: read_units / ops,
        unreported_write_units_per_op: unreported_write_units / ops,
        pipeline_write_units_per_op: pipeline_write_units / ops,
        pipeline_read_units_per_op: pipeline_read_units / ops,
        read_units_per_read,
        latency: latency(samples),
        ops_per_second: ops / busy.as_secs_f64(),
        seconds_until_exact,
        best_effort,
        eventual,
        pipeline_round_trips_per_op: pipeline_trips.map(|n| n as f64 / ops),
    }
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(compare());
}

async fn compare() {
    let whole = Instant::now();
    let operations = env_number("COMPARE_OPS", 320).max(8);
    let runs = env_number("COMPARE_SEEDS", 5).max(1);
    let callers = env_number("COMPARE_CALLERS", 8).max(1) as usize;
    let increments = operations * 3 / 4;
    let workload = Workload {
        callers,
        increments,
        decrements: operations - increments,
        threshold: (increments * 2 / 3) as i64,
    };
    let base_seed = FaultPlan::from_env("make compare").seed();
    // One fault seed per run, each run of every approach under the same one.
    let seeds: Vec<u64> = (0..runs).map(|i| base_seed.wrapping_add(i)).collect();
    let (emulator, _ctl, config) = e2e::counterctl::deployed().await;
    let proxy = FaultProxy::start(&emulator.endpoint, callers_plan(base_seed, operations));
    let pipeline = FaultProxy::start(&emulator.endpoint, pipeline_plan(base_seed));
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&proxy.sdk_config().await)
            .interceptor(changes::ChangeHeader)
            .build(),
    );
    proxy.set_enabled(false);
    counter_lab::table::create_table(&client, LAB_TABLE)
        .await
        .expect("create the lab's table");
    proxy.set_enabled(true);

    let runner = e2e::in_process_runner(&pipeline.endpoint, &config).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let pipeline_run = tokio::spawn(async move {
        runner
            .run(async {
                let _ = stopped.await;
            })
            .await
            .expect("runner")
    });

    let mut rows = Vec::new();
    for (run_index, &seed) in seeds.iter().enumerate() {
        let place = |counter: &str| Place::new(client.clone(), LAB_TABLE, &format!("{counter}-{run_index}"));
        let plain: Vec<Arc<dyn Strategy>> = vec![
            Arc::new(AtomicCounter::new(place("atomic-retries"), true)),
            Arc::new(AtomicCounter::new(place("atomic-once"), false)),
            Arc::new(Occ::new(place("occ-entity-tag"), Check::EntityTag)),
            Arc::new(Occ::new(place("occ-version"), Check::Version)),
            Arc::new(Occ::new(place("occ-history"), Check::History)),
            Arc::new(TxToken::new(place("tx-sdk-token"), TokenUse::PerSend)),
            Arc::new(TxToken::new(place("tx-reused-token"), TokenUse::Reused)),
            Arc::new(TxMarker::new(place("tx-marker"))),
            Arc::new(Ledger::new(place("ledger"))),
            Arc::new(TokenSet::new(place("token-set"))),
        ];
        for strategy in plain {
            let row = run(strategy, None, &proxy, &pipeline, workload, seed).await;
            print_row(&row);
            rows.push(row);
        }
        for (admission, scope) in [
            (Admission::BestEffort, "lab-best-effort"),
            (Admission::Strict, "lab-strict"),
        ] {
            let scope = format!("{scope}-{run_index}");
            let hybrid = Arc::new(hybrid(&client, &config, &scope, admission, workload.threshold as u64));
            let strategy: Arc<dyn Strategy> = hybrid.clone();
            let row = run(strategy, Some(&hybrid), &proxy, &pipeline, workload, seed).await;
            print_row(&row);
            rows.push(row);
        }
    }
    let likes = likes::run(&emulator.endpoint, LAB_TABLE, base_seed).await;
    let hot_likes = hot_likes::run(&emulator.endpoint, LAB_TABLE, base_seed).await;
    let _ = stop.send(());
    let report = pipeline_run.await.expect("runner task");
    eprintln!("pipeline: {}", report.to_string().replace('\n', "\n  "));
    eprintln!("faults:\n{}", proxy.stats());

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let results = Results {
        bursts: seeds.iter().map(|&seed| bursts(seed, operations)).collect(),
        seeds,
        workload,
        rates: RATES,
        rows,
        likes,
        hot_likes,
        fakecloud: std::fs::read_to_string(root.join("localstack/fakecloud.version"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|_| "?".into()),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        seconds: whole.elapsed().as_secs_f64(),
    };
    let dir = root.join("target/compare");
    std::fs::create_dir_all(&dir).expect("target/compare");
    std::fs::write(
        dir.join("compare.json"),
        serde_json::to_string_pretty(&results).expect("json"),
    )
    .expect("write compare.json");
    std::fs::write(root.join("COMPARISON.md"), report::markdown(&results)).expect("write COMPARISON.md");
    println!(
        "wrote COMPARISON.md and target/compare/compare.json in {:.0} s (seeds from {base_seed})",
        results.seconds
    );
}

fn hybrid(
    client: &aws_sdk_dynamodb::Client,
    config: &CounterConfig,
    scope: &str,
    admission: Admission,
    limit: u64,
) -> Hybrid {
    Hybrid::new(
        client.clone(),
        config,
        Scope::new(scope).expect("scope"),
        admission,
        limit,
    )
}

fn print_row(row: &Row) {
    println!(
        "== {:<34} truth {:>5} value {:>5} drift {:>+4} (extra +1s {:>+3}, -1s {:>+3}: {:>+5.0} per 1,000 ambiguous) overshoot {:>4} errors {:>3}; \
         {:.2} round trips, {:.2} WU, {:.2} RU per op; p50 {:.2} ms p99 {:.2} ms; {:.0} ops/s{}",
        row.strategy,
        row.truth,
        row.value,
        row.drift,
        row.extra_increments,
        row.extra_decrements,
        row.extra_per_1000_ambiguous,
        row.overshoot.map_or("n/a".to_owned(), |o| o.to_string()),
        row.errors,
        row.round_trips_per_op,
        row.write_units_per_op,
        row.read_units_per_op,
        row.latency.p50_ms,
        row.latency.p99_ms,
        row.ops_per_second,
        row.seconds_until_exact
            .map_or(String::new(), |s| format!("; exact {s:.2} s after the last change")),
    );
    if let Some(lost) = row.lost_best_effort {
        println!("   BE increments lost by the end of the +1s: {lost}");
    }
}
