//! The quota and correction functions as they were before issue 26
//! (commit 6e55a8e) and before issue 34's review (0f6f6b1), and the
//! sharded strict raise's hold-back before e03c33a, kept for the model's
//! regression tests.

use std::collections::BTreeMap;

use hybrid_counter::audit::hold_back;
use hybrid_counter::audit::{Finding, LastWrites, RepairPlan, ScopeCounts};
use hybrid_counter::best_effort::{Layout, Quota};
use hybrid_counter::keys;
use hybrid_counter::time::EpochMillis;

/// Freezes a shard whose quota leaves no room, so a shard read below 0
/// with nothing left of its share lends that share to the others. Before
/// issue 26 (`clamped` false) it also lends what a shard holds below 0;
/// after it (`clamped`) what items hold is read clamped at 0.
pub fn quotas(layout: &Layout, items: &BTreeMap<String, i64>, limit: u64, clamped: bool) -> Vec<Quota> {
    let held_by = |count: i64| i128::from(if clamped { count.max(0) } else { count });
    let retired: i128 = items
        .iter()
        .filter(|(name, _)| !layout.is_active(name))
        .map(|(_, count)| held_by(*count))
        .sum();
    let mut quotas: Vec<Quota> = layout
        .active()
        .map(|shard| {
            let name = keys::best_effort_name(shard);
            Quota {
                read: items.get(&name).copied().unwrap_or(0),
                quota: 0,
                shard,
                name,
            }
        })
        .collect();
    let mut frozen = vec![false; quotas.len()];
    loop {
        let held: i128 = retired
            + quotas
                .iter()
                .zip(&frozen)
                .map(|(q, f)| match (*f, clamped) {
                    (true, _) => held_by(q.read),
                    (false, true) => 0,
                    (false, false) => i128::from(q.read.min(0)),
                })
                .sum::<i128>();
        let rest = u64::try_from((i128::from(limit) - held).max(0)).unwrap_or(u64::MAX);
        let free: Vec<usize> = (0..quotas.len()).filter(|&i| !frozen[i]).collect();
        let n = free.len() as u64;
        for (j, &i) in free.iter().enumerate() {
            let share = rest / n + u64::from((j as u64) < rest % n);
            let below = u64::try_from(-quotas[i].read.min(0)).unwrap_or(u64::MAX);
            quotas[i].quota = share.saturating_sub(below);
        }
        let full: Vec<usize> = free.into_iter().filter(|&i| !quotas[i].has_room()).collect();
        if full.is_empty() {
            break;
        }
        for i in full {
            frozen[i] = true;
            quotas[i].quota = 0;
        }
        if frozen.iter().all(|f| *f) {
            break;
        }
    }
    quotas
}

/// Strict admission raises BE at once when it is one item. Over several
/// shards ([`hybrid_counter::best_effort`]) a raise lands on one of them and shrinks
/// the others' quotas, while a create that read before it still holds its
/// larger quota and could reserve past the limit: so in `plan`, a sharded
/// strict raise waits like a best-effort one, until no request can be in
/// flight. (Removed by e03c33a, verbatim.)
pub fn hold_back_a_sharded_strict_raise(
    plan: &mut RepairPlan,
    counts: &ScopeCounts,
    findings: &[Finding],
    written: LastWrites,
    now: EpochMillis,
    grace: EpochMillis,
) {
    let raise = findings.iter().find_map(|f| match f {
        Finding::UnderReserved { best_effort, live } => Some((*best_effort, *live)),
        _ => None,
    });
    if let Some((best_effort, live)) = raise {
        let last = written.best_effort.max(counts.last_item_write);
        let what = ("raised", "a reservation over another shard", best_effort, live);
        hold_back(plan, what, now.saturating_sub(last), grace);
    }
}

/// The whole correction onto one item: a lowering off the fullest.
pub fn correction_shard(layout: &Layout, items: &BTreeMap<String, i64>, delta: i64) -> String {
    let count = |name: &String| items.get(name).copied().unwrap_or(0);
    let active = layout.active().map(keys::best_effort_name);
    if delta >= 0 {
        return active
            .min_by_key(|name| count(name))
            .expect("at least one active shard");
    }
    items
        .iter()
        .max_by_key(|(name, c)| (**c, !layout.is_active(name)))
        .map(|(name, _)| name.clone())
        .unwrap_or_else(|| keys::best_effort_name(layout.shard(0)))
}
