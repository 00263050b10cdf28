//! The API's request path (DESIGN §3): create, delete and usage, with no
//! transactions, so no transaction conflict can reach the caller. The
//! best-effort counter is written once per operation without retries and its
//! failures are swallowed: it may undercount, never overcount, and the
//! stream path counts every item exactly anyway.

use serde::Serialize;
use serde_dynamo::Item;
use tracing::warn;

use crate::EpochMillis;
use crate::backoff::Backoff;
use crate::error::{Error, StoreError};
use crate::ids::{ResourceId, Scope};
use crate::items::{CounterSnapshot, ResourceItem};
use crate::keys;
use crate::store::{NewResource, ResourceKey, Store};

/// Usage of one scope as the request path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub best_effort: i64,
    pub eventual: i64,
    /// `max(best_effort, eventual)`: what admission compares with the limit.
    pub effective: i64,
    pub limit: u64,
}

impl Usage {
    fn new(snapshot: CounterSnapshot, default_limit: u64) -> Self {
        Self {
            best_effort: snapshot.best_effort,
            eventual: snapshot.eventual,
            effective: snapshot.best_effort.max(snapshot.eventual),
            limit: snapshot.limit_override.unwrap_or(default_limit),
        }
    }

    /// Whether one more item is admitted.
    pub fn admits_one_more(&self) -> bool {
        self.effective < 0 || (self.effective as u64) < self.limit
    }
}

/// What a successful create returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Created {
    pub scope: Scope,
    pub id: ResourceId,
    pub incarnation: String,
    /// Whether the best-effort counter was incremented (false: it now
    /// undercounts by one until repaired; the eventual counter is unaffected).
    pub best_effort_counted: bool,
}

/// The request path over a [`Store`].
#[derive(Debug, Clone)]
pub struct Counter<S> {
    store: S,
    default_limit: u64,
    /// Retries of the request path's own conditional writes when the item is
    /// momentarily held by the stream consumer's transaction.
    busy_backoff: Backoff,
    seed: Option<u64>,
}

impl<S: Store> Counter<S> {
    pub fn new(store: S, default_limit: u64) -> Self {
        Self {
            store,
            default_limit,
            busy_backoff: Backoff {
                max_attempts: 4,
                ..Backoff::default()
            },
            seed: None,
        }
    }

    /// Makes the jitter of the busy retries reproducible (simulation and tests).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// Reads BE, EC and the limit of `scope` (strongly consistent).
    pub async fn usage(&self, scope: &Scope) -> Result<Usage, Error> {
        let snapshot = self.store.read_counters(scope).await.map_err(store_error)?;
        Ok(Usage::new(snapshot, self.default_limit))
    }

    /// Creates `id` in `scope` if the scope is under its limit.
    ///
    /// `payload` holds the owner's attributes; it may not use the kit's
    /// attribute names.
    pub async fn create(
        &self,
        scope: &Scope,
        id: &ResourceId,
        payload: Item,
        now: EpochMillis,
    ) -> Result<Created, Error> {
        if let Some(name) = keys::RESERVED_RESOURCE_ATTRIBUTES
            .iter()
            .find(|name| payload.contains_key(**name))
        {
            return Err(Error::InvalidInput(format!(
                "payload attribute {name:?} is reserved by the counter kit"
            )));
        }
        let usage = self.usage(scope).await?;
        if !usage.admits_one_more() {
            return Err(Error::LimitExceeded {
                usage: usage.effective,
                limit: usage.limit,
            });
        }
        let incarnation = uuid::Uuid::new_v4().simple().to_string();
        let resource = NewResource {
            item: ResourceItem {
                scope: scope.clone(),
                id: id.clone(),
                counter_processed: false,
                deleted: false,
                incarnation: incarnation.clone(),
                created_at: now,
            },
            payload,
        };
        match self.retry_busy(|| self.store.put_resource(&resource)).await {
            Ok(()) => {}
            Err(StoreError::ConditionFailed) => {
                // The SDK may have retried our own put after an ambiguous
                // failure that was in fact applied: then the item carries our
                // incarnation and this create succeeded.
                let key = ResourceKey {
                    scope: scope.clone(),
                    id: id.clone(),
                };
                let existing = self.store.get_resource(&key).await.map_err(store_error)?;
                if existing.is_none_or(|state| state.incarnation != incarnation) {
                    return Err(Error::AlreadyExists);
                }
            }
            Err(err) => return Err(store_error(err)),
        }
        let best_effort_counted = match self.store.add_best_effort(scope, 1, now).await {
            Ok(()) => true,
            Err(err) => {
                warn!(%scope, %id, error = %err, "best-effort increment failed; the eventual counter will count this item");
                false
            }
        };
        Ok(Created {
            scope: scope.clone(),
            id: id.clone(),
            incarnation,
            best_effort_counted,
        })
    }

