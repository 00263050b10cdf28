//! The best-effort counter over shards: where a create counts, heat,
//! strict quotas, shard count changes.

use super::races::*;
use super::*;
/// The shard a delete of `id` takes from: the one its item recorded.
fn recorded_shard(store: &MemoryStore, scope: &str, id: &str) -> Option<u32> {
    store.tables().resources[&(scope.to_owned(), id.to_owned())]
        .state
        .be_shard
}

#[tokio::test]
async fn a_create_counts_on_the_shard_its_item_records_and_the_delete_takes_from_it() {
    for admission in [Admission::BestEffort, Admission::Strict] {
        let counter = Counter::new(MemoryStore::new(), 100)
            .with_admission(admission)
            .with_best_effort_shards(4)
            .with_seed(11);
        let (s, _) = ids("acct", "w");
        create_many(&counter, &s, 12).await;
        let mut used = std::collections::BTreeSet::new();
        for n in 0..12 {
            let id = format!("w{n}");
            let shard = recorded_shard(counter.store(), "acct", &id).expect("a sharded item records its shard");
            assert!(shard < 4, "{admission:?}: {shard}");
            used.insert(shard);
            let name = keys::best_effort_name(Some(shard));
            let before = counter.store().counter("acct", &name);
            counter.delete(&s, &ResourceId::new(id).unwrap(), NOW).await.unwrap();
            assert_eq!(counter.store().counter("acct", &name), before - 1, "{admission:?}");
        }
        assert!(
            used.len() > 1,
            "{admission:?}: creates spread over the shards: {used:?}"
        );
        assert_eq!(
            counter.store().counter("acct", keys::BEST_EFFORT_NAME),
            0,
            "{admission:?}"
        );
        assert_eq!(counter.store().best_effort("acct"), 0, "{admission:?}");
        // Three round trips per admitted create, sharded or not.
        let before = counter.store().calls().len();
        counter
            .create(&s, &ResourceId::new("again").unwrap(), Item::default(), NOW)
            .await
            .unwrap();
        assert_eq!(counter.store().calls().len() - before, 3, "{admission:?}");
    }
    // Unsharded items record nothing and count on `best_effort`.
    let counter = Counter::new(MemoryStore::new(), 5);
    let (s, id) = ids("acct", "w");
    counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    assert_eq!(recorded_shard(counter.store(), "acct", "w"), None);
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
}

/// Creates `id` in scope `acct` with its next `refusals` best-effort
/// writes throttled.
async fn create_throttled(counter: &Counter<MemoryStore>, id: &str, refusals: usize) -> Created {
    for _ in 0..refusals {
        counter.store().inject(Op::AddBestEffort, Fault::Throttled);
    }
    let (s, id) = ids("acct", id);
    counter.create(&s, &id, Item::default(), NOW).await.unwrap()
}

#[tokio::test]
async fn a_write_refused_for_heat_goes_to_another_shard_and_only_an_unknown_outcome_is_swallowed() {
    let counter = Counter::new(MemoryStore::new(), 100)
        .with_best_effort_shards(4)
        .with_seed(3);
    let (s, id) = ids("acct", "w");
    counter.store().inject(Op::AddBestEffort, Fault::Throttled);
    let created = counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    assert!(created.best_effort_counted);
    let recorded = keys::best_effort_name(recorded_shard(counter.store(), "acct", "w"));
    assert_eq!(
        counter.store().counter("acct", &recorded),
        0,
        "the throttled shard took nothing"
    );
    assert_eq!(counter.store().best_effort("acct"), 1, "another shard took the +1");
    assert_eq!(count_calls(counter.store(), Op::AddBestEffort), 2);
    assert_eq!(counter.swallowed_best_effort_writes(), 0);
    // A write with an unknown outcome is never sent again, anywhere.
    counter.store().inject(Op::AddBestEffort, Fault::Unavailable);
    let created = counter
        .create(&s, &ResourceId::new("x").unwrap(), Item::default(), NOW)
        .await
        .unwrap();
    assert!(!created.best_effort_counted);
    assert_eq!(count_calls(counter.store(), Op::AddBestEffort), 3);
    assert_eq!(
        counter.swallowed_best_effort_writes(),
        1,
        "counted, so the undercount shows"
    );
    assert_best_effort_not_above_live(counter.store(), "acct");
    // Every shard busy through every round: given up, counted.
    let created = create_throttled(&counter, "y", 16).await;
    assert!(!created.best_effort_counted);
    assert_eq!(
        count_calls(counter.store(), Op::AddBestEffort),
        3 + 16,
        "4 shards, 4 rounds"
    );
    assert_eq!(counter.swallowed_best_effort_writes(), 2);
    assert_best_effort_not_above_live(counter.store(), "acct");
}

