//! Hand-written histories: each promise broken is caught with its trace,
//! and overlapping calls the promises allow pass.

use super::*;

fn op(call: Call, id: &str, invoked: Tick, answered: Option<(Tick, Outcome)>) -> Op {
    Op {
        call,
        scope: "s".into(),
        id: id.into(),
        invoked,
        answered,
    }
}

fn created(id: &str, invoked: Tick, answered: Tick, incarnation: &str) -> Op {
    let outcome = Outcome::Created {
        incarnation: incarnation.into(),
    };
    op(Call::Create, id, invoked, Some((answered, outcome)))
}

fn deleted(id: &str, invoked: Tick, answered: Tick) -> Op {
    op(Call::Delete, id, invoked, Some((answered, Outcome::Deleted)))
}

fn unknown(call: Call, id: &str, invoked: Tick, answered: Tick) -> Op {
    op(
        call,
        id,
        invoked,
        Some((answered, Outcome::Unknown("500 after apply".into()))),
    )
}

fn refused(call: Call, id: &str, invoked: Tick, answered: Tick, refusal: Refusal) -> Op {
    op(call, id, invoked, Some((answered, Outcome::Refused(refusal))))
}

/// Final items: (id, incarnation, soft-deleted).
fn end(items: &[(&str, &str, bool)]) -> End {
    End {
        items: items
            .iter()
            .map(|&(id, incarnation, deleted)| {
                let item = FinalItem {
                    incarnation: incarnation.into(),
                    counter_processed: true,
                    deleted,
                };
                (id.to_owned(), item)
            })
            .collect(),
        ..End::default()
    }
}

fn broken(ops: &[Op], end: &End) -> Violation {
    match check(ops, end) {
        Ok(checked) => panic!("the history passed: {checked}"),
        Err(violation) => violation,
    }
}

/// Issue 34 D1: the put applied, answered 500 and re-sent by the SDK
/// after the item was deleted (acknowledged) and hard-deleted: the
/// re-sent put succeeds, and the create's own item is live at the end.
#[test]
fn a_put_re_sent_after_an_acknowledged_delete_breaks_the_delete() {
    let ops = [created("x", 1, 6, "i1"), deleted("x", 2, 3)];
    let violation = broken(&ops, &end(&[("x", "i1", false)]));
    assert_eq!(violation.promise, Promise::Linearizable);
    let text = violation.to_string();
    assert!(text.contains("minimal trace"), "{text}");
    assert!(text.contains("[     1 ..      6] create s/x -> created i1"), "{text}");
    assert!(text.contains("[     2 ..      3] delete s/x -> deleted"), "{text}");
    assert!(text.contains("final: x live (i1)"), "{text}");
}

#[test]
fn an_item_live_after_a_delete_invoked_once_its_create_answered_breaks_the_delete() {
    let ops = [created("x", 1, 2, "i1"), deleted("x", 3, 4)];
    let violation = broken(&ops, &end(&[("x", "i1", false)]));
    assert_eq!(violation.promise, Promise::Linearizable);
    // Soft-deleted or absent at the end: kept.
    assert!(check(&ops, &end(&[("x", "i1", true)])).is_ok());
    assert!(check(&ops, &end(&[])).is_ok());
}

#[test]
fn an_acknowledged_create_gone_without_a_delete_is_caught() {
    let violation = broken(&[created("x", 1, 2, "i1")], &end(&[]));
    assert_eq!(violation.promise, Promise::Linearizable);
    // A delete that ended before the create began cannot have removed it.
    let ops = [deleted("x", 1, 2), created("x", 3, 4, "i1")];
    assert_eq!(broken(&ops, &end(&[])).promise, Promise::Linearizable);
    // A delete whose outcome is unknown, overlapping it, may have.
    let ops = [created("x", 1, 4, "i1"), unknown(Call::Delete, "x", 2, 3)];
    assert!(check(&ops, &end(&[])).is_ok());
}

#[test]
fn an_acknowledged_create_replaced_by_another_without_a_delete_is_caught() {
    let ops = [created("x", 1, 2, "i1"), created("x", 3, 4, "i2")];
    let violation = broken(&ops, &end(&[("x", "i2", false)]));
    assert_eq!(violation.promise, Promise::Linearizable);
}

