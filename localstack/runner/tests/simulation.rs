//! Seeded simulation of the whole counting pipeline in one process, the
//! way FoundationDB and TigerBeetle test: API clients creating and deleting
//! under limits, the resources table's stream consumed by a simulated event
//! source mapping (batching, filter, partial batch responses, retries,
//! bisect, record age, on-failure destination) that invokes
//! [`Processor::process_json`] as the stream Lambda does, DLQ1 replayed by
//! the reprocessor's logic ([`replay_records`]) over the in-memory stream,
//! DLQ2 after `maxReceiveCount` and the operator's redrive — interleaved on
//! one tokio runtime with paused time, so every delay, fault and
//! interleaving comes from one seed.
//!
//! The mapping's decisions are the runner's own pure functions
//! ([`esm_runner::batch`]); the store is the in-memory double
//! ([`MemoryStore`]) with seeded faults: 500 before, 500 after the write
//! was applied, throttling, `TransactionConflict` (injected, and real
//! between transactions in flight, the repair's among them, with the other
//! actions' own reasons beside it). It is as harsh as DynamoDB where the
//! kit's safety depends on it (issue 26): the Query of a scope's counters
//! is read-committed item by item, so a create or an audit sees a repair
//! or a stream transaction half applied; `audit --repair` is a transaction
//! that holds its counters while in flight. The pipeline adds handler
//! crashes mid batch, duplicate deliveries (stream and DLQ), out-of-order
//! delivery through the DLQ, and records expiring from the stream. The
//! operator changes limit overrides, `BeShardCount` and `AdmissionMode`
//! under load, the latter two rolling out over up to 6 API timeouts (old
//! and new configuration side by side per request, as on Lambda); clients
//! pause past the audit's grace now and then, so repairs land mid-load;
//! one schedule in 33 runs 4 to 16 clients near a limit of 10 to 100.
//!
//! The stream has a parallelization factor of 1 to 10 lanes per shard
//! (records keyed to a lane by partition key, lanes concurrent) and splits
//! shards under load; the mapping reads a child shard only after its
//! parent is finished, by the runner's own rule
//! ([`esm_runner::batch::readable_shards`]), and a replay reads the shard
//! its on-failure record names. The stream function must get each item's
//! records in order, as AWS promises (the kit's counting does not depend on
//! it: reordering one scope's records breaks no count, only this check).
//!
//! The actors' clocks are skewed by up to 2 s against each other (each API
//! client, the stream's functions, the operator's audit), and the audit's
//! grace is just over twice the API's timeout plus that skew, the rule the
//! kit documents.
//!
//! The scheduled drift check ([`hybrid_counter::audit::drift::DriftCheck`])
//! runs under load and must never report a defect (none exists at any
//! instant, so one reported is an unconfirmed finding); at rest after the
//! repair it must report nothing.
//!
//! The clients call the example API's real handler (`handlers/api`), some
//! creates with `?sequence=true`: no answer may carry the store's words,
//! and every scope's sequence must be gapless, each number answered
//! recorded for its item.
//!
//! Odd seeds run in strict admission (creates reserve a slot with a
//! conditional BE increment before the put; some start best-effort and
//! switch), even seeds in best-effort admission. Checked after every
//! write, per scope: `EC == processed`; in best-effort admission `BE <=
//! live`; in strict admission every best-effort item covers the live items
//! recorded on it (their `be_shard`), and `live <= limit` (the override,
//! else the default) outside the configuration-change windows
//! ([`Windows`]), so a strict schedule fails at the first write past what a
//! window allows. A panic of any actor fails the schedule by seed.
//! After the drain: DLQ1 is empty, every DLQ2 message describes records
//! that left the stream, every item is counted and every soft delete done
//! unless its record left the stream, and then `EC == live`; for expired
//! records, audit repair plus a sweep of the pending items restores
//! exactness (see [`repair`]). In strict admission the repair lowers an
//! over-reserved BE only after the reservation grace period, as the kit's
//! audit does.
//!
//! `SIM_SCHEDULES` (default 10,000) schedules run from `SIM_BASE_SEED` on
//! `SIM_THREADS` threads (default: every core), each schedule on its own
//! thread's runtime; the report gives the rate. `SIM_SEED=<n>` replays
//! one schedule with its trace; a failure is shrunk in at most
//! `SIM_SHRINK_RUNS` runs (default 300).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::dynamodb::EventRecord as Record;
use esm_runner::Invocation;
use esm_runner::batch::{
    SqsVerdict, StreamVerdict, expired_prefix, may_retry, next_window, readable_shards, sqs_verdict, stream_verdict,
};
use hybrid_counter::audit::{Auditor, Finding, RepairMode, ScopeCounts, pending_changes};
use hybrid_counter::memory::{Chaos, Fault, MemoryStore, Op, STREAM_ARN, Tables};
use hybrid_counter::retry::Backoff;
use hybrid_counter::store::ResourceKey;
use hybrid_counter::stream::record::{created_at, sequence_number};
use hybrid_counter::stream::{Change, Mode, Processor, filter};
use hybrid_counter::{Admission, Counter, ResourceId, Scope, keys};
use hybrid_counter_aws::replay::{OnFailureRecord, replay_records};
use serde_json::{Value, json};

const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:000000000000:function:stream-counter";
/// Logical epoch of the simulation's clock (tokio's paused time is added).
const EPOCH_MS: i64 = 1_700_000_000_000;
const DEFAULT_SCHEDULES: u64 = 10_000;
const DEFAULT_BASE_SEED: u64 = 0x5EED_0000;
/// The simulation's API timeout: no request takes this long (checked: see
/// `Sim::took`), as the deployed API's take at most its 10 s timeout.
const SIM_API_TIMEOUT_MS: i64 = 500;
/// The most two actors' clocks differ by (each is off the true time by at
/// most half of it): the API's clients, the stream's and the reprocessor's
/// functions, and the operator's audit.
const SIM_MAX_SKEW_MS: i64 = 2_000;
/// What the in-memory store (and DynamoDB) say in their errors: none of it
/// may reach an API caller.
const STORE_WORDS: &[&str] = &[
    "injected",
    "TransactionConflict",
    "ConditionalCheck",
    "conditional check",
    "cancelled",
    "Throttl",
    "throttle",
    "Exception",
    "transient failure",
    "store unavailable:",
    "request rejected",
];
/// The most API clients a schedule runs (wide schedules).
const MAX_CLIENTS: u32 = 16;

/// SplitMix64: small, seedable, and the same on every platform.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        let mut rng = Rng(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        rng.next();
        rng
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, per_mille: u32) -> bool {
        self.next() % 1000 < u64::from(per_mille)
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

/// One schedule's knobs, all drawn from its seed.
#[derive(Debug, Clone)]
struct Params {
    /// Odd seeds: strict, even seeds: best-effort.
    admission: Admission,
    /// The stream consumer's design: mostly batched, sometimes per-record.
    mode: Mode,
    /// Eventual-counter shards (1, 2 or 4).
    eventual_shards: u32,
    /// Best-effort-counter shards (1 to 8).
    best_effort_shards: u32,
    /// `BeShardCount` changed while the clients run: the new count, and
    /// when; it rolls out over [`Params::rollout`] whatever is in flight
    /// (see [`Sim::change_config`]).
    reshard: Option<(u32, Duration)>,
    /// Strict seeds only: the schedule starts in best-effort admission and
    /// `AdmissionMode` is switched to strict at this time (never with a
    /// reshard), rolled out over [`Params::rollout`], then `audit --repair`.
    switch: Option<Duration>,
    /// How long a configuration change takes to reach every request: 0 to
    /// 6 API timeouts (Lambda's `UpdateFunctionConfiguration` takes up to
    /// about a minute against a 10 s API timeout); meanwhile each request
    /// runs the old or the new configuration.
    rollout: Duration,
    scopes: u64,
    ids: u64,
    limit: u64,
    clients: u64,
    ops_per_client: u64,
    batch_size: usize,
    bisect: bool,
    max_retries: Option<u32>,
    max_record_age: Option<Duration>,
    max_receive_count: u32,
    /// Stream retention; `None`: records never expire.
    retention: Option<Duration>,
    store_faults: Vec<(Op, Fault, u32)>,
    transaction_latency: Duration,
    processor_attempts: u32,
    crash_per_mille: u32,
    duplicate_per_mille: u32,
    /// Items per page of the audit's paginated Query, and the longest pause
    /// between two pages (writes land in the middle of one count).
    page_size: usize,
    page_latency: Duration,
    /// Pause between two runs of `audit --repair` during the load.
    audit_every: (u64, u64),
    /// The audits during the load also sweep pending items.
    sweep_during_load: bool,
    /// Scope 0 holds an item the kit did not write.
    foreign_item: bool,
    /// Longest pause after each counter item a Query reads (the request
    /// path's read and the audit's): read-committed item by item.
    counter_read_latency: Duration,
    /// How long after a lost answer a write the SDK re-sends is sent again
    /// ([`Chaos::resend_delay`]).
    resend_delay: Duration,
    /// `counterctl scope set-limit` while the clients run: when, which
    /// scope, the new override (`None` clears it).
    limit_changes: Vec<(Duration, u64, Option<u64>)>,
    /// Live items scope 0 already holds when the clients start (a wide
    /// schedule near a large limit): counted, on the shards in turn.
    prefilled: u64,
    /// Per mille of a client's operations preceded by a quiet moment
    /// longer than the audit's grace, so repairs that lower (strict) or
    /// raise (best-effort) BE land in the middle of the load.
    quiet_per_mille: u32,
    /// The mapping's `ParallelizationFactor` (1 to 10): lanes per shard,
    /// each a sequential consumer of the records whose partition key (the
    /// scope) hashes to it, all lanes of all readable shards concurrent.
    lanes: u32,
    /// When the stream splits an open shard (closed, two children open)
    /// while the clients run.
    splits: Vec<Duration>,
    /// Each actor's clock, off the true time by this many milliseconds.
    skew: Skew,
    /// Per mille of creates that ask for a gapless sequence number
    /// (`?sequence=true`); 0 where a configuration change opens a window
    /// (a numbered create is in flight until its claim ends, which would
    /// hold a window open longer).
    sequence_per_mille: u32,
}

/// The actors' clock offsets, each within ±[`SIM_MAX_SKEW_MS`]/2.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Skew {
    /// Per client: each API instance has its own clock.
    api: Vec<i64>,
    /// The stream function and the reprocessor (they stamp counters).
    stream: i64,
    /// The operator's machine: audits and their sweeps.
    audit: i64,
}

impl Skew {
    fn draw(r: &mut Rng, clients: u64) -> Self {
        let mut offset = || r.range(0, SIM_MAX_SKEW_MS as u64) as i64 - SIM_MAX_SKEW_MS / 2;
        Self {
            api: (0..clients).map(|_| offset()).collect(),
            stream: offset(),
            audit: offset(),
        }
    }

    /// The widest difference between two actors' clocks.
    fn span(&self) -> i64 {
        let all = self.api.iter().chain([&self.stream, &self.audit]);
        all.clone().max().unwrap_or(&0) - all.min().unwrap_or(&0)
    }

    fn api(&self, client: u64) -> i64 {
        self.api.get(client as usize).copied().unwrap_or_default()
    }
}

impl Params {
    /// The schedule's configuration change, if any, and when it is made.
    fn change(&self) -> Option<(ConfigChange, Duration)> {
        match (self.reshard, self.switch) {
            (Some((_, at)), _) => Some((ConfigChange::Reshard, at)),
            (None, Some(at)) => Some((ConfigChange::Switch, at)),
            (None, None) => None,
        }
    }

    /// The admission mode the schedule starts in.
    fn first_admission(&self) -> Admission {
        if self.switch.is_some() {
            Admission::BestEffort
        } else {
            self.admission
        }
    }

