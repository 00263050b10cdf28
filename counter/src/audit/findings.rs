//! The pure half of an audit: counting a scope's items by state
//! ([`ScopeCounts`], [`ScopeTally`]), what the counters' values mean under
//! the admission mode ([`findings_for`], [`strict_shard_findings`]), and
//! what a repair may set now and what it must hold back
//! ([`plan_repair_at`]). No I/O and no clock: `now` is passed in.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::best_effort::Layout;
use crate::config::Admission;
use crate::items::{CounterSnapshot, ItemRow};
use crate::keys;
use crate::time::EpochMillis;

/// How long after the last write of a scope a repair may move its BE the
/// way an in-flight request could push past the invariant: longer than
/// twice the API function's timeout (10 s), plus room for clock skew
/// between the API and the operator's machine. Twice: a request stamps its
/// writes with the time it started and one request's write can land up to
/// a timeout after it started, so a slow request landing after a newer one
/// moves a counter's `updated_at` back by up to one timeout (issue 34, D4),
/// and then a request still in flight may have written up to two timeouts
/// after the stamp the audit reads.
pub const REQUEST_GRACE_MS: EpochMillis = 60_000;

/// Items of one scope by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScopeCounts {
    /// Not soft-deleted.
    pub live: u64,
    /// `counter_processed = true` (soft-deleted or not): must equal EC.
    pub processed: u64,
    /// Live and not yet counted: their INSERT is still in the stream path.
    pub pending_create: u64,
    /// Soft-deleted and not yet hard-deleted.
    pub pending_delete: u64,
    /// Items without an incarnation: not the kit's, in none of the counts
    /// above.
    pub foreign: u64,
    /// The latest `created_at` or `deleted_at` of the kit's items counted:
    /// when the request path last wrote one of them (0 if unknown).
    pub last_item_write: EpochMillis,
}

impl ScopeCounts {
    /// Adds another tally (of the same scope) to this one.
    pub fn merge(&mut self, other: &ScopeCounts) {
        self.live += other.live;
        self.processed += other.processed;
        self.pending_create += other.pending_create;
        self.pending_delete += other.pending_delete;
        self.foreign += other.foreign;
        self.last_item_write = self.last_item_write.max(other.last_item_write);
    }

    /// Adds one item as an audit reads it: a foreign item only to
    /// `foreign`, a kit item by its flags and its write times.
    pub fn add_row(&mut self, row: &ItemRow) {
        if !row.is_kits() {
            self.foreign += 1;
            return;
        }
        self.add(row.counter_processed, row.deleted);
        self.last_item_write = self.last_item_write.max(row.last_request_write());
    }

