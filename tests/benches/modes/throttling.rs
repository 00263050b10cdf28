//! The throttling run: creates on one hot scope, paced at a demand of
//! `demand` creates/s, through the fault proxy, which caps every
//! counters-table item at a write rate the emulator can exceed (DynamoDB
//! caps an item at 1,000 WU/s; the emulator caps nothing). Best-effort
//! admission; BE's undercount at the end (live items minus BE) with a
//! refused write retried on another shard, and without (retried on its
//! own shard only).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2e::Emulator;
use e2e::capacity::{CapacityModel, CapacityParams, TableKeys};
use e2e::faults::{FaultKind, FaultPlan, FaultProxy, Operation};
use e2e::spread::Spread;
use hybrid_counter::keys::{NAME, SCOPE};
use hybrid_counter::store::meter::Meter;
use hybrid_counter::{Counter, ResourceId, Scope, now_millis};
use hybrid_counter_aws::DynamoStore;
use serde::Serialize;
use serde_dynamo::Item;

use crate::shared::fan_out;

#[derive(Debug, Clone, Serialize)]
pub struct ThrottleRun {
    /// Which of the rounds.
    pub round: usize,
    pub shards: u32,
    pub retry_on_other_shards: bool,
    pub creates: u64,
    pub creates_per_second: f64,
    /// Best-effort `UpdateItem`s sent, per create (1 without throttling).
    pub best_effort_writes_per_create: f64,
    /// Of those, answered `ThrottlingException` by the proxy.
    pub throttled: u64,
    pub swallowed: u64,
    /// Live items minus BE at the end.
    pub undercount: i64,
    pub undercount_percent: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Throttling {
    /// Writes per second per counters-table item the proxy lets through.
    pub item_writes_per_second: f64,
    /// Creates/s the workers are paced at.
    pub demand: f64,
    pub workers: usize,
    /// Rounds of every variant.
    pub rounds: usize,
    /// Every round's runs, round by round.
    pub runs: Vec<ThrottleRun>,
}

pub async fn run(
    emulator: &Emulator,
    variants: &[(u32, bool)],
    creates: u64,
    workers: usize,
    rate: f64,
    demand: f64,
    rounds: usize,
) -> Throttling {
    let config = crate::shared::config("bench-throttle", 1);
    e2e::create_tables(&aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config).await;
    let proxy = FaultProxy::start(&emulator.endpoint, FaultPlan::new(0));
    // Every counters item isolated (the best split for heat can do), each
    // capped at `rate` writes/s.
    proxy.limit_capacity(Some(CapacityModel::new(
        CapacityParams::per_item(rate),
        &[TableKeys::new(&config.counters_table, SCOPE, NAME)],
    )));
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config().await);
    let update_item = Operation::dynamodb("UpdateItem");
    let mut runs = Vec::new();
    for (round, &(shards, retry_on_other_shards)) in
        (0..rounds).flat_map(|round| variants.iter().map(move |v| (round, v)))
    {
        let meter = Meter::new();
        let counter = Counter::new(
            DynamoStore::new(client.clone(), &config).with_meter(meter.clone()),
            u64::MAX / 2,
        )
        .with_best_effort_shards(shards)
        .with_retry_on_other_shards(retry_on_other_shards);
        // A scope of its own: its counter items start with full buckets.
        let scope = Scope::new(format!("hot-{shards}-{retry_on_other_shards}-r{round}")).unwrap();
        let jobs: Vec<(Scope, ResourceId)> = (0..creates)
            .map(|n| (scope.clone(), ResourceId::new(format!("item-{n:06}")).unwrap()))
            .collect();
        let throttled_before = proxy.stats().injected(&update_item, FaultKind::Throttle);
        let started = Instant::now();
        let (c, tickets) = (counter.clone(), Arc::new(AtomicU64::new(0)));
        fan_out(jobs, workers, move |scope, id| {
            let (c, tickets) = (c.clone(), tickets.clone());
            async move {
                // The n-th create starts n / demand seconds in (or late, when
                // every worker is busy).
                let n = tickets.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep_until((started + Duration::from_secs_f64(n as f64 / demand)).into()).await;
                c.create(&scope, &id, Item::default(), now_millis())
                    .await
                    .expect("a create succeeds, its BE write swallowed at worst");
            }
        })
        .await;
        let seconds = started.elapsed().as_secs_f64();
        let throttled = proxy.stats().injected(&update_item, FaultKind::Throttle) - throttled_before;
        let usage = counter.usage(&scope).await.expect("usage");
        let live = hybrid_counter::audit::count_scope(counter.store(), &scope)
            .await
            .expect("count scope")
            .live;
        assert_eq!(live, creates, "every create succeeded");
        assert!(
            usage.best_effort <= live as i64,
            "BE must never exceed the live count: {usage:?}, {live} live"
        );
        let undercount = live as i64 - usage.best_effort;
        runs.push(ThrottleRun {
            round,
            shards,
            retry_on_other_shards,
            creates,
            creates_per_second: creates as f64 / seconds,
            best_effort_writes_per_create: meter.snapshot().requests.update_item as f64 / creates as f64,
            throttled,
            swallowed: counter.swallowed_best_effort_writes(),
            undercount,
            undercount_percent: 100.0 * undercount as f64 / creates as f64,
        });
    }
    Throttling {
        item_writes_per_second: rate,
        demand,
        workers,
        rounds,
        runs,
    }
}

