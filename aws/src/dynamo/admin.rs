//! Audit and operator-only administration: the repair transactions (never
//! metered) that `AuditStore::set_counters` and `raise_best_effort` build in
//! `store.rs`, a verify scope's clean-up (a one-off write, `retry.rs`),
//! and the audit's Query of a scope and Scans of every scope.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use serde::Deserialize;

use hybrid_counter::audit::ScopeTally;
use hybrid_counter::error::StoreError;
use hybrid_counter::ids::Scope;
use hybrid_counter::items::{CounterItem, CounterSnapshot, ItemRow};
use hybrid_counter::keys;
use hybrid_counter::store::AuditStore;

use super::attributes::{STATE_PROJECTION, counter_key, n, s, state_names};
use super::retry::one_off_write;
use super::store::DynamoStore;

impl DynamoStore {
    /// Sends an operator's repair transaction: `Ok(false)` when it was
    /// cancelled (a condition, or a transaction holding an item) or
    /// throttled, nothing written. Not metered: the meter accounts for the
    /// counting pipeline's cost.
    pub(super) async fn send_repair(&self, actions: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(err) => match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(_)) => Ok(false),
                _ => match self.classify(err) {
                    StoreError::Transient(_) => Ok(false),
                    other => Err(other),
                },
            },
        }
    }
}

impl DynamoStore {
    /// Deletes every counters-table item of `scope` (both counters' items
    /// and the limit override; never a sequence's items, which
    /// [`AuditStore::counter_items`] does not read: a sequence that restarted at
    /// 1 would give its numbers twice), each only if it still has the `version` it
    /// had when read, so a write landing meanwhile keeps its item. For a
    /// scope nobody writes any more (what `counterctl verify` leaves
    /// behind); returns the items deleted. A delete answered with a 5xx is
    /// sent again: if the first one landed, the item is gone and the
    /// condition holds on the missing item, so the repeat is a no-op.
    pub async fn remove_scope_counters(&self, scope: &Scope) -> Result<usize, StoreError> {
        let items = self.counter_items(scope).await?;
        for item in &items {
            one_off_write(|| async {
                self.client
                    .delete_item()
                    .table_name(&self.counters_table)
                    .set_key(Some(counter_key(scope, &item.name)))
                    .condition_expression("attribute_not_exists(#version) OR #version = :version")
                    .expression_attribute_names("#version", keys::VERSION)
                    .expression_attribute_values(":version", n(item.version))
                    .send()
                    .await
                    .map_err(|e| self.classify(e))
            })
            .await?;
        }
        Ok(items.len())
    }

    /// Every resource item of `scope` (strongly consistent Query, across
    /// pages), projected to `attributes` and deserialized as `T`.
    pub(super) async fn scope_rows<T: serde::de::DeserializeOwned>(
        &self,
        scope: &Scope,
        attributes: &[&str],
    ) -> Result<Vec<T>, StoreError> {
        let placeholders: Vec<String> = (0..attributes.len()).map(|n| format!("#a{n}")).collect();
        let mut query = self
            .client
            .query()
            .table_name(&self.resources_table)
            .key_condition_expression("#scope = :scope")
            .projection_expression(placeholders.join(", "))
            .expression_attribute_names("#scope", keys::SCOPE)
            .expression_attribute_values(":scope", s(scope.as_str()))
            .consistent_read(true);
        for (placeholder, attribute) in placeholders.iter().zip(attributes) {
            query = query.expression_attribute_names(placeholder, *attribute);
        }
        let mut pages = query.into_paginator().items().send();
        let mut rows = Vec::new();
        while let Some(item) = pages.next().await {
            rows.push(
                serde_dynamo::from_item(item.map_err(|e| self.classify(e))?)
                    .map_err(|e| StoreError::Malformed(format!("resource of {scope}: {e}")))?,
            );
        }
        Ok(rows)
    }

