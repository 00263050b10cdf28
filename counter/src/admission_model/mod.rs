//! An exhaustive model of admission over best-effort shards, checked with
//! the `stateright` model checker (DESIGN §5, issue 26).
//!
//! Clients create and delete items of one scope concurrently, with the
//! request path's writes as separate steps: strict creates read the
//! counters (their read goes stale while others write), check the sum
//! against the limit with the real [`Usage::admits_one_more`], compute quotas
//! with the real [`Layout::quotas`], reserve with a conditional increment
//! on any shard the quota allows, then put (applied; lost with its slot
//! kept, the outcome unknown; or refused, the slot given back); strict
//! deletes soft-delete, then take `-1` from the item's own shard (or lose
//! it). Best-effort creates put, then add `+1` to any shard (a throttled
//! write moves on) or lose it; best-effort deletes take `-1`, then
//! soft-delete (or stop). The audit reads the counters and the live items
//! per shard, plans with the real [`plan_repair_at`] (the grace period has
//! passed when no request is between its writes and no read is older than
//! the scope's last write), computes the counts with the real
//! [`Layout::correction`], and writes them unless a counter moved in
//! between. One configuration change (shard count or limit) may happen at
//! any step.
//!
//! Checked at every state: strict admission never has more live items
//! than the limit, except the documented window of a configuration
//! change (creates in flight when it happened may pass the limit, by at
//! most their number), and every shard covers the live items recorded on
//! it; best-effort admission never has BE above the live items.
//!
//! A read is either one snapshot, or torn (`torn_reads`): the Query reads
//! the best-effort items one at a time, read-committed, and any write may
//! land between two of them. Runs without a configuration change use torn
//! reads; with a change they take too long for every `cargo test`, and the
//! ignored long test runs them. Not modelled: the eventual counter (it
//! only makes the early refusal stricter) and the stream.
//!
//! The rules before issue 26 (a lowering off the fullest shard, a read
//! below 0 lent to the other shards) are kept in [`legacy`], verbatim, so
//! a test shows the checker finds the overshoot they allow.
//!
//! Issue 34: best-effort items carry an epoch (0: none). A strict read
//! records counts, epochs and which items exist, and takes its fences from
//! the real [`Layout::fences`] (torn across a raise: it reads again, as an
//! idle client's next create); a reservation holds only under its fence.
//! In strict admission the audit raises through the real [`Layout::raise`]
//! (one step: adds, and every item it writes to the next epoch, unless an
//! item is past `from`). A run may start in best-effort admission and
//! switch to strict at any step (`switch`); then strict's limit is checked
//! once a raise planned in strict has landed with no best-effort request
//! left, and in every strict state with BE below live the audit must plan
//! a raise (D2). [`Rules::BEFORE_FENCE`] is the raise before e03c33a: held
//! back until the scope is quiet, and unfenced.
//!
//! On today's rules the checker finds strict admission past the limit
//! after a fenced raise (a raise planned while a reservation's put is in
//! flight; a Query torn across a raise that creates a shard): the ignored
//! tests in [`tests`] hold the traces and replay both on the real code.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use stateright::{HasDiscoveries, Model, Property};

use crate::audit::{LastWrites, ScopeCounts, findings_for, plan_repair_at};
use crate::best_effort::{Fence, Layout, Quota};
use crate::config::Admission;
use crate::items::CounterSnapshot;
use crate::keys;
use crate::request::Usage;

/// Best-effort items the model holds (`best_effort#0..3`).
const SLOTS: usize = 4;
/// Concurrent clients.
const CLIENTS: usize = 3;

/// Which quota and correction functions the clients and the audit use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rules {
    /// [`legacy::quotas`] instead of [`Layout::quotas`].
    legacy_quotas: bool,
    /// [`legacy::correction_shard`] instead of [`Layout::correction`].
    legacy_correction: bool,
    /// A sharded strict raise held back until the scope is quiet
    /// ([`legacy::hold_back_a_sharded_strict_raise`], before e03c33a).
    hold_back_raise: bool,
    /// A strict raise set under the versions read, moving no epoch (before
    /// e03c33a), instead of [`Layout::raise`]'s fenced transaction.
    unfenced_raise: bool,
}

impl Rules {
    /// The crate's own functions.
    const CURRENT: Rules = Rules {
        legacy_quotas: false,
        legacy_correction: false,
        hold_back_raise: false,
        unfenced_raise: false,
    };
    /// The functions before issue 26.
    const LEGACY: Rules = Rules {
        legacy_quotas: true,
        legacy_correction: true,
        hold_back_raise: false,
        unfenced_raise: false,
    };
    /// The raise before e03c33a: held back until quiet, and unfenced.
    const BEFORE_FENCE: Rules = Rules {
        legacy_quotas: false,
        legacy_correction: false,
        hold_back_raise: true,
        unfenced_raise: true,
    };

    fn quotas(self, layout: &Layout, items: &BTreeMap<String, i64>, limit: u64) -> Vec<Quota> {
        if self.legacy_quotas {
            legacy::quotas(layout, items, limit)
        } else {
            layout.quotas(items, limit)
        }
    }

