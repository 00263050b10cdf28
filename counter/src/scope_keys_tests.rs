//! The request path, the stream and the audit on a scope spread over
//! several keys ([`crate::scope_keys`]): each key is a scope of its own
//! to the stream and the audit, and admission never lets the keys together
//! hold more than the scope's limit, except while a key is above its share
//! (exception (4) of docs/design.md, tested here too).

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

/// Simulation seed 1592593515: each key admits against its own share, so
/// after a lowering to an even split a key above its new share kept its
/// item while another filled its share, 2 live against a limit of 1. `limit
/// set` assigns each key its share from what the keys hold
/// ([`crate::shares`]): the key holding the item keeps it as its share, the
/// other gets none. A limit written without shares (the even split, as a
/// `DefaultLimit` lowering is) still lets the other key fill its share:
/// exception (4) of docs/design.md.
#[tokio::test]
async fn a_lowering_assigns_each_key_its_share_from_what_it_holds_so_no_other_key_passes_the_limit() {
    let store = Arc::new(MemoryStore::new());
    let counter = spread(store.clone(), 2, 3, Admission::Strict);
    let keys = ScopeKeys::new(2).unwrap();
    let on = |key: u32, nth: usize| (0..).map(id).filter(|i| keys.index(i) == key).nth(nth).unwrap();
    counter.create(&scope(), &on(1, 0), Item::default(), NOW).await.unwrap();
    store.set_scope_limit(keys, &scope(), Some(1), 3).await.unwrap();
    let refused = counter
        .create(&scope(), &on(0, 0), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(refused.is_limit_exceeded(), "key 0's share is 0: {refused}");
    let refused = counter
        .create(&scope(), &on(1, 1), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(refused.is_limit_exceeded(), "key 1 is at its share: {refused}");
    assert_eq!(live_by_key(&store).values().sum::<i64>(), 1);
    // Raised back: the shares cover what each key holds again.
    store.set_scope_limit(keys, &scope(), Some(3), 3).await.unwrap();
    for nth in 0..2 {
        counter
            .create(&scope(), &on(0, nth), Item::default(), NOW)
            .await
            .unwrap();
    }
    assert!(counter.create(&scope(), &on(0, 2), Item::default(), NOW).await.is_err());
    assert_eq!(live_by_key(&store).values().sum::<i64>(), 3);

    // The even split, written without shares: key 1 holds 1 above its 0
    // while key 0 fills its 1.
    let store = Arc::new(MemoryStore::new());
    let counter = spread(store.clone(), 2, 3, Admission::Strict);
    counter.create(&scope(), &on(1, 0), Item::default(), NOW).await.unwrap();
    for key in keys.keys(&scope()).unwrap() {
        store.set_limit(key.as_str(), Some(1));
    }
    counter.create(&scope(), &on(0, 0), Item::default(), NOW).await.unwrap();
    assert_eq!(
        live_by_key(&store).values().sum::<i64>(),
        2,
        "exception (4) without shares"
    );
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

/// Two levels (`ResourceKeySpread` M > 1): items under `acct#r` with
/// `r mod N` their counters key, BE and admission on the counters key, the
/// stream counting each resources key's changes on its counters key (in
/// batches that mix resources keys), and an audit of a counters key
/// reading every resources key of it. With one key per level they are the
/// same as above.
#[tokio::test]
async fn two_levels_keep_items_on_resources_keys_and_count_them_on_their_counters_key() {
    for (count, spread_by) in [(4, 8), (1, 8)] {
        for admission in [Admission::BestEffort, Admission::Strict] {
            for mode in [
                crate::stream::process::Mode::Batched,
                crate::stream::process::Mode::PerRecord,
            ] {
                let case = format!("N={count} M={spread_by} {admission:?} {mode:?}");
                let store = Arc::new(MemoryStore::new());
                let layout = ScopeKeys::new(count).unwrap().with_spread(spread_by).unwrap();
                let counter = spread(store.clone(), count, 1_000, admission).with_scope_keys(layout);
                for n in 0..200 {
                    counter.create(&scope(), &id(n), Item::default(), NOW).await.unwrap();
                }
                for n in 0..50 {
                    counter.delete(&scope(), &id(n), NOW).await.unwrap();
                }
                // Each item sits under its resources key, never a counters key
                // of another index, and every resources key is reached.
                for (key, item_id) in store.tables().resources.keys() {
                    let r = layout.resource_index(&ResourceId::new(item_id.as_str()).unwrap());
                    assert_eq!(key, &format!("acct#{r}"), "{case}");
                    assert_eq!(
                        r % count,
                        layout.index(&ResourceId::new(item_id.as_str()).unwrap()),
                        "{case}"
                    );
                }
                let resources_keys = live_by_key(&store);
                assert_eq!(
                    resources_keys.len() as u32,
                    count * spread_by,
                    "{case}: 200 ids reach every key"
                );
                let counters_keys = layout.keys(&scope()).unwrap();
                let live_of = |counters_key: &Scope| -> i64 {
                    layout
                        .resource_keys_of(counters_key)
                        .iter()
                        .map(|k| resources_keys.get(k.as_str()).copied().unwrap_or(0))
                        .sum()
                };
                for key in &counters_keys {
                    assert_eq!(store.best_effort(key.as_str()), live_of(key), "{case}: BE of {key}");
                }
                assert_eq!(counter.usage(&scope()).await.unwrap().best_effort, 150, "{case}");
                // The whole stream, in batches of 100 that mix resources keys.
                let processor = Processor::new(store.clone()).with_mode(mode).with_scope_keys(layout);
                let records = store.stream_changes();
                for batch in records.chunks(100) {
                    let report = processor.process(batch.to_vec(), NOW).await;
                    assert_eq!(report.failure_reason, None, "{case}");
                }
                for key in &counters_keys {
                    assert_eq!(
                        store.counter(key.as_str(), keys::EVENTUAL_NAME),
                        live_of(key),
                        "{case}: EC of {key}"
                    );
                    let audit = Auditor::new(&*store, admission)
                        .with_scope_keys(layout)
                        .audit_scope(key, RepairMode::None, NOW)
                        .await
                        .unwrap();
                    assert!(audit.findings.is_empty(), "{case}: {key}: {audit:?}");
                    assert_eq!(audit.counts.live as i64, live_of(key), "{case}: {key}");
                }
                // Nothing is counted on a resources key that is not a counters key.
                for key in resources_keys.keys() {
                    if !counters_keys.iter().any(|c| c.as_str() == key) {
                        assert_eq!(store.counter(key, keys::EVENTUAL_NAME), 0, "{case}: {key}");
                        assert_eq!(store.best_effort(key), 0, "{case}: {key}");
                    }
                }
                assert_eq!(counter.usage(&scope()).await.unwrap().eventual, 150, "{case}");
                // An audit that reads only the counters key's own partition
                // (the layout left out) sees drift: the mapping is what makes
                // it exact.
                if count > 1 || spread_by > 1 {
                    let blind = Auditor::new(&*store, admission)
                        .audit_scope(&counters_keys[0], RepairMode::None, NOW)
                        .await
                        .unwrap();
                    assert!(!blind.findings.is_empty(), "{case}: {blind:?}");
                }
            }
        }
    }
}

/// Strict admission over two levels: the resources keys hold no state, so
/// concurrent creators on one counters key's many resources keys still never
/// let the scope past its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strict_admission_over_two_levels_never_overshoots_the_limit() {
    for seed in 0..6 {
        let store = Arc::new(MemoryStore::new());
        store.set_chaos(Chaos {
            seed,
            counter_read_latency: Duration::from_micros(200),
            transaction_latency: Duration::from_micros(300),
            ..Chaos::default()
        });
        let layout = ScopeKeys::new(2).unwrap().with_spread(16).unwrap();
        let counter = Arc::new(
            spread(store.clone(), 2, 10, Admission::Strict)
                .with_scope_keys(layout)
                .with_best_effort_shards(2),
        );
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
        for key in layout.keys(&scope()).unwrap() {
            let on_key: i64 = layout
                .resource_keys_of(&key)
                .iter()
                .map(|k| live_by_key(&store).get(k.as_str()).copied().unwrap_or(0))
                .sum();
            assert!(
                store.best_effort(key.as_str()) >= on_key,
                "seed {seed}: {key}: BE below live"
            );
        }
    }
}

/// Two levels under concurrency (review 1, finding 5): creators and
/// deleters, the stream consumer draining batches that mix resources keys,
/// and an auditor repairing every counters key (its M Queries read item by
/// item, with page latency, while the others write), all at once. After
/// every write `EC(c) == processed items over c's resources keys` for each
/// counters key `c`, and in best-effort admission `BE(c) <= live`; a repair
/// that trusted a count torn across its Queries would break the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_levels_stay_exact_while_clients_the_stream_and_a_repairing_audit_run_together() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let layout = ScopeKeys::new(2).unwrap().with_spread(4).unwrap();
    for seed in 0..4 {
        let store = Arc::new(MemoryStore::new());
        store.set_chaos(Chaos {
            seed,
            counter_read_latency: Duration::from_micros(300),
            transaction_latency: Duration::from_micros(400),
            page_latency: Duration::from_micros(300),
            page_size: 2,
            ..Chaos::default()
        });
        store.set_checker(move |tables| {
            for counters_key in layout.keys(&scope()).unwrap() {
                let over = layout.resource_keys_of(&counters_key);
                let of_key = |s: &String| over.iter().any(|k| k.as_str() == s);
                let processed = tables
                    .resources
                    .iter()
                    .filter(|((s, _), r)| of_key(s) && r.state.counter_processed)
                    .count() as i64;
                let live = tables
                    .resources
                    .iter()
                    .filter(|((s, _), r)| of_key(s) && !r.state.deleted)
                    .count() as i64;
                let sum = |kind: fn(&str) -> bool| {
                    tables
                        .counters
                        .iter()
                        .filter(|((s, name), _)| s == counters_key.as_str() && kind(name))
                        .map(|(_, n)| *n)
                        .sum::<i64>()
                };
                let (ec, be) = (sum(keys::is_eventual_name), sum(keys::is_best_effort_name));
                if ec != processed {
                    return Err(format!("{counters_key}: EC {ec} != processed {processed}"));
                }
                if be > live {
                    return Err(format!("{counters_key}: BE {be} above live {live}"));
                }
            }
            Ok(())
        });
        let counter = Arc::new(spread(store.clone(), 2, 1_000, Admission::BestEffort).with_scope_keys(layout));
        let done = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..4)
            .map(|lane| {
                let counter = counter.clone();
                tokio::spawn(async move {
                    for n in (lane..60).step_by(4) {
                        let _ = counter.create(&scope(), &id(n), Item::default(), NOW).await;
                        if n % 3 == 0 {
                            let _ = counter.delete(&scope(), &id(n), NOW).await;
                        }
                    }
                })
            })
            .collect();
        let consumer = {
            let (store, done) = (store.clone(), done.clone());
            tokio::spawn(async move {
                let processor = Processor::new(store.clone()).with_scope_keys(layout);
                loop {
                    let finished = done.load(Ordering::SeqCst);
                    for batch in store.stream_changes().chunks(10) {
                        processor.process(batch.to_vec(), NOW).await;
                    }
                    if finished {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            })
        };
        let auditor = {
            let (store, done) = (store.clone(), done.clone());
            tokio::spawn(async move {
                // The default grace: a best-effort raise waits for the
                // requests in flight (as documented), an EC repair does not.
                let audit = Auditor::new(&*store, Admission::BestEffort).with_scope_keys(layout);
                while !done.load(Ordering::SeqCst) {
                    for key in layout.keys(&scope()).unwrap() {
                        let _ = audit.audit_scope(&key, RepairMode::Apply, NOW).await;
                    }
                }
            })
        };
        for client in clients {
            client.await.unwrap();
        }
        done.store(true, Ordering::SeqCst);
        consumer.await.unwrap();
        auditor.await.unwrap();
        assert_eq!(store.violation(), None, "seed {seed}");
        let live: i64 = live_by_key(&store).values().sum();
        assert_eq!(
            counter.usage(&scope()).await.unwrap().eventual,
            live,
            "seed {seed}: drained"
        );
    }
}
