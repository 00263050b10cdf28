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
//! ignored long test runs them. Not modelled here: the eventual counter
//! (it only makes the early refusal stricter); the stream has its own
//! smaller model ([`stream`], below).
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
//! left, up to the documented exception's bound (the strict requests
//! between their two writes from the audit's read to the raise's
//! landing, `in_flight_at_raise`, until the next repair lands), and in
//! every strict state with BE below live the audit must plan a raise
//! (D2). The audit decides with the engine's own [`decide`]. [`Rules::BEFORE_FENCE`] is the raise before e03c33a: held
//! back until the scope is quiet, and unfenced.
//!
//! The unsharded default (`BeShardCount = 1`) is the same model over the
//! single `best_effort` item ([`Names`]: slot 0, and the shards of a
//! later `1 -> N` reshard in slots 1..), through the same production
//! decisions: one quota, the raise at once, and after the reshard the
//! retired `best_effort` item held by the quotas while it drains.
//!
//! With `rollout`, a change (shard count, limit, or the switch to strict)
//! is not atomic: from the change until the window closes (an action),
//! each request runs the old or the new configuration (`ReadOld`; a
//! best-effort write goes to the shards of either layout; during the
//! switch a request runs either admission), and strict admission may pass
//! the limit by the documented bound only: the most creates in flight at
//! any instant of the window (`in_flight_at_change`). The audit (the
//! operator's command) runs the new configuration.
//!
//! Two smaller models beside it: [`stream`] (one id's creates whose put is
//! applied and answered with a failure, re-sent by the SDK or read back;
//! deletes; the stream's EC and hard deletes: issue 34 D1) and [`clock`]
//! (per-request clocks with skew, slow writes moving `updated_at` back,
//! the audit's grace decided on timestamps by the real
//! [`plan_repair_at`]: issue 34 D4).
//!
//! On today's rules the checker finds strict admission past the limit
//! after a fenced raise beyond the bounded exception (a strict `-1` in
//! flight across the raise leaves a shard below 0, and it passes the
//! limit by 2; a Query torn across a raise that creates a shard): the ignored tests in
//! [`tests`] hold the traces. (A raise planned while a reservation's put
//! is in flight is within the bound.)

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use stateright::{HasDiscoveries, Model, Property};

use hybrid_counter::audit::{LastWrites, ScopeCounts, ScopeTally, decide, findings_for, plan_repair_at};
use hybrid_counter::best_effort::{Fence, Layout, Quota, Reservation};
use hybrid_counter::config::Admission;
use hybrid_counter::items::CounterSnapshot;
use hybrid_counter::keys;
use hybrid_counter::request::Usage;
use hybrid_counter::store::Resend;

/// Best-effort items the model holds (`best_effort#0..3`).
const SLOTS: usize = 4;
/// Concurrent clients.
const CLIENTS: usize = 3;

/// Which version of strict admission's quotas the clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuotaRule {
    /// [`Layout::quotas`].
    Current,
    /// Before issue 26 ([`legacy::quotas`], not clamped): a shard below 0
    /// lends what it is below to the others.
    BeforeIssue26,
    /// After issue 26, before issue 34's review ([`legacy::quotas`],
    /// clamped): a shard read below 0 with nothing left of its quota is
    /// frozen and its share lent to the others.
    LendingShares,
}

