//! The two-phase transactions: `TransactWriteItems` (prepare, hold the
//! items for a seeded time, commit all or nothing), with an optional
//! `ClientRequestToken`, and an operator's repair transaction over a
//! scope's counters. A transaction that meets a held item is cancelled
//! with `TransactionConflict` there and every other action's own reason
//! (`ConditionalCheckFailed` or `None`) beside it, as DynamoDB reports it.

use std::time::Duration;

use super::MemoryStore;
use super::chaos::{Fault, Op};
use super::locks::{LockKey, resource_lock};
use super::tables::{Tables, apply_transaction, condition_holds};
use crate::error::{CancelReason, StoreError};
use crate::ids::Scope;
use crate::store::Transaction;
use crate::time::EpochMillis;

impl MemoryStore {
    /// Phase one of a transaction: validation, fault, conflict check, and
    /// holding its items. `Ok` carries the fault to report after commit,
    /// the time to hold the items, and the transaction's id.
    ///
    /// A transaction that meets an item held by another is cancelled with
    /// `TransactionConflict` on that item and, on every other action,
    /// `own_reason` (its condition evaluated, as DynamoDB reports it).
    pub(super) fn prepare(
        &self,
        op: Op,
        holds: &[LockKey],
        own_reason: &dyn Fn(&Tables, usize) -> CancelReason,
    ) -> Result<(Option<Fault>, Duration, u64), StoreError> {
        let mut inner = self.inner.lock().unwrap();
        inner.calls.push(op);
        let distinct: std::collections::BTreeSet<&LockKey> = holds.iter().collect();
        if distinct.len() != holds.len() || holds.len() > 100 {
            return Err(StoreError::Rejected(
                "ValidationException: a transaction has at most 100 actions on distinct items".into(),
            ));
        }
        let fault = inner.faults.next(op);
        match fault {
            Some(Fault::Unavailable) => return Err(StoreError::Unavailable("injected 500".into())),
            Some(Fault::Throttled) => {
                return Err(StoreError::Cancelled {
                    reasons: holds.iter().map(|_| CancelReason::Throttled).collect(),
                });
            }
            Some(Fault::Rejected) => return Err(StoreError::Rejected("injected validation error".into())),
            Some(Fault::Conflict) => {
                return Err(StoreError::Cancelled {
                    reasons: vec![CancelReason::TransactionConflict],
                });
            }
            Some(Fault::ConflictOnCounter) if op != Op::Transact => {
                return Err(StoreError::Cancelled {
                    reasons: vec![CancelReason::TransactionConflict],
                });
            }
            _ => {}
        }
        if inner.locks.any_held(holds) {
            inner.locks.conflicts += 1;
            let reasons = holds
                .iter()
                .enumerate()
                .map(|(at, k)| {
                    if inner.locks.is_held(k) {
                        CancelReason::TransactionConflict
                    } else {
                        own_reason(&inner.tables, at)
                    }
                })
                .collect::<Vec<_>>();
            inner.locks.note_cancellation(&reasons);
            return Err(StoreError::Cancelled { reasons });
        }
        let latency = match inner.faults.chaos.as_mut() {
            Some((chaos, rng)) if !chaos.transaction_latency.is_zero() => {
                let max = u64::try_from(chaos.transaction_latency.as_micros()).unwrap_or(u64::MAX);
                Duration::from_micros(rng.u64(1..=max))
            }
            _ => Duration::ZERO,
        };
        let id = inner.locks.begin(holds, !latency.is_zero());
        Ok((fault, latency, id))
    }