    /// Adds one item given its two flags.
    pub fn add(&mut self, counter_processed: bool, deleted: bool) {
        if !deleted {
            self.live += 1;
        }
        if counter_processed {
            self.processed += 1;
        }
        if !deleted && !counter_processed {
            self.pending_create += 1;
        }
        if deleted {
            self.pending_delete += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_each_state() {
        let mut c = ScopeCounts::default();
        c.add(false, false); // pending create
        c.add(true, false); // counted, live
        c.add(true, true); // counted, pending delete
        c.add(false, true); // never counted, pending delete
        assert_eq!(
            c,
            ScopeCounts {
                live: 2,
                processed: 2,
                pending_create: 1,
                pending_delete: 2,
                ..ScopeCounts::default()
            }
        );
    }

    #[test]
    fn foreign_items_are_counted_apart_and_write_times_are_kept() {
        let mut c = ScopeCounts::default();
        let kit = |processed, deleted, created_at, deleted_at| ItemRow {
            id: "w".into(),
            counter_processed: processed,
            deleted,
            incarnation: Some("inc".into()),
            created_at: Some(created_at),
            deleted_at,
            be_shard: None,
        };
        c.add_row(&kit(true, false, 100, None));
        c.add_row(&kit(true, true, 50, Some(300)));
        // Not the kit's: flags and times are ignored.
        c.add_row(&ItemRow {
            id: "theirs".into(),
            counter_processed: true,
            created_at: Some(900),
            ..ItemRow::default()
        });
        assert_eq!(
            c,
            ScopeCounts {
                live: 1,
                processed: 2,
                pending_create: 0,
                pending_delete: 1,
                foreign: 1,
                last_item_write: 300,
            }
        );
        let mut total = ScopeCounts::default();
        total.merge(&c);
        total.merge(&ScopeCounts {
            foreign: 2,
            last_item_write: 200,
            ..ScopeCounts::default()
        });
        assert_eq!((total.foreign, total.last_item_write), (3, 300));
    }
}

/// The live items recorded on each best-effort item, by its name.
pub type LiveByShard = BTreeMap<String, u64>;

/// A scope's items as an audit reads them: the counts by state, and the
/// live kit items per best-effort item they recorded (`be_shard`), what a
/// repair may not lower a shard below and what strict admission needs
/// each shard to cover. The engine tallies a scope's Query with it, and
/// `counterctl audit` the table's Scan (whose projection has no write
/// times: its `last_item_write` stays 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeTally {
    pub counts: ScopeCounts,
    pub live_by_shard: LiveByShard,
}

impl ScopeTally {
    /// Adds one item as an audit reads it ([`ScopeCounts::add_row`]).
    pub fn add_row(&mut self, row: &ItemRow) {
        self.counts.add_row(row);
        if row.is_kits() && !row.deleted {
            *self
                .live_by_shard
                .entry(keys::best_effort_name(row.be_shard))
                .or_default() += 1;
        }
    }

    /// Adds another tally of the same scope to this one.
    pub fn merge(&mut self, other: &ScopeTally) {
        self.counts.merge(&other.counts);
        for (name, n) in &other.live_by_shard {
            *self.live_by_shard.entry(name.clone()).or_default() += n;
        }
    }
}

/// What the sums of a strict scope can hide: shards short of the live
/// items recorded on them, by `short` in all, more than the sum is short
/// ([`Finding::ShardsShort`]),
/// and shards at mixed epochs ([`Finding::MixedEpochs`]). The audit engine
/// raises both away with one fenced raise ([`Layout::raise`]).
pub fn strict_shard_findings(layout: Layout, tally: &ScopeTally, snapshot: &CounterSnapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    // A raise of the sum to live fills the short shards first
    // ([`Layout::raise`]): only a shortfall beyond the sum's is a finding
    // of its own, and the engine raises by it.
    let short = layout.shortfall(&snapshot.best_effort_items, &tally.live_by_shard);
    let under = i64::try_from(tally.counts.live).unwrap_or(i64::MAX) - snapshot.best_effort;
    if short > under.max(0) {
        out.push(Finding::ShardsShort { short });
    }
    if layout.fences(snapshot).is_none() {
        out.push(Finding::MixedEpochs);
    } else if layout.absent_since_a_raise(snapshot) {
        out.push(Finding::ShardsAbsent);
    }
    let below = layout.retired_below_zero(&snapshot.best_effort_items);
    if below > 0 {
        out.push(Finding::RetiredBelowZero { below });
    }
    out
}

/// What an audit of one scope found: every finding is drift (a counter that
/// differs from the truth, repairable). Which differences are defects of the
/// kit depends on the admission mode: `EC != processed` always is; in
/// best-effort admission `BE > live` is and `BE < live` is the expected
/// undercount; in strict admission it is the other way round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// The transactional invariant is broken: a real defect.
    EventualMismatch { eventual: i64, processed: u64 },
    /// Best-effort admission: BE counts items that do not exist, a real defect.
    BestEffortAboveLive { best_effort: i64, live: u64 },
    /// Best-effort admission: BE lost updates (swallowed failures), expected
    /// and repairable.
    BestEffortBelowLive { best_effort: i64, live: u64 },
    /// Strict admission: BE holds reservations without items (a create in
    /// flight, or a slot not given back after an ambiguous failure).
    /// Expected; repairable once no reservation can be in flight.
    OverReserved { best_effort: i64, live: u64 },
    /// Strict admission: BE counts fewer reservations than there are live
    /// items, so the limit can be overshot: a real defect (or a scope that
    /// was switched from best-effort admission and not repaired yet).
    UnderReserved { best_effort: i64, live: u64 },
    /// Strict admission: shards count `short` fewer reservations, in all,
    /// than the live items recorded on them, more than BE is below live
    /// (reported beside [`Finding::UnderReserved`] only then; also when the sums agree: a
    /// scope switched from best-effort admission, whose `+1`s could land
    /// on another shard than the item records). A create reserving on a
    /// short shard can overshoot: a defect until the audit raises it.
    ShardsShort { short: i64 },
    /// Strict admission: the best-effort shards are at mixed epochs (a
    /// best-effort write created a shard after a raise, or `BeShardCount`
    /// grew back over shards retired before the last raise), so every
    /// strict create of the scope is refused (503) until the audit's raise
    /// fences them again: a defect, repairable at once.
    MixedEpochs,
    /// Strict admission: a raise fenced the scope and `BeShardCount` grew
    /// since, so some configured shards do not exist yet; a strict create
    /// reserves only on those, and is refused below the limit when their
    /// quotas are 0 (the limit's share taken by the others), until the
    /// audit's raise of 0 creates them fenced. Expected after the change,
    /// repairable at once.
    ShardsAbsent,
    /// Strict admission: items of an earlier shard count are `below` under
    /// 0 in all: they hide slots the active shards hold from the sum, so
    /// the scope can be refused below its limit with BE equal to live. The
    /// audit's raise fills them back to 0 (then the over-reservation it
    /// shows is lowered after the grace). Expected after best-effort
    /// admission moved `+1`s off a shard later retired; repairable at once.
    RetiredBelowZero { below: i64 },
}