    fn correction(
        self,
        layout: &Layout,
        items: &BTreeMap<String, i64>,
        live: &BTreeMap<String, u64>,
        delta: i64,
    ) -> BTreeMap<String, i64> {
        if !self.legacy_correction {
            return layout.correction(items, live, delta);
        }
        let mut counts = items.clone();
        *counts
            .entry(legacy::correction_shard(layout, items, delta))
            .or_default() += delta;
        counts
    }
}

/// The one configuration change a run may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    None,
    Shards(u32),
    Limit(u64),
}

#[derive(Debug, Clone)]
struct AdmissionModel {
    admission: Admission,
    rules: Rules,
    shards: u32,
    limit: u64,
    change: Change,
    /// Starts in best-effort admission (whatever `admission` says) and may
    /// switch to strict at any step (`SwitchToStrict`, atomic).
    switch: bool,
    /// Clients read the best-effort items one at a time, others writing in
    /// between; otherwise a read is one snapshot.
    torn_reads: bool,
    /// The quota and correction functions' answers, by their inputs: the
    /// same few hundred inputs recur in every run's hundreds of thousands
    /// of states.
    memo: Arc<Mutex<Memo>>,
}

/// BE, live, epoch per item, which items exist, whether the grace has
/// passed, whether the configuration changed, whether admission is strict.
type RepairInput = ([i8; SLOTS], [u8; SLOTS], [u8; SLOTS], u8, bool, bool, bool);

#[derive(Debug, Default)]
struct Memo {
    quotas: HashMap<([i8; SLOTS], bool), [u8; SLOTS]>,
    repairs: HashMap<RepairInput, Option<Plan>>,
    /// [`Layout::fences`] by epochs, items present, configuration changed.
    fences: HashMap<([u8; SLOTS], u8, bool), Option<[u8; SLOTS]>>,
}

/// A repair the audit planned and has not written yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Set every item's count, under the versions read: fails once a
    /// counter moves.
    Set([i8; SLOTS]),
    /// [`Layout::raise`]: add to each item, conditioned on no item of the
    /// raise past epoch `from`, and move them all to `from + 1`, in one
    /// transaction. `writes`: the items it writes (bit `k`).
    Raise { adds: [i8; SLOTS], from: u8, writes: u8 },
}

/// A [`Fence`] as a client holds it: 0 unfenced, `0x10 | e` at `e`,
/// `0x20 | e` absent after raise `e`.
fn encode(fence: Fence) -> u8 {
    match fence {
        Fence::Unfenced => 0,
        Fence::At(e) => 0x10 | u8::try_from(e).expect("epoch"),
        Fence::Absent(e) => 0x20 | u8::try_from(e).expect("epoch"),
    }
}

/// One client's request in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Client {
    Idle,
    /// Strict create: read the counters, holds the quota per item it
    /// computed. `fresh`: no write to the scope since. `stale`: read
    /// under the configuration before the change.
    Read {
        quotas: [u8; SLOTS],
        /// The fence of each item's reservation ([`encode`]).
        fences: [u8; SLOTS],
        fresh: bool,
        stale: bool,
    },
    /// Strict create, with torn reads: has read the first `n` best-effort
    /// items, one at a time (a Query is read-committed item by item), and
    /// `got` holds what it saw. Flags as for `Read`.
    Reading {
        got: [i8; SLOTS],
        /// The epochs seen (0: none), and which items were there (bit `k`).
        epochs: [u8; SLOTS],
        seen: u8,
        n: u8,
        fresh: bool,
        stale: bool,
    },
    /// Strict create: reserved on `shard`, the put not sent yet.
    Reserved {
        shard: u8,
    },
    /// Strict delete: soft-deleted an item recorded on `shard`, its `-1`
    /// not sent yet.
    SoftDeleted {
        shard: u8,
    },
    /// Best-effort create: put an item recorded on `shard`, its `+1` not
    /// sent yet.
    Put {
        shard: u8,
    },
    /// Best-effort delete: took `-1` for an item recorded on `shard`, the
    /// soft delete not sent yet.
    Decremented {
        shard: u8,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    /// `best_effort#k` counts.
    be: [i8; SLOTS],
    /// Live items recorded on `best_effort#k`.
    live: [u8; SLOTS],
    /// Kept sorted: clients are interchangeable (symmetry reduction).
    clients: [Client; CLIENTS],
    /// Each item's epoch (0: none; [`Fence`]).
    epoch: [u8; SLOTS],
    /// The items that exist (bit `k`): written at least once.
    present: u8,
    /// Strict admission in force (the switch moves it from best-effort).
    strict: bool,
    /// In strict admission after the switch, a raise has landed with no
    /// best-effort request in flight: from then on strict's limit holds.
    raised: bool,
    /// A planned repair, until written (a `Set` also until a counter moves:
    /// its version condition would fail).
    repair: Option<Plan>,
    /// The planned repair was planned in strict admission (an audit that
    /// read before the switch plans as best-effort admission does).
    repair_strict: bool,
    changed: bool,
    /// Live items above a lowered limit at the change: nothing is taken
    /// back, deletes drain them.
    excess: u8,
    /// Creates in flight when the configuration changed (the documented
    /// window), and how many of them reserved under the old configuration
    /// (a read before the change, or a reservation in flight at a limit
    /// change): live items may pass the limit by at most these.
    in_flight_at_change: u8,
    window: u8,
}

