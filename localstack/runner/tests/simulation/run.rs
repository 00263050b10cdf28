//! Running schedules: one schedule on its own single-threaded tokio runtime
//! with paused time, so every delay, fault and interleaving comes from its
//! seed; a panic of any actor is the schedule's failure; and many seeds on
//! `SIM_THREADS` threads, reporting the lowest that fails.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hybrid_counter::memory::{Chaos, MemoryStore};
use hybrid_counter::retry::Backoff;
use hybrid_counter::stream::{Mode, Processor};
use hybrid_counter::{Admission, Counter, CounterConfig, ResourceId, Scope};

use crate::invariants::check_every_step;
use crate::lanes::Deliveries;
use crate::params::Params;
use crate::rng::Rng;
use crate::stack::{deploy, stack_config};
use crate::stats::Stats;
use crate::windows::Windows;
use crate::world::{EPOCH_MS, Sim};

/// A wide schedule's scope 0 starts near its limit: `p.prefilled` live,
/// counted items on the best-effort shards in turn, BE and EC equal to
/// them on each item's counters key, no key above its share of the limit,
/// written long before the grace period (set before the checker and the
/// faults).
async fn prefill(store: &MemoryStore, p: &Params) {
    use hybrid_counter::RequestStore;
    use hybrid_counter::items::ResourceItem;
    use hybrid_counter::keys;
    use hybrid_counter::store::NewResource;
    if p.prefilled == 0 {
        return;
    }
    let layout = hybrid_counter::best_effort::Layout::new(p.best_effort_shards);
    let scope = Scope::new("acct0").unwrap();
    let scope_keys = p.scope_keys;
    let mut on: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut per_key: BTreeMap<u32, u64> = BTreeMap::new();
    let mut placed = 0;
    for i in 0.. {
        if placed == p.prefilled {
            break;
        }
        let id = ResourceId::new(format!("w{i}")).unwrap();
        let index = scope_keys.index(&id);
        let held = per_key.entry(index).or_default();
        if *held == scope_keys.share(p.limit, index) {
            continue;
        }
        *held += 1;
        let be_shard = layout.shard(placed as u32);
        placed += 1;
        let counters_key = scope_keys.key_of(&scope, &id).unwrap().to_string();
        let item = ResourceItem {
            scope: scope_keys.resource_key_of(&scope, &id).unwrap(),
            id,
            counter_processed: true,
            deleted: false,
            incarnation: format!("prefilled{i}"),
            created_at: EPOCH_MS - 60_000,
            be_shard,
        };
        store
            .put_resource(&NewResource {
                item,
                payload: Default::default(),
            })
            .await
            .unwrap();
        *on.entry((counters_key.clone(), keys::best_effort_name(be_shard)))
            .or_default() += 1;
        *on.entry((counters_key, keys::EVENTUAL_NAME.to_owned())).or_default() += 1;
    }
    for ((key, name), count) in on {
        store.set_counter(&key, &name, count);
    }
}

/// The kit's stream processor as the schedule configures it, its clock
/// `skew` off the true time.
fn processor(
    store: &Arc<MemoryStore>,
    config: &CounterConfig,
    p: &Params,
    seed: u64,
    start: tokio::time::Instant,
    skew: i64,
) -> Processor<MemoryStore> {
    config
        .processor(store.clone())
        .with_mode(p.mode)
        .with_backoff(Backoff {
            base: Duration::from_millis(5),
            cap: Duration::from_millis(200),
            max_attempts: p.processor_attempts,
        })
        .with_seed(seed)
        .with_clock(hybrid_counter::Clock::new(move || {
            EPOCH_MS + i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX) + skew
        }))
}

/// Runs one schedule; `Err` carries the violation.
pub(crate) fn run_schedule(seed: u64, traced: bool) -> (Result<(), String>, Stats, Vec<String>) {
    run_with(seed, Params::draw(seed), traced)
}