impl Finding {
    /// Whether this finding is a defect of the kit, not an expected state.
    pub fn is_defect(&self) -> bool {
        matches!(
            self,
            Finding::EventualMismatch { .. }
                | Finding::BestEffortAboveLive { .. }
                | Finding::UnderReserved { .. }
                | Finding::ShardsShort { .. }
                | Finding::MixedEpochs
        )
    }
}

/// The counter values a repair writes: EC to the processed count, BE to
/// the live count (raised when it undercounts, lowered when it overcounts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Repair {
    pub eventual: Option<i64>,
    pub best_effort: Option<i64>,
}

impl Repair {
    pub fn is_empty(&self) -> bool {
        self.eventual.is_none() && self.best_effort.is_none()
    }
}

/// Compares the counters of one scope with its items, in best-effort
/// admission (see [`findings_for`]).
pub fn findings(counts: &ScopeCounts, best_effort: i64, eventual: i64) -> Vec<Finding> {
    findings_for(Admission::BestEffort, counts, best_effort, eventual)
}

/// Compares the counters of one scope with its items, reading BE by the
/// scope's admission mode.
pub fn findings_for(admission: Admission, counts: &ScopeCounts, best_effort: i64, eventual: i64) -> Vec<Finding> {
    let live = i64::try_from(counts.live).unwrap_or(i64::MAX);
    let processed = i64::try_from(counts.processed).unwrap_or(i64::MAX);
    let mut out = Vec::new();
    if eventual != processed {
        out.push(Finding::EventualMismatch {
            eventual,
            processed: counts.processed,
        });
    }
    match (admission, best_effort.cmp(&live)) {
        (_, std::cmp::Ordering::Equal) => {}
        (Admission::BestEffort, std::cmp::Ordering::Greater) => out.push(Finding::BestEffortAboveLive {
            best_effort,
            live: counts.live,
        }),
        (Admission::BestEffort, std::cmp::Ordering::Less) => out.push(Finding::BestEffortBelowLive {
            best_effort,
            live: counts.live,
        }),
        (Admission::Strict, std::cmp::Ordering::Greater) => out.push(Finding::OverReserved {
            best_effort,
            live: counts.live,
        }),
        (Admission::Strict, std::cmp::Ordering::Less) => out.push(Finding::UnderReserved {
            best_effort,
            live: counts.live,
        }),
    }
    out
}

