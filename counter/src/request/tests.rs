//! The request path's tests: admission, puts whose answer was lost, busy
//! retries, deletes and strict reservations over shards.

use super::*;
use crate::memory::{Fault, MemoryStore, Op};

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
    let be = store.best_effort(scope);
    assert!(be <= live, "BE {be} above live {live}");
}

#[tokio::test]
async fn a_put_whose_answer_was_lost_is_read_back_as_a_successful_create() {
    let counter = Counter::new(MemoryStore::new(), 5);
    counter.store().inject(Op::PutResource, Fault::AppliedThenUnavailable);
    let (s, id) = ids("acct", "w");
    let created = counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    assert!(created.best_effort_counted);
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
    assert_eq!(count_calls(counter.store(), Op::PutResource), 1, "never sent again");
    // A real duplicate still is one.
    let err = counter.create(&s, &id, Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists), "{err}");
}

/// Issue 34 D1. A's put is applied and its answer lost; before anything
/// sends it again, B deletes the item (acknowledged) and the stream
/// hard-deletes it. A re-send (the SDK's standard retry, which the store
/// used to keep for this put) would find `attribute_not_exists` true
/// again: the deleted item comes back, and in strict admission with a
/// limit of 1 a third create then reserves against BE 0: live 2.
/// Fails with `sends::PUT_RESOURCE = Resend::BySdk`.
#[tokio::test]
async fn an_acknowledged_delete_stays_deleted_when_a_put_s_answer_was_lost() {
    for admission in [Admission::BestEffort, Admission::Strict] {
        let counter = Counter::new(MemoryStore::new(), 1).with_admission(admission);
        let (s, x) = ids("acct", "x");
        counter.store().inject(Op::PutResource, Fault::AppliedThenResent);
        // B's delete as the request path makes it (BE -1 and the soft
        // delete, in either order), then the stream's hard delete.
        counter.store().after_next(Op::PutResource, |t| {
            let key = ("acct".to_owned(), "x".to_owned());
            let gone = t.resources.remove(&key).expect("A's put was applied");
            t.deleted_incarnations.insert(gone.state.incarnation);
            *t.counters
                .entry(("acct".to_owned(), keys::BEST_EFFORT_NAME.to_owned()))
                .or_default() -= 1;
        });
        let a = counter.create(&s, &x, Item::default(), NOW).await;
        assert_eq!(counter.store().violation(), None, "{admission:?}: {a:?}");
        assert_eq!(
            live(counter.store(), "acct"),
            0,
            "{admission:?}: B's delete holds ({a:?})"
        );
        if admission.is_strict() {
            let (_, y) = ids("acct", "y");
            counter.create(&s, &y, Item::default(), NOW).await.unwrap();
            assert_eq!(live(counter.store(), "acct"), 1, "strict: at most the limit");
            assert_best_effort_not_below_live(counter.store(), "acct");
        } else {
            assert_best_effort_not_above_live(counter.store(), "acct");
        }
    }
}

#[tokio::test]
async fn a_failed_best_effort_increment_is_swallowed_and_only_undercounts() {
    for fault in [Fault::Unavailable, Fault::AppliedThenUnavailable] {
        let counter = Counter::new(MemoryStore::new(), 5);
        counter.store().inject(Op::AddBestEffort, fault);
        let (s, id) = ids("acct", "w");
        let created = counter.create(&s, &id, Item::default(), NOW).await.unwrap();
        assert!(!created.best_effort_counted, "{fault:?}");
        let calls = counter.store().calls();
        assert_eq!(
            calls.iter().filter(|op| **op == Op::AddBestEffort).count(),
            1,
            "an increment whose outcome is unknown is never retried ({fault:?})"
        );
        let expected = i64::from(fault == Fault::AppliedThenUnavailable);
        assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), expected);
        assert_best_effort_not_above_live(counter.store(), "acct");
    }
}