/// [`run_once`], with a panic of any actor (the stream consumer's, say)
/// reported as the schedule's failure, so it is shrunk and named by seed.
pub(crate) fn run_with(seed: u64, p: Params, traced: bool) -> (Result<(), String>, Stats, Vec<String>) {
    let trace = traced.then(|| Rc::new(RefCell::new(Vec::new())));
    let kept = trace.clone();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_once(seed, p, trace)));
    let trace = kept.map(|t| t.take()).unwrap_or_default();
    match outcome {
        Ok((result, stats)) => (result, stats, trace),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            (Err(format!("panicked: {why}")), Stats::default(), trace)
        }
    }
}

/// One schedule of `seed` with knobs `p` (those of the seed, or simpler
/// ones while shrinking a failure).
fn run_once(seed: u64, p: Params, trace: Option<Rc<RefCell<Vec<String>>>>) -> (Result<(), String>, Stats) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Arc::new(MemoryStore::new());
        let start = tokio::time::Instant::now();
        store.set_clock(Arc::new(move || {
            EPOCH_MS + i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
        }));
        let configs = [
            (p.first_admission(), p.best_effort_shards),
            (p.admission, p.reshard.map_or(p.best_effort_shards, |(n, _)| n)),
        ]
        .map(|(admission, shards)| stack_config(&p, admission, shards));
        deploy(&store, &configs).await;
        prefill(&store, &p).await;
        let windows = Arc::new(Mutex::new(Windows {
            default_limit: p.limit,
            layout: p.scope_keys,
            mode: Some(p.first_admission()),
            ..Windows::default()
        }));
        let checked = windows.clone();
        let layout = p.scope_keys;
        store.set_checker(move |tables| check_every_step(tables, layout, &checked));
        store.set_chaos(Chaos {
            seed: Rng::new(seed, 2).next(),
            faults: p.store_faults.clone(),
            transaction_latency: p.transaction_latency,
            page_latency: p.page_latency,
            page_size: p.page_size,
            counter_read_latency: p.counter_read_latency,
            resend_delay: p.resend_delay,
        });
        if p.foreign_item {
            // Where the kit's own item of that id would lie, so the audit of
            // its counters key reads it.
            let id = ResourceId::new("not-the-kits").unwrap();
            let key = layout.resource_key_of(&Scope::new("acct0").unwrap(), &id).unwrap();
            store.put_foreign(key.as_str(), id.as_str(), Default::default());
        }
        let sim = Sim {
            seed,
            counters: configs.clone().map(|config| {
                Counter::configured(store.clone(), p.limit, &config)
                    .with_seed(Rng::new(seed, 3).next() ^ u64::from(config.best_effort_shards))
            }),
            changed: Cell::new(None),
            picks: RefCell::new(Rng::new(seed, 16)),
            best_effort_audits: Cell::new(0),
            windows,
            processor: processor(&store, &configs[0], &p, Rng::new(seed, 4).next(), start, p.skew.stream),
            sweeper: processor(&store, &configs[0], &p, Rng::new(seed, 12).next(), start, p.skew.audit),
            configs,
            store,
            p,
            start,
            checkpoints: RefCell::new(BTreeMap::new()),
            lanes_done: RefCell::new(BTreeSet::new()),
            finished_shards: RefCell::new(BTreeSet::new()),
            shard_generation: Cell::new(0),
            batches_in_flight: Cell::new(0),
            delivered: RefCell::new(Deliveries::default()),
            order_violation: RefCell::new(None),
            drift_violation: RefCell::new(None),
            numbered: RefCell::new(BTreeMap::new()),
            dlq1: RefCell::new(VecDeque::new()),
            dlq2: RefCell::new(VecDeque::new()),
            next_message: Cell::new(0),
            stormy: Cell::new(true),
            clients_done: Cell::new(0),
            stats: RefCell::new(Stats::default()),
            trace,
        };
        sim.log(|| {
            format!(
                "scope keys: {} counters keys (ScopeKeyShards) x {} resources keys each (ResourceKeySpread)",
                layout.count(),
                layout.spread()
            )
        });
        let (mut result, ..) = tokio::join!(
            sim.clients(0),
            sim.mapping(),
            sim.reprocessor(),
            sim.operator(),
            sim.operator_audits(),
            sim.change_config(),
            sim.limit_operator(),
            sim.stream_splitter(),
            sim.drift_checks()
        );
        if result.is_ok() {
            result = sim.drain().await;
        }
        if result.is_ok() {
            result = sim.final_checks();
        }
        if result.is_ok() {
            result = sim.repair().await;
        }
        let mut stats = sim.stats.borrow().clone();
        stats.schedules = 1;
        match sim.p.admission {
            Admission::Strict => stats.strict_schedules = 1,
            Admission::BestEffort => stats.best_effort_schedules = 1,
        }
        stats.per_record_schedules = u64::from(sim.p.mode == Mode::PerRecord);
        stats.sharded_schedules = u64::from(sim.p.eventual_shards > 1);
        stats.scope_key_schedules = u64::from(sim.p.scope_keys.is_suffixed());
        stats.two_level_schedules = u64::from(sim.p.scope_keys.spread() > 1);
        stats.best_effort_sharded_schedules = u64::from(sim.p.best_effort_shards > 1);
        stats.resharded_schedules = u64::from(sim.p.reshard.is_some());
        stats.switched_schedules = u64::from(sim.p.switch.is_some());
        if sim.p.change().is_some() {
            stats.longest_rollout_ms = sim.p.rollout.as_millis() as u64;
        }
        stats.lock_conflicts = sim.store.lock_conflicts();
        stats.mixed_cancellations = sim.store.mixed_cancellations();
        stats.wide_schedules = u64::from(sim.p.prefilled > 0);
        stats.torn_read_schedules = u64::from(!sim.p.counter_read_latency.is_zero());
        stats.parallel_schedules = u64::from(sim.p.lanes > 1);
        stats.skewed_schedules = u64::from(sim.p.skew.span() > 0);
        stats.widest_skew_ms = sim.p.skew.span() as u64;
        stats.windows = sim.windows.lock().unwrap().measured;
        let limits = sim.store.limit_outcomes();
        stats.limit_first_refused = limits.first_refused;
        stats.limit_first_unknown = limits.first_unknown;
        stats.limit_later_refused = limits.later_refused;
        stats.limit_later_unknown = limits.later_unknown;
        for ((op, fault), n) in sim.store.injected_faults() {
            *stats.store_faults.entry(format!("{op:?}/{fault:?}")).or_default() += n;
        }
        (result, stats)
    })
}