/// The repair that resolves `findings`, ignoring when it may be written
/// (see [`plan_repair_at`]).
pub fn plan_repair(counts: &ScopeCounts, findings: &[Finding]) -> Repair {
    let mut repair = Repair::default();
    for finding in findings {
        match finding {
            Finding::EventualMismatch { .. } => repair.eventual = i64::try_from(counts.processed).ok(),
            Finding::BestEffortAboveLive { .. }
            | Finding::BestEffortBelowLive { .. }
            | Finding::OverReserved { .. }
            | Finding::UnderReserved { .. } => repair.best_effort = i64::try_from(counts.live).ok(),
            // Not a value to set: the audit engine raises the short shards,
            // or fences mixed epochs, with one fenced raise.
            Finding::ShardsShort { .. }
            | Finding::MixedEpochs
            | Finding::ShardsAbsent
            | Finding::RetiredBelowZero { .. } => {}
        }
    }
    repair
}

/// A repair that may be written now, and what it had to leave for later.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RepairPlan {
    pub repair: Repair,
    /// Why part of the repair must wait (a BE move that a request still in
    /// flight could push past the invariant).
    pub held_back: Option<String>,
}

/// When the scope's counters were last written (`updated_at`, epoch
/// milliseconds; 0 when never): what tells a repair whether a request may
/// still be between its two writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LastWrites {
    /// The latest of the best-effort counter's items (request path:
    /// increments, decrements, reservations).
    pub best_effort: EpochMillis,
    /// The latest of the eventual counter's items (every stream transaction
    /// writes one, also when it only hard-deletes an item).
    pub eventual: EpochMillis,
}

impl LastWrites {
    /// Reads the times off a scope's counter items.
    pub fn of(items: &[crate::items::CounterItem]) -> Self {
        let mut out = Self::default();
        for item in items {
            if crate::keys::is_best_effort_name(&item.name) {
                out.best_effort = out.best_effort.max(item.updated_at);
            } else if crate::keys::is_eventual_name(&item.name) {
                out.eventual = out.eventual.max(item.updated_at);
            }
        }
        out
    }
}

/// [`plan_repair`], minus what may not be written at `now`.
///
/// The request path writes two items per create or delete, not
/// atomically: best-effort create puts the item, then `BE += 1`;
/// best-effort delete `BE -= 1`, then soft-deletes; strict create reserves
/// (`BE += 1`), then puts; strict delete soft-deletes, then `BE -= 1`. An
/// audit between the two writes sees a state no finished request left, and
/// the counters' version condition only catches writes that land between
/// the audit's reads and its repair, never one still to be sent. So a
/// repair that moves BE toward a value an in-flight request could push past
/// the invariant — raising BE in best-effort admission (the pending
/// increment would take it above live), lowering it in strict admission
/// (the pending decrement or put would take it below live) — waits until
/// every write a request in flight may have made is at least `grace` before
/// `now`. `grace` is longer than twice the API's timeout plus clock skew, so no
/// request that wrote the scope before then is still running. Which writes:
///
/// * best-effort raise: BE (`written.best_effort`: a delete's decrement
///   landed, its soft delete not yet) and every item
///   (`counts.last_item_write`: a create's put landed, its increment not yet);
/// * strict lowering: the same, and the eventual counter
///   (`written.eventual`): a strict delete soft-deletes first, and if the
///   stream hard-deletes the item before the delete's decrement lands, the
///   item and its `deleted_at` are gone from the count; the stream's
///   transaction wrote the eventual counter then.
///
/// EC repairs, lowering an overcounting best-effort BE and raising an
/// under-reserved strict BE are written at any time: no in-flight request
/// can push those past the invariant, and the write is conditioned on the
/// counters' versions, so a concurrent writer makes it retry.
pub fn plan_repair_at(
    counts: &ScopeCounts,
    findings: &[Finding],
    written: LastWrites,
    now: EpochMillis,
    grace: EpochMillis,
) -> RepairPlan {
    let mut plan = RepairPlan {
        repair: plan_repair(counts, findings),
        held_back: None,
    };
    let request_written = written.best_effort.max(counts.last_item_write);
    let waits = findings.iter().find_map(|f| match f {
        Finding::BestEffortBelowLive { best_effort, live } => {
            Some(("raised", "an increment", *best_effort, *live, request_written))
        }
        Finding::OverReserved { best_effort, live } => Some((
            "lowered",
            "a reservation or a decrement",
            *best_effort,
            *live,
            request_written.max(written.eventual),
        )),
        _ => None,
    });
    if let Some((moved, pending, best_effort, live, last)) = waits {
        hold_back(
            &mut plan,
            (moved, pending, best_effort, live),
            now.saturating_sub(last),
            grace,
        );
    }
    plan
}

