//! The per-scope limit overrides as a set: one Scan that reads every
//! override (and, for prefix rules, which scopes exist), and the one write
//! of a `limit` item, optionally conditioned on the version it was read
//! at. `counterctl limit set|clear` writes unconditioned through the same
//! call; `counterctl limits apply` conditions each write on its plan.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use serde::Deserialize;

use hybrid_counter::EpochMillis;
use hybrid_counter::error::StoreError;
use hybrid_counter::ids::Scope;
use hybrid_counter::keys;

use crate::dynamo::{DynamoStore, counter_key, n, s};

/// One scope's override as read: its limit and the `version` it was read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct LimitItem {
    pub limit: u64,
    pub version: u64,
}

/// What one Scan of the counters table found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitTable {
    /// Every override, by scope.
    pub overrides: BTreeMap<String, LimitItem>,
    /// Every scope with an item under one of the prefixes asked for.
    pub prefixed_scopes: BTreeSet<String>,
}

/// What a write expects to find, so a change made since it was planned is
/// refused instead of overwritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Whatever is there (`limit set|clear`).
    Any,
    /// No override yet.
    Absent,
    /// The override at this `version`.
    Version(u64),
}

/// How a conditioned write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitWrite {
    Written,
    /// The condition failed, but the item already is what the write would
    /// make it (a resend of a write that had landed, or the same change
    /// made by someone else): nothing was overwritten.
    AlreadyAsPlanned,
    /// The condition failed: the override is no longer what was planned
    /// against. `current` is what it is now (`None`: no override).
    Refused {
        current: Option<LimitItem>,
    },
}

/// More prefixes than this and the Scan reads every item unfiltered (a
/// filter expression is at most 4 KB); the scopes are then picked here.
const MAX_FILTERED_PREFIXES: usize = 40;

#[derive(Deserialize)]
struct Row {
    scope: String,
    name: String,
    limit: Option<u64>,
    version: Option<u64>,
}

impl DynamoStore {
    /// Every limit override of the counters table, with its version, from
    /// one paginated Scan; with `prefixes`, also every scope that has an
    /// item whose scope starts with one of them (what a prefix rule
    /// expands to). The kit's own partition is never a scope.
    pub async fn scan_limits(&self, prefixes: &[String]) -> Result<LimitTable, StoreError> {
        let mut filter = "#name = :limit".to_owned();
        let mut scan = self
            .client()
            .scan()
            .table_name(self.counters_table())
            .projection_expression("#scope, #name, #limit, #version")
            .expression_attribute_names("#scope", keys::SCOPE)
            .expression_attribute_names("#name", keys::NAME)
            .expression_attribute_names("#limit", keys::LIMIT)
            .expression_attribute_names("#version", keys::VERSION)
            .expression_attribute_values(":limit", s(keys::LIMIT_NAME));
        if prefixes.len() <= MAX_FILTERED_PREFIXES {
            for (i, prefix) in prefixes.iter().enumerate() {
                filter.push_str(&format!(" OR begins_with(#scope, :p{i})"));
                scan = scan.expression_attribute_values(format!(":p{i}"), s(prefix.as_str()));
            }
            scan = scan.filter_expression(filter);
        } else {
            // No filter: `:limit` would be an unused value.
            scan = scan.set_expression_attribute_values(None);
        }
        let mut pages = scan.into_paginator().items().send();
        let mut table = LimitTable::default();
        while let Some(item) = pages.next().await {
            let row: Row = serde_dynamo::from_item(item.map_err(|e| self.classify(e))?)
                .map_err(|e| StoreError::Malformed(format!("counters item: {e}")))?;
            if keys::is_kit_state_scope(&row.scope) {
                continue;
            }
            if prefixes.iter().any(|p| row.scope.starts_with(p.as_str())) {
                table.prefixed_scopes.insert(row.scope.clone());
            }
            if row.name == keys::LIMIT_NAME
                && let Some(limit) = row.limit
            {
                let version = row.version.unwrap_or_default();
                table.overrides.insert(row.scope, LimitItem { limit, version });
            }
        }
        Ok(table)
    }

    /// Sets the per-scope limit override (the `limit` item of the counters
    /// table); `None` removes it so the default applies again. Both are
    /// safe to repeat (a repeated set only bumps `version` again), so
    /// throttles and 5xx answers are retried (the one-off write's budget).
    pub async fn set_limit(&self, scope: &Scope, limit: Option<u64>, now: EpochMillis) -> Result<(), StoreError> {
        self.write_limit(scope, limit, Expect::Any, now).await.map(drop)
    }

