//! Races found by review, each failing on the first sharded version.

use super::races::*;
use super::*;
/// Strict admission after the switch from best-effort (BE undercounts:
/// 3 live items, BE 0). Two creators read BE = 0 (quotas 2 + 2 under a
/// limit of 4), the documented `audit --repair` raises BE to live (all 3
/// onto best_effort#0, the emptiest shard), then both reservations land
/// on best_effort#1 under their older quota 2: BE 5, live 5 > limit 4.
/// With one item the second reservation is refused (BE 4 = limit).
async fn repair_between_read_and_reserve(shards: u32) -> (i64, i64, usize) {
    let store = std::sync::Arc::new(MemoryStore::new());
    let s = Scope::new("acct").unwrap();
    // Created in best-effort admission on the unsharded item (the
    // default), so the raise after the switch to `shards` puts all
    // three on one active shard.
    let before = Counter::new(store.clone(), 4).with_seed(1);
    for n in 0..3 {
        store.inject(Op::AddBestEffort, Fault::Unavailable);
        before
            .create(&s, &ResourceId::new(format!("o{n}")).unwrap(), Item::default(), NOW)
            .await
            .unwrap();
    }
    assert_eq!((live(&store, "acct"), store.best_effort("acct")), (3, 0));
    let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let counter = Counter::new(Yielding(store.clone(), Some(open.clone())), 4)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(shards)
        .with_seed(2);
    let auditor = crate::audit::Auditor::new(&*store, Admission::Strict).with_best_effort_shards(shards);
    let creators = futures_join_all((0..2).map(|n| {
        let (counter, s) = (&counter, &s);
        async move {
            counter
                .create(s, &ResourceId::new(format!("n{n}")).unwrap(), Item::default(), NOW)
                .await
        }
    }));
    let reads = || store.calls().iter().filter(|op| **op == Op::ReadCounters).count();
    let before_reads = reads();
    let audit = async {
        // Both creators have read (and park before reserving).
        while reads() < before_reads + 2 {
            tokio::task::yield_now().await;
        }
        let audit = auditor
            .audit_scope(&s, crate::audit::RepairMode::Apply, NOW)
            .await
            .unwrap();
        // The raise lands at once, over shards too (issue 34 D2): it is
        // fenced, so the creates that read before it read again.
        assert!(audit.repaired, "{audit:?}");
        open.store(true, Ordering::SeqCst);
    };
    let (outcomes, ()) = tokio::join!(creators, audit);
    let ok = outcomes.iter().filter(|o| o.is_ok()).count();
    (live(&store, "acct"), store.best_effort("acct"), ok)
}

/// Fails without the fence: the raise (held back before, issue 34 D2)
/// lands between the creators' read and their reservations, which
/// reserve under the quotas the raise shrank.
#[tokio::test]
async fn a_strict_raise_over_shards_fences_out_creates_that_read_before_it() {
    for shards in [1, 2, 4] {
        assert_eq!(
            repair_between_read_and_reserve(shards).await,
            (4, 4, 1),
            "{shards} shards: the raise lands, one create fits, no overshoot"
        );
    }
}

/// Review of issue 34 D2: after a raise fenced a scope's shards, a
/// grown `BeShardCount` leaves the new shards absent. A read with them
/// absent may reserve only on them (still absent: it creates them at
/// the read's epoch), so creates go on, never 503 until an audit.
#[tokio::test]
async fn after_a_raise_a_grown_shard_count_takes_creates_on_its_new_shards() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let s = Scope::new("acct").unwrap();
    let before = Counter::new(store.clone(), 10).with_best_effort_shards(2).with_seed(1);
    store.inject(Op::AddBestEffort, Fault::Unavailable);
    before
        .create(&s, &ResourceId::new("w0").unwrap(), Item::default(), NOW)
        .await
        .unwrap();
    let audit = crate::audit::Auditor::new(&*store, Admission::Strict)
        .with_best_effort_shards(2)
        .audit_scope(&s, crate::audit::RepairMode::Apply, NOW)
        .await
        .unwrap();
    assert!(audit.repaired, "{audit:?}");
    let grown = Counter::new(store.clone(), 10)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(4)
        .with_seed(2);
    for n in 0..6 {
        grown
            .create(&s, &ResourceId::new(format!("n{n}")).unwrap(), Item::default(), NOW)
            .await
            .unwrap();
    }
    assert!(
        store.tables().counters_epoch.len() >= 4,
        "the new shards were created fenced"
    );
    assert_eq!((live(&store, "acct"), store.best_effort("acct")), (7, 7));
}