/// What an audit decides for one scope from what it read: the findings,
/// the repair it may write now (after strict admission's own adjustments)
/// and how BE is written. The audit engine's `audit_scope` writes it; the
/// admission model (the integration test `counter/tests/admission_model/`)
/// plans its audit with it, so both decide alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// [`findings_for`], and in strict admission [`strict_shard_findings`].
    pub findings: Vec<Finding>,
    /// [`plan_repair_at`]'s plan; in strict admission, shards at mixed
    /// epochs turn it into a raise (of 0 when nothing else, a planned
    /// lowering left to a later run), and a shortfall of the shards against
    /// the live items recorded on them raises BE to at least BE read plus
    /// the shortfall ([`Layout::shortfall`]; any lowering left too).
    pub plan: RepairPlan,
    /// The BE target is raised through [`Layout::raise`] (strict admission,
    /// at or above BE read): fenced, at once. Otherwise it is set under the
    /// versions read.
    pub raise: bool,
}

/// The audit's pure decision for a scope: `tally` and `snapshot` as read,
/// `written` the counters' last writes, `layout` the configured best-effort
/// shards ([`Decision`]).
pub fn decide(
    admission: Admission,
    layout: Layout,
    tally: &ScopeTally,
    snapshot: &CounterSnapshot,
    written: LastWrites,
    now: EpochMillis,
    grace: EpochMillis,
) -> Decision {
    let mut findings = findings_for(admission, &tally.counts, snapshot.best_effort, snapshot.eventual);
    let strict = admission.is_strict();
    if strict {
        findings.extend(strict_shard_findings(layout, tally, snapshot));
    }
    let mut plan = plan_repair_at(&tally.counts, &findings, written, now, grace);
    // Shards left at mixed epochs (a write that does not fence created one
    // after a raise) refuse every strict read, and shards absent since a
    // raise take every strict reservation: a raise of 0 fences them all
    // (creating the absent ones).
    if strict && (layout.fences(snapshot).is_none() || layout.absent_since_a_raise(snapshot)) {
        // Before a lowering too: the lowering waits for the next run.
        let target = plan.repair.best_effort.unwrap_or(snapshot.best_effort);
        plan.repair.best_effort = Some(target.max(snapshot.best_effort));
    }
    // A shard short of the live items recorded on it breaks strict
    // admission even when the sum is right (best-effort admission's writes,
    // before a switch to strict, may land on another shard): raised at once
    // by the shortfall (fenced; the raise fills the short shards first), any
    // lowering left to a later audit.
    let shortfall = layout.shortfall(&snapshot.best_effort_items, &tally.live_by_shard)
        + layout.retired_below_zero(&snapshot.best_effort_items);
    if strict && shortfall > 0 {
        let raise = plan.repair.best_effort.filter(|t| *t > snapshot.best_effort);
        let target = raise
            .unwrap_or(snapshot.best_effort)
            .max(snapshot.best_effort + shortfall);
        plan.repair.best_effort = Some(target);
    }
    let raise = strict && plan.repair.best_effort.is_some_and(|t| t >= snapshot.best_effort);
    Decision { findings, plan, raise }
}

