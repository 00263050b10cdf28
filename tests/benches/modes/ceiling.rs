//! The measured ceiling of one hot scope under DynamoDB's partition limits.
//!
//! Both tables sit behind the fault proxy's capacity model
//! (`tests/src/capacity.rs`): per partition 1,000 WU/s and 3,000 RU/s,
//! scaled down by one factor so that this emulator on 2 cores can offer
//! more than a partition takes, with DynamoDB's unit rules and split for
//! heat. Creates and deletes (three creates to one delete of an earlier
//! item) go through the real `Counter` (best-effort admission), and the
//! real batched `Processor` consumes the stream meanwhile, its writes
//! through the same model. The offered rate ramps step by step while the
//! requests throttled stay at or under 1 % of those sent; a failing step
//! is offered again at its rate (a split for heat can rescue it), and two
//! failing steps in a row without a split end the ramp. Per row: the highest step's rate at or under
//! 1 %, divided by the scale back to DynamoDB creates/s; the limit that
//! throttled most in the step past it; BE's undercount and EC's lag; and,
//! on the same tables, how far best-effort admission overshoots a limit
//! while the scope runs past its partition's capacity.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::Emulator;
use e2e::capacity::{CapacityModel, CapacityParams, CapacityUsage, TableKeys};
use e2e::faults::{FaultPlan, FaultProxy};
use e2e::spread::Spread;
use hybrid_counter::keys::{ID, NAME, SCOPE};
use hybrid_counter::store::meter::Meter;
use hybrid_counter::stream::{Mode, Processor};
use hybrid_counter::{Counter, CounterConfig, ResourceId, Scope, now_millis};
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::streams::ShardReader;
use serde::Serialize;
use serde_dynamo::Item;

use crate::shared::{BATCH_SIZE, Latency, key_hash, latency};

/// The ramp's stop: requests throttled over requests sent.
const THROTTLED_SHARE: f64 = 0.01;
/// The overshoot phase: a limit this far above the live count, and the creates offered at it.
const OVERSHOOT_HEADROOM: u64 = 50;
const OVERSHOOT_OFFERED: u64 = 200;
/// Steps of one ramp at most.
const MAX_STEPS: usize = 20;
/// Concurrent callers offering the load.
const WORKERS: usize = 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ids {
    /// 16 random hex digits.
    Random,
    /// `item-00000001, item-00000002, ...`
    Sequential,
}

#[derive(Debug, Clone)]
pub struct Params {
    pub model: CapacityParams,
    pub shards: Vec<u32>,
    pub runs: usize,
    pub step: Duration,
    /// Offered operations/s of the first step (emulator units), and the growth per step.
    pub start_rate: f64,
    pub growth: f64,
    pub max_rate: f64,
    pub lanes: usize,
}

/// One step of a ramp.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub offered_ops: f64,
    pub creates_per_second: f64,
    pub throttled_share: f64,
    pub throttled: u64,
    /// The limit that throttled most ("-": none).
    pub bound: String,
    pub splits: u64,
    /// Creates not yet counted by the stream at the step's end.
    pub backlog: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Highest creates/s (emulator) of a step at or under 1 % throttled.
    pub sustained: f64,
    /// The same in DynamoDB creates/s (divided by the scale).
    pub dynamodb: f64,
    /// Creates/s (DynamoDB) of the highest step before the first split for heat.
    pub before_split: f64,
    /// Creates/s (DynamoDB) achieved in the steps past 1 % throttled (the best of them).
    pub at_limit: f64,
    pub bound: String,
    pub resources_partitions: usize,
    pub counters_partitions: usize,
    pub splits_refused_sequential: u64,
    /// Creates the callers saw fail (throttled past the SDK's retries), not
    /// counting those refused at the overshoot phase's limit.
    pub failed_creates: u64,
    pub be_undercount: i64,
    pub be_undercount_percent: f64,
    pub ec_lag: Latency,
    /// Admitted creates past a limit, driven past the ceiling.
    pub overshoot: i64,
    pub overshoot_limit: u64,
    pub steps: Vec<Step>,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub shards: u32,
    pub ids: Ids,
    pub runs: Vec<Run>,
    pub dynamodb: Spread,
    pub before_split: Spread,
    pub at_limit: Spread,
    pub ec_lag_p50_ms: Spread,
    pub ec_lag_p99_ms: Spread,
    pub be_undercount_percent: Spread,
    pub overshoot: Spread,
    /// The bound most runs name.
    pub bound: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    pub model: CapacityParams,
    pub runs: usize,
    pub step_seconds: f64,
    pub growth: f64,
    pub lanes: usize,
    pub workers: usize,
    pub rows: Vec<Row>,
    pub seconds: f64,
}

