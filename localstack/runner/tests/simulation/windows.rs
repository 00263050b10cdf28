//! Strict admission's configuration-change windows ([`Windows`]): how far a
//! scope may pass its limit while a limit, `BeShardCount` or `AdmissionMode`
//! change lands, per the documented bounds, and what each window measured.
//! With several counters keys each key is bounded by its share as well
//! ([`Bound`]), and a window's allowance holds for each.

use std::collections::{BTreeMap, BTreeSet};

use hybrid_counter::Admission;
use hybrid_counter::memory::Tables;
use hybrid_counter::scope_keys::ScopeKeys;

use crate::counts::{Bound, bounds};
use crate::params::ConfigChange;
use crate::stats::WindowStats;

/// Strict admission's documented windows (docs/admission-and-sharding.md,
/// "Configuration changes"). A limit change is written in rounds
/// (`shares::assign`): a create of its scope that read an older limit or
/// share may pass the new one, by at most the most creates of the scope in
/// flight at any instant of the write. A `BeShardCount` change rolls out: from the change
/// until the last create that started before the rollout's end is done,
/// old and new splits reserve side by side, and live may pass the limit by
/// at most the most creates in flight at any instant of that window. An
/// `AdmissionMode` switch to strict: no strict check until the operator's
/// `audit --repair` after the rollout has landed (measured, not bounded).
/// Once a window closes, or a limit is lowered, a scope (with several
/// counters keys: a key) left above its limit (its share) may only drain;
/// with several keys the others may still fill their shares, so the scope
/// may hold the sum of each key's larger of its share and what it holds
/// above it (strict admission's exception (4), docs/design.md).
#[derive(Debug, Default)]
pub(crate) struct Windows {
    pub(crate) default_limit: u64,
    /// The schedule's scope keys.
    pub(crate) layout: ScopeKeys,
    /// The checks in force: best-effort's, strict's, or none (a switch to
    /// strict admission under way).
    pub(crate) mode: Option<Admission>,
    pub(crate) next_create: u64,
    /// Creates in flight, with their scope.
    pub(crate) in_flight: BTreeMap<u64, String>,
    pub(crate) open: Vec<Window>,
    /// The last window's number ([`Windows::open`]).
    pub(crate) opened: u64,
    /// Scopes above their limit after a window closed or a lowering: the
    /// most live items each may still hold (with one key it only goes down
    /// outside the windows; with several, other keys filling their shares
    /// may raise it, within `key_caps`).
    pub(crate) drain_cap: BTreeMap<String, u64>,
    /// The same for each counters key, by scope and key index: what a key
    /// above its share may still hold, and adds to its scope's ceiling.
    pub(crate) key_caps: BTreeMap<(String, u32), u64>,
    /// Each counters key's share as its last check read it (the keys are
    /// checked before their scope).
    pub(crate) key_shares: BTreeMap<(String, u32), u64>,
    /// Measured, per kind of change ([`CHANGES`]).
    pub(crate) measured: [WindowStats; 3],
}

#[derive(Debug)]
pub(crate) struct Window {
    id: u64,
    kind: ConfigChange,
    /// `None`: every scope (a shard count or mode change).
    scope: Option<String>,
    /// What the scope (`None`) and each of its keys was bounded by when the
    /// window opened (the limit, and each key's share of it; `None`: a
    /// window over every scope): what its creates in flight may have read.
    old_parts: Option<BTreeMap<Option<u32>, u64>>,
    /// Each part's bound as the window's checks last saw it.
    seen: BTreeMap<Option<u32>, u64>,
    /// Higher bounds replaced inside the window (another `limit set`
    /// landing in it, or this one planned again), each with the creates of
    /// the scope in flight when it was replaced: only those may have read
    /// it, so it is allowed until they are done.
    replaced: Vec<(Option<u32>, u64, BTreeSet<u64>)>,
    /// The creates that may run the old configuration; the window closes
    /// with the last once the rollout is over.
    pending: BTreeSet<u64>,
    rolling: bool,
    most_in_flight: u64,
}

