//! Timestamps instead of the grace oracle (issue 34 D4), checked with
//! `stateright`: best-effort admission on one scope, with real clocks.
//!
//! True time runs in ticks (`Tick`, up to a horizon). A request starts at
//! a true time and stamps its writes with its own clock, ahead of true
//! time by 0 to `skew` ticks (any two clocks differ by at most `skew`);
//! each of its two writes lands at any moment until `timeout` ticks after
//! it started (a slow write lands late, after a newer request's), and a
//! request past its timeout is killed: what it has not written is never
//! written. A create puts its item (`created_at`: its stamp), then adds
//! `+1` to BE; a delete takes `-1` from BE, then soft-deletes its item
//! (`deleted_at`: its stamp; a concurrent delete's win stops it). Every
//! BE write sets the counter's `updated_at` to the request's stamp,
//! unconditionally, as `DynamoStore` does (`SET updated_at = :now`): a
//! slow request's write moves it back. The stream hard-deletes a
//! soft-deleted item at any time (its `deleted_at` goes with it).
//!
//! The audit reads at any moment with its own clock (also 0 to `skew`
//! ahead) and decides with the real [`findings_for`] and
//! [`plan_repair_at`]: the scope's last request write is the counter's
//! `updated_at` and the latest `created_at`/`deleted_at` of the items it
//! reads, the grace period passed once that is `grace` before its now.
//! Its repair is read and written in one step (stricter than the real
//! audit, whose version condition catches a counter write in between,
//! never an item write).
//!
//! Checked at every state: **BE <= live** (best-effort admission never
//! counts above the live items). With the grace of before issue 34 (one
//! API timeout) the checker finds the D4 overshoot: a raise while a
//! delete's soft delete is in flight ends one above live. With today's
//! (two timeouts plus the skew, [`hybrid_counter::audit::findings::REQUEST_GRACE_MS`]
//! for a 10 s timeout) it finds none.

use stateright::{Model, Property};

use hybrid_counter::audit::{LastWrites, ScopeCounts, findings_for, plan_repair_at};
use hybrid_counter::config::Admission;

/// Items of the scope the model holds.
const ITEMS: usize = 2;
/// A delete's target once its item was hard-deleted.
const GONE: u8 = u8::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Request {
    Idle,
    /// A create that started at true time `at`, stamping `stamp`; `put`:
    /// its item (slot) is written, its `+1` not yet.
    Create {
        at: u8,
        stamp: u8,
        put: Option<u8>,
    },
    /// A delete of the item in `slot`; `decremented`: its `-1` landed, its
    /// soft delete not yet.
    Delete {
        at: u8,
        stamp: u8,
        slot: u8,
        decremented: bool,
    },
}

/// One item: its last request write (`created_at` or `deleted_at`) and
/// whether it is soft-deleted.
type Item = Option<(u8, bool)>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ClockState {
    /// True time.
    pub(super) now: u8,
    pub(super) be: i8,
    /// The best-effort counter's `updated_at`.
    pub(super) updated_at: u8,
    pub(super) items: [Item; ITEMS],
    pub(super) requests: [Request; 2],
    /// A raise landed.
    pub(super) raised: bool,
}