impl Throttling {
    /// The variants (shards, retried on other shards) in the order run.
    fn variants(&self) -> Vec<(u32, bool)> {
        let mut variants = Vec::new();
        for run in &self.runs {
            if !variants.contains(&(run.shards, run.retry_on_other_shards)) {
                variants.push((run.shards, run.retry_on_other_shards));
            }
        }
        variants
    }

    /// `f` over the rounds of one variant.
    pub fn spread(&self, (shards, retry): (u32, bool), f: impl Fn(&ThrottleRun) -> f64) -> Spread {
        Spread::of(
            self.runs
                .iter()
                .filter(|r| r.shards == shards && r.retry_on_other_shards == retry)
                .map(f),
        )
    }

    pub fn markdown(&self) -> String {
        let mut out = format!(
            "\n## Throttling: BE under heat\n\nThe emulator has no per-item throughput limit, so this run puts the \
             fault proxy's capacity model (`tests/src/capacity/`, every item isolated as split for heat would \
             at best leave it) between the kit and the emulator and caps every counters-table item at {:.0} \
             writes/s (counted per tenth of a second, nothing kept unused), answering \
             `ThrottlingException` (`TableWriteKeyRangeThroughputExceeded`) past it without forwarding, as DynamoDB does past an item's 1,000 WU/s; the \
             rate is scaled down to one the emulator can exceed on 2 cores. Creates on one hot scope \
             (best-effort admission, a scope per row) are paced at {:.0} creates/s by {} workers: {:.0} times \
             one item's rate, the scaled equivalent of {:.0} creates/s on DynamoDB. A throttled BE write was not applied and is \
             retried within the request's backoff (4 rounds, full jitter from 20 ms): *on other shards* it goes \
             on to the next shard in the same round (the default), *own shard only* waits and retries the same \
             item (`Counter::with_retry_on_other_shards(false)`, the behaviour before sharding; with one shard \
             both are the same). A write still refused after the last round is swallowed and counted: the \
             create succeeds, BE undercounts by one, the stream's EC still counts the item. Undercount is live \
             items minus BE at the end, over the creates. Each row is run {} times (a scope of its own each \
             time): median, with min–max when the rounds differ.\n\n| BE shards | retried on | item capacity, writes/s \
             | creates | creates/s | BE writes sent / create | throttled | swallowed | undercount | undercount, \
             % of creates |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            self.item_writes_per_second,
            self.demand,
            self.workers,
            self.demand / self.item_writes_per_second,
            1000.0 * self.demand / self.item_writes_per_second,
            self.rounds
        );
        for variant @ (shards, retry) in self.variants() {
            let s = |f: fn(&ThrottleRun) -> f64| self.spread(variant, f);
            out.push_str(&format!(
                "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |\n",
                shards,
                if retry && shards > 1 {
                    "other shards"
                } else {
                    "own shard only"
                },
                self.item_writes_per_second * f64::from(shards),
                s(|r| r.creates as f64).show(0),
                s(|r| r.creates_per_second).show(0),
                s(|r| r.best_effort_writes_per_create).show(2),
                s(|r| r.throttled as f64).show(0),
                s(|r| r.swallowed as f64).show(0),
                s(|r| r.undercount as f64).show(0),
                s(|r| r.undercount_percent).show_with(2, " %"),
            ));
        }
        out.push_str(
            "\nA row falls behind the pace when its workers wait in backoffs (the creates/s column). Where the pace \
             is above what all of the scope's BE items together take (shards x rate), no retry can place every \
             write: moving a refused write to another shard only helps while some shard has room, and under \
             such overload it multiplies the writes sent (each of them refused at no capacity cost on DynamoDB, \
             but a round trip each). The undercount is BE's alone and temporary: EC counts \
             every item once the stream is drained, and `audit --repair` raises BE to the live count.\n",
        );
        out
    }

    pub fn targets(&self) -> Vec<(String, String, bool)> {
        self.variants()
            .into_iter()
            .filter(|&(shards, retry)| retry && shards > 1)
            .map(|variant| {
                let undercount = self.spread(variant, |r| r.undercount_percent);
                (
                    format!(
                        "throttling run: BE undercount <= 1 % of creates ({} shards, retried on other shards; median of the rounds)",
                        variant.0
                    ),
                    undercount.show_with(2, " %"),
                    undercount.median <= 1.0,
                )
            })
            .collect()
    }
}
