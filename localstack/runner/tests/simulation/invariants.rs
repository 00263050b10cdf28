//! The invariants the store's checker runs after every write, per counters
//! key of the schedule's layout (the scope itself with one key): every item
//! under its resources key; `EC == processed` over the key's resources keys;
//! in best-effort admission `BE <= live`; in strict admission every
//! best-effort item covers the live items recorded on it, and `live <=
//! share` per key (`live <= limit` with one key) outside the
//! configuration-change windows and a key's drain, so a strict schedule
//! fails at the first write past them. With several keys the scope's own
//! bound is the sum of its keys' (exception (4) of docs/design.md), so the
//! per-key checks carry it; a count on the wrong key of the right scope
//! breaks two keys, not the sums.

use std::collections::BTreeSet;
use std::sync::Mutex;

use hybrid_counter::Admission;
use hybrid_counter::memory::Tables;
use hybrid_counter::scope_keys::ScopeKeys;

use crate::counts::{bounds_of, key_counts, misplaced, shares_above_limit};
use crate::windows::Windows;

/// The invariants that hold after every write, for every counters key of
/// every scope under `layout`: each item lies under its resources key;
/// `EC == processed` over the key's resources keys; in best-effort
/// admission `BE <= live`; in strict admission every best-effort item
/// covers the live items recorded on it (their `be_shard`: the invariant
/// strict admission rests on, so `BE >= live`) and `live <= limit` for
/// the scope and `live <= share` for each key within the documented
/// windows ([`Windows`]); during a switch from best-effort to strict
/// admission only the first two.
pub(crate) fn check_every_step(tables: &Tables, layout: ScopeKeys, windows: &Mutex<Windows>) -> Result<(), String> {
    if let Some(why) = misplaced(tables, layout) {
        return Err(why);
    }
    let mode = windows.lock().unwrap().mode;
    let units = key_counts(tables, layout);
    let scopes: BTreeSet<&str> = units.iter().map(|u| u.scope.as_str()).collect();
    let scopes: Vec<hybrid_counter::Scope> = scopes
        .into_iter()
        .filter_map(|s| hybrid_counter::Scope::new(s).ok())
        .collect();
    if let Some(why) = shares_above_limit(tables, layout, &scopes) {
        return Err(why);
    }
    for unit in &units {
        let name = unit.name();
        if unit.ec != unit.counts.processed as i64 {
            return Err(format!(
                "{name}: EC {} != processed {} over its resources keys",
                unit.ec, unit.counts.processed
            ));
        }
        match mode {
            Some(Admission::BestEffort) if unit.be > unit.counts.live as i64 => {
                return Err(format!("{name}: BE {} above live {}", unit.be, unit.counts.live));
            }
            Some(Admission::Strict) => {
                for (shard, items) in &unit.recorded {
                    let held = tables
                        .counters
                        .get(&(unit.key.clone(), shard.clone()))
                        .copied()
                        .unwrap_or(0);
                    if held < *items {
                        return Err(format!(
                            "{name}: strict: {shard} holds {held}, below the {items} live items recorded on it"
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    if mode == Some(Admission::BestEffort) {
        return Ok(());
    }
    let mut windows = windows.lock().unwrap();
    for bound in bounds_of(&units, tables, layout, windows.default_limit) {
        windows.check(&bound)?;
    }
    Ok(())
}