#[tokio::test]
async fn a_throttled_or_conflicting_best_effort_write_was_not_applied_and_is_retried() {
    for fault in [Fault::Throttled, Fault::Conflict] {
        let counter = Counter::new(MemoryStore::new(), 5).with_seed(7);
        let (s, id) = ids("acct", "w");
        counter.store().inject(Op::AddBestEffort, fault);
        let created = counter.create(&s, &id, Item::default(), NOW).await.unwrap();
        assert!(created.best_effort_counted, "{fault:?}");
        assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1, "{fault:?}");
        // A delete racing an operator's repair (which holds BE in a
        // transaction) is not a 503: its decrement goes again.
        counter.store().inject(Op::AddBestEffort, fault);
        counter.delete(&s, &id, NOW).await.unwrap();
        assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 0, "{fault:?}");
        let decrements = counter
            .store()
            .calls()
            .iter()
            .filter(|op| **op == Op::AddBestEffort)
            .count();
        assert_eq!(
            decrements, 4,
            "two writes, each refused once and sent again ({fault:?})"
        );
        assert_best_effort_not_above_live(counter.store(), "acct");
    }
}

#[tokio::test]
async fn a_delete_never_soft_deletes_a_newer_incarnation_of_its_id() {
    for admission in [Admission::BestEffort, Admission::Strict] {
        let counter = Counter::new(MemoryStore::new(), 5).with_admission(admission);
        let (s, id) = ids("acct", "w");
        counter.create(&s, &id, Item::default(), NOW).await.unwrap();
        // Between the delete's read and its soft delete, another client
        // deletes the item, the stream hard-deletes it, and a third
        // creates the id again.
        counter.store().after_next(Op::GetResource, |t| {
            let item = t.resources.get_mut(&("acct".to_owned(), "w".to_owned())).unwrap();
            item.state.incarnation = "newer".into();
            item.image.insert(
                keys::INCARNATION.to_owned(),
                serde_dynamo::AttributeValue::S("newer".into()),
            );
        });
        let err = counter.delete(&s, &id, NOW).await.unwrap_err();
        assert!(matches!(err, Error::NotFound), "{admission:?}: {err}");
        let item = &counter.store().tables().resources[&("acct".to_owned(), "w".to_owned())];
        assert!(!item.state.deleted, "{admission:?}: the newer item stays live");
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

// ---- strict admission ---------------------------------------------------

fn strict(limit: u64) -> Counter<MemoryStore> {
    Counter::new(MemoryStore::new(), limit).with_admission(Admission::Strict)
}

/// Creates `w0`, `w1`, ... in `s`.
async fn create_many<S: Store>(counter: &Counter<S>, s: &Scope, n: usize) {
    for n in 0..n {
        counter
            .create(s, &ResourceId::new(format!("w{n}")).unwrap(), Item::default(), NOW)
            .await
            .unwrap();
    }
}

fn live(store: &MemoryStore, scope: &str) -> i64 {
    store
        .tables()
        .resources
        .iter()
        .filter(|((s, _), r)| s == scope && !r.state.deleted)
        .count() as i64
}

/// Strict admission's invariant: BE counts reservations, never fewer
/// than the live items.
fn assert_best_effort_not_below_live(store: &MemoryStore, scope: &str) {
    let be = store.best_effort(scope);
    let live = live(store, scope);
    assert!(be >= live, "BE {be} below live {live}");
}

fn count_calls(store: &MemoryStore, op: Op) -> usize {
    store.calls().iter().filter(|o| **o == op).count()
}

#[tokio::test]
async fn strict_create_is_read_reserve_put_and_nothing_else() {
    let counter = strict(5);
    let (s, id) = ids("acct", "w");
    let created = counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    assert!(created.best_effort_counted);
    assert_eq!(
        counter.store().calls(),
        vec![Op::ReadCounters, Op::ReserveBestEffort, Op::PutResource],
        "three round trips on the success path"
    );
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
    assert_eq!(counter.store().counter_updated_at("acct", keys::BEST_EFFORT_NAME), NOW);
}

#[tokio::test]
async fn a_refused_reservation_is_limit_exceeded_and_writes_nothing() {
    let counter = strict(2);
    let (s, _) = ids("acct", "w");
    create_many(&counter, &s, 2).await;
    // The read still shows room (a concurrent creator reserves the last
    // slot right after it): the reservation is what refuses.
    counter.store().set_counter("acct", keys::BEST_EFFORT_NAME, 1);
    counter.store().after_next(Op::ReadCounters, |t| {
        *t.counters
            .get_mut(&("acct".to_owned(), keys::BEST_EFFORT_NAME.to_owned()))
            .unwrap() += 1;
    });
    let puts = count_calls(counter.store(), Op::PutResource);
    let err = counter
        .create(&s, &ResourceId::new("late").unwrap(), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { limit: 2, usage: 2 }), "{err}");
    assert_eq!(
        count_calls(counter.store(), Op::PutResource),
        puts,
        "no put after a refusal"
    );
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 2);
    assert_eq!(live(counter.store(), "acct"), 2);
    // A zero limit admits nothing, not even the first reservation.
    let none = strict(0);
    let err = none
        .create(&s, &ResourceId::new("x").unwrap(), Item::default(), NOW)
        .await;
    assert!(matches!(err, Err(Error::LimitExceeded { .. })), "{err:?}");
    assert!(none.store().tables().resources.is_empty());
}

