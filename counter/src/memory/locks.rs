//! Items held in flight. Under [`super::Chaos`] a transaction holds its
//! items between prepare and commit for a seeded time; a write or another
//! transaction touching a held item meets `TransactionConflict`, as on
//! DynamoDB. This module keeps who holds what and counts the refusals.

use std::collections::BTreeMap;

use crate::error::{CancelReason, StoreError};
use crate::store::ResourceKey;

/// An item a transaction holds between prepare and commit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum LockKey {
    Resource(String, String),
    Counter(String, String),
}

/// The lock of a resource item.
pub(super) fn resource_lock(key: &ResourceKey) -> LockKey {
    LockKey::Resource(key.scope.to_string(), key.id.to_string())
}

/// The error of a plain call that touches a held item.
pub(super) fn conflict(what: &str) -> StoreError {
    StoreError::Transient(format!("TransactionConflict: {what} is being changed by a transaction"))
}

/// The held items, each with the id of the transaction holding it.
#[derive(Debug, Default)]
pub(super) struct Locks {
    held: BTreeMap<LockKey, u64>,
    next_transaction: u64,
    /// Calls refused because an item was held.
    pub(super) conflicts: u64,
    /// Transactions cancelled with `TransactionConflict` beside
    /// `ConditionalCheckFailed`.
    pub(super) mixed_cancellations: u64,
}

impl Locks {
    /// Whether any of `keys` is held.
    pub(super) fn any_held(&self, keys: &[LockKey]) -> bool {
        keys.iter().any(|k| self.is_held(k))
    }

    pub(super) fn is_held(&self, key: &LockKey) -> bool {
        self.held.contains_key(key)
    }

    /// Numbers a new transaction and, when `hold`, holds `keys` for it.
    pub(super) fn begin(&mut self, keys: &[LockKey], hold: bool) -> u64 {
        self.next_transaction += 1;
        let id = self.next_transaction;
        if hold {
            for key in keys {
                self.held.insert(key.clone(), id);
            }
        }
        id
    }

    /// Releases the `keys` transaction `id` holds.
    pub(super) fn release(&mut self, id: u64, keys: &[LockKey]) {
        self.held.retain(|k, holder| *holder != id || !keys.contains(k));
    }

    /// Counts a cancellation with `TransactionConflict` beside
    /// `ConditionalCheckFailed`.
    pub(super) fn note_cancellation(&mut self, reasons: &[CancelReason]) {
        if reasons.contains(&CancelReason::TransactionConflict)
            && reasons.contains(&CancelReason::ConditionalCheckFailed)
        {
            self.mixed_cancellations += 1;
        }
    }
}
