//! Pure decisions of the stream consumer: which transaction a change needs,
//! and what a cancelled transaction means. No I/O here; [`super::process`]
//! runs these plans.

use crate::EpochMillis;
use crate::error::CancelReason;
use crate::items::ResourceState;
use crate::store::{CounterDelta, ItemWrite, ResourceKey, Transaction};

/// The counters-table item a change of `key` is counted on: `eventual` for
/// one shard, else `eventual#<n>` picked by a stable hash of the key, so
/// concurrent consumers of one hot scope mostly write different items. Any
/// shard is correct: readers sum them all.
pub fn eventual_counter_name(key: &ResourceKey, shards: u32) -> String {
    if shards <= 1 {
        return crate::keys::EVENTUAL_NAME.to_owned();
    }
    // FNV-1a: stable across processes and releases, unlike std's hasher.
    let hash = key
        .scope
        .as_str()
        .bytes()
        .chain([0])
        .chain(key.id.as_str().bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("{}#{}", crate::keys::EVENTUAL_NAME, hash % u64::from(shards))
}

/// INSERT: `[EC += 1; SET counter_processed = true IF counter_processed = false AND incarnation = :inc]`.
pub fn count_insert(key: &ResourceKey, incarnation: &str, shards: u32, now: EpochMillis) -> Transaction {
    Transaction {
        counter: Some(CounterDelta {
            scope: key.scope.clone(),
            name: eventual_counter_name(key, shards),
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
    shards: u32,
    now: EpochMillis,
) -> DeleteDecision {
    let Some(state) = state else {
        return DeleteDecision::AlreadyDone("item already hard-deleted");
    };
    if state.incarnation != incarnation {
        return DeleteDecision::AlreadyDone("item was re-created since; this incarnation is gone");
    }
    if !state.deleted {
        return DeleteDecision::AlreadyDone("item is not soft-deleted");
    }
    let write = |counted| {
        let key = key.clone();
        let incarnation = incarnation.to_owned();
        if counted {
            ItemWrite::DeleteCounted { key, incarnation }
        } else {
            ItemWrite::DeleteUncounted { key, incarnation }
        }
    };
    if state.counter_processed {
        DeleteDecision::Write(Transaction {
            counter: Some(CounterDelta {
                scope: key.scope.clone(),
                name: eventual_counter_name(key, shards),
                delta: -1,
            }),
            items: vec![write(true)],
            now,
        })
    } else {
        // Never counted: remove it without touching EC, or EC would end at -1.
        DeleteDecision::Write(Transaction {
            counter: None,
            items: vec![write(false)],
            now,
        })
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
        }
    }

    #[test]
    fn insert_counts_and_flips_the_flag_in_one_transaction() {
        let tx = count_insert(&key(), "i1", 1, 5);
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
        let DeleteDecision::Write(tx) = resolve_delete(&key(), "i1", Some(&state(true, true, "i1")), 1, 0) else {
            panic!("expected a write");
        };
        assert_eq!(tx.counter.map(|c| c.delta), Some(-1));
        assert!(matches!(tx.items[..], [ItemWrite::DeleteCounted { .. }]));
    }

    #[test]
    fn delete_before_insert_deletes_without_touching_the_counter() {
        let DeleteDecision::Write(tx) = resolve_delete(&key(), "i1", Some(&state(false, true, "i1")), 1, 0) else {
            panic!("expected a write");
        };
        assert_eq!(tx.counter, None);
        assert!(matches!(tx.items[..], [ItemWrite::DeleteUncounted { .. }]));
    }

    #[test]
    fn delete_of_a_gone_or_reincarnated_item_is_already_done() {
        assert!(matches!(
            resolve_delete(&key(), "i1", None, 1, 0),
            DeleteDecision::AlreadyDone(_)
        ));
        assert!(matches!(
            resolve_delete(&key(), "i1", Some(&state(false, false, "i2")), 1, 0),
            DeleteDecision::AlreadyDone(_)
        ));
        assert!(matches!(
            resolve_delete(&key(), "i1", Some(&state(true, false, "i1")), 1, 0),
            DeleteDecision::AlreadyDone(_)
        ));
    }

    #[test]
    fn sharded_counter_names_are_stable_and_spread() {
        assert_eq!(eventual_counter_name(&key(), 1), "eventual");
        assert_eq!(eventual_counter_name(&key(), 0), "eventual");
        let name = eventual_counter_name(&key(), 8);
        assert_eq!(name, eventual_counter_name(&key(), 8), "same key, same shard");
        assert!(crate::keys::is_eventual_name(&name), "{name}");
        let used: std::collections::HashSet<String> = (0..200)
            .map(|n| {
                let key = ResourceKey {
                    scope: Scope::new("hot").unwrap(),
                    id: ResourceId::new(format!("w{n}")).unwrap(),
                };
                eventual_counter_name(&key, 8)
            })
            .collect();
        assert_eq!(used.len(), 8, "200 ids should touch every one of 8 shards");
    }

    #[test]
    fn cancellation_reasons_are_read_per_action() {
        let insert = count_insert(&key(), "i1", 1, 0);
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
}
