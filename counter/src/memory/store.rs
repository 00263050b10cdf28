//! The store's role traits on `MemoryStore`: each operation of the kit's store as one
//! plain call ([`super::calls`]), a Query read item by item
//! ([`super::reads`]) or a transaction ([`super::transactions`]), with the
//! writes of resource items appending their stream records.

use serde_dynamo::{AttributeValue, Item};

use super::MemoryStore;
use super::chaos::{Fault, Op};
use super::locks::{LockKey, resource_lock};
use super::stream::{Event, Stream};
use super::tables::{MemResource, Tables, apply_claim, key_of};
use crate::error::{CancelReason, StoreError};
use crate::ids::Scope;
use crate::items::{CounterItem, CounterSnapshot, ItemRow, ResourceState};
use crate::keys;
use crate::store::{
    AuditStore, NewResource, RequestStore, ResourceKey, ResourceRead, SequenceClaim, SequenceEntry, SequenceStore,
    StoreBase, StreamStore, Transaction,
};
use crate::time::EpochMillis;

impl StoreBase for MemoryStore {}

impl ResourceRead for MemoryStore {
    async fn get_resource(&self, key: &ResourceKey) -> Result<Option<ResourceState>, StoreError> {
        self.call(Op::GetResource, &[], |t, _| {
            Ok(t.resources.get(&key_of(key)).map(|r| r.state.clone()))
        })
    }
}

impl RequestStore for MemoryStore {
    async fn read_counters(&self, scope: &Scope) -> Result<CounterSnapshot, StoreError> {
        let items = self.query_counters(Op::ReadCounters, scope).await?;
        Ok(CounterSnapshot::from_items(items))
    }

    async fn put_resource(&self, resource: &NewResource) -> Result<(), StoreError> {
        let key = (resource.item.scope.to_string(), resource.item.id.to_string());
        let mut image = resource.payload.clone();
        let kit: Item = serde_dynamo::to_item(&resource.item).map_err(|e| StoreError::Malformed(e.to_string()))?;
        image.extend(kit.iter().map(|(k, v)| (k.clone(), v.clone())));
        let lock = LockKey::Resource(key.0.clone(), key.1.clone());
        let put = |t: &mut Tables, stream: &mut Stream| {
            if t.resources.contains_key(&key) {
                return Err(StoreError::ConditionFailed);
            }
            if t.deleted_incarnations.contains(&resource.item.incarnation) {
                t.resurrected.push(resource.item.incarnation.clone());
            }
            stream.append(Event::Insert, None, Some(&image));
            t.resources.insert(
                key.clone(),
                MemResource {
                    state: resource.item.clone().into(),
                    image: image.clone(),
                },
            );
            Ok(())
        };
        self.resendable(Op::PutResource, crate::store::sends::PUT_RESOURCE, &[lock], put)
            .await
    }

    async fn add_best_effort(&self, scope: &Scope, name: &str, delta: i64, now: EpochMillis) -> Result<(), StoreError> {
        crate::store::check_best_effort_name(name)?;
        let lock = LockKey::Counter(scope.to_string(), name.to_owned());
        self.call(Op::AddBestEffort, &[lock], |t, _| {
            t.add_counter(scope.as_str(), name, delta, now);
            Ok(())
        })
    }

    async fn reserve_best_effort(
        &self,
        scope: &Scope,
        name: &str,
        reservation: crate::best_effort::Reservation,
        now: EpochMillis,
    ) -> Result<(), StoreError> {
        use crate::best_effort::Fence;
        crate::store::check_best_effort_name(name)?;
        let lock = LockKey::Counter(scope.to_string(), name.to_owned());
        self.call(Op::ReserveBestEffort, &[lock], |t, _| {
            let key = (scope.to_string(), name.to_owned());
            let count = t.counters.get(&key).copied();
            let epoch = t.counters_epoch.get(&key).copied();
            if !reservation.admits(count, epoch) {
                return Err(StoreError::ConditionFailed);
            }
            if let Fence::Absent(e) = reservation.fence {
                t.counters_epoch.insert(key, e);
            }
            t.add_counter(scope.as_str(), name, 1, now);
            Ok(())
        })
    }

    async fn mark_deleted(&self, key: &ResourceKey, incarnation: &str, now: EpochMillis) -> Result<(), StoreError> {
        let soft_delete = |t: &mut Tables, stream: &mut Stream| match t.resources.get_mut(&key_of(key)) {
            Some(r) if !r.state.deleted && r.state.incarnation == incarnation => {
                t.deleted_incarnations.insert(incarnation.to_owned());
                let old = r.image.clone();
                r.state.deleted = true;
                r.image.insert(keys::DELETED.to_owned(), AttributeValue::Bool(true));
                r.image
                    .insert(keys::DELETED_AT.to_owned(), AttributeValue::N(now.to_string()));
                stream.append(Event::Modify, Some(&old), Some(&r.image));
                Ok(())
            }
            _ => Err(StoreError::ConditionFailed),
        };
        self.resendable(
            Op::MarkDeleted,
            crate::store::sends::MARK_DELETED,
            &[resource_lock(key)],
            soft_delete,
        )
        .await
    }
}

