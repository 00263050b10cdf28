//! A candidate cause of seed 004's symptom, measured: one hot item behind
//! the kit's capacity model ([`e2e::capacity`], through the fault proxy, as the
//! benches use it), so its partition serves 1,000 write units a second and
//! no burst above it, and each like sent by a handler that catches its
//! errors ([`counter_lab::swallow`]) with the SDK's standard retries, as
//! the lab tunes them and as the SDK ships them ([`RETRIES`]). At each
//! concurrency of [`super::likes::CALLERS`], for each way of counting the
//! partition's second ([`WINDOWS_MS`]), on a fresh item and a fresh model:
//! what was answered, what is stored, what was throttled and swallowed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::retry::{RetryConfig, RetryPartition};
use counter_lab::atomic::AtomicCounter;
use counter_lab::strategy::{Place, Strategy};
use counter_lab::swallow::{Handled, like_catching_errors};
use counter_lab::table::{self, PK, SK, VALUE};
use e2e::capacity::{CapacityModel, CapacityParams, TableKeys};
use e2e::faults::{FaultKind, FaultPlan, FaultProxy, Operation};
use serde::Serialize;

use super::likes::CALLERS;

/// The model's scale: a tenth of DynamoDB's rates with time dilated by it
/// (a model second is 10 s of wall time), so the emulator on 2 shared cores
/// offers several times what the partition serves.
pub const SCALE: f64 = 0.1;

/// The windows a partition's second is counted in, in model milliseconds:
/// the model's default (the whole second's 1,000 units may land at once)
/// and a tenth of it (100 units per 100 ms). AWS gives the limit per
/// second and documents no finer granularity.
pub const WINDOWS_MS: [u64; 2] = [1000, 100];

/// The SDK's standard retries as tuned, in model time: the lab's (every
/// lab caller's: 3 attempts, 5 to 50 ms of backoff) and the SDK's own
/// defaults (`RetryConfig::standard()`: 3 attempts, 1 s initial and 20 s
/// largest backoff), which spread a throttled burst's retries over many
/// seconds.
pub const RETRIES: [Retries; 2] = [
    Retries {
        name: "lab: 3 attempts, 5-50 ms",
        attempts: 3,
        backoff_ms: (5, 50),
    },
    Retries {
        name: "SDK default: 3 attempts, 1-20 s",
        attempts: 3,
        backoff_ms: (1_000, 20_000),
    },
];

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Retries {
    pub name: &'static str,
    pub attempts: u32,
    pub backoff_ms: (u64, u64),
}

#[derive(Debug, Clone, Serialize)]
pub struct HotRow {
    pub window_ms: u64,
    pub retries: &'static str,
    pub callers: usize,
    /// Likes answered 200.
    pub answered: u64,
    /// The item's value at the end.
    pub value: i64,
    /// Calls whose error (after the SDK's retries) was caught: a throttle,
    /// or anything else.
    pub swallowed_throttled: u64,
    pub swallowed_other: u64,
    /// Throttle answers the model gave, the SDK's retried ones included.
    pub throttles: u64,
    pub round_trips_per_call: f64,
    pub write_units_per_call: f64,
    /// From the release to the last answer, in model seconds.
    pub model_seconds: f64,
}

impl HotRow {
    /// Likes the handlers' invokers were told were taken but are not stored.
    pub fn lost(&self) -> i64 {
        self.callers as i64 - self.value
    }
}

fn params(window_ms: u64) -> CapacityParams {
    let dilated = CapacityParams::dynamodb(SCALE).dilated();
    CapacityParams {
        window: dilated.wall(Duration::from_millis(window_ms)),
        ..dilated
    }
}

/// One handler's client: the SDK tuning in model time, and a retry
/// partition of its own, as each Lambda has (the standard mode's retry
/// quota is shared by the clients of one partition in a process).
fn client(
    sdk: &aws_config::SdkConfig,
    model: &CapacityParams,
    retries: Retries,
    name: String,
) -> aws_sdk_dynamodb::Client {
    let model_ms = |ms| model.wall(Duration::from_millis(ms));
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(sdk)
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(retries.attempts)
                    .with_initial_backoff(model_ms(retries.backoff_ms.0))
                    .with_max_backoff(model_ms(retries.backoff_ms.1)),
            )
            .retry_partition(RetryPartition::new(name))
            .build(),
    )
}

