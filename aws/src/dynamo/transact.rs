//! The stream's transactions: the actions of a planned batch (the
//! counter's delta with each item's flag flip or hard delete, which
//! `StreamStore::transact` in `store.rs` sends), its
//! inverse for `counterctl verify`, and the metering and cancellation
//! reasons of every counting transaction.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, ReturnConsumedCapacity, TransactWriteItem, Update};

use hybrid_counter::EpochMillis;
use hybrid_counter::error::{CancelReason, StoreError};
use hybrid_counter::ids::Scope;
use hybrid_counter::keys;
use hybrid_counter::store::meter::{Operation, Written};
use hybrid_counter::store::{CounterDelta, ItemWrite, Resend, ResourceKey};

use super::attributes::{COUNTER_UPDATE, build_error, counter_key, counter_names, counter_values, resource_key, s};
use super::retry::sent;
use super::store::DynamoStore;

/// The reasons a `TransactWriteItems` was cancelled, in the order of its
/// actions; `None` when the error is not a cancellation.
pub fn cancel_reasons<R>(err: &SdkError<TransactWriteItemsError, R>) -> Option<Vec<CancelReason>> {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => Some(
            cancelled
                .cancellation_reasons()
                .iter()
                .map(|r| CancelReason::from_code(r.code()))
                .collect(),
        ),
        _ => None,
    }
}

impl DynamoStore {
    /// Sends one `TransactWriteItems` of `actions` and accounts for it
    /// (`written` when it commits; the cancellation reasons, in request
    /// order, when it is cancelled). `once`: without the SDK's retries.
    pub(super) async fn send_transaction(
        &self,
        actions: Vec<TransactWriteItem>,
        written: Written,
        once: bool,
    ) -> Result<(), StoreError> {
        self.meter.request(Operation::TransactWriteItems);
        let mut request = self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .customize();
        if once {
            request = request.config_override(sent(Resend::Never));
        }
        let result = request.send().await;
        match result {
            Ok(out) => {
                self.meter.transaction(written);
                self.consumed(out.consumed_capacity());
                Ok(())
            }
            Err(err) => {
                self.meter.failed();
                match cancel_reasons(&err) {
                    Some(reasons) => {
                        // A cancellation names no throttling reason.
                        if reasons.contains(&CancelReason::Throttled) {
                            self.meter.throttled(&[]);
                        }
                        self.meter.cancelled(
                            reasons.contains(&CancelReason::TransactionConflict),
                            reasons.contains(&CancelReason::ConditionalCheckFailed),
                        );
                        Err(StoreError::Cancelled { reasons })
                    }
                    None => Err(self.classify(err)),
                }
            }
        }
    }

