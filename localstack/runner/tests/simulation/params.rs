//! Schedule generation: one schedule's knobs ([`Params`]), all drawn from
//! its seed, each group from a generator stream of its own so adding one
//! changes no other draw. Odd seeds run in strict admission, even seeds in
//! best-effort; one schedule in 33 runs 4 to 16 clients near a limit of 10
//! to 100; the actors' clocks are skewed in half of them. The store's
//! faults: 500 before and after the write was applied, throttling,
//! `TransactionConflict` (injected, and real between transactions in
//! flight), torn counter reads and lost answers the SDK re-sends. The
//! scope-key layout (N counters keys, M resources keys each) is drawn once
//! per schedule and never changed during it, as the kit refuses that.

use std::time::Duration;

use hybrid_counter::Admission;
use hybrid_counter::memory::{Fault, Op};
use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter::stream::Mode;

use crate::rng::Rng;

/// The simulation's API timeout: no request takes this long (checked: see
/// `Sim::took`), as the deployed API's take at most its 10 s timeout.
pub(crate) const SIM_API_TIMEOUT_MS: i64 = 500;

/// The most two actors' clocks differ by (each is off the true time by at
/// most half of it): the API's clients, the stream's and the reprocessor's
/// functions, and the operator's audit.
pub(crate) const SIM_MAX_SKEW_MS: i64 = 2_000;

/// The most API clients a schedule runs (wide schedules).
const MAX_CLIENTS: u32 = 16;

/// One schedule's knobs, all drawn from its seed.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    /// Odd seeds: strict, even seeds: best-effort.
    pub(crate) admission: Admission,
    /// The stream consumer's design: mostly batched, sometimes per-record.
    pub(crate) mode: Mode,
    /// The stack's scope keys (`ScopeKeyShards` N in 1, 2, 4 and
    /// `ResourceKeySpread` M in 1, 2, 3; one key per scope in a quarter of
    /// the schedules): fixed for the whole schedule, as on a stack.
    pub(crate) scope_keys: ScopeKeys,
    /// Eventual-counter shards (1, 2 or 4).
    pub(crate) eventual_shards: u32,
    /// Best-effort-counter shards (1 to 8).
    pub(crate) best_effort_shards: u32,
    /// `BeShardCount` changed while the clients run: the new count, and
    /// when; it rolls out over [`Params::rollout`] whatever is in flight
    /// (see [`Sim::change_config`]).
    pub(crate) reshard: Option<(u32, Duration)>,
    /// Strict seeds only: the schedule starts in best-effort admission and
    /// `AdmissionMode` is switched to strict at this time (never with a
    /// reshard), rolled out over [`Params::rollout`], then `audit --repair`.
    pub(crate) switch: Option<Duration>,
    /// How long a configuration change takes to reach every request: 0 to
    /// 6 API timeouts (Lambda's `UpdateFunctionConfiguration` takes up to
    /// about a minute against a 10 s API timeout); meanwhile each request
    /// runs the old or the new configuration.
    pub(crate) rollout: Duration,
    pub(crate) scopes: u64,
    pub(crate) ids: u64,
    pub(crate) limit: u64,
    pub(crate) clients: u64,
    pub(crate) ops_per_client: u64,
    pub(crate) batch_size: usize,
    pub(crate) bisect: bool,
    pub(crate) max_retries: Option<u32>,
    pub(crate) max_record_age: Option<Duration>,
    pub(crate) max_receive_count: u32,
    /// Stream retention; `None`: records never expire.
    pub(crate) retention: Option<Duration>,
    pub(crate) store_faults: Vec<(Op, Fault, u32)>,
    pub(crate) transaction_latency: Duration,
    pub(crate) processor_attempts: u32,
    pub(crate) crash_per_mille: u32,
    pub(crate) duplicate_per_mille: u32,
    /// Items per page of the audit's paginated Query, and the longest pause
    /// between two pages (writes land in the middle of one count).
    pub(crate) page_size: usize,
    pub(crate) page_latency: Duration,
    /// Pause between two runs of `audit --repair` during the load.
    pub(crate) audit_every: (u64, u64),
    /// The audits during the load also sweep pending items.
    pub(crate) sweep_during_load: bool,
    /// Scope 0 holds an item the kit did not write.
    pub(crate) foreign_item: bool,
    /// Longest pause after each counter item a Query reads (the request
    /// path's read and the audit's): read-committed item by item.
    pub(crate) counter_read_latency: Duration,
    /// How long after a lost answer a write the SDK re-sends is sent again
    /// ([`Chaos::resend_delay`]).
    pub(crate) resend_delay: Duration,
    /// `counterctl limit set` while the clients run: when, which
    /// scope, the new override (`None` clears it).
    pub(crate) limit_changes: Vec<(Duration, u64, Option<u64>)>,
    /// Live items scope 0 already holds when the clients start (a wide
    /// schedule near a large limit): counted, on the shards in turn.
    pub(crate) prefilled: u64,
    /// Per mille of a client's operations preceded by a quiet moment
    /// longer than the audit's grace, so repairs that lower (strict) or
    /// raise (best-effort) BE land in the middle of the load.
    pub(crate) quiet_per_mille: u32,
    /// The mapping's `ParallelizationFactor` (1 to 10): lanes per shard,
    /// each a sequential consumer of the records whose partition key (the
    /// scope) hashes to it, all lanes of all readable shards concurrent.
    pub(crate) lanes: u32,
    /// When the stream splits an open shard (closed, two children open)
    /// while the clients run.
    pub(crate) splits: Vec<Duration>,
    /// Each actor's clock, off the true time by this many milliseconds.
    pub(crate) skew: Skew,
    /// Per mille of creates that ask for a gapless sequence number
    /// (`?sequence=true`); 0 where a configuration change opens a window
    /// (a numbered create is in flight until its claim ends, which would
    /// hold a window open longer).
    pub(crate) sequence_per_mille: u32,
}

