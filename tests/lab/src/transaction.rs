//! Approaches 4 and 5, `TransactWriteItems` made idempotent.
//!
//! * **Client request token** ([`TxToken`]): the counter's `ADD` (with the
//!   threshold as its condition) in a one-action transaction. DynamoDB
//!   applies a transaction at most once per token within ten minutes, and
//!   answers a repeat with success. The SDK fills in a fresh token on every
//!   `send()` and keeps it across its own retries, so an ambiguous 500 the
//!   SDK retries is safe; but once the SDK gives up and the caller sends
//!   again ([`TokenUse::PerSend`], the code as usually written), the new
//!   token applies the change again. Choosing the token once per change and
//!   reusing it on every resend ([`TokenUse::Reused`]) applies it once.
//! * **Marker item** ([`TxMarker`]): the transaction also puts a marker item
//!   named by the change's token, conditioned on its absence (and expiring
//!   by TTL). A resend finds the marker: the transaction is cancelled with
//!   the marker's condition failed, which means "already applied". Works
//!   past the ten-minute window (as long as the marker lives) at two items
//!   per transaction.
//!
//! Both retry, as their callers would, on unknown outcomes, throttling and
//! transaction conflicts, within [`crate::strategy::caller_retries`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
use aws_sdk_dynamodb::types::{Put, ReturnConsumedCapacity, TransactWriteItem, Update};
use hybrid_counter::error::{CancelReason, StoreError};
use hybrid_counter::retry::Retry;
use hybrid_counter_aws::dynamo::{cancel_reasons, classify};

use crate::strategy::{
    Books, BoxFuture, LabError, Outcome, Place, Strategy, caller_retries, charge_write, is_retryable,
};
use crate::table::{self, COUNTER_SK, EXPIRES_AT, PK, VALUE, key, n};

/// How long a marker lives (its TTL): repeats of a change are refused for
/// at least this long.
pub const MARKER_TTL: Duration = Duration::from_secs(24 * 3600);

/// Which client request token a resend carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenUse {
    /// The SDK's: a new one for each `send()` (kept across the SDK's retries).
    PerSend,
    /// One token per change, on every resend.
    Reused,
}

/// The counter's update as a transaction action.
fn counter_update(place: &Place, delta: i64, threshold: Option<i64>) -> TransactWriteItem {
    let (values, condition) = table::add_below(delta, threshold);
    let update = Update::builder()
        .table_name(&place.table)
        .set_key(Some(key(&place.counter, COUNTER_SK)))
        .update_expression("ADD #n :delta")
        .set_condition_expression(condition)
        .expression_attribute_names("#n", VALUE)
        .set_expression_attribute_values(Some(values))
        .build()
        .expect("update action");
    TransactWriteItem::builder().update(update).build()
}

/// What one send of a transaction came to.
enum Sent {
    Committed(TransactWriteItemsOutput),
    /// Cancelled: the reasons in the order of the actions.
    Cancelled(Vec<CancelReason>),
    Failed(StoreError),
}

async fn send(place: &Place, actions: Vec<TransactWriteItem>, token: Option<&str>) -> Sent {
    let result = place
        .client
        .transact_write_items()
        .set_transact_items(Some(actions))
        .set_client_request_token(token.map(str::to_owned))
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await;
    match result {
        Ok(out) => Sent::Committed(out),
        Err(err) => match cancel_reasons(&err) {
            Some(reasons) => Sent::Cancelled(reasons),
            None => Sent::Failed(classify(err)),
        },
    }
}

/// Pauses before a resend after a transient cancellation or a retryable
/// failure; `Err` when the failure is final or the attempts are spent.
async fn resend_after(retry: &mut Retry, failure: StoreError) -> Result<(), LabError> {
    let transient = match &failure {
        StoreError::Cancelled { reasons } => reasons.iter().any(CancelReason::is_transient),
        other => is_retryable(other),
    };
    if transient && retry.pause().await {
        Ok(())
    } else {
        Err(failure.into())
    }
}

pub struct TxToken {
    place: Place,
    token: TokenUse,
    books: Books,
}

impl TxToken {
    pub fn new(place: Place, token: TokenUse) -> Self {
        Self {
            place,
            token,
            books: Books::default(),
        }
    }