    fn draw(seed: u64) -> Self {
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
        let mut p = Params {
            admission,
            mode,
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
        p
    }
}

/// Totals over schedules, for the report.
#[derive(Debug, Default, Clone)]
struct Stats {
    schedules: u64,
    store_faults: BTreeMap<String, u64>,
    lock_conflicts: u64,
    creates_ok: u64,
    deletes_ok: u64,
    limit_exceeded: u64,
    unavailable: u64,
    over_limit_creates: u64,
    strict_schedules: u64,
    best_effort_schedules: u64,
    per_record_schedules: u64,
    sharded_schedules: u64,
    best_effort_sharded_schedules: u64,
    resharded_schedules: u64,
    /// Creates that left a scope above its limit: in strict admission
    /// (only within a configuration change's window), in best-effort.
    strict_creates_above_limit_in_a_window: u64,
    best_effort_overshoots: u64,
    /// Operator actions under load: limit overrides set or cleared, shard
    /// count changes that met creates in flight.
    limit_changes: u64,
    reshards_with_creates_in_flight: u64,
    /// Schedules switching `AdmissionMode` from best-effort to strict, and
    /// the longest rollout of a change.
    switched_schedules: u64,
    longest_rollout_ms: u64,
    /// Strict admission's configuration-change windows per kind
    /// ([`CHANGES`]; best-effort schedules open none).
    windows: [WindowStats; 3],
    /// Wide schedules (4 to 16 clients near a limit of 10 to 100).
    wide_schedules: u64,
    /// Pauses of a client longer than the grace period, during the load.
    quiet_moments: u64,
    /// Stream transactions cancelled with `TransactionConflict` beside a
    /// `ConditionalCheckFailed` (the mixed reasons), and schedules whose
    /// counter Queries were torn (read item by item with pauses).
    mixed_cancellations: u64,
    torn_read_schedules: u64,
    /// Schedules whose mapping ran 2 to 10 lanes per shard, stream shard
    /// splits, and the most stream batches in flight at once (lanes of
    /// every readable shard).
    parallel_schedules: u64,
    stream_splits: u64,
    /// Scheduled drift check runs during the load, and what they reported:
    /// scopes drifted (never a defect: no defect exists at any instant, so
    /// one reported is an unconfirmed finding), held back (in motion or
    /// not yet repairable).
    drift_runs: u64,
    drift_scopes_drifted: u64,
    drift_scopes_held_back: u64,
    /// Numbered creates (`?sequence=true`): numbered, created without a
    /// number (503 `CreatedWithoutSequence`), the longest one in
    /// simulated milliseconds (the claim runs after the create's writes;
    /// the API timeout bounds the unnumbered requests), and the API's
    /// answers checked for the store's words.
    numbered_creates: u64,
    created_without_sequence: u64,
    longest_numbered_request_ms: u64,
    answers_checked: u64,
    /// Schedules whose actors' clocks disagree, and the widest difference.
    skewed_schedules: u64,
    widest_skew_ms: u64,
    most_batches_in_flight: u64,
    /// Strict schedules whose BE was over-reserved after the drain.
    strict_over_reserved_at_rest: u64,
    /// Repairs after the drain that had to wait out the grace period (a
    /// request-path write younger than it).
    final_repairs_held_back: u64,
    invocations: u64,
    handler_crashes: u64,
    duplicate_deliveries: u64,
    partial_failures: u64,
    bisects: u64,
    batches_to_dlq1: u64,
    dlq1_replays_ok: u64,
    moved_to_dlq2: u64,
    redriven: u64,
    records_expired: u64,
    lost_under_mapping: u64,
    /// Schedules where the kit's audit repair alone left `EC != live`.
    repair_left_ec_off: u64,
    first_repair_gap_seed: Option<u64>,
    swept_items: u64,
    /// `audit --repair` runs (per scope) while clients and stream were busy.
    audits_during_load: u64,
    /// Of those: repairs written, repairs (or parts) held back, audits that
    /// failed on a store error (reported, nothing written).
    repairs_during_load: u64,
    repairs_held_back_during_load: u64,
    audit_errors_during_load: u64,
    /// Pending items the audits during the load swept.
    swept_during_load: u64,
    /// Rounds of `audit --repair` over every scope during the load (for one
    /// schedule); over many, the fewest any schedule had.
    audit_rounds: u64,
    /// Schedules with at least three rounds during their load.
    schedules_with_three_audit_rounds: u64,
    /// The longest request of any client, in simulated milliseconds (must
    /// stay below the audit's grace period).
    longest_request_ms: u64,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.schedules += other.schedules;
        for (k, v) in &other.store_faults {
            *self.store_faults.entry(k.clone()).or_default() += v;
        }
        macro_rules! sum {
            ($($f:ident),*) => { $(self.$f += other.$f;)* };
        }
        sum!(
            lock_conflicts,
            creates_ok,
            deletes_ok,
            limit_exceeded,
            unavailable,
            over_limit_creates,
            strict_schedules,
            best_effort_schedules,
            per_record_schedules,
            sharded_schedules,
            best_effort_sharded_schedules,
            resharded_schedules,
            strict_creates_above_limit_in_a_window,
            best_effort_overshoots,
            limit_changes,
            reshards_with_creates_in_flight,
            switched_schedules,
            wide_schedules,
            quiet_moments,
            mixed_cancellations,
            torn_read_schedules,
            parallel_schedules,
            stream_splits,
            skewed_schedules,
            numbered_creates,
            created_without_sequence,
            answers_checked,
            drift_runs,
            drift_scopes_drifted,
            drift_scopes_held_back,
            strict_over_reserved_at_rest,
            final_repairs_held_back,
            invocations,
            handler_crashes,
            duplicate_deliveries,
            partial_failures,
            bisects,
            batches_to_dlq1,
            dlq1_replays_ok,
            moved_to_dlq2,
            redriven,
            records_expired,
            lost_under_mapping,
            repair_left_ec_off,
            swept_items,
            audits_during_load,
            repairs_during_load,
            repairs_held_back_during_load,
            audit_errors_during_load,
            swept_during_load
        );
        self.longest_request_ms = self.longest_request_ms.max(other.longest_request_ms);
        self.longest_rollout_ms = self.longest_rollout_ms.max(other.longest_rollout_ms);
        for (mine, theirs) in self.windows.iter_mut().zip(&other.windows) {
            mine.add(theirs);
        }
        self.most_batches_in_flight = self.most_batches_in_flight.max(other.most_batches_in_flight);
        self.widest_skew_ms = self.widest_skew_ms.max(other.widest_skew_ms);
        self.longest_numbered_request_ms = self.longest_numbered_request_ms.max(other.longest_numbered_request_ms);
        self.audit_rounds = if self.schedules == other.schedules {
            other.audit_rounds
        } else {
            self.audit_rounds.min(other.audit_rounds)
        };
        // One schedule's stats, or a total of many (one thread's).
        self.schedules_with_three_audit_rounds += if other.schedules == 1 {
            u64::from(other.audit_rounds >= 3)
        } else {
            other.schedules_with_three_audit_rounds
        };
        self.first_repair_gap_seed = match (self.first_repair_gap_seed, other.first_repair_gap_seed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// An SQS message of DLQ1 or DLQ2.
#[derive(Debug, Clone)]
struct Message {
    id: String,
    body: String,
    receives: u32,
    visible_at: tokio::time::Instant,
}

/// A batch, or part of one after a bisect or a partial failure.
type Part = esm_runner::batch::Part<(Record, Value)>;

/// Everything one schedule shares between its actors (one thread, no
/// `Send` needed: the actors are joined, not spawned).
struct Sim {
    seed: u64,
    p: Params,
    store: Arc<MemoryStore>,
    /// The request path before and after the schedule's configuration
    /// change (`BeShardCount` or `AdmissionMode`; the same one when it has
    /// none), when it was made, and the draws of which one a request runs
    /// during the rollout.
    counters: [Counter<Arc<MemoryStore>>; 2],
    changed: Cell<Option<tokio::time::Instant>>,
    picks: RefCell<Rng>,
    /// A best-effort `audit --repair` of the operator is in flight (the
    /// switch's strict repair waits for it).
    best_effort_audits: Cell<u32>,
    /// Creates in flight and the configuration changes' windows, shared
    /// with the store's checker.
    windows: Arc<Mutex<Windows>>,
    /// The stream function's and the reprocessor's processor (the
    /// stream's clock).
    processor: Processor<Arc<MemoryStore>>,
    /// The processor of the operator's sweeps (the audit's clock).
    sweeper: Processor<Arc<MemoryStore>>,
    start: tokio::time::Instant,
    /// The mapping's checkpoint per shard and lane: the last record the
    /// lane is past.
    checkpoints: RefCell<BTreeMap<Lane, String>>,
    /// Lanes that read a closed shard to its end; a shard all of whose
    /// lanes did is finished, and its children become readable.
    lanes_done: RefCell<BTreeSet<Lane>>,
    finished_shards: RefCell<BTreeSet<String>>,
    /// Bumped when a shard splits or finishes: the lanes' round ends and
    /// the mapping looks at the readable shards again.
    shard_generation: Cell<u64>,
    batches_in_flight: Cell<u64>,
    /// What the stream function has been invoked with: every sequence
    /// number, and per item the highest one, to check AWS's promise that
    /// an item's records reach the function in order (across lanes and
    /// shard lineage).
    delivered: RefCell<Deliveries>,
    order_violation: RefCell<Option<String>>,
    /// Numbers the API answered with: `(scope, number)` → the id created.
    numbered: RefCell<BTreeMap<(String, u64), String>>,
    /// The first drift check run or audit under load that reported a defect.
    drift_violation: RefCell<Option<String>>,
    dlq1: RefCell<VecDeque<Message>>,
    dlq2: RefCell<VecDeque<Message>>,
    next_message: Cell<u64>,
    /// Faults of the pipeline itself (crashes, duplicates) are on.
    stormy: Cell<bool>,
    clients_done: Cell<u64>,
    stats: RefCell<Stats>,
    /// Shared with [`run_with`], which keeps it when an actor panics.
    trace: Option<Rc<RefCell<Vec<String>>>>,
}

impl Sim {
    fn now_ms(&self) -> i64 {
        EPOCH_MS + i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// What client `n`'s clock says now.
    fn now_api(&self, n: u64) -> i64 {
        self.now_ms() + self.p.skew.api(n)
    }

    /// What the stream function's clock says now.
    fn now_stream(&self) -> i64 {
        self.now_ms() + self.p.skew.stream
    }

    /// What the operator's clock says now.
    fn now_audit(&self) -> i64 {
        self.now_ms() + self.p.skew.audit
    }

    /// The audit's grace period: strictly longer than twice the API's
    /// timeout plus the clock skew, as the kit documents
    /// (docs/audit-and-repair.md, issue 34 D4; at exactly that sum the model
    /// checker's clock model finds a raise above live): a request is under
    /// [`SIM_API_TIMEOUT_MS`], a slow request's late write can move a
    /// counter's stamp back by one timeout, and two clocks differ by at most
    /// the schedule's skew span.
    fn grace(&self) -> i64 {
        2 * SIM_API_TIMEOUT_MS + self.p.skew.span() + 1
    }

    fn now_system(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.now_ms() as u64)
    }

    fn log(&self, what: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            trace
                .borrow_mut()
                .push(format!("{:>7}ms {}", self.now_ms() - EPOCH_MS, what()));
        }
    }

    fn done(&self) -> bool {
        self.clients_done.get() == self.p.clients
    }

    fn bump(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.borrow_mut());
    }

    fn scope(&self, n: u64) -> Scope {
        Scope::new(format!("acct{n}")).unwrap()
    }

    /// The request path a request starting now runs: during a rollout the
    /// new configuration with a chance rising from 0 to 1 over it, so old
    /// and new run side by side (a request in flight keeps the one it
    /// started with, as a Lambda invocation keeps its configuration).
    fn counter(&self) -> &Counter<Arc<MemoryStore>> {
        let Some(at) = self.changed.get() else {
            return &self.counters[0];
        };
        let (elapsed, rollout) = (at.elapsed().as_millis() as u64, self.p.rollout.as_millis() as u64);
        let new = elapsed >= rollout || self.picks.borrow_mut().range(0, rollout - 1) < elapsed;
        &self.counters[usize::from(new)]
    }

    /// The configuration the operator's tools read (the stack's, the new
    /// one from the change on).
    fn configured(&self) -> &Counter<Arc<MemoryStore>> {
        &self.counters[usize::from(self.changed.get().is_some())]
    }