    /// Counts items by state for every scope with a parallel segmented Scan
    /// (`segments` workers). Not a consistent snapshot: use
    /// [`hybrid_counter::audit::Auditor::audit_scope`] to confirm a scope's findings.
    pub async fn scan_scope_counts(
        &self,
        segments: u32,
        on_page: impl Fn(usize) + Send + Sync + Clone + 'static,
    ) -> Result<std::collections::BTreeMap<String, ScopeTally>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            scope: String,
            #[serde(flatten)]
            item: ItemRow,
        }
        let segments = segments.clamp(1, 1_000_000);
        let mut tasks = tokio::task::JoinSet::new();
        for segment in 0..segments {
            let store = self.clone();
            let client = self.client.clone();
            let table = self.resources_table.clone();
            let on_page = on_page.clone();
            tasks.spawn(async move {
                let mut counts = std::collections::BTreeMap::<String, ScopeTally>::new();
                let mut pages = client
                    .scan()
                    .table_name(table)
                    .segment(segment as i32)
                    .total_segments(segments as i32)
                    .projection_expression(format!("#scope, #id, {STATE_PROJECTION}"))
                    .set_expression_attribute_names(Some(state_names()))
                    .expression_attribute_names("#scope", keys::SCOPE)
                    .expression_attribute_names("#id", keys::ID)
                    .into_paginator()
                    .send();
                while let Some(page) = pages.next().await {
                    let items = page.map_err(|e| store.classify(e))?.items.unwrap_or_default();
                    on_page(items.len());
                    for item in items {
                        let row: Row = serde_dynamo::from_item(item)
                            .map_err(|e| StoreError::Malformed(format!("resource item: {e}")))?;
                        counts.entry(row.scope).or_default().add_row(&row.item);
                    }
                }
                Ok::<_, StoreError>(counts)
            });
        }
        let mut total = std::collections::BTreeMap::<String, ScopeTally>::new();
        while let Some(joined) = tasks.join_next().await {
            let part = joined.map_err(|e| StoreError::Unavailable(format!("scan worker failed: {e}")))??;
            for (scope, c) in part {
                total.entry(scope).or_default().merge(&c);
            }
        }
        Ok(total)
    }

    /// Every scope's counter snapshot, from a Scan of the counters table
    /// (without the kit's state partition, [`keys::KIT_STATE_SCOPE`]).
    pub async fn scan_counters(&self) -> Result<std::collections::BTreeMap<String, CounterSnapshot>, StoreError> {
        let items: Vec<HashMap<String, AttributeValue>> = self
            .client
            .scan()
            .table_name(&self.counters_table)
            // A sequence's items are no counters (they still cost their
            // read units: a filter applies after the read).
            .filter_expression("NOT begins_with(#name, :sequence)")
            .expression_attribute_names("#name", keys::NAME)
            .expression_attribute_values(":sequence", s(keys::SEQUENCE_NAME))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| self.classify(e))?;
        let items: Vec<CounterItem> =
            serde_dynamo::from_items(items).map_err(|e| StoreError::Malformed(format!("counter item: {e}")))?;
        let mut by_scope = std::collections::BTreeMap::<String, Vec<CounterItem>>::new();
        // The kit's own state item is no scope's counter.
        for item in items.into_iter().filter(|i| !keys::is_kit_state_scope(&i.scope)) {
            by_scope.entry(item.scope.clone()).or_default().push(item);
        }
        Ok(by_scope
            .into_iter()
            .map(|(scope, items)| (scope, CounterSnapshot::from_items(items)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    use aws_smithy_mocks::{Rule, mock};
    use aws_smithy_types::error::ErrorMetadata;

    use hybrid_counter::best_effort::Raise;

    use super::*;
    use crate::dynamo::retry::ONE_OFF_WRITE_BACKOFF;
    use crate::dynamo::test_support::{counter_item, scope, store, update_error};

    #[tokio::test(start_paused = true)]
    async fn a_limit_override_is_retried_through_throttles_and_server_errors() {
        let rules = [
            update_error("ThrottlingException"),
            update_error("InternalServerError"),
            update_error("ProvisionedThroughputExceededException"),
            mock!(Client::update_item)
                .match_requests(|r| {
                    r.expression_attribute_values()
                        .and_then(|v| v.get(":limit"))
                        .and_then(|v| v.as_n().ok())
                        .map(String::as_str)
                        == Some("7")
                })
                .then_output(|| UpdateItemOutput::builder().build()),
        ];
        store(&rules).set_limit(&scope(), Some(7), 1).await.unwrap();
        assert!(rules.iter().all(|r| r.num_calls() == 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_override_gives_up_after_its_budget_and_never_retries_a_refusal() {
        let budget = ONE_OFF_WRITE_BACKOFF.max_attempts as usize;
        let throttles: Vec<Rule> = (0..=budget).map(|_| update_error("ThrottlingException")).collect();
        let err = store(&throttles).set_limit(&scope(), Some(7), 1).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        let sent: usize = throttles.iter().map(Rule::num_calls).sum();
        assert_eq!(sent, budget, "the budget's attempts, then the error");
        let refusal = [update_error("ValidationException"), update_error("ThrottlingException")];
        assert!(matches!(
            store(&refusal).set_limit(&scope(), Some(7), 1).await,
            Err(StoreError::Rejected(_))
        ));
        assert_eq!(refusal[1].num_calls(), 0, "a refusal is not sent again");
    }

    #[tokio::test(start_paused = true)]
    async fn removing_a_limit_override_is_retried_through_a_throttle() {
        use aws_sdk_dynamodb::operation::delete_item::{DeleteItemError, DeleteItemOutput};
        let rules = [
            mock!(Client::delete_item)
                .then_error(|| DeleteItemError::generic(ErrorMetadata::builder().code("ThrottlingException").build())),
            mock!(Client::delete_item).then_output(|| DeleteItemOutput::builder().build()),
        ];
        store(&rules).set_limit(&scope(), None, 1).await.unwrap();
        assert_eq!(rules[1].num_calls(), 1);
    }

    #[tokio::test]
    async fn a_raise_moves_every_item_to_the_next_epoch_in_one_transaction_and_a_later_raise_is_refused() {
        let raise = Raise {
            adds: [
                ("best_effort".to_owned(), 0),
                ("best_effort#0".to_owned(), 3),
                ("best_effort#1".to_owned(), 0),
            ]
            .into_iter()
            .collect(),
            from: 4,
        };
        let sent = mock!(Client::transact_write_items)
            .match_requests(|r| {
                r.transact_items().len() == 3
                    && r.transact_items().iter().all(|a| {
                        let u = a.update().expect("an update");
                        let v = u.expression_attribute_values().cloned().unwrap_or_default();
                        u.condition_expression() == Some("attribute_not_exists(#epoch) OR #epoch <= :from")
                            && v.get(":from") == Some(&AttributeValue::N("4".into()))
                            && v.get(":to") == Some(&AttributeValue::N("5".into()))
                    })
                    && r.transact_items()[1]
                        .update()
                        .and_then(|u| u.expression_attribute_values())
                        .and_then(|v| v.get(":add"))
                        == Some(&AttributeValue::N("3".into()))
            })
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let refused = mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder()
                    .cancellation_reasons(CancellationReason::builder().code("ConditionalCheckFailed").build())
                    .build(),
            )
        });
        let s = store(&[sent.clone(), refused]);
        assert_eq!(s.raise_best_effort(&scope(), &raise, 1).await, Ok(true));
        assert_eq!(sent.num_calls(), 1);
        assert_eq!(s.raise_best_effort(&scope(), &raise, 1).await, Ok(false));
    }

    #[tokio::test]
    async fn a_repair_is_conditioned_on_the_versions_it_read_and_a_moved_counter_writes_nothing() {
        let read = [counter_item("best_effort", 7)];
        let targets = [("best_effort".to_owned(), 5), ("eventual".to_owned(), 4)];
        let conditioned = mock!(Client::transact_write_items)
            .match_requests(|r| {
                let updates: Vec<_> = r.transact_items().iter().filter_map(|i| i.update()).collect();
                let be = updates
                    .iter()
                    .find(|u| u.key().get("name") == Some(&AttributeValue::S("best_effort".into())));
                let ec = updates
                    .iter()
                    .find(|u| u.key().get("name") == Some(&AttributeValue::S("eventual".into())));
                updates.len() == 2
                    && be.is_some_and(|u| {
                        u.condition_expression() == Some("#version = :expected")
                            && u.expression_attribute_values().and_then(|v| v.get(":expected")) == Some(&AttributeValue::N("7".into()))
                            && u.expression_attribute_values().and_then(|v| v.get(":next")) == Some(&AttributeValue::N("8".into()))
                    })
                    // Absent when read: it must still be absent.
                    && ec.is_some_and(|u| u.condition_expression() == Some("attribute_not_exists(#version)"))
            })
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let moved = mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder()
                    .cancellation_reasons(CancellationReason::builder().code("ConditionalCheckFailed").build())
                    .build(),
            )
        });
        let throttled = mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::generic(ErrorMetadata::builder().code("ThrottlingException").build())
        });
        let invalid = mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::generic(ErrorMetadata::builder().code("ValidationException").build())
        });
        let s = store(&[conditioned.clone(), moved, throttled, invalid]);
        assert_eq!(s.set_counters(&scope(), &read, &targets, 1).await, Ok(true));
        assert_eq!(conditioned.num_calls(), 1);
        assert_eq!(s.set_counters(&scope(), &read, &targets, 1).await, Ok(false));
        assert_eq!(s.set_counters(&scope(), &read, &targets, 1).await, Ok(false));
        assert!(matches!(
            s.set_counters(&scope(), &read, &targets, 1).await,
            Err(StoreError::Rejected(_))
        ));
    }
}