#[tokio::test]
async fn without_the_rotation_a_write_refused_for_heat_stays_on_its_own_shard() {
    let counter = Counter::new(MemoryStore::new(), 100)
        .with_best_effort_shards(4)
        .with_retry_on_other_shards(false)
        .with_seed(3);
    let (s, id) = ids("acct", "w");
    counter.store().inject(Op::AddBestEffort, Fault::Throttled);
    counter.store().inject(Op::AddBestEffort, Fault::Throttled);
    let created = counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    assert!(created.best_effort_counted);
    let recorded = keys::best_effort_name(recorded_shard(counter.store(), "acct", "w"));
    assert_eq!(
        count_calls(counter.store(), Op::AddBestEffort),
        3,
        "two refusals, one retry each"
    );
    assert_eq!(
        counter.store().counter("acct", &recorded),
        1,
        "the retries went to the item's own shard"
    );
    assert_eq!(counter.store().best_effort("acct"), 1, "no other shard was written");
    // Busy through every attempt: given up after the backoff's 4
    // attempts on the one shard (with the rotation: 4 shards x 4 rounds).
    let created = create_throttled(&counter, "x", 16).await;
    assert!(!created.best_effort_counted);
    assert_eq!(count_calls(counter.store(), Op::AddBestEffort), 3 + 4);
    assert_eq!(counter.swallowed_best_effort_writes(), 1);
    assert_best_effort_not_above_live(counter.store(), "acct");
}

#[tokio::test]
async fn strict_admission_splits_the_limit_into_quotas_and_tries_every_shard_before_refusing() {
    let counter = Counter::new(MemoryStore::new(), 10)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(4)
        .with_seed(9);
    let (s, _) = ids("acct", "w");
    create_many(&counter, &s, 10).await;
    for (k, quota) in [3, 3, 2, 2].into_iter().enumerate() {
        let name = keys::best_effort_name(Some(k as u32));
        assert_eq!(
            counter.store().counter("acct", &name),
            quota,
            "shard {k} filled to its quota"
        );
    }
    assert_eq!(
        count_calls(counter.store(), Op::ReserveBestEffort),
        10,
        "one reservation each below the limit"
    );
    // The read shows the scope full: refused without a write.
    let err = counter
        .create(&s, &ResourceId::new("x").unwrap(), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { limit: 10, .. }), "{err}");
    assert_eq!(count_calls(counter.store(), Op::ReserveBestEffort), 10);
    // The read shows room (a create reserves the slot right after it):
    // every shard refuses, at most one reservation each.
    counter.delete(&s, &ResourceId::new("w0").unwrap(), NOW).await.unwrap();
    let freed = keys::best_effort_name(recorded_shard(counter.store(), "acct", "w0"));
    counter.store().after_next(Op::ReadCounters, move |t| {
        *t.counters.get_mut(&("acct".to_owned(), freed)).unwrap() += 1;
    });
    let err = counter
        .create(&s, &ResourceId::new("y").unwrap(), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
    assert_eq!(
        count_calls(counter.store(), Op::ReserveBestEffort),
        14,
        "four shards tried"
    );
    assert_eq!(counter.store().best_effort("acct"), 10);
}

