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