    /// Phase two: evaluates the conditions, applies all or nothing, releases
    /// the items. The answer, and whether the transaction was applied.
    fn commit(
        &self,
        tx: &Transaction,
        holds: &[LockKey],
        fault: Option<Fault>,
        id: u64,
    ) -> (Result<(), StoreError>, bool) {
        let mut inner = self.inner.lock().unwrap();
        inner.locks.release(id, holds);
        if fault == Some(Fault::ConflictOnCounter) {
            let reasons = tx
                .counter
                .iter()
                .map(|_| CancelReason::TransactionConflict)
                .chain(tx.items.iter().map(|write| {
                    if condition_holds(&inner.tables, write) {
                        CancelReason::None
                    } else {
                        CancelReason::ConditionalCheckFailed
                    }
                }))
                .collect::<Vec<_>>();
            inner.locks.note_cancellation(&reasons);
            return (Err(StoreError::Cancelled { reasons }), false);
        }
        inner.stamp();
        let inner = &mut *inner;
        let result = apply_transaction(&mut inner.tables, &mut inner.stream, tx);
        inner.check(Op::Transact);
        let applied = result.is_ok();
        let answer = match fault {
            Some(Fault::AppliedThenUnavailable) => Err(StoreError::Unavailable(
                "injected 500 after the transaction was applied".into(),
            )),
            // Applied, answer lost, and a retry that is a new request (no
            // ClientRequestToken, or one past its window, or an emulator
            // that does not honour it) fails every item's condition (the
            // counter's update has none). Had the first attempt not been
            // applied, its own reasons are the answer.
            Some(Fault::AppliedThenConditionFailed) if result.is_ok() => Err(StoreError::Cancelled {
                reasons: tx
                    .counter
                    .iter()
                    .map(|_| CancelReason::None)
                    .chain(tx.items.iter().map(|_| CancelReason::ConditionalCheckFailed))
                    .collect(),
            }),
            Some(Fault::AppliedThenConditionFailed) => result,
            _ => {
                if result.is_ok() {
                    inner.run_hook(Op::Transact);
                }
                result
            }
        };
        (answer, applied)
    }

    /// One `TransactWriteItems` request: prepare, hold, commit. The answer,
    /// and whether it was applied.
    async fn transact_once(&self, tx: &Transaction) -> (Result<(), StoreError>, bool) {
        let mut holds: Vec<LockKey> = Vec::with_capacity(tx.actions_len());
        if let Some(c) = &tx.counter {
            holds.push(LockKey::Counter(c.scope.to_string(), c.name.clone()));
        }
        holds.extend(tx.items.iter().map(|w| resource_lock(w.key())));
        let first_item = usize::from(tx.counter.is_some());
        let own_reason = |t: &Tables, at: usize| match at.checked_sub(first_item).map(|i| &tx.items[i]) {
            Some(write) if !condition_holds(t, write) => CancelReason::ConditionalCheckFailed,
            _ => CancelReason::None,
        };
        let (fault, latency, id) = match self.prepare(Op::Transact, &holds, &own_reason) {
            Ok(prepared) => prepared,
            Err(err) => return (Err(err), false),
        };
        if !latency.is_zero() {
            // Held items meet TransactionConflict until the commit. A
            // transaction dropped here would keep them: the simulation never
            // cancels one.
            tokio::time::sleep(latency).await;
        }
        self.commit(tx, &holds, fault, id)
    }

    /// `TransactWriteItems` with an optional `ClientRequestToken`, as
    /// DynamoDB answers it (`super::tokens`): the same token with the
    /// same request within [`super::CLIENT_REQUEST_TOKEN_WINDOW_MS`] of the
    /// first one's completion succeeds again without applying anything;
    /// with another request it is refused with
    /// `IdempotentParameterMismatch`; while the first is still in flight,
    /// `TransactionInProgressException`. Times are the store's clock
    /// ([`MemoryStore::set_clock`]).
    pub async fn transact_write(&self, tx: &Transaction, token: Option<&str>) -> Result<(), StoreError> {
        let Some(token) = token else {
            return self.transact_once(tx).await.0;
        };
        {
            let mut inner = self.inner.lock().unwrap();
            inner.stamp();
            let now = inner.stream.now;
            if let Some(answer) = inner.tokens.begin(token, tx, now) {
                return answer;
            }
        }
        let (answer, applied) = self.transact_once(tx).await;
        let mut inner = self.inner.lock().unwrap();
        let completed_at = applied.then(|| {
            inner.stamp();
            inner.stream.now
        });
        inner.tokens.finish(token, tx, completed_at);
        answer
    }