/// One row's tables, proxy, request path and stream consumer.
struct Rig {
    config: CounterConfig,
    proxy: FaultProxy,
    counter: Counter<DynamoStore>,
    processor: Processor<DynamoStore>,
    reader: ShardReader,
}

async fn rig(emulator: &Emulator, model: &CapacityParams, shards: u32, name: &str) -> Rig {
    let config = CounterConfig {
        best_effort_shards: shards,
        ..crate::shared::config(name, shards)
    };
    let sdk = emulator.sdk_config().await;
    let stream_arn = e2e::create_tables(&aws_sdk_dynamodb::Client::new(&sdk), &config).await;
    let proxy = FaultProxy::start(&emulator.endpoint, FaultPlan::new(0));
    proxy.limit_capacity(Some(CapacityModel::new(
        model.clone(),
        &[
            TableKeys::new(&config.resources_table, SCOPE, ID),
            TableKeys::new(&config.counters_table, SCOPE, NAME),
        ],
    )));
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config().await);
    let store = DynamoStore::new(client, &config);
    Rig {
        counter: Counter::configured(store.clone().with_meter(Meter::new()), u64::MAX / 2, &config),
        processor: Processor::new(store.with_meter(Meter::new()))
            .with_mode(Mode::Batched)
            .with_eventual_shards(shards),
        reader: ShardReader::new(aws_sdk_dynamodbstreams::Client::new(&sdk), stream_arn),
        config,
        proxy,
    }
}

/// When each item's create returned, and the lags of the counted ones.
#[derive(Default)]
struct Lags {
    created: HashMap<String, Instant>,
    lags: Vec<Duration>,
    /// INSERT records counted.
    counted: u64,
}