impl Window {
    /// Rolled out, and every create that may have run the old
    /// configuration done (a switch's closes with its repair instead).
    fn rolled_out(&self) -> bool {
        !self.rolling && self.pending.is_empty() && self.kind != ConfigChange::Switch
    }

    /// The most live items above the limit before the change that the
    /// window allows: a limit change's (written in rounds; its scope's
    /// creates) and a rollout's, the most creates in flight at any instant
    /// of it so far
    /// (those at the change alone do not bound it: issue 34 D3, seed
    /// 1592600407; review 1 of the shared rounds, finding 1); a switch's
    /// is not bounded (checked no further).
    fn allowance(&self) -> u64 {
        match self.kind {
            ConfigChange::Limit | ConfigChange::Reshard => self.most_in_flight,
            ConfigChange::Switch => u64::MAX / 2,
        }
    }
}

impl Windows {
    fn stats(&mut self, kind: ConfigChange) -> &mut WindowStats {
        &mut self.measured[kind as usize]
    }

    pub(crate) fn start_create(&mut self, scope: &str) -> u64 {
        self.next_create += 1;
        self.in_flight.insert(self.next_create, scope.to_owned());
        for w in &mut self.open {
            if w.scope.as_deref().is_some_and(|s| s != scope) {
                continue;
            }
            if w.rolling {
                w.pending.insert(self.next_create);
            } else if w.kind == ConfigChange::Limit {
                // Its write returned: this create reads its last shares.
                continue;
            }
            let in_flight = Self::in_flight_of(&self.in_flight, w.scope.as_deref());
            w.most_in_flight = w.most_in_flight.max(in_flight);
            let stats = &mut self.measured[w.kind as usize];
            stats.most_in_flight = stats.most_in_flight.max(in_flight);
        }
        self.next_create
    }

    /// The creates in flight on `scope` (every scope's: `None`).
    fn in_flight_of(in_flight: &BTreeMap<u64, String>, scope: Option<&str>) -> u64 {
        in_flight
            .values()
            .filter(|s| scope.is_none_or(|scope| scope == s.as_str()))
            .count() as u64
    }

    /// A create ended; windows it was the last of close, and a scope they
    /// leave above its limit may from now on only drain.
    pub(crate) fn finish_create(&mut self, id: u64, tables: impl FnOnce() -> Tables) {
        self.in_flight.remove(&id);
        let mut dropped = Vec::new();
        for w in &mut self.open {
            for (_, _, readers) in &mut w.replaced {
                readers.remove(&id);
            }
            if w.replaced.iter().any(|(_, _, readers)| readers.is_empty()) {
                w.replaced.retain(|(_, _, readers)| !readers.is_empty());
                dropped.extend(w.scope.clone());
            }
            w.pending.remove(&id);
        }
        if dropped.is_empty() {
            return self.close(Window::rolled_out, tables);
        }
        // The last create that may have read a replaced bound is done: a
        // scope (a key) it left above the bound in force may only drain.
        let tables = tables();
        for bound in bounds(&tables, self.layout, self.default_limit) {
            if dropped.contains(&bound.scope) {
                self.recap(&bound);
            }
        }
        self.close(Window::rolled_out, || tables);
    }

    fn close(&mut self, done: impl Fn(&Window) -> bool, tables: impl FnOnce() -> Tables) {
        if !self.open.iter().any(&done) {
            return;
        }
        let (closed, open): (Vec<Window>, Vec<Window>) = std::mem::take(&mut self.open).into_iter().partition(done);
        self.open = open;
        let tables = &tables();
        for w in closed {
            for bound in bounds(tables, self.layout, self.default_limit) {
                if w.scope.as_ref().is_none_or(|s| *s == bound.scope) {
                    self.recap(&bound);
                }
            }
        }
    }