    pub(super) fn counter_action(
        &self,
        delta: &CounterDelta,
        now: EpochMillis,
    ) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.counters_table)
            .set_key(Some(counter_key(&delta.scope, &delta.name)))
            .update_expression(COUNTER_UPDATE)
            .set_expression_attribute_names(Some(counter_names()))
            .set_expression_attribute_values(Some(counter_values(delta.delta, now)))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    pub(super) fn item_action(&self, write: &ItemWrite) -> Result<TransactWriteItem, StoreError> {
        let names = HashMap::from([
            ("#cp".to_owned(), keys::COUNTER_PROCESSED.to_owned()),
            ("#inc".to_owned(), keys::INCARNATION.to_owned()),
        ]);
        match write {
            ItemWrite::MarkCounted { key, incarnation } => {
                let update = Update::builder()
                    .table_name(&self.resources_table)
                    .set_key(Some(resource_key(key)))
                    .update_expression("SET #cp = :true")
                    .condition_expression("#cp = :false AND #inc = :inc")
                    .set_expression_attribute_names(Some(names))
                    .expression_attribute_values(":true", AttributeValue::Bool(true))
                    .expression_attribute_values(":false", AttributeValue::Bool(false))
                    .expression_attribute_values(":inc", s(incarnation))
                    .build()
                    .map_err(build_error)?;
                Ok(TransactWriteItem::builder().update(update).build())
            }
            ItemWrite::DeleteCounted { key, incarnation } | ItemWrite::DeleteUncounted { key, incarnation } => {
                let counted = matches!(write, ItemWrite::DeleteCounted { .. });
                let mut names = names;
                names.insert("#del".to_owned(), keys::DELETED.to_owned());
                let delete = Delete::builder()
                    .table_name(&self.resources_table)
                    .set_key(Some(resource_key(key)))
                    .condition_expression("#del = :true AND #cp = :counted AND #inc = :inc")
                    .set_expression_attribute_names(Some(names))
                    .expression_attribute_values(":true", AttributeValue::Bool(true))
                    .expression_attribute_values(":counted", AttributeValue::Bool(counted))
                    .expression_attribute_values(":inc", s(incarnation))
                    .build()
                    .map_err(build_error)?;
                Ok(TransactWriteItem::builder().delete(delete).build())
            }
        }
    }

    /// Takes back the stream's count of `items` (each with its
    /// incarnation) under the resources key `scope`, in one transaction:
    /// `counter` of `counters_key` (the key that counted them) goes down
    /// by their number and each item's `counter_processed` back
    /// to false, only if it is counted and not deleted. The inverse of
    /// the INSERT write ([`hybrid_counter::stream::plan::count_insert`]),
    /// so `EC == processed items` holds before and after: the state of a
    /// batch whose processing failed. The flag flip is a MODIFY that the
    /// mapping's filter and the consumer ignore, so only a replay of the
    /// items' INSERT records counts them again. For `counterctl verify
    /// --failure-path`, on its own scope only; at most 99 items.
    pub async fn uncount(
        &self,
        counters_key: &Scope,
        counter: &str,
        scope: &Scope,
        items: &[(hybrid_counter::ResourceId, String)],
        now: EpochMillis,
    ) -> Result<(), StoreError> {
        let delta = CounterDelta {
            scope: counters_key.clone(),
            name: counter.to_owned(),
            delta: -i64::try_from(items.len()).unwrap_or(i64::MAX),
        };
        let mut actions = vec![self.counter_action(&delta, now)?];
        for (id, incarnation) in items {
            let key = ResourceKey {
                scope: scope.clone(),
                id: id.clone(),
            };
            let update = Update::builder()
                .table_name(&self.resources_table)
                .set_key(Some(resource_key(&key)))
                .update_expression("SET #cp = :false")
                .condition_expression("#cp = :true AND #del = :false AND #inc = :inc")
                .expression_attribute_names("#cp", keys::COUNTER_PROCESSED)
                .expression_attribute_names("#del", keys::DELETED)
                .expression_attribute_names("#inc", keys::INCARNATION)
                .expression_attribute_values(":true", AttributeValue::Bool(true))
                .expression_attribute_values(":false", AttributeValue::Bool(false))
                .expression_attribute_values(":inc", s(incarnation))
                .build()
                .map_err(build_error)?;
            actions.push(TransactWriteItem::builder().update(update).build());
        }
        self.meter.request(Operation::TransactWriteItems);
        self.client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.classify(e))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    use aws_smithy_mocks::mock;
    use hybrid_counter::ids::ResourceId;
    use hybrid_counter::store::StreamStore;

    use super::*;
    use crate::dynamo::test_support::{key, scope, store};

    #[tokio::test]
    async fn a_cancelled_transaction_carries_its_reasons_in_request_order() {
        let s = store(&[mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder()
                    .cancellation_reasons(CancellationReason::builder().code("None").build())
                    .cancellation_reasons(CancellationReason::builder().code("ConditionalCheckFailed").build())
                    .build(),
            )
        })]);
        let tx = hybrid_counter::stream::plan::count_insert(
            &key(),
            "inc",
            hybrid_counter::stream::plan::ShardChoice::SINGLE,
            1,
        );
        assert_eq!(
            s.transact(&tx).await,
            Err(StoreError::Cancelled {
                reasons: vec![CancelReason::None, CancelReason::ConditionalCheckFailed]
            })
        );
        let cost = s.meter().snapshot();
        assert_eq!(
            (cost.transactions_cancelled.condition, cost.transactions_committed),
            (1, 0)
        );
    }

    #[tokio::test]
    async fn uncount_takes_the_count_back_only_from_counted_live_items_of_that_incarnation() {
        let rule = mock!(Client::transact_write_items)
            .match_requests(|r| {
                let updates: Vec<_> = r.transact_items().iter().filter_map(|i| i.update()).collect();
                let counter = updates.iter().find(|u| {
                    u.table_name() == "counters" && u.key().get("name") == Some(&AttributeValue::S("eventual".into()))
                });
                let items: Vec<_> = updates.iter().filter(|u| u.table_name() == "resources").collect();
                updates.len() == 3
                    && counter.is_some_and(|u| {
                        u.expression_attribute_values().and_then(|v| v.get(":delta"))
                            == Some(&AttributeValue::N("-2".into()))
                    })
                    && items.len() == 2
                    && items.iter().all(|u| {
                        let values = u.expression_attribute_values();
                        u.update_expression() == "SET #cp = :false"
                            && u.condition_expression() == Some("#cp = :true AND #del = :false AND #inc = :inc")
                            && values.and_then(|v| v.get(":false")) == Some(&AttributeValue::Bool(false))
                            && values.and_then(|v| v.get(":true")) == Some(&AttributeValue::Bool(true))
                    })
                    && items[1].expression_attribute_values().and_then(|v| v.get(":inc"))
                        == Some(&AttributeValue::S("inc-b".into()))
            })
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let items = [
            (ResourceId::new("a").unwrap(), "inc-a".to_owned()),
            (ResourceId::new("b").unwrap(), "inc-b".to_owned()),
        ];
        store(&[rule])
            .uncount(&scope(), "eventual", &scope(), &items, 5)
            .await
            .unwrap();
    }
}