    async fn add(&self, delta: i64, threshold: Option<i64>) -> Result<Outcome, LabError> {
        let token = uuid::Uuid::new_v4().to_string();
        let token = (self.token == TokenUse::Reused).then_some(token.as_str());
        // Built once: every resend is the same request, byte for byte (the
        // emulator matches a repeated token's request by its bytes, where
        // DynamoDB compares its parameters; a rebuilt map may reorder them).
        let actions = vec![counter_update(&self.place, delta, threshold)];
        let mut retry = caller_retries();
        loop {
            match send(&self.place, actions.clone(), token).await {
                Sent::Committed(out) => {
                    charge_write(&self.books.meter, out.consumed_capacity());
                    return Ok(Outcome::Applied);
                }
                Sent::Cancelled(reasons) if reasons.contains(&CancelReason::ConditionalCheckFailed) => {
                    return Ok(Outcome::Refused);
                }
                Sent::Cancelled(reasons) => resend_after(&mut retry, StoreError::Cancelled { reasons }).await?,
                Sent::Failed(err) => resend_after(&mut retry, err).await?,
            }
        }
    }
}

impl Strategy for TxToken {
    fn name(&self) -> &'static str {
        match self.token {
            TokenUse::PerSend => "transaction, SDK token per send",
            TokenUse::Reused => "transaction, token reused",
        }
    }

    fn change(&self, delta: i64, threshold: Option<i64>) -> BoxFuture<'_, Result<Outcome, LabError>> {
        Box::pin(self.add(delta, threshold))
    }

    fn read(&self) -> BoxFuture<'_, Result<i64, LabError>> {
        Box::pin(async move { Ok(table::value(&self.place, &self.books.meter).await?) })
    }

    fn books(&self) -> &Books {
        &self.books
    }
}

pub struct TxMarker {
    place: Place,
    books: Books,
}

impl TxMarker {
    pub fn new(place: Place) -> Self {
        Self {
            place,
            books: Books::default(),
        }
    }

    /// The marker of the change `token`: an item of its own partition, so
    /// markers spread instead of piling onto the counter's.
    fn marker(&self, token: &str) -> TransactWriteItem {
        let expires = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default() + MARKER_TTL;
        let mut item = key(&format!("{}#marker#{token}", self.place.counter), "marker");
        item.insert(EXPIRES_AT.to_owned(), n(expires.as_secs() as i64));
        let put = Put::builder()
            .table_name(&self.place.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .build()
            .expect("marker put");
        TransactWriteItem::builder().put(put).build()
    }

    async fn add(&self, delta: i64, threshold: Option<i64>) -> Result<Outcome, LabError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut retry = caller_retries();
        loop {
            let actions = vec![self.marker(&token), counter_update(&self.place, delta, threshold)];
            match send(&self.place, actions, None).await {
                Sent::Committed(out) => {
                    charge_write(&self.books.meter, out.consumed_capacity());
                    return Ok(Outcome::Applied);
                }
                // The marker is there: an earlier send of this change landed.
                Sent::Cancelled(reasons) if reasons.first() == Some(&CancelReason::ConditionalCheckFailed) => {
                    return Ok(Outcome::Applied);
                }
                Sent::Cancelled(reasons) if reasons.get(1) == Some(&CancelReason::ConditionalCheckFailed) => {
                    return Ok(Outcome::Refused);
                }
                Sent::Cancelled(reasons) => resend_after(&mut retry, StoreError::Cancelled { reasons }).await?,
                Sent::Failed(err) => resend_after(&mut retry, err).await?,
            }
        }
    }
}