/// Issue 34's second review: after a raise fenced 2 shards, a grown
/// `BeShardCount` (3) leaves #2 absent, and a read may reserve only on
/// it; under a limit of 2 with one live item #2's quota is 0 (the
/// share went to the present shards), so every create is refused
/// below the limit (503, naming the audit), and BE equals live. The
/// audit finds `ShardsAbsent` and its raise of 0 creates #2 fenced;
/// creates then go on.
#[tokio::test]
async fn shards_absent_since_a_raise_are_created_by_the_audit_and_creates_go_on() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let s = Scope::new("acct").unwrap();
    let before = Counter::new(store.clone(), 2).with_best_effort_shards(2).with_seed(1);
    store.inject(Op::AddBestEffort, Fault::Unavailable);
    before
        .create(&s, &ResourceId::new("w0").unwrap(), Item::default(), NOW)
        .await
        .unwrap();
    let strict_audit = |shards| crate::audit::Auditor::new(&*store, Admission::Strict).with_best_effort_shards(shards);
    let raised = strict_audit(2)
        .audit_scope(&s, crate::audit::RepairMode::Apply, NOW)
        .await
        .unwrap();
    assert!(raised.repaired, "{raised:?}");
    let grown = Counter::new(store.clone(), 2)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(3)
        .with_seed(2);
    let refused = grown
        .create(&s, &ResourceId::new("n0").unwrap(), Item::default(), NOW)
        .await;
    assert!(
        matches!(&refused, Err(Error::Unavailable(why)) if why.contains("audit")),
        "below the limit, not LimitExceeded: {refused:?}"
    );
    assert_eq!((live(&store, "acct"), store.best_effort("acct")), (1, 1));
    let audit = strict_audit(3)
        .audit_scope(&s, crate::audit::RepairMode::Apply, NOW)
        .await
        .unwrap();
    assert!(
        audit.findings.contains(&crate::audit::Finding::ShardsAbsent) && audit.repaired,
        "{audit:?}"
    );
    grown
        .create(&s, &ResourceId::new("n1").unwrap(), Item::default(), NOW)
        .await
        .unwrap();
    assert_eq!((live(&store, "acct"), store.best_effort("acct")), (2, 2));
}

/// Issue 34's third review: a retired shard below 0 while BE equals
/// live. Best-effort admission over 3 shards rotated an item's `+1`
/// from #2 to #0; `BeShardCount` 2 and the switch to strict; the item's
/// strict delete took #2 to -1; one create: (1, 1, -1) with 1 live
/// item under a limit of 2. Quotas (0, 0): every create refused below
/// the limit, and no finding. The audit now finds `RetiredBelowZero`
/// and fills #2 back to 0; the over-reservation that shows (BE 2, live
/// 1) is lowered after the grace, and creates go on.
#[tokio::test]
async fn a_retired_shard_below_zero_is_filled_by_the_audit_and_creates_go_on() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let s = Scope::new("acct").unwrap();
    store.put_item("acct", "y", "iy", true, false).await;
    for (shard, count) in [(0, 1), (1, 1), (2, -1)] {
        store.set_counter("acct", &keys::best_effort_name(Some(shard)), count);
    }
    let strict = Counter::new(store.clone(), 2)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(2)
        .with_seed(3);
    let refused = strict
        .create(&s, &ResourceId::new("n0").unwrap(), Item::default(), NOW)
        .await;
    assert!(matches!(refused, Err(Error::LimitExceeded { .. })), "{refused:?}");
    let auditor = crate::audit::Auditor::new(&*store, Admission::Strict).with_best_effort_shards(2);
    let filled = auditor
        .audit_scope(&s, crate::audit::RepairMode::Apply, NOW)
        .await
        .unwrap();
    assert!(
        filled
            .findings
            .contains(&crate::audit::Finding::RetiredBelowZero { below: 1 })
            && filled.repaired,
        "{filled:?}"
    );
    assert_eq!(store.counter("acct", "best_effort#2"), 0);
    let lowered = auditor
        .audit_scope(&s, crate::audit::RepairMode::Apply, NOW + 10 * REQUEST_GRACE_TEST)
        .await
        .unwrap();
    assert!(lowered.repaired, "{lowered:?}");
    strict
        .create(
            &s,
            &ResourceId::new("n1").unwrap(),
            Item::default(),
            NOW + 10 * REQUEST_GRACE_TEST,
        )
        .await
        .unwrap();
    assert_eq!(live(&store, "acct"), 2);
}