    /// From now on `bound` may only drain from what it holds above its
    /// limit; a cap from before (a key that drained during a window) goes.
    fn recap(&mut self, bound: &Bound) {
        let above = (bound.live > bound.limit).then_some(bound.live);
        match (bound.index, above) {
            (Some(index), Some(live)) => {
                self.key_caps.insert((bound.scope.clone(), index), live);
            }
            (Some(index), None) => {
                self.key_caps.remove(&(bound.scope.clone(), index));
            }
            (None, Some(live)) => {
                self.drain_cap.insert(bound.name.clone(), live);
            }
            (None, None) => {
                self.drain_cap.remove(&bound.name);
            }
        }
    }

    /// What `bound` may hold while it drains (0 when it is not above its
    /// limit: the limit alone bounds it).
    fn cap_of(&self, bound: &Bound) -> u64 {
        let cap = match bound.index {
            Some(index) => self.key_caps.get(&(bound.scope.clone(), index)),
            None => self.drain_cap.get(&bound.name),
        };
        cap.copied().unwrap_or(0)
    }

    /// A scope's ceiling while its keys drain: each key holds at most the
    /// larger of its share of `limit` and what it held above it. A key left
    /// above its share (by a lowering, or a window's excess) keeps its items
    /// while the other keys fill their shares (docs/admission-and-sharding.md,
    /// "Admission reads one key"; simulation seed 1592593515). With the
    /// keys' caps current this bound is the sum of the keys' own, so outside
    /// the windows the scope's check adds nothing to theirs.
    /// Key `index` of `scope`'s share as its last check read it, else the
    /// even split of `limit`.
    fn key_share(&self, scope: &str, index: u32, limit: u64) -> u64 {
        self.key_shares
            .get(&(scope.to_owned(), index))
            .copied()
            .unwrap_or_else(|| self.layout.share(limit, index))
    }

    fn keys_ceiling(&self, scope: &str, limit: u64) -> u64 {
        let above: u64 = self
            .key_caps
            .range((scope.to_owned(), 0)..=(scope.to_owned(), u32::MAX))
            .map(|((_, index), cap)| cap.saturating_sub(self.key_share(scope, *index, limit)))
            .sum();
        limit + above
    }

    /// A change of `scope`'s limit (`Some`), of the shard count or of the
    /// admission mode (`None`) is about to land; its window's number.
    pub(crate) fn open(&mut self, kind: ConfigChange, scope: Option<&str>, tables: &Tables) -> u64 {
        let old_parts = scope.map(|s| {
            bounds(tables, self.layout, self.default_limit)
                .into_iter()
                .filter(|b| b.scope == s)
                .map(|b| (b.index, b.limit))
                .collect()
        });
        let at_change = Self::in_flight_of(&self.in_flight, scope);
        // Best-effort admission has no windows. A limit change is written
        // in rounds (`shares::assign`): the creates in flight at it and
        // those that start before its last transaction may read an older
        // share, so its window rolls until the write returns.
        self.opened += 1;
        match kind {
            ConfigChange::Switch => self.mode = None,
            _ if self.mode == Some(Admission::BestEffort) => return self.opened,
            _ => {}
        }
        let overlapping = self
            .open
            .iter()
            .any(|w| w.rolling && w.kind == kind && w.scope.as_deref() == scope);
        let stats = self.stats(kind);
        stats.opened += 1;
        stats.overlapping += u64::from(overlapping);
        stats.most_at_change = stats.most_at_change.max(at_change);
        stats.most_in_flight = stats.most_in_flight.max(at_change);
        self.open.push(Window {
            id: self.opened,
            kind,
            scope: scope.map(str::to_owned),
            seen: old_parts.clone().unwrap_or_default(),
            replaced: Vec::new(),
            old_parts,
            pending: self
                .in_flight
                .iter()
                .filter(|(_, s)| scope.is_none_or(|scope| scope == s.as_str()))
                .map(|(id, _)| *id)
                .collect(),
            rolling: true,
            most_in_flight: at_change,
        });
        self.opened
    }

