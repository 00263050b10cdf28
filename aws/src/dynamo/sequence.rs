//! Gapless sequence numbers on the counters table, tested: the core's
//! claim loop (`hybrid_counter::sequence`) over [`DynamoStore`]'s
//! `last_sequence`, `claim_sequence` (the `sequence` item's update and the
//! numbered item's put, one transaction sent once) and `sequence_entry`,
//! whose requests are in `store.rs`.
//!
//! [`DynamoStore`]: super::store::DynamoStore

#[cfg(test)]
mod tests {
    //! `Sequence::next` over DynamoStore: what is sent, and what a 500
    //! after or before the claim was applied leads to.

    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::transact_write_items::{
        TransactWriteItemsError, TransactWriteItemsInput, TransactWriteItemsOutput,
    };
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason};
    use aws_smithy_mocks::{Rule, mock};
    use hybrid_counter::retry::{Backoff, Sleeper};
    use hybrid_counter::sequence::{DEFAULT_BACKOFF, Sequence};

    use crate::dynamo::attributes::{n, s};
    use crate::dynamo::store::DynamoStore;
    use crate::dynamo::test_support::{scope, store};

    fn sequence(rules: &[Rule], attempts: u32) -> Sequence<DynamoStore> {
        Sequence::new(store(rules))
            .with_seed(1)
            .with_sleeper(Sleeper::new(|_| async {}))
            .with_backoff(Backoff {
                max_attempts: attempts,
                ..DEFAULT_BACKOFF
            })
    }

    /// `GetItem` of `sequence` answering `last_id = last` (absent for 0).
    fn last(last: u64) -> Rule {
        mock!(Client::get_item)
            .match_requests(|r| {
                r.consistent_read() == Some(true) && r.key().and_then(|k| k.get("name")) == Some(&s("sequence"))
            })
            .then_output(move || {
                let item = (last > 0).then(|| HashMap::from([("last_id".to_owned(), n(last))]));
                GetItemOutput::builder().set_item(item).build()
            })
    }

    /// The claims sent, in order.
    type Sent = Arc<Mutex<Vec<TransactWriteItemsInput>>>;

    fn recording(sent: &Sent) -> impl Fn(&TransactWriteItemsInput) -> bool + Send + Sync + 'static {
        let sent = sent.clone();
        move |r| {
            sent.lock().unwrap().push(r.clone());
            true
        }
    }

    /// The token the `i`-th recorded claim put on its numbered item.
    fn token_of(sent: &Sent, i: usize) -> String {
        let sent = sent.lock().unwrap();
        let put = sent[i].transact_items()[1].put().expect("the second action is the put");
        match put.item().get("token") {
            Some(AttributeValue::S(token)) => token.clone(),
            other => panic!("no token: {other:?}"),
        }
    }

    /// The read-back of `sequence#<n>`: the item with the token of the
    /// `claim`-th recorded claim, or nothing.
    fn read_back(sent: &Sent, num: u64, claim: Option<usize>) -> Rule {
        let sent = sent.clone();
        mock!(Client::get_item)
            .match_requests(move |r| {
                r.consistent_read() == Some(true)
                    && r.key().and_then(|k| k.get("name")) == Some(&s(format!("sequence#{num}")))
            })
            .then_compute_output(move |_| {
                let item = claim.map(|i| {
                    HashMap::from([
                        ("token".to_owned(), s(token_of(&sent, i))),
                        ("claimed_at".to_owned(), n(1)),
                    ])
                });
                GetItemOutput::builder().set_item(item).build()
            })
    }

    fn answered_500(sent: &Sent) -> Rule {
        mock!(Client::transact_write_items)
            .match_requests(recording(sent))
            .sequence()
            .http_status(500, None)
            .build()
    }

    fn cancelled(sent: &Sent, codes: &'static [&'static str]) -> Rule {
        mock!(Client::transact_write_items)
            .match_requests(recording(sent))
            .then_error(move || {
                TransactWriteItemsError::TransactionCanceledException(
                    TransactionCanceledException::builder()
                        .set_cancellation_reasons(Some(
                            codes
                                .iter()
                                .map(|c| CancellationReason::builder().code(*c).build())
                                .collect(),
                        ))
                        .build(),
                )
            })
    }

    fn committed(sent: &Sent) -> Rule {
        mock!(Client::transact_write_items)
            .match_requests(recording(sent))
            .then_output(|| TransactWriteItemsOutput::builder().build())
    }

    #[tokio::test]
    async fn a_claim_is_one_transaction_conditioned_on_the_last_number_and_on_the_items_absence() {
        let sent = Sent::default();
        let seq = sequence(&[last(4), committed(&sent)], 1);
        let claimed = seq.next(&scope(), Some("w1"), 9).await.unwrap();
        assert_eq!((claimed.number, claimed.attempts), (5, 1));
        let sent = sent.lock().unwrap();
        let actions = sent[0].transact_items();
        assert_eq!(actions.len(), 2);
        let update = actions[0].update().expect("first the update of last_id");
        assert_eq!(update.key().get("name"), Some(&s("sequence")));
        assert_eq!(update.condition_expression(), Some("#last = :previous"));
        let values = update.expression_attribute_values().unwrap();
        assert_eq!(
            (values.get(":previous"), values.get(":number")),
            (Some(&n(4)), Some(&n(5)))
        );
        let put = actions[1].put().expect("then the put of the numbered item");
        assert_eq!(put.condition_expression(), Some("attribute_not_exists(#name)"));
        assert_eq!(put.item().get("name"), Some(&s("sequence#5")));
        assert_eq!(put.item().get("owner"), Some(&s("w1")));
        assert!(put.table_name() == "counters" && update.table_name() == "counters");
    }

    #[tokio::test]
    async fn the_first_number_is_conditioned_on_no_last_number() {
        let sent = Sent::default();
        let seq = sequence(&[last(0), committed(&sent)], 1);
        assert_eq!(seq.next(&scope(), None, 9).await.unwrap().number, 1);
        let sent = sent.lock().unwrap();
        let update = sent[0].transact_items()[0].update().unwrap();
        assert_eq!(update.condition_expression(), Some("attribute_not_exists(#last)"));
        assert!(update.expression_attribute_values().unwrap().get(":previous").is_none());
    }

    #[tokio::test]
    async fn a_500_after_the_claim_applied_is_ours_by_the_token_read_back() {
        let sent = Sent::default();
        let seq = sequence(&[last(4), answered_500(&sent), read_back(&sent, 5, Some(0))], 1);
        let claimed = seq.next(&scope(), None, 9).await.unwrap();
        assert_eq!((claimed.number, claimed.attempts), (5, 1), "no second claim");
        assert_eq!(sent.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_500_before_the_claim_applied_reads_back_nothing_and_claims_the_same_number_again() {
        let sent = Sent::default();
        let seq = sequence(
            &[
                last(4),
                answered_500(&sent),
                read_back(&sent, 5, None),
                last(4),
                committed(&sent),
            ],
            2,
        );
        let claimed = seq.next(&scope(), None, 9).await.unwrap();
        assert_eq!((claimed.number, claimed.attempts), (5, 2));
        let sent_count = sent.lock().unwrap().len();
        assert_eq!(sent_count, 2);
        assert_eq!(
            token_of(&sent, 0),
            token_of(&sent, 1),
            "one token for every attempt of a call"
        );
    }

    #[tokio::test]
    async fn a_lost_race_and_a_conflict_spend_the_budget_and_the_error_says_so() {
        let sent = Sent::default();
        let seq = sequence(
            &[
                last(4),
                cancelled(&sent, &["ConditionalCheckFailed", "None"]),
                last(5),
                cancelled(&sent, &["TransactionConflict", "None"]),
            ],
            2,
        );
        let err = seq.next(&scope(), None, 9).await.unwrap_err();
        assert!(
            matches!(&err, hybrid_counter::Error::SequenceContended { attempts: 2, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("after 2 attempts"), "{err}");
        let sent = sent.lock().unwrap();
        let previous = |i: usize| {
            sent[i].transact_items()[0]
                .update()
                .and_then(|u| u.expression_attribute_values())
                .and_then(|v| v.get(":previous").cloned())
        };
        assert_eq!(
            (previous(0), previous(1)),
            (Some(n(4)), Some(n(5))),
            "re-read after the lost race"
        );
    }
}