/// Consumes the stream until `stop`, then to its end: batches of
/// [`BATCH_SIZE`] per lane (records split by item key), a failed batch
/// retried from the record it names after a pause, as the event source
/// mapping does; records EC's lag per counted create.
async fn consume_until(rig: Arc<Rig>, lanes: usize, lags: Arc<Mutex<Lags>>, stop: Arc<AtomicBool>) {
    let mut cursors = HashMap::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let records = e2e::read_new_records(&rig.reader, &mut cursors).await;
        if records.is_empty() {
            if stopping {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let mut per_lane: Vec<Vec<serde_json::Value>> = vec![Vec::new(); lanes];
        for record in &records {
            per_lane[(key_hash(record) % lanes as u64) as usize].push(serde_json::to_value(record).expect("a record"));
        }
        let mut tasks = tokio::task::JoinSet::new();
        for lane in per_lane.into_iter().filter(|l| !l.is_empty()) {
            let (processor, lags) = (rig.processor.clone(), lags.clone());
            tasks.spawn(async move {
                let mut at = 0;
                while at < lane.len() {
                    let batch = &lane[at..(at + BATCH_SIZE).min(lane.len())];
                    let report = processor.process_json(batch, now_millis()).await;
                    let done = report
                        .failed_sequence_number
                        .as_deref()
                        .and_then(|seq| {
                            batch
                                .iter()
                                .position(|r| r["dynamodb"]["SequenceNumber"].as_str() == Some(seq))
                        })
                        .unwrap_or(batch.len());
                    record_lags(&lags, &batch[..done], Instant::now());
                    at += done;
                    if done < batch.len() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("consumer lane");
        }
    }
}

/// EC's lag of each create among `counted` (records just processed).
fn record_lags(lags: &Mutex<Lags>, counted: &[serde_json::Value], now: Instant) {
    let mut lags = lags.lock().expect("lags");
    for record in counted {
        if record["eventName"] == "INSERT" {
            lags.counted += 1;
        }
        if record["eventName"] == "INSERT"
            && let Some(id) = record["dynamodb"]["Keys"][ID]["S"].as_str()
            && let Some(created) = lags.created.get(id).copied()
        {
            lags.lags.push(now.saturating_duration_since(created));
        }
    }
}

/// What one step's callers did.
#[derive(Default)]
struct Calls {
    creates: AtomicU64,
    failed_creates: AtomicU64,
}

/// The load on one scope: its ids, the items live, what the callers did.
#[derive(Clone)]
struct Load {
    scope: Scope,
    ids: Ids,
    next_id: Arc<AtomicU64>,
    live: Arc<Mutex<Vec<String>>>,
    lags: Arc<Mutex<Lags>>,
    calls: Arc<Calls>,
}

/// Offers `ops` operations at `rate`/s through `counter`: with `deletes`
/// every fourth deletes a live item, the others create one.
async fn offer(load: &Load, counter: &Counter<DynamoStore>, rate: f64, ops: u64, deletes: bool) {
    let started = Instant::now();
    let tickets = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WORKERS {
        let (counter, tickets) = (counter.clone(), tickets.clone());
        let Load {
            scope,
            ids,
            next_id,
            live,
            lags,
            calls,
        } = load.clone();
        tasks.spawn(async move {
            loop {
                let n = tickets.fetch_add(1, Ordering::Relaxed);
                if n >= ops {
                    return;
                }
                tokio::time::sleep_until((started + Duration::from_secs_f64(n as f64 / rate)).into()).await;
                let doomed = (deletes && n % 4 == 3)
                    .then(|| {
                        let mut live = live.lock().expect("live");
                        let len = live.len();
                        (len > 0).then(|| live.swap_remove(fastrand::usize(..len)))
                    })
                    .flatten();
                if let Some(id) = doomed {
                    let id = ResourceId::new(id).expect("id");
                    // A delete refused by throttling leaves its item live: put it back.
                    if counter.delete(&scope, &id, now_millis()).await.is_err() {
                        live.lock().expect("live").push(id.as_str().to_owned());
                    }
                    continue;
                }
                let number = next_id.fetch_add(1, Ordering::Relaxed);
                let id = match ids {
                    Ids::Random => format!("{:016x}", fastrand::u64(..)),
                    Ids::Sequential => format!("item-{number:08}"),
                };
                let resource = ResourceId::new(id.clone()).expect("id");
                match counter.create(&scope, &resource, Item::default(), now_millis()).await {
                    Ok(_) => {
                        lags.lock().expect("lags").created.insert(id.clone(), Instant::now());
                        live.lock().expect("live").push(id);
                        calls.creates.fetch_add(1, Ordering::Relaxed);
                    }
                    // Refused at the limit: admission, not a failure.
                    Err(hybrid_counter::Error::LimitExceeded { .. }) => {}
                    Err(_) => {
                        calls.failed_creates.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("caller");
    }
}

/// The limit that throttled most in `usage`, by table and access.
fn bound(usage: &CapacityUsage, config: &CounterConfig) -> String {
    let mut limits = Vec::new();
    for (table, label) in [
        (&config.resources_table, "resources partition"),
        (&config.counters_table, "counters partition"),
    ] {
        let t = usage.table(table);
        limits.push((t.throttled_writes, format!("{label} writes")));
        limits.push((t.throttled_reads, format!("{label} reads")));
    }
    limits
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .max_by_key(|(n, _)| *n)
        .map_or_else(|| "-".into(), |(_, label)| label)
}

/// The scope's live items, counted by the audit engine (every processed
/// item counted, so EC can be checked against it).
async fn count(rig: &Rig, scope: &Scope) -> u64 {
    let counts = hybrid_counter::audit::count_scope(rig.counter.store(), scope)
        .await
        .expect("count scope");
    counts.live
}

async fn run_once(emulator: &Emulator, params: &Params, shards: u32, ids: Ids, run: usize) -> Run {
    let began = Instant::now();
    let ids_name = match ids {
        Ids::Random => "random",
        Ids::Sequential => "seq",
    };
    let rig = Arc::new(
        rig(
            emulator,
            &params.model,
            shards,
            &format!("bench-ceil-{shards}-{ids_name}-{run}"),
        )
        .await,
    );
    let scope = Scope::new("hot").unwrap();
    let (lags, stop) = (Arc::new(Mutex::new(Lags::default())), Arc::new(AtomicBool::new(false)));
    let consumer = tokio::spawn(consume_until(rig.clone(), params.lanes, lags.clone(), stop.clone()));
    let (next_id, live) = (Arc::new(AtomicU64::new(0)), Arc::new(Mutex::new(Vec::new())));
    let calls = Arc::new(Calls::default());
    let load = Load {
        scope: scope.clone(),
        ids,
        next_id,
        live,
        lags: lags.clone(),
        calls: calls.clone(),
    };
    let usage = || rig.proxy.capacity_usage().expect("a capacity model");
    let splits = |u: &CapacityUsage| u.tables.values().map(|t| t.splits).sum::<u64>();

    let (mut steps, mut over, mut rate) = (Vec::<Step>::new(), 0, params.start_rate);
    let (mut sustained, mut before_split, mut split_seen, mut bound_at) = (0.0f64, 0.0f64, false, String::new());
    let mut at_limit = 0.0f64;
    while rate <= params.max_rate {
        let before = usage();
        let creates_before = calls.creates.load(Ordering::Relaxed);
        let started = Instant::now();
        let ops = (rate * params.step.as_secs_f64()).round() as u64;
        offer(&load, &rig.counter, rate, ops, true).await;
        let seconds = started.elapsed().as_secs_f64();
        let during = usage().since(&before);
        let throttled = during.throttled();
        let share = throttled as f64 / (throttled + during.requests()).max(1) as f64;
        let step_creates = calls.creates.load(Ordering::Relaxed) - creates_before;
        let creates_per_second = step_creates as f64 / seconds;
        let backlog = calls
            .creates
            .load(Ordering::Relaxed)
            .saturating_sub(lags.lock().expect("lags").counted);
        let step = Step {
            backlog,
            offered_ops: rate,
            creates_per_second,
            throttled_share: share,
            throttled,
            bound: bound(&during, &rig.config),
            splits: splits(&during),
        };
        eprintln!(
            "   ceiling {shards:>2} shards {ids_name:<6} run {run}: offered {rate:.1} ops/s -> {creates_per_second:.1} creates/s, {:.2} % throttled ({}), {} splits, stream backlog {backlog}",
            100.0 * share,
            step.bound,
            step.splits
        );
        split_seen |= step.splits > 0;
        let keeping_up = seconds <= params.step.as_secs_f64() * 1.25;
        // The stream keeps up while what it has not counted stays under two
        // steps' creates.
        let stream_behind = backlog > 2 * step_creates.max(1);
        let passed = share <= THROTTLED_SHARE && keeping_up && !stream_behind;
        if passed {
            sustained = sustained.max(creates_per_second);
            if !split_seen {
                before_split = before_split.max(creates_per_second);
            }
            over = 0;
        } else {
            // Failing steps without a split in a row.
            over = if step.splits > 0 { 0 } else { over + 1 };
            at_limit = at_limit.max(creates_per_second);
            if bound_at.is_empty() || step.bound != "-" {
                bound_at = if share > THROTTLED_SHARE {
                    step.bound.clone()
                } else if stream_behind {
                    "stream lanes (EC backlog growing)".into()
                } else {
                    "the emulator (offered rate not kept, not throttled)".into()
                };
            }
        }
        steps.push(step);
        if over >= 2 || steps.len() >= MAX_STEPS {
            break;
        }
        // Only a step that passed raises the rate: a failing one is offered
        // again, so that a split for heat it caused can show.
        if passed {
            rate *= params.growth;
        }
    }

    if steps.len() >= MAX_STEPS && steps.iter().rev().take(3).any(|s| s.splits > 0) {
        bound_at = format!("{bound_at}; the ramp's {MAX_STEPS} steps ended with splits for heat still under way");
    }

    // BE's undercount at the end of the ramp (no request in flight; the
    // model paused while counting, so the count is not throttled).
    let created = calls.creates.load(Ordering::Relaxed);
    let (live_now, undercount) = {
        rig.proxy.set_enabled(false);
        let usage_now = rig.counter.usage(&scope).await.expect("usage");
        let live_now = count(&rig, &scope).await;
        rig.proxy.set_enabled(true);
        let undercount = live_now as i64 - usage_now.best_effort;
        assert!(undercount >= 0, "BE never overcounts: {usage_now:?}, {live_now} live");
        (live_now, undercount)
    };

    // At a limit: the live count plus a headroom, creates offered at the
    // ramp's last rate (the first past the ceiling).
    let limit = live_now + OVERSHOOT_HEADROOM;
    let limited = Counter::configured(rig.counter.store().clone(), limit, &rig.config);
    offer(&load, &limited, rate, OVERSHOOT_OFFERED, false).await;

    // Drain: the model off, so the stream finishes (the figures are taken).
    rig.proxy.set_enabled(false);
    stop.store(true, Ordering::Relaxed);
    consumer.await.expect("consumer");
    let end = usage();
    let usage_now = rig.counter.usage(&scope).await.expect("usage");
    let live_end = count(&rig, &scope).await;
    assert_eq!(
        usage_now.eventual, live_end as i64,
        "EC must equal the live count after the drain"
    );
    let lags = std::mem::take(&mut lags.lock().expect("lags").lags);
    let partitions = |table: &str| {
        rig.proxy
            .with_capacity(|m| m.partition_count(table, "hot"))
            .unwrap_or(1)
    };
    Run {
        sustained,
        dynamodb: sustained / params.model.scale,
        before_split: before_split / params.model.scale,
        bound: if bound_at.is_empty() {
            "none reached".into()
        } else {
            bound_at
        },
        resources_partitions: partitions(&rig.config.resources_table),
        counters_partitions: partitions(&rig.config.counters_table),
        splits_refused_sequential: end.tables.values().map(|t| t.splits_refused_sequential).sum(),
        failed_creates: calls.failed_creates.load(Ordering::Relaxed),
        be_undercount: undercount,
        be_undercount_percent: 100.0 * undercount as f64 / created.max(1) as f64,
        ec_lag: if lags.is_empty() {
            Latency::default()
        } else {
            latency(lags)
        },
        overshoot: live_end as i64 - limit as i64,
        at_limit: at_limit / params.model.scale,
        overshoot_limit: limit,
        steps,
        seconds: began.elapsed().as_secs_f64(),
    }
}

pub async fn run(emulator: &Emulator, params: &Params) -> Ceiling {
    let began = Instant::now();
    let mut rows = Vec::new();
    for &shards in &params.shards {
        for ids in [Ids::Random, Ids::Sequential] {
            let mut runs = Vec::new();
            for n in 0..params.runs {
                runs.push(run_once(emulator, params, shards, ids, n).await);
            }
            let spread = |f: fn(&Run) -> f64| Spread::of(runs.iter().map(f));
            let mut bounds: Vec<&str> = runs.iter().map(|r| r.bound.as_str()).collect();
            bounds.sort();
            let bound = bounds
                .iter()
                .max_by_key(|b| bounds.iter().filter(|c| c == b).count())
                .map_or_else(String::new, |b| (*b).to_owned());
            rows.push(Row {
                shards,
                ids,
                dynamodb: spread(|r| r.dynamodb),
                before_split: spread(|r| r.before_split),
                at_limit: spread(|r| r.at_limit),
                ec_lag_p50_ms: spread(|r| r.ec_lag.p50_ms),
                ec_lag_p99_ms: spread(|r| r.ec_lag.p99_ms),
                be_undercount_percent: spread(|r| r.be_undercount_percent),
                overshoot: spread(|r| r.overshoot as f64),
                bound,
                runs,
            });
        }
    }
    Ceiling {
        model: params.model.clone(),
        runs: params.runs,
        step_seconds: params.step.as_secs_f64(),
        growth: params.growth,
        lanes: params.lanes,
        workers: WORKERS,
        rows,
        seconds: began.elapsed().as_secs_f64(),
    }
}

impl Ceiling {
    pub fn markdown(&self) -> String {
        let m = &self.model;
        let mut out = format!(
            "\n## A hot scope's measured ceiling under DynamoDB's partition limits\n\n\
             Both tables behind the fault proxy's capacity model (`tests/src/capacity.rs`): {m}. Every rate \
             below is measured on the emulator and divided by the scale {} to read in DynamoDB creates/s; \
             nothing in this table is projected. One hot scope, fresh tables per run; {} callers offer three \
             creates to one delete of an earlier item through the real `Counter` (best-effort admission, BE \
             shards = EC shards), while the real batched `Processor` consumes the stream in {} lanes, its \
             transactions through the same model. The offered rate ramps in steps of {:.1} s, growing after \
             each step that passes (at most 1 % of the requests throttled, the offered rate kept, the stream's \
             backlog under two steps' creates); a step that fails is offered again at the same rate, so that a \
             split for heat it caused can show, and the ramp ends after two failing steps in a row without a \
             split. *Sustained* is the highest step at or under 1 %; *before a \
             split* the highest before the model's first split for heat; *bound by* the limit that throttled \
             most in the steps past it; *past 1 % throttled* the creates/s achieved in those steps (the steps grow \
             by {}x, so the ceiling lies between the two). Median of {} runs, (min–max) when they differ. Creates \
             failed: answered with an error after the SDK's 3 attempts (the harness's backoff of 5–50 ms; the \
             SDK's default waits longer), refusals at the overshoot phase's limit not counted. EC \
             lag: from a create's answer to the transaction that counted its record. BE undercount: live items \
             minus BE at the end of the ramp, over the creates. Overshoot: after the ramp, a limit of the live \
             count + {OVERSHOOT_HEADROOM} and {OVERSHOOT_OFFERED} creates (no deletes) offered at the ramp's last rate, the first past the \
             ceiling: live items past the limit once the stream is drained.\n\n\
             | BE = EC shards | ids | sustained, DynamoDB creates/s | before a split | past 1 % throttled | bound by | \
             partitions at the end (resources / counters) | creates failed to the caller (all runs) | BE undercount | \
             EC lag p50 | EC lag p99 | overshoot at a limit |\n\
             |---:|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|\n",
            m.scale, self.workers, self.lanes, self.step_seconds, self.growth, self.runs,
        );
        for row in &self.rows {
            let last = row.runs.last().expect("a run");
            out.push_str(&format!(
                "| {} | {} | **{}** | {} | {} | {} | {} / {} | {} | {} % | {} ms | {} ms | {} |\n",
                row.shards,
                match row.ids {
                    Ids::Random => "random",
                    Ids::Sequential => "sequential",
                },
                row.dynamodb.show(0),
                row.before_split.show(0),
                row.at_limit.show(0),
                row.bound,
                last.resources_partitions,
                last.counters_partitions,
                row.runs.iter().map(|r| r.failed_creates).sum::<u64>(),
                row.be_undercount_percent.show(2),
                row.ec_lag_p50_ms.show(0),
                row.ec_lag_p99_ms.show(0),
                row.overshoot.show(0),
            ));
        }
        out.push_str(&format!(
            "\nThe ceiling run took {:.0} s. The model compresses time as well as rate: a split for heat comes \
             after {:.0} s of throttling here, minutes on DynamoDB, where it is also not guaranteed; the rows' \
             *before a split* column is what a scope gets until then. Sequential ids never split (AWS documents \
             that split for heat does not help a monotonically increasing sort key): every new item lands in \
             the last range of the resources partition, so their ceiling is one partition's writes whatever the \
             shard count. What a user can do: give resources random (or hashed) ids, so that split for heat can \
             divide the scope's range; warm throughput raises what a table serves at once, not one partition's \
             1,000 WU/s, so it does not lift a single hot scope's first partition. Where the counters \
             partition's writes bind, more BE and EC shards spread them over items a split can separate (one \
             item keeps its 1,000 WU/s). Under 1 KB every create writes the resources partition three units \
             (the put, and the stream's transactional flag flip) and every delete three more (the soft delete, \
             the transactional hard delete), against one or two on the counters, so the resources partition is \
             what a hot scope meets first.\n",
            self.seconds,
            m.split_after.as_secs_f64()
        ));
        // Whether the kit's own read (the consistent Query of the counters)
        // bound any run: the condition for reading it eventually consistent.
        let runs: Vec<&Run> = self.rows.iter().flat_map(|r| &r.runs).collect();
        let read_bound = runs.iter().filter(|r| r.bound.contains("reads")).count();
        out.push_str(&format!(
            "\nThe counters partition's reads (every create's consistent Query of the scope's counter items, 1 RU \
             while they are under 4 KB, against 3,000 RU/s per partition) bound {read_bound} of the {} runs; the \
             writes bound the rest. {}\n",
            runs.len(),
            if read_bound == 0 {
                "The design stays as it is: an eventually consistent Query for best-effort admission would halve \
                 a cost that binds nothing here, so it is not made."
            } else {
                "Those runs are where an eventually consistent Query for best-effort admission would raise the \
                 ceiling."
            }
        ));
        out
    }
}

impl Ceiling {
    pub fn targets(&self) -> Vec<(String, String, bool)> {
        self.rows
            .iter()
            .filter(|r| r.ids == Ids::Random)
            .max_by_key(|r| r.shards)
            .map(|r| {
                (
                    format!(
                        "measured per-scope ceiling >= 10,000 creates/s ({} BE shards, random ids, scale {})",
                        r.shards, self.model.scale
                    ),
                    format!("{:.0} (bound by {})", r.dynamodb.median, r.bound),
                    r.dynamodb.median >= 10_000.0,
                )
            })
            .into_iter()
            .collect()
    }
}