#[tokio::test]
async fn a_definitive_put_failure_gives_the_slot_back_once() {
    let counter = strict(5);
    let (s, id) = ids("acct", "w");
    counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    // Someone else's item holds the id.
    let err = counter.create(&s, &id, Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists), "{err}");
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
    // The service refuses the item (e.g. over 400 KB).
    counter.store().inject(Op::PutResource, Fault::Rejected);
    let err = counter
        .create(&s, &ResourceId::new("big").unwrap(), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
    assert_eq!(count_calls(counter.store(), Op::AddBestEffort), 2, "one give-back each");
    // A failed give-back is logged, not retried: over-reserved, the safe side.
    counter.store().inject(Op::AddBestEffort, Fault::Unavailable);
    let err = counter.create(&s, &id, Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists), "{err}");
    assert_eq!(count_calls(counter.store(), Op::AddBestEffort), 3);
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 2);
    assert_best_effort_not_below_live(counter.store(), "acct");
}

#[tokio::test]
async fn a_put_with_an_unknown_outcome_keeps_its_slot() {
    // A 500 before the put applied: read back absent, the outcome stays
    // unknown (it could still land), the slot is kept.
    let counter = strict(5);
    let (s, id) = ids("acct", "w");
    counter.store().inject(Op::PutResource, Fault::Unavailable);
    let err = counter.create(&s, &id, Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert_eq!(count_calls(counter.store(), Op::AddBestEffort), 0, "no give-back");
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
    assert_eq!(live(counter.store(), "acct"), 0);
    assert_best_effort_not_below_live(counter.store(), "acct");
}

#[tokio::test]
async fn a_put_applied_and_answered_500_is_read_back_as_ours_and_keeps_its_slot() {
    let counter = strict(5);
    counter.store().inject(Op::PutResource, Fault::AppliedThenUnavailable);
    let (s, id) = ids("acct", "w");
    counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
    assert_eq!(live(counter.store(), "acct"), 1);
    assert_eq!(count_calls(counter.store(), Op::AddBestEffort), 0);
    assert_eq!(count_calls(counter.store(), Op::PutResource), 1, "never sent again");
}

#[tokio::test]
async fn an_ambiguous_reservation_is_not_retried_and_only_over_reserves() {
    let counter = strict(5);
    let (s, id) = ids("acct", "w");
    counter
        .store()
        .inject(Op::ReserveBestEffort, Fault::AppliedThenUnavailable);
    let err = counter.create(&s, &id, Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert_eq!(count_calls(counter.store(), Op::ReserveBestEffort), 1, "never retried");
    assert_eq!(
        count_calls(counter.store(), Op::PutResource),
        0,
        "no item without a slot"
    );
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 1);
    assert_eq!(live(counter.store(), "acct"), 0);
    // Throttling means nothing was written: retried like the other
    // conditional writes.
    counter.store().inject(Op::ReserveBestEffort, Fault::Throttled);
    counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 2);
    assert_eq!(live(counter.store(), "acct"), 1);
}

