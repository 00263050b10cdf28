//! The per-scope limit overrides as a set: one Scan that reads every
//! override (and, for prefix rules, which scopes exist), and the one write
//! of a `limit` item, optionally conditioned on what a plan read of it.
//! `counterctl limit set|clear` of a scope on one key writes unconditioned
//! through the same call; over several keys a clear is one unconditioned
//! transaction and a set runs in rounds, the first conditioned on what its
//! read found, each later one on the token the one before wrote
//! ([`DynamoStore::write_limit_copies`]); `counterctl limits apply`
//! conditions each write on its plan.
//!
//! Every write of an override stores a fresh random token (`rev`), and a
//! conditioned write expects the token it was planned against: `version`
//! alone restarts at 1 when the item is cleared and set again, so a plan
//! could not tell that apart from no change.

use std::cell::Cell;
use std::collections::HashMap;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use hybrid_counter::error::CancelReason;
use serde::Deserialize;

use hybrid_counter::EpochMillis;
use hybrid_counter::error::StoreError;
use hybrid_counter::ids::Scope;
use hybrid_counter::keys;
use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter::shares;
use hybrid_counter::store::Resend;

use crate::dynamo::{DynamoStore, counter_key, n, one_off_write, s, sent};

use hybrid_counter::limits::{LimitItem, LimitTable};

/// What a write expects to find, so a change made since it was planned is
/// refused instead of overwritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Whatever is there (`limit set|clear`).
    Any,
    /// No override yet.
    Absent,
    /// The override as read: this `version` and write token (`None`: an
    /// item written without one).
    Read { version: u64, rev: Option<String> },
    /// As this write token left it (the second transaction of a limit
    /// over several keys, after its first).
    Written(String),
}

/// Whether an error with this code may come after the request was
/// applied: no code (a timeout, a dropped connection) or a server error.
fn may_have_applied(code: Option<&str>) -> bool {
    match code {
        None => true,
        Some(code) => code.ends_with("ServerError") || matches!(code, "InternalFailure" | "ServiceUnavailable"),
    }
}

/// The update that writes an override (`limit`, `updated_at`, the write's
/// `rev` token, `version` bumped, and on a scope over several keys this
/// key's `share` of it with `share_rev` the same token), its names and
/// values added to the condition's.
fn set_limit_expression(
    limit: u64,
    share: Option<u64>,
    now: EpochMillis,
    token: &str,
    names: &mut HashMap<String, String>,
    values: &mut HashMap<String, AttributeValue>,
) -> &'static str {
    names.insert("#limit".to_owned(), keys::LIMIT.to_owned());
    names.insert("#updated_at".to_owned(), keys::UPDATED_AT.to_owned());
    names.insert("#rev".to_owned(), keys::REV.to_owned());
    values.insert(":limit".to_owned(), AttributeValue::N(limit.to_string()));
    values.insert(":now".to_owned(), n(now));
    values.insert(":one".to_owned(), n(1));
    values.insert(":token".to_owned(), s(token));
    let Some(share) = share else {
        return "SET #limit = :limit, #updated_at = :now, #rev = :token ADD #version :one";
    };
    names.insert("#share".to_owned(), keys::SHARE.to_owned());
    names.insert("#share_rev".to_owned(), keys::SHARE_REV.to_owned());
    values.insert(":share".to_owned(), AttributeValue::N(share.to_string()));
    "SET #limit = :limit, #share = :share, #share_rev = :token, #updated_at = :now, #rev = :token ADD #version :one"
}

impl Expect {
    /// The condition expression of a write expecting this (`None` for
    /// [`Expect::Any`]) with its names and values.
    fn condition(
        &self,
    ) -> (
        Option<&'static str>,
        HashMap<String, String>,
        HashMap<String, AttributeValue>,
    ) {
        let mut names = HashMap::from([("#version".to_owned(), keys::VERSION.to_owned())]);
        let mut values = HashMap::new();
        let condition = match self {
            Expect::Any => None,
            Expect::Absent => Some("attribute_not_exists(#version)"),
            Expect::Read { version, rev } => {
                values.insert(":expected".to_owned(), n(i64::try_from(*version).unwrap_or(i64::MAX)));
                names.insert("#rev".to_owned(), keys::REV.to_owned());
                Some(match rev {
                    Some(rev) => {
                        values.insert(":rev".to_owned(), s(rev));
                        "#version = :expected AND #rev = :rev"
                    }
                    None => "#version = :expected AND attribute_not_exists(#rev)",
                })
            }
            Expect::Written(token) => {
                names.insert("#rev".to_owned(), keys::REV.to_owned());
                values.insert(":rev".to_owned(), s(token));
                Some("#rev = :rev")
            }
        };
        (condition, names, values)
    }

    /// Whether `item` (`None`: no override) is still what was expected.
    fn holds(&self, item: Option<&LimitItem>) -> bool {
        match (self, item) {
            (Expect::Any, _) => true,
            (Expect::Absent, item) => item.is_none(),
            (Expect::Read { version, rev }, Some(item)) => item.version == *version && item.rev == *rev,
            (Expect::Read { .. }, None) => false,
            (Expect::Written(token), item) => item.is_some_and(|item| item.rev.as_ref() == Some(token)),
        }
    }
}

/// How a conditioned write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitWrite {
    Written,
    /// The condition failed, but the item already is what the write would
    /// make it (the same change made by someone else): nothing was
    /// overwritten.
    AlreadyAsPlanned,
    /// The condition failed: the override is no longer what was planned
    /// against. `current` is what it is now (`None`: no override).
    Refused {
        current: Option<LimitItem>,
    },
    /// A send ended ambiguously (a 5xx, a timeout) and what was read back
    /// cannot tell whether it landed: an added override that is absent
    /// may have been written and cleared since. Nothing was resent.
    Unknown {
        error: String,
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
    rev: Option<String>,
}

/// A send's answer: done, refused by its condition (with the item found),
/// or an error.
type Sent = Result<(), Result<Option<HashMap<String, AttributeValue>>, StoreError>>;

