//! Shrinking a failure: greedy, over the schedule's knobs, deterministic,
//! so replaying the seed shrinks to the same schedule; the failure is
//! reported with its shrunk knobs, its trace's last events and the replay
//! command.

use std::time::Duration;

use hybrid_counter::scope_keys::ScopeKeys;

use crate::params::{Params, Skew};
use crate::run::{env_u64, replay_hint, run_with};

/// Variants of `p` with one knob turned down: fewer clients, operations,
/// ids and scopes, one fault kind switched off, no crashes, duplicates,
/// expiry or latency. The failure's own interleaving changes with them,
/// as in any parameter shrinking.
fn simpler(p: &Params) -> Vec<Params> {
    let mut out = Vec::new();
    let mut variant = |change: &dyn Fn(&mut Params)| {
        let mut q = p.clone();
        change(&mut q);
        if format!("{q:?}") != format!("{p:?}") {
            out.push(q);
        }
    };
    variant(&|q| q.clients = (q.clients - 1).max(1));
    variant(&|q| q.ops_per_client = (q.ops_per_client / 2).max(1));
    variant(&|q| q.ops_per_client = (q.ops_per_client - 1).max(1));
    variant(&|q| q.ids = (q.ids - 1).max(1));
    variant(&|q| q.scopes = 1);
    variant(&|q| q.reshard = None);
    variant(&|q| q.switch = None);
    variant(&|q| q.rollout = Duration::ZERO);
    variant(&|q| q.best_effort_shards = 1);
    variant(&|q| q.scope_keys = ScopeKeys::ONE);
    for at in 0..p.store_faults.len() {
        variant(&|q| q.store_faults[at].2 = 0);
    }
    variant(&|q| q.crash_per_mille = 0);
    variant(&|q| q.duplicate_per_mille = 0);
    variant(&|q| q.retention = None);
    variant(&|q| q.max_record_age = None);
    variant(&|q| q.bisect = false);
    variant(&|q| q.transaction_latency = Duration::ZERO);
    variant(&|q| q.page_latency = Duration::ZERO);
    variant(&|q| q.sweep_during_load = false);
    variant(&|q| q.foreign_item = false);
    variant(&|q| q.counter_read_latency = Duration::ZERO);
    variant(&|q| q.limit_changes.clear());
    for at in 0..p.limit_changes.len() {
        variant(&|q| {
            q.limit_changes.remove(at);
        });
    }
    variant(&|q| q.quiet_per_mille = 0);
    variant(&|q| q.lanes = 1);
    variant(&|q| q.splits.clear());
    variant(&|q| q.skew = Skew::default());
    variant(&|q| q.sequence_per_mille = 0);
    out
}

/// Greedy shrinking: takes the first simpler variant that still fails
/// until none does, at most `budget` runs. Deterministic, so replaying the
/// seed shrinks to the same schedule.
pub(crate) fn shrink(p: Params, budget: usize, fails: impl Fn(&Params) -> bool) -> (Params, usize) {
    let (mut current, mut runs) = (p, 0);
    'outer: loop {
        for candidate in simpler(&current) {
            if runs == budget {
                break 'outer;
            }
            runs += 1;
            if fails(&candidate) {
                current = candidate;
                continue 'outer;
            }
        }
        break;
    }
    (current, runs)
}

/// Panics with the failure of `seed`, shrunk: the simplest knobs that still
/// fail, their trace's last events, and the replay command.
pub(crate) fn fail_with_shrunk(seed: u64, why: &str) -> ! {
    let budget = env_u64("SIM_SHRINK_RUNS").map_or(300, |n| n as usize);
    let (shrunk, runs) = shrink(Params::draw(seed), budget, |p| {
        run_with(seed, p.clone(), false).0.is_err()
    });
    let (result, _, trace) = run_with(seed, shrunk.clone(), true);
    let tail = trace.len().saturating_sub(80);
    panic!(
        "simulation seed {seed} failed: {why}\nshrunk in {runs} runs to {shrunk:#?}\nwhich fails with: {}\nits last \
         events:\n{}\n{}",
        result.err().unwrap_or_default(),
        trace[tail..].join("\n"),
        replay_hint(seed)
    );
}