async fn measure(window_ms: u64, retries: Retries, callers: usize, table: &str, proxy: &FaultProxy) -> HotRow {
    let model = params(window_ms);
    let counter = format!("likes-hot-{window_ms}-{}-{callers}", retries.backoff_ms.0);
    let sdk = proxy.sdk_config().await;
    proxy.limit_capacity(Some(CapacityModel::new(
        model.clone(),
        &[TableKeys::new(table, PK, SK)],
    )));
    proxy.set_enabled(true);
    let before = proxy.stats();
    let start = Arc::new(tokio::sync::Barrier::new(callers));
    let released = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let place = Place::new(
            client(&sdk, &model, retries, format!("{counter}-{caller}")),
            table,
            &counter,
        );
        let start = start.clone();
        tasks.spawn(async move {
            let add = AtomicCounter::new(place, true);
            start.wait().await;
            let handled = like_catching_errors(&add).await;
            (handled, add.meter().snapshot().write_units)
        });
    }
    let (mut answered, mut throttled, mut other, mut write_units) = (0, 0, 0, 0.0);
    while let Some(done) = tasks.join_next().await {
        let (handled, units) = done.expect("handler");
        write_units += units;
        match handled {
            Handled::Liked => answered += 1,
            Handled::Swallowed { throttled: true } => throttled += 1,
            Handled::Swallowed { throttled: false } => other += 1,
        }
    }
    let model_seconds = released.elapsed().as_secs_f64() / model.wall(Duration::from_secs(1)).as_secs_f64();
    let stats = super::trips::since(&proxy.stats(), &before);
    proxy.set_enabled(false);
    proxy.limit_capacity(None);
    let place = Place::new(aws_sdk_dynamodb::Client::new(&sdk), table, &counter);
    let item = table::counter_item(&place, &Default::default())
        .await
        .expect("the likes at the end");
    let calls = callers as f64;
    HotRow {
        window_ms,
        retries: retries.name,
        callers,
        answered,
        value: table::number(item.as_ref(), VALUE),
        swallowed_throttled: throttled,
        swallowed_other: other,
        throttles: stats.injected(&Operation::dynamodb("UpdateItem"), FaultKind::Throttle),
        round_trips_per_call: super::trips::round_trips(&stats) as f64 / calls,
        write_units_per_call: write_units / calls,
        model_seconds,
    }
}

/// Every window at every concurrency, through a proxy of their own in
/// front of `endpoint` (no injected faults: only the model refuses).
pub async fn run(endpoint: &str, table: &str, seed: u64) -> Vec<HotRow> {
    let proxy = FaultProxy::start(endpoint, FaultPlan::new(seed));
    let mut rows = Vec::new();
    for window_ms in WINDOWS_MS {
        for retries in RETRIES {
            for callers in CALLERS {
                let row = measure(window_ms, retries, callers, table, &proxy).await;
                println!(
                    "== seed 004 hot item, {window_ms} ms windows, {}, {callers:>5} callers: answered {:>5} value {:>5} \
                     lost {:>4} swallowed {:>4} throttled + {} other; {} throttles; {:.2} round trips, {:.2} WU per \
                     call; {:.2} model s",
                    retries.name,
                    row.answered,
                    row.value,
                    row.lost(),
                    row.swallowed_throttled,
                    row.swallowed_other,
                    row.throttles,
                    row.round_trips_per_call,
                    row.write_units_per_call,
                    row.model_seconds
                );
                rows.push(row);
            }
        }
    }
    rows
}

/// `1000` as "1,000".
fn thousands(n: u64) -> String {
    if n >= 1000 {
        format!("{},{:03}", n / 1000, n % 1000)
    } else {
        n.to_string()
    }
}

