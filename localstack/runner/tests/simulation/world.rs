//! The world of one schedule ([`Sim`]): the store, the request path before
//! and after a configuration change, the mapping's checkpoints, the DLQs,
//! every actor's clock, and each scope's keys under the schedule's layout.
//! The actors' clocks are skewed by up to 2 s against each other, and the
//! audit's grace is just over twice the API's timeout plus that skew, the
//! rule the kit documents.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hybrid_counter::memory::MemoryStore;
use hybrid_counter::stream::Processor;
use hybrid_counter::{Counter, CounterConfig, Scope};

use crate::lanes::{Deliveries, Lane};
use crate::params::{Params, SIM_API_TIMEOUT_MS};
use crate::rng::Rng;
use crate::stats::Stats;
use crate::windows::Windows;

/// Logical epoch of the simulation's clock (tokio's paused time is added).
pub(crate) const EPOCH_MS: i64 = 1_700_000_000_000;

/// An SQS message of DLQ1 or DLQ2.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub(crate) id: String,
    pub(crate) body: String,
    pub(crate) receives: u32,
    pub(crate) visible_at: tokio::time::Instant,
}

/// Everything one schedule shares between its actors (one thread, no
/// `Send` needed: the actors are joined, not spawned).
pub(crate) struct Sim {
    pub(crate) seed: u64,
    pub(crate) p: Params,
    pub(crate) store: Arc<MemoryStore>,
    /// The request path before and after the schedule's configuration
    /// change (`BeShardCount` or `AdmissionMode`; the same one when it has
    /// none), when it was made, and the draws of which one a request runs
    /// during the rollout.
    pub(crate) counters: [Counter<MemoryStore>; 2],
    /// The stack's configuration each was built from
    /// ([`crate::stack::stack_config`]).
    pub(crate) configs: [CounterConfig; 2],
    pub(crate) changed: Cell<Option<tokio::time::Instant>>,
    pub(crate) picks: RefCell<Rng>,
    /// A best-effort `audit --repair` of the operator is in flight (the
    /// switch's strict repair waits for it).
    pub(crate) best_effort_audits: Cell<u32>,
    /// Creates in flight and the configuration changes' windows, shared
    /// with the store's checker.
    pub(crate) windows: Arc<Mutex<Windows>>,
    /// The stream function's and the reprocessor's processor (the
    /// stream's clock).
    pub(crate) processor: Processor<MemoryStore>,
    /// The processor of the operator's sweeps (the audit's clock).
    pub(crate) sweeper: Processor<MemoryStore>,
    pub(crate) start: tokio::time::Instant,
    /// The mapping's checkpoint per shard and lane: the last record the
    /// lane is past.
    pub(crate) checkpoints: RefCell<BTreeMap<Lane, String>>,
    /// Lanes that read a closed shard to its end; a shard all of whose
    /// lanes did is finished, and its children become readable.
    pub(crate) lanes_done: RefCell<BTreeSet<Lane>>,
    pub(crate) finished_shards: RefCell<BTreeSet<String>>,
    /// Bumped when a shard splits or finishes: the lanes' round ends and
    /// the mapping looks at the readable shards again.
    pub(crate) shard_generation: Cell<u64>,
    pub(crate) batches_in_flight: Cell<u64>,
    /// What the stream function has been invoked with: every sequence
    /// number, and per item the highest one, to check AWS's promise that
    /// an item's records reach the function in order (across lanes and
    /// shard lineage).
    pub(crate) delivered: RefCell<Deliveries>,
    pub(crate) order_violation: RefCell<Option<String>>,
    /// Numbers the API answered with: `(scope, number)` → the id created.
    pub(crate) numbered: RefCell<BTreeMap<(String, u64), String>>,
    /// The first drift check run or audit under load that reported a defect.
    pub(crate) drift_violation: RefCell<Option<String>>,
    pub(crate) dlq1: RefCell<VecDeque<Message>>,
    pub(crate) dlq2: RefCell<VecDeque<Message>>,
    pub(crate) next_message: Cell<u64>,
    /// Faults of the pipeline itself (crashes, duplicates) are on.
    pub(crate) stormy: Cell<bool>,
    pub(crate) clients_done: Cell<u64>,
    pub(crate) stats: RefCell<Stats>,
    /// Shared with [`run_with`], which keeps it when an actor panics.
    pub(crate) trace: Option<Rc<RefCell<Vec<String>>>>,
}

impl Sim {
    pub(crate) fn now_ms(&self) -> i64 {
        EPOCH_MS + i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// What client `n`'s clock says now.
    pub(crate) fn now_api(&self, n: u64) -> i64 {
        self.now_ms() + self.p.skew.api(n)
    }

    /// What the stream function's clock says now.
    pub(crate) fn now_stream(&self) -> i64 {
        self.now_ms() + self.p.skew.stream
    }

    /// What the operator's clock says now.
    pub(crate) fn now_audit(&self) -> i64 {
        self.now_ms() + self.p.skew.audit
    }

    /// The audit's grace period: strictly longer than twice the API's
    /// timeout plus the clock skew, as the kit documents
    /// (docs/audit-and-repair.md, issue 34 D4; at exactly that sum the model
    /// checker's clock model finds a raise above live): a request is under
    /// [`SIM_API_TIMEOUT_MS`], a slow request's late write can move a
    /// counter's stamp back by one timeout, and two clocks differ by at most
    /// the schedule's skew span.
    pub(crate) fn grace(&self) -> i64 {
        2 * SIM_API_TIMEOUT_MS + self.p.skew.span() + 1
    }

    pub(crate) fn now_system(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.now_ms() as u64)
    }

    pub(crate) fn log(&self, what: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            trace
                .borrow_mut()
                .push(format!("{:>7}ms {}", self.now_ms() - EPOCH_MS, what()));
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.clients_done.get() == self.p.clients
    }

    pub(crate) fn bump(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.borrow_mut());
    }

    pub(crate) fn scope(&self, n: u64) -> Scope {
        Scope::new(format!("acct{n}")).unwrap()
    }

    /// The counters keys of scope `n` (`audit --scope` audits each), or
    /// its resources keys (`--repair` sweeps each).
    pub(crate) fn counters_keys(&self, n: u64) -> Vec<Scope> {
        self.p
            .scope_keys
            .keys(&self.scope(n))
            .expect("the simulation's scopes fit every key")
    }

    pub(crate) fn resource_keys(&self, n: u64) -> Vec<Scope> {
        self.p
            .scope_keys
            .resource_keys(&self.scope(n))
            .expect("the simulation's scopes fit every key")
    }

    /// The request path a request starting now runs: during a rollout the
    /// new configuration with a chance rising from 0 to 1 over it, so old
    /// and new run side by side (a request in flight keeps the one it
    /// started with, as a Lambda invocation keeps its configuration).
    pub(crate) fn counter(&self) -> &Counter<MemoryStore> {
        let Some(at) = self.changed.get() else {
            return &self.counters[0];
        };
        let (elapsed, rollout) = (at.elapsed().as_millis() as u64, self.p.rollout.as_millis() as u64);
        let new = elapsed >= rollout || self.picks.borrow_mut().range(0, rollout - 1) < elapsed;
        &self.counters[usize::from(new)]
    }

    /// The stack's configuration the operator's tools read (the new one
    /// from the change on).
    pub(crate) fn config(&self) -> &CounterConfig {
        &self.configs[usize::from(self.changed.get().is_some())]
    }
}
