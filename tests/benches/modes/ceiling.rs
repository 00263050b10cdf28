//! The measured ceiling of one hot scope under DynamoDB's limits, beside
//! the anchors a user would pick instead, in the same run.
//!
//! Both tables sit behind the fault proxy's capacity model
//! (`tests/src/capacity/`): per partition 1,000 WU/s or 3,000 RU/s in one
//! budget, no burst, table-level limits, transaction conflicts, split for
//! heat after minutes; every rate scaled by one factor and, unless
//! `BENCH_CEILING_UNDILATED=1`, time dilated by it (a window, a second of
//! the model, is 1 s divided by the scale and serves a partition's
//! DynamoDB units of a second). Three creates to one delete of an earlier
//! item are offered open-loop at a constant rate per step (each operation
//! starts at its time whatever the others do), through:
//!
//! * the kit: the real `Counter` (best-effort admission) while the real
//!   batched `Processor` consumes the stream in lanes, polling at Lambda's
//!   interval divided by the scale, so its batches hold as many records as
//!   at DynamoDB's rate;
//! * the plain anchor: a consistent read of a counter item, a conditional
//!   `PutItem`, `UpdateItem ADD 1` (a delete: `DeleteItem`, `ADD -1`);
//! * the transaction anchor: the put (or delete) and the `ADD` in one
//!   `TransactWriteItems` with a client request token kept across the
//!   caller's retries of a cancelled transaction.
//!
//! Each step lasts at least [`Params::step`] of model time and at least
//! [`Params::min_requests`] DynamoDB requests; it reports the offered and
//! the achieved rate, and the requests refused by reason (a partition's key
//! range, a table-level limit, a transaction conflict). The rate grows by
//! [`Params::growth`] while steps pass (at most 1 % of the requests
//! throttled, the offered creates achieved, the stream keeping up), then
//! the gap between the last passing and the first failing step is halved
//! [`Params::refine`] times. The ceiling is the achieved creates/s of the
//! highest passing step, divided by the scale.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};
use e2e::Emulator;
use e2e::capacity::{CapacityModel, CapacityParams, CapacityUsage, Conflicts, TableKeys};
use e2e::faults::{FaultKind, FaultPlan, FaultProxy};
use hybrid_counter::keys::{ID, NAME, SCOPE};
use hybrid_counter::retry::{Backoff, Retry};
use hybrid_counter::store::meter::Meter;
use hybrid_counter::stream::{Mode, Processor};
use hybrid_counter::{Counter, CounterConfig, ResourceId, Scope, now_millis};
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::streams::ShardReader;
use serde::Serialize;
use serde_dynamo::Item;

use crate::shared::{BATCH_SIZE, Latency, latency};

/// The pass mark: requests throttled over requests sent.
const THROTTLED_SHARE: f64 = 0.01;
/// Lambda polls a DynamoDB stream shard four times a second ("Using Lambda
/// with DynamoDB": polling and batching).
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// The counter item of the anchors.
const ANCHOR_COUNTER: &str = "count";

/// What creates and deletes go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Approach {
    /// The kit, with this many BE and EC shards, each scope spread over
    /// `keys` counters keys (`ScopeKeyShards`, N) and `spread` resources
    /// keys per counters key (`ResourceKeySpread`, M).
    Kit { shards: u32, keys: u32, spread: u32 },
    /// Read, conditional put, `ADD`.
    Plain,
    /// One transaction with a client request token.
    Transaction,
}