/// Hashes the state as four words, each field packed without overlap: the
/// checker fingerprints every state it meets (and tells states apart by
/// fingerprint only), and field by field that is most of a debug build's
/// run time.
impl std::hash::Hash for State {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let bytes = |b: [u8; SLOTS]| u64::from(u32::from_le_bytes(b));
        let signed = |b: [i8; SLOTS]| bytes(b.map(|c| c.to_le_bytes()[0]));
        // A tag, two flags, four quotas of 3 bits (at most 7) and four
        // fences of 6 bits, or four counts of 4 bits (-4 to 11), epochs,
        // items seen and how many were read.
        let client = |c: &Client| -> u64 {
            match *c {
                Client::Idle => 0,
                Client::Read {
                    quotas,
                    fences,
                    fresh,
                    stale,
                } => {
                    let quotas = quotas.iter().enumerate().fold(0, |acc, (k, q)| {
                        assert!(*q < 8, "a quota above 7");
                        acc | u64::from(*q) << (3 * k)
                    });
                    let fences = fences
                        .iter()
                        .enumerate()
                        .fold(0, |acc, (k, f)| acc | u64::from(*f) << (6 * k));
                    1 | u64::from(fresh) << 3 | u64::from(stale) << 4 | quotas << 5 | fences << 17
                }
                Client::Reserved { shard } => 2 | u64::from(shard) << 3,
                Client::SoftDeleted { shard } => 3 | u64::from(shard) << 3,
                Client::Put { shard } => 4 | u64::from(shard) << 3,
                Client::Decremented { shard } => 5 | u64::from(shard) << 3,
                Client::Reading {
                    got,
                    epochs,
                    seen,
                    n,
                    fresh,
                    stale,
                } => {
                    let got = got.iter().enumerate().fold(0, |acc, (k, c)| {
                        let c = u64::try_from(i64::from(*c) + 4).expect("a count below -4");
                        assert!(c < 16, "a count above 11");
                        acc | c << (4 * k)
                    });
                    6 | u64::from(fresh) << 3
                        | u64::from(stale) << 4
                        | u64::from(n) << 5
                        | got << 8
                        | bytes(epochs) << 24
                        | u64::from(seen) << 56
                }
            }
        };
        h.write_u64(signed(self.be) | bytes(self.live) << 32);
        for c in &self.clients {
            h.write_u64(client(c));
        }
        let repair = match self.repair {
            None => 0,
            Some(Plan::Set(r)) => signed(r) << 2 | 1,
            Some(Plan::Raise { adds, from, writes }) => {
                signed(adds) << 2 | 2 | u64::from(from) << 34 | u64::from(writes) << 42
            }
        };
        h.write_u64(repair);
        h.write_u64(
            u64::from(self.changed)
                | u64::from(self.excess) << 1
                | u64::from(self.in_flight_at_change) << 9
                | u64::from(self.window) << 17
                | u64::from(self.present) << 25
                | u64::from(self.strict) << 33
                | u64::from(self.raised) << 34
                | u64::from(self.repair_strict) << 47
                | self.epoch.iter().enumerate().fold(0, |acc, (k, e)| {
                    assert!(*e < 8, "an epoch above 7");
                    acc | u64::from(*e) << (35 + 3 * k)
                }),
        );
    }
}

impl State {
    fn live_total(&self) -> i64 {
        self.live.iter().map(|l| i64::from(*l)).sum()
    }

    fn be_total(&self) -> i64 {
        self.be.iter().map(|c| i64::from(*c)).sum()
    }

    /// The best-effort items as a Query returns them (those ever written).
    fn items(&self) -> BTreeMap<String, i64> {
        (0..SLOTS)
            .filter(|&k| self.present & 1 << k != 0)
            .map(|k| (name(k), i64::from(self.be[k])))
            .collect()
    }

    /// The read of the counters a snapshot gives.
    fn snapshot(&self) -> CounterSnapshot {
        snapshot(self.be, self.epoch, self.present)
    }

    /// `+delta` on item `k`: creates it (with no epoch) if absent.
    fn add(&mut self, k: usize, delta: i8) {
        self.be[k] += delta;
        self.present |= 1 << k;
        self.counter_written();
    }

    /// Best-effort requests between their two writes.
    fn best_effort_in_flight(&self) -> bool {
        self.clients
            .iter()
            .any(|c| matches!(c, Client::Put { .. } | Client::Decremented { .. }))
    }

    fn live_by_item(&self) -> BTreeMap<String, u64> {
        (0..SLOTS)
            .filter(|&k| self.live[k] != 0)
            .map(|k| (name(k), u64::from(self.live[k])))
            .collect()
    }