impl ClockState {
    fn live(&self) -> i64 {
        let live = self.items.iter().filter(|i| matches!(i, Some((_, false)))).count();
        i64::try_from(live).expect("items")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum ClockAction {
    Tick,
    /// A request starts, its clock `ahead` ticks ahead.
    Create {
        r: usize,
        ahead: u8,
    },
    Delete {
        r: usize,
        ahead: u8,
        slot: u8,
    },
    /// The request's next write lands (a create's put goes to `slot`).
    Write {
        r: usize,
        slot: u8,
    },
    HardDelete(u8),
    /// The audit reads and repairs, its clock `ahead` ticks ahead.
    Audit {
        ahead: u8,
    },
}

#[derive(Debug, Clone)]
pub(super) struct ClockModel {
    /// The API's timeout, the clocks' skew, the audit's grace, in ticks.
    pub(super) timeout: u8,
    pub(super) skew: u8,
    pub(super) grace: u8,
    /// No request starts at or after this true time; time stops here.
    pub(super) horizon: u8,
}

pub(super) const NOT_ABOVE_LIVE: &str = "BE <= live";
pub(super) const AUDIT_RAISED: &str = "the audit raised BE";
pub(super) const BACKWARDS: &str = "a slow write moved updated_at back";

impl ClockModel {
    /// The audit's repair at its clock `now`: BE's new value, if any.
    fn repair(&self, s: &ClockState, now: u8) -> Option<i64> {
        let live = s.live();
        let counts = ScopeCounts {
            live: u64::try_from(live).expect("live"),
            // EC is right: only BE is in question here.
            processed: u64::try_from(live).expect("live"),
            last_item_write: s
                .items
                .iter()
                .flatten()
                .map(|(at, _)| i64::from(*at))
                .max()
                .unwrap_or(0),
            ..ScopeCounts::default()
        };
        let findings = findings_for(Admission::BestEffort, &counts, i64::from(s.be), live);
        let written = LastWrites {
            best_effort: i64::from(s.updated_at),
            eventual: 0,
        };
        plan_repair_at(&counts, &findings, written, i64::from(now), i64::from(self.grace))
            .repair
            .best_effort
    }

    fn deadline(&self, at: u8) -> u8 {
        at + self.timeout
    }
}

impl Model for ClockModel {
    type State = ClockState;
    type Action = ClockAction;

    fn init_states(&self) -> Vec<ClockState> {
        vec![ClockState {
            now: 0,
            be: 0,
            updated_at: 0,
            items: [None; ITEMS],
            requests: [Request::Idle; 2],
            raised: false,
        }]
    }

    fn actions(&self, s: &ClockState, actions: &mut Vec<ClockAction>) {
        if s.now < self.horizon {
            actions.push(ClockAction::Tick);
        }
        for (r, request) in s.requests.iter().enumerate() {
            match *request {
                Request::Idle if s.now < self.horizon => {
                    for ahead in 0..=self.skew {
                        if s.items.iter().any(Option::is_none) {
                            actions.push(ClockAction::Create { r, ahead });
                        }
                        for slot in 0..ITEMS {
                            if matches!(s.items[slot], Some((_, false))) {
                                let slot = u8::try_from(slot).expect("slot");
                                actions.push(ClockAction::Delete { r, ahead, slot });
                            }
                        }
                    }
                }
                Request::Idle => {}
                Request::Create { put: None, .. } => {
                    for slot in (0..ITEMS).filter(|&k| s.items[k].is_none()) {
                        let slot = u8::try_from(slot).expect("slot");
                        actions.push(ClockAction::Write { r, slot });
                    }
                }
                Request::Create { .. } | Request::Delete { .. } => actions.push(ClockAction::Write { r, slot: 0 }),
            }
        }
        for slot in 0..ITEMS {
            if matches!(s.items[slot], Some((_, true))) {
                actions.push(ClockAction::HardDelete(u8::try_from(slot).expect("slot")));
            }
        }
        for ahead in 0..=self.skew {
            if self.repair(s, s.now + ahead).is_some() {
                actions.push(ClockAction::Audit { ahead });
            }
        }
    }

    fn next_state(&self, last: &ClockState, action: ClockAction) -> Option<ClockState> {
        let mut s = last.clone();
        match action {
            ClockAction::Tick => {
                s.now += 1;
                // Killed at its timeout: what it has not written never lands.
                for request in &mut s.requests {
                    let at = match *request {
                        Request::Idle => continue,
                        Request::Create { at, .. } | Request::Delete { at, .. } => at,
                    };
                    if s.now > self.deadline(at) {
                        *request = Request::Idle;
                    }
                }
            }
            ClockAction::Create { r, ahead } => {
                s.requests[r] = Request::Create {
                    at: s.now,
                    stamp: s.now + ahead,
                    put: None,
                };
            }
            ClockAction::Delete { r, ahead, slot } => {
                s.requests[r] = Request::Delete {
                    at: s.now,
                    stamp: s.now + ahead,
                    slot,
                    decremented: false,
                };
            }
            ClockAction::Write { r, slot } => match s.requests[r] {
                Request::Create { at, stamp, put: None } => {
                    s.items[usize::from(slot)] = Some((stamp, false));
                    s.requests[r] = Request::Create {
                        at,
                        stamp,
                        put: Some(slot),
                    };
                }
                Request::Create { stamp, .. } => {
                    s.be += 1;
                    s.updated_at = stamp;
                    s.requests[r] = Request::Idle;
                }
                Request::Delete {
                    at,
                    stamp,
                    slot,
                    decremented: false,
                } => {
                    s.be -= 1;
                    s.updated_at = stamp;
                    s.requests[r] = Request::Delete {
                        at,
                        stamp,
                        slot,
                        decremented: true,
                    };
                }
                Request::Delete { stamp, slot, .. } => {
                    // Conditioned on the item being live: a concurrent
                    // delete's win (or a hard delete since) stops it.
                    if let Some(item) = s.items.get_mut(usize::from(slot))
                        && let Some((at, false)) = *item
                    {
                        *item = Some((at.max(stamp), true));
                    }
                    s.requests[r] = Request::Idle;
                }
                Request::Idle => unreachable!(),
            },
            ClockAction::HardDelete(slot) => {
                s.items[usize::from(slot)] = None;
                // A delete of it still to soft-delete names its incarnation:
                // it never touches a new item put in the same slot.
                for request in &mut s.requests {
                    if let Request::Delete { slot: target, .. } = request
                        && *target == slot
                    {
                        *target = GONE;
                    }
                }
            }
            ClockAction::Audit { ahead } => {
                let now = s.now + ahead;
                let target = self.repair(&s, now).expect("a repair");
                s.raised |= target > i64::from(s.be);
                s.be = i8::try_from(target).expect("bounded");
                // The repair sets `updated_at` to the audit's now.
                s.updated_at = now;
            }
        }
        Some(s)
    }

    /// BE below -2 is cut: double deletes and killed creates only take it
    /// further below live, which the property does not look at, and
    /// without a floor the states never end.
    fn within_boundary(&self, s: &ClockState) -> bool {
        s.be >= -2
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NOT_ABOVE_LIVE, |_, s: &ClockState| i64::from(s.be) <= s.live()),
            Property::sometimes(AUDIT_RAISED, |_, s: &ClockState| s.raised),
            Property::sometimes(BACKWARDS, |_, s: &ClockState| {
                s.requests
                    .iter()
                    .any(|r| matches!(r, Request::Delete { stamp, decremented: true, .. } if *stamp > s.updated_at))
            }),
        ]
    }
}