#[tokio::test]
async fn strict_delete_soft_deletes_first_then_gives_the_slot_back() {
    let counter = strict(5);
    let (s, id) = ids("acct", "w");
    counter.create(&s, &id, Item::default(), NOW).await.unwrap();
    let before = counter.store().calls().len();
    counter.delete(&s, &id, NOW).await.unwrap();
    assert_eq!(
        counter.store().calls()[before..],
        [Op::GetResource, Op::MarkDeleted, Op::AddBestEffort]
    );
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 0);
    // Deleting again: NotFound, BE untouched.
    assert!(matches!(counter.delete(&s, &id, NOW).await, Err(Error::NotFound)));
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 0);
}

#[tokio::test]
async fn strict_delete_failures_only_over_reserve() {
    let counter = strict(5);
    let (s, _) = ids("acct", "w");
    create_many(&counter, &s, 3).await;
    // A failed soft delete stops before the decrement.
    counter.store().inject(Op::MarkDeleted, Fault::Unavailable);
    let err = counter
        .delete(&s, &ResourceId::new("w0").unwrap(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 3);
    // An applied-then-500 soft delete: the item is gone, the slot kept.
    counter.store().inject(Op::MarkDeleted, Fault::AppliedThenUnavailable);
    assert!(counter.delete(&s, &ResourceId::new("w0").unwrap(), NOW).await.is_err());
    assert_eq!(live(counter.store(), "acct"), 2);
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 3);
    // A failed decrement after the soft delete: the delete succeeded.
    counter.store().inject(Op::AddBestEffort, Fault::Unavailable);
    counter.delete(&s, &ResourceId::new("w1").unwrap(), NOW).await.unwrap();
    assert_eq!(live(counter.store(), "acct"), 1);
    assert_eq!(counter.store().counter("acct", keys::BEST_EFFORT_NAME), 3);
    assert_best_effort_not_below_live(counter.store(), "acct");
}

#[tokio::test]
async fn the_reservation_uses_the_scopes_limit_override() {
    let counter = strict(1);
    counter.store().set_limit("acct", Some(3));
    let (s, _) = ids("acct", "w");
    create_many(&counter, &s, 3).await;
    let err = counter
        .create(&s, &ResourceId::new("w3").unwrap(), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { limit: 3, .. }), "{err}");
}

/// A store that yields to the scheduler before every call, so that
/// concurrent request paths interleave between their read and writes;
/// with a gate, reservations also wait until it opens (creators read,
/// then park before their conditional increment).
struct Yielding<S>(S, Option<std::sync::Arc<std::sync::atomic::AtomicBool>>);

