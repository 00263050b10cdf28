//! Approach 6, the item collection (a ledger): every change is an item of
//! its own under the counter's partition key, put on the condition that its
//! token is new; the value is the sum of a `Query` over the collection. A
//! resend of a landed change fails its condition, which means "already
//! there": each change counts once, and writes never contend (each is a
//! new item). The cost moves to the reads: one read pages through every
//! entry, so it grows with the history (unless entries are rolled up). A
//! threshold would need that read before every write and would still race:
//! none is offered.

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use hybrid_counter::error::StoreError;
use hybrid_counter_aws::dynamo::classify;

use crate::strategy::{
    Books, BoxFuture, LabError, Outcome, Place, Strategy, caller_retries, charge_read, charge_write, is_retryable,
};
use crate::table::{DELTA, PK, SK, key, n, number, s};

/// The sort-key prefix of the entries.
pub const ENTRY: &str = "entry#";

pub struct Ledger {
    place: Place,
    books: Books,
}

impl Ledger {
    pub fn new(place: Place) -> Self {
        Self {
            place,
            books: Books::default(),
        }
    }

    async fn add(&self, delta: i64) -> Result<Outcome, LabError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut item = key(&self.place.counter, &format!("{ENTRY}{token}"));
        item.insert(DELTA.to_owned(), n(delta));
        let put = || async {
            self.place
                .client
                .put_item()
                .table_name(&self.place.table)
                .set_item(Some(item.clone()))
                .condition_expression("attribute_not_exists(#sk)")
                .expression_attribute_names("#sk", SK)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(classify)
        };
        match caller_retries().run(put, is_retryable).await {
            Ok(out) => {
                charge_write(&self.books.meter, out.consumed_capacity());
                Ok(Outcome::Applied)
            }
            // The entry is there: an earlier send of ours landed.
            Err(StoreError::ConditionFailed) => Ok(Outcome::Applied),
            Err(err) => Err(err.into()),
        }
    }

    async fn sum(&self) -> Result<i64, LabError> {
        let mut pages = self
            .place
            .client
            .query()
            .table_name(&self.place.table)
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :entry)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_values(":pk", s(&self.place.counter))
            .expression_attribute_values(":entry", s(ENTRY))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .into_paginator()
            .send();
        let mut total = 0;
        while let Some(page) = pages.next().await {
            let page = page.map_err(classify)?;
            charge_read(&self.books.meter, page.consumed_capacity());
            total += page.items().iter().map(|item| number(Some(item), DELTA)).sum::<i64>();
        }
        Ok(total)
    }
}

impl Strategy for Ledger {
    fn name(&self) -> &'static str {
        "item collection (ledger)"
    }

    fn supports_threshold(&self) -> bool {
        false
    }

    fn change(&self, delta: i64, _threshold: Option<i64>) -> BoxFuture<'_, Result<Outcome, LabError>> {
        Box::pin(self.add(delta))
    }

    fn read(&self) -> BoxFuture<'_, Result<i64, LabError>> {
        Box::pin(self.sum())
    }

    fn books(&self) -> &Books {
        &self.books
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemInput};
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::test_util::{log, logged, meta, place};

    /// Guarantee: the caller's resend (after the SDK's 3 attempts all
    /// answered 500, the first applied) puts the same entry, fails its
    /// condition and counts as applied: the change exists once.
    #[tokio::test]
    async fn a_resent_entry_that_landed_counts_once() {
        let sent = log();
        let puts = mock!(Client::put_item)
            .match_requests(crate::test_util::logging::<PutItemInput>(&sent))
            .sequence()
            .http_status(500, None)
            .times(3)
            .error(|| {
                PutItemError::ConditionalCheckFailedException(
                    ConditionalCheckFailedException::builder()
                        .meta(meta("ConditionalCheckFailedException"))
                        .build(),
                )
            })
            .build();
        let ledger = Ledger::new(place(&[puts], true));
        assert_eq!(ledger.apply(-1, None).await, Ok(Outcome::Applied));
        let sent = logged(&sent);
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0].item(), sent[1].item(), "the same entry both times");
        assert_eq!(sent[0].item().unwrap()[DELTA], n(-1));
        assert_eq!(ledger.truth().snapshot().value, -1);
    }

    /// The value is the sum over every page of the collection.
    #[tokio::test]
    async fn the_value_sums_every_page() {
        let entry = |d| HashMap::from([(DELTA.to_owned(), n(d))]);
        let first = QueryOutput::builder()
            .items(entry(1))
            .items(entry(1))
            .set_last_evaluated_key(Some(key("hot", "entry#b")))
            .build();
        let second = QueryOutput::builder().items(entry(-1)).items(entry(1)).build();
        let ledger = Ledger::new(place(
            &[
                mock!(Client::query).then_output(move || first.clone()),
                mock!(Client::query).then_output(move || second.clone()),
            ],
            true,
        ));
        assert_eq!(ledger.read().await, Ok(2));
    }
}