/// Which quota and correction functions the clients and the audit use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rules {
    quotas: QuotaRule,
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
        quotas: QuotaRule::Current,
        legacy_correction: false,
        hold_back_raise: false,
        unfenced_raise: false,
    };
    /// Today's functions but the quotas that lend a share below 0.
    const LENDING_SHARES: Rules = Rules {
        quotas: QuotaRule::LendingShares,
        ..Rules::CURRENT
    };
    /// The functions before issue 26.
    const LEGACY: Rules = Rules {
        quotas: QuotaRule::BeforeIssue26,
        legacy_correction: true,
        hold_back_raise: false,
        unfenced_raise: false,
    };
    /// The raise before e03c33a (held back until quiet, and unfenced),
    /// with the quotas of the time.
    const BEFORE_FENCE: Rules = Rules {
        quotas: QuotaRule::LendingShares,
        legacy_correction: false,
        hold_back_raise: true,
        unfenced_raise: true,
    };

    fn quotas(self, layout: &Layout, items: &BTreeMap<String, i64>, limit: u64) -> Vec<Quota> {
        match self.quotas {
            QuotaRule::Current => layout.quotas(items, limit),
            QuotaRule::BeforeIssue26 => legacy::quotas(layout, items, limit, false),
            QuotaRule::LendingShares => legacy::quotas(layout, items, limit, true),
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
    /// A change (of the configuration, or the switch) reaches invocations
    /// one by one: from the change until the window closes (`CloseWindow`),
    /// each request runs the old or the new one. Otherwise it is atomic.
    rollout: bool,
    /// The bound before issue 34 D3: the creates in flight at the change
    /// only, not at every instant of the rollout window.
    bound_at_change: bool,
    /// Clients read the best-effort items one at a time, others writing in
    /// between; otherwise a read is one snapshot.
    torn_reads: bool,
    /// How the best-effort writes are sent ([`hybrid_counter::store::sends::BEST_EFFORT`]):
    /// with `BySdk`, an applied `+1` or `-1` answered with a failure is
    /// sent again.
    best_effort_sends: Resend,
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
    /// `shards_only`: it only creates the shards, short of its target
    /// ([`hybrid_counter::best_effort::Raise::fences_only`]): the engine reports it
    /// not repaired and raises on its next try.
    Raise {
        adds: [i8; SLOTS],
        from: u8,
        writes: u8,
        shards_only: bool,
    },
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

/// The fence [`encode`] packed.
fn decode(fence: u8) -> Fence {
    match fence >> 4 {
        0 => Fence::Unfenced,
        1 => Fence::At(u64::from(fence & 0xf)),
        _ => Fence::Absent(u64::from(fence & 0xf)),
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
    /// After the switch: the strict requests between their two writes at
    /// the read of the last repair that landed (the documented exception:
    /// the raise takes a reservation whose put is in flight for a live
    /// item, and an item soft-deleted whose `-1` is in flight for a gone
    /// one, so BE falls short by one as each lands). Strict admission may
    /// pass the limit, and the shards their live items, by these, until
    /// the next repair that lands sets it anew.
    in_flight_at_raise: u8,
    /// The same for the planned repair, at its read; 0 with none.
    in_flight_at_plan: u8,
    /// The rollout window of the change (or switch) has closed: every
    /// invocation runs the new configuration. Set at once without
    /// `rollout`.
    closed: bool,
}

impl State {
    fn live_total(&self) -> i64 {
        self.live.iter().map(|l| i64::from(*l)).sum()
    }

    fn be_total(&self) -> i64 {
        self.be.iter().map(|c| i64::from(*c)).sum()
    }

    /// The best-effort items as a Query returns them (those ever written).
    fn items(&self, names: Names) -> BTreeMap<String, i64> {
        (0..SLOTS)
            .filter(|&k| self.present & 1 << k != 0)
            .map(|k| (names.name(k), i64::from(self.be[k])))
            .collect()
    }

    /// The read of the counters a snapshot gives.
    fn snapshot(&self, names: Names) -> CounterSnapshot {
        snapshot(names, self.be, self.epoch, self.present)
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

    fn live_by_item(&self, names: Names) -> BTreeMap<String, u64> {
        (0..SLOTS)
            .filter(|&k| self.live[k] != 0)
            .map(|k| (names.name(k), u64::from(self.live[k])))
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
            self.in_flight_at_plan = 0;
        }
    }
}

/// A read of the best-effort items: counts, epochs (0: none), which exist.
fn snapshot(names: Names, be: [i8; SLOTS], epoch: [u8; SLOTS], present: u8) -> CounterSnapshot {
    let mut snap = CounterSnapshot::default();
    for k in (0..SLOTS).filter(|&k| present & 1 << k != 0) {
        snap.best_effort += i64::from(be[k]);
        snap.best_effort_items.insert(names.name(k), i64::from(be[k]));
        if epoch[k] != 0 {
            snap.best_effort_epochs.insert(names.name(k), u64::from(epoch[k]));
        }
    }
    snap
}

/// Which best-effort item each slot holds: `best_effort#k` in slot `k`,
/// or, in a model that starts (or ends) unsharded (`plain`), the single
/// `best_effort` item in slot 0 and `best_effort#k` in slot `k + 1`, in
/// the Query's order either way (`best_effort` sorts first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Names {
    plain: bool,
}

impl Names {
    /// The item's name in slot `k`.
    fn name(self, k: usize) -> String {
        let k = u32::try_from(k).expect("slot");
        match (self.plain, k) {
            (true, 0) => keys::best_effort_name(None),
            (true, k) => keys::best_effort_name(Some(k - 1)),
            (false, k) => keys::best_effort_name(Some(k)),
        }
    }

    /// The slot of the item an active shard (as items record it) counts on.
    fn slot_of(self, shard: Option<u32>) -> usize {
        let slot = match (self.plain, shard) {
            (true, None) => 0,
            (true, Some(k)) => k + 1,
            (false, Some(k)) => k,
            (false, None) => panic!("the unsharded item in a sharded model"),
        };
        let slot = usize::try_from(slot).expect("slot");
        assert!(slot < SLOTS, "more items than slots");
        slot
    }

    /// The slot of the best-effort item `name`.
    fn slot(self, name: &str) -> usize {
        let shard = match name.strip_prefix("best_effort") {
            Some("") => None,
            Some(k) => Some(k.strip_prefix('#').and_then(|k| k.parse().ok()).expect("a shard")),
            None => panic!("not a best-effort item: {name}"),
        };
        self.slot_of(shard)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    /// Strict: read the counters (admitted) and compute quotas; with torn
    /// reads, start reading them.
    Read(usize),
    /// The same on an invocation still running the configuration before
    /// the change (in its rollout window).
    ReadOld(usize),
    /// Every invocation runs the new configuration.
    CloseWindow,
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
    /// The `-1` applied, answered with a failure and re-sent by the SDK
    /// (only with [`hybrid_counter::store::sends::BEST_EFFORT`] `BySdk`): counted twice.
    GiveBackResent(usize),
    /// The same for a best-effort create's `+1` on the shard.
    IncrementResent(usize, usize),
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
        let fences = self
            .layout_of(changed)
            .fences(&snapshot(self.names(), be, epoch, present))
            .map(|f| {
                let mut fences = [0u8; SLOTS];
                for (name, fence) in f {
                    fences[self.names().slot(&name)] = encode(fence);
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

    /// The items' slots: with the unsharded `best_effort` item when the
    /// layout before or after the change is unsharded.
    fn names(&self) -> Names {
        Names {
            plain: self.shards == 1 || self.change == Change::Shards(1),
        }
    }

    /// A change (or the switch) has started and not reached every
    /// invocation yet.
    fn window_open(&self, state: &State) -> bool {
        self.rollout && !state.closed && (state.changed || self.switch && state.strict)
    }

    /// What strict admission may pass the limit by: the reservations of
    /// reads under the configuration before an atomic change, or, with a
    /// rollout window, the documented bound (the most creates in flight
    /// at any instant of the window).
    fn allowance(&self, state: &State) -> i64 {
        i64::from(if self.rollout {
            state.in_flight_at_change
        } else {
            state.window
        })
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
        let shards = u8::try_from(shards).expect("slots");
        // `best_effort`, then `best_effort#0..n-1` once sharded.
        if self.names().plain && shards > 1 {
            shards + 1
        } else {
            shards
        }
    }

    fn active(&self, state: &State) -> Vec<usize> {
        self.layout(state).active().map(|s| self.names().slot_of(s)).collect()
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
            .map(|k| (self.names().name(k), i64::from(read[k])))
            .collect();
        let mut quotas = [0u8; SLOTS];
        for q in self
            .rules
            .quotas(&self.layout_of(changed), &items, self.limit_of(changed))
        {
            let k = self.names().slot_of(q.shard);
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

    /// What the audit engine's `audit_scope` writes: the real [`decide`]'s
    /// plan (findings, [`plan_repair_at`], and in strict admission the
    /// mixed-epoch fence and the raise of short shards), written through
    /// [`Layout::raise`] when it says so, anything else a `Set` of
    /// [`Layout::correction`]'s counts. The rules before e03c33a (held
    /// back, unfenced) plan as the engine did then: [`findings_for`] and
    /// [`plan_repair_at`] only.
    fn compute_repair(&self, state: &State) -> Option<Plan> {
        let live = state.live_total();
        let names = self.names();
        let tally = ScopeTally {
            counts: ScopeCounts {
                live: u64::try_from(live).expect("live"),
                ..ScopeCounts::default()
            },
            live_by_shard: state.live_by_item(names),
        };
        let counts = &tally.counts;
        let admission = Self::admission_of(state);
        // The last write at 0, a grace of 1: now is 1 once it has passed.
        let written = LastWrites {
            best_effort: 0,
            eventual: 0,
        };
        let now = i64::from(state.quiet());
        let layout = self.layout(state);
        let snapshot = state.snapshot(names);
        let (plan, raise) = if self.rules.unfenced_raise || self.rules.hold_back_raise {
            let findings = findings_for(admission, counts, state.be_total(), 0);
            let mut plan = plan_repair_at(counts, &findings, written, now, 1);
            if self.rules.hold_back_raise && admission.is_strict() && layout.shards() > 1 {
                legacy::hold_back_a_sharded_strict_raise(&mut plan, counts, &findings, written, now, 1);
            }
            (plan, false)
        } else {
            let decision = decide(admission, layout, &tally, &snapshot, written, now, 1);
            (decision.plan, decision.raise)
        };
        let target = plan.repair.best_effort?;
        let items = state.items(names);
        let delta = target - snapshot.best_effort;
        if raise {
            let raise = layout.raise(&snapshot, &state.live_by_item(names), delta);
            let shards_only = raise.fences_only() && delta > 0;
            let mut adds = [0i8; SLOTS];
            let mut writes = 0u8;
            for (name, add) in raise.adds {
                adds[names.slot(&name)] = i8::try_from(add).expect("bounded");
                writes |= 1 << names.slot(&name);
            }
            let from = u8::try_from(raise.from).expect("epoch");
            return Some(Plan::Raise {
                adds,
                from,
                writes,
                shards_only,
            });
        }
        let mut be = state.be;
        for (name, count) in self
            .rules
            .correction(&layout, &items, &state.live_by_item(names), delta)
        {
            be[names.slot(&name)] = i8::try_from(count).expect("bounded");
        }
        (be != state.be).then_some(Plan::Set(be))
    }
}

const OVERSHOOT: &str = "live <= limit, outside the window";
const COVERED: &str = "every shard covers the live items recorded on it";
const BE_AT_MOST_LIVE: &str = "BE <= live";
const FULL: &str = "the scope is full";
const LOWERED: &str = "a repair lowers an over-reserved shard";
const WINDOW_USED: &str = "a create of the window passes the limit";
const UNDERCOUNT: &str = "BE is below live";
const RAISED: &str = "a repair raises BE";
const UNCOVERED: &str = "raised after the switch, the shards fall short of their live items by more than the requests in flight at the raise";
const RAISE_PLANNED: &str = "strict with BE below live: the audit plans a raise";
const STRICT_HOLDS: &str = "raised after the switch, the scope is full";

mod actions;
mod check;
mod clock;
mod hash;
mod legacy;
mod stream;
mod tests;
