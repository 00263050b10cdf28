//! The invariants the store's checker runs after every write, per scope:
//! `EC == processed`; in best-effort admission `BE <= live`; in strict
//! admission every best-effort item covers the live items recorded on it,
//! and `live <= limit` outside the configuration-change windows, so a
//! strict schedule fails at the first write past what a window allows.

use std::collections::BTreeMap;
use std::sync::Mutex;

use hybrid_counter::memory::Tables;
use hybrid_counter::{Admission, keys};

use crate::counts::{counters, scope_counts, scopes_of};
use crate::windows::Windows;

/// The invariants that hold after every write, for every scope: `EC ==
/// processed`; in best-effort admission `BE <= live`; in strict admission
/// every best-effort item covers the live items recorded on it (their
/// `be_shard`: the invariant strict admission rests on, so `BE >= live`)
/// and `live <= limit` within the documented windows ([`Windows`]); during
/// a switch from best-effort to strict admission only the first.
pub(crate) fn check_every_step(tables: &Tables, windows: &Mutex<Windows>) -> Result<(), String> {
    let mode = windows.lock().unwrap().mode;
    for scope in scopes_of(tables) {
        let counts = scope_counts(tables, scope);
        let (be, ec) = counters(tables, scope);
        if ec != counts.processed as i64 {
            return Err(format!("{scope}: EC {ec} != processed {}", counts.processed));
        }
        let Some(admission) = mode else {
            windows.lock().unwrap().check(tables, scope, counts.live)?;
            continue;
        };
        match admission {
            Admission::BestEffort => {
                if be > counts.live as i64 {
                    return Err(format!("{scope}: BE {be} above live {}", counts.live));
                }
            }
            Admission::Strict => {
                let mut recorded: BTreeMap<String, i64> = BTreeMap::new();
                for ((s, _), r) in &tables.resources {
                    if s == scope && r.is_kits() && !r.state.deleted {
                        *recorded.entry(keys::best_effort_name(r.state.be_shard)).or_default() += 1;
                    }
                }
                for (name, items) in recorded {
                    let held = tables
                        .counters
                        .get(&(scope.clone(), name.clone()))
                        .copied()
                        .unwrap_or(0);
                    if held < items {
                        return Err(format!(
                            "{scope}: strict: {name} holds {held}, below the {items} live items recorded on it"
                        ));
                    }
                }
                windows.lock().unwrap().check(tables, scope, counts.live)?;
            }
        }
    }
    Ok(())
}
