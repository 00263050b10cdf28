//! Seeded simulation of the whole counting pipeline in one process, the
//! way FoundationDB and TigerBeetle test: API clients under limits, the
//! resources table's stream played by a simulated event source mapping,
//! DLQ1 replayed, DLQ2 and its redrive, the operator's changes and audits,
//! all interleaved on one tokio runtime with paused time, so every delay,
//! fault and interleaving comes from one seed. The store is the in-memory
//! double with seeded faults, as harsh as DynamoDB where the kit's safety
//! depends on it. Each module below owns one concern.
//!
//! `SIM_SCHEDULES` (default 10,000) schedules run from `SIM_BASE_SEED` on
//! `SIM_THREADS` threads (default: every core), each schedule on its own
//! thread's runtime; the report gives the rate. `SIM_SEED=<n>` replays
//! one schedule with its trace; a failure is shrunk in at most
//! `SIM_SHRINK_RUNS` runs (default 300).

mod clients;
mod counts;
mod dlq;
mod drain;
mod drift;
mod invariants;
mod lanes;
mod mapping;
mod operator;
mod params;
mod rng;
mod run;
mod shrink;
mod stack;
mod stats;
mod windows;
mod world;

use hybrid_counter::memory::{Fault, Op};

use crate::params::{CHANGES, ConfigChange, Params, SIM_API_TIMEOUT_MS, SIM_MAX_SKEW_MS};
use crate::run::{env_u64, replay_hint, run_schedule, run_seeds};
use crate::shrink::{fail_with_shrunk, shrink};

const DEFAULT_SCHEDULES: u64 = 10_000;

const DEFAULT_BASE_SEED: u64 = 0x5EED_0000;