#[tokio::test]
async fn strict_quotas_leave_out_what_items_of_an_earlier_shard_count_hold() {
    // Six items reserved on the unsharded `best_effort`, then the stack
    // moves to 4 shards: only 4 more fit under the limit of 10.
    let store = std::sync::Arc::new(MemoryStore::new());
    let before = Counter::new(store.clone(), 10).with_admission(Admission::Strict);
    let (s, _) = ids("acct", "w");
    create_many(&before, &s, 6).await;
    let after = Counter::new(store.clone(), 10)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(4)
        .with_seed(2);
    let mut admitted = 0;
    for n in 0..8 {
        if after
            .create(&s, &ResourceId::new(format!("n{n}")).unwrap(), Item::default(), NOW)
            .await
            .is_ok()
        {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 4);
    assert_eq!((live(&store, "acct"), store.best_effort("acct")), (10, 10));
    // Deleting an old item frees its slot on `best_effort` (the retired
    // item drains), and the quotas grow by as much.
    after.delete(&s, &ResourceId::new("w0").unwrap(), NOW).await.unwrap();
    assert_eq!(store.counter("acct", keys::BEST_EFFORT_NAME), 5);
    after
        .create(&s, &ResourceId::new("m").unwrap(), Item::default(), NOW)
        .await
        .unwrap();
    assert!(
        after
            .create(&s, &ResourceId::new("z").unwrap(), Item::default(), NOW)
            .await
            .is_err()
    );
    assert_best_effort_not_below_live(&store, "acct");
}

#[tokio::test]
async fn concurrent_creators_never_overshoot_in_strict_admission_over_shards() {
    for shards in 1..=8 {
        let (ok, live, be) = race_on(Admission::Strict, shards).await;
        assert_eq!((ok, live, be), (5, 5, 5), "{shards} shards");
    }
}

/// Strict admission when `BeShardCount` changes: the scope is filled
/// to a random level under one shard count, then creators and deleters
/// run concurrently under another (interleaved at every store call).
/// Checked after every write: `live <= limit` and `BE >= live`. Shards
/// left above their share by the old count are what a plain even split
/// would let overshoot (found on the emulator going from 2 to 8).
#[tokio::test]
async fn strict_admission_never_overshoots_after_the_shard_count_changes_under_concurrency() {
    for seed in 0..300u64 {
        let mut r = fastrand::Rng::with_seed(seed);
        let limit = r.u64(1..=12);
        let (before, after) = (r.u32(1..=8), r.u32(1..=8));
        let store = std::sync::Arc::new(MemoryStore::new());
        store.set_checker(move |t| {
            let live = t
                .resources
                .iter()
                .filter(|((s, _), r)| s == "acct" && !r.state.deleted)
                .count() as i64;
            let be: i64 = t
                .counters
                .iter()
                .filter(|((s, n), _)| s == "acct" && keys::is_best_effort_name(n))
                .map(|(_, c)| c)
                .sum();
            if live > limit as i64 || be < live {
                return Err(format!("live {live}, BE {be}, limit {limit}"));
            }
            Ok(())
        });
        let s = Scope::new("acct").unwrap();
        let old = Counter::new(store.clone(), limit)
            .with_admission(Admission::Strict)
            .with_best_effort_shards(before)
            .with_seed(seed);
        for n in 0..r.u64(0..=limit) {
            let _ = old
                .create(&s, &ResourceId::new(format!("o{n}")).unwrap(), Item::default(), NOW)
                .await;
        }
        let counter = Counter::new(Yielding(store.clone(), None), limit)
            .with_admission(Admission::Strict)
            .with_best_effort_shards(after)
            .with_seed(seed + 1);
        let work = (0..6).map(|w| {
            let (counter, s) = (&counter, &s);
            let mut r = fastrand::Rng::with_seed(seed * 31 + w);
            async move {
                for _ in 0..6 {
                    let id = ResourceId::new(format!("{}{}", ["o", "n"][r.usize(0..2)], r.u64(0..limit + 3))).unwrap();
                    if r.bool() {
                        let _ = counter.create(s, &id, Item::default(), NOW).await;
                    } else {
                        let _ = counter.delete(s, &id, NOW).await;
                    }
                }
            }
        });
        futures_join_all(work).await;
        assert_eq!(
            store.violation(),
            None,
            "seed {seed}: {before} -> {after} shards, limit {limit}"
        );
    }
}

#[test]
fn usage_takes_the_larger_counter_and_the_override() {
    let usage = Usage::new(
        &CounterSnapshot {
            best_effort: 2,
            eventual: 5,
            limit_override: Some(6),
            ..CounterSnapshot::default()
        },
        100,
    );
    assert_eq!(usage.effective, 5);
    assert_eq!(usage.limit, 6);
    assert!(usage.admits_one_more());
    let full = Usage::new(
        &CounterSnapshot {
            best_effort: 6,
            eventual: 1,
            limit_override: None,
            ..CounterSnapshot::default()
        },
        6,
    );
    assert!(!full.admits_one_more());
    let zero_limit = Usage::new(&CounterSnapshot::default(), 0);
    assert!(!zero_limit.admits_one_more());
}
