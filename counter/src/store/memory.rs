//! A deterministic in-memory [`Store`]: a test double, not a database. It
//! implements exactly the semantics the kit relies on — conditional puts and
//! updates, all-or-nothing transactions with cancellation reasons in request
//! order — and lets a test inject faults per operation, including the
//! ambiguous kind where the write is applied and the caller still sees an
//! error. The emulator tests remain the check against the real API.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use super::{ItemWrite, NewResource, ResourceKey, Store, Transaction};
use crate::EpochMillis;
use crate::error::{CancelReason, StoreError};
use crate::ids::Scope;
use crate::items::{CounterSnapshot, ResourceState};
use crate::keys;

/// The operations of [`Store`], to aim faults at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    ReadCounters,
    PutResource,
    AddBestEffort,
    GetResource,
    MarkDeleted,
    Transact,
}

/// What an injected fault does to the next call of its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A 500 before anything was written.
    Unavailable,
    /// Throttled before anything was written.
    Throttled,
    /// For transactions: cancelled with `TransactionConflict`; otherwise
    /// like [`Fault::Throttled`].
    Conflict,
    /// The service refuses the request itself (`ValidationException`).
    Rejected,
    /// The write is applied, then the caller gets a 500 (an ambiguous error).
    AppliedThenUnavailable,
    /// The write is applied, the answer is lost, and the SDK's own retry
    /// fails the write's condition: the caller sees `ConditionFailed`.
    AppliedThenConditionFailed,
}

/// A resource item's kit attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemResource {
    pub state: ResourceState,
}

/// The two tables.
#[derive(Debug, Default, Clone)]
pub struct Tables {
    pub resources: BTreeMap<(String, String), MemResource>,
    /// `(scope, name)` → count.
    pub counters: BTreeMap<(String, String), i64>,
    pub limits: BTreeMap<String, u64>,
}

type Hook = Box<dyn FnOnce(&mut Tables) + Send>;

#[derive(Default)]
struct Inner {
    tables: Tables,
    faults: VecDeque<(Op, Fault)>,
    /// Runs right after the next successful call of its operation.
    hooks: VecDeque<(Op, Hook)>,
    calls: Vec<Op>,
}

/// See the module documentation.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