    /// No request is between its two writes and every read is younger than
    /// the scope's last write: what a passed grace period means.
    fn quiet(&self) -> bool {
        self.clients.iter().all(|c| {
            matches!(
                c,
                Client::Idle | Client::Read { fresh: true, .. } | Client::Reading { fresh: true, .. }
            )
        })
    }

    /// A write to the scope: older reads are no longer the latest.
    fn written(&mut self) {
        for c in &mut self.clients {
            if let Client::Read { fresh, .. } | Client::Reading { fresh, .. } = c {
                *fresh = false;
            }
        }
    }

    /// A write to a best-effort item: also a planned `Set`'s condition
    /// fails (a raise is conditioned on epochs only).
    fn counter_written(&mut self) {
        self.written();
        if matches!(self.repair, Some(Plan::Set(_))) {
            self.repair = None;
            self.repair_strict = false;
        }
    }
}

/// A read of the best-effort items: counts, epochs (0: none), which exist.
fn snapshot(be: [i8; SLOTS], epoch: [u8; SLOTS], present: u8) -> CounterSnapshot {
    let mut snap = CounterSnapshot::default();
    for k in (0..SLOTS).filter(|&k| present & 1 << k != 0) {
        snap.best_effort += i64::from(be[k]);
        snap.best_effort_items.insert(name(k), i64::from(be[k]));
        if epoch[k] != 0 {
            snap.best_effort_epochs.insert(name(k), u64::from(epoch[k]));
        }
    }
    snap
}

fn name(k: usize) -> String {
    keys::best_effort_name(Some(u32::try_from(k).expect("slot")))
}

fn slot(name: &str) -> usize {
    name.strip_prefix("best_effort#")
        .and_then(|k| k.parse().ok())
        .expect("a sharded best-effort item")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    /// Strict: read the counters (admitted) and compute quotas; with torn
    /// reads, start reading them.
    Read(usize),
    /// Strict, torn reads: read the next best-effort item; after the last
    /// one, compute quotas (or refuse: the sum read is at the limit).
    ReadItem(usize),
    /// Strict: `ADD 1 IF count < quota` on the shard, applied.
    Reserve(usize, usize),
    /// Strict: refused everywhere, or timed out: nothing written.
    GiveUp(usize),
    PutApplied(usize),
    /// The put's outcome is unknown (not applied here): the slot is kept.
    PutLost(usize),
    /// The put was refused: the slot is given back.
    PutRefused(usize),
    /// Strict: soft-delete a live item recorded on the shard.
    SoftDelete(usize, usize),
    /// Strict: the delete's `-1` on the item's shard, applied or lost.
    GiveBack(usize),
    GiveBackLost(usize),
    /// Best-effort: read (admitted), put an item recorded on the shard.
    BestEffortPut(usize, usize),
    /// Best-effort: the create's `+1` lands on the shard, or is lost.
    Increment(usize, usize),
    IncrementLost(usize),
    /// Best-effort: the delete's `-1` for an item on the first shard lands
    /// on the second.
    Decrement(usize, usize, usize),
    /// Best-effort: the soft delete after the `-1`, or the delete stops
    /// (the `-1` was ambiguous, or a concurrent delete won).
    SoftDeleteAfterDecrement(usize),
    DeleteStops(usize),
    AuditPlan,
    AuditWrite,
    ChangeConfig,
    /// Admission switches from best-effort to strict (one step).
    SwitchToStrict,
    /// The raise's epoch condition failed: the audit reads anew.
    AuditRaiseRefused,
}

impl AdmissionModel {
    /// Strict admission at some point of a run.
    fn strict(&self) -> bool {
        self.admission == Admission::Strict || self.switch
    }

    fn admission_of(state: &State) -> Admission {
        if state.strict {
            Admission::Strict
        } else {
            Admission::BestEffort
        }
    }

    /// The real [`Layout::fences`] of a read (encoded), `None` when torn
    /// across a raise.
    fn fences(&self, epoch: [u8; SLOTS], present: u8, changed: bool, be: [i8; SLOTS]) -> Option<[u8; SLOTS]> {
        let key = (epoch, present, changed);
        if let Some(fences) = self.memo.lock().unwrap().fences.get(&key) {
            return *fences;
        }
        let fences = self.layout_of(changed).fences(&snapshot(be, epoch, present)).map(|f| {
            let mut fences = [0u8; SLOTS];
            for (name, fence) in f {
                fences[slot(&name)] = encode(fence);
            }
            fences
        });
        self.memo.lock().unwrap().fences.insert(key, fences);
        fences
    }

    /// What a client holding `read` does after reading: its quotas and
    /// fences, or idle (refused on the sum, or torn across a raise: it
    /// reads again, which an idle client's next create does).
    fn after_read(
        &self,
        read: [i8; SLOTS],
        epoch: [u8; SLOTS],
        present: u8,
        changed: bool,
        fresh: bool,
        stale: bool,
    ) -> Client {
        let sum = (0..SLOTS)
            .filter(|&k| present & 1 << k != 0)
            .map(|k| i64::from(read[k]))
            .sum();
        if !self.admits_read(sum, self.limit_of(changed)) {
            return Client::Idle;
        }
        match self.fences(epoch, present, changed, read) {
            Some(fences) => Client::Read {
                quotas: self.quotas(read, changed),
                fences,
                fresh,
                stale,
            },
            None => Client::Idle,
        }
    }

