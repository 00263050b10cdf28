//! Best-effort admission: puts whose answer was lost, swallowed and
//! retried best-effort writes, deletes.

use super::*;
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