/// The actors' clock offsets, each within ±[`SIM_MAX_SKEW_MS`]/2.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Skew {
    /// Per client: each API instance has its own clock.
    pub(crate) api: Vec<i64>,
    /// The stream function and the reprocessor (they stamp counters).
    pub(crate) stream: i64,
    /// The operator's machine: audits and their sweeps.
    pub(crate) audit: i64,
}

impl Skew {
    pub(crate) fn draw(r: &mut Rng, clients: u64) -> Self {
        let mut offset = || r.range(0, SIM_MAX_SKEW_MS as u64) as i64 - SIM_MAX_SKEW_MS / 2;
        Self {
            api: (0..clients).map(|_| offset()).collect(),
            stream: offset(),
            audit: offset(),
        }
    }

    /// The widest difference between two actors' clocks.
    pub(crate) fn span(&self) -> i64 {
        let all = self.api.iter().chain([&self.stream, &self.audit]);
        all.clone().max().unwrap_or(&0) - all.min().unwrap_or(&0)
    }

    pub(crate) fn api(&self, client: u64) -> i64 {
        self.api.get(client as usize).copied().unwrap_or_default()
    }
}

impl Params {
    /// The schedule's configuration change, if any, and when it is made.
    pub(crate) fn change(&self) -> Option<(ConfigChange, Duration)> {
        match (self.reshard, self.switch) {
            (Some((_, at)), _) => Some((ConfigChange::Reshard, at)),
            (None, Some(at)) => Some((ConfigChange::Switch, at)),
            (None, None) => None,
        }
    }

    /// The admission mode the schedule starts in.
    pub(crate) fn first_admission(&self) -> Admission {
        if self.switch.is_some() {
            Admission::BestEffort
        } else {
            self.admission
        }
    }

