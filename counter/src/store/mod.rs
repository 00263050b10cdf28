//! The seam between the counter's decisions and DynamoDB: the handful of
//! operations the kit performs, in the kit's own terms, one role trait per
//! caller ([`RequestStore`], [`StreamStore`], [`AuditStore`],
//! [`SequenceStore`], over the shared [`StoreBase`] and [`ResourceRead`]).
//! `DynamoStore` in the crate `hybrid-counter-aws` implements them with
//! `aws-sdk-dynamodb`; `crate::memory::MemoryStore` (feature `test-util`)
//! is a deterministic in-memory double that reads like DynamoDB.

pub mod meter;

use std::future::Future;
use std::sync::Arc;

use serde_dynamo::Item;

use crate::best_effort::{Raise, Reservation};
use crate::error::StoreError;
use crate::ids::{ResourceId, Scope};
use crate::items::{CounterItem, CounterSnapshot, ItemRow, ResourceItem, ResourceState};
use crate::time::EpochMillis;

/// The key of one resource item.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub scope: Scope,
    pub id: ResourceId,
}

/// An increment of one counters-table item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterDelta {
    pub scope: Scope,
    /// Counters-table `name`, e.g. `eventual`.
    pub name: String,
    pub delta: i64,
}

/// A conditional write of a resource item inside a transaction. Each guards
/// on the incarnation so an id deleted and re-created is never confused with
/// its predecessor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemWrite {
    /// `SET counter_processed = true IF counter_processed = false AND incarnation = :inc`.
    MarkCounted { key: ResourceKey, incarnation: String },
    /// `DELETE IF deleted = true AND counter_processed = true AND incarnation = :inc`.
    DeleteCounted { key: ResourceKey, incarnation: String },
    /// `DELETE IF deleted = true AND counter_processed = false AND incarnation = :inc`.
    DeleteUncounted { key: ResourceKey, incarnation: String },
}

impl ItemWrite {
    pub fn key(&self) -> &ResourceKey {
        match self {
            ItemWrite::MarkCounted { key, .. }
            | ItemWrite::DeleteCounted { key, .. }
            | ItemWrite::DeleteUncounted { key, .. } => key,
        }
    }
}

/// An all-or-nothing write: an optional counter delta plus conditional item
/// writes. Actions are sent counter first, then items in order, so
/// cancellation reasons line up with [`Transaction::actions_len`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub counter: Option<CounterDelta>,
    pub items: Vec<ItemWrite>,
    pub now: EpochMillis,
}

impl Transaction {
    pub fn actions_len(&self) -> usize {
        usize::from(self.counter.is_some()) + self.items.len()
    }

    /// The cancellation reasons of the item writes, skipping the counter's.
    pub fn item_reasons<'a>(&self, reasons: &'a [crate::error::CancelReason]) -> &'a [crate::error::CancelReason] {
        let skip = usize::from(self.counter.is_some()).min(reasons.len());
        &reasons[skip..]
    }
}

/// A new resource item and the owner's payload attributes to store with it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewResource {
    pub item: ResourceItem,
    pub payload: Item,
}

/// One attempt to claim number `number` of `scope`'s sequence, sent as one
/// transaction of two actions, in this order: `SET last_id = :number` on
/// the `sequence` item, conditioned on `last_id = :number - 1`
/// (`attribute_not_exists(last_id)` for the first number); and the put of
/// the numbered item `sequence#<number>` carrying `token`, conditioned on
/// its absence. Cancellation reasons come in that order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceClaim {
    pub scope: Scope,
    /// At least 1.
    pub number: u64,
    /// The claimer's random token, written on the numbered item.
    pub token: String,
    /// What the number is for (e.g. the API's resource id).
    pub owner: Option<String>,
    pub now: EpochMillis,
}

impl SequenceClaim {
    /// The `last_id` the claim is conditioned on; `None`: no number yet.
    pub fn previous(&self) -> Option<u64> {
        self.number.checked_sub(1).filter(|n| *n > 0)
    }
}

/// A numbered item of a sequence, as a consistent read gives it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceEntry {
    pub number: u64,
    pub token: String,
    pub owner: Option<String>,
    pub claimed_at: EpochMillis,
}

/// Refuses a best-effort write to an item that is not one of the
/// best-effort counter's (`best_effort`, `best_effort#n`): nothing is sent.
pub fn check_best_effort_name(name: &str) -> Result<(), StoreError> {
    if crate::keys::is_best_effort_name(name) {
        Ok(())
    } else {
        Err(StoreError::Rejected(format!(
            "{name:?} is not a best-effort counter item"
        )))
    }
}

