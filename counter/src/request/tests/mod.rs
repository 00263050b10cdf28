//! The request path's tests, one file per concern, and the helpers they
//! share.

use super::*;
use crate::memory::{Fault, MemoryStore, Op};

const NOW: EpochMillis = 1;

fn ids(scope: &str, id: &str) -> (Scope, ResourceId) {
    (Scope::new(scope).unwrap(), ResourceId::new(id).unwrap())
}

/// BE may undercount, never overcount: BE <= live items.
fn assert_best_effort_not_above_live(store: &MemoryStore, scope: &str) {
    let tables = store.tables();
    let live = tables
        .resources
        .iter()
        .filter(|((s, _), r)| s == scope && !r.state.deleted)
        .count() as i64;
    let be = store.best_effort(scope);
    assert!(be <= live, "BE {be} above live {live}");
}

fn strict(limit: u64) -> Counter<MemoryStore> {
    Counter::new(MemoryStore::new(), limit).with_admission(Admission::Strict)
}

/// Creates `w0`, `w1`, ... in `s`.
async fn create_many<S: RequestStore>(counter: &Counter<S>, s: &Scope, n: usize) {
    for n in 0..n {
        counter
            .create(s, &ResourceId::new(format!("w{n}")).unwrap(), Item::default(), NOW)
            .await
            .unwrap();
    }
}

fn live(store: &MemoryStore, scope: &str) -> i64 {
    store
        .tables()
        .resources
        .iter()
        .filter(|((s, _), r)| s == scope && !r.state.deleted)
        .count() as i64
}

/// Strict admission's invariant: BE counts reservations, never fewer
/// than the live items.
fn assert_best_effort_not_below_live(store: &MemoryStore, scope: &str) {
    let be = store.best_effort(scope);
    let live = live(store, scope);
    assert!(be >= live, "BE {be} below live {live}");
}

fn count_calls(store: &MemoryStore, op: Op) -> usize {
    store.calls().iter().filter(|o| **o == op).count()
}

mod best_effort;
mod races;
mod review_races;
mod shards;
mod strict;
