//! The per-id search of the history check: the calls on one id are
//! linearizable as a register (Wing & Gong's search, memoised on the set of
//! calls placed and the register's state; the ids are independent, so each
//! is searched alone).
//!
//! The register is `absent`, `live` (with the incarnation of the create
//! that wrote it, when its answer named one) or `gone` (soft-deleted, maybe
//! hard-deleted since by the stream: a create may succeed again, or be
//! refused while the item waits for its hard delete). A create succeeds
//! from absent or gone, a delete from live; a create refused with
//! `AlreadyExists` needs live or gone, a delete refused with `NotFound`
//! absent or gone; the other refusals are decided before any write and
//! take no part. An acknowledged or refused call takes effect once between
//! its invocation and its answer; a call whose outcome is unknown takes
//! effect once, at any instant after its invocation (even after its
//! answer: [`Op::deadline`]), or never. The last state must be the id's
//! final one.

use std::collections::HashSet;

use super::op::{Call, Op, Outcome, Refusal, Tick};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum State<'a> {
    Absent,
    Live(Option<&'a str>),
    Gone,
}

/// Whether a call takes part in the id's register (the refusals decided
/// before any write do not).
pub(super) fn takes_part(op: &Op) -> bool {
    !matches!(
        (op.call, op.outcome()),
        (
            _,
            Some(Outcome::Refused(Refusal::LimitExceeded | Refusal::InvalidInput))
        ) | (Call::Create, Some(Outcome::Refused(Refusal::NotFound)))
            | (Call::Delete, Some(Outcome::Refused(Refusal::AlreadyExists)))
    )
}

/// The state after `op` takes effect in `state`; `None`: it cannot.
fn step<'a>(op: &'a Op, state: State<'a>) -> Option<State<'a>> {
    let live = matches!(state, State::Live(_));
    match (op.call, op.outcome()) {
        (Call::Create, Some(Outcome::Refused(_))) => (state != State::Absent).then_some(state),
        (Call::Delete, Some(Outcome::Refused(_))) => (!live).then_some(state),
        (Call::Create, _) => (!live).then_some(State::Live(op.incarnation())),
        (Call::Delete, _) => live.then_some(State::Gone),
    }
}

/// Whether `state` is the final state of an id whose live incarnation at
/// the end is `final_live` (none: not live): that incarnation, or one whose
/// create did not name it when no call on the id names it; or not live.
fn ends_as(state: State<'_>, ops: &[&Op], final_live: Option<&str>) -> bool {
    match (final_live, state) {
        (Some(final_incarnation), State::Live(Some(incarnation))) => final_incarnation == incarnation,
        (Some(final_incarnation), State::Live(None)) => {
            ops.iter().all(|op| op.incarnation() != Some(final_incarnation))
        }
        (Some(_), _) | (None, State::Live(_)) => false,
        (None, _) => true,
    }
}

/// Whether the calls `ops` on one id (those that [`takes_part`]) are
/// linearizable and end as `end` says: `Some` of the id's live incarnation
/// at the end (or of none: not live); `None`: in any state.
pub(super) fn linearizable(ops: &[&Op], end: Option<Option<&str>>) -> bool {
    let mut search = Search {
        ops,
        end,
        seen: HashSet::new(),
    };
    search.from(&mut vec![false; ops.len()], State::Absent)
}

struct Search<'s, 'a> {
    ops: &'s [&'a Op],
    end: Option<Option<&'s str>>,
    /// (calls placed, state) already searched in vain.
    seen: HashSet<(Vec<bool>, State<'a>)>,
}

impl<'a> Search<'_, 'a> {
    fn from(&mut self, placed: &mut Vec<bool>, state: State<'a>) -> bool {
        let ops = self.ops;
        let pending = || ops.iter().zip(placed.iter()).filter(|(_, placed)| !**placed);
        // Every call that must take effect has; the rest may never.
        if pending().all(|(op, _)| op.optional()) && self.end.is_none_or(|final_live| ends_as(state, ops, final_live)) {
            return true;
        }
        if !self.seen.insert((placed.clone(), state)) {
            return false;
        }
        // The next call takes effect before the first answer of a pending
        // call that must take effect, and after every invocation placed.
        let first_due = pending()
            .filter(|(op, _)| !op.optional())
            .map(|(op, _)| op.deadline())
            .min()
            .unwrap_or(Tick::MAX);
        let last_placed = ops
            .iter()
            .zip(placed.iter())
            .filter(|(_, placed)| **placed)
            .map(|(op, _)| op.invoked)
            .max()
            .unwrap_or(0);
        for i in 0..ops.len() {
            let op = ops[i];
            if placed[i] || op.invoked > first_due || op.deadline() < last_placed {
                continue;
            }
            let Some(next) = step(op, state) else { continue };
            placed[i] = true;
            let found = self.from(placed, next);
            placed[i] = false;
            if found {
                return true;
            }
        }
        false
    }
}