/// What an ambiguous failure of a write (applied, its answer lost to a
/// 500 or a timeout) can lead to, given how the production store sends it.
/// `DynamoStore` sets each write's retry configuration from [`sends`], and
/// `crate::memory::MemoryStore`'s `Fault::AppliedThenResent` (feature `test-util`)
/// reads the same table, so the double cannot be kinder than the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// Sent once, the SDK's retries off: an ambiguous failure may have been
    /// applied, and nothing applies it a second time.
    Never,
    /// The SDK's standard retries send it again after an ambiguous failure,
    /// possibly after other clients and the stream consumer acted on the
    /// item. A `PutItem` conditioned on `attribute_not_exists` applies
    /// again once its item was deleted (DESIGN §7). No request-path write
    /// is sent so today; the regression tests of issue 34 D1 set
    /// [`sends::PUT_RESOURCE`] to it to show what the double then finds.
    BySdk,
}

/// How the request path's writes are sent ([`Resend`]).
pub mod sends {
    use super::Resend;

    /// The put of a new resource item: re-sent after its item was deleted
    /// and hard-deleted by the stream, it would bring the item back after
    /// an acknowledged delete.
    pub const PUT_RESOURCE: Resend = Resend::Never;
    /// The soft delete: its condition names the incarnation, so a re-send
    /// is harmless to the items, but its answer would be wrong (a delete
    /// that happened answered as `NotFound`).
    pub const MARK_DELETED: Resend = Resend::Never;
    /// Best-effort increments, decrements and reservations: a re-send
    /// counts twice.
    pub const BEST_EFFORT: Resend = Resend::Never;
}

/// What every role shares: every handler reports the cost of whichever
/// role it runs.
pub trait StoreBase: Send + Sync {
    /// The cost accounting of the requests this store sent, where it keeps
    /// one (`DynamoStore` does).
    fn cost_meter(&self) -> Option<&meter::Meter> {
        None
    }
}

/// One resource item's read, which two roles share: the request path (a
/// delete reads the item it deletes) and the stream consumer (a delete
/// record's item, in per-record mode).
pub trait ResourceRead: StoreBase {
    /// Strongly consistent read of a resource item's kit attributes.
    fn get_resource(&self, key: &ResourceKey)
    -> impl Future<Output = Result<Option<ResourceState>, StoreError>> + Send;
}

/// The request path's operations ([`crate::Counter`]: create, delete,
/// usage).
pub trait RequestStore: ResourceRead {
    /// Strongly consistent read of every counters-table item of `scope`.
    fn read_counters(&self, scope: &Scope) -> impl Future<Output = Result<CounterSnapshot, StoreError>> + Send;