#[test]
fn two_acknowledged_deletes_of_one_created_item_are_caught() {
    let ops = [created("x", 1, 2, "i1"), deleted("x", 3, 4), deleted("x", 5, 6)];
    let violation = broken(&ops, &end(&[]));
    assert_eq!(violation.promise, Promise::Linearizable);
    assert_eq!(violation.trace.len(), 4, "{violation}");
}

#[test]
fn a_live_item_no_create_may_have_written_is_caught() {
    let ops = [
        created("x", 1, 2, "i1"),
        deleted("x", 3, 4),
        refused(Call::Create, "x", 5, 8, Refusal::AlreadyExists),
        deleted("x", 6, 7),
    ];
    let violation = broken(&ops, &end(&[("x", "i9", false)]));
    assert_eq!(violation.promise, Promise::Linearizable);
    // The trace leaves out the refusal it does not need.
    assert_eq!(violation.trace.len(), 4, "{violation}");
    assert!(!violation.to_string().contains("AlreadyExists"), "{violation}");
    // An unknown outcome may have written it.
    assert!(check(&[unknown(Call::Create, "x", 1, 2)], &end(&[("x", "i9", false)])).is_ok());
    // So may a create never answered.
    assert!(check(&[op(Call::Create, "x", 1, None)], &end(&[("x", "i9", false)])).is_ok());
}

#[test]
fn re_created_ids_and_concurrent_calls_the_promises_allow_pass() {
    // Created, deleted, created again: the second incarnation is live.
    let ops = [
        created("x", 1, 2, "i1"),
        deleted("x", 3, 4),
        created("x", 5, 6, "i2"),
        refused(Call::Create, "x", 7, 8, Refusal::AlreadyExists),
    ];
    let checked = check(&ops, &end(&[("x", "i2", false)])).expect("allowed");
    assert_eq!(
        (
            checked.acknowledged_creates,
            checked.acknowledged_deletes,
            checked.refused
        ),
        (2, 1, 1)
    );
    // The first incarnation live instead: the acknowledged delete undone.
    assert_eq!(broken(&ops, &end(&[("x", "i1", false)])).promise, Promise::Linearizable);
    // A delete overlapping a create of the same id: it removed the earlier
    // incarnation, then the create wrote the live one.
    let ops = [created("x", 1, 2, "i0"), deleted("x", 3, 8), created("x", 4, 7, "i1")];
    assert!(check(&ops, &end(&[("x", "i1", false)])).is_ok());
}

#[test]
fn strict_more_items_definitely_live_than_the_limit_is_caught_with_the_items_counted() {
    // a and b live; c answered before a's delete is invoked: three at once.
    let ops = [
        created("a", 1, 2, "ia"),
        created("b", 3, 4, "ib"),
        created("c", 5, 9, "ic"),
        deleted("a", 10, 11),
    ];
    let final_items = end(&[("b", "ib", false), ("c", "ic", false)]).strict(2);
    let violation = broken(&ops, &final_items);
    assert_eq!(violation.promise, Promise::StrictLimit);
    assert!(violation.detail.contains("3 items definitely live at 9"), "{violation}");
    assert_eq!(violation.trace.len(), 3, "{violation}");
    // Without strict admission the same history is fine.
    assert_eq!(
        check(&ops, &end(&[("b", "ib", false), ("c", "ic", false)]))
            .unwrap()
            .most_definitely_live,
        3
    );
}

#[test]
fn strict_creates_overlapping_a_delete_at_the_limit_pass() {
    // c is invoked before a's delete and answered after it was invoked:
    // the history allows a and c never to have been live together.
    let ops = [
        created("a", 1, 2, "ia"),
        created("b", 3, 4, "ib"),
        created("c", 5, 9, "ic"),
        deleted("a", 6, 7),
        refused(Call::Create, "d", 10, 11, Refusal::LimitExceeded),
    ];
    let final_items = end(&[("b", "ib", false), ("c", "ic", false)])
        .strict(2)
        .with_eventual(2);
    let checked = check(&ops, &final_items).expect("allowed");
    assert_eq!((checked.most_definitely_live, checked.live_at_end), (2, 2));
}