impl<S: Store> Store for Yielding<S> {
    async fn read_counters(&self, scope: &Scope) -> Result<CounterSnapshot, StoreError> {
        tokio::task::yield_now().await;
        self.0.read_counters(scope).await
    }
    async fn put_resource(&self, resource: &NewResource) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        self.0.put_resource(resource).await
    }
    async fn add_best_effort(&self, scope: &Scope, name: &str, delta: i64, now: EpochMillis) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        self.0.add_best_effort(scope, name, delta, now).await
    }
    async fn reserve_best_effort(
        &self,
        scope: &Scope,
        name: &str,
        reservation: crate::best_effort::Reservation,
        now: EpochMillis,
    ) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        while self.1.as_ref().is_some_and(|open| !open.load(Ordering::SeqCst)) {
            tokio::task::yield_now().await;
        }
        self.0.reserve_best_effort(scope, name, reservation, now).await
    }
    async fn get_resource(&self, key: &ResourceKey) -> Result<Option<crate::items::ResourceState>, StoreError> {
        tokio::task::yield_now().await;
        self.0.get_resource(key).await
    }
    async fn mark_deleted(&self, key: &ResourceKey, incarnation: &str, now: EpochMillis) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        self.0.mark_deleted(key, incarnation, now).await
    }
    async fn transact(&self, tx: &crate::store::Transaction) -> Result<(), StoreError> {
        self.0.transact(tx).await
    }
    async fn counter_items(&self, scope: &Scope) -> Result<Vec<crate::items::CounterItem>, StoreError> {
        self.0.counter_items(scope).await
    }
    async fn scope_items(&self, scope: &Scope) -> Result<Vec<crate::items::ItemRow>, StoreError> {
        self.0.scope_items(scope).await
    }
    async fn last_sequence(&self, scope: &Scope) -> Result<u64, StoreError> {
        tokio::task::yield_now().await;
        self.0.last_sequence(scope).await
    }
    async fn claim_sequence(&self, claim: &crate::store::SequenceClaim) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        self.0.claim_sequence(claim).await
    }
    async fn sequence_entry(
        &self,
        scope: &Scope,
        number: u64,
    ) -> Result<Option<crate::store::SequenceEntry>, StoreError> {
        tokio::task::yield_now().await;
        self.0.sequence_entry(scope, number).await
    }
    async fn set_counters(
        &self,
        scope: &Scope,
        read: &[crate::items::CounterItem],
        targets: &[(String, i64)],
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        self.0.set_counters(scope, read, targets, now).await
    }
    async fn raise_best_effort(
        &self,
        scope: &Scope,
        raise: &crate::best_effort::Raise,
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        self.0.raise_best_effort(scope, raise, now).await
    }
}

/// 16 creators racing for the 5 slots of one scope.
async fn race(admission: Admission) -> (usize, i64, i64) {
    race_on(admission, 1).await
}

/// 16 creators racing for the 5 slots of one scope whose best-effort
/// counter has `shards` items.
async fn race_on(admission: Admission, shards: u32) -> (usize, i64, i64) {
    let counter = Counter::new(Yielding(MemoryStore::new(), None), 5)
        .with_admission(admission)
        .with_best_effort_shards(shards)
        .with_seed(u64::from(shards));
    let s = Scope::new("acct").unwrap();
    let outcomes = futures_join_all((0..16).map(|n| {
        let (counter, s) = (&counter, &s);
        async move {
            counter
                .create(s, &ResourceId::new(format!("w{n}")).unwrap(), Item::default(), NOW)
                .await
        }
    }))
    .await;
    let ok = outcomes.iter().filter(|o| o.is_ok()).count();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(_) | Err(Error::LimitExceeded { .. }))),
        "{outcomes:?}"
    );
    let store = &counter.store().0;
    (ok, live(store, "acct"), store.best_effort("acct"))
}

/// Polls every future in turn on this task until all are done.
async fn futures_join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (slot, fut) in done.iter_mut().zip(pending.iter_mut()) {
            if slot.is_none() {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(out) => *slot = Some(out),
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    done.into_iter().map(|o| o.expect("every future finished")).collect()
}

#[tokio::test]
async fn concurrent_creators_never_overshoot_in_strict_admission() {
    let (ok, live, be) = race(Admission::Strict).await;
    assert_eq!((ok, live, be), (5, 5, 5));
    // The same race without reservations does overshoot here (every
    // creator reads the same empty scope): the check above can fail.
    let (ok, live, be) = race(Admission::BestEffort).await;
    assert!(ok > 5 && live > 5, "best-effort admission let {ok} of 16 in");
    assert!(be <= live);
}

// ---- sharded best-effort counter -------------------------------------

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

// ---- races found by review (each fails on the first sharded version) ---

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
        counter: &Counter<Yielding<std::sync::Arc<MemoryStore>>>,
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