    /// `counterctl deploy --param BeShardCount=n` (or `AdmissionMode=strict`)
    /// while the clients run, whatever is in flight, rolled out over
    /// [`Params::rollout`]. In strict admission creates that read under the
    /// old split and reserve beside creates under the new one may pass the
    /// limit (the window, [`Windows`], measured). After a switch to strict
    /// the operator waits out the API timeout (no best-effort request is
    /// left) and runs `audit --repair`: strict from when its raise landed.
    async fn change_config(&self) {
        let Some((kind, at)) = self.p.change() else { return };
        tokio::time::sleep(at).await;
        let in_flight = {
            let mut windows = self.windows.lock().unwrap();
            windows.open(kind, None, &self.store.tables());
            windows.in_flight.len()
        };
        self.changed.set(Some(tokio::time::Instant::now()));
        let reshard = kind == ConfigChange::Reshard;
        self.bump(|s| s.reshards_with_creates_in_flight += u64::from(reshard && in_flight > 0));
        self.log(|| {
            let (old, new) = (self.counters[0].layout().shards(), self.counters[1].layout().shards());
            format!(
                "{kind:?}: BeShardCount {old} -> {new}, {:?} -> {:?}, {in_flight} creates in flight, rollout {:?}",
                self.counters[0].admission(),
                self.counters[1].admission(),
                self.p.rollout
            )
        });
        tokio::time::sleep(self.p.rollout).await;
        self.windows.lock().unwrap().rolled_out(kind, || self.store.tables());
        self.log(|| format!("{kind:?} rolled out"));
        if kind != ConfigChange::Switch {
            return;
        }
        tokio::time::sleep(Duration::from_millis(SIM_API_TIMEOUT_MS as u64)).await;
        while self.best_effort_audits.get() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for n in 0..self.p.scopes {
            let scope = self.scope(n);
            loop {
                let outcome = self
                    .auditor()
                    .audit_scope(&scope, RepairMode::Apply, self.now_audit())
                    .await;
                self.log(|| format!("audit --repair {scope} after the switch: {outcome:?}"));
                match outcome {
                    Ok(audit) if audit.repaired || !audit.has_defect() => break,
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
        self.windows.lock().unwrap().switched(self.store.tables());
    }

    /// `counterctl scope set-limit` while the clients run: the override
    /// lands at once, creates in flight keep the limit they read.
    async fn limit_operator(&self) {
        let mut changes = self.p.limit_changes.clone();
        changes.sort_by_key(|(at, ..)| *at);
        let started = tokio::time::Instant::now();
        for (at, n, limit) in changes {
            tokio::time::sleep_until(started + at).await;
            let scope = self.scope(n);
            let in_flight = {
                let mut windows = self.windows.lock().unwrap();
                windows.open(ConfigChange::Limit, Some(scope.as_str()), &self.store.tables());
                windows.in_flight.len()
            };
            self.store.set_limit(scope.as_str(), limit);
            self.windows
                .lock()
                .unwrap()
                .limit_changed(scope.as_str(), &self.store.tables());
            self.bump(|s| s.limit_changes += 1);
            self.log(|| format!("limit of {scope} -> {limit:?} with {in_flight} creates in flight"));
        }
    }

    /// Every client, joined.
    fn clients(&self, n: u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + '_>> {
        Box::pin(async move {
            if n >= self.p.clients {
                return Ok(());
            }
            let (first, rest) = tokio::join!(self.client(n), self.clients(n + 1));
            first.and(rest)
        })
    }

    // ---- API clients -------------------------------------------------------

    /// Client `n`'s requests; done when they are, or at its first
    /// violation (so the other actors stop too).
    async fn client(&self, n: u64) -> Result<(), String> {
        if n >= self.p.clients {
            return Ok(());
        }
        let result = self.requests(n).await;
        self.clients_done.set(self.clients_done.get() + 1);
        result
    }

    async fn requests(&self, n: u64) -> Result<(), String> {
        let mut r = Rng::new(self.seed, 100 + n);
        let mut quiet = Rng::new(self.seed, 700 + n);
        let mut seq = Rng::new(self.seed, 1_100 + n);
        for _ in 0..self.p.ops_per_client {
            tokio::time::sleep(r.millis(0, 300)).await;
            if quiet.chance(self.p.quiet_per_mille) {
                let grace = self.grace() as u64;
                let pause = quiet.millis(grace + 100, 2 * grace + 200);
                self.bump(|s| s.quiet_moments += 1);
                tokio::time::sleep(pause).await;
            }
            let scope = self.scope(r.range(0, self.p.scopes - 1));
            let id = ResourceId::new(format!("w{}", r.range(0, self.p.ids - 1))).unwrap();
            let started = tokio::time::Instant::now();
            if r.chance(650) {
                let numbered = seq.chance(self.p.sequence_per_mille);
                let create = self.windows.lock().unwrap().start_create();
                let path = api::item_path(&scope, &id) + if numbered { "?sequence=true" } else { "" };
                let answer = self.call_api(n, "POST", &path).await;
                self.windows
                    .lock()
                    .unwrap()
                    .finish_create(create, || self.store.tables());
                if numbered {
                    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    self.bump(|s| s.longest_numbered_request_ms = s.longest_numbered_request_ms.max(ms));
                } else {
                    self.took(started)?;
                }
                let (status, code, body) = answer?;
                self.log(|| format!("client{n} create {path}: {status} {code} {}", body["sequence"]));
                match (status, code.as_str()) {
                    // Created; its number claimed, not claimed, or (the
                    // claim's answer lost) unknown and maybe still landing.
                    (201, _) | (503, "CreatedWithoutSequence" | "CreatedSequenceUnknown") => {
                        self.bump(|s| s.creates_ok += 1);
                        if numbered {
                            match body["sequence"].as_u64() {
                                Some(number) => {
                                    self.bump(|s| s.numbered_creates += 1);
                                    let key = (scope.to_string(), number);
                                    if let Some(other) = self.numbered.borrow_mut().insert(key, id.to_string()) {
                                        return Err(format!(
                                            "sequence number {number} of {scope} answered twice: to {other} and {id}"
                                        ));
                                    }
                                }
                                None => self.bump(|s| s.created_without_sequence += 1),
                            }
                        }
                        let tables = self.store.tables();
                        let live = live_count(&tables, scope.as_str());
                        let limit = tables.limits.get(scope.as_str()).copied().unwrap_or(self.p.limit);
                        if live > limit {
                            // Without strict mode concurrent creators may
                            // overshoot (DESIGN §5); counted, not a failure.
                            // In strict mode only within a configuration
                            // change's window: the checker fails the
                            // schedule at any other overshoot.
                            let strict = self.windows.lock().unwrap().mode != Some(Admission::BestEffort);
                            self.bump(|s| {
                                s.over_limit_creates += 1;
                                if strict {
                                    s.strict_creates_above_limit_in_a_window += 1;
                                } else {
                                    s.best_effort_overshoots += 1;
                                }
                            });
                        }
                    }
                    (409, "LimitExceeded") => self.bump(|s| s.limit_exceeded += 1),
                    (409, "AlreadyExists") => {}
                    (503, "Unavailable") => self.bump(|s| s.unavailable += 1),
                    _ => return Err(format!("create answered outside its contract: {status} {body}")),
                }
            } else {
                let path = api::item_path(&scope, &id);
                let answer = self.call_api(n, "DELETE", &path).await;
                self.took(started)?;
                let (status, code, body) = answer?;
                self.log(|| format!("client{n} delete {path}: {status} {code}"));
                match (status, code.as_str()) {
                    (204, _) => self.bump(|s| s.deletes_ok += 1),
                    (404, "NotFound") => {}
                    (503, "Unavailable") => self.bump(|s| s.unavailable += 1),
                    _ => return Err(format!("delete answered outside its contract: {status} {body}")),
                }
            }
        }
        Ok(())
    }

    /// One request to the example API (`handlers/api`, the real handler
    /// over the request path of this moment) from client `n`: its status,
    /// error code and JSON body. No answer may carry the store's words
    /// (DynamoDB's text goes to the log, never to the caller).
    async fn call_api(&self, n: u64, method: &str, path: &str) -> Result<(u16, String, Value), String> {
        let request = lambda_http::http::Request::builder()
            .method(method)
            .uri(path)
            .body(lambda_http::Body::Empty)
            .map_err(|e| e.to_string())?;
        let mut metrics = hybrid_counter::metrics::Metrics::new("simulation");
        let response = api::handle_measured(self.counter(), request, self.now_api(n), &mut metrics).await;
        let status = response.status().as_u16();
        let body: Value = match response.body() {
            lambda_http::Body::Empty => Value::Null,
            body => {
                serde_json::from_slice(body).map_err(|e| format!("{method} {path}: a body that is not JSON: {e}"))?
            }
        };
        self.bump(|s| s.answers_checked += 1);
        let text = body.to_string();
        if let Some(word) = STORE_WORDS.iter().find(|w| text.contains(*w)) {
            return Err(format!(
                "{method} {path} answered {status} with the store's words ({word:?}): {text}"
            ));
        }
        let code = body["error"].as_str().unwrap_or_default().to_owned();
        Ok((status, code, body))
    }

    /// Records how long a request took; one longer than the audit's grace
    /// period would break the premise of every held-back repair (the
    /// simulation's API timeout).
    fn took(&self, started: tokio::time::Instant) -> Result<(), String> {
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.bump(|s| s.longest_request_ms = s.longest_request_ms.max(ms));
        if ms >= SIM_API_TIMEOUT_MS as u64 {
            return Err(format!(
                "a request took {ms} ms, as long as the API's timeout of {SIM_API_TIMEOUT_MS} ms"
            ));
        }
        Ok(())
    }

    // ---- the operator's audit --repair, during the load ----------------------

    fn auditor(&self) -> Auditor<'_, Arc<MemoryStore>> {
        Auditor::new(&self.store, self.configured().admission())
            .with_grace(self.grace())
            .with_eventual_shards(self.p.eventual_shards)
            .with_best_effort_shards(self.configured().layout().shards())
    }

    /// A switch to strict admission has begun and its repair not landed:
    /// BE undercounts by design, a defect the audit and drift check report.
    fn switching(&self) -> bool {
        self.windows.lock().unwrap().mode.is_none()
    }

    /// `counterctl audit --repair` over every scope, again and again while
    /// the clients run: the real engine, with the sweep where the schedule
    /// says so.
    async fn operator_audits(&self) {
        let mut r = Rng::new(self.seed, 600);
        let (lo, hi) = self.p.audit_every;
        while !self.done() {
            self.bump(|s| s.audit_rounds += 1);
            for n in 0..self.p.scopes {
                let scope = self.scope(n);
                let auditor = self.auditor();
                let best_effort = u32::from(!auditor.admission().is_strict());
                self.best_effort_audits.set(self.best_effort_audits.get() + best_effort);
                let switching = self.switching();
                let outcome = auditor.audit_scope(&scope, RepairMode::Apply, self.now_audit()).await;
                self.best_effort_audits.set(self.best_effort_audits.get() - best_effort);
                self.log(|| format!("audit --repair {scope}: {outcome:?}"));
                match outcome {
                    Ok(audit) => {
                        // No defect exists at any instant: one reported is
                        // an unconfirmed finding (its drift exit code would
                        // page an operator for nothing). During a switch
                        // to strict BE undercounts, a real defect.
                        let switching = switching || self.switching();
                        if audit.has_defect() && !switching && self.drift_violation.borrow().is_none() {
                            *self.drift_violation.borrow_mut() = Some(format!(
                                "audit --repair under load reported a defect where there is none: {:?}",
                                audit.findings
                            ));
                        }
                        self.bump(|s| {
                            s.audits_during_load += 1;
                            s.repairs_during_load += u64::from(audit.repaired);
                            s.repairs_held_back_during_load += u64::from(audit.held_back());
                        })
                    }
                    Err(_) => self.bump(|s| s.audit_errors_during_load += 1),
                }
                if self.p.sweep_during_load
                    && let Ok(changes) = pending_changes(&self.store, &scope).await
                {
                    let swept = changes.len() as u64;
                    let report = self
                        .sweeper
                        .process(changes.into_iter().map(Ok), self.now_audit())
                        .await;
                    self.log(|| format!("sweep {scope}: {swept} pending -> {:?}", report.failure_reason));
                    self.bump(|s| s.swept_during_load += swept);
                }
            }
            tokio::time::sleep(r.millis(lo, hi)).await;
        }
    }

    /// Every scope's sequence is gapless (its numbers are exactly
    /// `1..=last`), and each number the API answered with is recorded for
    /// the item it answered it for.
    fn check_sequences(&self) -> Result<(), String> {
        let tables = self.store.tables();
        for (scope, last) in &tables.sequences {
            let numbers: Vec<u64> = tables
                .sequence_items
                .keys()
                .filter(|(s, _)| s == scope)
                .map(|(_, n)| *n)
                .collect();
            if numbers != (1..=*last).collect::<Vec<_>>() {
                return Err(format!(
                    "the sequence of {scope} is not gapless: last {last}, numbers {numbers:?}"
                ));
            }
        }
        for ((scope, number), id) in self.numbered.borrow().iter() {
            let owner = tables
                .sequence_items
                .get(&(scope.clone(), *number))
                .and_then(|e| e.owner.clone());
            if owner.as_deref() != Some(id.as_str()) {
                return Err(format!(
                    "{scope}'s number {number} was answered for {id}, but its item records {owner:?}"
                ));
            }
        }
        Ok(())
    }

    // ---- the scheduled drift check ------------------------------------------

    /// One run of the kit's drift check (`handlers/drift-check`) over every
    /// scope, report-only, dated by the operator's clock.
    async fn drift_check(&self) -> Result<hybrid_counter::audit::drift::DriftRun, String> {
        let config = hybrid_counter::CounterConfig {
            resources_table: "resources".into(),
            counters_table: "counters".into(),
            default_limit: Some(self.p.limit),
            eventual_shards: self.p.eventual_shards,
            best_effort_shards: self.configured().layout().shards(),
            admission: self.configured().admission(),
        };
        let (start, skew) = (self.start, self.p.skew.audit);
        let clock = hybrid_counter::Clock::new(move || {
            EPOCH_MS + i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX) + skew
        });
        let check = hybrid_counter::audit::drift::DriftCheck {
            grace: self.grace(),
            ..hybrid_counter::audit::drift::DriftCheck::new(hybrid_counter::audit::drift::DEFAULT_BUDGET)
        };
        let outcome = check
            .run(self.store.as_ref(), &config, &clock)
            .await
            .map_err(|e| format!("the drift check failed: {e}"))?;
        Ok(outcome.run)
    }

    /// The drift check on its schedule while the clients run: no defect
    /// exists at any instant (the checker sees to it), so a defect it
    /// reports is an unconfirmed finding reported as drift.
    async fn drift_checks(&self) {
        let mut r = Rng::new(self.seed, 900);
        while !self.done() {
            tokio::time::sleep(r.millis(100, 800)).await;
            let switching = self.switching();
            let Ok(run) = self.drift_check().await else { continue };
            let switching = switching || self.switching();
            self.log(|| format!("drift check: {run:?}"));
            self.bump(|s| {
                s.drift_runs += 1;
                s.drift_scopes_drifted += run.drifted;
                s.drift_scopes_held_back += run.held_back;
            });
            if run.defects > 0 && !switching && self.drift_violation.borrow().is_none() {
                *self.drift_violation.borrow_mut() = Some(format!(
                    "the drift check reported a defect under load where there is none (an unconfirmed finding \
                     reported as drift): {:?}",
                    run.drifted_scopes
                ));
            }
        }
    }

    // ---- the stream event source mapping ------------------------------------

    /// Plays the stream until the clients are done (phase one): every lane
    /// of every readable shard at once, a round at a time; a round ends
    /// when a shard splits or finishes, and the next one starts the lanes
    /// of the shards readable then (a child once its parent is finished).
    async fn mapping(&self) {
        let mut round = 0;
        while !self.done() {
            round += 1;
            let generation = self.shard_generation.get();
            let mut lanes: Vec<Task<'_>> = Vec::new();
            for (shard, closed) in self.readable() {
                for lane in 0..self.p.lanes {
                    let mut r = Rng::new(self.seed, 200 + 1_000 * round + u64::from(lane));
                    let at = Lane {
                        shard: shard.clone(),
                        lane,
                    };
                    lanes.push(Box::pin(async move {
                        // Each lane polls on its own beat, not in step
                        // with the others or with a split.
                        tokio::time::sleep(r.millis(0, 250)).await;
                        while !self.done() && self.shard_generation.get() == generation {
                            if !self.lane_step(&at, closed, &mut r).await {
                                if self.lanes_done.borrow().contains(&at) {
                                    return;
                                }
                                tokio::time::sleep(r.millis(50, 250)).await;
                            }
                            self.expire();
                        }
                    }));
                }
            }
            if lanes.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            join_all(lanes).await;
        }
    }

    /// The shards the mapping may read now (id, closed), by the runner's
    /// own rule ([`readable_shards`]: a child after its parent).
    fn readable(&self) -> Vec<(String, bool)> {
        let shards = self.store.stream_shards();
        let lineage: Vec<(&str, Option<&str>)> = shards
            .iter()
            .map(|s| (s.shard_id.as_str(), s.parent_shard_id.as_deref()))
            .collect();
        let finished = self.finished_shards.borrow();
        readable_shards(&lineage, |id| finished.contains(id))
            .into_iter()
            .map(|at| (shards[at].shard_id.clone(), shards[at].closed))
            .collect()
    }

    /// One pass over every lane of every readable shard, one after another
    /// (the drain); false when none read anything and no shard finished.
    async fn poll_all(&self, r: &mut Rng) -> bool {
        let generation = self.shard_generation.get();
        let mut progressed = false;
        for (shard, closed) in self.readable() {
            for lane in 0..self.p.lanes {
                let at = Lane {
                    shard: shard.clone(),
                    lane,
                };
                while self.lane_step(&at, closed, r).await {
                    progressed = true;
                }
            }
        }
        progressed || self.shard_generation.get() != generation
    }

    /// The stream splits one open shard now and then while the clients run.
    async fn stream_splitter(&self) {
        let mut r = Rng::new(self.seed, 800);
        let mut splits = self.p.splits.clone();
        splits.sort();
        let started = tokio::time::Instant::now();
        for at in splits {
            tokio::time::sleep_until(started + at).await;
            let open: Vec<String> = self
                .store
                .stream_shards()
                .into_iter()
                .filter(|s| !s.closed)
                .map(|s| s.shard_id)
                .collect();
            let shard = &open[r.range(0, open.len() as u64 - 1) as usize];
            let children = self.store.split_stream_shard(shard);
            self.bump(|s| s.stream_splits += 1);
            self.shard_generation.set(self.shard_generation.get() + 1);
            self.log(|| format!("stream: {shard} split into {children:?}"));
        }
    }

    /// AWS's promise at the function: a record delivered for the first
    /// time never comes after a later record of the same item (retries
    /// and duplicates deliver again what was delivered; DLQ replays are
    /// not deliveries of the mapping).
    fn check_delivery_order(&self, records: &[(Record, Value)]) {
        let mut delivered = self.delivered.borrow_mut();
        let Deliveries { seen, highest } = &mut *delivered;
        for (record, event) in records {
            let n: u64 = seq(record).parse().unwrap_or_default();
            if !seen.insert(n) {
                continue;
            }
            let item = (
                key_text(event, keys::SCOPE).to_owned(),
                key_text(event, keys::ID).to_owned(),
            );
            let top = highest.entry(item.clone()).or_insert(n);
            if n < *top && self.order_violation.borrow().is_none() {
                *self.order_violation.borrow_mut() = Some(format!(
                    "the stream function got record {n} of {item:?} after its record {top}: out of order"
                ));
            }
            *top = (*top).max(n);
        }
    }

    fn advance(&self, at: &Lane, sequence_number: &str) {
        self.checkpoints
            .borrow_mut()
            .insert(at.clone(), sequence_number.to_owned());
    }

    /// Reads lane `at` on from its checkpoint and plays one batch of its
    /// records; false when there was nothing to read (and, on a `closed`
    /// shard, the lane is done with it).
    async fn lane_step(&self, at: &Lane, closed: bool, r: &mut Rng) -> bool {
        let after = self.checkpoints.borrow().get(at).cloned();
        // One GetRecords page, short enough that serializing it for the
        // filter costs little (a window that ends at the page is still one).
        let records = match self.store.stream_read(&at.shard, after.as_deref(), 64) {
            Ok(records) => records,
            Err(err) => {
                // The checkpoint fell behind the trim horizon: those records
                // are lost to the mapping (and to every DLQ).
                self.log(|| format!("mapping {at:?}: {err}; resuming at the trim horizon"));
                let horizon = self.store.stream_read(&at.shard, None, 1).unwrap_or_default();
                let resume = horizon.first().map(seq).and_then(|s| previous_sequence(&s));
                self.bump(|s| s.lost_under_mapping += 1);
                match resume {
                    Some(resume) => self.advance(at, &resume),
                    None => {
                        self.checkpoints.borrow_mut().remove(at);
                    }
                }
                return true;
            }
        };
        if records.is_empty() {
            if closed && self.lanes_done.borrow_mut().insert(at.clone()) {
                let all = (0..self.p.lanes).all(|lane| {
                    self.lanes_done.borrow().contains(&Lane {
                        shard: at.shard.clone(),
                        lane,
                    })
                });
                if all {
                    self.finished_shards.borrow_mut().insert(at.shard.clone());
                    self.shard_generation.set(self.shard_generation.get() + 1);
                    self.log(|| format!("mapping: {} finished", at.shard));
                }
            }
            return false;
        }
        let all: Vec<Value> = records.iter().map(|r| serde_json::to_value(r).unwrap()).collect();
        let mine: Vec<usize> = (0..records.len())
            .filter(|&i| lane_of(&all[i], self.p.lanes) == at.lane)
            .collect();
        let events: Vec<Value> = mine.iter().map(|&i| all[i].clone()).collect();
        let window = next_window(&events, &filter::patterns(), self.p.batch_size);
        let batch: Vec<(Record, Value)> = window
            .deliver
            .iter()
            .map(|&i| (records[mine[i]].clone(), events[i].clone()))
            .collect();
        if !batch.is_empty() {
            self.play_batch(at, batch, r).await;
        }
        // Past the window; when it took every record of the lane read, past
        // the other lanes' records read too.
        let past = if window.end == mine.len() {
            &records[records.len() - 1]
        } else {
            &records[mine[window.end - 1]]
        };
        self.advance(at, &seq(past));
        true
    }

    async fn play_batch(&self, at: &Lane, batch: Vec<(Record, Value)>, r: &mut Rng) {
        let in_flight = self.batches_in_flight.get() + 1;
        self.batches_in_flight.set(in_flight);
        self.bump(|s| s.most_batches_in_flight = s.most_batches_in_flight.max(in_flight));
        self.play_parts(at, batch, r).await;
        self.batches_in_flight.set(self.batches_in_flight.get() - 1);
    }

    async fn play_parts(&self, at: &Lane, batch: Vec<(Record, Value)>, r: &mut Rng) {
        let mut parts = VecDeque::from([Part::new(batch)]);
        while let Some(mut part) = parts.pop_front() {
            if let Some(max_age) = self.p.max_record_age {
                let created: Vec<_> = part.records.iter().map(|(r, _)| Some(created_at(r))).collect();
                let expired = expired_prefix(&created, self.now_system(), max_age);
                if expired > 0 {
                    let old: Vec<_> = part.records.drain(..expired).collect();
                    self.give_up(at, &old, "RecordAgeExceeded", part.invocations);
                    if part.records.is_empty() {
                        continue;
                    }
                }
            }
            let events: Vec<Value> = part.records.iter().map(|(_, e)| e.clone()).collect();
            self.check_delivery_order(&part.records);
            let invocation = self.invoke_stream(&events, r).await;
            part.invocations += 1;
            let seqs: Vec<String> = part.records.iter().map(|(r, _)| seq(r)).collect();
            let verdict = stream_verdict(&invocation, &seqs, true);
            self.log(|| format!("mapping: batch {}..{} -> {verdict:?}", seqs[0], seqs[seqs.len() - 1]));
            match verdict {
                StreamVerdict::Success => {
                    self.advance(at, &seqs[seqs.len() - 1]);
                    if self.stormy.get() && r.chance(self.p.duplicate_per_mille) {
                        // At-least-once: the same batch again.
                        self.bump(|s| s.duplicate_deliveries += 1);
                        let again = self.invoke_stream(&events, r).await;
                        self.log(|| format!("mapping: duplicate delivery -> {again:?}"));
                    }
                }
                StreamVerdict::RetryFrom(index) => {
                    self.bump(|s| s.partial_failures += 1);
                    if index > 0 {
                        self.advance(at, &seqs[index - 1]);
                    }
                    part.records.drain(..index);
                    self.retry_or_give_up(at, part, &mut parts, r).await;
                }
                StreamVerdict::Failed { function_error, .. } => {
                    let split = if function_error && self.p.bisect {
                        part.bisect()
                    } else {
                        Err(part)
                    };
                    match split {
                        Ok((first, second)) => {
                            self.bump(|s| s.bisects += 1);
                            parts.push_front(second);
                            parts.push_front(first);
                        }
                        Err(part) => self.retry_or_give_up(at, part, &mut parts, r).await,
                    }
                }
            }
        }
    }

    async fn retry_or_give_up(&self, at: &Lane, mut part: Part, parts: &mut VecDeque<Part>, r: &mut Rng) {
        if may_retry(part.retries, self.p.max_retries) {
            part.retries += 1;
            parts.push_front(part);
            tokio::time::sleep(r.millis(10, 500)).await;
        } else {
            self.give_up(at, &part.records, "RetryAttemptsExhausted", part.invocations);
        }
    }

    /// The on-failure destination: DLQ1 gets where the records are (the
    /// lane's shard and the first and last sequence numbers, a range that
    /// holds the other lanes' records too), not the records.
    fn give_up(&self, at: &Lane, records: &[(Record, Value)], condition: &str, invocations: u32) {
        let plain: Vec<Record> = records.iter().map(|(r, _)| r.clone()).collect();
        let on_failure = OnFailureRecord::for_batch(
            FUNCTION_ARN,
            condition,
            invocations,
            STREAM_ARN,
            &at.shard,
            &plain,
            self.now_system(),
        );
        let body = serde_json::to_string(&on_failure).unwrap();
        self.log(|| {
            format!(
                "mapping: gave up ({condition}) on {}..{} -> DLQ1",
                on_failure.batch_info.start_sequence_number, on_failure.batch_info.end_sequence_number
            )
        });
        self.bump(|s| s.batches_to_dlq1 += 1);
        self.send_dlq1(body);
        if let Some((last, _)) = records.last() {
            self.advance(at, &seq(last));
        }
    }

    fn send_dlq1(&self, body: String) {
        let id = self.next_message.get();
        self.next_message.set(id + 1);
        self.dlq1.borrow_mut().push_back(Message {
            id: format!("m{id}"),
            body,
            receives: 0,
            visible_at: tokio::time::Instant::now(),
        });
    }

    /// The stream Lambda: `process_json` and its partial batch response,
    /// or a crash after part of the batch was processed.
    async fn invoke_stream(&self, events: &[Value], r: &mut Rng) -> Invocation {
        self.bump(|s| s.invocations += 1);
        if self.stormy.get() && r.chance(self.p.crash_per_mille) {
            let upto = r.range(0, events.len() as u64) as usize;
            self.processor.process_json(&events[..upto], self.now_stream()).await;
            self.bump(|s| s.handler_crashes += 1);
            return Invocation::error("Runtime.ExitError", "crashed mid-batch");
        }
        let report = self.processor.process_json(events, self.now_stream()).await;
        if report.batch_failure {
            return Invocation::error("Error", "a record without a sequence number failed");
        }
        Invocation::Response(serde_json::to_value(stream_counter::partial_batch_response(&report)).unwrap())
    }

    /// Trims records older than the retention.
    fn expire(&self) {
        if let Some(retention) = self.p.retention {
            let cutoff = self.now_ms() - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
            let n = self.store.trim_stream(cutoff);
            if n > 0 {
                self.log(|| format!("stream: {n} records expired"));
                self.bump(|s| s.records_expired += n as u64);
            }
        }
    }

    // ---- DLQ1 reprocessor, DLQ2, redrive -------------------------------------

    async fn reprocessor(&self) {
        let mut r = Rng::new(self.seed, 300);
        while !self.done() {
            self.reprocessor_step(&mut r).await;
            tokio::time::sleep(r.millis(100, 1_000)).await;
        }
    }

    /// One receive of up to 10 visible messages and their replay. Returns
    /// how many were received.
    async fn reprocessor_step(&self, r: &mut Rng) -> usize {
        let now = tokio::time::Instant::now();
        let mut batch = Vec::new();
        {
            let mut dlq1 = self.dlq1.borrow_mut();
            let mut kept = VecDeque::new();
            while let Some(mut m) = dlq1.pop_front() {
                if batch.len() < 10 && m.visible_at <= now {
                    m.receives += 1;
                    if m.receives > self.p.max_receive_count {
                        // The redrive policy moves it on this receive.
                        self.log(|| format!("DLQ1: {} -> DLQ2 after {} receives", m.id, m.receives - 1));
                        self.bump(|s| s.moved_to_dlq2 += 1);
                        self.dlq2.borrow_mut().push_back(m);
                    } else {
                        batch.push(m);
                    }
                } else {
                    kept.push_back(m);
                }
            }
            *dlq1 = kept;
        }
        if batch.is_empty() {
            return 0;
        }
        self.bump(|s| s.invocations += 1);
        let crash_at = (self.stormy.get() && r.chance(self.p.crash_per_mille)).then(|| r.range(0, batch.len() as u64));
        let mut failures = Vec::new();
        for (i, m) in batch.iter().enumerate() {
            if crash_at == Some(i as u64) {
                break;
            }
            let outcome = match OnFailureRecord::from_body(&m.body) {
                Ok(record) => {
                    let info = &record.batch_info;
                    let records =
                        self.store
                            .stream_range(&info.shard_id, &info.start_sequence_number, &info.end_sequence_number);
                    replay_records(&self.processor, info, records, self.now_stream()).await
                }
                Err(err) => Err(err),
            };
            self.log(|| format!("reprocessor: {} -> {:?}", m.id, outcome.as_ref().map(|_| "ok")));
            match outcome {
                Ok(_) => self.bump(|s| s.dlq1_replays_ok += 1),
                Err(_) => failures.push(json!({ "itemIdentifier": m.id })),
            }
        }
        let ids: Vec<String> = batch.iter().map(|m| m.id.clone()).collect();
        let invocation = match crash_at {
            Some(_) => {
                self.bump(|s| s.handler_crashes += 1);
                Invocation::error("Runtime.ExitError", "crashed mid-batch")
            }
            None => Invocation::Response(json!({ "batchItemFailures": failures })),
        };
        let verdict = sqs_verdict(&invocation, &ids, true);
        let visible_at = tokio::time::Instant::now() + Duration::from_secs(30);
        let received = batch.len();
        for mut m in batch {
            let delete = match &verdict {
                SqsVerdict::DeleteAll => true,
                SqsVerdict::DeleteAllBut(keep) => !keep.contains(&m.id),
                SqsVerdict::DeleteNone { .. } => false,
            };
            // A lost delete: the message comes back and is replayed again.
            let lost_delete = delete && self.stormy.get() && r.chance(self.p.duplicate_per_mille);
            if lost_delete {
                self.bump(|s| s.duplicate_deliveries += 1);
            }
            if !delete || lost_delete {
                m.visible_at = visible_at;
                self.dlq1.borrow_mut().push_back(m);
            }
        }
        received
    }

    /// The operator's redrive: DLQ2 back to DLQ1, receive counts reset.
    fn redrive(&self) {
        let moved: Vec<Message> = self.dlq2.borrow_mut().drain(..).collect();
        for m in moved {
            self.log(|| format!("redrive: {} -> DLQ1", m.id));
            self.bump(|s| s.redriven += 1);
            self.send_dlq1(m.body);
        }
    }

    async fn operator(&self) {
        let mut r = Rng::new(self.seed, 400);
        while !self.done() {
            tokio::time::sleep(r.millis(1_000, 5_000)).await;
            if r.chance(300) {
                self.redrive();
            }
        }
    }

    // ---- drain and final checks ----------------------------------------------

    /// Faults off; the mapping reads to the end, DLQ1 is worked off, DLQ2
    /// redriven once; repeated until nothing moves.
    async fn drain(&self) -> Result<(), String> {
        self.store.calm();
        self.stormy.set(false);
        let mut r = Rng::new(self.seed, 500);
        let mut redriven = false;
        for _ in 0..10_000 {
            // Retention keeps running: a range waiting in DLQ1 can expire.
            self.expire();
            let mut progressed = false;
            while self.poll_all(&mut r).await {
                progressed = true;
            }
            if self.reprocessor_step(&mut r).await > 0 {
                progressed = true;
            }
            if !self.dlq1.borrow().is_empty() {
                // Wait for the failed messages' visibility timeout.
                tokio::time::sleep(Duration::from_secs(31)).await;
                continue;
            }
            if !redriven && !self.dlq2.borrow().is_empty() {
                redriven = true;
                self.redrive();
                continue;
            }
            if !progressed {
                return Ok(());
            }
        }
        Err("the pipeline did not drain in 10,000 rounds".into())
    }

    fn final_checks(&self) -> Result<(), String> {
        if let Some(v) = self.store.violation() {
            return Err(format!("invariant broken {v}"));
        }
        if let Some(v) = self.order_violation.borrow().clone() {
            return Err(v);
        }
        if let Some(v) = self.drift_violation.borrow().clone() {
            return Err(v);
        }
        self.check_sequences()?;
        if !self.dlq1.borrow().is_empty() {
            return Err("DLQ1 is not empty after the drain".into());
        }
        // Every DLQ2 message must be unreplayable because its records left
        // the stream; anything else should have succeeded on redrive.
        for m in self.dlq2.borrow().iter() {
            let record = OnFailureRecord::from_body(&m.body).map_err(|e| e.to_string())?;
            let info = &record.batch_info;
            if self
                .store
                .stream_range(&info.shard_id, &info.start_sequence_number, &info.end_sequence_number)
                .is_ok()
            {
                return Err(format!(
                    "DLQ2 holds {}..{} although its records are still in the stream",
                    info.start_sequence_number, info.end_sequence_number
                ));
            }
        }
        // Nothing lost: every item still pending has lost its record.
        let tables = self.store.tables();
        let retained: Vec<Change> = self
            .store
            .stream_changes()
            .into_iter()
            .filter_map(|d| d.ok().map(|c| c.change))
            .collect();
        let mut pending = Vec::new();
        for ((scope, id), res) in tables.resources.iter().filter(|(_, r)| r.is_kits()) {
            let key = ResourceKey {
                scope: Scope::new(scope.clone()).unwrap(),
                id: ResourceId::new(id.clone()).unwrap(),
            };
            let incarnation = res.state.incarnation.clone();
            let wanted = if res.state.deleted {
                Change::SoftDelete { key, incarnation }
            } else if !res.state.counter_processed {
                Change::Insert { key, incarnation }
            } else {
                continue;
            };
            if retained.contains(&wanted) {
                return Err(format!(
                    "{scope}/{id} is still pending ({wanted:?}) although its record is in the stream and was processed or dead-lettered"
                ));
            }
            pending.push(wanted);
        }
        for n in 0..self.p.scopes {
            let scope = self.scope(n);
            let (be, ec) = counters(&tables, scope.as_str());
            let counts = scope_counts(&tables, scope.as_str());
            if pending.is_empty() && ec != counts.live as i64 {
                return Err(format!("after the drain EC {ec} != live {} in {scope}", counts.live));
            }
            match self.p.admission {
                Admission::BestEffort if be > counts.live as i64 => {
                    return Err(format!("BE {be} above live {} in {scope}", counts.live));
                }
                Admission::Strict if be < counts.live as i64 => {
                    return Err(format!("strict: BE {be} below live {} in {scope}", counts.live));
                }
                Admission::Strict if be > counts.live as i64 => {
                    self.bump(|s| s.strict_over_reserved_at_rest += 1);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `audit --repair` after the drain, for the expired ranges: the kit's
    /// engine sets EC to the processed count and BE to the live count;
    /// items whose records expired stay pending, so EC can still differ
    /// from live (a soft delete lost with its record keeps EC one above
    /// live, and audit sees no drift). The sweep runs each pending item
    /// through the processor as if its record had arrived and closes that
    /// gap. A repair held back (a request-path write younger than the grace
    /// period) is written by the operator's next run, after the grace.
    async fn repair(&self) -> Result<(), String> {
        let mut gap = false;
        for n in 0..self.p.scopes {
            let scope = self.scope(n);
            let mut audit = self
                .auditor()
                .audit_scope(&scope, RepairMode::Apply, self.now_audit())
                .await
                .map_err(|e| format!("audit of {scope} failed after the drain: {e}"))?;
            if audit.held_back() {
                self.log(|| format!("repair of {scope} held back: {:?}", audit.not_repaired));
                self.bump(|s| s.final_repairs_held_back += 1);
                // The next run: after the grace by the operator's clock,
                // which may be behind the clock that stamped the last write.
                tokio::time::sleep(Duration::from_millis((self.grace() + self.p.skew.span()) as u64)).await;
                audit = self
                    .auditor()
                    .audit_scope(&scope, RepairMode::Apply, self.now_audit())
                    .await
                    .map_err(|e| format!("audit of {scope} failed after the drain: {e}"))?;
                if audit.held_back() {
                    return Err(format!(
                        "the repair of {scope} is still not written after the grace period: {:?}",
                        audit.not_repaired
                    ));
                }
            }
            if let Some(Finding::EventualMismatch { eventual, processed }) = audit
                .findings
                .iter()
                .find(|f| matches!(f, Finding::EventualMismatch { .. }))
            {
                return Err(format!(
                    "audit found EC {eventual} != processed {processed} in {scope}: the invariant broke"
                ));
            }
            let (be, ec) = counters(&self.store.tables(), scope.as_str());
            if be != audit.counts.live as i64 {
                return Err(format!("after repair BE {be} != live {} in {scope}", audit.counts.live));
            }
            gap |= ec != audit.counts.live as i64;
        }
        if gap {
            self.bump(|s| {
                s.repair_left_ec_off += 1;
                s.first_repair_gap_seed.get_or_insert(self.seed);
            });
        }
        // The sweep.
        for n in 0..self.p.scopes {
            let scope = self.scope(n);
            let sweep = pending_changes(&self.store, &scope)
                .await
                .map_err(|e| format!("reading the pending items of {scope}: {e}"))?;
            let swept = sweep.len() as u64;
            let report = self.sweeper.process(sweep.into_iter().map(Ok), self.now_audit()).await;
            if let Some(reason) = report.failure_reason {
                return Err(format!("the repair sweep failed: {reason}"));
            }
            self.bump(|s| s.swept_items += swept);
        }
        let tables = self.store.tables();
        for n in 0..self.p.scopes {
            let scope = self.scope(n);
            let (be, ec) = counters(&tables, scope.as_str());
            let counts = scope_counts(&tables, scope.as_str());
            if (be, ec) != (counts.live as i64, counts.live as i64) || counts.pending_delete + counts.pending_create > 0
            {
                return Err(format!(
                    "after repair and sweep BE {be}, EC {ec}, counts {counts:?} in {scope}: not exact"
                ));
            }
        }
        if let Some(v) = self.store.violation() {
            return Err(format!("invariant broken {v}"));
        }
        // Exact and at rest: the drift check finds nothing.
        let run = self.drift_check().await?;
        if run.drifted + run.held_back + run.failed > 0 {
            return Err(format!("the drift check at rest, with no drift, reported {run:?}"));
        }
        Ok(())
    }
}

fn seq(record: &Record) -> String {
    sequence_number(record).to_owned()
}

fn previous_sequence(seq: &str) -> Option<String> {
    seq.parse::<u64>().ok()?.checked_sub(1).map(|n| n.to_string())
}

/// The stream function's deliveries so far: every sequence number, and
/// per item (`(scope, id)`) the highest one.
#[derive(Debug, Default)]
struct Deliveries {
    seen: BTreeSet<u64>,
    highest: BTreeMap<(String, String), u64>,
}

/// One future of a group joined by [`join_all`].
type Task<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

/// One lane of one shard of the stream mapping.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Lane {
    shard: String,
    lane: u32,
}

/// The lane of a record under a parallelization factor of `lanes`: by its
/// partition key (the scope), so "Lambda processes records with the same
/// partition key in order" ("Using AWS Lambda with Amazon DynamoDB",
/// concurrent reading of shards,
/// <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html>).
fn lane_of(event: &Value, lanes: u32) -> u32 {
    let scope = key_text(event, keys::SCOPE);
    let hash = scope.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (hash % u64::from(lanes.max(1))) as u32
}

/// A string key attribute of a record in its Lambda event form.
fn key_text<'a>(event: &'a Value, name: &str) -> &'a str {
    event["dynamodb"]["Keys"][name]["S"].as_str().unwrap_or_default()
}

/// Polls every future until all are done (the lanes of one round).
async fn join_all(mut futures: Vec<Task<'_>>) {
    std::future::poll_fn(|cx| {
        futures.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if futures.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

fn scope_counts(tables: &Tables, scope: &str) -> ScopeCounts {
    let mut counts = ScopeCounts::default();
    for ((s, _), r) in &tables.resources {
        if s == scope && r.is_kits() {
            counts.add(r.state.counter_processed, r.state.deleted);
        }
    }
    counts
}

fn live_count(tables: &Tables, scope: &str) -> u64 {
    scope_counts(tables, scope).live
}

/// `(BE, EC)` of a scope, each summed over its shards.
fn counters(tables: &Tables, scope: &str) -> (i64, i64) {
    let mut be = 0;
    let mut ec = 0;
    for ((s, name), count) in &tables.counters {
        if s == scope {
            if keys::is_best_effort_name(name) {
                be += count;
            } else if keys::is_eventual_name(name) {
                ec += count;
            }
        }
    }
    (be, ec)
}

/// A configuration change under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigChange {
    /// `counterctl scope set-limit`: lands at once (the limit is read per
    /// request from the table).
    Limit,
    /// `BeShardCount`, rolled out over [`Params::rollout`].
    Reshard,
    /// `AdmissionMode` best-effort to strict, rolled out over
    /// [`Params::rollout`], then `audit --repair`.
    Switch,
}

const CHANGES: [ConfigChange; 3] = [ConfigChange::Limit, ConfigChange::Reshard, ConfigChange::Switch];

/// What the windows of one kind of change measured.
#[derive(Debug, Default, Clone, Copy)]
struct WindowStats {
    opened: u64,
    /// The most creates in flight at a change, and at any instant of a
    /// window.
    most_at_change: u64,
    most_in_flight: u64,
    /// The most live items above what the scope allowed before the change.
    max_excess: u64,
}

impl WindowStats {
    fn add(&mut self, other: &WindowStats) {
        self.opened += other.opened;
        self.most_at_change = self.most_at_change.max(other.most_at_change);
        self.most_in_flight = self.most_in_flight.max(other.most_in_flight);
        self.max_excess = self.max_excess.max(other.max_excess);
    }
}

/// Strict admission's documented windows (docs/admission-and-sharding.md,
/// "Configuration changes"). A limit change lands at once: a create that
/// read the old limit may pass the new one, by at most the creates in
/// flight at the change. A `BeShardCount` change rolls out: from the change
/// until the last create that started before the rollout's end is done,
/// old and new splits reserve side by side, and live may pass the limit by
/// at most the most creates in flight at any instant of that window. An
/// `AdmissionMode` switch to strict: no strict check until the operator's
/// `audit --repair` after the rollout has landed (measured, not bounded).
/// Once a window closes, a scope left above its limit may only drain.
#[derive(Debug, Default)]
struct Windows {
    default_limit: u64,
    /// The checks in force: best-effort's, strict's, or none (a switch to
    /// strict admission under way).
    mode: Option<Admission>,
    next_create: u64,
    in_flight: BTreeSet<u64>,
    open: Vec<Window>,
    /// Scopes above their limit after a window closed: the most live items
    /// each may still hold (it only goes down).
    drain_cap: BTreeMap<String, u64>,
    /// Measured, per kind of change ([`CHANGES`]).
    measured: [WindowStats; 3],
}

#[derive(Debug)]
struct Window {
    kind: ConfigChange,
    /// `None`: every scope (a shard count or mode change).
    scope: Option<String>,
    /// The limit in force before a limit change (`None`: unchanged).
    old_limit: Option<u64>,
    /// The creates that may run the old configuration; the window closes
    /// with the last once the rollout is over.
    pending: BTreeSet<u64>,
    rolling: bool,
    at_change: u64,
    most_in_flight: u64,
}

impl Window {
    /// Rolled out, and every create that may have run the old
    /// configuration done (a switch's closes with its repair instead).
    fn rolled_out(&self) -> bool {
        !self.rolling && self.pending.is_empty() && self.kind != ConfigChange::Switch
    }

    /// The most live items above the limit before the change that the
    /// window allows: a limit change's, the creates in flight at it; a
    /// rollout's, the most creates in flight at any instant of it so far
    /// (those at the change alone do not bound it: issue 34 D3, seed
    /// 1592600407); a switch's is not bounded (checked no further).
    fn allowance(&self) -> u64 {
        match self.kind {
            ConfigChange::Limit => self.at_change,
            ConfigChange::Reshard => self.most_in_flight,
            ConfigChange::Switch => u64::MAX / 2,
        }
    }
}

impl Windows {
    fn stats(&mut self, kind: ConfigChange) -> &mut WindowStats {
        &mut self.measured[kind as usize]
    }

    fn start_create(&mut self) -> u64 {
        self.next_create += 1;
        self.in_flight.insert(self.next_create);
        let in_flight = self.in_flight.len() as u64;
        for w in &mut self.open {
            if w.rolling {
                w.pending.insert(self.next_create);
            }
            w.most_in_flight = w.most_in_flight.max(in_flight);
            let stats = &mut self.measured[w.kind as usize];
            stats.most_in_flight = stats.most_in_flight.max(in_flight);
        }
        self.next_create
    }

    /// A create ended; windows it was the last of close, and a scope they
    /// leave above its limit may from now on only drain.
    fn finish_create(&mut self, id: u64, tables: impl FnOnce() -> Tables) {
        self.in_flight.remove(&id);
        for w in &mut self.open {
            w.pending.remove(&id);
        }
        self.close(Window::rolled_out, tables);
    }

    fn close(&mut self, done: impl Fn(&Window) -> bool, tables: impl FnOnce() -> Tables) {
        if !self.open.iter().any(&done) {
            return;
        }
        let (closed, open): (Vec<Window>, Vec<Window>) = std::mem::take(&mut self.open).into_iter().partition(done);
        self.open = open;
        let tables = &tables();
        for w in closed {
            for scope in scopes_of(tables) {
                if w.scope.as_ref().is_some_and(|s| s != scope) {
                    continue;
                }
                let live = live_count(tables, scope);
                if live > self.limit_of(tables, scope) {
                    let cap = self.drain_cap.entry(scope.clone()).or_insert(0);
                    *cap = (*cap).max(live);
                }
            }
        }
    }

    /// A change of `scope`'s limit (`Some`), of the shard count or of the
    /// admission mode (`None`) is about to land.
    fn open(&mut self, kind: ConfigChange, scope: Option<&str>, tables: &Tables) {
        let old_limit = scope.map(|s| self.limit_of(tables, s));
        let at_change = self.in_flight.len() as u64;
        // Best-effort admission has no windows; a limit change lands at
        // once: only the creates in flight read the old one.
        match kind {
            ConfigChange::Switch => self.mode = None,
            _ if self.mode == Some(Admission::BestEffort) => return,
            ConfigChange::Limit if at_change == 0 => return,
            _ => {}
        }
        let stats = self.stats(kind);
        stats.opened += 1;
        stats.most_at_change = stats.most_at_change.max(at_change);
        stats.most_in_flight = stats.most_in_flight.max(at_change);
        self.open.push(Window {
            kind,
            scope: scope.map(str::to_owned),
            old_limit,
            pending: self.in_flight.clone(),
            rolling: kind != ConfigChange::Limit,
            at_change,
            most_in_flight: at_change,
        });
    }

    /// The rollout of `kind` is over: every request from now on runs the
    /// new configuration.
    fn rolled_out(&mut self, kind: ConfigChange, tables: impl FnOnce() -> Tables) {
        for w in self.open.iter_mut().filter(|w| w.kind == kind) {
            w.rolling = false;
        }
        self.close(Window::rolled_out, tables);
    }

    /// The operator's `audit --repair` after a switch to strict landed:
    /// strict's checks from now on.
    fn switched(&mut self, tables: Tables) {
        self.mode = Some(Admission::Strict);
        self.close(|w| w.kind == ConfigChange::Switch, || tables);
    }

    /// `scope`'s limit changed: left above it, the scope may only drain
    /// (besides what the creates in flight may still add).
    fn limit_changed(&mut self, scope: &str, tables: &Tables) {
        let live = live_count(tables, scope);
        if live > self.limit_of(tables, scope) {
            let cap = self.drain_cap.entry(scope.to_owned()).or_insert(0);
            *cap = (*cap).max(live);
        }
    }

    fn limit_of(&self, tables: &Tables, scope: &str) -> u64 {
        tables.limits.get(scope).copied().unwrap_or(self.default_limit)
    }

    /// `live <= limit` in strict admission, within the windows (measured
    /// during a switch, checked from when its repair landed).
    fn check(&mut self, tables: &Tables, scope: &str, live: u64) -> Result<(), String> {
        let limit = self.limit_of(tables, scope);
        let draining = limit.max(self.drain_cap.get(scope).copied().unwrap_or(0));
        let mut ceiling = draining;
        let mut windowed = false;
        for w in self
            .open
            .iter()
            .filter(|w| w.scope.as_deref().is_none_or(|s| s == scope))
        {
            windowed = true;
            let before = w.old_limit.unwrap_or(limit).max(draining);
            ceiling = ceiling.max(before + w.allowance());
            // How far the window's creates took the scope past what it
            // allowed before the change.
            let stats = &mut self.measured[w.kind as usize];
            stats.max_excess = stats.max_excess.max(live.saturating_sub(before));
        }
        if live > ceiling {
            return Err(format!(
                "{scope}: strict: live {live} above the limit {limit} (allowed {ceiling} within the documented windows)"
            ));
        }
        if !windowed {
            if live > limit {
                self.drain_cap.insert(scope.to_owned(), live);
            } else {
                self.drain_cap.remove(scope);
            }
        }
        Ok(())
    }
}

fn scopes_of(tables: &Tables) -> Vec<&String> {
    let mut scopes: Vec<&String> = tables.resources.keys().map(|(s, _)| s).collect();
    scopes.extend(tables.counters.keys().map(|(s, _)| s));
    scopes.sort();
    scopes.dedup();
    scopes
}

/// The invariants that hold after every write, for every scope: `EC ==
/// processed`; in best-effort admission `BE <= live`; in strict admission
/// every best-effort item covers the live items recorded on it (their
/// `be_shard`: the invariant strict admission rests on, so `BE >= live`)
/// and `live <= limit` within the documented windows ([`Windows`]); during
/// a switch from best-effort to strict admission only the first.
fn check_every_step(tables: &Tables, windows: &Mutex<Windows>) -> Result<(), String> {
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

/// A wide schedule's scope 0 starts near its limit: `p.prefilled` live,
/// counted items on the best-effort shards in turn, BE and EC equal to
/// them, written long before the grace period (set before the checker and
/// the faults).
async fn prefill(store: &MemoryStore, p: &Params) {
    use hybrid_counter::Store;
    use hybrid_counter::items::ResourceItem;
    use hybrid_counter::store::NewResource;
    if p.prefilled == 0 {
        return;
    }
    let layout = hybrid_counter::best_effort::Layout::new(p.best_effort_shards);
    let scope = Scope::new("acct0").unwrap();
    let mut on: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..p.prefilled {
        let be_shard = layout.shard(i as u32);
        let item = ResourceItem {
            scope: scope.clone(),
            id: ResourceId::new(format!("w{i}")).unwrap(),
            counter_processed: true,
            deleted: false,
            incarnation: format!("prefilled{i}"),
            created_at: EPOCH_MS - 60_000,
            be_shard,
        };
        store
            .put_resource(&NewResource {
                item,
                payload: Default::default(),
            })
            .await
            .unwrap();
        *on.entry(keys::best_effort_name(be_shard)).or_default() += 1;
    }
    for (name, count) in on {
        store.set_counter("acct0", &name, count);
    }
    store.set_counter("acct0", keys::EVENTUAL_NAME, p.prefilled as i64);
}

/// The kit's stream processor as the schedule configures it, its clock
/// `skew` off the true time.
fn processor(
    store: &Arc<MemoryStore>,
    p: &Params,
    seed: u64,
    start: tokio::time::Instant,
    skew: i64,
) -> Processor<Arc<MemoryStore>> {
    Processor::new(store.clone())
        .with_mode(p.mode)
        .with_eventual_shards(p.eventual_shards)
        .with_backoff(Backoff {
            base: Duration::from_millis(5),
            cap: Duration::from_millis(200),
            max_attempts: p.processor_attempts,
        })
        .with_seed(seed)
        .with_clock(hybrid_counter::Clock::new(move || {
            EPOCH_MS + i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX) + skew
        }))
}

/// Runs one schedule; `Err` carries the violation.
fn run_schedule(seed: u64, traced: bool) -> (Result<(), String>, Stats, Vec<String>) {
    run_with(seed, Params::draw(seed), traced)
}

/// [`run_once`], with a panic of any actor (the stream consumer's, say)
/// reported as the schedule's failure, so it is shrunk and named by seed.
fn run_with(seed: u64, p: Params, traced: bool) -> (Result<(), String>, Stats, Vec<String>) {
    let trace = traced.then(|| Rc::new(RefCell::new(Vec::new())));
    let kept = trace.clone();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_once(seed, p, trace)));
    let trace = kept.map(|t| t.take()).unwrap_or_default();
    match outcome {
        Ok((result, stats)) => (result, stats, trace),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            (Err(format!("panicked: {why}")), Stats::default(), trace)
        }
    }
}

/// One schedule of `seed` with knobs `p` (those of the seed, or simpler
/// ones while shrinking a failure).
fn run_once(seed: u64, p: Params, trace: Option<Rc<RefCell<Vec<String>>>>) -> (Result<(), String>, Stats) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Arc::new(MemoryStore::new());
        let start = tokio::time::Instant::now();
        store.set_clock(Arc::new(move || {
            EPOCH_MS + i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
        }));
        prefill(&store, &p).await;
        let windows = Arc::new(Mutex::new(Windows {
            default_limit: p.limit,
            mode: Some(p.first_admission()),
            ..Windows::default()
        }));
        let checked = windows.clone();
        store.set_checker(move |tables| check_every_step(tables, &checked));
        store.set_chaos(Chaos {
            seed: Rng::new(seed, 2).next(),
            faults: p.store_faults.clone(),
            transaction_latency: p.transaction_latency,
            page_latency: p.page_latency,
            page_size: p.page_size,
            counter_read_latency: p.counter_read_latency,
            resend_delay: p.resend_delay,
        });
        if p.foreign_item {
            store.put_foreign("acct0", "not-the-kits", Default::default());
        }
        let sim = Sim {
            seed,
            counters: [
                (p.first_admission(), p.best_effort_shards),
                (p.admission, p.reshard.map_or(p.best_effort_shards, |(n, _)| n)),
            ]
            .map(|(admission, shards)| {
                Counter::new(store.clone(), p.limit)
                    .with_admission(admission)
                    .with_best_effort_shards(shards)
                    .with_seed(Rng::new(seed, 3).next() ^ u64::from(shards))
            }),
            changed: Cell::new(None),
            picks: RefCell::new(Rng::new(seed, 16)),
            best_effort_audits: Cell::new(0),
            windows,
            processor: processor(&store, &p, Rng::new(seed, 4).next(), start, p.skew.stream),
            sweeper: processor(&store, &p, Rng::new(seed, 12).next(), start, p.skew.audit),
            store,
            p,
            start,
            checkpoints: RefCell::new(BTreeMap::new()),
            lanes_done: RefCell::new(BTreeSet::new()),
            finished_shards: RefCell::new(BTreeSet::new()),
            shard_generation: Cell::new(0),
            batches_in_flight: Cell::new(0),
            delivered: RefCell::new(Deliveries::default()),
            order_violation: RefCell::new(None),
            drift_violation: RefCell::new(None),
            numbered: RefCell::new(BTreeMap::new()),
            dlq1: RefCell::new(VecDeque::new()),
            dlq2: RefCell::new(VecDeque::new()),
            next_message: Cell::new(0),
            stormy: Cell::new(true),
            clients_done: Cell::new(0),
            stats: RefCell::new(Stats::default()),
            trace,
        };
        let (mut result, ..) = tokio::join!(
            sim.clients(0),
            sim.mapping(),
            sim.reprocessor(),
            sim.operator(),
            sim.operator_audits(),
            sim.change_config(),
            sim.limit_operator(),
            sim.stream_splitter(),
            sim.drift_checks()
        );
        if result.is_ok() {
            result = sim.drain().await;
        }
        if result.is_ok() {
            result = sim.final_checks();
        }
        if result.is_ok() {
            result = sim.repair().await;
        }
        let mut stats = sim.stats.borrow().clone();
        stats.schedules = 1;
        match sim.p.admission {
            Admission::Strict => stats.strict_schedules = 1,
            Admission::BestEffort => stats.best_effort_schedules = 1,
        }
        stats.per_record_schedules = u64::from(sim.p.mode == Mode::PerRecord);
        stats.sharded_schedules = u64::from(sim.p.eventual_shards > 1);
        stats.best_effort_sharded_schedules = u64::from(sim.p.best_effort_shards > 1);
        stats.resharded_schedules = u64::from(sim.p.reshard.is_some());
        stats.switched_schedules = u64::from(sim.p.switch.is_some());
        if sim.p.change().is_some() {
            stats.longest_rollout_ms = sim.p.rollout.as_millis() as u64;
        }
        stats.lock_conflicts = sim.store.lock_conflicts();
        stats.mixed_cancellations = sim.store.mixed_cancellations();
        stats.wide_schedules = u64::from(sim.p.prefilled > 0);
        stats.torn_read_schedules = u64::from(!sim.p.counter_read_latency.is_zero());
        stats.parallel_schedules = u64::from(sim.p.lanes > 1);
        stats.skewed_schedules = u64::from(sim.p.skew.span() > 0);
        stats.widest_skew_ms = sim.p.skew.span() as u64;
        stats.windows = sim.windows.lock().unwrap().measured;
        for ((op, fault), n) in sim.store.injected_faults() {
            *stats.store_faults.entry(format!("{op:?}/{fault:?}")).or_default() += n;
        }
        (result, stats)
    })
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        let v = v.trim();
        v.strip_prefix("0x")
            .map_or_else(|| v.parse(), |hex| u64::from_str_radix(hex, 16))
            .unwrap_or_else(|_| panic!("{name} must be an integer, got {v:?}"))
    })
}