#[test]
fn seeded_schedules_keep_counters_exact_under_faults() {
    if let Some(seed) = env_u64("SIM_SEED") {
        let (result, stats, trace) = run_schedule(seed, true);
        for line in &trace {
            println!("{line}");
        }
        println!("{:#?}\n{stats:#?}", Params::draw(seed));
        if let Err(why) = result {
            fail_with_shrunk(seed, &why);
        }
        return;
    }
    let schedules = env_u64("SIM_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
    let base = env_u64("SIM_BASE_SEED").unwrap_or(DEFAULT_BASE_SEED);
    let threads = env_u64("SIM_THREADS")
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
        .clamp(1, schedules.max(1));
    let started = std::time::Instant::now();
    let (total, failed) = run_seeds(base, schedules, threads);
    if let Some((seed, why)) = failed {
        fail_with_shrunk(seed, &why);
    }
    let elapsed = started.elapsed();
    println!(
        "simulation: {} schedules from seed {base} in {elapsed:.1?} on {threads} threads ({:.0} schedules/s)\n{total:#?}",
        total.schedules,
        total.schedules as f64 / elapsed.as_secs_f64().max(1e-9)
    );
    println!(
        "simulation admission: {} strict schedules, 0 strict overshoots outside the windows and the keys' drain, {} \
         creates above the limit within the windows, {} while a counters key drained above its share; {} best-effort \
         schedules, {} best-effort overshoots",
        total.strict_schedules,
        total.strict_creates_above_limit_in_a_window,
        total.strict_creates_above_limit_keys_draining,
        total.best_effort_schedules,
        total.best_effort_overshoots
    );
    println!(
        "simulation operator: {} limit overrides changed under load ({} limit sets failed every attempt; limit \
         transactions over several keys: first ones {} refused by another limit set and planned again, {} unknown, \
         later ones {} superseded, {} unknown), {} shard count changes met creates in flight, {} switches to strict \
         admission; rollouts up to {} ms (API timeout {SIM_API_TIMEOUT_MS} ms)",
        total.limit_changes,
        total.limit_sets_unlanded,
        total.limit_first_refused,
        total.limit_first_unknown,
        total.limit_later_refused,
        total.limit_later_unknown,
        total.reshards_with_creates_in_flight,
        total.switched_schedules,
        total.longest_rollout_ms
    );
    for kind in CHANGES {
        let w = total.windows[kind as usize];
        println!(
            "simulation strict windows of {kind:?}{}: {} opened ({} while another of its scope rolled), at most {} \
             creates in flight at the change, at most {} at any instant of a window, at most {} live above the limit \
             before the change",
            if kind == ConfigChange::Limit {
                " (one per attempt of limit set; creates of its scope)"
            } else {
                ""
            },
            w.opened,
            w.overlapping,
            w.most_at_change,
            w.most_in_flight,
            w.max_excess
        );
    }
    println!(
        "simulation store: {} schedules with counter Queries read item by item, {} cancellations with mixed reasons, \
         {} lock conflicts; {} wide schedules (4 to 16 clients, limits 10 to 100); {} quiet moments under load",
        total.torn_read_schedules,
        total.mixed_cancellations,
        total.lock_conflicts,
        total.wide_schedules,
        total.quiet_moments
    );
    println!(
        "simulation consumer: {} per-record schedules, {} batched; {} with a sharded eventual counter",
        total.per_record_schedules,
        total.schedules - total.per_record_schedules,
        total.sharded_schedules
    );
    println!(
        "simulation stream: {} schedules with 2 to 10 lanes per shard, {} shard splits under load, at most {} batches \
         in flight at once; each item's records reached the function in order",
        total.parallel_schedules, total.stream_splits, total.most_batches_in_flight
    );
    println!(
        "simulation drift check under load: {} runs, {} scopes drifted (none a defect), {} held back (in motion or \
         not yet repairable); at rest after the repair: none",
        total.drift_runs, total.drift_scopes_drifted, total.drift_scopes_held_back
    );
    println!(
        "simulation API: {} answers checked for the store's words (none), {} numbered creates, {} created without a \
         number, longest numbered request {} ms; every sequence gapless",
        total.answers_checked,
        total.numbered_creates,
        total.created_without_sequence,
        total.longest_numbered_request_ms
    );
    println!(
        "simulation clocks: {} schedules with skewed clocks (API clients, stream, audit), widest {} ms apart; the \
         audit's grace is just over twice the API timeout plus the skew",
        total.skewed_schedules, total.widest_skew_ms
    );
    println!(
        "simulation scope keys: {} of {} schedules ({:.0} %) spread each scope over several keys (N x M > 1), {} \
         with two levels (M > 1); every invariant checked per counters key and per scope",
        total.scope_key_schedules,
        total.schedules,
        100.0 * total.scope_key_schedules as f64 / total.schedules.max(1) as f64,
        total.two_level_schedules
    );
    println!(
        "simulation best-effort shards: {} schedules with 2 to 8, {} changing BeShardCount under load",
        total.best_effort_sharded_schedules, total.resharded_schedules
    );
    println!(
        "simulation audits under load: {} audit --repair runs, {} repairs written, {} held back, {} failed on a store \
         error; {} items swept under load; at least {} rounds over every scope in each schedule, three or more in {}; \
         longest request {} ms (API timeout {SIM_API_TIMEOUT_MS} ms)",
        total.audits_during_load,
        total.repairs_during_load,
        total.repairs_held_back_during_load,
        total.audit_errors_during_load,
        total.swept_during_load,
        total.audit_rounds,
        total.schedules_with_three_audit_rounds,
        total.longest_request_ms
    );
    if schedules >= 2 {
        assert!(
            total.strict_schedules > 0 && total.best_effort_schedules > 0,
            "both admission modes run: {total:?}"
        );
    }
    // Rarer paths (a few dozen in 10,000 schedules): checked at the
    // default count, where every seed range reaches them.
    if schedules >= DEFAULT_SCHEDULES {
        let limit = total.windows[ConfigChange::Limit as usize];
        let fired = |fault: &str| {
            total
                .store_faults
                .get(&format!("LimitWrite/{fault}"))
                .copied()
                .unwrap_or(0)
        };
        assert!(
            limit.overlapping > 0
                && total.limit_first_refused > 0
                && total.limit_first_unknown > 0
                && total.limit_later_refused > 0
                && total.limit_later_unknown > 0
                && fired("Unavailable") > 0
                && fired("AppliedThenUnavailable") > 0,
            "limit sets of one scope under way at once, refusing each other's first and later transactions, first \
             and later ones with an unknown outcome, and faults before and after a limit write applied: {total:?}"
        );
    }
    if schedules >= 100 {
        assert!(
            total.best_effort_sharded_schedules > 0 && total.resharded_schedules > 0,
            "sharded best-effort counters and BeShardCount changes run: {total:?}"
        );
        let [_, reshard, switch] = total.windows;
        assert!(
            total.switched_schedules > 0
                && switch.opened == total.switched_schedules
                && reshard.opened > 0
                && total.longest_rollout_ms > 3 * SIM_API_TIMEOUT_MS as u64,
            "BeShardCount and AdmissionMode changes roll out over several API timeouts: {total:?}"
        );
        assert!(
            total.limit_changes > 0
                && total.reshards_with_creates_in_flight > 0
                && total.wide_schedules > 0
                && total.torn_read_schedules > 0
                && total.mixed_cancellations > 0,
            "limit and shard count changes under load, wide schedules, torn reads and mixed reasons run: {total:?}"
        );
        assert!(
            total.parallel_schedules > 0 && total.stream_splits > 0 && total.most_batches_in_flight > 1,
            "stream lanes and shard splits run, batches concurrently: {total:?}"
        );
        assert!(
            total.skewed_schedules > 0 && total.widest_skew_ms > SIM_MAX_SKEW_MS as u64 / 2,
            "skewed clocks run: {total:?}"
        );
        assert!(
            total.drift_runs > 0 && total.drift_scopes_held_back > 0,
            "the drift check runs under load and meets scopes in motion: {total:?}"
        );
        assert!(
            total.two_level_schedules > 0
                && total.scope_key_schedules > total.two_level_schedules
                && total.scope_key_schedules < total.schedules,
            "scopes over one key, over several counters keys and over two levels run: {total:?}"
        );
        assert!(
            total.numbered_creates > 0 && total.answers_checked > 0,
            "numbered creates run through the API: {total:?}"
        );
    }
}

#[test]
fn the_same_seed_replays_the_same_schedule() {
    for seed in [1, 2, 3, 0xDEAD_BEEF] {
        let (first, _, a) = run_schedule(seed, true);
        let (second, _, b) = run_schedule(seed, true);
        assert_eq!(first, second, "seed {seed}");
        // Incarnations are random UUIDs; everything else must repeat.
        let scrub = |t: &[String]| -> Vec<String> {
            t.iter()
                .map(|l| {
                    if l.contains("create") {
                        l.split(": ").next().unwrap().to_owned()
                    } else {
                        l.clone()
                    }
                })
                .collect()
        };
        assert_eq!(scrub(&a), scrub(&b), "seed {seed}: {}", replay_hint(seed));
        assert!(!a.is_empty());
    }
}

#[test]
fn shrinking_keeps_the_failure_and_drops_every_knob_it_does_not_need() {
    // A stand-in failure: two clients and 500s on transactions.
    let needs = |p: &Params| {
        p.clients >= 2
            && p.store_faults
                .iter()
                .any(|(op, fault, rate)| *op == Op::Transact && *fault == Fault::Unavailable && *rate > 0)
    };
    let seed = (0..)
        .find(|seed| {
            let p = Params::draw(*seed);
            needs(&p) && p.clients == 3 && p.ops_per_client > 4 && p.crash_per_mille > 0
        })
        .unwrap();
    let (shrunk, runs) = shrink(Params::draw(seed), 300, needs);
    assert!(needs(&shrunk), "the failure is kept: {shrunk:#?}");
    assert!(runs < 300, "a fixpoint within the budget");
    assert_eq!(
        (shrunk.clients, shrunk.ops_per_client, shrunk.ids, shrunk.scopes),
        (2, 1, 1, 1)
    );
    let faulty: Vec<_> = shrunk.store_faults.iter().filter(|(_, _, rate)| *rate > 0).collect();
    assert_eq!(faulty, [&(Op::Transact, Fault::Unavailable, faulty[0].2)]);
    assert_eq!((shrunk.crash_per_mille, shrunk.duplicate_per_mille), (0, 0));
    assert!(shrunk.retention.is_none() && shrunk.max_record_age.is_none() && !shrunk.bisect);
    // Deterministic: the same failure shrinks to the same knobs.
    let (again, _) = shrink(Params::draw(seed), 300, needs);
    assert_eq!(format!("{again:?}"), format!("{shrunk:?}"));
}