    /// Sets (`Some`) or removes (`None`) the scope's override, if it is
    /// still what `expect` says. Throttles and 5xx answers are retried
    /// ([`DynamoStore::one_off_write`]); a resend whose first try had
    /// landed finds the item already as planned and says so.
    pub async fn write_limit(
        &self,
        scope: &Scope,
        limit: Option<u64>,
        expect: Expect,
        now: EpochMillis,
    ) -> Result<LimitWrite, StoreError> {
        let key = &counter_key(scope, keys::LIMIT_NAME);
        let refused = |current: Option<HashMap<String, AttributeValue>>| -> Result<LimitWrite, StoreError> {
            let current = current
                .filter(|item| !item.is_empty())
                .map(serde_dynamo::from_item::<_, LimitItem>)
                .transpose()
                .map_err(|e| StoreError::Malformed(format!("limit of {scope}: {e}")))?;
            Ok(if current.map(|c| c.limit) == limit {
                LimitWrite::AlreadyAsPlanned
            } else {
                LimitWrite::Refused { current }
            })
        };
        let condition = match expect {
            Expect::Any => None,
            Expect::Absent => Some("attribute_not_exists(#version)"),
            Expect::Version(_) => Some("#version = :expected"),
        };
        let expected = match expect {
            Expect::Version(v) => Some(n(i64::try_from(v).unwrap_or(i64::MAX))),
            _ => None,
        };
        let update_values = |limit: u64| {
            let mut values = HashMap::from([
                (":limit".to_owned(), AttributeValue::N(limit.to_string())),
                (":now".to_owned(), n(now)),
                (":one".to_owned(), n(1)),
            ]);
            if let Some(v) = &expected {
                values.insert(":expected".to_owned(), v.clone());
            }
            values
        };
        self.one_off_write(|| async {
            let result = match limit {
                Some(limit) => self
                    .client()
                    .update_item()
                    .table_name(self.counters_table())
                    .set_key(Some(key.clone()))
                    .update_expression("SET #limit = :limit, #updated_at = :now ADD #version :one")
                    .set_condition_expression(condition.map(str::to_owned))
                    .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                    .expression_attribute_names("#limit", keys::LIMIT)
                    .expression_attribute_names("#updated_at", keys::UPDATED_AT)
                    .expression_attribute_names("#version", keys::VERSION)
                    .set_expression_attribute_values(Some(update_values(limit)))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| match e.as_service_error() {
                        Some(UpdateItemError::ConditionalCheckFailedException(failed)) => Ok(failed.item.clone()),
                        _ => Err(self.classify(e)),
                    }),
                None => {
                    let mut delete = self
                        .client()
                        .delete_item()
                        .table_name(self.counters_table())
                        .set_key(Some(key.clone()));
                    if let (Some(condition), Some(v)) = (condition, &expected) {
                        delete = delete
                            .condition_expression(condition)
                            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                            .expression_attribute_names("#version", keys::VERSION)
                            .expression_attribute_values(":expected", v.clone());
                    }
                    delete.send().await.map(drop).map_err(|e| match e.as_service_error() {
                        Some(DeleteItemError::ConditionalCheckFailedException(failed)) => Ok(failed.item.clone()),
                        _ => Err(self.classify(e)),
                    })
                }
            };
            match result {
                Ok(()) => Ok(LimitWrite::Written),
                Err(Ok(current)) => refused(current),
                Err(Err(err)) => Err(err),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    //! What the conditioned write sends, and what it makes of a refused
    //! condition, through an intercepted client.

    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::delete_item::DeleteItemOutput;
    use aws_sdk_dynamodb::operation::scan::ScanOutput;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::{Rule, mock};
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    fn scope() -> Scope {
        Scope::new("acme/prod").unwrap()
    }

    fn store(rules: &[Rule]) -> DynamoStore {
        crate::test_util::mock_store(rules)
    }

    fn limit_item(limit: u64, version: u64) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (keys::LIMIT.to_owned(), AttributeValue::N(limit.to_string())),
            (keys::VERSION.to_owned(), AttributeValue::N(version.to_string())),
        ])
    }