    pub(crate) fn draw(seed: u64) -> Self {
        let mut r = Rng::new(seed, 1);
        let level = r.range(0, 120) as u32;
        let rate = |r: &mut Rng| r.range(0, u64::from(level)) as u32;
        let mut store_faults = Vec::new();
        for op in [Op::PutResource, Op::AddBestEffort, Op::MarkDeleted, Op::Transact] {
            for fault in [
                Fault::AppliedThenUnavailable,
                Fault::Unavailable,
                Fault::Throttled,
                Fault::Conflict,
            ] {
                store_faults.push((op, fault, rate(&mut r)));
            }
        }
        // The put's answer lost after it applied: the store never sends it
        // again (issue 34 D1), which this fault would expose if it did.
        store_faults.push((Op::PutResource, Fault::AppliedThenResent, rate(&mut r)));
        store_faults.push((Op::Transact, Fault::AppliedThenConditionFailed, rate(&mut r)));
        for op in [Op::ReadCounters, Op::GetResource] {
            store_faults.push((op, Fault::Unavailable, rate(&mut r)));
            store_faults.push((op, Fault::Throttled, rate(&mut r)));
        }
        let admission = if seed % 2 == 1 {
            Admission::Strict
        } else {
            Admission::BestEffort
        };
        if admission.is_strict() {
            // From a stream of their own, so the rest of the schedule is
            // what the same seed draws in best-effort admission.
            let mut rs = Rng::new(seed, 5);
            for fault in [
                Fault::AppliedThenUnavailable,
                Fault::Unavailable,
                Fault::Throttled,
                Fault::Conflict,
            ] {
                store_faults.push((Op::ReserveBestEffort, fault, rs.range(0, u64::from(level)) as u32));
            }
        }
        // From a stream of their own too, so adding them changed no other draw.
        let mut rd = Rng::new(seed, 6);
        let mode = if rd.chance(250) { Mode::PerRecord } else { Mode::Batched };
        let eventual_shards = [1, 1, 2, 4][rd.range(0, 3) as usize];
        // The operator's side (audit reads and repair writes, replay reads),
        // from a stream of its own as well.
        let mut ra = Rng::new(seed, 7);
        for op in [Op::CounterItems, Op::ScopeItems] {
            store_faults.push((op, Fault::Unavailable, ra.range(0, u64::from(level) / 2) as u32));
            store_faults.push((op, Fault::Throttled, ra.range(0, u64::from(level) / 2) as u32));
        }
        for fault in [Fault::AppliedThenUnavailable, Fault::Unavailable, Fault::Conflict] {
            store_faults.push((Op::SetCounters, fault, ra.range(0, u64::from(level)) as u32));
        }
        store_faults.push((Op::StreamRange, Fault::ShortRead, ra.range(0, 500) as u32));
        let page_size = ra.range(1, 3) as usize;
        let page_latency = Duration::from_millis(ra.range(0, 40));
        let audit_every = (ra.range(5, 50), ra.range(50, 200));
        let sweep_during_load = ra.chance(500);
        let foreign_item = ra.chance(250);
        // The best-effort shards, from a stream of their own.
        let mut rb = Rng::new(seed, 8);
        let best_effort_shards = rb.range(1, 8) as u32;
        let reshard = rb.chance(300).then(|| (rb.range(1, 8) as u32, rb.millis(0, 1_500)));
        // Issue 26's harsher store and operator, from a stream of their own:
        // torn counter reads, the mixed reasons of a conflict on the counter,
        // limit overrides changed under load, and one schedule in 33 wide
        // (up to 16 clients near a limit of up to 100).
        let mut rh = Rng::new(seed, 9);
        store_faults.push((
            Op::Transact,
            Fault::ConflictOnCounter,
            rh.range(0, u64::from(level)) as u32,
        ));
        let counter_read_latency = if rh.chance(500) {
            Duration::from_micros(rh.range(0, 4_000))
        } else {
            Duration::ZERO
        };
        let mut limit_changes = Vec::new();
        if rh.chance(300) {
            for _ in 0..rh.range(1, 3) {
                limit_changes.push((rh.millis(0, 1_500), rh.range(0, 1), None));
            }
        }
        let wide = rh.chance(30).then(|| {
            let clients = rh.range(4, u64::from(MAX_CLIENTS));
            let limit = rh.range(10, 100);
            let prefilled = limit - rh.range(0, limit.min(2 * clients));
            (clients, limit, prefilled, limit + rh.range(2, 10), rh.range(2, 4))
        });
        let quiet_per_mille = if rh.chance(100) { rh.range(20, 80) as u32 } else { 0 };
        // The stream's lanes and shard splits, from a stream of their own.
        let mut rl = Rng::new(seed, 10);
        let lanes = if rl.chance(500) { 1 } else { rl.range(2, 10) as u32 };
        let splits = if rl.chance(300) {
            (0..rl.range(1, 3)).map(|_| rl.millis(0, 2_000)).collect()
        } else {
            Vec::new()
        };
        // The scope-key layout, from a stream of its own.
        let mut ry = Rng::new(seed, 17);
        let scope_keys = ScopeKeys::new([1, 1, 2, 4][ry.range(0, 3) as usize])
            .and_then(|keys| keys.with_spread([1, 1, 2, 3][ry.range(0, 3) as usize]))
            .expect("counts within the kit's bounds");
        let mut p = Params {
            admission,
            mode,
            scope_keys,
            eventual_shards,
            best_effort_shards,
            reshard,
            scopes: r.range(1, 2),
            ids: r.range(3, 8),
            limit: r.range(1, 5),
            clients: r.range(1, 3),
            ops_per_client: r.range(3, 12) * 3 / 4,
            batch_size: r.range(1, 6) as usize,
            bisect: r.chance(600),
            max_retries: Some(r.range(0, 3) as u32),
            max_record_age: r.chance(250).then(|| r.millis(2_000, 20_000)),
            max_receive_count: r.range(1, 3) as u32,
            retention: r.chance(200).then(|| r.millis(1_000, 8_000)),
            store_faults,
            transaction_latency: Duration::from_micros(r.range(0, 5_000)),
            processor_attempts: r.range(1, 4) as u32,
            crash_per_mille: rate(&mut r) * 2,
            duplicate_per_mille: rate(&mut r) * 2,
            page_size,
            page_latency,
            audit_every,
            sweep_during_load,
            foreign_item,
            counter_read_latency,
            resend_delay: Duration::ZERO,
            limit_changes,
            prefilled: 0,
            quiet_per_mille,
            lanes,
            splits,
            skew: Skew::default(),
            sequence_per_mille: 0,
            switch: None,
            rollout: Duration::ZERO,
        };
        // Configuration rollouts and the admission switch, from a stream of their own.
        let mut rw = Rng::new(seed, 15);
        p.rollout = rw.millis(0, 6 * SIM_API_TIMEOUT_MS as u64);
        if rw.chance(150) && p.admission.is_strict() && p.reshard.is_none() {
            p.switch = Some(rw.millis(0, 1_500));
        }
        if let Some((clients, limit, prefilled, ids, ops)) = wide {
            (p.clients, p.limit, p.prefilled, p.ids, p.ops_per_client) = (clients, limit, prefilled, ids, ops);
        }
        // Skewed clocks, from a stream of their own, in half the schedules.
        let mut rk = Rng::new(seed, 11);
        if rk.chance(500) {
            p.skew = Skew::draw(&mut rk, p.clients);
        }
        // Numbered creates and the sequence's faults, from a stream of their own.
        let mut rq = Rng::new(seed, 13);
        if rq.chance(500) && p.limit_changes.is_empty() && p.reshard.is_none() && p.switch.is_none() {
            p.sequence_per_mille = rq.range(200, 600) as u32;
        }
        for (op, fault) in [
            (Op::LastSequence, Fault::Unavailable),
            (Op::LastSequence, Fault::Throttled),
            (Op::ClaimSequence, Fault::AppliedThenUnavailable),
            (Op::ClaimSequence, Fault::Unavailable),
            (Op::ClaimSequence, Fault::Throttled),
            (Op::ClaimSequence, Fault::Conflict),
            (Op::SequenceEntry, Fault::Unavailable),
        ] {
            p.store_faults.push((op, fault, rq.range(0, u64::from(level)) as u32));
        }
        // Now and then a sequence so contended that claims run out of
        // attempts: the item stays, unnumbered (503 CreatedWithoutSequence).
        if rq.chance(100) {
            p.store_faults
                .push((Op::ClaimSequence, Fault::Conflict, rq.range(700, 950) as u32));
        }
        // A new override near the limit in force: lowered, raised or cleared.
        for (_, scope, new) in &mut p.limit_changes {
            *scope = (*scope).min(p.scopes - 1);
            if !rh.chance(200) {
                *new = Some(rh.range(p.limit.saturating_sub(2).max(1), p.limit + 2));
            }
        }
        // Soft deletes whose answer was lost after they applied, and how
        // long a re-send of a write the SDK retries would wait (its
        // standard backoff, or a client timeout): from a stream of their own.
        let mut rr = Rng::new(seed, 14);
        p.store_faults.push((
            Op::MarkDeleted,
            Fault::AppliedThenResent,
            rr.range(0, u64::from(level)) as u32,
        ));
        p.resend_delay = rr.millis(0, 400);
        // A second `limit set` of the scope of the first change drawn while
        // that one's rounds may still run, over several counters keys (one
        // key's limit is a single unconditioned write), and limit
        // transactions failing before or after they applied: from a
        // stream of their own.
        let mut rv = Rng::new(seed, 18);
        if let Some(&(at, scope, _)) = p.limit_changes.first()
            && rv.chance(800)
        {
            let new = Some(rv.range(p.limit.saturating_sub(2).max(1), p.limit + 2));
            p.limit_changes.push((at + rv.millis(0, 400), scope, new));
            if p.scope_keys.count() == 1 {
                p.scope_keys = ScopeKeys::new(2)
                    .and_then(|keys| keys.with_spread(p.scope_keys.spread()))
                    .expect("2 keys");
            }
        }
        for fault in [Fault::Unavailable, Fault::AppliedThenUnavailable] {
            p.store_faults.push((Op::LimitWrite, fault, rv.range(0, 300) as u32));
        }
        p
    }
}

/// A configuration change under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigChange {
    /// `counterctl limit set`: written in rounds of transactions
    /// (`shares::assign`), read per request from the table.
    Limit,
    /// `BeShardCount`, rolled out over [`Params::rollout`].
    Reshard,
    /// `AdmissionMode` best-effort to strict, rolled out over
    /// [`Params::rollout`], then `audit --repair`.
    Switch,
}

pub(crate) const CHANGES: [ConfigChange; 3] = [ConfigChange::Limit, ConfigChange::Reshard, ConfigChange::Switch];