mod tests {
    use super::*;
    use crate::check::shortest;

    /// Ticks: the API's timeout `timeout`, the clocks' skew 1, requests
    /// starting until `horizon`.
    fn clocks(timeout: u8, horizon: u8, grace: u8) -> ClockModel {
        ClockModel {
            timeout,
            skew: 1,
            grace,
            horizon,
        }
    }

    /// Today's grace, longer than two timeouts plus the skew
    /// ([`REQUEST_GRACE_MS`]: 60 s for the API's 10 s timeout; in ticks,
    /// whose writes land up to and at the timeout, one tick longer): BE
    /// never above live, however slow writes move `updated_at` back and
    /// clocks disagree. A timeout of 1 tick here (the longer run below
    /// takes 2).
    ///
    /// [`REQUEST_GRACE_MS`]: hybrid_counter::audit::findings::REQUEST_GRACE_MS
    #[test]
    fn with_a_grace_longer_than_two_timeouts_and_the_skew_best_effort_never_counts_above_live() {
        let found = shortest(
            "clock model, timeout 1, grace 2 x timeout + skew + 1",
            clocks(1, 4, 2 + 1 + 1),
        );
        assert!(found.broken.is_empty(), "{:#?}", found.broken);
        for name in [AUDIT_RAISED, BACKWARDS] {
            assert!(found.discovered.contains(&name), "never {name}");
        }
        // Not vacuous: one tick less of grace breaks it in the same bounds.
        let short = shortest("clock model, timeout 1, grace 2 x timeout + skew", clocks(1, 4, 2 + 1));
        assert_eq!(short.broken.len(), 1, "the bounds are too small to tell");
    }