/// Variants of `p` with one knob turned down: fewer clients, operations,
/// ids and scopes, one fault kind switched off, no crashes, duplicates,
/// expiry or latency. The failure's own interleaving changes with them,
/// as in any parameter shrinking.
fn simpler(p: &Params) -> Vec<Params> {
    let mut out = Vec::new();
    let mut variant = |change: &dyn Fn(&mut Params)| {
        let mut q = p.clone();
        change(&mut q);
        if format!("{q:?}") != format!("{p:?}") {
            out.push(q);
        }
    };
    variant(&|q| q.clients = (q.clients - 1).max(1));
    variant(&|q| q.ops_per_client = (q.ops_per_client / 2).max(1));
    variant(&|q| q.ops_per_client = (q.ops_per_client - 1).max(1));
    variant(&|q| q.ids = (q.ids - 1).max(1));
    variant(&|q| q.scopes = 1);
    variant(&|q| q.reshard = None);
    variant(&|q| q.switch = None);
    variant(&|q| q.rollout = Duration::ZERO);
    variant(&|q| q.best_effort_shards = 1);
    for at in 0..p.store_faults.len() {
        variant(&|q| q.store_faults[at].2 = 0);
    }
    variant(&|q| q.crash_per_mille = 0);
    variant(&|q| q.duplicate_per_mille = 0);
    variant(&|q| q.retention = None);
    variant(&|q| q.max_record_age = None);
    variant(&|q| q.bisect = false);
    variant(&|q| q.transaction_latency = Duration::ZERO);
    variant(&|q| q.page_latency = Duration::ZERO);
    variant(&|q| q.sweep_during_load = false);
    variant(&|q| q.foreign_item = false);
    variant(&|q| q.counter_read_latency = Duration::ZERO);
    variant(&|q| q.limit_changes.clear());
    variant(&|q| q.quiet_per_mille = 0);
    variant(&|q| q.lanes = 1);
    variant(&|q| q.splits.clear());
    variant(&|q| q.skew = Skew::default());
    variant(&|q| q.sequence_per_mille = 0);
    out
}