    fn layout(&self, state: &State) -> Layout {
        self.layout_of(state.changed)
    }

    fn limit(&self, state: &State) -> u64 {
        self.limit_of(state.changed)
    }

    /// The layout before or after the change.
    fn layout_of(&self, changed: bool) -> Layout {
        match (self.change, changed) {
            (Change::Shards(n), true) => Layout::new(n),
            _ => Layout::new(self.shards),
        }
    }

    fn limit_of(&self, changed: bool) -> u64 {
        match (self.change, changed) {
            (Change::Limit(l), true) => l,
            _ => self.limit,
        }
    }

    /// The best-effort items a read goes through, in the Query's order:
    /// those of either layout.
    fn items_read(&self) -> u8 {
        let shards = match self.change {
            Change::Shards(n) => n.max(self.shards),
            _ => self.shards,
        };
        u8::try_from(shards).expect("slots")
    }

    fn active(&self, state: &State) -> Vec<usize> {
        self.layout(state)
            .active()
            .map(|s| s.expect("sharded") as usize)
            .collect()
    }

    /// Strict admission's quota per item from a read of the counts `read`
    /// under the configuration before or after the change.
    fn quotas(&self, read: [i8; SLOTS], changed: bool) -> [u8; SLOTS] {
        let key = (read, changed);
        if let Some(quotas) = self.memo.lock().unwrap().quotas.get(&key) {
            return *quotas;
        }
        let items: BTreeMap<String, i64> = (0..SLOTS)
            .filter(|&k| read[k] != 0)
            .map(|k| (name(k), i64::from(read[k])))
            .collect();
        let mut quotas = [0u8; SLOTS];
        for q in self
            .rules
            .quotas(&self.layout_of(changed), &items, self.limit_of(changed))
        {
            let k = q.shard.expect("sharded") as usize;
            quotas[k] = u8::try_from(q.quota).unwrap_or(u8::MAX);
        }
        self.memo.lock().unwrap().quotas.insert(key, quotas);
        quotas
    }

    /// The limit in force, and the items above a lowered one at the change.
    fn allowed(&self, state: &State) -> i64 {
        i64::try_from(self.limit(state)).expect("limit") + i64::from(state.excess)
    }

    /// The create's early refusal on the sum. EC is left out: it only
    /// refuses more (`max(BE, EC)`), so the model admits at least as much.
    fn admits(&self, state: &State) -> bool {
        self.admits_read(state.be_total(), self.limit(state))
    }

    fn admits_read(&self, be: i64, limit: u64) -> bool {
        let usage = Usage {
            best_effort: be,
            eventual: 0,
            effective: be.max(0),
            limit,
        };
        usage.admits_one_more()
    }

    /// The audit's repair, if it writes one now.
    fn plan_repair(&self, state: &State) -> Option<Plan> {
        let key = (
            state.be,
            state.live,
            state.epoch,
            state.present,
            state.quiet(),
            state.changed,
            state.strict,
        );
        if let Some(repair) = self.memo.lock().unwrap().repairs.get(&key) {
            return *repair;
        }
        let repair = self.compute_repair(state);
        self.memo.lock().unwrap().repairs.insert(key, repair);
        repair
    }

    /// What the audit engine's `audit_scope` writes: [`plan_repair_at`]'s
    /// target; in strict admission a raise (or, with shards at mixed
    /// epochs, a raise of 0 that only fences) through [`Layout::raise`],
    /// anything else a `Set` of [`Layout::correction`]'s counts.
    fn compute_repair(&self, state: &State) -> Option<Plan> {
        let live = state.live_total();
        let counts = ScopeCounts {
            live: u64::try_from(live).expect("live"),
            ..ScopeCounts::default()
        };
        let admission = Self::admission_of(state);
        let findings = findings_for(admission, &counts, state.be_total(), 0);
        // The last write at 0, a grace of 1: now is 1 once it has passed.
        let written = LastWrites {
            best_effort: 0,
            eventual: 0,
        };
        let now = i64::from(state.quiet());
        let layout = self.layout(state);
        let mut plan = plan_repair_at(&counts, &findings, written, now, 1);
        if self.rules.hold_back_raise && admission.is_strict() && layout.shards() > 1 {
            legacy::hold_back_a_sharded_strict_raise(&mut plan, &counts, &findings, written, now, 1);
        }
        let snapshot = state.snapshot();
        let strict = admission.is_strict() && !self.rules.unfenced_raise;
        if strict && plan.repair.best_effort.is_none() && layout.fences(&snapshot).is_none() {
            plan.repair.best_effort = Some(snapshot.best_effort);
        }
        let target = plan.repair.best_effort?;
        let items = state.items();
        let delta = target - snapshot.best_effort;
        if strict && delta >= 0 {
            let raise = layout.raise(&snapshot, &state.live_by_item(), delta);
            let mut adds = [0i8; SLOTS];
            let mut writes = 0u8;
            for (name, add) in raise.adds {
                adds[slot(&name)] = i8::try_from(add).expect("bounded");
                writes |= 1 << slot(&name);
            }
            let from = u8::try_from(raise.from).expect("epoch");
            return Some(Plan::Raise { adds, from, writes });
        }
        let mut be = state.be;
        for (name, count) in self.rules.correction(&layout, &items, &state.live_by_item(), delta) {
            be[slot(&name)] = i8::try_from(count).expect("bounded");
        }
        (be != state.be).then_some(Plan::Set(be))
    }
}