    /// Soft-deletes `id`; the stream consumer hard-deletes it and adjusts EC.
    ///
    /// BE is decremented before the soft delete, so any failure can only make
    /// it undercount: a failed decrement stops the delete, a failed soft
    /// delete leaves a live item with BE one lower. A missing or already
    /// deleted item leaves BE untouched.
    pub async fn delete(&self, scope: &Scope, id: &ResourceId, now: EpochMillis) -> Result<(), Error> {
        let key = ResourceKey {
            scope: scope.clone(),
            id: id.clone(),
        };
        match self.store.get_resource(&key).await.map_err(store_error)? {
            Some(state) if !state.deleted => {}
            _ => return Err(Error::NotFound),
        }
        // If the decrement fails the item stays: deleting it anyway would
        // leave BE above the live count. (Had the failed decrement been
        // applied after all, BE now undercounts by one: the safe direction.)
        if let Err(err) = self.store.add_best_effort(scope, -1, now).await {
            warn!(%scope, %id, error = %err, "best-effort decrement failed; the item is not deleted");
            return Err(store_error(err));
        }
        match self.retry_busy(|| self.store.mark_deleted(&key, now)).await {
            Ok(()) => Ok(()),
            // A concurrent delete won the race; BE paid one, in the safe direction.
            Err(StoreError::ConditionFailed) => Err(Error::NotFound),
            Err(err) => Err(store_error(err)),
        }
    }

