//! Pure decisions of the stream consumer: which transaction a change needs,
//! and what a cancelled transaction means — per record, or for a whole batch
//! grouped per counters-table item (net delta plus one item write per
//! record, split at the transaction limit). No I/O here; [`super::process`]
//! runs these plans.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use super::record::Change;
use crate::error::CancelReason;
use crate::ids::Scope;
use crate::items::ResourceState;
use crate::scope_keys::ScopeKeys;
use crate::store::{CounterDelta, ItemWrite, ResourceKey, Transaction};
use crate::time::EpochMillis;

/// Item writes one batched transaction carries: DynamoDB's 100 actions,
/// less the counter's.
pub const MAX_ITEMS_PER_TRANSACTION: usize = 99;

/// Which eventual-counter item an invocation counts on. With one shard it
/// is `eventual`; with `N > 1` it is `eventual#<n>`, `n` a stable hash of
/// the scope and the invocation's first stream sequence number. So all of a
/// scope's records in one batch share one counter item (one transaction per
/// scope and batch, not one per shard), while concurrent invocations — other
/// stream shards, a parallelization factor above 1, the reprocessor — land on
/// the same item of a hot scope with probability `1/N` only. Any shard is
/// correct: readers sum them all. A retried batch starts at the same record,
/// so it picks the same item again.
///
/// It also maps an item's resources key to the counters key that counts it
/// ([`ScopeKeys::counters_key_of`]), the key itself when the stack's
/// scopes are not spread over more resources keys than counters keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardChoice {
    shards: u32,
    salt: u64,
    keys: ScopeKeys,
}

impl ShardChoice {
    /// The unsharded counter (`eventual`).
    pub const SINGLE: Self = Self {
        shards: 1,
        salt: 0,
        keys: ScopeKeys::ONE,
    };

    /// The choice of the invocation whose first record has `first_sequence_number`.
    pub fn for_batch(shards: u32, first_sequence_number: Option<&str>) -> Self {
        Self {
            shards: shards.max(1),
            salt: crate::hash::fnv1a(first_sequence_number.unwrap_or_default().as_bytes()),
            keys: ScopeKeys::ONE,
        }
    }

    /// Counts each item on the counters key `keys` maps its resources key to.
    pub fn over(self, keys: ScopeKeys) -> Self {
        Self { keys, ..self }
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The counters-table partition key an item under `resource_key` is
    /// counted on.
    pub fn counter_scope(&self, resource_key: &Scope) -> Scope {
        self.keys.counters_key_of(resource_key)
    }

    /// The counters-table `name` the changes of counters key `scope` are
    /// counted on.
    pub fn counter_name(&self, scope: &Scope) -> String {
        if self.shards <= 1 {
            return crate::keys::EVENTUAL_NAME.to_owned();
        }
        let hash = crate::hash::fnv1a_from(scope.as_str().as_bytes(), self.salt);
        format!("{}#{}", crate::keys::EVENTUAL_NAME, hash % u64::from(self.shards))
    }
}

/// INSERT: `[EC += 1; SET counter_processed = true IF counter_processed = false AND incarnation = :inc]`.
pub fn count_insert(key: &ResourceKey, incarnation: &str, shard: ShardChoice, now: EpochMillis) -> Transaction {
    let scope = shard.counter_scope(&key.scope);
    Transaction {
        counter: Some(CounterDelta {
            name: shard.counter_name(&scope),
            scope,
            delta: 1,
        }),
        items: vec![ItemWrite::MarkCounted {
            key: key.clone(),
            incarnation: incarnation.to_owned(),
        }],
        now,
    }
}

/// What to do about a soft delete, decided on the item's current state
/// rather than on the record's image (its INSERT may have been counted
/// since the image was taken, or may still be waiting in a retry or a DLQ).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteDecision {
    /// Nothing left to do, and why.
    AlreadyDone(&'static str),
    Write(Transaction),
}

pub fn resolve_delete(
    key: &ResourceKey,
    incarnation: &str,
    state: Option<&ResourceState>,
    shard: ShardChoice,
    now: EpochMillis,
) -> DeleteDecision {
    match delete_write(key, incarnation, state) {
        Err(why) => DeleteDecision::AlreadyDone(why),
        Ok(write) => {
            let scope = shard.counter_scope(&key.scope);
            DeleteDecision::Write(batch_transaction(&scope, &shard.counter_name(&scope), vec![write], now))
        }
    }
}

/// The item write a soft delete needs given the item's current state, or
/// why there is nothing left to do.
pub fn delete_write(
    key: &ResourceKey,
    incarnation: &str,
    state: Option<&ResourceState>,
) -> Result<ItemWrite, &'static str> {
    let Some(state) = state else {
        return Err("item already hard-deleted");
    };
    if state.incarnation != incarnation {
        return Err("item was re-created since; this incarnation is gone");
    }
    if !state.deleted {
        return Err("item is not soft-deleted");
    }
    let key = key.clone();
    let incarnation = incarnation.to_owned();
    Ok(if state.counter_processed {
        ItemWrite::DeleteCounted { key, incarnation }
    } else {
        ItemWrite::DeleteUncounted { key, incarnation }
    })
}