/// DynamoDB semantics for a zero quota: one throttled decrement sent to
/// the other shard leaves best_effort#0 = 1 (no item), #1 = -1; quotas
/// are then (0, 0) and every create is refused below the limit, for
/// good: BE == live, so the audit finds nothing to repair.
#[tokio::test]
async fn a_strict_decrement_stays_on_its_shard_so_no_scope_locks_below_its_limit() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let counter = Counter::new(Yielding(store.clone(), Some(open)), 1)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(2)
        .with_seed(4);
    let (s, a) = ids("acct", "a");
    counter.create(&s, &a, Item::default(), NOW).await.unwrap();
    store.inject(Op::AddBestEffort, Fault::Throttled);
    counter.delete(&s, &a, NOW).await.unwrap();
    let shards = (
        store.counter("acct", "best_effort#0"),
        store.counter("acct", "best_effort#1"),
    );
    let auditor = crate::audit::Auditor::new(&*store, Admission::Strict).with_best_effort_shards(2);
    let audit = auditor
        .audit_scope(&s, crate::audit::RepairMode::Apply, NOW + 10 * REQUEST_GRACE_TEST)
        .await
        .unwrap();
    let again = counter
        .create(&s, &ResourceId::new("b").unwrap(), Item::default(), NOW)
        .await;
    assert!(
        again.is_ok(),
        "live {}, BE {}, shards {shards:?}, audit findings {:?} repaired {}: {again:?}",
        live(&store, "acct"),
        store.best_effort("acct"),
        audit.findings,
        audit.repaired
    );
}

/// Issue 34, the model's trace on the request path (2 shards, limit
/// 2): two creators read (0, 0) (quotas 1 and 1) and park; a strict
/// delete's `-1` in flight across the audit's raise lands after it on
/// #0 (the raise already counted that item gone): (-1, 0). Two more
/// creates read (-1, 0). Had #0, nothing left of its share, lent it to
/// #1 (quotas 0 and 2), both would land on #1, and the parked two on #0
/// under their quota 1 (-1 -> 0 -> 1): live 4 against limit 2 with one
/// request in flight (the bound is 1). #0 keeps its share: #1's quota
/// is 1, one of the two is refused.
#[tokio::test]
async fn a_shard_gone_below_zero_since_the_read_lends_nothing_past_the_limit() {
    use std::sync::atomic::AtomicBool;
    let store = std::sync::Arc::new(MemoryStore::new());
    let s = Scope::new("acct").unwrap();
    store.set_counter("acct", "best_effort#0", 0);
    store.set_counter("acct", "best_effort#1", 0);
    let gate = || std::sync::Arc::new(AtomicBool::new(false));
    let (first_open, then_open, landed) = (gate(), gate(), gate());
    let strict = |open: &std::sync::Arc<AtomicBool>, seed| {
        Counter::new(Yielding(store.clone(), Some(open.clone())), 2)
            .with_admission(Admission::Strict)
            .with_best_effort_shards(2)
            .with_seed(seed)
    };
    let (first, then) = (strict(&first_open, 1), strict(&then_open, 2));
    let reads = || store.calls().iter().filter(|op| **op == Op::ReadCounters).count();
    // p0, p1 read first and park; q0, q1 read once the -1 has landed.
    async fn create_once(
        counter: &Counter<Yielding<MemoryStore>>,
        s: &Scope,
        id: &str,
        after: Option<&AtomicBool>,
        done: &std::sync::atomic::AtomicUsize,
    ) -> Result<Created, Error> {
        while after.is_some_and(|landed| !landed.load(Ordering::SeqCst)) {
            tokio::task::yield_now().await;
        }
        let created = counter
            .create(s, &ResourceId::new(id).unwrap(), Item::default(), NOW)
            .await;
        done.fetch_add(1, Ordering::SeqCst);
        created
    }
    let done = std::sync::atomic::AtomicUsize::new(0);
    let creators = futures_join_all([
        create_once(&first, &s, "p0", None, &done),
        create_once(&first, &s, "p1", None, &done),
        create_once(&then, &s, "q0", Some(&landed), &done),
        create_once(&then, &s, "q1", Some(&landed), &done),
    ]);
    let script = async {
        while reads() < 2 {
            tokio::task::yield_now().await;
        }
        store.set_counter("acct", "best_effort#0", -1);
        landed.store(true, Ordering::SeqCst);
        while reads() < 4 {
            tokio::task::yield_now().await;
        }
        then_open.store(true, Ordering::SeqCst);
        // q0 and q1 answered (without #0's share kept for #0, both
        // land on #1 under its quota 2).
        while done.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        first_open.store(true, Ordering::SeqCst);
    };
    let (outcomes, ()) = tokio::join!(creators, script);
    assert!(
        live(&store, "acct") <= 2 + 1,
        "live {} against limit 2 with one -1 in flight, BE ({}, {}): {outcomes:?}",
        live(&store, "acct"),
        store.counter("acct", "best_effort#0"),
        store.counter("acct", "best_effort#1"),
    );
}

