//! Approach 1, the atomic counter: one `UpdateItem` with `ADD n :delta`
//! (and, for a threshold, the condition `n < :limit`). One round trip, one
//! write unit, no read; but `ADD` is not idempotent. When a request is
//! applied and its answer lost (HTTP 500 after the write), the SDK's retry
//! sends the same `ADD` again: **the counter over-applies** while the caller
//! is told it was applied once. Without the SDK's retries the caller gets
//! the error instead, and the write it believes failed may have landed:
//! the counter still drifts up, and errors reach the callers.

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use hybrid_counter::error::StoreError;
use hybrid_counter_aws::dynamo::classify;

use crate::strategy::{Books, BoxFuture, LabError, Outcome, Place, Strategy, charge_refused_write, charge_write};
use crate::table::{self, COUNTER_SK, VALUE, key};

pub struct AtomicCounter {
    place: Place,
    sdk_retries: bool,
    books: Books,
}

impl AtomicCounter {
    /// `sdk_retries`: whether the SDK retries the `ADD` (its default) or
    /// sends it once.
    pub fn new(place: Place, sdk_retries: bool) -> Self {
        Self {
            place,
            sdk_retries,
            books: Books::default(),
        }
    }

    async fn add(&self, delta: i64, threshold: Option<i64>) -> Result<Outcome, LabError> {
        let (values, condition) = table::add_below(delta, threshold);
        let request = self
            .place
            .client
            .update_item()
            .table_name(&self.place.table)
            .set_key(Some(key(&self.place.counter, COUNTER_SK)))
            .update_expression("ADD #n :delta")
            .set_condition_expression(condition)
            .expression_attribute_names("#n", VALUE)
            .set_expression_attribute_values(Some(values))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        let result = if self.sdk_retries {
            request.send().await
        } else {
            request
                .customize()
                .config_override(aws_sdk_dynamodb::Config::builder().retry_config(RetryConfig::disabled()))
                .send()
                .await
        };
        match result.map_err(classify) {
            Ok(out) => {
                charge_write(&self.books.meter, out.consumed_capacity());
                Ok(Outcome::Applied)
            }
            Err(StoreError::ConditionFailed) => {
                // The counter item: its key and one number, under 1 KB.
                charge_refused_write(&self.books.meter, 0);
                Ok(Outcome::Refused)
            }
            Err(err) => Err(err.into()),
        }
    }
}

impl Strategy for AtomicCounter {
    fn name(&self) -> &'static str {
        if self.sdk_retries {
            "atomic counter (SDK retries)"
        } else {
            "atomic counter (no retries)"
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

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemInput, UpdateItemOutput};
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::table::n;
    use crate::test_util::{log, logged, meta, place};

    fn updates(log: &crate::test_util::Log<UpdateItemInput>) -> aws_smithy_mocks::Rule {
        mock!(Client::update_item)
            .match_requests(crate::test_util::logging(log))
            .sequence()
            .http_status(500, None)
            .output(|| UpdateItemOutput::builder().build())
            .build()
    }

    /// Known failure mode (the blog's): the SDK retries an `ADD` whose
    /// first attempt was applied and answered 500, so one call sends the
    /// same `ADD` twice and the caller is told "applied" once: +1 too many.
    #[tokio::test]
    async fn with_sdk_retries_an_ambiguous_500_sends_the_add_twice_for_one_applied_call() {
        let sent = log();
        let rule = updates(&sent);
        let counter = AtomicCounter::new(place(std::slice::from_ref(&rule), true), true);
        assert_eq!(counter.apply(1, None).await, Ok(Outcome::Applied));
        assert_eq!(rule.num_calls(), 2, "the SDK sent the ADD again");
        let sent = logged(&sent);
        assert_eq!(sent.len(), 1, "one request, attempted twice");
        assert_eq!(sent[0].update_expression(), Some("ADD #n :delta"));
        // Both were applied by the service (500 after apply): the counter
        // moved by 2 while its callers believe 1.
        assert_eq!(counter.truth().snapshot().value, 1);
    }

    /// Without the SDK's retries the ambiguous 500 reaches the caller, who
    /// believes nothing happened although the one `ADD` may have landed.
    #[tokio::test]
    async fn without_sdk_retries_the_ambiguous_500_surfaces_and_the_caller_counts_nothing() {
        let rule = updates(&log());
        let counter = AtomicCounter::new(place(std::slice::from_ref(&rule), true), false);
        let result = counter.apply(1, None).await;
        assert!(
            matches!(result, Err(LabError::Store(StoreError::Unavailable(_)))),
            "{result:?}"
        );
        assert_eq!(rule.num_calls(), 1, "sent once");
        let truth = counter.truth().snapshot();
        assert_eq!((truth.value, truth.errors), (0, 1));
    }

    /// The threshold is the write's condition: a refused `ADD` is no error
    /// and changes nothing the caller believes.
    #[tokio::test]
    async fn a_failed_threshold_condition_is_a_refusal() {
        let sent = log();
        let rule = mock!(Client::update_item)
            .match_requests(crate::test_util::logging(&sent))
            .then_error(|| {
                UpdateItemError::ConditionalCheckFailedException(
                    ConditionalCheckFailedException::builder()
                        .meta(meta("ConditionalCheckFailedException"))
                        .build(),
                )
            });
        let counter = AtomicCounter::new(place(&[rule], true), true);
        assert_eq!(counter.apply(1, Some(10)).await, Ok(Outcome::Refused));
        let sent = logged(&sent);
        assert_eq!(
            sent[0].condition_expression(),
            Some("attribute_not_exists(#n) OR #n < :limit")
        );
        assert_eq!(sent[0].expression_attribute_values().unwrap()[":limit"], n(10));
        assert_eq!(counter.truth().snapshot().refused, 1);
        assert_eq!(
            counter.meter().snapshot().write_units,
            1.0,
            "charged as DynamoDB charges it"
        );
    }
}
