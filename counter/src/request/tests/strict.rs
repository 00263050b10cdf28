//! Strict admission on one item: reserve, put, give back, delete.

use super::*;
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
