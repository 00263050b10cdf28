//! The request path, the stream and the audit on a scope spread over
//! several keys ([`crate::scope_keys`]): each key is a scope of its own
//! to the stream and the audit, and admission never lets the keys together
//! hold more than the scope's limit.

use std::sync::Arc;
use std::time::Duration;

use serde_dynamo::Item;

use crate::audit::engine::{Auditor, RepairMode, pending_changes};
use crate::config::Admission;
use crate::error::Error;
use crate::ids::{ResourceId, Scope};
use crate::keys;
use crate::memory::{Chaos, MemoryStore};
use crate::request::Counter;
use crate::scope_keys::ScopeKeys;
use crate::stream::process::Processor;

const NOW: crate::time::EpochMillis = 1_700_000_000_000;

fn scope() -> Scope {
    Scope::new("acct").unwrap()
}

fn id(n: u32) -> ResourceId {
    ResourceId::new(format!("item-{n:04}")).unwrap()
}

fn spread(store: Arc<MemoryStore>, keys: u32, limit: u64, admission: Admission) -> Counter<MemoryStore> {
    Counter::new(store, limit)
        .with_admission(admission)
        .with_scope_keys(ScopeKeys::new(keys).unwrap())
        .with_seed(3)
}

/// Live items per partition key.
fn live_by_key(store: &MemoryStore) -> std::collections::BTreeMap<String, i64> {
    let mut live = std::collections::BTreeMap::new();
    for ((key, _), item) in store.tables().resources {
        if !item.state.deleted {
            *live.entry(key).or_default() += 1;
        }
    }
    live
}

#[tokio::test]
async fn items_live_under_their_key_and_every_part_counts_them_there() {
    for admission in [Admission::BestEffort, Admission::Strict] {
        let store = Arc::new(MemoryStore::new());
        let counter = spread(store.clone(), 4, 100, admission);
        let layout = counter.scope_keys();
        for n in 0..40 {
            counter.create(&scope(), &id(n), Item::default(), NOW).await.unwrap();
        }
        for n in 0..10 {
            counter.delete(&scope(), &id(n), NOW).await.unwrap();
        }
        // Every item sits under the key its id hashes to, never the bare scope.
        for (key, item_id) in store.tables().resources.keys() {
            let index = layout.index(&ResourceId::new(item_id.as_str()).unwrap());
            assert_eq!(key, &format!("acct#{index}"), "{admission:?}");
        }
        assert_eq!(live_by_key(&store).len(), 4, "{admission:?}: 40 ids reach every key");
        // BE is kept per key; the usage sums the keys.
        let usage = counter.usage(&scope()).await.unwrap();
        assert_eq!(usage.best_effort, 30, "{admission:?}");
        assert_eq!(usage.limit, 100);
        for (key, live) in live_by_key(&store) {
            assert_eq!(store.best_effort(&key), live, "{admission:?}: {key}");
        }
        // The stream counts each key's changes on that key's counter, and
        // the audit finds each key exact.
        let processor = Processor::new(store.clone());
        for key in layout.keys(&scope()).unwrap() {
            let changes = pending_changes(&*store, &key).await.unwrap();
            let report = processor.process(changes.into_iter().map(Ok), NOW).await;
            assert_eq!(report.failure_reason, None);
        }
        for (key, live) in live_by_key(&store) {
            assert_eq!(store.counter(&key, keys::EVENTUAL_NAME), live, "{admission:?}: {key}");
            let audit = Auditor::new(&*store, admission)
                .audit_scope(&Scope::new(key.as_str()).unwrap(), RepairMode::None, NOW)
                .await
                .unwrap();
            assert!(audit.findings.is_empty(), "{admission:?}: {key}: {audit:?}");
        }
        assert_eq!(counter.usage(&scope()).await.unwrap().eventual, 30);
        assert!(store.counter("acct", keys::EVENTUAL_NAME) == 0 && store.best_effort("acct") == 0);
    }
}

