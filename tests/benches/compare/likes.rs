//! Seed 004's experiment: N concurrent callers like one item once each.
//! Four arms at each concurrency of [`CALLERS`], each on a fresh item:
//! plain `ADD` without faults; `ADD` under ambiguous faults (500 after
//! apply on [`AMBIGUOUS`] of the `UpdateItem`s) with the SDK's retries on
//! and off; the seed's read-then-conditional-`ADD` loop as written; the
//! same loop with a consistent read and full jitter
//! ([`counter_lab::likes`]). The arms talk through a fault proxy of their
//! own, enabled only for the faulted arms.

use std::sync::Arc;
use std::time::{Duration, Instant};

use counter_lab::atomic::AtomicCounter;
use counter_lab::likes::{Like, LikeLoop};
use counter_lab::strategy::{Place, Strategy, item_size, write_units};
use e2e::faults::{Fault, FaultKind, FaultPlan, FaultProxy, Operation};
use serde::Serialize;

use super::shared::latency;

/// The concurrencies the seed's claim is tested at ("fan out 1000 or so").
pub const CALLERS: [usize; 5] = [1, 8, 64, 256, 1000];

/// The share of `UpdateItem`s answered 500 after they were applied, in the
/// faulted arms.
pub const AMBIGUOUS: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Arm {
    /// `ADD` of 1, no faults.
    Add,
    /// `ADD` of 1 under ambiguous faults, the SDK retrying (3 attempts).
    AddFaultsRetries,
    /// `ADD` of 1 under ambiguous faults, sent once.
    AddFaultsOnce,
    /// The seed's loop as written.
    BlogLoop,
    /// The loop with a consistent read and full-jitter backoff.
    RepairedLoop,
}

impl Arm {
    pub const ALL: [Arm; 5] = [
        Arm::Add,
        Arm::AddFaultsRetries,
        Arm::AddFaultsOnce,
        Arm::BlogLoop,
        Arm::RepairedLoop,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Arm::Add => "(a) `ADD`, no faults",
            Arm::AddFaultsRetries => "(b) `ADD`, ambiguous faults, SDK retries",
            Arm::AddFaultsOnce => "(b) `ADD`, ambiguous faults, no retries",
            Arm::BlogLoop => "(c) the seed's loop as written",
            Arm::RepairedLoop => "(d) loop, consistent read + full jitter",
        }
    }

    fn faulted(self) -> bool {
        matches!(self, Arm::AddFaultsRetries | Arm::AddFaultsOnce)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LikesRow {
    pub arm: Arm,
    pub callers: usize,
    /// Calls that came back as a like: answered 200 (`ADD`), or `True`
    /// (the loop).
    pub liked: u64,
    /// Calls that raised an error to their caller.
    pub errors: u64,
    /// The loop's calls that ran out of tries and returned `False`.
    pub gave_up: u64,
    /// The item's value at the end.
    pub value: i64,
    /// 500s after apply injected into this arm's writes.
    pub ambiguous: u64,
    /// Conditional writes per call (the loop's attempts); 1 for `ADD`.
    pub attempts_per_call: f64,
    /// DynamoDB requests that reached the proxy per call, SDK retries included.
    pub round_trips_per_call: f64,
    pub write_units_per_call: f64,
    pub read_units_per_call: f64,
    pub p99_ms: f64,
}

impl LikesRow {
    /// Likes stored beyond the calls answered as liked (< 0: likes lost
    /// although answered, what the seed claims of concurrent `ADD`s).
    pub fn extra(&self) -> i64 {
        self.value - self.liked as i64
    }
}

/// What one call came to.
enum Call {
    Liked(u32),
    GaveUp(u32),
    Failed,
}

/// One arm at one concurrency: `callers` tasks, released together, one
/// like each, on a fresh item.
async fn measure(
    arm: Arm,
    callers: usize,
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    proxy: &FaultProxy,
) -> LikesRow {
    let place = Place::new(client.clone(), table, &format!("likes-{arm:?}-{callers}"));
    enum Subject {
        Add(AtomicCounter),
        Loop(LikeLoop),
    }
    let subject = Arc::new(match arm {
        Arm::Add | Arm::AddFaultsRetries => Subject::Add(AtomicCounter::new(place.clone(), true)),
        Arm::AddFaultsOnce => Subject::Add(AtomicCounter::new(place.clone(), false)),
        Arm::BlogLoop => Subject::Loop(LikeLoop::as_written(place.clone())),
        Arm::RepairedLoop => Subject::Loop(LikeLoop::repaired(place.clone())),
    });
    proxy.set_enabled(arm.faulted());
    let before = proxy.stats();
    let start = Arc::new(tokio::sync::Barrier::new(callers));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..callers {
        let (subject, start) = (subject.clone(), start.clone());
        tasks.spawn(async move {
            start.wait().await;
            let started = Instant::now();
            let call = match subject.as_ref() {
                Subject::Add(add) => match add.apply(1, None).await {
                    Ok(_) => Call::Liked(1),
                    Err(_) => Call::Failed,
                },
                Subject::Loop(like) => match like.like().await {
                    Ok(Like { liked: true, attempts }) => Call::Liked(attempts),
                    Ok(Like { liked: false, attempts }) => Call::GaveUp(attempts),
                    Err(_) => Call::Failed,
                },
            };
            (call, started.elapsed())
        });
    }
    let (mut liked, mut gave_up, mut errors, mut attempts) = (0, 0, 0, 0u64);
    let mut samples: Vec<Duration> = Vec::with_capacity(callers);
    while let Some(done) = tasks.join_next().await {
        let (call, took) = done.expect("caller");
        samples.push(took);
        match call {
            Call::Liked(n) => (liked, attempts) = (liked + 1, attempts + u64::from(n)),
            Call::GaveUp(n) => (gave_up, attempts) = (gave_up + 1, attempts + u64::from(n)),
            Call::Failed => (errors, attempts) = (errors + 1, attempts + 1),
        }
    }
    let stats = super::trips::since(&proxy.stats(), &before);
    proxy.set_enabled(false);
    let meter = match subject.as_ref() {
        Subject::Add(add) => add.meter().snapshot(),
        Subject::Loop(like) => like.meter().snapshot(),
    };
    let item = counter_lab::table::counter_item(&place, &Default::default())
        .await
        .expect("the likes at the end");
    let value = counter_lab::table::number(item.as_ref(), counter_lab::table::VALUE);
    let ambiguous = stats.injected(&Operation::dynamodb("UpdateItem"), FaultKind::ApplyThenFail);
    // Applied and charged, though answered 500: the emulator reports nothing.
    let unreported = ambiguous as f64 * write_units(item.as_ref().map_or(0, item_size));
    let calls = callers as f64;
    LikesRow {
        arm,
        callers,
        liked,
        errors,
        gave_up,
        value,
        ambiguous,
        attempts_per_call: attempts as f64 / calls,
        round_trips_per_call: super::trips::round_trips(&stats) as f64 / calls,
        write_units_per_call: (meter.write_units + unreported) / calls,
        read_units_per_call: meter.read_units / calls,
        p99_ms: latency(samples).p99_ms,
    }
}

/// Every arm at every concurrency, through a proxy of their own in front
/// of `endpoint`, its faults seeded from `seed`.
pub async fn run(endpoint: &str, table: &str, seed: u64) -> Vec<LikesRow> {
    let plan = FaultPlan::new(seed).random(Operation::dynamodb("UpdateItem"), Fault::ApplyThenFail, AMBIGUOUS);
    let proxy = FaultProxy::start(endpoint, plan);
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config().await);
    let mut rows = Vec::new();
    for arm in Arm::ALL {
        for callers in CALLERS {
            let row = measure(arm, callers, &client, table, &proxy).await;
            println!(
                "== seed 004 {:<44} {:>5} callers: liked {:>5} value {:>5} ({:>+4}) gave up {:>4} errors {:>3} ambiguous {:>3}; \
                 {:.2} attempts, {:.2} WU, {:.2} RU per call; p99 {:.1} ms",
                arm.label(),
                callers,
                row.liked,
                row.value,
                row.extra(),
                row.gave_up,
                row.errors,
                row.ambiguous,
                row.attempts_per_call,
                row.write_units_per_call,
                row.read_units_per_call,
                row.p99_ms
            );
            rows.push(row);
        }
    }
    rows
}

