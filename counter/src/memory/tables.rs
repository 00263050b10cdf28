//! The two tables as plain data ([`Tables`]), and the writes that need more
//! than one line: an item write's condition, a transaction applied all or
//! nothing with its cancellation reasons in request order, and a sequence
//! claim. A transaction appends its resource writes' stream records here;
//! the plain writes append theirs where they are made (`store.rs`).

use std::collections::BTreeMap;

use serde_dynamo::{AttributeValue, Item};

use super::stream::{Event, Stream};
use crate::error::{CancelReason, StoreError};
use crate::items::ResourceState;
use crate::keys;
use crate::store::{ItemWrite, ResourceKey, SequenceClaim, SequenceEntry, Transaction};
use crate::time::EpochMillis;

/// A resource item: its kit attributes, and its full image (kit attributes
/// plus the owner's payload) as the table holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemResource {
    pub state: ResourceState,
    pub image: Item,
}

/// The two tables.
#[derive(Debug, Default, Clone)]
pub struct Tables {
    pub resources: BTreeMap<(String, String), MemResource>,
    /// `(scope, name)` → count.
    pub counters: BTreeMap<(String, String), i64>,
    /// `(scope, name)` → the counter's `updated_at`: the `now` of its last
    /// write (the store's clock for [`super::MemoryStore::set_counter`]).
    pub counters_updated_at: BTreeMap<(String, String), EpochMillis>,
    /// `(scope, name)` → the counter's `version`, bumped by every write.
    pub counters_version: BTreeMap<(String, String), i64>,
    /// `(scope, name)` → a best-effort item's fence epoch, where it has one
    /// ([`crate::best_effort::Fence`]).
    pub counters_epoch: BTreeMap<(String, String), u64>,
    pub limits: BTreeMap<String, u64>,
    /// scope → the share of its override assigned to this key
    /// ([`crate::shares`]); only while `limits` holds the override.
    pub limit_shares: BTreeMap<String, u64>,
    /// scope → the `limit` item's `version` (bumped by every write) and the
    /// token of the write that set it, its share's too: what a `limit set`'s
    /// transactions are conditioned on ([`crate::shares::Round`]).
    pub limit_revs: BTreeMap<String, (i64, String)>,
    /// Limit writes so far (each one's token is `limit-<n>`).
    pub limit_writes: u64,
    /// scope → the last number of its gapless sequence (the `sequence`
    /// item's `last_id`).
    pub sequences: BTreeMap<String, u64>,
    /// `(scope, n)` → the numbered sequence item `sequence#<n>`.
    pub sequence_items: BTreeMap<(String, u64), SequenceEntry>,
    /// The drift check's state item ([`crate::keys::KIT_STATE_SCOPE`]).
    pub drift_state: Option<crate::audit::drift::DriftCheckState>,
    /// The layout record ([`crate::keys::LAYOUT_SCOPE`]).
    pub layout: Option<crate::scope_keys::ScopeKeys>,
    /// Every incarnation a soft delete applied to: one of them put again
    /// is an item back after its delete, which the store reports as a
    /// violation ([`super::MemoryStore::violation`]) whatever the checker says.
    pub deleted_incarnations: std::collections::BTreeSet<String>,
    /// The incarnations put again after their delete, in order.
    pub resurrected: Vec<String>,
}

impl Tables {
    /// Adds `delta` to a counter, bumps its version and stamps its `updated_at`.
    pub(super) fn add_counter(&mut self, scope: &str, name: &str, delta: i64, now: EpochMillis) {
        let key = (scope.to_owned(), name.to_owned());
        *self.counters.entry(key.clone()).or_default() += delta;
        *self.counters_version.entry(key.clone()).or_default() += 1;
        self.counters_updated_at.insert(key, now);
    }

    /// Sets a counter, bumps its version and stamps its `updated_at`.
    pub(super) fn set_counter(&mut self, scope: &str, name: &str, count: i64, now: EpochMillis) {
        let key = (scope.to_owned(), name.to_owned());
        self.counters.insert(key.clone(), count);
        *self.counters_version.entry(key.clone()).or_default() += 1;
        self.counters_updated_at.insert(key, now);
    }
}