impl Approach {
    pub fn label(self) -> String {
        match self {
            Approach::Kit { shards, keys, spread } => {
                format!("the kit, {shards} BE = EC shard(s), N = {keys} key(s), M = {spread}")
            }
            Approach::Plain => "anchor: read + put + ADD".into(),
            Approach::Transaction => "anchor: transaction with a client request token".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Params {
    pub model: CapacityParams,
    pub approaches: Vec<Approach>,
    pub runs: usize,
    /// A step's least duration and requests.
    pub step: Duration,
    pub min_requests: u64,
    /// Offered operations/s of the first step (emulator units) per approach,
    /// as a share of its arithmetic bound; the growth per passing step.
    pub start_share: f64,
    pub growth: f64,
    pub refine: usize,
    pub lanes: usize,
    /// One step offered at this many DynamoDB creates/s instead of the
    /// ramp (`BENCH_CEILING_TARGET`): whether the layout sustains it.
    pub target: Option<f64>,
    /// Ids numbered in order (`BENCH_CEILING_IDS=sequential`) instead of
    /// random.
    pub sequential_ids: bool,
    /// Operations in flight at most (`BENCH_CEILING_IN_FLIGHT`); past it an
    /// operation is not sent (counted). In flight is rate x latency, the
    /// same in model and wall time; the api function's concurrency on AWS.
    pub in_flight: u64,
}

/// One step at a constant offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Operations/s offered (emulator units), and those not sent for want
    /// of room in flight.
    pub offered_ops: f64,
    pub not_sent: u64,
    /// Creates/s offered and achieved, in DynamoDB units (divided by the scale).
    pub offered_creates: f64,
    pub achieved_creates: f64,
    /// Creates that succeeded during the step.
    pub creates: u64,
    pub seconds: f64,
    /// DynamoDB requests sent (admitted, throttled or refused for a conflict).
    pub requests: u64,
    pub throttled_key_range: u64,
    pub throttled_table: u64,
    pub conflicts: u64,
    /// Conflicts by table and kind.
    pub conflicts_by_table: BTreeMap<String, Conflicts>,
    pub throttled_share: f64,
    /// Creates' and deletes' latency as their callers saw it, from each
    /// operation's slot, in model time ([`to_model`]); operations sent only.
    pub create_latency: Option<Latency>,
    pub delete_latency: Option<Latency>,
    /// Operations in flight at the most during the step.
    pub peak_in_flight: u64,
    /// Operations that answered an error to their caller.
    pub failed: u64,
    /// The kit's failed operations by operation and error.
    pub failed_by: BTreeMap<String, u64>,
    /// Creates not yet counted by the stream at the step's start and end (the kit).
    pub backlog_before: u64,
    pub backlog: u64,
    /// The stream fell behind during this step ([`stream_fell_behind`]).
    pub stream_behind: bool,
    pub splits: u64,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub approach: Approach,
    /// Achieved creates/s (DynamoDB units) of the highest passing step.
    pub ceiling: f64,
    /// Offered creates/s of the first failing step (the ceiling lies below).
    pub first_failing: f64,
    /// The limit that refused most past the ceiling.
    pub bound: String,
    pub steps: Vec<Step>,
    pub ec_lag: Option<Latency>,
    pub be_undercount: Option<i64>,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    pub model: CapacityParams,
    pub model_text: String,
    pub runs: Vec<Run>,
    pub step_seconds: f64,
    pub min_requests: u64,
    pub growth: f64,
    pub lanes: usize,
    pub poll_ms: f64,
    pub seconds: f64,
    pub target: Option<f64>,
    pub sequential_ids: bool,
}

/// Creates/s one partition of 1,000 WU/s (or 3,000 RU/s, one budget)
/// carries for `approach` at three creates to one delete, under 1 KB: the
/// busier of the scope's two partitions, per DynamoDB's unit rules; for
/// the kit over N counters keys of M resources keys each, the resources
/// table's units spread over N x M keys and the counters table's over N
/// (as if each key had a partition of its own: keys share partitions by
/// hash, so the busiest partition may carry more than one).
pub fn arithmetic_bound(approach: Approach) -> f64 {
    let (resources, counters) = units_per_mix(approach);
    let (resource_keys, counters_keys) = match approach {
        Approach::Kit { keys, spread, .. } => (f64::from(keys * spread), f64::from(keys)),
        _ => (1.0, 1.0),
    };
    3.0 * 1000.0 / f64::max(resources / resource_keys, counters / counters_keys)
}

/// Units on (resources, counters) for three creates and one delete, on one key.
fn units_per_mix(approach: Approach) -> (f64, f64) {
    match approach {
        // Create: put 1 + transactional flag flip 2; delete: consistent
        // read 1/3, soft delete 1, stream's read 1/3 and transactional
        // delete 2. Counters: a create's consistent Query 1/3 and BE write
        // 1, a delete's BE write 1; EC's transactional writes are per batch
        // (about 0).
        Approach::Kit { .. } => (
            3.0 * 3.0 + (1.0 / 3.0 + 1.0 + 1.0 / 3.0 + 2.0),
            3.0 * (1.0 / 3.0 + 1.0) + 1.0,
        ),
        // Create: read 1/3 + ADD 1 on counters, put 1; delete: delete 1, ADD 1.
        Approach::Plain => (4.0, 3.0 * (1.0 / 3.0 + 1.0) + 1.0),
        // Two transactional writes per operation, one on each table.
        Approach::Transaction => (8.0, 8.0),
    }
}

/// One run's tables, proxy and clients.
struct Rig {
    config: CounterConfig,
    proxy: FaultProxy,
    client: Client,
    counter: Counter<DynamoStore>,
    processor: Processor<DynamoStore>,
    reader: ShardReader,
}

async fn rig(emulator: &Emulator, model: &CapacityParams, shards: u32, keys: u32, spread: u32, name: &str) -> Rig {
    let config = CounterConfig {
        best_effort_shards: shards,
        scope_keys: hybrid_counter::scope_keys::ScopeKeys::new(keys)
            .and_then(|k| k.with_spread(spread))
            .expect("keys"),
        ..crate::shared::config(name, shards)
    };
    let sdk = emulator.sdk_config().await;
    let stream_arn = e2e::create_tables(&Client::new(&sdk), &config).await;
    let proxy = FaultProxy::start(&emulator.endpoint, FaultPlan::new(0));
    proxy.limit_capacity(Some(CapacityModel::new(
        model.clone(),
        &[
            TableKeys::new(&config.resources_table, SCOPE, ID),
            TableKeys::new(&config.counters_table, SCOPE, NAME),
        ],
    )));
    let client = Client::new(&proxy.sdk_config().await);
    let store = DynamoStore::new(client.clone(), &config);
    Rig {
        counter: {
            let counter = Counter::configured(store.clone().with_meter(Meter::new()), u64::MAX / 2, &config);
            // The kit's busy retries wait in model time, as the items they
            // wait for are held in model time (a transaction's hold is
            // dilated; an undilated backoff gives up ten times too early).
            let dilation = model.wall(Duration::from_secs(1)).as_secs_f64();
            let busy = Backoff {
                max_attempts: 4,
                ..Backoff::default()
            };
            counter.with_busy_backoff(Backoff {
                base: busy.base.mul_f64(dilation),
                cap: busy.cap.mul_f64(dilation),
                ..busy
            })
        },
        processor: Processor::new(store.with_meter(Meter::new()))
            .with_mode(Mode::Batched)
            .with_eventual_shards(shards)
            .with_scope_keys(config.scope_keys),
        reader: ShardReader::new(aws_sdk_dynamodbstreams::Client::new(&sdk), stream_arn),
        client,
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

/// Consumes the stream until `stop`, then to its end: a poll every `poll`,
/// batches of [`BATCH_SIZE`] per lane, a failed batch retried from the
/// record it names after a pause, as the event source mapping does. A lane
/// is a stream shard at the stack's default `ParallelizationFactor` of 1:
/// DynamoDB Streams gives a table's partitions shards of their own, so a
/// partition key's records all come through one lane, in order (records
/// split by partition key, at most `lanes` lanes). The resources table's
/// partition keys are the scope's resources keys (N x M of them): each is
/// given the next lane the first time it is seen, so they fill the lanes
/// evenly (a hash of a few short keys crowds some lanes and leaves others
/// empty).
async fn consume_until(rig: Arc<Rig>, lanes: usize, poll: Duration, lags: Arc<Mutex<Lags>>, stop: Arc<AtomicBool>) {
    let mut cursors = HashMap::new();
    let mut lane_of: HashMap<String, usize> = HashMap::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let records = e2e::read_new_records(&rig.reader, &mut cursors).await;
        if records.is_empty() && stopping {
            return;
        }
        let mut per_lane: Vec<Vec<serde_json::Value>> = vec![Vec::new(); lanes];
        for record in &records {
            let next = lane_of.len() % lanes;
            let lane = *lane_of.entry(partition_key(record)).or_insert(next);
            per_lane[lane].push(serde_json::to_value(record).expect("a record"));
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
        if !stopping {
            tokio::time::sleep(poll).await;
        }
    }
}

/// `record`'s partition key (the resources key its item lives under).
fn partition_key(record: &aws_lambda_events::event::dynamodb::EventRecord) -> String {
    record
        .change
        .keys
        .get(SCOPE)
        .map(|v| format!("{v:?}"))
        .unwrap_or_default()
}

fn record_lags(lags: &Mutex<Lags>, counted: &[serde_json::Value], now: Instant) {
    let mut lags = lags.lock().expect("lags");
    for record in counted.iter().filter(|r| r["eventName"] == "INSERT") {
        lags.counted += 1;
        if let Some(id) = record["dynamodb"]["Keys"][ID]["S"].as_str()
            && let Some(created) = lags.created.get(id).copied()
        {
            lags.lags.push(now.saturating_duration_since(created));
        }
    }
}

/// The load on the hot scope: its items, what the callers saw.
#[derive(Clone)]
struct Load {
    rig: Arc<Rig>,
    approach: Approach,
    scope: Scope,
    live: Arc<Mutex<Vec<String>>>,
    lags: Arc<Mutex<Lags>>,
    creates: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    /// The kit's operations failed to their callers, by operation and
    /// error (`create: Unavailable: ...`).
    failed_by: Arc<Mutex<BTreeMap<String, u64>>>,
    /// The next id when ids are numbered in order (`None`: random).
    next_id: Option<Arc<AtomicU64>>,
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

impl Load {
    fn counter_key(&self) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (SCOPE.to_owned(), s(self.scope.as_str())),
            (NAME.to_owned(), s(ANCHOR_COUNTER)),
        ])
    }

    fn resource_key(&self, id: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([(SCOPE.to_owned(), s(self.scope.as_str())), (ID.to_owned(), s(id))])
    }

    fn add(&self, delta: &str) -> Update {
        Update::builder()
            .table_name(&self.rig.config.counters_table)
            .set_key(Some(self.counter_key()))
            .update_expression("ADD #c :d")
            .expression_attribute_names("#c", "count")
            .expression_attribute_values(":d", AttributeValue::N(delta.into()))
            .build()
            .expect("an update")
    }

    /// `add` sent as a plain `UpdateItem`; whether it was applied.
    async fn send_add(&self, add: &Update) -> bool {
        self.rig
            .client
            .update_item()
            .table_name(add.table_name())
            .set_key(Some(add.key().clone()))
            .update_expression(add.update_expression())
            .set_expression_attribute_names(add.expression_attribute_names().cloned())
            .set_expression_attribute_values(add.expression_attribute_values().cloned())
            .send()
            .await
            .is_ok()
    }

    /// Creates `id`; whether it was created.
    async fn create(&self, id: &str) -> bool {
        let client = &self.rig.client;
        match self.approach {
            Approach::Kit { .. } => {
                let resource = ResourceId::new(id).expect("id");
                let created = self
                    .rig
                    .counter
                    .create(&self.scope, &resource, Item::default(), now_millis())
                    .await;
                self.record("create", created.map(drop))
            }
            Approach::Plain => {
                let add = self.add("1");
                client
                    .get_item()
                    .table_name(&self.rig.config.counters_table)
                    .set_key(Some(self.counter_key()))
                    .consistent_read(true)
                    .send()
                    .await
                    .is_ok()
                    && client
                        .put_item()
                        .table_name(&self.rig.config.resources_table)
                        .set_item(Some(self.resource_key(id)))
                        .condition_expression("attribute_not_exists(#s)")
                        .expression_attribute_names("#s", SCOPE)
                        .send()
                        .await
                        .is_ok()
                    && self.send_add(&add).await
            }
            Approach::Transaction => {
                let put = Put::builder()
                    .table_name(&self.rig.config.resources_table)
                    .set_item(Some(self.resource_key(id)))
                    .condition_expression("attribute_not_exists(#s)")
                    .expression_attribute_names("#s", SCOPE)
                    .build()
                    .expect("a put");
                self.transact(vec![
                    TransactWriteItem::builder().put(put).build(),
                    TransactWriteItem::builder().update(self.add("1")).build(),
                ])
                .await
            }
        }
    }

    async fn delete(&self, id: &str) -> bool {
        match self.approach {
            Approach::Kit { .. } => {
                let resource = ResourceId::new(id).expect("id");
                let deleted = self.rig.counter.delete(&self.scope, &resource, now_millis()).await;
                self.record("delete", deleted)
            }
            Approach::Plain => {
                let add = self.add("-1");
                self.rig
                    .client
                    .delete_item()
                    .table_name(&self.rig.config.resources_table)
                    .set_key(Some(self.resource_key(id)))
                    .send()
                    .await
                    .is_ok()
                    && self.send_add(&add).await
            }
            Approach::Transaction => {
                let delete = Delete::builder()
                    .table_name(&self.rig.config.resources_table)
                    .set_key(Some(self.resource_key(id)))
                    .build()
                    .expect("a delete");
                self.transact(vec![
                    TransactWriteItem::builder().delete(delete).build(),
                    TransactWriteItem::builder().update(self.add("-1")).build(),
                ])
                .await
            }
        }
    }

    /// One transaction, its token kept across the caller's retries of a
    /// cancellation for a conflict or throttling (the kit's backoff).
    async fn transact(&self, actions: Vec<TransactWriteItem>) -> bool {
        let token = format!("{:032x}", fastrand::u128(..));
        let mut retry = Retry::new(Backoff::default(), None);
        loop {
            let sent = self
                .rig
                .client
                .transact_write_items()
                .set_transact_items(Some(actions.clone()))
                .client_request_token(&token)
                .send()
                .await;
            let transient = match sent {
                Ok(_) => return true,
                Err(err) => match hybrid_counter_aws::dynamo::cancel_reasons(&err) {
                    Some(reasons) => reasons.iter().any(hybrid_counter::error::CancelReason::is_transient),
                    None => hybrid_counter_aws::dynamo::classify(err).is_transient(),
                },
            };
            if !transient || !retry.pause().await {
                return false;
            }
        }
    }

    /// Whether the kit's `operation` succeeded; a failure is counted by
    /// its error and what the store said.
    fn record(&self, operation: &str, result: Result<(), hybrid_counter::Error>) -> bool {
        let Err(err) = result else { return true };
        let detail: String = err.detail().unwrap_or_default().chars().take(80).collect();
        let reason = format!("{operation}: {} {detail}", err.code());
        *self.failed_by.lock().expect("failed_by").entry(reason).or_default() += 1;
        false
    }

    /// Operation `n`: every fourth deletes a live item, the others create
    /// one. Whether it was a delete.
    async fn operate(&self, n: u64) -> bool {
        let doomed = (n % 4 == 3)
            .then(|| {
                let mut live = self.live.lock().expect("live");
                let len = live.len();
                (len > 0).then(|| live.swap_remove(fastrand::usize(..len)))
            })
            .flatten();
        if let Some(id) = doomed {
            if !self.delete(&id).await {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.live.lock().expect("live").push(id);
            }
            return true;
        }
        let id = match &self.next_id {
            Some(next) => format!("{:016}", next.fetch_add(1, Ordering::Relaxed)),
            None => format!("{:016x}", fastrand::u64(..)),
        };
        if self.create(&id).await {
            self.lags
                .lock()
                .expect("lags")
                .created
                .insert(id.clone(), Instant::now());
            self.live.lock().expect("live").push(id);
            self.creates.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        false
    }
}

/// DynamoDB requests the proxy saw: forwarded, or answered by the model.
fn requests(proxy: &FaultProxy) -> u64 {
    let stats = proxy.stats();
    stats.total_forwarded() + stats.of_kind(FaultKind::Throttle) + stats.of_kind(FaultKind::TransactionConflict)
}

/// Creates not yet counted by the stream (the kit; 0 for the anchors).
fn backlog(load: &Load) -> u64 {
    match load.approach {
        Approach::Kit { .. } => load
            .creates
            .load(Ordering::Relaxed)
            .saturating_sub(load.lags.lock().expect("lags").counted),
        _ => 0,
    }
}

/// Whether the stream fell behind during a step of `creates`, from the
/// creates it had not counted at the step's start and end: its backlog
/// grew by more than a tenth of the step's creates (it counted under 90 %
/// of them, the bar the offered rate has too), or grew at all while
/// already above two steps' worth. A backlog left by an earlier step that
/// shrinks is the stream catching up, not falling behind, so one failing
/// step does not fail every later one.
fn stream_fell_behind(before: u64, after: u64, creates: u64) -> bool {
    let grew = after.saturating_sub(before);
    grew > creates / 10 || (after > 2 * creates.max(1) && grew > 0)
}

/// Offers operations at `rate`/s until the step is long enough.
async fn step(load: &Load, params: &Params, rate: f64) -> Step {
    let usage = || load.rig.proxy.capacity_usage().expect("a capacity model");
    let (before, requests_before) = (usage(), requests(&load.rig.proxy));
    let (creates_before, failed_before) = (
        load.creates.load(Ordering::Relaxed),
        load.failed.load(Ordering::Relaxed),
    );
    let failed_by_before = load.failed_by.lock().expect("failed_by").clone();
    let backlog_before = backlog(load);
    let (in_flight, peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    // (deleted, how long) per operation.
    let took: Arc<Mutex<Vec<(bool, Duration)>>> = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    let (mut n, mut not_sent) = (0u64, 0u64);
    // The step's least length is in model time.
    let least = params.model.wall(params.step);
    loop {
        tokio::time::sleep_until((started + Duration::from_secs_f64(n as f64 / rate)).into()).await;
        let long_enough =
            started.elapsed() >= least && requests(&load.rig.proxy) - requests_before >= params.min_requests;
        // At most long enough for the requests at one per operation, and half again.
        let cap = least.max(Duration::from_secs_f64(params.min_requests as f64 / rate)) * 3 / 2 + least;
        if long_enough || started.elapsed() >= cap {
            break;
        }
        if in_flight.load(Ordering::Relaxed) >= params.in_flight {
            not_sent += 1;
        } else {
            let (load, in_flight, took) = (load.clone(), in_flight.clone(), took.clone());
            peak.fetch_max(in_flight.fetch_add(1, Ordering::Relaxed) + 1, Ordering::Relaxed);
            // Timed from its slot, so a starved runtime's spawn delay counts.
            let slot = started + Duration::from_secs_f64(n as f64 / rate);
            tasks.spawn(async move {
                let deleted = load.operate(n).await;
                took.lock().expect("took").push((deleted, slot.elapsed()));
                in_flight.fetch_sub(1, Ordering::Relaxed);
            });
        }
        n += 1;
    }
    let offered_seconds = started.elapsed().as_secs_f64();
    while let Some(done) = tasks.join_next().await {
        done.expect("an operation");
    }
    let seconds = started.elapsed().as_secs_f64();
    let during: CapacityUsage = usage().since(&before);
    let sent = requests(&load.rig.proxy) - requests_before;
    let throttled = during.throttled();
    let scale = params.model.scale;
    let creates = load.creates.load(Ordering::Relaxed) - creates_before;
    let backlog = backlog(load);
    let offered_creates = 0.75 * n as f64 / offered_seconds / scale;
    let achieved_creates = creates as f64 / seconds / scale;
    let throttled_share = throttled as f64 / sent.max(1) as f64;
    let stream_behind = stream_fell_behind(backlog_before, backlog, creates);
    let took = std::mem::take(&mut *took.lock().expect("took"));
    let model_latency = |deleted: bool| {
        let samples: Vec<Duration> = took
            .iter()
            .filter(|(d, _)| *d == deleted)
            .map(|(_, t)| to_model(&params.model, *t))
            .collect();
        (!samples.is_empty()).then(|| latency(samples))
    };
    Step {
        offered_ops: n as f64 / offered_seconds,
        not_sent,
        offered_creates,
        achieved_creates,
        creates,
        seconds,
        requests: sent,
        throttled_key_range: during.tables.values().map(|t| t.throttles.key_range.total()).sum(),
        throttled_table: during.table_level_throttles(),
        conflicts: during.conflicts(),
        conflicts_by_table: during
            .tables
            .iter()
            .filter(|(_, t)| t.conflicts.total() > 0)
            .map(|(table, t)| (table.clone(), t.conflicts))
            .collect(),
        throttled_share,
        create_latency: model_latency(false),
        delete_latency: model_latency(true),
        peak_in_flight: peak.load(Ordering::Relaxed),
        failed: load.failed.load(Ordering::Relaxed) - failed_before,
        failed_by: load
            .failed_by
            .lock()
            .expect("failed_by")
            .iter()
            .filter_map(|(reason, n)| {
                let new = n - failed_by_before.get(reason).copied().unwrap_or(0);
                (new > 0).then(|| (reason.clone(), new))
            })
            .collect(),
        backlog_before,
        backlog,
        stream_behind,
        splits: during.splits(),
        passed: sent >= params.min_requests
            && throttled_share <= THROTTLED_SHARE
            && achieved_creates >= 0.9 * offered_creates
            && not_sent == 0
            && !stream_behind,
    }
}

impl Step {
    /// The step's second log line: operations not sent and in flight, the
    /// callers' latency, conflicts by table and kind, the stream rule.
    fn detail(&self, cap: u64) -> String {
        let ms = |l: &Option<Latency>| {
            l.as_ref()
                .map_or_else(|| "-".into(), |l| format!("{:.1} / {:.1}", l.p50_ms, l.p99_ms))
        };
        let conflicts: Vec<String> = self
            .conflicts_by_table
            .iter()
            .map(|(table, c)| {
                format!(
                    "{table}: {} transactions, {} writes, {} reads, {} in progress",
                    c.transactions, c.writes, c.reads, c.in_progress
                )
            })
            .collect();
        format!(
            "{} not sent, at most {} of {cap} in flight; create p50 / p99 {} model ms, delete {}; conflicts [{}]; \
             backlog {} -> {} over {} creates: stream {}",
            self.not_sent,
            self.peak_in_flight,
            ms(&self.create_latency),
            ms(&self.delete_latency),
            conflicts.join("; "),
            self.backlog_before,
            self.backlog,
            self.creates,
            if self.stream_behind { "fell behind" } else { "kept up" },
        )
    }
}

/// `wall`, a span of wall time, in model time (undilated: the same).
fn to_model(model: &CapacityParams, wall: Duration) -> Duration {
    wall.div_f64(model.wall(Duration::from_secs(1)).as_secs_f64())
}

/// What bound a failing step.
fn bound(step: &Step) -> String {
    if step.not_sent > 0 {
        // The cap in flight (Lambda's concurrency): the machine's queue or
        // the model's delays; the create latency tells which.
        format!(
            "the cap in flight: {} operations not sent (create p50 {} model ms)",
            step.not_sent,
            step.create_latency
                .as_ref()
                .map_or_else(|| "-".into(), |l| format!("{:.0}", l.p50_ms))
        )
    } else if step.throttled_share > THROTTLED_SHARE {
        if step.throttled_table > step.throttled_key_range {
            "a table-level limit".into()
        } else {
            "a partition (key range)".into()
        }
    } else if step.stream_behind {
        "the stream (backlog growing)".into()
    } else if step.conflicts > 0 {
        format!("transaction conflicts ({} in the step)", step.conflicts)
    } else {
        "the emulator (offered rate not achieved)".into()
    }
}

async fn run_once(emulator: &Emulator, params: &Params, approach: Approach, run: usize) -> Run {
    let began = Instant::now();
    let name = match approach {
        Approach::Kit { shards, keys, spread } => format!("bench-ceil-kit{shards}k{keys}m{spread}-{run}"),
        Approach::Plain => format!("bench-ceil-plain-{run}"),
        Approach::Transaction => format!("bench-ceil-tx-{run}"),
    };
    let (shards, keys, spread) = match approach {
        Approach::Kit { shards, keys, spread } => (shards, keys, spread),
        _ => (1, 1, 1),
    };
    let rig = Arc::new(rig(emulator, &params.model, shards, keys, spread, &name).await);
    let (lags, stop) = (Arc::new(Mutex::new(Lags::default())), Arc::new(AtomicBool::new(false)));
    let poll = POLL_INTERVAL.div_f64(params.model.scale);
    let consumer = matches!(approach, Approach::Kit { .. }).then(|| {
        tokio::spawn(consume_until(
            rig.clone(),
            params.lanes,
            poll,
            lags.clone(),
            stop.clone(),
        ))
    });
    let load = Load {
        rig: rig.clone(),
        approach,
        scope: Scope::new("hot").unwrap(),
        live: Arc::new(Mutex::new(Vec::new())),
        lags: lags.clone(),
        creates: Arc::new(AtomicU64::new(0)),
        failed: Arc::new(AtomicU64::new(0)),
        failed_by: Arc::default(),
        next_id: params.sequential_ids.then(Arc::default),
    };
    // Operations/s at the arithmetic bound (emulator units); the
    // transaction anchor's one counter item takes at most one transaction
    // per transaction latency.
    let mut bound_ops = arithmetic_bound(approach) / 0.75 * params.model.scale;
    if approach == Approach::Transaction {
        bound_ops = bound_ops.min(1.0 / params.model.transaction_hold().as_secs_f64());
    }
    let mut rate = params.target.map_or(bound_ops * params.start_share, |creates| {
        creates / 0.75 * params.model.scale
    });
    let (mut steps, mut last_pass, mut first_fail) = (Vec::<Step>::new(), None::<f64>, None::<f64>);
    let mut refinements = 0;
    loop {
        let step = step(&load, params, rate).await;
        eprintln!(
            "   ceiling {} run {run}: offered {:.1} ops/s ({:.0} creates/s) -> {:.0} creates/s achieved, {} requests, {:.2} % throttled ({} key range, {} table), {} conflicts, {} failed, backlog {}, {}",
            approach.label(),
            step.offered_ops,
            step.offered_creates,
            step.achieved_creates,
            step.requests,
            100.0 * step.throttled_share,
            step.throttled_key_range,
            step.throttled_table,
            step.conflicts,
            step.failed,
            step.backlog,
            if step.passed { "passed" } else { "failed" }
        );
        for (reason, n) in &step.failed_by {
            eprintln!("      failed: {n} x {reason}");
        }
        eprintln!("      {}", step.detail(params.in_flight));
        if step.passed {
            last_pass = Some(rate);
        } else {
            first_fail = Some(first_fail.map_or(rate, |f: f64| f.min(rate)));
        }
        steps.push(step);
        if params.target.is_some() {
            break;
        }
        rate = match (last_pass, first_fail) {
            (_, None) => rate * params.growth,
            (Some(lo), Some(hi)) if refinements < params.refine && hi > lo => {
                refinements += 1;
                (lo * hi).sqrt()
            }
            // Nothing passed yet: halve, a few more times than refining.
            (None, Some(hi)) if refinements < params.refine + 3 => {
                refinements += 1;
                hi / 2.0
            }
            _ => break,
        };
    }
    let passing = steps.iter().filter(|s| s.passed);
    let ceiling = passing.map(|s| s.achieved_creates).fold(0.0, f64::max);
    let failing: Vec<&Step> = steps.iter().filter(|s| !s.passed).collect();
    let first_failing = failing.iter().map(|s| s.offered_creates).fold(f64::INFINITY, f64::min);
    let bound = failing
        .iter()
        .min_by(|a, b| a.offered_creates.total_cmp(&b.offered_creates))
        .map_or_else(|| "none reached".into(), |s| bound(s));
    let (ec_lag, be_undercount) = match consumer {
        Some(consumer) => {
            let scope = load.scope.clone();
            rig.proxy.set_enabled(false);
            let usage = rig.counter.usage(&scope).await.expect("usage");
            // Items live under the resources keys, M per counters key.
            let keys = rig.counter.scope_keys();
            let mut live = 0;
            for key in keys.keys(&scope).expect("keys") {
                for resource_key in keys.resource_keys_of(&key) {
                    live += hybrid_counter::audit::count_scope(rig.counter.store(), &resource_key)
                        .await
                        .expect("count scope")
                        .live;
                }
            }
            stop.store(true, Ordering::Relaxed);
            consumer.await.expect("consumer");
            let usage_end = rig.counter.usage(&scope).await.expect("usage");
            assert_eq!(
                usage_end.eventual, live as i64,
                "EC must equal the live count after the drain"
            );
            let lags = std::mem::take(&mut lags.lock().expect("lags").lags);
            (
                (!lags.is_empty()).then(|| latency(lags.iter().map(|l| to_model(&params.model, *l)).collect())),
                Some(live as i64 - usage.best_effort),
            )
        }
        None => (None, None),
    };
    Run {
        approach,
        ceiling,
        first_failing,
        bound,
        steps,
        ec_lag,
        be_undercount,
        seconds: began.elapsed().as_secs_f64(),
    }
}

pub async fn run(emulator: &Emulator, params: &Params) -> Ceiling {
    let began = Instant::now();
    let mut runs = Vec::new();
    for n in 0..params.runs {
        for &approach in &params.approaches {
            runs.push(run_once(emulator, params, approach, n).await);
        }
    }
    Ceiling {
        model: params.model.clone(),
        model_text: params.model.to_string(),
        runs,
        step_seconds: params.step.as_secs_f64(),
        min_requests: params.min_requests,
        growth: params.growth,
        lanes: params.lanes,
        poll_ms: POLL_INTERVAL.div_f64(params.model.scale).as_secs_f64() * 1000.0,
        seconds: began.elapsed().as_secs_f64(),
        target: params.target,
        sequential_ids: params.sequential_ids,
    }
}