    /// [`AuditStore::raise_best_effort`](crate::store::AuditStore::raise_best_effort): a repair transaction over every item
    /// of the raise, each conditioned on its epoch.
    pub(super) async fn raise(
        &self,
        scope: &Scope,
        raise: &crate::best_effort::Raise,
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        let names: Vec<&str> = raise.adds.keys().map(String::as_str).collect();
        let fence_holds = |t: &Tables, name: &str| {
            t.counters_epoch
                .get(&(scope.to_string(), name.to_owned()))
                .copied()
                .unwrap_or(0)
                <= raise.from
        };
        self.repair_transaction(Op::RaiseBestEffort, scope, &names, &fence_holds, |t| {
            for (name, add) in &raise.adds {
                t.add_counter(scope.as_str(), name, *add, now);
                t.counters_epoch.insert((scope.to_string(), name.clone()), raise.to());
            }
        })
        .await
    }

    /// An operator's transaction over the counters `names` of `scope`: each
    /// conditioned by `holds`, the items held for the chaos's transaction
    /// latency (writers meet `TransactionConflict`), then `apply` if every
    /// condition still holds. `Ok(false)`: cancelled or busy, nothing
    /// written.
    pub(super) async fn repair_transaction(
        &self,
        op: Op,
        scope: &Scope,
        names: &[&str],
        holds: &(dyn Fn(&Tables, &str) -> bool + Sync),
        apply: impl FnOnce(&mut Tables),
    ) -> Result<bool, StoreError> {
        let locks: Vec<LockKey> = names
            .iter()
            .map(|name| LockKey::Counter(scope.to_string(), (*name).to_owned()))
            .collect();
        let own_reason = |t: &Tables, at: usize| {
            if holds(t, names[at]) {
                CancelReason::None
            } else {
                CancelReason::ConditionalCheckFailed
            }
        };
        let (fault, latency, id) = match self.prepare(op, &locks, &own_reason) {
            Ok(prepared) => prepared,
            Err(StoreError::Cancelled { .. }) => return Ok(false),
            Err(err) if err.is_transient() => return Ok(false),
            Err(err) => return Err(err),
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.locks.release(id, &locks);
        if !names.iter().all(|name| holds(&inner.tables, name)) {
            return Ok(false);
        }
        apply(&mut inner.tables);
        inner.check(op);
        match fault {
            Some(Fault::AppliedThenUnavailable) => Err(StoreError::Unavailable(format!(
                "injected 500 after the {op:?} transaction was applied"
            ))),
            _ => Ok(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::tests::{count_insert, key, resource};
    use super::super::{Chaos, Fault, MemoryStore, Op};
    use crate::error::{CancelReason, StoreError};
    use crate::ids::Scope;
    use crate::store::{AuditStore, CounterDelta, ItemWrite, RequestStore, StreamStore, Transaction};

    #[tokio::test]
    async fn a_failed_condition_cancels_the_whole_transaction_with_reasons_in_request_order() {
        let store = MemoryStore::new();
        store.put_resource(&resource("a", "i1")).await.unwrap();
        let tx = Transaction {
            counter: Some(CounterDelta {
                scope: Scope::new("acct").unwrap(),
                name: "eventual".into(),
                delta: 2,
            }),
            items: vec![
                ItemWrite::MarkCounted {
                    key: key("a"),
                    incarnation: "i1".into(),
                },
                ItemWrite::MarkCounted {
                    key: key("missing"),
                    incarnation: "i1".into(),
                },
            ],
            now: 0,
        };
        let err = store.transact(&tx).await.unwrap_err();
        assert_eq!(
            err,
            StoreError::Cancelled {
                reasons: vec![
                    CancelReason::None,
                    CancelReason::None,
                    CancelReason::ConditionalCheckFailed
                ]
            }
        );
        assert_eq!(store.counter("acct", "eventual"), 0);
        assert!(
            !store.tables().resources[&("acct".into(), "a".into())]
                .state
                .counter_processed
        );
        let mut twice = tx.clone();
        twice.items[1] = twice.items[0].clone();
        assert!(matches!(store.transact(&twice).await, Err(StoreError::Rejected(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_repair_in_flight_holds_its_counters_and_conflicts_come_with_each_actions_own_reason() {
        let store = Arc::new(MemoryStore::new());
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.transact(&count_insert("a", "i1")).await.unwrap();
        store.set_chaos(Chaos {
            seed: 3,
            transaction_latency: Duration::from_millis(10),
            ..Chaos::default()
        });
        let scope = Scope::new("acct").unwrap();
        let read = store.counter_items(&scope).await.unwrap();
        let repair = tokio::spawn({
            let (store, read) = (store.clone(), read.clone());
            async move {
                let targets = [("eventual".to_owned(), 1), ("best_effort".to_owned(), 1)];
                store
                    .set_counters(&Scope::new("acct").unwrap(), &read, &targets, 1)
                    .await
            }
        });
        tokio::task::yield_now().await;
        // A BE write meets the repair's hold; a stream transaction on the
        // held counter is cancelled with its item's own reason beside the
        // conflict: "a" is counted already.
        let err = store.add_best_effort(&scope, "best_effort", 1, 0).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        assert_eq!(
            store.transact(&count_insert("a", "i1")).await,
            Err(StoreError::Cancelled {
                reasons: vec![CancelReason::TransactionConflict, CancelReason::ConditionalCheckFailed]
            })
        );
        assert_eq!(store.mixed_cancellations(), 1);
        assert_eq!(repair.await.unwrap(), Ok(true));
        // A repair computed from the same read is refused now: versions moved.
        let targets = [("eventual".to_owned(), 5)];
        assert_eq!(store.set_counters(&scope, &read, &targets, 1).await, Ok(false));
        assert_eq!((store.counter("acct", "eventual"), store.best_effort("acct")), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_transaction_in_flight_makes_concurrent_writers_of_its_items_conflict() {
        let store = Arc::new(MemoryStore::new());
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.put_resource(&resource("b", "i2")).await.unwrap();
        store.set_chaos(Chaos {
            seed: 3,
            faults: vec![],
            transaction_latency: Duration::from_millis(10),
            ..Chaos::default()
        });
        let first = tokio::spawn({
            let store = store.clone();
            async move { store.transact(&count_insert("a", "i1")).await }
        });
        tokio::task::yield_now().await;
        // Same counter item: cancelled, the conflict on the counter's slot.
        let err = store.transact(&count_insert("b", "i2")).await.unwrap_err();
        assert_eq!(
            err,
            StoreError::Cancelled {
                reasons: vec![CancelReason::TransactionConflict, CancelReason::None]
            }
        );
        // A plain write of a held item is refused as transient.
        let err = store.mark_deleted(&key("a"), "i1", 0).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        first.await.unwrap().unwrap();
        store.transact(&count_insert("b", "i2")).await.unwrap();
        assert_eq!(store.counter("acct", "eventual"), 2);
        assert_eq!(store.lock_conflicts(), 2);
    }

    #[tokio::test]
    async fn a_transaction_that_was_not_applied_answers_its_own_reasons_under_an_ambiguous_fault() {
        let store = MemoryStore::new();
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.put_resource(&resource("b", "i2")).await.unwrap();
        store.transact(&count_insert("a", "i1")).await.unwrap();
        // "a" is counted already, "b" is not: the batch's transaction fails
        // on "a" only, and nothing is applied. The injected fault may not
        // make "b" look done too (the consumer would then drop it uncounted).
        let batch = crate::stream::plan::batch_transaction(
            &Scope::new("acct").unwrap(),
            "eventual",
            vec![
                ItemWrite::MarkCounted {
                    key: key("a"),
                    incarnation: "i1".into(),
                },
                ItemWrite::MarkCounted {
                    key: key("b"),
                    incarnation: "i2".into(),
                },
            ],
            0,
        );
        store.inject(Op::Transact, Fault::AppliedThenConditionFailed);
        assert_eq!(
            store.transact(&batch).await,
            Err(StoreError::Cancelled {
                reasons: vec![
                    CancelReason::None,
                    CancelReason::ConditionalCheckFailed,
                    CancelReason::None
                ]
            })
        );
        assert_eq!(store.counter("acct", "eventual"), 1);
        // Applied, then the retry fails: every item's condition, not the counter's.
        store.inject(Op::Transact, Fault::AppliedThenConditionFailed);
        let b_only = crate::stream::plan::count_insert(&key("b"), "i2", crate::stream::plan::ShardChoice::SINGLE, 0);
        assert_eq!(
            store.transact(&b_only).await,
            Err(StoreError::Cancelled {
                reasons: vec![CancelReason::None, CancelReason::ConditionalCheckFailed]
            })
        );
        assert_eq!(store.counter("acct", "eventual"), 2);
    }
}