    /// An UpdateItem refused by its condition, the item as it is now.
    fn refused_update(now: Option<(u64, u64)>) -> Rule {
        mock!(Client::update_item).then_error(move || {
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .set_item(now.map(|(l, v)| limit_item(l, v)))
                    .meta(ErrorMetadata::builder().code("ConditionalCheckFailedException").build())
                    .build(),
            )
        })
    }

    #[tokio::test]
    async fn a_changed_override_is_written_only_at_its_planned_version() {
        let rules = [mock!(Client::update_item)
            .match_requests(|r| {
                let values = r.expression_attribute_values().unwrap();
                r.condition_expression() == Some("#version = :expected")
                    && values.get(":expected").and_then(|v| v.as_n().ok()).map(String::as_str) == Some("4")
                    && values.get(":limit").and_then(|v| v.as_n().ok()).map(String::as_str) == Some("9")
            })
            .then_output(|| UpdateItemOutput::builder().build())];
        let written = store(&rules)
            .write_limit(&scope(), Some(9), Expect::Version(4), 1)
            .await
            .unwrap();
        assert_eq!(written, LimitWrite::Written);
        assert_eq!(rules[0].num_calls(), 1);
    }

    #[tokio::test]
    async fn an_added_override_expects_none_and_limit_set_expects_nothing() {
        let rules = [
            mock!(Client::update_item)
                .match_requests(|r| r.condition_expression() == Some("attribute_not_exists(#version)"))
                .then_output(|| UpdateItemOutput::builder().build()),
            mock!(Client::update_item)
                .match_requests(|r| {
                    r.condition_expression().is_none()
                        && !r.expression_attribute_values().unwrap().contains_key(":expected")
                })
                .then_output(|| UpdateItemOutput::builder().build()),
        ];
        let s = store(&rules);
        assert_eq!(
            s.write_limit(&scope(), Some(9), Expect::Absent, 1).await.unwrap(),
            LimitWrite::Written
        );
        s.set_limit(&scope(), Some(9), 1).await.unwrap();
        assert!(rules.iter().all(|r| r.num_calls() == 1));
    }

    #[tokio::test]
    async fn a_refused_condition_reports_the_override_found_and_is_not_retried() {
        let rules = [refused_update(Some((4242, 5)))];
        let refused = store(&rules)
            .write_limit(&scope(), Some(9), Expect::Version(4), 1)
            .await
            .unwrap();
        assert_eq!(
            refused,
            LimitWrite::Refused {
                current: Some(LimitItem {
                    limit: 4242,
                    version: 5
                })
            }
        );
        assert_eq!(rules[0].num_calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resend_after_a_5xx_that_finds_its_own_write_says_already_as_planned() {
        let rules = [
            mock!(Client::update_item)
                .then_error(|| UpdateItemError::generic(ErrorMetadata::builder().code("InternalServerError").build())),
            refused_update(Some((9, 5))),
        ];
        let outcome = store(&rules)
            .write_limit(&scope(), Some(9), Expect::Version(4), 1)
            .await
            .unwrap();
        assert_eq!(outcome, LimitWrite::AlreadyAsPlanned);
    }

    #[tokio::test]
    async fn a_removal_is_conditioned_on_the_version_and_a_gone_item_is_as_planned() {
        let rules = [
            mock!(Client::delete_item)
                .match_requests(|r| r.condition_expression() == Some("#version = :expected"))
                .then_output(|| DeleteItemOutput::builder().build()),
            mock!(Client::delete_item).then_error(|| {
                DeleteItemError::ConditionalCheckFailedException(
                    ConditionalCheckFailedException::builder()
                        .meta(ErrorMetadata::builder().code("ConditionalCheckFailedException").build())
                        .build(),
                )
            }),
        ];
        let s = store(&rules);
        assert_eq!(
            s.write_limit(&scope(), None, Expect::Version(2), 1).await.unwrap(),
            LimitWrite::Written
        );
        assert_eq!(
            s.write_limit(&scope(), None, Expect::Version(2), 1).await.unwrap(),
            LimitWrite::AlreadyAsPlanned
        );
    }

    #[tokio::test]
    async fn the_scan_keeps_overrides_and_the_scopes_under_a_prefix_never_the_kit_state() {
        let row = |scope: &str, name: &str, limit: Option<u64>| {
            let mut item = HashMap::from([
                (keys::SCOPE.to_owned(), s(scope)),
                (keys::NAME.to_owned(), s(name)),
                (keys::VERSION.to_owned(), n(3)),
            ]);
            if let Some(l) = limit {
                item.insert(keys::LIMIT.to_owned(), AttributeValue::N(l.to_string()));
            }
            item
        };
        let rules = [mock!(Client::scan)
            .match_requests(|r| {
                r.filter_expression() == Some("#name = :limit OR begins_with(#scope, :p0)")
                    && r.expression_attribute_values().unwrap().contains_key(":p0")
            })
            .then_output(move || {
                ScanOutput::builder()
                    .items(row("a", "limit", Some(5)))
                    .items(row("acme/x", "best_effort", None))
                    .items(row(keys::KIT_STATE_SCOPE, "limit", Some(1)))
                    .build()
            })];
        let table = store(&rules).scan_limits(&["acme/".to_owned()]).await.unwrap();
        assert_eq!(
            table.overrides,
            BTreeMap::from([("a".to_owned(), LimitItem { limit: 5, version: 3 })])
        );
        assert_eq!(table.prefixed_scopes, BTreeSet::from(["acme/x".to_owned()]));
    }
}