/// Takes the BE move out of `plan` while the scope's last request write
/// is younger than `grace`, and says why. Public for the admission model
/// (`counter/tests/admission_model/legacy.rs`), not part of the API.
#[doc(hidden)]
pub fn hold_back(
    plan: &mut RepairPlan,
    (moved, pending, best_effort, live): (&str, &str, i64, u64),
    age: EpochMillis,
    grace: EpochMillis,
) {
    if plan.repair.best_effort.is_some() && age < grace {
        plan.repair.best_effort = None;
        plan.held_back = Some(format!(
            "best-effort {best_effort} (live {live}) is left alone for now: the scope was last written {}s ago and \
             {pending} of a request may still be in flight; it can be {moved} {}s after the scope's last write",
            age.max(0) / 1000,
            grace / 1000
        ));
    }
}

#[cfg(test)]
mod audit_tests {
    use super::*;

    /// Only BE written, at `at`.
    fn be(at: EpochMillis) -> LastWrites {
        LastWrites {
            best_effort: at,
            eventual: 0,
        }
    }

    fn counts(live: u64, processed: u64) -> ScopeCounts {
        ScopeCounts {
            live,
            processed,
            ..ScopeCounts::default()
        }
    }

    #[test]
    fn consistent_counters_have_no_findings() {
        assert!(findings(&counts(5, 5), 5, 5).is_empty());
    }

    #[test]
    fn eventual_mismatch_and_best_effort_overcount_are_defects_undercount_is_not() {
        let f = findings(&counts(5, 4), 6, 3);
        assert_eq!(
            f,
            vec![
                Finding::EventualMismatch {
                    eventual: 3,
                    processed: 4
                },
                Finding::BestEffortAboveLive {
                    best_effort: 6,
                    live: 5
                }
            ]
        );
        assert!(f.iter().all(Finding::is_defect));
        let under = findings(&counts(5, 5), 2, 5);
        assert_eq!(under.len(), 1);
        assert!(!under[0].is_defect());
    }

    #[test]
    fn repair_sets_eventual_to_processed_and_best_effort_to_live() {
        let c = counts(7, 6);
        let repair = plan_repair(&c, &findings(&c, 2, 9));
        assert_eq!(
            repair,
            Repair {
                eventual: Some(6),
                best_effort: Some(7)
            }
        );
        assert!(plan_repair(&c, &[]).is_empty());
    }

    #[test]
    fn strict_admission_flips_which_side_of_live_is_a_defect() {
        let c = counts(5, 5);
        let over = findings_for(Admission::Strict, &c, 7, 5);
        assert_eq!(
            over,
            vec![Finding::OverReserved {
                best_effort: 7,
                live: 5
            }]
        );
        assert!(!over[0].is_defect(), "over-reserving is strict mode's safe direction");
        let under = findings_for(Admission::Strict, &c, 4, 5);
        assert_eq!(
            under,
            vec![Finding::UnderReserved {
                best_effort: 4,
                live: 5
            }]
        );
        assert!(under[0].is_defect(), "under-reserving lets creators overshoot");
        assert!(findings_for(Admission::Strict, &c, 5, 5).is_empty());
        assert_eq!(findings(&c, 7, 5), findings_for(Admission::BestEffort, &c, 7, 5));
        assert!(findings(&c, 7, 5)[0].is_defect());
    }

    #[test]
    fn a_strict_raise_is_planned_at_once_however_recent_the_last_write() {
        let c = counts(5, 4);
        let f = findings_for(Admission::Strict, &c, 4, 3);
        let written = 1_000_000;
        let plan = plan_repair_at(&c, &f, be(written), written, REQUEST_GRACE_MS);
        assert_eq!(
            plan.repair.best_effort,
            Some(5),
            "raised at once (fenced, not held back)"
        );
        assert_eq!(plan.held_back, None);
    }