/// Issue 34's review, 3 shards, limit 4: after a raise
/// BE (0, 0, 2) covers 2 live items, and a strict `-1` in flight across
/// it lands on #0: (-1, 0, 2). Create A reads that and parks: #2 holds
/// 2, #0 gets nothing of its share, and lending that share to #1 gave
/// #1 a quota of 2. An item of #2 is deleted: (-1, 0, 1). Creates then
/// fill the scope, #0 back from -1 to its full share: (2, 1, 1), live
/// 5. A's reservation lands on #1 under its quota 2: live 6 against
/// 4 + 1. With #0's share kept for #0 (never frozen below 0), A's
/// quota on #1 is 1 and it is refused.
#[tokio::test]
async fn a_shard_read_below_zero_lends_its_share_to_no_other_shard() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let s = Scope::new("acct").unwrap();
    store.put_item("acct", "d0", "i0", true, false).await;
    store.put_item("acct", "d1", "i1", true, false).await;
    for (shard, count) in [(0, -1), (1, 0), (2, 2)] {
        store.set_counter("acct", &keys::best_effort_name(Some(shard)), count);
    }
    let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let strict = |open, seed| {
        Counter::new(Yielding(store.clone(), open), 4)
            .with_admission(Admission::Strict)
            .with_best_effort_shards(3)
            .with_seed(seed)
    };
    let (parked, prompt) = (strict(Some(open.clone()), 1), strict(None, 2));
    let reads = || store.calls().iter().filter(|op| **op == Op::ReadCounters).count();
    let before = reads();
    let a_id = ResourceId::new("a").unwrap();
    let a = parked.create(&s, &a_id, Item::default(), NOW);
    let meanwhile = async {
        while reads() == before {
            tokio::task::yield_now().await;
        }
        let d0 = ResourceKey {
            scope: s.clone(),
            id: ResourceId::new("d0").unwrap(),
        };
        store.mark_deleted(&d0, "i0", NOW).await.unwrap();
        store.set_counter("acct", "best_effort#2", 1);
        for n in 0..20 {
            match prompt
                .create(&s, &ResourceId::new(format!("q{n}")).unwrap(), Item::default(), NOW)
                .await
            {
                Ok(_) => {}
                Err(Error::LimitExceeded { .. }) => break,
                Err(err) => panic!("{err}"),
            }
        }
        open.store(true, Ordering::SeqCst);
    };
    let (a, ()) = tokio::join!(a, meanwhile);
    assert!(
        live(&store, "acct") <= 4 + 1,
        "live {} against limit 4 with one -1 in flight, BE {}: A {a:?}",
        live(&store, "acct"),
        store.best_effort("acct"),
    );
}

const REQUEST_GRACE_TEST: EpochMillis = 10 * 60 * 1000;

/// Memory-store semantics (a negative shard under a zero quota may
/// still reserve): after the limit override drops to 1, rotated
/// decrements leave (2, -2) with no live item; the quota clamp
/// (`rest = max(limit - held, 0)`) gives the negative shard quota 0 and
/// `-1 < 0` admits: BE 2, live 2 > limit 1.
#[tokio::test]
async fn a_shard_below_zero_takes_only_its_share() {
    let store = std::sync::Arc::new(MemoryStore::new());
    // Best-effort admission moved two decrements off a throttled
    // shard: (2, -2) with no live item, then the stack went strict and
    // the limit override down to 1.
    let s = Scope::new("acct").unwrap();
    store.set_counter("acct", "best_effort#0", 2);
    store.set_counter("acct", "best_effort#1", -2);
    store.set_limit("acct", Some(1));
    let racing = Counter::new(Yielding(store.clone(), None), 4)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(2)
        .with_seed(5);
    let out = futures_join_all((0..2).map(|n| {
        let (racing, s) = (&racing, &s);
        async move {
            racing
                .create(s, &ResourceId::new(format!("x{n}")).unwrap(), Item::default(), NOW)
                .await
        }
    }))
    .await;
    assert!(
        live(&store, "acct") <= 1,
        "{out:?}: live {}, BE {}, limit 1",
        live(&store, "acct"),
        store.best_effort("acct")
    );
}