/// Greedy shrinking: takes the first simpler variant that still fails
/// until none does, at most `budget` runs. Deterministic, so replaying the
/// seed shrinks to the same schedule.
fn shrink(p: Params, budget: usize, fails: impl Fn(&Params) -> bool) -> (Params, usize) {
    let (mut current, mut runs) = (p, 0);
    'outer: loop {
        for candidate in simpler(&current) {
            if runs == budget {
                break 'outer;
            }
            runs += 1;
            if fails(&candidate) {
                current = candidate;
                continue 'outer;
            }
        }
        break;
    }
    (current, runs)
}

/// Panics with the failure of `seed`, shrunk: the simplest knobs that still
/// fail, their trace's last events, and the replay command.
fn fail_with_shrunk(seed: u64, why: &str) -> ! {
    let budget = env_u64("SIM_SHRINK_RUNS").map_or(300, |n| n as usize);
    let (shrunk, runs) = shrink(Params::draw(seed), budget, |p| {
        run_with(seed, p.clone(), false).0.is_err()
    });
    let (result, _, trace) = run_with(seed, shrunk.clone(), true);
    let tail = trace.len().saturating_sub(80);
    panic!(
        "simulation seed {seed} failed: {why}\nshrunk in {runs} runs to {shrunk:#?}\nwhich fails with: {}\nits last \
         events:\n{}\n{}",
        result.err().unwrap_or_default(),
        trace[tail..].join("\n"),
        replay_hint(seed)
    );
}