impl Model for AdmissionModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            be: [0; SLOTS],
            live: [0; SLOTS],
            clients: [Client::Idle; CLIENTS],
            epoch: [0; SLOTS],
            present: 0,
            strict: self.admission == Admission::Strict && !self.switch,
            raised: false,
            repair: None,
            repair_strict: false,
            changed: false,
            excess: 0,
            in_flight_at_change: 0,
            window: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let active = self.active(state);
        for (c, client) in state.clients.iter().enumerate() {
            // Interchangeable clients in the same state do the same: one is enough.
            if state.clients[..c].contains(client) {
                continue;
            }
            match *client {
                Client::Idle => {
                    if state.strict {
                        if self.torn_reads || self.admits(state) {
                            actions.push(Action::Read(c));
                        }
                        for k in (0..SLOTS).filter(|&k| state.live[k] > 0) {
                            actions.push(Action::SoftDelete(c, k));
                        }
                    } else {
                        if self.admits(state) {
                            actions.extend(active.iter().map(|&k| Action::BestEffortPut(c, k)));
                        }
                        for k in (0..SLOTS).filter(|&k| state.live[k] > 0) {
                            // The item's own shard first; a throttled `-1`
                            // moves on to the active ones.
                            actions.push(Action::Decrement(c, k, k));
                            for &to in active.iter().filter(|&&to| to != k) {
                                actions.push(Action::Decrement(c, k, to));
                            }
                        }
                    }
                }
                Client::Read { quotas, fences, .. } => {
                    for (k, quota) in quotas.iter().enumerate() {
                        // `count < quota` and the fence, as the store's
                        // `reserve_best_effort` conditions them.
                        let fenced = match fences[k] >> 4 {
                            0 => state.epoch[k] == 0,
                            1 => state.present & 1 << k != 0 && state.epoch[k] == fences[k] & 0xf,
                            _ => state.present & 1 << k == 0,
                        };
                        if *quota > 0 && i64::from(state.be[k]) < i64::from(*quota) && fenced {
                            actions.push(Action::Reserve(c, k));
                        }
                    }
                    actions.push(Action::GiveUp(c));
                }
                Client::Reading { .. } => actions.push(Action::ReadItem(c)),
                Client::Reserved { .. } => {
                    actions.extend([Action::PutApplied(c), Action::PutLost(c), Action::PutRefused(c)]);
                }
                Client::SoftDeleted { .. } => actions.extend([Action::GiveBack(c), Action::GiveBackLost(c)]),
                Client::Put { .. } => {
                    actions.extend(active.iter().map(|&k| Action::Increment(c, k)));
                    actions.push(Action::IncrementLost(c));
                }
                Client::Decremented { shard } => {
                    if state.live[usize::from(shard)] > 0 {
                        actions.push(Action::SoftDeleteAfterDecrement(c));
                    }
                    actions.push(Action::DeleteStops(c));
                }
            }
        }
        match state.repair {
            Some(Plan::Raise { from, writes, .. }) => {
                // The transaction's condition: no item it writes past `from`.
                if (0..SLOTS).all(|k| writes & 1 << k == 0 || state.epoch[k] <= from) {
                    actions.push(Action::AuditWrite);
                } else {
                    actions.push(Action::AuditRaiseRefused);
                }
            }
            Some(Plan::Set(_)) => actions.push(Action::AuditWrite),
            None => {
                if self.plan_repair(state).is_some() {
                    actions.push(Action::AuditPlan);
                }
            }
        }
        if self.change != Change::None && !state.changed {
            actions.push(Action::ChangeConfig);
        }
        if self.switch && !state.strict {
            actions.push(Action::SwitchToStrict);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Read(c) if self.torn_reads => {
                s.clients[c] = Client::Reading {
                    got: [0; SLOTS],
                    epochs: [0; SLOTS],
                    seen: 0,
                    n: 0,
                    fresh: true,
                    stale: false,
                };
            }
            Action::Read(c) => {
                s.clients[c] = self.after_read(s.be, s.epoch, s.present, s.changed, true, false);
            }
            Action::ReadItem(c) => {
                let Client::Reading {
                    mut got,
                    mut epochs,
                    mut seen,
                    n,
                    fresh,
                    stale,
                } = s.clients[c]
                else {
                    unreachable!()
                };
                let k = usize::from(n);
                got[k] = s.be[k];
                epochs[k] = s.epoch[k];
                seen |= s.present & 1 << k;
                // The configuration the request started under.
                let changed = s.changed && !stale;
                s.clients[c] = if n + 1 < self.items_read() {
                    Client::Reading {
                        got,
                        epochs,
                        seen,
                        n: n + 1,
                        fresh,
                        stale,
                    }
                } else {
                    self.after_read(got, epochs, seen, changed, fresh, stale)
                };
            }
            Action::Reserve(c, k) => {
                let Client::Read { stale, fences, .. } = s.clients[c] else {
                    unreachable!()
                };
                if fences[k] >> 4 == 2 {
                    s.epoch[k] = fences[k] & 0xf;
                }
                s.add(k, 1);
                s.window += u8::from(stale);
                s.clients[c] = Client::Reserved {
                    shard: u8::try_from(k).expect("slot"),
                };
            }
            Action::GiveUp(c) => s.clients[c] = Client::Idle,
            Action::PutApplied(c) => {
                let Client::Reserved { shard } = s.clients[c] else {
                    unreachable!()
                };
                s.live[usize::from(shard)] += 1;
                s.written();
                s.clients[c] = Client::Idle;
            }
            Action::PutLost(c) => s.clients[c] = Client::Idle,
            Action::PutRefused(c) => {
                let Client::Reserved { shard, .. } = s.clients[c] else {
                    unreachable!()
                };
                s.add(usize::from(shard), -1);
                s.clients[c] = Client::Idle;
            }
            Action::SoftDelete(c, k) => {
                s.live[k] -= 1;
                s.excess = s.excess.saturating_sub(1);
                s.written();
                s.clients[c] = Client::SoftDeleted {
                    shard: u8::try_from(k).expect("slot"),
                };
            }
            Action::GiveBack(c) => {
                let Client::SoftDeleted { shard } = s.clients[c] else {
                    unreachable!()
                };
                s.add(usize::from(shard), -1);
                s.clients[c] = Client::Idle;
            }
            Action::GiveBackLost(c) => s.clients[c] = Client::Idle,
            Action::BestEffortPut(c, k) => {
                s.live[k] += 1;
                s.written();
                s.clients[c] = Client::Put {
                    shard: u8::try_from(k).expect("slot"),
                };
            }
            Action::Increment(c, k) => {
                s.add(k, 1);
                s.clients[c] = Client::Idle;
            }
            Action::IncrementLost(c) => s.clients[c] = Client::Idle,
            Action::Decrement(c, k, to) => {
                s.add(to, -1);
                s.clients[c] = Client::Decremented {
                    shard: u8::try_from(k).expect("slot"),
                };
            }
            Action::SoftDeleteAfterDecrement(c) => {
                let Client::Decremented { shard } = s.clients[c] else {
                    unreachable!()
                };
                s.live[usize::from(shard)] -= 1;
                s.written();
                s.clients[c] = Client::Idle;
            }
            Action::DeleteStops(c) => s.clients[c] = Client::Idle,
            Action::AuditPlan => {
                s.repair = self.plan_repair(&s);
                s.repair_strict = s.strict;
            }
            Action::AuditWrite => {
                let repair = s.repair.take().expect("planned");
                match repair {
                    Plan::Set(be) => {
                        for k in (0..SLOTS).filter(|&k| be[k] != s.be[k]) {
                            s.present |= 1 << k;
                        }
                        s.be = be;
                    }
                    Plan::Raise { adds, from, writes } => {
                        for k in (0..SLOTS).filter(|&k| writes & 1 << k != 0) {
                            s.be[k] += adds[k];
                            s.epoch[k] = from + 1;
                            s.present |= 1 << k;
                        }
                    }
                }
                s.written();
                self.landed(&mut s);
                s.repair_strict = false;
            }
            Action::AuditRaiseRefused => {
                s.repair = None;
                s.repair_strict = false;
            }
            Action::SwitchToStrict => {
                s.strict = true;
                // Best-effort admission may have passed the limit (BE
                // undercounts): deletes drain what is above it.
                let limit = i64::try_from(self.limit(&s)).expect("limit");
                s.excess = u8::try_from((s.live_total() - limit).max(0)).expect("bounded");
            }
            Action::ChangeConfig => {
                s.changed = true;
                let limit = i64::try_from(self.limit(&s)).expect("limit");
                s.excess = u8::try_from((s.live_total() - limit).max(0)).expect("bounded");
                let limit_changed = matches!(self.change, Change::Limit(_));
                for client in &mut s.clients {
                    match client {
                        Client::Read { stale, .. } | Client::Reading { stale, .. } => {
                            *stale = true;
                            s.in_flight_at_change += 1;
                        }
                        // Reserved under the old limit; under the old shard
                        // count it is in BE already, which new reads see.
                        Client::Reserved { .. } => {
                            s.in_flight_at_change += 1;
                            s.window += u8::from(limit_changed);
                        }
                        _ => {}
                    }
                }
            }
        }
        s.clients.sort();
        Some(s)
    }

    /// Strict admission stays within these unless it overshoots; room is
    /// left to see an overshoot. Best-effort admission may pass its limit
    /// (BE undercounts): it is cut at the limit, and BE at -1 per shard, as
    /// its property (BE <= live) only compares sums.
    fn within_boundary(&self, state: &State) -> bool {
        let limit = i64::try_from(self.limit.max(self.limit(state))).expect("limit");
        let (live, low, high) = if self.switch {
            (limit + 2, -1, limit + 3)
        } else if self.strict() {
            (limit + 2, -3, limit + 3)
        } else {
            (limit, -1, limit)
        };
        state.live_total() <= live
            && state.be.iter().all(|c| (low..=high).contains(&i64::from(*c)))
            && state.epoch.iter().all(|e| *e <= 3)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        type P = Property<AdmissionModel>;
        fn lowered(s: &State) -> bool {
            matches!(s.repair, Some(Plan::Set(r)) if (0..SLOTS).any(|k| r[k] < s.be[k]))
        }
        fn raised(s: &State) -> bool {
            match s.repair {
                Some(Plan::Set(r)) => r.iter().map(|c| i64::from(*c)).sum::<i64>() > s.be_total(),
                Some(Plan::Raise { adds, .. }) => adds.iter().any(|a| *a > 0),
                None => false,
            }
        }
        fn holds(s: &State) -> bool {
            s.strict && s.raised
        }
        if self.switch {
            // Strict's limit holds once a raise has landed after the switch
            // with no best-effort request left; before, strict admits over
            // BE below live.
            vec![
                P::always(OVERSHOOT, |m, s| {
                    !holds(s) || s.live_total() <= m.allowed(s) + i64::from(s.window)
                }),
                // Best-effort's `+1`s and `-1`s moved on to other shards:
                // the raise fills only what the sum lacks.
                P::sometimes(UNCOVERED, |_, s| {
                    holds(s) && (0..SLOTS).any(|k| i64::from(s.be[k]) < i64::from(s.live[k]))
                }),
                P::always(RAISE_PLANNED, |m, s| {
                    !s.strict || s.be_total() >= s.live_total() || s.repair.is_some() || m.plan_repair(s).is_some()
                }),
                P::sometimes(UNDERCOUNT, |_, s| s.strict && s.be_total() < s.live_total()),
                P::sometimes(RAISED, |_, s| raised(s)),
                P::sometimes(STRICT_HOLDS, |m, s| {
                    holds(s) && s.live_total() == i64::try_from(m.limit(s)).expect("limit")
                }),
            ]
        } else if self.strict() {
            vec![
                P::always(OVERSHOOT, |m, s| s.live_total() <= m.allowed(s) + i64::from(s.window)),
                P::always(COVERED, |_, s| {
                    (0..SLOTS).all(|k| i64::from(s.be[k]) >= i64::from(s.live[k]))
                }),
                P::always(WINDOW_BOUNDED, |_, s| s.window <= s.in_flight_at_change),
                P::sometimes(FULL, |m, s| s.live_total() == i64::try_from(m.limit(s)).expect("limit")),
                P::sometimes(LOWERED, |_, s| lowered(s)),
                P::sometimes(WINDOW_USED, |m, s| s.live_total() > m.allowed(s)),
            ]
        } else {
            vec![
                P::always(BE_AT_MOST_LIVE, |_, s| s.be_total() <= s.live_total()),
                P::sometimes(FULL, |m, s| s.live_total() == i64::try_from(m.limit(s)).expect("limit")),
                P::sometimes(UNDERCOUNT, |_, s| s.be_total() < s.live_total()),
                P::sometimes(RAISED, |_, s| raised(s)),
            ]
        }
    }
}