#[tokio::test]
async fn a_key_at_its_share_refuses_with_the_share_and_the_scope_limit() {
    for admission in [Admission::BestEffort, Admission::Strict] {
        let store = Arc::new(MemoryStore::new());
        // A limit of 9 over 4 keys: shares 3, 2, 2, 2.
        let counter = spread(store.clone(), 4, 9, admission);
        let layout = counter.scope_keys();
        let mut refused = Vec::new();
        for n in 0..200 {
            match counter.create(&scope(), &id(n), Item::default(), NOW).await {
                Ok(_) => {}
                Err(Error::ShareExceeded {
                    usage,
                    share,
                    limit,
                    key,
                    keys,
                }) => {
                    assert_eq!((limit, keys), (9, 4), "{admission:?}");
                    assert_eq!(share, layout.share(9, key), "{admission:?}");
                    assert_eq!(usage, share as i64, "{admission:?}: refused only when full");
                    assert_eq!(key, layout.index(&id(n)), "{admission:?}: the id's own key");
                    refused.push(key);
                }
                Err(other) => panic!("{admission:?}: {other}"),
            }
        }
        let live = live_by_key(&store);
        for index in 0..4 {
            assert_eq!(
                live[&format!("acct#{index}")],
                layout.share(9, index) as i64,
                "{admission:?}"
            );
        }
        assert_eq!(
            live.values().sum::<i64>(),
            9,
            "{admission:?}: the keys fill to the limit, not past it"
        );
        assert!(refused.len() >= 191, "{admission:?}");
    }
}

#[tokio::test]
async fn a_limit_override_is_shared_from_each_keys_own_copy() {
    let store = Arc::new(MemoryStore::new());
    let counter = spread(store.clone(), 2, 1_000, Admission::BestEffort);
    for key in counter.scope_keys().keys(&scope()).unwrap() {
        store.set_limit(key.as_str(), Some(4));
    }
    let mut created = 0;
    for n in 0..50 {
        created += u32::from(counter.create(&scope(), &id(n), Item::default(), NOW).await.is_ok());
    }
    assert_eq!(created, 4);
    assert_eq!(counter.usage(&scope()).await.unwrap().limit, 4);
}

/// Strict admission's promise over keys: concurrent creators, reads that
/// interleave item by item, transactions that hold items, and the keys
/// together never hold more than the scope's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strict_admission_never_lets_the_keys_together_overshoot_the_limit() {
    for seed in 0..8 {
        let store = Arc::new(MemoryStore::new());
        store.set_chaos(Chaos {
            seed,
            counter_read_latency: Duration::from_micros(200),
            transaction_latency: Duration::from_micros(300),
            ..Chaos::default()
        });
        let counter = Arc::new(spread(store.clone(), 4, 10, Admission::Strict).with_best_effort_shards(2));
        let tasks: Vec<_> = (0..60)
            .map(|n| {
                let counter = counter.clone();
                tokio::spawn(async move { counter.create(&scope(), &id(n), Item::default(), NOW).await })
            })
            .collect();
        for task in tasks {
            let _ = task.await.unwrap();
        }
        let live: i64 = live_by_key(&store).values().sum();
        assert!(live <= 10, "seed {seed}: {live} live items over a limit of 10");
        for (key, live) in live_by_key(&store) {
            assert!(store.best_effort(&key) >= live, "seed {seed}: {key}: BE below live");
        }
    }
}

/// A stack's configuration reaches the request path: `Counter::configured`
/// spreads scopes over the configured keys.
#[tokio::test]
async fn the_configured_counter_spreads_scopes_over_the_configured_keys() {
    let store = Arc::new(MemoryStore::new());
    let config = crate::config::CounterConfig {
        resources_table: "r".into(),
        counters_table: "c".into(),
        default_limit: Some(10),
        eventual_shards: 1,
        best_effort_shards: 1,
        admission: Admission::BestEffort,
        scope_keys: ScopeKeys::new(4).unwrap(),
    };
    let counter = Counter::configured(store.clone(), 10, &config);
    counter.create(&scope(), &id(1), Item::default(), NOW).await.unwrap();
    let (key, _) = store.tables().resources.keys().next().cloned().unwrap();
    assert_eq!(key, format!("acct#{}", config.scope_keys.index(&id(1))));
}

/// Review 1 (7): the usage's `effective` is what the keys admit against
/// together, the sum of each key's `max(BE, EC)`, not `max(sum BE, sum EC)`.
#[tokio::test]
async fn usage_sums_each_keys_effective_count() {
    let store = Arc::new(MemoryStore::new());
    let counter = spread(store.clone(), 2, 100, Admission::BestEffort);
    store.set_counter("acct#0", keys::BEST_EFFORT_NAME, 5);
    store.set_counter("acct#1", keys::EVENTUAL_NAME, 5);
    let usage = counter.usage(&scope()).await.unwrap();
    assert_eq!((usage.best_effort, usage.eventual, usage.effective), (5, 5, 10));
}