    /// Window `id`'s change has returned (a limit write: every
    /// transaction of one attempt).
    pub(crate) fn finished(&mut self, id: u64, tables: impl FnOnce() -> Tables) {
        for w in self.open.iter_mut().filter(|w| w.id == id) {
            w.rolling = false;
        }
        self.close(Window::rolled_out, tables);
    }

    /// The rollout of `kind` is over: every request from now on runs the
    /// new configuration.
    pub(crate) fn rolled_out(&mut self, kind: ConfigChange, scope: Option<&str>, tables: impl FnOnce() -> Tables) {
        for w in self
            .open
            .iter_mut()
            .filter(|w| w.kind == kind && w.scope.as_deref() == scope)
        {
            w.rolling = false;
        }
        self.close(Window::rolled_out, tables);
    }

    /// The operator's `audit --repair` after a switch to strict landed:
    /// strict's checks from now on.
    pub(crate) fn switched(&mut self, tables: Tables) {
        self.mode = Some(Admission::Strict);
        self.close(|w| w.kind == ConfigChange::Switch, || tables);
    }

    /// `scope`'s limit changed: left above it (or a key above its new
    /// share), the scope (the key) may only drain (besides what the
    /// creates in flight may still add).
    pub(crate) fn limit_changed(&mut self, scope: &str, tables: &Tables) {
        for bound in bounds(tables, self.layout, self.default_limit) {
            if bound.scope == scope {
                self.recap(&bound);
            }
        }
    }

    /// Whether a window is open over `scope` (its own, or every scope's).
    pub(crate) fn covers(&self, scope: &str) -> bool {
        self.open.iter().any(|w| w.scope.as_deref().is_none_or(|s| s == scope))
    }