#[test]
fn strict_more_live_items_at_the_end_than_the_limit_is_caught() {
    // Never answered: live from no instant of the history, but at the end.
    let ops = [op(Call::Create, "a", 1, None), op(Call::Create, "b", 2, None)];
    let final_items = end(&[("a", "ia", false), ("b", "ib", false)]).strict(1);
    let violation = broken(&ops, &final_items);
    assert_eq!(violation.promise, Promise::StrictLimit);
    assert!(violation.detail.contains("2 items live at the end"), "{violation}");
}

#[test]
fn an_eventual_counter_off_the_live_items_after_the_drain_is_caught() {
    let ops = [created("a", 1, 2, "ia"), created("b", 3, 4, "ib"), deleted("b", 5, 6)];
    let final_items = end(&[("a", "ia", false)]);
    assert!(check(&ops, &final_items.clone().with_eventual(1)).is_ok());
    let violation = broken(&ops, &final_items.with_eventual(2));
    assert_eq!(violation.promise, Promise::EventualExact);
    assert!(violation.to_string().contains("final: a live (ia)"), "{violation}");
}

#[test]
fn the_recorder_orders_invocations_and_answers_on_one_clock() {
    let history = History::new();
    let (s, x, y) = (
        Scope::new("s").unwrap(),
        ResourceId::new("x").unwrap(),
        ResourceId::new("y").unwrap(),
    );
    let first = history.invoke(Call::Create, &s, &x);
    let second = history.invoke(Call::Delete, &s, &y);
    history.complete(second, Outcome::Refused(Refusal::NotFound));
    history.complete(
        first,
        Outcome::Created {
            incarnation: "ix".into(),
        },
    );
    let ops = history.ops();
    assert_eq!(
        ops.iter().map(|op| (op.invoked, op.completed())).collect::<Vec<_>>(),
        [(1, 4), (2, 3)]
    );
    let checked = history.check(&s, &end(&[("x", "ix", false)])).expect("allowed");
    assert_eq!((checked.ops, checked.acknowledged_creates, checked.refused), (2, 1, 1));
    assert_eq!(
        Outcome::of_create(&Err(Error::Unavailable("500".into()))),
        Outcome::Unknown("the counter store is unavailable, retry later: 500".into())
    );
    assert_eq!(
        Outcome::of_delete(&Err(Error::NotFound)),
        Outcome::Refused(Refusal::NotFound)
    );
}

/// Issue 34 D1 the other way round: the re-sent put meets its own item
/// and answers "already exists", a refusal for an item it wrote; a delete
/// then removes it. The trace shows the refusal that was not one.
#[test]
fn a_delete_of_an_item_only_a_refused_create_wrote_is_caught_with_the_refusal_in_the_trace() {
    let ops = [
        refused(Call::Create, "x", 1, 4, Refusal::AlreadyExists),
        deleted("x", 5, 6),
        refused(Call::Delete, "x", 7, 8, Refusal::NotFound),
    ];
    let violation = broken(&ops, &end(&[]));
    assert_eq!(violation.promise, Promise::Linearizable);
    let text = violation.to_string();
    assert!(text.contains("create s/x -> refused (AlreadyExists)"), "{text}");
    // Calls after the broken promise are left out of the minimal trace.
    assert!(!text.contains("[     7"), "{text}");
}

#[test]
fn refusals_decided_before_any_write_are_left_out_of_the_trace() {
    let ops = [
        refused(Call::Create, "x", 1, 2, Refusal::LimitExceeded),
        created("x", 3, 4, "i1"),
        refused(Call::Delete, "x", 5, 6, Refusal::NotFound),
    ];
    let violation = broken(&ops, &end(&[]));
    assert_eq!(violation.promise, Promise::Linearizable);
    let text = violation.to_string();
    assert!(!text.contains("LimitExceeded"), "{text}");
    // The refusal it does not need is left out too.
    assert!(text.contains("create s/x -> created i1"), "{text}");
    assert!(!text.contains("NotFound"), "{text}");
}

#[test]
fn an_acknowledged_create_without_its_incarnation_may_be_the_live_item_and_must_be_kept() {
    let unnamed = op(Call::Create, "x", 1, Some((2, Outcome::CreatedUnnamed)));
    let checked = check(std::slice::from_ref(&unnamed), &end(&[("x", "i9", false)])).expect("allowed");
    assert_eq!(checked.acknowledged_creates, 1);
    assert_eq!(broken(&[unnamed], &end(&[])).promise, Promise::Linearizable);
}