/// Runs seeds `base..base + schedules` on `threads` threads, each taking
/// the next seed in turn; their totals, and the lowest failing seed with
/// its violation. Once a seed fails no thread starts a higher one, and
/// every lower one still runs, so the seed reported is the lowest that
/// fails, whatever the threads' timing.
fn run_seeds(base: u64, schedules: u64, threads: u64) -> (Stats, Option<(u64, String)>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let next = AtomicU64::new(base);
    let failed: Mutex<Option<(u64, String)>> = Mutex::new(None);
    let totals: Vec<Stats> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut total = Stats::default();
                    loop {
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        let lowest_failure = failed.lock().unwrap().as_ref().map(|(s, _)| *s);
                        if seed >= base + schedules || lowest_failure.is_some_and(|f| seed > f) {
                            return total;
                        }
                        let (result, stats, _) = run_schedule(seed, false);
                        match result {
                            Ok(()) => total.add(&stats),
                            Err(why) => {
                                let mut failed = failed.lock().unwrap();
                                if failed.as_ref().is_none_or(|(s, _)| seed < *s) {
                                    *failed = Some((seed, why));
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker thread"))
            .collect()
    });
    let mut total = Stats::default();
    for part in totals.iter().filter(|t| t.schedules > 0) {
        total.add(part);
    }
    (total, failed.into_inner().unwrap())
}

fn replay_hint(seed: u64) -> String {
    format!("replay: SIM_SEED={seed} cargo test -p esm-runner --test simulation -- --nocapture")
}

#[test]
fn seeded_schedules_keep_counters_exact_under_faults() {
    if let Some(seed) = env_u64("SIM_SEED") {
        let (result, stats, trace) = run_schedule(seed, true);
        for line in &trace {
            println!("{line}");
        }
        println!("{:#?}\n{stats:#?}", Params::draw(seed));
        if let Err(why) = result {
            fail_with_shrunk(seed, &why);
        }
        return;
    }
    let schedules = env_u64("SIM_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
    let base = env_u64("SIM_BASE_SEED").unwrap_or(DEFAULT_BASE_SEED);
    let threads = env_u64("SIM_THREADS")
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
        .clamp(1, schedules.max(1));
    let started = std::time::Instant::now();
    let (total, failed) = run_seeds(base, schedules, threads);
    if let Some((seed, why)) = failed {
        fail_with_shrunk(seed, &why);
    }
    let elapsed = started.elapsed();
    println!(
        "simulation: {} schedules from seed {base} in {elapsed:.1?} on {threads} threads ({:.0} schedules/s)\n{total:#?}",
        total.schedules,
        total.schedules as f64 / elapsed.as_secs_f64().max(1e-9)
    );
    println!(
        "simulation admission: {} strict schedules, 0 strict overshoots outside the windows, {} creates above the \
         limit within them; {} best-effort schedules, {} best-effort overshoots",
        total.strict_schedules,
        total.strict_creates_above_limit_in_a_window,
        total.best_effort_schedules,
        total.best_effort_overshoots
    );
    println!(
        "simulation operator: {} limit overrides changed under load, {} shard count changes met creates in flight, \
         {} switches to strict admission; rollouts up to {} ms (API timeout {SIM_API_TIMEOUT_MS} ms)",
        total.limit_changes, total.reshards_with_creates_in_flight, total.switched_schedules, total.longest_rollout_ms
    );
    for kind in CHANGES {
        let w = total.windows[kind as usize];
        println!(
            "simulation strict windows of {kind:?}: {} opened, at most {} creates in flight at the change, at most {} at \
             any instant of a window, at most {} live above the limit before the change",
            w.opened, w.most_at_change, w.most_in_flight, w.max_excess
        );
    }
    println!(
        "simulation store: {} schedules with counter Queries read item by item, {} cancellations with mixed reasons, \
         {} lock conflicts; {} wide schedules (4 to 16 clients, limits 10 to 100); {} quiet moments under load",
        total.torn_read_schedules,
        total.mixed_cancellations,
        total.lock_conflicts,
        total.wide_schedules,
        total.quiet_moments
    );
    println!(
        "simulation consumer: {} per-record schedules, {} batched; {} with a sharded eventual counter",
        total.per_record_schedules,
        total.schedules - total.per_record_schedules,
        total.sharded_schedules
    );
    println!(
        "simulation stream: {} schedules with 2 to 10 lanes per shard, {} shard splits under load, at most {} batches \
         in flight at once; each item's records reached the function in order",
        total.parallel_schedules, total.stream_splits, total.most_batches_in_flight
    );
    println!(
        "simulation drift check under load: {} runs, {} scopes drifted (none a defect), {} held back (in motion or \
         not yet repairable); at rest after the repair: none",
        total.drift_runs, total.drift_scopes_drifted, total.drift_scopes_held_back
    );
    println!(
        "simulation API: {} answers checked for the store's words (none), {} numbered creates, {} created without a \
         number, longest numbered request {} ms; every sequence gapless",
        total.answers_checked,
        total.numbered_creates,
        total.created_without_sequence,
        total.longest_numbered_request_ms
    );
    println!(
        "simulation clocks: {} schedules with skewed clocks (API clients, stream, audit), widest {} ms apart; the \
         audit's grace is just over twice the API timeout plus the skew",
        total.skewed_schedules, total.widest_skew_ms
    );
    println!(
        "simulation best-effort shards: {} schedules with 2 to 8, {} changing BeShardCount under load",
        total.best_effort_sharded_schedules, total.resharded_schedules
    );
    println!(
        "simulation audits under load: {} audit --repair runs, {} repairs written, {} held back, {} failed on a store \
         error; {} items swept under load; at least {} rounds over every scope in each schedule, three or more in {}; \
         longest request {} ms (API timeout {SIM_API_TIMEOUT_MS} ms)",
        total.audits_during_load,
        total.repairs_during_load,
        total.repairs_held_back_during_load,
        total.audit_errors_during_load,
        total.swept_during_load,
        total.audit_rounds,
        total.schedules_with_three_audit_rounds,
        total.longest_request_ms
    );
    if schedules >= 2 {
        assert!(
            total.strict_schedules > 0 && total.best_effort_schedules > 0,
            "both admission modes run: {total:?}"
        );
    }
    if schedules >= 100 {
        assert!(
            total.best_effort_sharded_schedules > 0 && total.resharded_schedules > 0,
            "sharded best-effort counters and BeShardCount changes run: {total:?}"
        );
        let [_, reshard, switch] = total.windows;
        assert!(
            total.switched_schedules > 0
                && switch.opened == total.switched_schedules
                && reshard.opened > 0
                && total.longest_rollout_ms > 3 * SIM_API_TIMEOUT_MS as u64,
            "BeShardCount and AdmissionMode changes roll out over several API timeouts: {total:?}"
        );
        assert!(
            total.limit_changes > 0
                && total.reshards_with_creates_in_flight > 0
                && total.wide_schedules > 0
                && total.torn_read_schedules > 0
                && total.mixed_cancellations > 0,
            "limit and shard count changes under load, wide schedules, torn reads and mixed reasons run: {total:?}"
        );
        assert!(
            total.parallel_schedules > 0 && total.stream_splits > 0 && total.most_batches_in_flight > 1,
            "stream lanes and shard splits run, batches concurrently: {total:?}"
        );
        assert!(
            total.skewed_schedules > 0 && total.widest_skew_ms > SIM_MAX_SKEW_MS as u64 / 2,
            "skewed clocks run: {total:?}"
        );
        assert!(
            total.drift_runs > 0 && total.drift_scopes_held_back > 0,
            "the drift check runs under load and meets scopes in motion: {total:?}"
        );
        assert!(
            total.numbered_creates > 0 && total.answers_checked > 0,
            "numbered creates run through the API: {total:?}"
        );
    }
}

#[test]
fn the_same_seed_replays_the_same_schedule() {
    for seed in [1, 2, 3, 0xDEAD_BEEF] {
        let (first, _, a) = run_schedule(seed, true);
        let (second, _, b) = run_schedule(seed, true);
        assert_eq!(first, second, "seed {seed}");
        // Incarnations are random UUIDs; everything else must repeat.
        let scrub = |t: &[String]| -> Vec<String> {
            t.iter()
                .map(|l| {
                    if l.contains("create") {
                        l.split(": ").next().unwrap().to_owned()
                    } else {
                        l.clone()
                    }
                })
                .collect()
        };
        assert_eq!(scrub(&a), scrub(&b), "seed {seed}: {}", replay_hint(seed));
        assert!(!a.is_empty());
    }
}

#[test]
fn shrinking_keeps_the_failure_and_drops_every_knob_it_does_not_need() {
    // A stand-in failure: two clients and 500s on transactions.
    let needs = |p: &Params| {
        p.clients >= 2
            && p.store_faults
                .iter()
                .any(|(op, fault, rate)| *op == Op::Transact && *fault == Fault::Unavailable && *rate > 0)
    };
    let seed = (0..)
        .find(|seed| {
            let p = Params::draw(*seed);
            needs(&p) && p.clients == 3 && p.ops_per_client > 4 && p.crash_per_mille > 0
        })
        .unwrap();
    let (shrunk, runs) = shrink(Params::draw(seed), 300, needs);
    assert!(needs(&shrunk), "the failure is kept: {shrunk:#?}");
    assert!(runs < 300, "a fixpoint within the budget");
    assert_eq!(
        (shrunk.clients, shrunk.ops_per_client, shrunk.ids, shrunk.scopes),
        (2, 1, 1, 1)
    );
    let faulty: Vec<_> = shrunk.store_faults.iter().filter(|(_, _, rate)| *rate > 0).collect();
    assert_eq!(faulty, [&(Op::Transact, Fault::Unavailable, faulty[0].2)]);
    assert_eq!((shrunk.crash_per_mille, shrunk.duplicate_per_mille), (0, 0));
    assert!(shrunk.retention.is_none() && shrunk.max_record_age.is_none() && !shrunk.bisect);
    // Deterministic: the same failure shrinks to the same knobs.
    let (again, _) = shrink(Params::draw(seed), 300, needs);
    assert_eq!(format!("{again:?}"), format!("{shrunk:?}"));
}