/// What one item write does to the eventual counter when it commits.
pub fn counter_delta(write: &ItemWrite) -> i64 {
    match write {
        ItemWrite::MarkCounted { .. } => 1,
        ItemWrite::DeleteCounted { .. } => -1,
        ItemWrite::DeleteUncounted { .. } => 0,
    }
}

/// An insert or soft delete of a batch waiting to be written, with its
/// position in the batch (lower positions have lower sequence numbers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub index: usize,
    pub key: ResourceKey,
    pub incarnation: String,
    pub is_insert: bool,
}

/// The records of a batch counted on one counters-table item (a scope, or
/// one shard of it), in batch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterGroup {
    pub scope: Scope,
    pub counter_name: String,
    pub records: Vec<Pending>,
}

/// Groups the inserts and soft deletes of a batch by the counter item they
/// change ([`ShardChoice::counter_name`]: one group per scope); groups in
/// order of first appearance.
pub fn group_batch<'a>(
    changes: impl IntoIterator<Item = (usize, &'a Change)>,
    shard: ShardChoice,
) -> Vec<CounterGroup> {
    let mut groups: Vec<CounterGroup> = Vec::new();
    let mut by_counter: HashMap<(Scope, String), usize> = HashMap::new();
    for (index, change) in changes {
        let (key, incarnation, is_insert) = match change {
            Change::Insert { key, incarnation } => (key, incarnation, true),
            Change::SoftDelete { key, incarnation } => (key, incarnation, false),
            Change::Ignore(_) => continue,
        };
        let scope = shard.counter_scope(&key.scope);
        let name = shard.counter_name(&scope);
        let pending = Pending {
            index,
            key: key.clone(),
            incarnation: incarnation.clone(),
            is_insert,
        };
        match by_counter.entry((scope, name)) {
            Entry::Occupied(at) => groups[*at.get()].records.push(pending),
            Entry::Vacant(slot) => {
                let (scope, counter_name) = slot.key().clone();
                slot.insert(groups.len());
                groups.push(CounterGroup {
                    scope,
                    counter_name,
                    records: vec![pending],
                });
            }
        }
    }
    groups
}

/// Positions in `pending` of the records the next transaction carries: at
/// most `max_items`, on distinct items, and never a record whose item has
/// an earlier record still waiting — so the records of one item are written
/// one transaction after another, in stream order.
pub fn next_chunk(pending: &[Pending], max_items: usize) -> Vec<usize> {
    let mut seen: HashSet<&ResourceKey> = HashSet::new();
    let mut chunk = Vec::new();
    for (at, record) in pending.iter().enumerate() {
        if chunk.len() == max_items {
            break;
        }
        if seen.insert(&record.key) {
            chunk.push(at);
        }
    }
    chunk
}