impl Strategy for TxMarker {
    fn name(&self) -> &'static str {
        "transaction with a marker item"
    }

    fn change(&self, delta: i64, threshold: Option<i64>) -> BoxFuture<'_, Result<Outcome, LabError>> {
        Box::pin(self.add(delta, threshold))
    }

    fn read(&self) -> BoxFuture<'_, Result<i64, LabError>> {
        Box::pin(async move { Ok(table::value(&self.place, &self.books.meter).await?) })
    }

    fn books(&self) -> &Books {
        &self.books
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::transact_write_items::{TransactWriteItemsError, TransactWriteItemsInput};
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use crate::table::{SK, s};
    use crate::test_util::{Log, log, logged, logging, meta, place};

    /// Every send answered 500 (each one applied, the answer lost): more
    /// than the SDK's 3 attempts, so the caller sends again.
    fn five_hundreds(sent: &Log<TransactWriteItemsInput>, times: usize) -> Rule {
        mock!(Client::transact_write_items)
            .match_requests(logging(sent))
            .sequence()
            .http_status(500, None)
            .times(times)
            .build()
    }

    fn committed(sent: &Log<TransactWriteItemsInput>) -> Rule {
        mock!(Client::transact_write_items)
            .match_requests(logging(sent))
            .then_output(|| TransactWriteItemsOutput::builder().build())
    }

    fn cancelled(sent: &Log<TransactWriteItemsInput>, codes: &'static [&'static str]) -> Rule {
        mock!(Client::transact_write_items)
            .match_requests(logging(sent))
            .then_error(move || {
                TransactWriteItemsError::TransactionCanceledException(
                    TransactionCanceledException::builder()
                        .set_cancellation_reasons(Some(
                            codes
                                .iter()
                                .map(|c| CancellationReason::builder().code(*c).build())
                                .collect(),
                        ))
                        .meta(meta("TransactionCanceledException"))
                        .build(),
                )
            })
    }

    /// The client request token each send asked for (`None`: the SDK's).
    fn tokens(sent: &[TransactWriteItemsInput]) -> Vec<Option<String>> {
        sent.iter()
            .map(|t| t.client_request_token().map(str::to_owned))
            .collect()
    }

    /// Known failure mode: the caller leaves the token to the SDK, which
    /// makes a new one for each `send()` (and keeps it across its own
    /// retries, so the 3 attempts of one send apply once); the caller's
    /// resend after the SDK gave up is a new send, so a new token, and the
    /// change lands twice when the first send's did.
    #[tokio::test]
    async fn with_the_sdk_token_the_callers_resend_is_a_new_send_with_a_token_of_its_own() {
        let sent = log();
        let failing = five_hundreds(&sent, 3);
        let tx = TxToken::new(place(&[failing.clone(), committed(&sent)], true), TokenUse::PerSend);
        assert_eq!(tx.apply(1, None).await, Ok(Outcome::Applied));
        assert_eq!(failing.num_calls(), 3, "the SDK's attempts of the first send");
        assert_eq!(
            tokens(&logged(&sent)),
            vec![None, None],
            "two sends, each with the SDK's own token"
        );
    }

    /// Guarantee: one token per change on every send, so DynamoDB applies
    /// the change once however many sends land.
    #[tokio::test]
    async fn a_reused_token_is_on_every_send_of_one_change() {
        let sent = log();
        let tx = TxToken::new(
            place(&[five_hundreds(&sent, 3), committed(&sent)], true),
            TokenUse::Reused,
        );
        assert_eq!(tx.apply(1, None).await, Ok(Outcome::Applied));
        let sent_tokens = tokens(&logged(&sent));
        assert_eq!(sent_tokens.len(), 2);
        assert!(
            sent_tokens[0].is_some() && sent_tokens[1] == sent_tokens[0],
            "{sent_tokens:?}"
        );
        // A second change has a token of its own.
        let second = log();
        let tx = TxToken::new(place(&[committed(&second), committed(&second)], true), TokenUse::Reused);
        tx.apply(1, None).await.unwrap();
        tx.apply(1, None).await.unwrap();
        let second = tokens(&logged(&second));
        assert_ne!(second[0], second[1]);
    }

    /// A conflict cancels the transaction before anything is applied: the
    /// caller sends it again; a failed threshold is a refusal.
    #[tokio::test]
    async fn a_conflict_is_resent_and_a_failed_threshold_refuses() {
        let sent = log();
        let tx = TxToken::new(
            place(
                &[
                    cancelled(&sent, &["TransactionConflict"]),
                    committed(&sent),
                    cancelled(&sent, &["ConditionalCheckFailed"]),
                ],
                true,
            ),
            TokenUse::Reused,
        );
        assert_eq!(tx.apply(1, Some(10)).await, Ok(Outcome::Applied));
        assert_eq!(tx.apply(1, Some(10)).await, Ok(Outcome::Refused));
        assert_eq!(logged(&sent).len(), 3);
    }

    /// Guarantee: a resend of a change whose transaction landed finds its
    /// marker (the marker's condition fails): applied, once.
    #[tokio::test]
    async fn the_marker_refuses_a_repeat_of_a_landed_change() {
        let sent = log();
        let tx = TxMarker::new(place(
            &[
                five_hundreds(&sent, 3),
                cancelled(&sent, &["ConditionalCheckFailed", "None"]),
            ],
            true,
        ));
        assert_eq!(tx.apply(1, None).await, Ok(Outcome::Applied));
        let sent = logged(&sent);
        assert_eq!(sent.len(), 2, "the first send (3 attempts) and the caller's resend");
        let marker = |t: &TransactWriteItemsInput| t.transact_items()[0].put().unwrap().item()[PK].clone();
        assert!(
            sent.iter().all(|t| marker(t) == marker(&sent[0])),
            "one marker for the change"
        );
        let put = sent[0].transact_items()[0].put().unwrap();
        assert_eq!(put.condition_expression(), Some("attribute_not_exists(#pk)"));
        assert!(put.item().contains_key(EXPIRES_AT), "the marker expires");
        assert_eq!(sent[0].transact_items()[0].put().unwrap().item()[SK], s("marker"));
    }

    /// The counter's condition (second action) failing is the threshold.
    #[tokio::test]
    async fn the_marker_transaction_refuses_at_the_threshold() {
        let sent = log();
        let tx = TxMarker::new(place(&[cancelled(&sent, &["None", "ConditionalCheckFailed"])], true));
        assert_eq!(tx.apply(1, Some(3)).await, Ok(Outcome::Refused));
    }
}
