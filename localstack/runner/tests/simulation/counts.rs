//! What the tables say about a scope: its items by state, its live count,
//! its counters summed over their shards, and the scopes present. Read by
//! the checker after every write and by the checks after the drain.

use hybrid_counter::audit::ScopeCounts;
use hybrid_counter::keys;
use hybrid_counter::memory::Tables;

pub(crate) fn scope_counts(tables: &Tables, scope: &str) -> ScopeCounts {
    let mut counts = ScopeCounts::default();
    for ((s, _), r) in &tables.resources {
        if s == scope && r.is_kits() {
            counts.add(r.state.counter_processed, r.state.deleted);
        }
    }
    counts
}

pub(crate) fn live_count(tables: &Tables, scope: &str) -> u64 {
    scope_counts(tables, scope).live
}

/// `(BE, EC)` of a scope, each summed over its shards.
pub(crate) fn counters(tables: &Tables, scope: &str) -> (i64, i64) {
    let mut be = 0;
    let mut ec = 0;
    for ((s, name), count) in &tables.counters {
        if s == scope {
            if keys::is_best_effort_name(name) {
                be += count;
            } else if keys::is_eventual_name(name) {
                ec += count;
            }
        }
    }
    (be, ec)
}

pub(crate) fn scopes_of(tables: &Tables) -> Vec<&String> {
    let mut scopes: Vec<&String> = tables.resources.keys().map(|(s, _)| s).collect();
    scopes.extend(tables.counters.keys().map(|(s, _)| s));
    scopes.sort();
    scopes.dedup();
    scopes
}