/// Review finding (a): two creates of one id both acknowledged with no
/// delete between them; the old matching counted deletes overall.
#[test]
fn two_acknowledged_creates_without_a_delete_between_them_are_caught() {
    let ops = [
        created("x", 1, 2, "i1"),
        created("x", 3, 4, "i2"),
        deleted("x", 5, 6),
        unknown(Call::Delete, "x", 7, 8),
    ];
    let violation = broken(&ops, &end(&[]));
    assert_eq!(violation.promise, Promise::Linearizable);
    // The minimal trace: the two creates (the deletes come after both).
    let text = violation.to_string();
    assert!(text.contains("created i1") && text.contains("created i2"), "{text}");
    assert!(!text.contains("[     5"), "{text}");
    // With the first delete invoked between them it is allowed.
    let ops = [
        created("x", 1, 2, "i1"),
        deleted("x", 3, 4),
        created("x", 5, 6, "i2"),
        unknown(Call::Delete, "x", 7, 8),
    ];
    assert!(check(&ops, &end(&[])).is_ok());
    assert!(check(&ops, &end(&[("x", "i2", false)])).is_ok());
}

/// Review finding (b): two acknowledged deletes need a create taking
/// effect between them. A create of unknown outcome answered before the
/// first may still land after it (its put late), so it may be that one;
/// one invoked after the second delete's answer may not.
#[test]
fn two_acknowledged_deletes_around_no_create_are_caught() {
    let ops = [
        created("x", 1, 2, "i1"),
        unknown(Call::Create, "x", 3, 4),
        deleted("x", 5, 6),
        deleted("x", 7, 8),
    ];
    assert!(check(&ops, &end(&[])).is_ok());
    let ops = [
        created("x", 1, 2, "i1"),
        deleted("x", 3, 4),
        deleted("x", 5, 6),
        unknown(Call::Create, "x", 7, 8),
    ];
    assert_eq!(broken(&ops, &end(&[])).promise, Promise::Linearizable);
    // The unknown create overlapping the first delete may follow it.
    let ops = [
        created("x", 1, 2, "i1"),
        unknown(Call::Create, "x", 3, 6),
        deleted("x", 4, 5),
        deleted("x", 7, 8),
    ];
    assert!(check(&ops, &end(&[])).is_ok());
}

#[test]
fn refusals_must_agree_with_the_state_at_some_instant_of_their_span() {
    // Refused as already there, with the item absent throughout.
    let ops = [
        refused(Call::Create, "x", 1, 2, Refusal::AlreadyExists),
        created("x", 3, 4, "i1"),
    ];
    assert_eq!(broken(&ops, &end(&[("x", "i1", false)])).promise, Promise::Linearizable);
    // Refused as missing, with the item live throughout.
    let ops = [
        created("x", 1, 2, "i1"),
        refused(Call::Delete, "x", 3, 4, Refusal::NotFound),
    ];
    assert_eq!(broken(&ops, &end(&[("x", "i1", false)])).promise, Promise::Linearizable);
    // Refused as already there after a delete: soft-deleted, not yet
    // hard-deleted by the stream; then created again once it was.
    let ops = [
        created("x", 1, 2, "i1"),
        deleted("x", 3, 4),
        refused(Call::Create, "x", 5, 6, Refusal::AlreadyExists),
        created("x", 7, 8, "i2"),
        refused(Call::Create, "x", 9, 10, Refusal::LimitExceeded),
    ];
    assert!(check(&ops, &end(&[("x", "i2", false)])).is_ok());
}

#[test]
fn concurrent_creates_and_deletes_of_one_id_pass_in_some_order() {
    // Two creates overlapping a delete: create, delete, create.
    let ops = [created("x", 1, 6, "i1"), created("x", 2, 7, "i2"), deleted("x", 3, 5)];
    assert!(check(&ops, &end(&[("x", "i2", false)])).is_ok());
    assert!(check(&ops, &end(&[("x", "i1", false)])).is_ok());
    // But not both live: the delete must come between them.
    assert_eq!(broken(&ops, &end(&[])).promise, Promise::Linearizable);
}