    #[test]
    fn an_over_reserved_best_effort_is_lowered_only_after_the_grace_period() {
        let c = counts(5, 4);
        let f = findings_for(Admission::Strict, &c, 7, 3);
        let written = 1_000_000;
        let early = plan_repair_at(&c, &f, be(written), written + REQUEST_GRACE_MS - 1, REQUEST_GRACE_MS);
        assert_eq!(
            early.repair,
            Repair {
                eventual: Some(4),
                best_effort: None
            },
            "EC is repaired, BE waits"
        );
        assert!(early.held_back.as_deref().unwrap().contains("in flight"), "{early:?}");
        let late = plan_repair_at(&c, &f, be(written), written + REQUEST_GRACE_MS, REQUEST_GRACE_MS);
        assert_eq!(
            late,
            RepairPlan {
                repair: Repair {
                    eventual: Some(4),
                    best_effort: Some(5)
                },
                held_back: None
            }
        );
        // Raising an under-reserved BE never waits.
        let under = findings_for(Admission::Strict, &c, 2, 4);
        let plan = plan_repair_at(&c, &under, be(written), written, REQUEST_GRACE_MS);
        assert_eq!(plan.repair.best_effort, Some(5));
        assert_eq!(plan.held_back, None);
        // Lowering an overcounting best-effort BE never waits either.
        let plan = plan_repair_at(&c, &findings(&c, 7, 4), be(written), written, REQUEST_GRACE_MS);
        assert_eq!(plan.repair.best_effort, Some(5));
    }

    #[test]
    fn a_best_effort_raise_waits_until_no_request_can_be_in_flight() {
        // A create put its item and has not incremented BE yet: BE 4,
        // live 5. Raising BE now would end at 6 once the increment lands.
        let written = 1_000_000;
        let mut c = counts(5, 5);
        c.last_item_write = written;
        let f = findings(&c, 4, 5);
        let early = plan_repair_at(&c, &f, LastWrites::default(), written + 1_000, REQUEST_GRACE_MS);
        assert_eq!(early.repair, Repair::default(), "the item is young: BE waits");
        let why = early.held_back.unwrap();
        assert!(why.contains("in flight") && why.contains("raised"), "{why}");
        // A counter written recently holds it back too (a delete's `BE -= 1`
        // landed, its soft delete has not).
        c.last_item_write = 0;
        let early = plan_repair_at(&c, &f, be(written), written + REQUEST_GRACE_MS - 1, REQUEST_GRACE_MS);
        assert!(early.held_back.is_some(), "{early:?}");
        let late = plan_repair_at(&c, &f, be(written), written + REQUEST_GRACE_MS, REQUEST_GRACE_MS);
        assert_eq!((late.repair.best_effort, late.held_back), (Some(5), None));
        // The stream's writes do not hold a best-effort raise back.
        let stream = LastWrites {
            best_effort: 0,
            eventual: written + REQUEST_GRACE_MS,
        };
        let plan = plan_repair_at(&c, &f, stream, written + REQUEST_GRACE_MS, REQUEST_GRACE_MS);
        assert_eq!(plan.repair.best_effort, Some(5));
    }

    #[test]
    fn a_strict_lowering_waits_for_a_recent_soft_delete() {
        // A strict delete soft-deleted its item and has not decremented BE:
        // BE 5, live 4, BE itself written long ago.
        let deleted_at = 2_000_000;
        let mut c = counts(4, 5);
        c.last_item_write = deleted_at;
        let f = findings_for(Admission::Strict, &c, 5, 5);
        let early = plan_repair_at(&c, &f, LastWrites::default(), deleted_at + 10, REQUEST_GRACE_MS);
        assert_eq!(early.repair.best_effort, None);
        assert!(early.held_back.unwrap().contains("lowered"));
        let late = plan_repair_at(
            &c,
            &f,
            LastWrites::default(),
            deleted_at + REQUEST_GRACE_MS,
            REQUEST_GRACE_MS,
        );
        assert_eq!(late.repair.best_effort, Some(4));
        // The item may already be hard-deleted by the stream, its decrement
        // still to come: the eventual counter's write holds the lowering back.
        c.last_item_write = 0;
        let hard_deleted = LastWrites {
            best_effort: 0,
            eventual: deleted_at,
        };
        let plan = plan_repair_at(&c, &f, hard_deleted, deleted_at + 10, REQUEST_GRACE_MS);
        assert!(plan.held_back.is_some(), "{plan:?}");
    }
}