    /// `live <= limit` in strict admission for a scope and for each of its
    /// counters keys (its share), within the windows (measured during a
    /// switch, checked from when its repair landed).
    pub(crate) fn check(&mut self, bound: &Bound) -> Result<(), String> {
        let Bound { name, live, limit, .. } = bound;
        let (live, limit) = (*live, *limit);
        if let Some(index) = bound.index {
            self.key_shares.insert((bound.scope.clone(), index), limit);
        }
        let keys = match bound.index {
            None => self.keys_ceiling(&bound.scope, limit),
            Some(_) => limit,
        };
        let draining = keys.max(self.cap_of(bound));
        let mut ceiling = draining;
        let mut windowed = false;
        // A higher bound replaced inside a limit window (another `limit
        // set` landing in it, or this one planned again) stays allowed, plus
        // the window's creates in flight, until the creates in flight at its
        // replacement are done: only they may have read it. What it left
        // above the new bound may then only drain.
        let mut replaced_now = false;
        for w in self
            .open
            .iter_mut()
            .filter(|w| w.scope.as_deref() == Some(bound.scope.as_str()))
        {
            if w.old_parts.is_none() {
                continue;
            }
            if let Some(replaced) = w.seen.insert(bound.index, limit).filter(|&seen| seen > limit) {
                replaced_now = true;
                let readers: BTreeSet<u64> = self
                    .in_flight
                    .iter()
                    .filter(|(_, s)| **s == bound.scope)
                    .map(|(id, _)| *id)
                    .collect();
                if !readers.is_empty() {
                    w.replaced.push((bound.index, replaced, readers));
                }
            }
        }
        for w in self
            .open
            .iter()
            .filter(|w| w.scope.as_deref().is_none_or(|s| s == bound.scope))
        {
            windowed = true;
            let replaced = w
                .replaced
                .iter()
                .filter(|(index, ..)| *index == bound.index)
                .map(|(_, bound, _)| *bound)
                .max()
                .unwrap_or(0);
            let before = w
                .old_parts
                .as_ref()
                .and_then(|old| old.get(&bound.index).copied())
                .unwrap_or(limit)
                .max(replaced)
                .max(draining);
            ceiling = ceiling.max(before + w.allowance());
            // How far the window's creates took the scope past what it
            // allowed before the change.
            if bound.index.is_none() {
                let stats = &mut self.measured[w.kind as usize];
                stats.max_excess = stats.max_excess.max(live.saturating_sub(before));
            }
        }
        let what = if bound.index.is_some() {
            "its share"
        } else {
            "the limit"
        };
        if live > ceiling {
            return Err(format!(
                "{name}: strict: live {live} above {what} {limit} (allowed {ceiling} within the documented windows)"
            ));
        }
        if !windowed || replaced_now {
            self.recap(bound);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two counters keys, strict admission, a default limit of `limit`.
    fn windows(limit: u64) -> Windows {
        Windows {
            default_limit: limit,
            layout: ScopeKeys::new(2).unwrap(),
            mode: Some(Admission::Strict),
            ..Windows::default()
        }
    }

    fn key(index: u32, live: u64, share: u64) -> Bound {
        Bound {
            name: format!("s#{index} (counters key {index} of s)"),
            scope: "s".into(),
            index: Some(index),
            live,
            limit: share,
        }
    }

    fn scope(live: u64, limit: u64) -> Bound {
        Bound {
            name: "s".into(),
            scope: "s".into(),
            index: None,
            live,
            limit,
        }
    }

    #[test]
    fn a_key_above_its_share_after_a_lowering_only_drains_while_the_other_fills_its_share() {
        // Limit 1 over two keys: shares 1 and 0; key 1 kept its item.
        let mut w = windows(1);
        w.recap(&key(1, 1, 0));
        w.check(&key(1, 1, 0)).unwrap();
        w.check(&key(0, 1, 1)).unwrap();
        w.check(&scope(2, 1))
            .expect("exception (4): the scope holds 2 against 1");
        // Key 1 drains; its cap goes with it, so it may not fill again.
        w.check(&key(1, 0, 0)).unwrap();
        let err = w.check(&key(1, 1, 0)).unwrap_err();
        assert!(err.contains("above its share 0"), "{err}");
        // (The scope's own cap still allows the 2 it held: outside the
        // windows the keys' checks carry its bound, as the header says.)
    }

    /// Two `limit set`s of one scope under way at once: A raises 5 to 10
    /// while the scope holds 7, then B lowers to 6 inside A's window. The
    /// 10 stays allowed (plus the window's creates in flight) while the
    /// create in flight at the lowering, the only one that may have read
    /// it, may still land; once it is done the scope may hold what it held
    /// then (here 7: the empty tables given to `finish_create` stand for a
    /// scope back at 7) plus the window's creates, not 10 again (the old
    /// rule kept the 10 for the rest of the window).
    #[test]
    fn a_bound_replaced_inside_a_window_is_allowed_until_its_readers_are_done() {
        let mut w = windows(5);
        w.layout = ScopeKeys::new(1).unwrap();
        let create = w.start_create("s");
        let a = w.open(ConfigChange::Limit, Some("s"), &Tables::default());
        w.check(&scope(5, 5)).unwrap();
        w.check(&scope(7, 10)).unwrap();
        w.check(&scope(7, 6)).unwrap();
        let later = w.start_create("s");
        w.check(&scope(10, 6))
            .expect("the replaced 10 while the create that may have read it is in flight");
        w.check(&scope(7, 6)).unwrap();
        w.finish_create(create, Tables::default);
        let err = w.check(&scope(10, 6)).unwrap_err();
        assert!(err.contains("allowed 9"), "{err}");
        w.finished(a, Tables::default);
        w.finish_create(later, Tables::default);
        assert!(w.open.is_empty());
    }

    #[test]
    fn a_key_above_its_share_without_a_reason_fails_and_a_cap_never_rises_outside_windows() {
        let mut w = windows(3);
        let err = w.check(&key(0, 3, 2)).unwrap_err();
        assert!(err.contains("live 3 above its share 2"), "{err}");
        // Left at 3 by a lowering to shares of 1: it drains to 2, then may
        // not go back to 3.
        w.recap(&key(0, 3, 1));
        w.check(&key(0, 2, 1)).unwrap();
        assert!(w.check(&key(0, 3, 1)).is_err());
    }
}