/// One transaction for `writes` (distinct items, at most 100 actions with
/// the counter): the net delta on the counter item. The counter item is
/// written even when the delta is zero (one insert counted and one counted
/// item deleted, or a never-counted item deleted): every write of it bumps
/// its `version`, and that is how an audit counting the scope's items with
/// a read-committed Query learns that the set of processed items changed
/// under its count (DESIGN §5a). A never-counted delete adds nothing to EC,
/// or EC would end at -1.
pub fn batch_transaction(scope: &Scope, counter_name: &str, writes: Vec<ItemWrite>, now: EpochMillis) -> Transaction {
    let delta: i64 = writes.iter().map(counter_delta).sum();
    Transaction {
        counter: Some(CounterDelta {
            scope: scope.clone(),
            name: counter_name.to_owned(),
            delta,
        }),
        items: writes,
        now,
    }
}

/// What a cancelled batched transaction means, item by item (positions in
/// `tx.items`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchCancel {
    /// Send again without `done` (inserts already counted by someone else),
    /// after re-reading the items of `replan` (deletes whose item changed),
    /// and after a backoff when `transient`.
    Retry {
        done: Vec<usize>,
        replan: Vec<usize>,
        transient: bool,
    },
    /// Retrying cannot help.
    Fail(String),
}

/// Interprets the cancellation reasons (request order) of a batched
/// transaction.
pub fn interpret_batch_cancel(tx: &Transaction, reasons: &[CancelReason]) -> BatchCancel {
    if let Some(CancelReason::Other(code)) = reasons.iter().find(|r| matches!(r, CancelReason::Other(_))) {
        return BatchCancel::Fail(format!("transaction cancelled: {code}"));
    }
    let mut done = Vec::new();
    let mut replan = Vec::new();
    for (at, reason) in tx.item_reasons(reasons).iter().enumerate() {
        if *reason == CancelReason::ConditionalCheckFailed && at < tx.items.len() {
            if matches!(tx.items[at], ItemWrite::MarkCounted { .. }) {
                done.push(at);
            } else {
                replan.push(at);
            }
        }
    }
    let transient = reasons.iter().any(CancelReason::is_transient);
    if done.is_empty() && replan.is_empty() && !transient {
        return BatchCancel::Fail(format!("transaction cancelled without a reason: {reasons:?}"));
    }
    BatchCancel::Retry {
        done,
        replan,
        transient,
    }
}

/// What a cancelled transaction of one record means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelVerdict {
    /// The item's condition failed because the work is already done.
    AlreadyDone,
    /// The item changed under us (e.g. its INSERT was counted between our
    /// read and our delete): read it again and decide anew.
    Replan,
    /// Conflict or throttling: retry after a backoff.
    Retry,
    /// Anything else: give up on this record.
    Fail(String),
}