impl AdmissionModel {
    /// After a repair lands: in strict admission after the switch, with no
    /// best-effort request left, strict's limit holds from now on. Live
    /// items above it, admitted over the low BE before (reservations whose
    /// put is still to land among them), drain by deletes.
    fn landed(&self, s: &mut State) {
        if self.switch && s.repair_strict && !s.best_effort_in_flight() && s.be_total() >= s.live_total() {
            s.raised = true;
            let limit = i64::try_from(self.limit(s)).expect("limit");
            let reserved = s
                .clients
                .iter()
                .filter(|c| matches!(c, Client::Reserved { .. }))
                .count();
            let admitted = s.live_total() + i64::try_from(reserved).expect("clients");
            let over = u8::try_from((admitted - limit).max(0)).expect("bounded");
            s.excess = s.excess.max(over);
        }
    }
}

const OVERSHOOT: &str = "live <= limit, outside the window";
const COVERED: &str = "every shard covers the live items recorded on it";
const WINDOW_BOUNDED: &str = "the window is bounded by the creates in flight at the change";
const BE_AT_MOST_LIVE: &str = "BE <= live";
const FULL: &str = "the scope is full";
const LOWERED: &str = "a repair lowers an over-reserved shard";
const WINDOW_USED: &str = "a create of the window passes the limit";
const UNDERCOUNT: &str = "BE is below live";
const RAISED: &str = "a repair raises BE";
const UNCOVERED: &str = "raised after the switch, a shard is under its live items";
const RAISE_PLANNED: &str = "strict with BE below live: the audit plans a raise";
const STRICT_HOLDS: &str = "raised after the switch, the scope is full";

mod check;
#[cfg(test)]
use check::{Run, check, check_until};

mod legacy;

#[cfg(test)]
mod tests;
