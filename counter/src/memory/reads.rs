//! The Queries of a scope's items, read-committed item by item and never a
//! snapshot, as on DynamoDB ("Isolation levels for DynamoDB transactions",
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-isolation>:
//! `GetItem` is serializable against transactions, `Query` and `Scan` are
//! read-committed, item by item). With [`super::Chaos::counter_read_latency`]
//! and [`super::Chaos::page_latency`] a reader can see a multi-item repair
//! or transaction half applied.

use std::time::Duration;

use super::MemoryStore;
use super::chaos::Op;
use super::tables::Tables;
use crate::error::StoreError;
use crate::ids::Scope;
use crate::items::CounterItem;
use crate::keys;

impl MemoryStore {
    /// The Query of `scope`'s counter items (the `limit` override among
    /// them), read-committed item by item in key order: after each item it
    /// waits up to [`super::Chaos::counter_read_latency`], so writes land between
    /// the items of one read; an item written behind the cursor is missed,
    /// one ahead of it is seen. A fault aimed at `op` fails the whole read.
    pub(super) async fn query_counters(&self, op: Op, scope: &Scope) -> Result<Vec<CounterItem>, StoreError> {
        let next_after = |t: &Tables, cursor: Option<&str>| -> Option<CounterItem> {
            let mut names: Vec<&str> = t
                .counters
                .keys()
                .filter(|(s, _)| s == scope.as_str())
                .map(|(_, name)| name.as_str())
                .collect();
            if t.limits.contains_key(scope.as_str()) {
                names.push(keys::LIMIT_NAME);
            }
            let name = names
                .into_iter()
                .filter(|name| cursor.is_none_or(|c| *name > c))
                .min()?;
            if name == keys::LIMIT_NAME {
                let (version, rev) = t.limit_revs.get(scope.as_str()).cloned().unwrap_or_default();
                return Some(CounterItem {
                    scope: scope.to_string(),
                    name: name.to_owned(),
                    count: 0,
                    version,
                    updated_at: 0,
                    epoch: None,
                    limit: t.limits.get(scope.as_str()).copied(),
                    share: t.limit_shares.get(scope.as_str()).copied(),
                    // The store keeps a share only with the write that
                    // assigned it: one token for both.
                    rev: Some(rev.clone()),
                    share_rev: Some(rev),
                });
            }
            let key = (scope.to_string(), name.to_owned());
            Some(CounterItem {
                scope: key.0.clone(),
                name: key.1.clone(),
                count: t.counters.get(&key).copied().unwrap_or(0),
                version: t.counters_version.get(&key).copied().unwrap_or(0),
                updated_at: t.counters_updated_at.get(&key).copied().unwrap_or(0),
                epoch: t.counters_epoch.get(&key).copied(),
                limit: None,
                share: None,
                rev: None,
                share_rev: None,
            })
        };
        let mut items: Vec<CounterItem> = Vec::new();
        let mut next = self.call(op, &[], |t, _| Ok(next_after(t, None)))?;
        while let Some(item) = next {
            items.push(item);
            let pause = {
                let mut inner = self.inner.lock().unwrap();
                match inner.faults.chaos.as_mut() {
                    Some((chaos, rng)) if !chaos.counter_read_latency.is_zero() => {
                        let max = u64::try_from(chaos.counter_read_latency.as_micros()).unwrap_or(u64::MAX);
                        Duration::from_micros(rng.u64(0..=max))
                    }
                    _ => Duration::ZERO,
                }
            };
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            let cursor = items.last().map(|i| i.name.clone());
            next = next_after(&self.inner.lock().unwrap().tables, cursor.as_deref());
        }
        Ok(items)
    }

    /// Items per page of [`AuditStore::scope_items`](crate::store::AuditStore::scope_items) and the pause before the
    /// next page (drawn from the chaos generator; none without chaos).
    pub(super) fn page_shape(&self) -> (usize, Duration) {
        let mut inner = self.inner.lock().unwrap();
        match inner.faults.chaos.as_mut() {
            Some((chaos, rng)) => {
                let size = chaos.page_size.max(1);
                let max = u64::try_from(chaos.page_latency.as_micros()).unwrap_or(u64::MAX);
                (size, Duration::from_micros(if max == 0 { 0 } else { rng.u64(0..=max) }))
            }
            None => (usize::MAX, Duration::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::{Chaos, MemoryStore};
    use crate::ids::Scope;
    use crate::store::AuditStore;

    #[tokio::test(start_paused = true)]
    async fn a_counter_query_reads_item_by_item_and_can_see_a_repair_half_applied() {
        let store = Arc::new(MemoryStore::new());
        store.set_counter("acct", "best_effort#0", 1);
        store.set_counter("acct", "best_effort#1", 1);
        store.set_chaos(Chaos {
            seed: 1,
            counter_read_latency: Duration::from_millis(10),
            ..Chaos::default()
        });
        let read = store.counter_items(&Scope::new("acct").unwrap()).await.unwrap();
        // A repair moving one reservation from #0 to #1 lands while a Query
        // is between the two items: it reads #0 before and #1 after.
        let query = tokio::spawn({
            let store = store.clone();
            async move { store.counter_items(&Scope::new("acct").unwrap()).await }
        });
        tokio::task::yield_now().await;
        let targets = [("best_effort#0".to_owned(), 0), ("best_effort#1".to_owned(), 2)];
        assert_eq!(
            store
                .set_counters(&Scope::new("acct").unwrap(), &read, &targets, 1)
                .await,
            Ok(true)
        );
        let torn: Vec<i64> = query.await.unwrap().unwrap().iter().map(|i| i.count).collect();
        assert_eq!(torn, [1, 2], "read committed item by item, not a snapshot");
        assert_eq!(store.best_effort("acct"), 2);
    }
}