    /// Retries a conditional write while the store reports the item busy
    /// (throttled, or held by a transaction). Safe: the condition makes a
    /// repeated write fail instead of applying twice.
    async fn retry_busy<F, Fut>(&self, mut op: F) -> Result<(), StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), StoreError>>,
    {
        let mut rng = self.seed.map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let mut attempt = 0;
        loop {
            match op().await {
                Err(err) if err.is_transient() && attempt + 1 < self.busy_backoff.max_attempts => {
                    tokio::time::sleep(self.busy_backoff.delay(attempt, &mut rng)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// A store error as the request path reports it: a request the service
/// refused is the caller's input, anything else is unavailability.
fn store_error(err: StoreError) -> Error {
    match err {
        StoreError::Rejected(reason) => Error::InvalidInput(reason),
        other => Error::Unavailable(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::{Fault, MemoryStore, Op};

    const NOW: EpochMillis = 1;

    fn ids(scope: &str, id: &str) -> (Scope, ResourceId) {
        (Scope::new(scope).unwrap(), ResourceId::new(id).unwrap())
    }

    /// BE may undercount, never overcount: BE <= live items.
    fn assert_best_effort_not_above_live(store: &MemoryStore, scope: &str) {
        let tables = store.tables();
        let live = tables
            .resources
            .iter()
            .filter(|((s, _), r)| s == scope && !r.state.deleted)
            .count() as i64;
        let be = store.counter(scope, keys::BEST_EFFORT_NAME);
        assert!(be <= live, "BE {be} above live {live}");
    }

    #[tokio::test]
    async fn a_put_retried_after_it_was_applied_is_still_a_successful_create() {
        let counter = Counter::new(MemoryStore::new(), 5);
        counter
            .store()
            .inject(Op::PutResource, Fault::AppliedThenConditionFailed);
        let (s, id) = ids("acct", "w");
        let created = counter.create(&s, &id, Item::default(), NOW).await.unwrap();
        assert!(created.best_effort_counted);
        assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
        // A real duplicate still is one.
        let err = counter.create(&s, &id, Item::default(), NOW).await.unwrap_err();
        assert!(matches!(err, Error::AlreadyExists), "{err}");
    }

    #[tokio::test]
    async fn a_failed_best_effort_increment_is_swallowed_and_only_undercounts() {
        for fault in [Fault::Unavailable, Fault::Throttled, Fault::AppliedThenUnavailable] {
            let counter = Counter::new(MemoryStore::new(), 5);
            counter.store().inject(Op::AddBestEffort, fault);
            let (s, id) = ids("acct", "w");
            let created = counter.create(&s, &id, Item::default(), NOW).await.unwrap();
            assert!(!created.best_effort_counted, "{fault:?}");
            let calls = counter.store().calls();
            assert_eq!(
                calls.iter().filter(|op| **op == Op::AddBestEffort).count(),
                1,
                "the increment is never retried ({fault:?})"
            );
            let expected = i64::from(fault == Fault::AppliedThenUnavailable);
            assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), expected);
            assert_best_effort_not_above_live(counter.store(), "acct");
        }
    }

    #[tokio::test]
    async fn a_failed_decrement_stops_the_delete_so_best_effort_never_overcounts() {
        let counter = Counter::new(MemoryStore::new(), 5);
        let (s, id) = ids("acct", "w");
        counter.create(&s, &id, Item::default(), NOW).await.unwrap();
        counter.store().inject(Op::AddBestEffort, Fault::Unavailable);
        let err = counter.delete(&s, &id, NOW).await.unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
        assert_best_effort_not_above_live(counter.store(), "acct");
        // An ambiguous decrement (applied, then 500): the retry by the
        // caller decrements again; BE undercounts, never overcounts.
        counter.store().inject(Op::AddBestEffort, Fault::AppliedThenUnavailable);
        assert!(counter.delete(&s, &id, NOW).await.is_err());
        counter.delete(&s, &id, NOW).await.unwrap();
        assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), -1);
        assert_best_effort_not_above_live(counter.store(), "acct");
    }

    #[tokio::test]
    async fn a_failed_soft_delete_after_the_decrement_only_undercounts() {
        let counter = Counter::new(MemoryStore::new(), 5);
        let (s, id) = ids("acct", "w");
        counter.create(&s, &id, Item::default(), NOW).await.unwrap();
        counter.store().inject(Op::MarkDeleted, Fault::Unavailable);
        assert!(matches!(counter.delete(&s, &id, NOW).await, Err(Error::Unavailable(_))));
        assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 0);
        assert_best_effort_not_above_live(counter.store(), "acct");
    }

    #[tokio::test]
    async fn busy_items_are_retried_and_store_outages_become_unavailable() {
        let counter = Counter::new(MemoryStore::new(), 5);
        let (s, id) = ids("acct", "w");
        counter.store().inject(Op::PutResource, Fault::Conflict);
        counter.store().inject(Op::PutResource, Fault::Throttled);
        counter.create(&s, &id, Item::default(), NOW).await.unwrap();
        counter.store().inject(Op::ReadCounters, Fault::Unavailable);
        let err = counter
            .create(&s, &ResourceId::new("x").unwrap(), Item::default(), NOW)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
    }

    #[test]
    fn usage_takes_the_larger_counter_and_the_override() {
        let usage = Usage::new(
            CounterSnapshot {
                best_effort: 2,
                eventual: 5,
                limit_override: Some(6),
            },
            100,
        );
        assert_eq!(usage.effective, 5);
        assert_eq!(usage.limit, 6);
        assert!(usage.admits_one_more());
        let full = Usage::new(
            CounterSnapshot {
                best_effort: 6,
                eventual: 1,
                limit_override: None,
            },
            6,
        );
        assert!(!full.admits_one_more());
        let zero_limit = Usage::new(CounterSnapshot::default(), 0);
        assert!(!zero_limit.admits_one_more());
    }
}