    /// The same with a timeout of 2 ticks, requests starting until 7
    /// (6,185,148 states, 106 s).
    #[test]
    #[ignore = "about 2 minutes"]
    fn with_a_grace_longer_than_two_timeouts_and_the_skew_best_effort_never_counts_above_live_longer() {
        let found = shortest(
            "clock model, timeout 2, grace 2 x timeout + skew + 1",
            clocks(2, 7, 2 * 2 + 1 + 1),
        );
        assert!(found.broken.is_empty(), "{:#?}", found.broken);
        for name in [AUDIT_RAISED, BACKWARDS] {
            assert!(found.discovered.contains(&name), "never {name}");
        }
    }

    /// Issue 34 D4 on the grace before the fix (one API timeout: 2 ticks).
    /// A shortest trace (6 steps): a create starts at 0 (its clock right)
    /// and puts its item at 1, its `+1` still to come; the audit's clock,
    /// one tick ahead, reads 2 at true time 1: the last write (0) is a
    /// grace old, BE 0 is raised to live 1; the `+1` lands: BE 2, live 1.
    /// A delete's variant (grace 4, two timeouts, no skew allowance): a
    /// create started at 0 puts at 2; a delete starting at 2 (its clock 1
    /// ahead, stamp 3) takes `-1`; the create's `+1`, slow, lands after it
    /// and moves `updated_at` back to 0; the audit (1 ahead) at true 3
    /// reads 4: BE 0 raised to live 1; the soft delete lands: BE 1, live 0.
    #[test]
    fn the_grace_of_one_timeout_before_the_fix_lets_a_raise_count_above_live() {
        let broken = shortest("clock model, grace 1 x timeout (before the fix)", clocks(2, 7, 2)).broken;
        let names: Vec<&str> = broken.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, vec![NOT_ABOVE_LIVE], "{broken:#?}");
        eprintln!("D4, a shortest trace:\n{}", broken[0].1);
    }

    /// The grace is tight: two timeouts plus the skew, exactly, let a
    /// raise land at the instant a delete's soft delete still may (a create
    /// started at 0 puts at 2; a delete starts at 2 and takes `-1`; the
    /// create's `+1` moves `updated_at` back to 0; the audit, one tick
    /// ahead at true 4, reads 5 and raises; the soft delete lands at 4).
    /// Two timeouts of grace with no skew allowance fail the same way.
    #[test]
    #[ignore = "about 20 s: the bound's edges, not a property of today's code"]
    fn a_grace_of_exactly_two_timeouts_and_the_skew_is_one_tick_short() {
        for grace in [2 * 2, 2 * 2 + 1] {
            let broken = shortest(&format!("clock model, grace {grace}"), clocks(2, 7, grace)).broken;
            let names: Vec<&str> = broken.iter().map(|(name, _)| *name).collect();
            assert_eq!(names, vec![NOT_ABOVE_LIVE], "{broken:#?}");
            eprintln!("grace {grace}, a shortest trace:\n{}", broken[0].1);
        }
    }
}