    /// Puts the item if no item with its key exists
    /// (`ConditionFailed` otherwise). Sent as [`sends::PUT_RESOURCE`] says:
    /// an ambiguous error may have been applied, and is never applied again.
    fn put_resource(&self, resource: &NewResource) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Adds `delta` to the best-effort item `name` (`best_effort` or a shard
    /// `best_effort#n`) in one attempt: never retried, because a retry after
    /// an ambiguous failure could count twice.
    fn add_best_effort(
        &self,
        scope: &Scope,
        name: &str,
        delta: i64,
        now: EpochMillis,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Strict admission's reservation: `ADD count 1` on the best-effort
    /// item `name` if it holds `reservation` ([`Reservation::admits`]:
    /// `attribute_not_exists(count) OR count < quota`, and the fence), in
    /// one attempt (never retried by the store: after an ambiguous failure
    /// the slot may be reserved already). `ConditionFailed` means nothing
    /// was written: the shard is at its quota, or a raise moved its epoch
    /// since it was read; a quota of 0 is refused whatever the count. Like every BE
    /// write it bumps `version` and sets `updated_at = now`.
    fn reserve_best_effort(
        &self,
        scope: &Scope,
        name: &str,
        reservation: Reservation,
        now: EpochMillis,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// `SET deleted = true, deleted_at = now` if the item exists, is not
    /// deleted and is still `incarnation` (the one the delete read), so a
    /// delete never soft-deletes a newer item of the same id
    /// (`ConditionFailed` otherwise). Sent as [`sends::MARK_DELETED`] says.
    fn mark_deleted(
        &self,
        key: &ResourceKey,
        incarnation: &str,
        now: EpochMillis,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The stream consumer's operations ([`crate::stream::Processor`]).
pub trait StreamStore: ResourceRead {
    /// [`ResourceRead::get_resource`] of several distinct items, in the order of
    /// `keys`: one request per 100 keys where the store can batch reads
    /// (DynamoDB's `BatchGetItem`), one read after another otherwise.
    fn get_resources(
        &self,
        keys: &[ResourceKey],
    ) -> impl Future<Output = Result<Vec<Option<ResourceState>>, StoreError>> + Send {
        async move {
            let mut states = Vec::with_capacity(keys.len());
            for key in keys {
                states.push(self.get_resource(key).await?);
            }
            Ok(states)
        }
    }

    /// Runs `tx` all-or-nothing.
    fn transact(&self, tx: &Transaction) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The audit's operations ([`crate::audit`]): what it reads, and the
/// repairs it writes.
pub trait AuditStore: StoreBase {
    /// Strongly consistent read of every counters-table item of `scope`,
    /// with their `version` and `updated_at` (what an audit compares).
    fn counter_items(&self, scope: &Scope) -> impl Future<Output = Result<Vec<CounterItem>, StoreError>> + Send;

    /// Every resource item of `scope`, in sort-key order, read the way a
    /// paginated strongly consistent Query reads: each item is
    /// read-committed on its own, so writes of other clients may land
    /// between the items and pages of one call. Not a snapshot.
    fn scope_items(&self, scope: &Scope) -> impl Future<Output = Result<Vec<ItemRow>, StoreError>> + Send;

    /// An operator's repair: sets each counter of `targets` (`name`,
    /// `count`) in one all-or-nothing write, conditioned on every one of
    /// them still having the `version` it has in `read` (or being absent
    /// when it is absent there), bumping each version. `Ok(false)`: a
    /// counter moved since `read` (or was held by a transaction), nothing
    /// was written.
    fn set_counters(
        &self,
        scope: &Scope,
        read: &[CounterItem],
        targets: &[(String, i64)],
        now: EpochMillis,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Strict admission's raise (`audit --repair`): `ADD count` each add of
    /// `raise` and set its epoch to [`Raise::to`] on every item it names, in
    /// one all-or-nothing write, conditioned on each item's epoch being at
    /// most [`Raise::from`] (absent counts as 0), so that two audits never
    /// add twice. Not conditioned on versions: a concurrent reservation or
    /// delete moves BE and live together, and every reservation computed
    /// before the raise is fenced out ([`Fence`](crate::best_effort::Fence)). `Ok(false)`: another
    /// raise landed first, or a transaction held an item; nothing written.
    fn raise_best_effort(
        &self,
        scope: &Scope,
        raise: &Raise,
        now: EpochMillis,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// The gapless sequences' operations: [`crate::sequence`], and
/// [`crate::Counter::next_number`] behind the API's `?sequence=true`.
pub trait SequenceStore: StoreBase {
    /// Strongly consistent read of the last number of `scope`'s sequence
    /// (0 when none was claimed).
    fn last_sequence(&self, scope: &Scope) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Sends `claim` once, all-or-nothing (see [`SequenceClaim`]), without
    /// the SDK's retries: after an ambiguous failure the caller reads the
    /// numbered item back ([`SequenceStore::sequence_entry`]) and retries itself.
    fn claim_sequence(&self, claim: &SequenceClaim) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Strongly consistent read of number `number` of `scope`'s sequence.
    fn sequence_entry(
        &self,
        scope: &Scope,
        number: u64,
    ) -> impl Future<Output = Result<Option<SequenceEntry>, StoreError>> + Send;
}

/// A store handed to [`crate::Counter`], [`crate::stream::Processor`] or
/// [`crate::Sequence`], which hold it in an [`Arc`]: the store itself, or
/// an [`Arc`] the caller shares with other users (a request path and a
/// stream consumer in one process, as in the simulation). Not
/// `Into<Arc<S>>`: for an `Arc<S>` argument both `From<T> for T` and
/// `From<T> for Arc<T>` would apply and `S` could not be inferred. The
/// `S: StoreBase` bounds below pick the impl, which holds only while no
/// role is implemented for `Arc<S>` itself.
pub trait IntoShared<S> {
    fn into_shared(self) -> Arc<S>;
}

impl<S: StoreBase> IntoShared<S> for S {
    fn into_shared(self) -> Arc<S> {
        Arc::new(self)
    }
}

impl<S: StoreBase> IntoShared<S> for Arc<S> {
    fn into_shared(self) -> Arc<S> {
        self
    }
}