fn rows_of(rows: &[LikesRow], arm: Arm) -> impl Iterator<Item = &LikesRow> {
    rows.iter().filter(move |r| r.arm == arm)
}

fn supported(holds: bool) -> &'static str {
    if holds { "**Supported**" } else { "**Not supported**" }
}

/// Seed 004's section of COMPARISON.md: the table of every arm at every
/// concurrency and the hypotheses, each with the figure that decides it.
pub fn markdown(rows: &[LikesRow]) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = writeln!(md, "## Seed 004: do concurrent `ADD`s drop likes?\n");
    let _ = writeln!(
        md,
        "Seed 004 claims that two concurrent `ADD`s on one item can drop one (\"fan out 1000 or so Lambdas and you're pretty likely to end up with likes less than the expected 1000\") \
         and offers a fix: `GetItem` without `ConsistentRead`, then `ADD likes :one` on the condition `likes = :current`, retried on `ConditionalCheckFailedException` after a fixed 10 ms \
         while `attempts <= tries` (10: 11 attempts), returning `False` silently when out of tries. The AWS developer guide says the opposite of the claim: an atomic counter's `UpdateItem` \
         is applied unconditionally, without interfering with other writes, in the order the writes were received, and it is not idempotent, so the real risk is a retried `ADD` applying twice \
         ([Working with items: atomic counters](https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/WorkingWithItems.html#WorkingWithItems.AtomicCounters)).\n"
    );
    let _ = writeln!(
        md,
        "Each arm runs at 1, 8, 64, 256 and 1,000 concurrent callers, released together, one like each, on a fresh item: (a) `ADD` of 1 without faults; (b) the same with {:.0} % of the \
         `UpdateItem`s answered 500 after they were applied, with the SDK's retries (3 attempts) and without; (c) the seed's loop as written, repaired only where it cannot run \
         (the table is passed in; a missing `likes` reads as 0 under `attribute_not_exists`); (d) the same loop with a consistent read and full-jitter backoff (10 ms base, 1 s cap, the same 11 attempts); (e), below the hypotheses, the `ADD` on a hot item throttled at its partition's cap. \
         A failed conditional write is charged 1 WU per KB of the item, as DynamoDB charges it, and so is a write answered 500 after it was applied (the emulator reports nothing for either).\n",
        AMBIGUOUS * 100.0
    );
    let _ = writeln!(
        md,
        "| arm | callers | answered as liked | final | final - liked | gave up (`False`) | errors | 500s after apply | attempts/call | round trips/call | WU/call | RU/call | p99 ms |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:+} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} |",
            r.arm.label(),
            r.callers,
            r.liked,
            r.value,
            r.extra(),
            r.gave_up,
            r.errors,
            r.ambiguous,
            r.attempts_per_call,
            r.round_trips_per_call,
            r.write_units_per_call,
            r.read_units_per_call,
            r.p99_ms
        );
    }
    let dropped: Vec<String> = rows_of(rows, Arm::Add)
        .map(|r| format!("{} of {}", r.value, r.liked))
        .collect();
    let drops = rows_of(rows, Arm::Add).any(|r| r.value < r.liked as i64);
    let retried = |arm| rows_of(rows, arm).filter(|r| r.ambiguous > 0);
    let doubled: i64 = retried(Arm::AddFaultsRetries).map(LikesRow::extra).sum();
    let ambiguous: u64 = retried(Arm::AddFaultsRetries).map(|r| r.ambiguous).sum();
    let once_within_errors = rows_of(rows, Arm::AddFaultsOnce).all(|r| r.extra() >= 0 && r.extra() <= r.errors as i64);
    let busy = |arm| rows_of(rows, arm).filter(|r| r.callers >= 64);
    let gave_up = |arm| {
        busy(arm)
            .map(|r| format!("{} of {}", r.gave_up, r.callers))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let loses = busy(Arm::BlogLoop).all(|r| r.gave_up > 0);
    let repair_helps = busy(Arm::BlogLoop)
        .zip(busy(Arm::RepairedLoop))
        .all(|(written, repaired)| repaired.gave_up < written.gave_up);
    let _ = writeln!(md, "\nHypotheses, each with the figure that would refute it:\n");
    let _ = writeln!(
        md,
        "* *Concurrent `ADD`s drop likes* (seed 004): **not testable here; the AWS developer guide says the opposite** \
         ([atomic counters](https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/WorkingWithItems.html#WorkingWithItems.AtomicCounters): \
         concurrent `UpdateItem`s of a counter do not interfere with each other, each is applied). The emulator applies one item's writes one at a time, \
         so a drop inside the service cannot happen here whatever DynamoDB does; arm (a) tests only that the lab's calls, connections and proxy lose nothing. \
         Final against answered in arm (a): {}{}.",
        dropped.join(", "),
        if drops {
            " (a like lost on the lab's own path: a defect of the lab, not a finding about DynamoDB)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "* *A retried `ADD` applies twice* (the AWS guide): refuted if arm (b) with the SDK's retries ends with no like beyond the calls answered, summed over the runs that drew a 500 after apply. \
         {doubled:+} over {ambiguous} 500s after apply. {}.",
        supported(doubled > 0)
    );
    let _ = writeln!(
        md,
        "* *Without retries every extra like is an error the caller saw*: refuted if in arm (b) without retries a run ends with fewer likes than answered, or more extra than errors. {}.",
        supported(once_within_errors)
    );
    let _ = writeln!(
        md,
        "* *The seed's loop silently loses likes under contention*: refuted if at 64 or more callers any run of arm (c) has no `False`. Gave up: {}. {}.",
        gave_up(Arm::BlogLoop),
        supported(loses)
    );
    let _ = writeln!(
        md,
        "* *A consistent read and full jitter lose fewer*: refuted if at any concurrency of 64 or more arm (d) gives up as often as arm (c) or more. Gave up: {}. {}.\n",
        gave_up(Arm::RepairedLoop),
        supported(repair_helps)
    );
    let _ = writeln!(
        md,
        "What the emulator can and cannot show. fakecloud applies the writes to one item one at a time, which is what DynamoDB documents for atomic counters: arm (a) tests that the lab's \
         calls, connections and proxy lose nothing, and agrees with the documentation, but it cannot show a service-side drop that the documentation rules out. Its reads are never stale, so \
         the loop's conditional writes fail here only from real contention (another caller's `ADD` landing between the read and the write); on DynamoDB an eventually consistent read can also be \
         one write behind, which adds failures the consistent read of arm (d) avoids (the unit tests in `tests/lab/src/likes.rs` show this against a lagging replica). It does not throttle a hot item \
         (about 1,000 WU/s per partition on DynamoDB), so the latencies and the give-ups of arms (a) to (d) at 1,000 callers are the emulator's, not the service's; \
         arm (e) puts the kit's capacity model in front of it.\n"
    );
    md
}