/// Review finding 2: a create answered 500 after it was applied, proven
/// written by the acknowledged delete that can only have removed its item,
/// held its slot beside another item at the limit. Its put may have
/// landed after a's delete, but strict admission reserved b's slot before
/// its answer, and held it until b's delete.
#[test]
fn strict_a_create_of_unknown_outcome_every_order_needs_is_counted() {
    let ops = [
        created("a", 1, 2, "ia"),
        unknown(Call::Create, "b", 3, 4),
        deleted("a", 5, 6),
        deleted("b", 7, 8),
    ];
    let violation = broken(&ops, &end(&[]).strict(1));
    assert_eq!(violation.promise, Promise::StrictLimit);
    assert!(violation.detail.contains("2 items definitely live at 4"), "{violation}");
    let text = violation.to_string();
    assert!(text.contains("create s/b -> unknown"), "{text}");
    // Not needed (b never deleted, gone at the end): not counted.
    let ops = [
        created("a", 1, 2, "ia"),
        unknown(Call::Create, "b", 3, 4),
        deleted("a", 5, 6),
    ];
    assert_eq!(check(&ops, &end(&[]).strict(1)).unwrap().most_definitely_live, 1);
    // Needed as the live item at the end: counted from its answer.
    let violation = broken(&ops, &end(&[("b", "ib", false)]).strict(1));
    assert!(violation.detail.contains("2 items definitely live at 4"), "{violation}");
}

/// Review finding 3: after the drain, before any repair, every live item
/// is counted and every deleted one hard-deleted (the per-item assertion
/// the request-path test had before the history check).
#[test]
fn an_uncounted_or_soft_deleted_item_after_the_drain_is_caught() {
    let ops = [created("a", 1, 2, "ia"), created("b", 3, 4, "ib"), deleted("b", 5, 6)];
    // b soft-deleted, not hard-deleted: fine before the drain, not after.
    let soft = end(&[("a", "ia", false), ("b", "ib", true)]);
    assert!(check(&ops, &soft).is_ok());
    let violation = broken(&ops, &soft.with_eventual(1));
    assert_eq!(violation.promise, Promise::Drained);
    assert!(
        violation.to_string().contains("final: b soft-deleted (ib)"),
        "{violation}"
    );
    // a live and never counted, with EC right by chance.
    let mut uncounted = end(&[("a", "ia", false)]);
    uncounted.items.get_mut("a").unwrap().counter_processed = false;
    let violation = broken(&ops, &uncounted.with_eventual(1));
    assert_eq!(violation.promise, Promise::Drained);
    assert!(
        violation.to_string().contains("final: a live, uncounted (ia)"),
        "{violation}"
    );
}

/// Review finding 8: a call of unknown outcome may take effect after its
/// answer (`request.rs`: an unknown put "may still land late"). Here the
/// item is missing at some instant after the unknown create's answer, and
/// live again for the last delete: only a late put explains it.
#[test]
fn a_call_of_unknown_outcome_may_take_effect_after_its_answer() {
    let ops = [
        created("x", 1, 2, "i1"),
        deleted("x", 3, 4),
        unknown(Call::Create, "x", 5, 6),
        refused(Call::Delete, "x", 7, 8, Refusal::NotFound),
        deleted("x", 9, 10),
    ];
    assert!(check(&ops, &end(&[])).is_ok());
    // Not before its invocation: the same delete invoked before it fails.
    let ops = [
        created("x", 1, 2, "i1"),
        deleted("x", 3, 4),
        deleted("x", 5, 6),
        unknown(Call::Create, "x", 7, 8),
    ];
    assert_eq!(broken(&ops, &end(&[])).promise, Promise::Linearizable);
    // An acknowledged call stays within its span: the same history with
    // the create acknowledged, and answered before the refusal, fails.
    let ops = [
        created("x", 1, 2, "i1"),
        deleted("x", 3, 4),
        created("x", 5, 6, "i2"),
        refused(Call::Delete, "x", 7, 8, Refusal::NotFound),
        deleted("x", 9, 10),
    ];
    assert_eq!(broken(&ops, &end(&[])).promise, Promise::Linearizable);
}