impl StreamStore for MemoryStore {
    /// The kit sends no `ClientRequestToken` itself: the SDK fills a fresh
    /// one per `send()` (and keeps it across its own retries of that send),
    /// so every call here is a new token ([`MemoryStore::transact_write`]).
    async fn transact(&self, tx: &Transaction) -> Result<(), StoreError> {
        let token = self.inner.lock().unwrap().tokens.fresh();
        self.transact_write(tx, Some(&token)).await
    }
}

impl AuditStore for MemoryStore {
    async fn counter_items(&self, scope: &Scope) -> Result<Vec<CounterItem>, StoreError> {
        self.query_counters(Op::CounterItems, scope).await
    }

    async fn scope_items(&self, scope: &Scope) -> Result<Vec<ItemRow>, StoreError> {
        let mut rows: Vec<ItemRow> = Vec::new();
        loop {
            let (size, pause) = self.page_shape();
            let after = rows.last().map(|r| r.id.clone());
            let (page, more) = self.call(Op::ScopeItems, &[], |t, _| {
                let from = (scope.to_string(), after.clone().unwrap_or_default());
                let mut page = Vec::new();
                let mut more = false;
                for ((s, id), r) in t.resources.range(from..) {
                    if s != scope.as_str() {
                        break;
                    }
                    if after.as_deref() == Some(id.as_str()) {
                        continue;
                    }
                    if page.len() == size {
                        more = true;
                        break;
                    }
                    let row: ItemRow = serde_dynamo::from_item(r.image.clone())
                        .map_err(|e| StoreError::Malformed(format!("resource {s}/{id}: {e}")))?;
                    page.push(row);
                }
                Ok((page, more))
            })?;
            rows.extend(page);
            if !more {
                return Ok(rows);
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// A `TransactWriteItems` of one conditional update per target, run
    /// like [`StreamStore::transact`]: it holds every counter it sets while in
    /// flight (their writers meet `TransactionConflict`; a held one cancels
    /// it), then checks every version and writes all or nothing. A Query
    /// reading the scope's counters item by item meanwhile sees some of
    /// them before and some after it.
    async fn set_counters(
        &self,
        scope: &Scope,
        read: &[CounterItem],
        targets: &[(String, i64)],
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        let names: Vec<&str> = targets.iter().map(|(name, _)| name.as_str()).collect();
        let version_holds = |t: &Tables, name: &str| {
            let expected = read.iter().find(|i| i.name == name).map(|i| i.version);
            expected == t.counters_version.get(&(scope.to_string(), name.to_owned())).copied()
        };
        self.repair_transaction(Op::SetCounters, scope, &names, &version_holds, |t| {
            for (name, count) in targets {
                t.set_counter(scope.as_str(), name, *count, now);
            }
        })
        .await
    }

    async fn raise_best_effort(
        &self,
        scope: &Scope,
        raise: &crate::best_effort::Raise,
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        self.raise(scope, raise, now).await
    }
}

impl SequenceStore for MemoryStore {
    async fn last_sequence(&self, scope: &Scope) -> Result<u64, StoreError> {
        self.call(Op::LastSequence, &[], |t, _| {
            Ok(t.sequences.get(scope.as_str()).copied().unwrap_or(0))
        })
    }

    /// Read, claim and read-back are separate calls, as on DynamoDB: the
    /// claim is a two-phase transaction like [`StreamStore::transact`], so a
    /// concurrent claim of the same number meets `TransactionConflict` while
    /// it is held, or a failed condition after it committed. With
    /// [`Fault::AppliedThenUnavailable`] the claim is applied and the caller
    /// sees a 500. [`Fault::AppliedThenConditionFailed`] (an SDK retry
    /// after an applied attempt) answers success: `DynamoStore` sends a
    /// claim without SDK retries, and a retry with the same
    /// `ClientRequestToken` is answered as the first success.
    async fn claim_sequence(&self, claim: &SequenceClaim) -> Result<(), StoreError> {
        let scope = claim.scope.to_string();
        let holds = [
            LockKey::Counter(scope.clone(), keys::SEQUENCE_NAME.to_owned()),
            LockKey::Counter(scope, keys::sequence_item_name(claim.number)),
        ];
        let (fault, latency, id) = self.prepare(Op::ClaimSequence, &holds, &|_, _| CancelReason::None)?;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.locks.release(id, &holds);
        let result = apply_claim(&mut inner.tables, claim);
        match fault {
            Some(Fault::AppliedThenUnavailable) => Err(StoreError::Unavailable(
                "injected 500 after the claim was applied".into(),
            )),
            _ => result,
        }
    }

    async fn sequence_entry(&self, scope: &Scope, number: u64) -> Result<Option<SequenceEntry>, StoreError> {
        self.call(Op::SequenceEntry, &[], |t, _| {
            Ok(t.sequence_items.get(&(scope.to_string(), number)).cloned())
        })
    }
}