/// Runs seeds `base..base + schedules` on `threads` threads, each taking
/// the next seed in turn; their totals, and the lowest failing seed with
/// its violation. Once a seed fails no thread starts a higher one, and
/// every lower one still runs, so the seed reported is the lowest that
/// fails, whatever the threads' timing.
pub(crate) fn run_seeds(base: u64, schedules: u64, threads: u64) -> (Stats, Option<(u64, String)>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let next = AtomicU64::new(base);
    let failed: Mutex<Option<(u64, String)>> = Mutex::new(None);
    let totals: Vec<Stats> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut total = Stats::default();
                    loop {
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        let lowest_failure = failed.lock().unwrap().as_ref().map(|(s, _)| *s);
                        if seed >= base + schedules || lowest_failure.is_some_and(|f| seed > f) {
                            return total;
                        }
                        let (result, stats, _) = run_schedule(seed, false);
                        match result {
                            Ok(()) => total.add(&stats),
                            Err(why) => {
                                let mut failed = failed.lock().unwrap();
                                if failed.as_ref().is_none_or(|(s, _)| seed < *s) {
                                    *failed = Some((seed, why));
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker thread"))
            .collect()
    });
    let mut total = Stats::default();
    for part in totals.iter().filter(|t| t.schedules > 0) {
        total.add(part);
    }
    (total, failed.into_inner().unwrap())
}

pub(crate) fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        let v = v.trim();
        v.strip_prefix("0x")
            .map_or_else(|| v.parse(), |hex| u64::from_str_radix(hex, 16))
            .unwrap_or_else(|_| panic!("{name} must be an integer, got {v:?}"))
    })
}

pub(crate) fn replay_hint(seed: u64) -> String {
    format!("replay: SIM_SEED={seed} cargo test -p esm-runner --test simulation -- --nocapture")
}