impl DynamoStore {
    /// Every limit override of the counters table, with its version, from
    /// one paginated Scan; with `prefixes`, also every scope that has an
    /// item whose scope starts with one of them (what a prefix rule
    /// expands to). The kit's own partition is never a scope. The Scan
    /// reads (and is billed for) every item of the table; the filter only
    /// cuts what comes back.
    pub async fn scan_limits(&self, prefixes: &[String]) -> Result<LimitTable, StoreError> {
        let mut filter = "#name = :limit".to_owned();
        let mut scan = self
            .client()
            .scan()
            .table_name(self.counters_table())
            .projection_expression("#scope, #name, #limit, #version, #rev")
            .expression_attribute_names("#scope", keys::SCOPE)
            .expression_attribute_names("#name", keys::NAME)
            .expression_attribute_names("#limit", keys::LIMIT)
            .expression_attribute_names("#version", keys::VERSION)
            .expression_attribute_names("#rev", keys::REV)
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
                let rev = row.rev;
                table.overrides.insert(row.scope, LimitItem { limit, version, rev });
            }
        }
        Ok(table)
    }

    /// Sets the per-scope limit override (the `limit` item of the counters
    /// table); `None` removes it so the default applies again. Both are
    /// safe to repeat (a repeated set only bumps `version` again), so
    /// throttles and 5xx answers are retried (the one-off write's budget).
    pub async fn set_limit(&self, scope: &Scope, limit: Option<u64>, now: EpochMillis) -> Result<(), StoreError> {
        match self.write_limit(scope, limit, Expect::Any, now).await? {
            LimitWrite::Unknown { error } => Err(StoreError::Unavailable(error)),
            _ => Ok(()),
        }
    }

    /// Sets (`Some`) or removes (`None`) `scope`'s override as a copy on
    /// each of its partition keys (`s#0..s#N-1` under [`ScopeKeys`] N > 1;
    /// the scope itself under one key, written as [`DynamoStore::set_limit`]
    /// writes it), because each create reads only its own key's copy. With
    /// N > 1 every copy is written in each `TransactWriteItems` (N is at
    /// most 100, DynamoDB's actions per transaction) of
    /// [`DynamoStore::write_limit_copies`], so two concurrent `limit set`s,
    /// or one cut short, never leave the copies disagreeing; a set refused
    /// because another write changed a copy since its read is planned again
    /// (a few times). The SDK's resends carry the same client request
    /// token, which DynamoDB answers without applying it twice.
    pub async fn set_scope_limit(
        &self,
        keys: ScopeKeys,
        scope: &Scope,
        limit: Option<u64>,
        now: EpochMillis,
    ) -> Result<(), StoreError> {
        let copies = keys.keys(scope).map_err(|e| StoreError::Rejected(e.to_string()))?;
        if copies.len() == 1 {
            return self.set_limit(&copies[0], limit, now).await;
        }
        let copies: Vec<(Scope, Expect, bool)> = copies.into_iter().map(|key| (key, Expect::Any, true)).collect();
        shares::replanned(scope, async || {
            match self.write_limit_copies(&copies, limit, now).await? {
                (LimitWrite::Unknown { error }, _) => Err(StoreError::Unavailable(error)),
                (LimitWrite::Refused { .. }, _) => Ok(None),
                _ => Ok(Some(())),
            }
        })
        .await
    }

    /// `limits apply` of one scope spread over keys: every copy in one
    /// `TransactWriteItems`, each conditioned on what the plan read of it
    /// (`copies`, in key order: each key's partition, what was read there,
    /// and whether its copy is to be written or only checked), so a change
    /// made since the plan to any copy, written or not, refuses the whole
    /// scope and nothing is written. Resends carry the same client request
    /// token, which DynamoDB answers without applying twice; a send whose
    /// outcome stays unknown after them is [`LimitWrite::Unknown`].
    /// Returns the first refused copy's key with a refusal.
    ///
    /// A limit set over several keys writes every copy with its key's share
    /// ([`hybrid_counter::shares`]) in two or more transactions, each after
    /// a read of every key: the first only lowers shares (conditioned as
    /// above; `Expect::Any` as the read found each copy), the next assign
    /// them again ([`shares::assign`]), each conditioned on the one before's
    /// token (a write by someone else since stands). When they fail, or
    /// still add up to less than the limit after [`shares::ROUNDS`], the limit is
    /// written with lower shares: [`LimitWrite::Unknown`], naming
    /// `limit set` to assign them.
    pub async fn write_limit_copies(
        &self,
        copies: &[(Scope, Expect, bool)],
        limit: Option<u64>,
        now: EpochMillis,
    ) -> Result<(LimitWrite, Option<Scope>), StoreError> {
        let Some(limit) = limit.filter(|_| copies.len() > 1) else {
            return Ok(self.send_limit_copies(copies, limit, None, now).await?.1);
        };
        let keys = u32::try_from(copies.len())
            .ok()
            .and_then(|n| ScopeKeys::new(n).ok())
            .ok_or_else(|| StoreError::Rejected(format!("{} copies of one limit", copies.len())))?;
        let scopes: Vec<Scope> = copies.iter().map(|(key, ..)| key.clone()).collect();
        let scope = keys.split(scopes[0].as_str()).map(|(scope, _)| scope);
        if scope.is_none()
            || scopes
                .iter()
                .zip(0u32..)
                .any(|(key, k)| keys.split(key.as_str()) != scope.map(|scope| (scope, k)))
        {
            return Err(StoreError::Rejected(format!(
                "the copies are not every key in order: {scopes:?}"
            )));
        }
        // The first transaction: a copy expected as anything (`limit set`)
        // is expected as this read found it, so a write since refuses it
        // instead of it raising a share that write lowered. The later ones
        // are conditioned on the one before's token (a write by someone
        // else since stands).
        let send = async |round: shares::Round<'_>, shares: &[u64]| {
            let conditioned: Vec<(Scope, Expect, bool)> = match round {
                shares::Round::First(reads) => copies
                    .iter()
                    .zip(reads)
                    .map(|((key, expect, _), read)| {
                        let expect = match (expect, &read.copy) {
                            (Expect::Any, None) => Expect::Absent,
                            (Expect::Any, Some((version, rev))) => Expect::Read {
                                version: u64::try_from(*version).unwrap_or(0),
                                rev: rev.clone(),
                            },
                            (expect, _) => expect.clone(),
                        };
                        (key.clone(), expect, true)
                    })
                    .collect(),
                shares::Round::Next(token) => scopes
                    .iter()
                    .map(|key| (key.clone(), Expect::Written(token.to_owned()), true))
                    .collect(),
            };
            let (token, answer) = self
                .send_limit_copies(&conditioned, Some(limit), Some(shares), now)
                .await?;
            Ok(match answer {
                (LimitWrite::Written, _) => shares::Sent::Written(token),
                (LimitWrite::Unknown { error }, _) if matches!(round, shares::Round::Next(_)) => {
                    shares::Sent::Failed(error)
                }
                answer => shares::Sent::Ended(answer),
            })
        };
        match shares::assign(self, keys, &scopes, limit, self.default_limit(), send).await? {
            // Ours is written; a later write since it stands.
            shares::Assigned::Written | shares::Assigned::Superseded => Ok((LimitWrite::Written, None)),
            shares::Assigned::Ended(answer) => Ok(answer),
            shares::Assigned::Unraised(error) => Ok((
                LimitWrite::Unknown {
                    error: format!(
                        "the limit is written, but its keys' shares may not be assigned (they may add up to less \
                         than it, refusing creates below it): `counterctl limit set` of the same limit \
                         assigns them ({error})"
                    ),
                },
                None,
            )),
        }
    }

    /// One transaction of `copies` (`shares`: each copy's, with a limit
    /// over several keys); the write token it carried, and how it ended.
    async fn send_limit_copies(
        &self,
        copies: &[(Scope, Expect, bool)],
        limit: Option<u64>,
        shares: Option<&[u64]>,
        now: EpochMillis,
    ) -> Result<(String, (LimitWrite, Option<Scope>)), StoreError> {
        let token = uuid::Uuid::new_v4().to_string();
        let mut actions = Vec::with_capacity(copies.len());
        for (at, (key, expect, write)) in copies.iter().enumerate() {
            let share = shares.map(|shares| shares[at]);
            let (condition, mut names, mut values) = expect.condition();
            let item_key = counter_key(key, keys::LIMIT_NAME);
            // What a refused copy holds now, for the report.
            let old_on_refusal = condition
                .is_some()
                .then_some(ReturnValuesOnConditionCheckFailure::AllOld);
            let invalid = |e: aws_sdk_dynamodb::error::BuildError| StoreError::Rejected(e.to_string());
            let action = match (write, limit) {
                (false, _) => TransactWriteItem::builder().condition_check(
                    ConditionCheck::builder()
                        .table_name(self.counters_table())
                        .set_key(Some(item_key))
                        .set_return_values_on_condition_check_failure(old_on_refusal.clone())
                        .condition_expression(
                            condition.unwrap_or("attribute_exists(#version) OR attribute_not_exists(#version)"),
                        )
                        .set_expression_attribute_names(Some(names))
                        .set_expression_attribute_values((!values.is_empty()).then_some(values))
                        .build()
                        .map_err(invalid)?,
                ),
                (true, Some(limit)) => {
                    let update = set_limit_expression(limit, share, now, &token, &mut names, &mut values);
                    TransactWriteItem::builder().update(
                        Update::builder()
                            .table_name(self.counters_table())
                            .set_key(Some(item_key))
                            .set_return_values_on_condition_check_failure(old_on_refusal.clone())
                            .update_expression(update)
                            .set_condition_expression(condition.map(str::to_owned))
                            .set_expression_attribute_names(Some(names))
                            .set_expression_attribute_values(Some(values))
                            .build()
                            .map_err(invalid)?,
                    )
                }
                (true, None) => TransactWriteItem::builder().delete(
                    Delete::builder()
                        .table_name(self.counters_table())
                        .set_key(Some(item_key))
                        .set_return_values_on_condition_check_failure(old_on_refusal.clone())
                        .set_condition_expression(condition.map(str::to_owned))
                        .set_expression_attribute_names(condition.is_some().then_some(names))
                        .set_expression_attribute_values((!values.is_empty()).then_some(values))
                        .build()
                        .map_err(invalid)?,
                ),
            };
            actions.push(action.build());
        }
        let written = match self.send_copies(actions).await {
            Ok(Some((at, current))) => (LimitWrite::Refused { current }, Some(copies[at].0.clone())),
            Ok(None) => (LimitWrite::Written, None),
            Err(StoreError::Unavailable(error)) => (LimitWrite::Unknown { error }, None),
            Err(err) => return Err(err),
        };
        Ok((token, written))
    }

    /// Sends one transaction of `limit` items with the one-off write's
    /// retries and no SDK resends. Answers: `Ok(None)` applied;
    /// `Ok(Some((index, item)))` the action at `index` failed its
    /// condition (nothing written; `item`: what it found there). A resend
    /// after an answer that may have been lost (a 5xx, a timeout, a
    /// transaction still in progress) keeps the client request token,
    /// which DynamoDB answers without applying twice; one after a
    /// cancellation for a conflict or throttling (nothing applied) takes a
    /// new token. A definite refusal (another cancellation reason, access
    /// denied, a validation or token mismatch) is not retried. When the
    /// retries run out after any send that may have applied, the outcome
    /// is unknown: [`StoreError::Unavailable`].
    async fn send_copies(
        &self,
        actions: Vec<TransactWriteItem>,
    ) -> Result<Option<(usize, Option<LimitItem>)>, StoreError> {
        let token = Cell::new(uuid::Uuid::new_v4().to_string());
        let refused: Cell<Option<(usize, Option<LimitItem>)>> = Cell::new(None);
        let ambiguous: Cell<Option<String>> = Cell::new(None);
        let sent_result = one_off_write(|| async {
            let sent_token = token.take();
            token.set(sent_token.clone());
            let result = self
                .client()
                .transact_write_items()
                .set_transact_items(Some(actions.clone()))
                .client_request_token(sent_token)
                .customize()
                .config_override(sent(Resend::Never))
                .send()
                .await;
            let err = match result {
                Ok(_) => return Ok(()),
                Err(err) => err,
            };
            if let Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) = err.as_service_error() {
                let reasons = cancelled.cancellation_reasons();
                let codes: Vec<CancelReason> = reasons.iter().map(|r| CancelReason::from_code(r.code())).collect();
                if let Some(at) = codes.iter().position(|r| *r == CancelReason::ConditionalCheckFailed) {
                    let found = reasons[at]
                        .item()
                        .filter(|item| !item.is_empty())
                        .and_then(|item| serde_dynamo::from_item::<_, LimitItem>(item.clone()).ok());
                    refused.set(Some((at, found)));
                    return Ok(());
                }
                let message = format!("the transaction was cancelled: {codes:?}");
                if codes.iter().all(|r| {
                    matches!(
                        r,
                        CancelReason::None | CancelReason::TransactionConflict | CancelReason::Throttled
                    )
                }) {
                    // Nothing applied: a new token, so the resend is not
                    // answered with this cancellation again.
                    token.set(uuid::Uuid::new_v4().to_string());
                    return Err(StoreError::Transient(message));
                }
                return Err(StoreError::Rejected(message));
            }
            let code = err.code().map(str::to_owned);
            match self.classify(err) {
                transient @ StoreError::Transient(_) => {
                    if code.as_deref() == Some("TransactionInProgressException") {
                        ambiguous.set(Some(transient.to_string()));
                    }
                    Err(transient)
                }
                StoreError::Unavailable(error) if may_have_applied(code.as_deref()) => {
                    ambiguous.set(Some(error.clone()));
                    Err(StoreError::Unavailable(error))
                }
                // A client error (access denied, a token mismatch, ...):
                // nothing applied, and a resend would be refused alike.
                StoreError::Unavailable(error) => Err(StoreError::Rejected(error)),
                other => Err(other),
            }
        })
        .await;
        match (sent_result, ambiguous.take()) {
            (Ok(()), _) => Ok(refused.take()),
            (Err(_), Some(error)) => Err(StoreError::Unavailable(error)),
            (Err(err @ StoreError::Unavailable(_)), None) => Err(StoreError::Rejected(err.to_string())),
            (Err(err), None) => Err(err),
        }
    }

    /// Sets (`Some`) or removes (`None`) the scope's override, if it is
    /// still what `expect` says. Throttles are retried (the one-off
    /// write's budget). A conditioned write is sent once per attempt (no
    /// SDK resend); after an ambiguous failure it is sent again only if
    /// the item read back shows it did not land (still the planned
    /// token): an item carrying this write's own token is
    /// [`LimitWrite::Written`], anything else is judged as found, and an
    /// absent item where one was added is [`LimitWrite::Unknown`].
    pub async fn write_limit(
        &self,
        scope: &Scope,
        limit: Option<u64>,
        expect: Expect,
        now: EpochMillis,
    ) -> Result<LimitWrite, StoreError> {
        let token = uuid::Uuid::new_v4().to_string();
        let judge = |current: Option<LimitItem>| -> LimitWrite {
            if current
                .as_ref()
                .is_some_and(|c| c.rev.as_deref() == Some(token.as_str()))
            {
                LimitWrite::Written
            } else if current.as_ref().map(|c| c.limit) == limit {
                LimitWrite::AlreadyAsPlanned
            } else {
                LimitWrite::Refused { current }
            }
        };
        let parse = |item: HashMap<String, AttributeValue>| {
            serde_dynamo::from_item::<_, LimitItem>(item)
                .map_err(|e| StoreError::Malformed(format!("limit of {scope}: {e}")))
        };
        if expect == Expect::Any {
            return one_off_write(|| async {
                match self.send_limit_write(scope, limit, &expect, &token, now).await {
                    Ok(()) | Err(Ok(_)) => Ok(LimitWrite::Written),
                    Err(Err(err)) => Err(err),
                }
            })
            .await;
        }
        // Set after an ambiguous failure: the next attempt reads first.
        let ambiguous: Cell<Option<String>> = Cell::new(None);
        let result = one_off_write(|| async {
            if let Some(error) = ambiguous.take() {
                let item = self
                    .get_counters_item::<LimitItem>(
                        scope,
                        keys::LIMIT_NAME,
                        "#limit, #version, #rev",
                        &[
                            ("#limit", keys::LIMIT),
                            ("#version", keys::VERSION),
                            ("#rev", keys::REV),
                        ],
                    )
                    .await
                    .inspect_err(|_| ambiguous.set(Some(error.clone())))?;
                if !expect.holds(item.as_ref()) || item.as_ref().is_some_and(|i| i.rev.as_deref() == Some(&token)) {
                    return Ok(judge(item));
                }
                if expect == Expect::Absent {
                    return Ok(LimitWrite::Unknown {
                        error: format!("{error}; no override read back (it may have been written and cleared since)"),
                    });
                }
                // Still as planned: the write did not land; send it again.
            }
            match self.send_limit_write(scope, limit, &expect, &token, now).await {
                Ok(()) => Ok(LimitWrite::Written),
                Err(Ok(current)) => Ok(judge(current.filter(|i| !i.is_empty()).map(parse).transpose()?)),
                Err(Err(err @ StoreError::Unavailable(_))) => {
                    ambiguous.set(Some(err.to_string()));
                    Err(err)
                }
                Err(Err(err)) => Err(err),
            }
        })
        .await;
        match (result, ambiguous.take()) {
            (Err(_), Some(error)) => Ok(LimitWrite::Unknown { error }),
            (result, _) => result,
        }
    }

    /// One send of a limit write: an update that stores `token`, or a
    /// delete, under `expect`'s condition; a conditioned one without the
    /// SDK's resends.
    async fn send_limit_write(
        &self,
        scope: &Scope,
        limit: Option<u64>,
        expect: &Expect,
        token: &str,
        now: EpochMillis,
    ) -> Sent {
        let key = counter_key(scope, keys::LIMIT_NAME);
        let (condition, mut names, mut values) = expect.condition();
        // A conditioned write without the SDK's resends (the client's own
        // retry configuration otherwise).
        let once = (*expect != Expect::Any).then(|| sent(Resend::Never));
        let refused = ReturnValuesOnConditionCheckFailure::AllOld;
        match limit {
            Some(limit) => {
                let update = set_limit_expression(limit, None, now, token, &mut names, &mut values);
                self.client()
                    .update_item()
                    .table_name(self.counters_table())
                    .set_key(Some(key))
                    .update_expression(update)
                    .set_condition_expression(condition.map(str::to_owned))
                    .return_values_on_condition_check_failure(refused)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .customize()
                    .config_override(once.unwrap_or_default())
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| match e.as_service_error() {
                        Some(UpdateItemError::ConditionalCheckFailedException(failed)) => Ok(failed.item.clone()),
                        _ => Err(self.classify(e)),
                    })
            }
            None => {
                let mut delete = self
                    .client()
                    .delete_item()
                    .table_name(self.counters_table())
                    .set_key(Some(key));
                if let Some(condition) = condition {
                    delete = delete
                        .condition_expression(condition)
                        .return_values_on_condition_check_failure(refused)
                        .set_expression_attribute_names(Some(names))
                        .set_expression_attribute_values((!values.is_empty()).then_some(values));
                }
                delete
                    .customize()
                    .config_override(once.unwrap_or_default())
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| match e.as_service_error() {
                        Some(DeleteItemError::ConditionalCheckFailedException(failed)) => Ok(failed.item.clone()),
                        _ => Err(self.classify(e)),
                    })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! What the conditioned write sends, and what it makes of a refused
    //! condition, through an intercepted client.

    use aws_sdk_dynamodb::Client;
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::{Arc, Mutex};

    use aws_sdk_dynamodb::operation::delete_item::DeleteItemOutput;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
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

    /// The counters Query of each key a write of a scope's copies reads
    /// first: the key `<scope>#k` holds `held[k]` on its best-effort item.
    fn reads(held: &[i64]) -> Vec<Rule> {
        reads_with_copies(held, None)
    }

    /// [`reads`], each key also holding a `limit` copy at this `version`
    /// and write token when `copy` says so.
    fn reads_with_copies(held: &[i64], copy: Option<(u64, &'static str)>) -> Vec<Rule> {
        let held: Arc<Vec<i64>> = Arc::new(held.to_vec());
        (0..held.len())
            .map(|_| {
                let held = held.clone();
                mock!(Client::query).then_compute_output(move |r| {
                    let key = r.expression_attribute_values().unwrap()[":scope"]
                        .as_s()
                        .unwrap()
                        .clone();
                    let k: usize = key.rsplit_once('#').unwrap().1.parse().unwrap();
                    let item = hybrid_counter::items::CounterItem {
                        scope: key,
                        name: keys::BEST_EFFORT_NAME.to_owned(),
                        count: held[k],
                        version: 1,
                        updated_at: 1,
                        epoch: None,
                        limit: None,
                        share: None,
                        rev: None,
                        share_rev: None,
                    };
                    let mut items = vec![serde_dynamo::to_item(item).unwrap()];
                    if let Some((version, rev)) = copy {
                        let mut limit = limit_item(40, version, rev);
                        limit.insert(keys::SCOPE.to_owned(), s(key_of_query(r)));
                        limit.insert(keys::NAME.to_owned(), s(keys::LIMIT_NAME));
                        items.push(limit);
                    }
                    aws_sdk_dynamodb::operation::query::QueryOutput::builder()
                        .set_items(Some(items))
                        .build()
                })
            })
            .collect()
    }

    fn key_of_query(r: &aws_sdk_dynamodb::operation::query::QueryInput) -> &str {
        r.expression_attribute_values().unwrap()[":scope"].as_s().unwrap()
    }

    /// Third read of the shares (finding 3): copies that exist are
    /// expected as the read found them, version and token.
    #[tokio::test]
    async fn a_limit_set_expects_each_copy_at_the_version_and_token_its_read_found() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        let conditioned = mock!(Client::transact_write_items)
            .match_requests(|r| {
                r.transact_items().iter().all(|a| {
                    let u = a.update().unwrap();
                    let values = u.expression_attribute_values();
                    u.condition_expression() == Some("#version = :expected AND #rev = :rev")
                        && value(values, ":expected") == Some("3")
                        && value(values, ":rev") == Some("r3")
                })
            })
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let rules: Vec<Rule> = reads_with_copies(&[0, 0, 0, 0], Some((3, "r3")))
            .into_iter()
            .chain([conditioned])
            .chain(reads_with_copies(&[0, 0, 0, 0], Some((4, "r3"))))
            .collect();
        let keys = ScopeKeys::new(4).unwrap();
        store(&rules)
            .set_scope_limit(keys, &scope(), Some(40), 1)
            .await
            .unwrap();
        assert_eq!(rules[4].num_calls(), 1);
    }

    /// Each action's `:share` value, in order (`None`: none written).
    fn shares_sent(r: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput) -> Vec<Option<u64>> {
        r.transact_items()
            .iter()
            .map(|a| {
                a.update()
                    .and_then(|u| value(u.expression_attribute_values(), ":share"))
                    .map(|v| v.parse().unwrap())
            })
            .collect()
    }

    fn limit_item(limit: u64, version: u64, rev: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (keys::LIMIT.to_owned(), AttributeValue::N(limit.to_string())),
            (keys::VERSION.to_owned(), AttributeValue::N(version.to_string())),
            (keys::REV.to_owned(), s(rev)),
        ])
    }

    /// An UpdateItem refused by its condition, the item as it is now.
    fn refused_update(now: Option<(u64, u64)>) -> Rule {
        mock!(Client::update_item).then_error(move || {
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .set_item(now.map(|(l, v)| limit_item(l, v, "r")))
                    .meta(ErrorMetadata::builder().code("ConditionalCheckFailedException").build())
                    .build(),
            )
        })
    }

    fn read(version: u64, rev: &str) -> Expect {
        Expect::Read {
            version,
            rev: Some(rev.to_owned()),
        }
    }

    fn value<'a>(values: Option<&'a HashMap<String, AttributeValue>>, key: &str) -> Option<&'a str> {
        values?
            .get(key)
            .and_then(|v| v.as_n().or_else(|_| v.as_s()).ok())
            .map(String::as_str)
    }

    fn server_error() -> Rule {
        mock!(Client::update_item)
            .then_error(|| UpdateItemError::generic(ErrorMetadata::builder().code("InternalServerError").build()))
    }

    /// A GetItem read-back answering `item` (`None`: no override).
    fn read_back(item: impl Fn() -> Option<HashMap<String, AttributeValue>> + Send + Sync + 'static) -> Rule {
        mock!(Client::get_item)
            .match_requests(|r| r.consistent_read() == Some(true))
            .then_output(move || GetItemOutput::builder().set_item(item()).build())
    }

    #[tokio::test]
    async fn a_changed_override_is_written_only_at_its_planned_version_and_token_with_a_new_token() {
        let rules = [mock!(Client::update_item)
            .match_requests(|r| {
                let values = r.expression_attribute_values();
                r.condition_expression() == Some("#version = :expected AND #rev = :rev")
                    && value(values, ":expected") == Some("4")
                    && value(values, ":rev") == Some("r4")
                    && value(values, ":limit") == Some("9")
                    && value(values, ":token").is_some_and(|t| t != "r4")
                    && r.update_expression().unwrap().contains("#rev = :token")
            })
            .then_output(|| UpdateItemOutput::builder().build())];
        let written = store(&rules)
            .write_limit(&scope(), Some(9), read(4, "r4"), 1)
            .await
            .unwrap();
        assert_eq!(written, LimitWrite::Written);
        assert_eq!(rules[0].num_calls(), 1);
    }

    /// The ABA of `version`: cleared and set again, the override is back
    /// at the planned version, but under another token; an item written
    /// before tokens is expected without one.
    #[tokio::test]
    async fn an_override_cleared_and_set_back_to_the_planned_version_is_refused() {
        let rules = [
            mock!(Client::update_item).then_error(|| {
                UpdateItemError::ConditionalCheckFailedException(
                    ConditionalCheckFailedException::builder()
                        .set_item(Some(limit_item(4242, 1, "after-the-clear")))
                        .meta(ErrorMetadata::builder().code("ConditionalCheckFailedException").build())
                        .build(),
                )
            }),
            mock!(Client::update_item)
                .match_requests(|r| {
                    r.condition_expression() == Some("#version = :expected AND attribute_not_exists(#rev)")
                })
                .then_output(|| UpdateItemOutput::builder().build()),
        ];
        let s = store(&rules);
        let outcome = s.write_limit(&scope(), Some(9), read(1, "planned"), 1).await.unwrap();
        assert!(
            matches!(
                outcome,
                LimitWrite::Refused {
                    current: Some(LimitItem {
                        limit: 4242,
                        version: 1,
                        ..
                    })
                }
            ),
            "{outcome:?}"
        );
        let legacy = Expect::Read { version: 1, rev: None };
        assert_eq!(
            s.write_limit(&scope(), Some(9), legacy, 1).await.unwrap(),
            LimitWrite::Written
        );
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
                        && r.expression_attribute_values().unwrap().contains_key(":token")
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
            .write_limit(&scope(), Some(9), read(4, "r4"), 1)
            .await
            .unwrap();
        assert_eq!(
            refused,
            LimitWrite::Refused {
                current: Some(LimitItem {
                    limit: 4242,
                    version: 5,
                    rev: Some("r".into()),
                })
            }
        );
        assert_eq!(rules[0].num_calls(), 1);
    }

    /// An add that landed but whose answer was lost, then a `limit clear`:
    /// the read-back finds no override, which cannot tell "never landed"
    /// from "landed and cleared", so nothing is resent.
    #[tokio::test(start_paused = true)]
    async fn an_add_answered_with_a_5xx_and_read_back_absent_is_unknown_and_not_resent() {
        let rules = [
            server_error(),
            read_back(|| None),
            mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build()),
        ];
        let outcome = store(&rules)
            .write_limit(&scope(), Some(9), Expect::Absent, 1)
            .await
            .unwrap();
        assert!(matches!(outcome, LimitWrite::Unknown { .. }), "{outcome:?}");
        assert_eq!(rules[2].num_calls(), 0, "the add is not sent again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_5xx_whose_write_landed_reads_back_its_own_token_as_written() {
        let token = Arc::new(Mutex::new(String::new()));
        let seen = token.clone();
        let rules = [
            mock!(Client::update_item)
                .match_requests(move |r| {
                    *seen.lock().unwrap() = value(r.expression_attribute_values(), ":token").unwrap().to_owned();
                    true
                })
                .then_error(|| UpdateItemError::generic(ErrorMetadata::builder().code("InternalServerError").build())),
            read_back(move || Some(limit_item(9, 5, &token.lock().unwrap()))),
        ];
        let outcome = store(&rules)
            .write_limit(&scope(), Some(9), read(4, "r4"), 1)
            .await
            .unwrap();
        assert_eq!(outcome, LimitWrite::Written);
    }

    #[tokio::test(start_paused = true)]
    async fn a_5xx_whose_write_did_not_land_is_resent_and_retries_run_out_as_unknown() {
        let rules = [
            server_error(),
            read_back(|| Some(limit_item(1, 4, "r4"))),
            mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build()),
        ];
        let outcome = store(&rules).write_limit(&scope(), Some(9), read(4, "r4"), 1).await;
        assert_eq!(outcome.unwrap(), LimitWrite::Written);
        assert_eq!(rules[2].num_calls(), 1);
        let budget = crate::dynamo::ONE_OFF_WRITE_BACKOFF.max_attempts as usize;
        let errors: Vec<Rule> = (0..budget)
            .flat_map(|_| [server_error(), read_back(|| Some(limit_item(1, 4, "r4")))])
            .collect();
        let outcome = store(&errors).write_limit(&scope(), Some(9), read(4, "r4"), 1).await;
        assert!(matches!(outcome, Ok(LimitWrite::Unknown { .. })), "{outcome:?}");
    }

    /// The key of a `limit` write.
    fn key_of(r: &aws_sdk_dynamodb::operation::update_item::UpdateItemInput) -> Option<&str> {
        r.key()?.get(keys::SCOPE)?.as_s().ok().map(String::as_str)
    }

    /// Review of issue 38 item 4: two overlapping `limit set`s, or one cut
    /// short, left the copies disagreeing when each was its own write; all
    /// of them go in one transaction, one request token for its resends.
    #[tokio::test]
    async fn a_scope_over_four_keys_gets_its_override_on_every_key_in_one_transaction() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        let copies =
            |r: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput| -> Vec<(String, bool)> {
                r.transact_items()
                    .iter()
                    .map(|a| match (a.update(), a.delete()) {
                        (Some(u), None) => (
                            u.key()[keys::SCOPE].as_s().unwrap().clone(),
                            value(u.expression_attribute_values(), ":limit") == Some("40"),
                        ),
                        (None, Some(d)) => (d.key()[keys::SCOPE].as_s().unwrap().clone(), false),
                        _ => panic!("one update or delete per action"),
                    })
                    .collect()
            };
        let expected: Vec<String> = (0..4).map(|k| format!("acme/prod#{k}")).collect();
        let (want_set, want_clear) = (expected.clone(), expected.clone());
        let keys = ScopeKeys::new(4).unwrap();
        // Key 1 holds 15: it keeps them as its share, the other keys
        // share the rest (the even split would give it 10, and the others
        // room for 30 more: 45 against a limit of 40). First every share
        // only lowered from the even split of the default limit 10 (none
        // is raised before a second read), then raised from there.
        let sent = |shares: [u64; 4], condition: Option<&'static str>| {
            let want = want_set.clone();
            mock!(Client::transact_write_items)
                .match_requests(move |r| {
                    let c = copies(r);
                    c.iter().all(|(_, forty)| *forty)
                        && c.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>() == want
                        && r.client_request_token().is_some()
                        && shares_sent(r) == shares.map(Some)
                        && r.transact_items()
                            .iter()
                            .all(|a| a.update().unwrap().condition_expression() == condition)
                })
                .then_output(|| TransactWriteItemsOutput::builder().build())
        };
        let mut set = reads(&[0, 15, 0, 0]);
        set.push(sent([3, 3, 2, 2], Some("attribute_not_exists(#version)")));
        set.extend(reads(&[0, 15, 0, 0]));
        set.push(sent([9, 15, 8, 8], Some("#rev = :rev")));
        // A last read finds nothing to change.
        set.extend(reads(&[0, 15, 0, 0]));
        store(&set).set_scope_limit(keys, &scope(), Some(40), 1).await.unwrap();
        assert_eq!((set[4].num_calls(), set[9].num_calls()), (1, 1));
        let clear = [mock!(Client::transact_write_items)
            .match_requests(move |r| {
                r.transact_items().iter().all(|a| a.delete().is_some())
                    && copies(r).into_iter().map(|(k, _)| k).collect::<Vec<_>>() == want_clear
            })
            .then_output(|| TransactWriteItemsOutput::builder().build())];
        store(&clear).set_scope_limit(keys, &scope(), None, 1).await.unwrap();
        assert_eq!(clear[0].num_calls(), 1);
        // One key: the scope itself, as `set_limit` writes it.
        let one = [mock!(Client::update_item)
            .match_requests(|r| key_of(r) == Some("acme/prod"))
            .then_output(|| UpdateItemOutput::builder().build())];
        store(&one)
            .set_scope_limit(ScopeKeys::default(), &scope(), Some(4), 1)
            .await
            .unwrap();
        assert_eq!(one[0].num_calls(), 1);
    }

    /// A `TransactWriteItems` over four copies, each conditioned on
    /// `condition`, cancelled with these reasons in action order.
    /// A `TransactWriteItems` whose first send may have applied (a 5xx),
    /// then "still in progress" until the retries run out: its outcome
    /// stays unknown.
    fn answer_lost() -> Vec<Rule> {
        let budget = crate::dynamo::ONE_OFF_WRITE_BACKOFF.max_attempts as usize;
        let mut rules = vec![mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::generic(ErrorMetadata::builder().code("InternalServerError").build())
        })];
        rules.extend((1..budget).map(|_| {
            mock!(Client::transact_write_items).then_error(|| {
                TransactWriteItemsError::generic(
                    ErrorMetadata::builder().code("TransactionInProgressException").build(),
                )
            })
        }));
        rules
    }

    fn cancelled(condition: &'static str, codes: [&'static str; 4]) -> Rule {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        use aws_sdk_dynamodb::types::CancellationReason;
        use aws_sdk_dynamodb::types::error::TransactionCanceledException;
        mock!(Client::transact_write_items)
            .match_requests(move |r| {
                r.transact_items()
                    .iter()
                    .all(|a| a.update().unwrap().condition_expression() == Some(condition))
            })
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

    /// Review of the shares (finding 2): `limit set`'s first transaction
    /// is conditioned on each copy as its read found it (absent here), so
    /// a write since refuses it, and the set is planned again from a new
    /// read rather than raising a share that write lowered.
    #[tokio::test]
    async fn a_limit_set_refused_by_a_write_since_its_read_is_planned_again() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        let refused = cancelled(
            "attribute_not_exists(#version)",
            ["ConditionalCheckFailed", "None", "None", "None"],
        );
        let ok = || mock!(Client::transact_write_items).then_output(|| TransactWriteItemsOutput::builder().build());
        let rules: Vec<Rule> = reads(&[0, 0, 0, 0])
            .into_iter()
            .chain([refused])
            .chain(reads(&[0, 0, 0, 0]))
            .chain([ok()])
            .chain(reads(&[0, 0, 0, 0]))
            .chain([ok()])
            .chain(reads(&[0, 0, 0, 0]))
            .collect();
        let keys = ScopeKeys::new(4).unwrap();
        store(&rules)
            .set_scope_limit(keys, &scope(), Some(40), 1)
            .await
            .unwrap();
        assert_eq!(rules[4].num_calls(), 1, "refused");
        assert_eq!(
            (rules[9].num_calls(), rules[14].num_calls()),
            (1, 1),
            "planned again and written"
        );
    }

    /// Review 1 of the shared rounds (finding 4): a later round refused
    /// by a write since ours leaves that write standing (`Written`); a
    /// later round that keeps failing is `Unknown`, naming `limit set`.
    #[tokio::test]
    async fn a_later_round_refused_stands_and_one_that_fails_is_unknown_naming_limit_set() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        let keys = ScopeKeys::new(4).unwrap();
        let ok = || mock!(Client::transact_write_items).then_output(|| TransactWriteItemsOutput::builder().build());
        let refused = cancelled("#rev = :rev", ["None", "ConditionalCheckFailed", "None", "None"]);
        // Key 1 holds 15: the first transaction lowers, the second (which
        // would raise) is refused by another write since ours.
        let rules: Vec<Rule> = reads(&[0, 15, 0, 0])
            .into_iter()
            .chain([ok()])
            .chain(reads(&[0, 15, 0, 0]))
            .chain([refused])
            .collect();
        let copies: Vec<(Scope, Expect, bool)> = keys
            .keys(&scope())
            .unwrap()
            .into_iter()
            .map(|key| (key, Expect::Any, true))
            .collect();
        let outcome = store(&rules).write_limit_copies(&copies, Some(40), 1).await.unwrap();
        assert_eq!(outcome, (LimitWrite::Written, None), "the later write stands");
        assert_eq!(rules[9].num_calls(), 1);
        // The second transaction's outcome stays unknown (a 5xx, then
        // only "still in progress" until the retries run out): Unknown,
        // naming limit set, never Written.
        let mut lost: Vec<Rule> = reads(&[0, 15, 0, 0])
            .into_iter()
            .chain([ok()])
            .chain(reads(&[0, 15, 0, 0]))
            .collect();
        lost.extend(answer_lost());
        let unknown = |outcome: (LimitWrite, Option<Scope>)| match outcome {
            (LimitWrite::Unknown { error }, None) => {
                assert!(error.contains("`counterctl limit set` of the same limit"), "{error}")
            }
            other => panic!("{other:?}"),
        };
        unknown(store(&lost).write_limit_copies(&copies, Some(40), 1).await.unwrap());
        assert_eq!(lost[9].num_calls(), 1, "the second transaction was sent");
        // The second read fails: the shares stay lowered, Unknown.
        let failing = mock!(Client::query).then_error(|| {
            aws_sdk_dynamodb::operation::query::QueryError::generic(
                ErrorMetadata::builder().code("InternalServerError").build(),
            )
        });
        let rules: Vec<Rule> = reads(&[0, 15, 0, 0]).into_iter().chain([ok(), failing]).collect();
        unknown(store(&rules).write_limit_copies(&copies, Some(40), 1).await.unwrap());
    }

    /// `limits apply` over four keys: one transaction, a refusal names
    /// the copy that failed its condition; a resend after a lost answer
    /// keeps the request token, one after a cancellation for a conflict
    /// takes a new one.
    #[tokio::test]
    async fn the_copies_of_an_apply_go_in_one_transaction_and_a_refusal_names_its_key() {
        use aws_sdk_dynamodb::operation::transact_write_items::{TransactWriteItemsError, TransactWriteItemsOutput};
        use aws_sdk_dynamodb::types::CancellationReason;
        use aws_sdk_dynamodb::types::error::TransactionCanceledException;
        let keys = ScopeKeys::new(4).unwrap();
        let copies: Vec<(Scope, Expect, bool)> = keys
            .keys(&scope())
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(k, key)| {
                (
                    key,
                    Expect::Read {
                        version: 1,
                        rev: Some(format!("r{k}")),
                    },
                    k == 2,
                )
            })
            .collect();
        // A cancellation with one reason per action; a refused copy
        // holds what it found (AllOld).
        let cancellation = |codes: &[&str]| {
            TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder()
                    .set_cancellation_reasons(Some(
                        codes
                            .iter()
                            .map(|c| {
                                let reason = CancellationReason::builder().code(*c);
                                match *c {
                                    "ConditionalCheckFailed" => reason.set_item(Some(limit_item(15, 3, "r9"))),
                                    _ => reason,
                                }
                                .build()
                            })
                            .collect(),
                    ))
                    .build(),
            )
        };
        let cancelled = |codes: &'static [&'static str]| {
            mock!(Client::transact_write_items).then_error(move || cancellation(codes))
        };
        // Every copy conditioned on its read, the refusal asked to return
        // the item it found.
        let conditioned = mock!(Client::transact_write_items)
            .match_requests(|r| {
                r.transact_items().iter().all(|a| {
                    let (condition, old) = match (a.update(), a.condition_check()) {
                        (Some(u), None) => (u.condition_expression(), u.return_values_on_condition_check_failure()),
                        (None, Some(c)) => (
                            Some(c.condition_expression()),
                            c.return_values_on_condition_check_failure(),
                        ),
                        _ => (None, None),
                    };
                    condition == Some("#version = :expected AND #rev = :rev")
                        && old == Some(&ReturnValuesOnConditionCheckFailure::AllOld)
                })
            })
            .then_error(move || cancellation(&["None", "ConditionalCheckFailed", "None", "None"]));
        let with_reads = |rules: Vec<Rule>| -> Vec<Rule> { reads(&[0, 0, 0, 0]).into_iter().chain(rules).collect() };
        let refused = with_reads(vec![conditioned]);
        let (outcome, key) = store(&refused).write_limit_copies(&copies, Some(40), 1).await.unwrap();
        assert_eq!(
            outcome,
            LimitWrite::Refused {
                current: Some(LimitItem {
                    limit: 15,
                    version: 3,
                    rev: Some("r9".into())
                })
            },
            "the copy found, not what the plan read"
        );
        assert_eq!(key.unwrap().as_str(), "acme/prod#1");
        assert_eq!(refused[4].num_calls(), 1);

        // Review (finding 1): a cancellation for a reason no resend can
        // change is not retried, and is a failure, not an unknown outcome.
        let invalid = with_reads(vec![cancelled(&["None", "ValidationError", "None", "None"])]);
        let err = store(&invalid)
            .write_limit_copies(&copies, Some(40), 1)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Rejected(_)), "{err:?}");
        assert_eq!(invalid[4].num_calls(), 1);

        // Review (finding 2): a send that may have applied (a 5xx), then
        // only "still in progress" until the retries run out: unknown, not
        // failed.
        let mut lost = reads(&[0, 0, 0, 0]);
        lost.extend(answer_lost());
        let (outcome, _) = store(&lost).write_limit_copies(&copies, Some(40), 1).await.unwrap();
        assert!(matches!(outcome, LimitWrite::Unknown { .. }), "{outcome:?}");

        let tokens = Arc::new(Mutex::new(Vec::new()));
        // The first transaction's write token, which its copies carry.
        let written = Arc::new(Mutex::new(None::<String>));
        let record = |tokens: &Arc<Mutex<Vec<String>>>| {
            let seen = tokens.clone();
            let written = written.clone();
            move |r: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput| {
                seen.lock().unwrap().push(r.client_request_token().unwrap().to_owned());
                let token = value(
                    r.transact_items()[0].update().unwrap().expression_attribute_values(),
                    ":token",
                );
                *written.lock().unwrap() = token.map(str::to_owned);
                // Every copy written with its share, even those already
                // at the limit: first only lowered from the even split of
                // the default limit 10.
                let items = r.transact_items();
                items.len() == 4
                    && items.iter().all(|a| a.update().is_some())
                    && shares_sent(r) == [3, 3, 2, 2].map(Some)
            }
        };
        let rules = with_reads(vec![
            mock!(Client::transact_write_items)
                .match_requests(record(&tokens))
                .then_error(|| {
                    TransactWriteItemsError::generic(ErrorMetadata::builder().code("InternalServerError").build())
                }),
            mock!(Client::transact_write_items)
                .match_requests(record(&tokens))
                .then_error(move || cancellation(&["None", "TransactionConflict", "None", "None"])),
            mock!(Client::transact_write_items)
                .match_requests(record(&tokens))
                .then_output(|| TransactWriteItemsOutput::builder().build()),
        ]);
        // Then raised, conditioned on the first's token.
        let first_token = Arc::new(Mutex::new(None::<String>));
        let rules: Vec<Rule> = rules
            .into_iter()
            .chain(reads(&[0, 0, 0, 0]))
            .chain([{
                let first_token = first_token.clone();
                mock!(Client::transact_write_items)
                    .match_requests(move |r| {
                        let rev = value(
                            r.transact_items()[0].update().unwrap().expression_attribute_values(),
                            ":rev",
                        );
                        *first_token.lock().unwrap() = rev.map(str::to_owned);
                        shares_sent(r) == [Some(10); 4]
                    })
                    .then_output(|| TransactWriteItemsOutput::builder().build())
            }])
            .chain(reads(&[0, 0, 0, 0]))
            .collect();
        let (outcome, _) = store(&rules).write_limit_copies(&copies, Some(40), 1).await.unwrap();
        assert_eq!(outcome, LimitWrite::Written);
        let tokens = tokens.lock().unwrap();
        assert_eq!(tokens.len(), 3, "{tokens:?}");
        assert_eq!(tokens[0], tokens[1], "the same token after a lost answer");
        assert_ne!(tokens[1], tokens[2], "a new token after the cancellation");
        assert_eq!(rules[11].num_calls(), 1, "the shares raised");
        assert_eq!(
            *first_token.lock().unwrap(),
            *written.lock().unwrap(),
            "conditioned on the first transaction's write token"
        );
    }

    #[tokio::test]
    async fn a_removal_is_conditioned_on_the_version_and_token_and_a_gone_item_is_as_planned() {
        let rules = [
            mock!(Client::delete_item)
                .match_requests(|r| r.condition_expression() == Some("#version = :expected AND #rev = :rev"))
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
            s.write_limit(&scope(), None, read(2, "r2"), 1).await.unwrap(),
            LimitWrite::Written
        );
        assert_eq!(
            s.write_limit(&scope(), None, read(2, "r2"), 1).await.unwrap(),
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
            BTreeMap::from([(
                "a".to_owned(),
                LimitItem {
                    limit: 5,
                    version: 3,
                    rev: None
                }
            )])
        );
        assert_eq!(table.prefixed_scopes, BTreeSet::from(["acme/x".to_owned()]));
    }
}