fn key_of(key: &ResourceKey) -> (String, String) {
    (key.scope.to_string(), key.id.to_string())
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `fault` for the next call of `op` (faults of one op fire in order).
    pub fn inject(&self, op: Op, fault: Fault) {
        self.inner.lock().unwrap().faults.push_back((op, fault));
    }

    /// Runs `hook` on the tables right after the next successful `op`, as a
    /// concurrent writer would.
    pub fn after_next(&self, op: Op, hook: impl FnOnce(&mut Tables) + Send + 'static) {
        self.inner.lock().unwrap().hooks.push_back((op, Box::new(hook)));
    }

    /// A copy of the tables.
    pub fn tables(&self) -> Tables {
        self.inner.lock().unwrap().tables.clone()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Op> {
        self.inner.lock().unwrap().calls.clone()
    }

    pub fn counter(&self, scope: &str, name: &str) -> i64 {
        let inner = self.inner.lock().unwrap();
        inner
            .tables
            .counters
            .get(&(scope.to_owned(), name.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Runs one call: consumes a fault aimed at `op`, applies `write` unless
    /// the fault prevents it, then runs a hook aimed at `op`.
    fn call<T>(&self, op: Op, write: impl FnOnce(&mut Tables) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut inner = self.inner.lock().unwrap();
        inner.calls.push(op);
        let fault = inner
            .faults
            .iter()
            .position(|(o, _)| *o == op)
            .and_then(|at| inner.faults.remove(at))
            .map(|(_, f)| f);
        let result = match fault {
            Some(Fault::Unavailable) => return Err(StoreError::Unavailable("injected 500".into())),
            Some(Fault::Throttled) => return Err(StoreError::Transient("injected throttle".into())),
            Some(Fault::Rejected) => return Err(StoreError::Rejected("injected validation error".into())),
            Some(Fault::Conflict) if op == Op::Transact => {
                return Err(StoreError::Cancelled {
                    reasons: vec![CancelReason::TransactionConflict],
                });
            }
            Some(Fault::Conflict) => return Err(StoreError::Transient("injected conflict".into())),
            Some(Fault::AppliedThenUnavailable) => {
                let _ = write(&mut inner.tables);
                Err(StoreError::Unavailable(
                    "injected 500 after the write was applied".into(),
                ))
            }
            Some(Fault::AppliedThenConditionFailed) => {
                let _ = write(&mut inner.tables);
                Err(StoreError::ConditionFailed)
            }
            None => write(&mut inner.tables),
        };
        if result.is_ok()
            && let Some(at) = inner.hooks.iter().position(|(o, _)| *o == op)
            && let Some((_, hook)) = inner.hooks.remove(at)
        {
            hook(&mut inner.tables);
        }
        result
    }
}

/// Checks one item write's condition against the tables.
fn condition_holds(tables: &Tables, write: &ItemWrite) -> bool {
    let item = tables.resources.get(&key_of(write.key()));
    match (write, item) {
        (_, None) => false,
        (ItemWrite::MarkCounted { incarnation, .. }, Some(r)) => {
            !r.state.counter_processed && r.state.incarnation == *incarnation
        }
        (ItemWrite::DeleteCounted { incarnation, .. }, Some(r)) => {
            r.state.deleted && r.state.counter_processed && r.state.incarnation == *incarnation
        }
        (ItemWrite::DeleteUncounted { incarnation, .. }, Some(r)) => {
            r.state.deleted && !r.state.counter_processed && r.state.incarnation == *incarnation
        }
    }
}

impl Store for MemoryStore {
    async fn read_counters(&self, scope: &Scope) -> Result<CounterSnapshot, StoreError> {
        self.call(Op::ReadCounters, |t| {
            let mut snap = CounterSnapshot {
                limit_override: t.limits.get(scope.as_str()).copied(),
                ..CounterSnapshot::default()
            };
            for ((s, name), count) in &t.counters {
                if s != scope.as_str() {
                    continue;
                }
                if name == keys::BEST_EFFORT_NAME {
                    snap.best_effort += count;
                } else if keys::is_eventual_name(name) {
                    snap.eventual += count;
                }
            }
            Ok(snap)
        })
    }

    async fn put_resource(&self, resource: &NewResource) -> Result<(), StoreError> {
        let key = (resource.item.scope.to_string(), resource.item.id.to_string());
        self.call(Op::PutResource, |t| {
            if t.resources.contains_key(&key) {
                return Err(StoreError::ConditionFailed);
            }
            t.resources.insert(
                key,
                MemResource {
                    state: ResourceState {
                        counter_processed: resource.item.counter_processed,
                        deleted: resource.item.deleted,
                        incarnation: resource.item.incarnation.clone(),
                    },
                },
            );
            Ok(())
        })
    }

    async fn add_best_effort(&self, scope: &Scope, delta: i64, _now: EpochMillis) -> Result<(), StoreError> {
        self.call(Op::AddBestEffort, |t| {
            *t.counters
                .entry((scope.to_string(), keys::BEST_EFFORT_NAME.to_owned()))
                .or_default() += delta;
            Ok(())
        })
    }

    async fn get_resource(&self, key: &ResourceKey) -> Result<Option<ResourceState>, StoreError> {
        self.call(Op::GetResource, |t| {
            Ok(t.resources.get(&key_of(key)).map(|r| r.state.clone()))
        })
    }

    async fn mark_deleted(&self, key: &ResourceKey, _now: EpochMillis) -> Result<(), StoreError> {
        self.call(Op::MarkDeleted, |t| match t.resources.get_mut(&key_of(key)) {
            Some(r) if !r.state.deleted => {
                r.state.deleted = true;
                Ok(())
            }
            _ => Err(StoreError::ConditionFailed),
        })
    }

    async fn transact(&self, tx: &Transaction) -> Result<(), StoreError> {
        self.call(Op::Transact, |t| {
            let mut reasons = Vec::with_capacity(tx.actions_len());
            if tx.counter.is_some() {
                reasons.push(CancelReason::None);
            }
            for write in &tx.items {
                reasons.push(if condition_holds(t, write) {
                    CancelReason::None
                } else {
                    CancelReason::ConditionalCheckFailed
                });
            }
            if reasons.iter().any(|r| *r != CancelReason::None) {
                return Err(StoreError::Cancelled { reasons });
            }
            if let Some(delta) = &tx.counter {
                *t.counters
                    .entry((delta.scope.to_string(), delta.name.clone()))
                    .or_default() += delta.delta;
            }
            for write in &tx.items {
                let key = key_of(write.key());
                match write {
                    ItemWrite::MarkCounted { .. } => {
                        if let Some(r) = t.resources.get_mut(&key) {
                            r.state.counter_processed = true;
                        }
                    }
                    ItemWrite::DeleteCounted { .. } | ItemWrite::DeleteUncounted { .. } => {
                        t.resources.remove(&key);
                    }
                }
            }
            Ok(())
        })
    }
}