impl MemResource {
    /// Whether the kit wrote this item (it carries an incarnation).
    pub fn is_kits(&self) -> bool {
        self.image.contains_key(keys::INCARNATION)
    }
}

/// The `(scope, id)` key of a resource item in [`Tables::resources`].
pub(super) fn key_of(key: &ResourceKey) -> (String, String) {
    (key.scope.to_string(), key.id.to_string())
}

/// Evaluates both conditions of a sequence claim, then writes both items or
/// neither (reasons in the claim's action order: `sequence`, then
/// `sequence#<n>`).
pub(super) fn apply_claim(t: &mut Tables, claim: &SequenceClaim) -> Result<(), StoreError> {
    let scope = claim.scope.to_string();
    let reason = |holds: bool| {
        if holds {
            CancelReason::None
        } else {
            CancelReason::ConditionalCheckFailed
        }
    };
    let last_holds = t.sequences.get(&scope).copied() == claim.previous();
    let absent = !t.sequence_items.contains_key(&(scope.clone(), claim.number));
    if !(last_holds && absent) {
        return Err(StoreError::Cancelled {
            reasons: vec![reason(last_holds), reason(absent)],
        });
    }
    t.sequences.insert(scope.clone(), claim.number);
    t.sequence_items.insert(
        (scope, claim.number),
        SequenceEntry {
            number: claim.number,
            token: claim.token.clone(),
            owner: claim.owner.clone(),
            claimed_at: claim.now,
        },
    );
    Ok(())
}

/// Checks one item write's condition against the tables.
pub(super) fn condition_holds(tables: &Tables, write: &ItemWrite) -> bool {
    let item = tables.resources.get(&key_of(write.key()));
    match (write, item) {
        (_, None) => false,
        (ItemWrite::MarkCounted { incarnation, .. }, Some(r)) => {
            !r.state.counter_processed && r.state.incarnation == *incarnation
        }
        (ItemWrite::DeleteCounted { incarnation, .. }, Some(r)) => {
            r.state.deleted && r.state.counter_processed && r.state.incarnation == *incarnation
        }
        (ItemWrite::DeleteUncounted { incarnation, .. }, Some(r)) => {
            r.state.deleted && !r.state.counter_processed && r.state.incarnation == *incarnation
        }
    }
}

/// Evaluates every condition of `tx`, then applies all of it or nothing
/// (the counter's update has no condition of its own).
pub(super) fn apply_transaction(t: &mut Tables, stream: &mut Stream, tx: &Transaction) -> Result<(), StoreError> {
    let mut reasons = Vec::with_capacity(tx.actions_len());
    if tx.counter.is_some() {
        reasons.push(CancelReason::None);
    }
    for write in &tx.items {
        reasons.push(if condition_holds(t, write) {
            CancelReason::None
        } else {
            CancelReason::ConditionalCheckFailed
        });
    }
    if reasons.iter().any(|r| *r != CancelReason::None) {
        return Err(StoreError::Cancelled { reasons });
    }
    if let Some(delta) = &tx.counter {
        t.add_counter(delta.scope.as_str(), &delta.name, delta.delta, tx.now);
    }
    for write in &tx.items {
        let key = key_of(write.key());
        match write {
            ItemWrite::MarkCounted { .. } => {
                if let Some(r) = t.resources.get_mut(&key) {
                    let old = r.image.clone();
                    r.state.counter_processed = true;
                    r.image
                        .insert(keys::COUNTER_PROCESSED.to_owned(), AttributeValue::Bool(true));
                    stream.append(Event::Modify, Some(&old), Some(&r.image));
                }
            }
            ItemWrite::DeleteCounted { .. } | ItemWrite::DeleteUncounted { .. } => {
                if let Some(r) = t.resources.remove(&key) {
                    stream.append(Event::Remove, Some(&r.image), None);
                }
            }
        }
    }
    Ok(())
}