/// The arm's table and its hypothesis, for seed 004's section.
pub fn markdown(rows: &[HotRow]) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "**(e) A candidate cause: a hot item throttled, its errors swallowed.** One item takes every like, and one partition serves an item: \
         1,000 write units a second, no more ([partition key design](https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html); \
         burst capacity does not lift a partition above it), and a request past it is answered with a throttling error \
         ([throttling](https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TroubleshootingThrottling.html), \
         [key range throughput exceeded](https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/throttling-key-range-limit-exceeded-mitigation.html)) that the SDK retries a few times and then returns. \
         Each like here is the `ADD` of arm (a) sent by a handler that catches that error, logs it and returns success, as a Lambda that must not fail its invocation does; \
         its invoker is told the like was taken. Measured under the kit's capacity model (`tests/src/capacity/`, `docs/capacity-model.md`) in front of the emulator, \
         at a tenth of DynamoDB's rates with time dilated by the same factor (a model second is 10 s of wall time, and a window serves DynamoDB's units), \
         each caller a client of its own (as a Lambda is: its own retry quota) with the SDK's standard retries in model time, tuned two ways: as every lab caller \
         (3 attempts, 5 to 50 ms of backoff, compressed) and as the SDK ships them (`RetryConfig::standard()`: 3 attempts, 1 s initial and 20 s largest backoff). \
         The partition's second is counted two ways: in whole seconds, the model's default and what AWS documents (a limit per second), where a second's 1,000 units \
         may all land at once, and in tenths of a second (100 units each), a harsher assumption of this page: AWS documents no finer granularity, so rows counted \
         per 100 ms are not a finding about DynamoDB. Callers released together, one like each, \
         on a fresh item and a fresh model; throttled requests are not applied, so they are not charged. Each row is one run: what a count per 100 ms loses \
         follows how fast the burst arrives, here the emulator's speed (the *model s* column, from the release to the last answer): a window serves 100 likes, so \
         a burst of 256 that spans one or two windows loses 156 or 56, and earlier runs of the same row gave both.\n"
    );
    let _ = writeln!(
        md,
        "| partition's second counted per | retries | callers | answered 200 | final | lost (callers - final) | swallowed: throttled | swallowed: other | throttle answers (SDK retries included) | round trips/call | WU/call | model s |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            md,
            "| {} ms | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            thousands(r.window_ms),
            r.retries,
            r.callers,
            r.answered,
            r.value,
            r.lost(),
            r.swallowed_throttled,
            r.swallowed_other,
            r.throttles,
            r.round_trips_per_call,
            r.write_units_per_call,
            r.model_seconds
        );
    }
    let all_swallowed = rows
        .iter()
        .all(|r| r.value == r.answered as i64 && r.lost() == (r.swallowed_throttled + r.swallowed_other) as i64);
    let per_window: Vec<String> = WINDOWS_MS
        .iter()
        .flat_map(|&window| RETRIES.iter().map(move |retries| (window, retries.name)))
        .map(|(window, retries)| {
            let of_window = rows
                .iter()
                .filter(|r| r.window_ms == window && r.retries == retries && r.callers >= 64);
            let lost: Vec<String> = of_window
                .clone()
                .map(|r| format!("{} of {}", r.lost(), r.callers))
                .collect();
            let loses = of_window.clone().any(|r| r.lost() > 0);
            format!(
                "per {} ms with {retries} retries, lost {}: {}",
                thousands(window),
                lost.join(", "),
                if loses && all_swallowed {
                    "**Supported**"
                } else {
                    "**Not supported**"
                }
            )
        })
        .collect();
    let _ = writeln!(
        md,
        "\n* *A hot item throttled at its partition's cap, its errors swallowed, loses likes silently*: refuted, for a way of counting the second and a retry tuning, \
         if no row of (e) at 64 or more callers ends below its callers, or if any row's final differs from its answered 200s (a lost like that is not a swallowed error). \
         Counted {}. One like per caller is at most 1,000 write units: counted per second they fit one second's budget, and only a finer count \
         (or more likes than a second's units, or a fan-out faster than the partition) throttles them; a fan-out whose likes spread over more than a second stays under the cap \
         however it is counted.\n",
        per_window.join("; ")
    );
    md
}