/// Interprets the cancellation reasons of `tx`, built for a record that is
/// an insert (`is_insert`) or a soft delete.
pub fn interpret_cancel(tx: &Transaction, reasons: &[CancelReason], is_insert: bool) -> CancelVerdict {
    if let Some(CancelReason::Other(code)) = reasons.iter().find(|r| matches!(r, CancelReason::Other(_))) {
        return CancelVerdict::Fail(format!("transaction cancelled: {code}"));
    }
    if tx.item_reasons(reasons).contains(&CancelReason::ConditionalCheckFailed) {
        return if is_insert {
            CancelVerdict::AlreadyDone
        } else {
            CancelVerdict::Replan
        };
    }
    if reasons.iter().any(CancelReason::is_transient) {
        return CancelVerdict::Retry;
    }
    CancelVerdict::Fail(format!("transaction cancelled without a reason: {reasons:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ResourceId, Scope};

    fn key() -> ResourceKey {
        ResourceKey {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new("w1").unwrap(),
        }
    }

    fn state(processed: bool, deleted: bool, inc: &str) -> ResourceState {
        ResourceState {
            counter_processed: processed,
            deleted,
            incarnation: inc.into(),
            be_shard: None,
        }
    }

    #[test]
    fn insert_counts_and_flips_the_flag_in_one_transaction() {
        let tx = count_insert(&key(), "i1", ShardChoice::SINGLE, 5);
        assert_eq!(tx.counter.as_ref().map(|c| c.delta), Some(1));
        assert_eq!(tx.counter.as_ref().map(|c| c.name.as_str()), Some("eventual"));
        assert_eq!(
            tx.items,
            vec![ItemWrite::MarkCounted {
                key: key(),
                incarnation: "i1".into()
            }]
        );
        assert_eq!(tx.actions_len(), 2);
    }

    #[test]
    fn delete_of_a_counted_item_decrements_and_deletes() {
        let DeleteDecision::Write(tx) =
            resolve_delete(&key(), "i1", Some(&state(true, true, "i1")), ShardChoice::SINGLE, 0)
        else {
            panic!("expected a write");
        };
        assert_eq!(tx.counter.map(|c| c.delta), Some(-1));
        assert!(matches!(tx.items[..], [ItemWrite::DeleteCounted { .. }]));
    }

    #[test]
    fn delete_before_insert_deletes_without_changing_the_count() {
        let DeleteDecision::Write(tx) =
            resolve_delete(&key(), "i1", Some(&state(false, true, "i1")), ShardChoice::SINGLE, 0)
        else {
            panic!("expected a write");
        };
        // The counter item is written (its version moves), its count is not.
        assert_eq!(tx.counter.map(|c| c.delta), Some(0));
        assert!(matches!(tx.items[..], [ItemWrite::DeleteUncounted { .. }]));
    }

    #[test]
    fn delete_of_a_gone_or_reincarnated_item_is_already_done() {
        assert!(matches!(
            resolve_delete(&key(), "i1", None, ShardChoice::SINGLE, 0),
            DeleteDecision::AlreadyDone(_)
        ));
        assert!(matches!(
            resolve_delete(&key(), "i1", Some(&state(false, false, "i2")), ShardChoice::SINGLE, 0),
            DeleteDecision::AlreadyDone(_)
        ));
        assert!(matches!(
            resolve_delete(&key(), "i1", Some(&state(true, false, "i1")), ShardChoice::SINGLE, 0),
            DeleteDecision::AlreadyDone(_)
        ));
    }

    #[test]
    fn a_batch_counts_each_scope_on_one_shard_and_batches_spread_over_all() {
        let hot = Scope::new("hot").unwrap();
        assert_eq!(ShardChoice::SINGLE.counter_name(&hot), "eventual");
        assert_eq!(ShardChoice::for_batch(0, Some("100")).counter_name(&hot), "eventual");
        let choice = ShardChoice::for_batch(8, Some("100"));
        let name = choice.counter_name(&hot);
        assert!(crate::keys::is_eventual_name(&name) && name != "eventual", "{name}");
        assert_eq!(
            name,
            ShardChoice::for_batch(8, Some("100")).counter_name(&hot),
            "a retried batch picks the same item"
        );
        let used: std::collections::HashSet<String> = (0..200)
            .map(|n| ShardChoice::for_batch(8, Some(&format!("{}", 1000 + n))).counter_name(&hot))
            .collect();
        assert_eq!(
            used.len(),
            8,
            "200 batches of one hot scope should touch every one of 8 shards"
        );
        let scopes: std::collections::HashSet<String> = (0..200)
            .map(|n| choice.counter_name(&Scope::new(format!("s{n}")).unwrap()))
            .collect();
        assert_eq!(scopes.len(), 8, "one batch spreads its scopes over the shards too");
    }

    #[test]
    fn cancellation_reasons_are_read_per_action() {
        let insert = count_insert(&key(), "i1", ShardChoice::SINGLE, 0);
        use CancelReason::*;
        assert_eq!(
            interpret_cancel(&insert, &[None, ConditionalCheckFailed], true),
            CancelVerdict::AlreadyDone
        );
        assert_eq!(
            interpret_cancel(&insert, &[None, ConditionalCheckFailed], false),
            CancelVerdict::Replan
        );
        assert_eq!(
            interpret_cancel(&insert, &[TransactionConflict, None], true),
            CancelVerdict::Retry
        );
        assert_eq!(
            interpret_cancel(&insert, &[Throttled, None], true),
            CancelVerdict::Retry
        );
        assert!(matches!(
            interpret_cancel(&insert, &[Other("ValidationError".into()), None], true),
            CancelVerdict::Fail(_)
        ));
        // A condition failure on the counter's slot (it has none) is not read
        // as "already done".
        assert!(matches!(
            interpret_cancel(&insert, &[ConditionalCheckFailed, None], true),
            CancelVerdict::Fail(_)
        ));
    }
    fn keyed(id: &str) -> ResourceKey {
        ResourceKey {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new(id).unwrap(),
        }
    }

    fn pending(index: usize, id: &str, is_insert: bool) -> Pending {
        Pending {
            index,
            key: keyed(id),
            incarnation: "i".into(),
            is_insert,
        }
    }

    fn mark(id: &str) -> ItemWrite {
        ItemWrite::MarkCounted {
            key: keyed(id),
            incarnation: "i".into(),
        }
    }

    #[test]
    fn a_batch_groups_per_counter_item_in_order_and_skips_ignored_records() {
        let other = ResourceKey {
            scope: Scope::new("other").unwrap(),
            id: ResourceId::new("x").unwrap(),
        };
        let changes = [
            Change::Insert {
                key: keyed("a"),
                incarnation: "i".into(),
            },
            Change::Ignore(crate::stream::record::IgnoreReason::Remove),
            Change::Insert {
                key: other.clone(),
                incarnation: "j".into(),
            },
            Change::SoftDelete {
                key: keyed("a"),
                incarnation: "i".into(),
            },
        ];
        let groups = group_batch(changes.iter().enumerate(), ShardChoice::SINGLE);
        assert_eq!(groups.len(), 2);
        assert_eq!(
            (groups[0].scope.as_str(), groups[0].counter_name.as_str()),
            ("acct", "eventual")
        );
        assert_eq!(groups[0].records, vec![pending(0, "a", true), pending(3, "a", false)]);
        assert_eq!(groups[1].records.iter().map(|p| p.index).collect::<Vec<_>>(), vec![2]);
        // Sharded: still one group per scope, on the batch's shard of that scope.
        let choice = ShardChoice::for_batch(8, Some("42"));
        let sharded = group_batch(changes.iter().enumerate(), choice);
        assert_eq!(sharded.len(), 2);
        for group in &sharded {
            assert_eq!(group.counter_name, choice.counter_name(&group.scope));
        }
    }

    #[test]
    fn one_hundred_fifty_inserts_of_one_scope_split_into_two_transactions_with_the_net_delta() {
        let mut left: Vec<Pending> = (0..150).map(|n| pending(n, &format!("w{n}"), true)).collect();
        let scope = Scope::new("acct").unwrap();
        let mut sent = Vec::new();
        while !left.is_empty() {
            let chunk = next_chunk(&left, MAX_ITEMS_PER_TRANSACTION);
            let writes = chunk.iter().map(|at| mark(left[*at].key.id.as_str())).collect();
            sent.push(batch_transaction(&scope, "eventual", writes, 0));
            let taken: Vec<usize> = chunk.iter().map(|at| left[*at].index).collect();
            left.retain(|p| !taken.contains(&p.index));
        }
        let actions: Vec<usize> = sent.iter().map(Transaction::actions_len).collect();
        assert_eq!(actions, vec![100, 52], "99 flags + counter, then 51 flags + counter");
        let deltas: Vec<i64> = sent.iter().map(|tx| tx.counter.as_ref().unwrap().delta).collect();
        assert_eq!(deltas, vec![99, 51]);
        assert_eq!(deltas.iter().sum::<i64>(), 150);
    }

    #[test]
    fn two_records_of_one_item_go_in_successive_transactions_in_order() {
        // insert a, insert b, delete a, insert c, (re-created) insert a
        let mut left = vec![
            pending(0, "a", true),
            pending(1, "b", true),
            pending(2, "a", false),
            pending(3, "c", true),
            pending(4, "a", true),
        ];
        let first = next_chunk(&left, MAX_ITEMS_PER_TRANSACTION);
        assert_eq!(first, vec![0, 1, 3]);
        left.retain(|p| ![0, 1, 3].contains(&p.index));
        assert_eq!(
            next_chunk(&left, MAX_ITEMS_PER_TRANSACTION),
            vec![0],
            "the delete of a, alone"
        );
        left.remove(0);
        assert_eq!(next_chunk(&left, MAX_ITEMS_PER_TRANSACTION), vec![0], "then the new a");
        // The limit holds too.
        let many: Vec<Pending> = (0..5).map(|n| pending(n, &format!("w{n}"), true)).collect();
        assert_eq!(next_chunk(&many, 2), vec![0, 1]);
    }

    #[test]
    fn the_net_delta_nets_out_counted_deletes_and_a_zero_delta_still_bumps_the_counter() {
        let scope = Scope::new("acct").unwrap();
        let del = |id: &str, counted| delete_write(&keyed(id), "i", Some(&state(counted, true, "i"))).unwrap();
        let tx = batch_transaction(
            &scope,
            "eventual",
            vec![mark("a"), mark("b"), del("c", true), del("d", false)],
            0,
        );
        assert_eq!(tx.counter.as_ref().map(|c| c.delta), Some(1));
        assert_eq!(tx.actions_len(), 5);
        // A zero net delta still writes the counter item: its version must
        // move, because the set of processed items did.
        let tx = batch_transaction(&scope, "eventual", vec![mark("a"), del("c", true)], 0);
        assert_eq!(tx.counter.as_ref().map(|c| c.delta), Some(0));
        assert_eq!(tx.actions_len(), 3);
    }

    #[test]
    fn a_batch_cancel_drops_counted_inserts_and_replans_changed_deletes() {
        use CancelReason::*;
        let scope = Scope::new("acct").unwrap();
        let deleted = delete_write(&keyed("d"), "i", Some(&state(false, true, "i"))).unwrap();
        let tx = batch_transaction(&scope, "eventual", vec![mark("a"), mark("b"), deleted, mark("c")], 0);
        assert_eq!(
            interpret_batch_cancel(&tx, &[None, ConditionalCheckFailed, None, ConditionalCheckFailed, None]),
            BatchCancel::Retry {
                done: vec![0],
                replan: vec![2],
                transient: false
            }
        );
        assert_eq!(
            interpret_batch_cancel(&tx, &[TransactionConflict, None, ConditionalCheckFailed, None, None]),
            BatchCancel::Retry {
                done: vec![1],
                replan: vec![],
                transient: true
            }
        );
        // An injected conflict may carry a single reason.
        assert_eq!(
            interpret_batch_cancel(&tx, &[TransactionConflict]),
            BatchCancel::Retry {
                done: vec![],
                replan: vec![],
                transient: true
            }
        );
        assert!(matches!(
            interpret_batch_cancel(&tx, &[Other("ValidationError".into())]),
            BatchCancel::Fail(_)
        ));
        assert!(matches!(
            interpret_batch_cancel(&tx, &[ConditionalCheckFailed, None, None, None, None]),
            BatchCancel::Fail(_)
        ));
    }
}
