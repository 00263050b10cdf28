//! Fault injection: the operations a test aims faults at ([`Op`]), what a
//! fault does ([`Fault`]), and the seeded [`Chaos`] that draws faults and
//! latencies per call, so every interleaving of a simulation comes from
//! one seed.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The operations of the store roles ([`crate::store`]), to aim faults at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    ReadCounters,
    PutResource,
    AddBestEffort,
    /// Strict admission's conditional BE increment.
    ReserveBestEffort,
    GetResource,
    MarkDeleted,
    Transact,
    /// The consistent Query of a scope's counter items.
    CounterItems,
    /// One page of the paginated Query of a scope's resource items.
    ScopeItems,
    /// An operator's conditional write of counters (a repair).
    SetCounters,
    /// A strict raise of the best-effort shards (a repair that fences).
    RaiseBestEffort,
    /// Reading a sequence-number range back from the stream (a replay).
    StreamRange,
    /// The consistent read of a gapless sequence's last number.
    LastSequence,
    /// The transaction that claims a sequence number (same faults as
    /// [`Op::Transact`]; see [`SequenceStore::claim_sequence`](crate::store::SequenceStore::claim_sequence)).
    ClaimSequence,
    /// The consistent read of one numbered sequence item.
    SequenceEntry,
    /// One page of the drift check's Scan of the counters table's keys.
    ScanCounterKeys,
    /// Reading or writing the drift check's state item.
    DriftState,
    /// The Scan of every limit override (the drift check's limits file).
    ScanLimits,
    /// Reading or writing the layout record ([`crate::layout`]).
    Layout,
    /// One transaction of a limit write over a scope's counters keys
    /// (`limit set`, [`super::MemoryStore::set_scope_limit`]).
    LimitWrite,
}

/// What an injected fault does to the next call of its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// A 500 before anything was written.
    Unavailable,
    /// Throttled before anything was written.
    Throttled,
    /// For transactions: cancelled with `TransactionConflict`; otherwise
    /// like [`Fault::Throttled`].
    Conflict,
    /// For transactions: the counter item is held by another transaction,
    /// and every resource item's own condition is evaluated: cancelled with
    /// `TransactionConflict` on the counter and `ConditionalCheckFailed` or
    /// `None` on each item, the mixed reasons DynamoDB sends. Nothing is
    /// written. Elsewhere like [`Fault::Conflict`].
    ConflictOnCounter,
    /// The service refuses the request itself (`ValidationException`).
    Rejected,
    /// The write is applied, then the caller gets a 500 (an ambiguous error).
    AppliedThenUnavailable,
    /// The write is applied, the answer is lost, and the SDK's own retry
    /// fails the write's condition: the caller sees `ConditionFailed`.
    AppliedThenConditionFailed,
    /// The write is applied and its answer lost. For a write the production
    /// store lets the SDK re-send ([`crate::store::Resend::BySdk`]) the
    /// next successful-call hook runs (other actors), the re-send waits up to
    /// [`Chaos::resend_delay`], then is applied again if its condition holds
    /// and the caller gets its answer. For a write sent once
    /// ([`crate::store::Resend::Never`]) the hook runs and the caller gets a
    /// 500. Aimed at [`Op::PutResource`] and [`Op::MarkDeleted`].
    AppliedThenResent,
    /// For [`Op::StreamRange`]: the read stops early and returns only the
    /// first part of the range, as a reader that gives up after empty
    /// `GetRecords` pages, or at a shard it takes for closed, does.
    ShortRead,
}

/// Seeded faults and latencies for simulations: faults are drawn per call
/// from one generator, and a transaction holds its items between prepare
/// and commit for up to [`Chaos::transaction_latency`]. Without chaos every
/// call completes without awaiting, which keeps unit tests free of a clock.
#[derive(Debug, Clone, Default)]
pub struct Chaos {
    pub seed: u64,
    /// `(op, fault, per_mille)`: each call of `op` draws `fault` with this
    /// chance, tried in order (the first fault drawn wins).
    pub faults: Vec<(Op, Fault, u32)>,
    /// A transaction holds its items for up to this long (uniform) between
    /// prepare and commit; zero commits at once.
    pub transaction_latency: Duration,
    /// A paginated Query of a scope's items waits up to this long (uniform)
    /// between two pages, so other writers land in the middle of one read.
    pub page_latency: Duration,
    /// A write answered [`Fault::AppliedThenResent`] is sent again after up
    /// to this long (uniform; zero: after one yield).
    pub resend_delay: Duration,
    /// Items per page of that Query (at least 1).
    pub page_size: usize,
    /// The Query of a scope's counter items ([`RequestStore::read_counters`](crate::store::RequestStore::read_counters),
    /// [`AuditStore::counter_items`](crate::store::AuditStore::counter_items)) waits up to this long (uniform) after each
    /// item it reads: DynamoDB's Query is read-committed item by item, not
    /// a snapshot, so a request or an audit can see a multi-item repair or
    /// a stream transaction half applied. Zero reads all items at once.
    pub counter_read_latency: Duration,
}

/// The faults of one store: queued ones ([`super::MemoryStore::inject`]),
/// the chaos they are drawn from, and how many fired.
#[derive(Default)]
pub(super) struct Faults {
    queued: VecDeque<(Op, Fault)>,
    /// The chaos and its generator; the generator also draws the latencies.
    pub(super) chaos: Option<(Chaos, fastrand::Rng)>,
    injected: BTreeMap<(Op, Fault), u64>,
}

impl Faults {
    /// Queues `fault` for the next call of `op`.
    pub(super) fn inject(&mut self, op: Op, fault: Fault) {
        self.queued.push_back((op, fault));
    }

    /// Draws faults and latencies from `chaos` from now on.
    pub(super) fn set_chaos(&mut self, chaos: Chaos) {
        let rng = fastrand::Rng::with_seed(chaos.seed);
        self.chaos = Some((chaos, rng));
    }

    /// Stops drawing faults; latencies stay.
    pub(super) fn calm(&mut self) {
        if let Some((chaos, _)) = self.chaos.as_mut() {
            chaos.faults.clear();
        }
    }

    /// Faults fired so far, by operation and kind.
    pub(super) fn injected(&self) -> &BTreeMap<(Op, Fault), u64> {
        &self.injected
    }

    /// The fault for this call of `op`: a queued one first, else a drawn one.
    pub(super) fn next(&mut self, op: Op) -> Option<Fault> {
        let queued = self
            .queued
            .iter()
            .position(|(o, _)| *o == op)
            .and_then(|at| self.queued.remove(at))
            .map(|(_, f)| f);
        let fault = queued.or_else(|| {
            let (chaos, rng) = self.chaos.as_mut()?;
            chaos
                .faults
                .iter()
                .find(|(o, _, per_mille)| *o == op && rng.u32(0..1000) < *per_mille)
                .map(|(_, f, _)| *f)
        });
        if let Some(f) = fault {
            *self.injected.entry((op, f)).or_default() += 1;
        }
        fault
    }
}

/// How `limit set` transactions over several keys ended, as their caller
/// saw them (counted beside the faults injected into them): refused by their condition (another write since), or their
/// outcome unknown (failed before or after they applied), each for the
/// first transaction of an attempt and the later ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitOutcomes {
    pub first_refused: u64,
    pub first_unknown: u64,
    pub later_refused: u64,
    pub later_unknown: u64,
}
