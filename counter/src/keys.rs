//! Key layout and attribute names, in one place. Every expression the kit
//! sends refers to attributes through `#placeholders` bound to these names,
//! because several of them (`count`, `name`, `limit`, `scope`) are DynamoDB
//! reserved words.

/// Resources table: partition key.
pub const SCOPE: &str = "scope";
/// Resources table: sort key.
pub const ID: &str = "id";
/// Resources table: the eventual counter has counted this item.
pub const COUNTER_PROCESSED: &str = "counter_processed";
/// Resources table: soft-deleted; the stream consumer will hard-delete it.
pub const DELETED: &str = "deleted";
/// Resources table: random token written at create (guards against ABA).
pub const INCARNATION: &str = "incarnation";
/// Resources table: creation time, epoch milliseconds.
pub const CREATED_AT: &str = "created_at";
/// Resources table: soft-delete time, epoch milliseconds.
pub const DELETED_AT: &str = "deleted_at";
/// Resources table: the best-effort shard (`best_effort#<n>`) the create
/// counted this item on; absent when the counter is not sharded
/// (`best_effort`). A delete takes its `-1` from the same shard.
pub const BE_SHARD: &str = "be_shard";

/// Counters table: sort key.
pub const NAME: &str = "name";
/// Counters table: the counter value.
pub const COUNT: &str = "count";
/// Counters table: bumped on every write (optimistic concurrency for repair).
pub const VERSION: &str = "version";
/// Counters table: last write time, epoch milliseconds.
pub const UPDATED_AT: &str = "updated_at";
/// Counters table, best-effort items: the strict raise that last fenced
/// them ([`crate::best_effort::Fence`]); absent until the first.
pub const EPOCH: &str = "epoch";
/// Counters table: the per-scope limit override, on the [`LIMIT_NAME`] item.
pub const LIMIT: &str = "limit";
/// Counters table, on the [`LIMIT_NAME`] item: a random token written
/// anew by every write of the override, so a write conditioned on what a
/// plan read is refused after any change since, even one that cleared the
/// override and set it again (which restarts `version` at 1).
pub const REV: &str = "rev";
/// Counters table, on the [`LIMIT_NAME`] item of a scope over several
/// keys: this key's share of the override ([`crate::shares`]) and the
/// [`REV`] of the write that assigned it.
pub const SHARE: &str = "share";
pub const SHARE_REV: &str = "share_rev";

/// Counters table `name` of the best-effort counter (and prefix of its
/// shards, `best_effort#<n>`).
pub const BEST_EFFORT_NAME: &str = "best_effort";
/// Counters table `name` of the eventual counter (and prefix of its shards,
/// `eventual#<n>`).
pub const EVENTUAL_NAME: &str = "eventual";
/// Counters table `name` of the per-scope limit override.
pub const LIMIT_NAME: &str = "limit";

/// Counters table `name` of a scope's gapless sequence: the item holding
/// [`LAST_ID`], the last number claimed. The numbered items are
/// `sequence#<n>` ([`sequence_item_name`]). Every name of the two counters
/// and of the limit sorts below this one, so a counters Query bounded by
/// `name < "sequence"` ([`SEQUENCE_NAME`] as the upper bound) reads the
/// counters and never a sequence item, however many numbers a scope has
/// claimed.
pub const SEQUENCE_NAME: &str = "sequence";
/// Counters table: the last number of a scope's sequence, on the
/// [`SEQUENCE_NAME`] item.
pub const LAST_ID: &str = "last_id";
/// Counters table: on a numbered sequence item, the claimer's random token
/// (how a claimer recognises its own number after an ambiguous error).
pub const SEQUENCE_TOKEN: &str = "token";
/// Counters table: on a numbered sequence item, what the number was claimed
/// for (the API's resource id), when the claimer said.
pub const SEQUENCE_OWNER: &str = "owner";
/// Counters table: on a numbered sequence item, when it was claimed, epoch
/// milliseconds.
pub const CLAIMED_AT: &str = "claimed_at";
/// Counters-table partition of the kit's own state (the drift check's
/// cursor and last run, [`DRIFT_CHECK_NAME`]). [`crate::ids::Scope::new`]
/// rejects it (it starts with a space), so no owner's scope can ever
/// collide with it; every Scan of the counters table skips it
/// ([`is_kit_state_scope`]).
pub const KIT_STATE_SCOPE: &str = " kit-state";
/// Counters-table `name`, under [`KIT_STATE_SCOPE`], of the drift check's
/// state item.
pub const DRIFT_CHECK_NAME: &str = "drift-check";
/// Drift-check state item: the JSON document of its cursor and last run.
pub const STATE: &str = "state";

/// Counters-table partition of the layout record ([`crate::layout`]): the
/// scope keys the stack's items are written under. Its own partition, not
/// [`KIT_STATE_SCOPE`]'s, so every function may read it (only counterctl
/// writes it) while the drift check's state stays the drift check's; like
/// it, no scope can name it (it starts with a space).
pub const LAYOUT_SCOPE: &str = " kit-layout";
/// Counters-table `name` of the layout record under [`LAYOUT_SCOPE`].
pub const LAYOUT_NAME: &str = "scope-keys";
/// Layout record: `ScopeKeyShards`.
pub const LAYOUT_KEYS: &str = "scope_key_shards";
/// Layout record: `ResourceKeySpread`.
pub const LAYOUT_SPREAD: &str = "resource_key_spread";

/// Whether a counters-table partition is the kit's own (its state or its
/// layout record), not a scope.
pub fn is_kit_state_scope(scope: &str) -> bool {
    scope == KIT_STATE_SCOPE || scope == LAYOUT_SCOPE
}

/// Attribute names the kit owns on a resource item; an owner's payload may
/// not use them.
pub const RESERVED_RESOURCE_ATTRIBUTES: [&str; 8] = [
    SCOPE,
    ID,
    COUNTER_PROCESSED,
    DELETED,
    INCARNATION,
    CREATED_AT,
    DELETED_AT,
    BE_SHARD,
];

/// Whether a counters-table `name` belongs to the eventual counter
/// (`eventual` or one of its shards `eventual#<n>`).
pub fn is_eventual_name(name: &str) -> bool {
    is_counter_name(EVENTUAL_NAME, name)
}

/// Whether a counters-table `name` belongs to the best-effort counter
/// (`best_effort` or one of its shards `best_effort#<n>`).
pub fn is_best_effort_name(name: &str) -> bool {
    is_counter_name(BEST_EFFORT_NAME, name)
}

/// The counters-table `name` of best-effort shard `shard`; `None` is the
/// unsharded `best_effort`.
pub fn best_effort_name(shard: Option<u32>) -> String {
    match shard {
        None => BEST_EFFORT_NAME.to_owned(),
        Some(n) => format!("{BEST_EFFORT_NAME}#{n}"),
    }
}

/// The counters-table `name` of number `n` of a scope's sequence.
pub fn sequence_item_name(n: u64) -> String {
    format!("{SEQUENCE_NAME}#{n}")
}

/// Whether a counters-table `name` belongs to a sequence (`sequence` or a
/// numbered `sequence#<n>`): never a counter, never audited or repaired.
pub fn is_sequence_name(name: &str) -> bool {
    is_counter_name(SEQUENCE_NAME, name)
}

/// `base` itself or one of its shards `base#<n>`.
fn is_counter_name(base: &str, name: &str) -> bool {
    name == base
        || name
            .strip_prefix(base)
            .and_then(|rest| rest.strip_prefix('#'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kit_state_partition_can_never_be_an_owners_scope() {
        assert!(crate::ids::Scope::new(KIT_STATE_SCOPE).is_err());
        assert!(is_kit_state_scope(KIT_STATE_SCOPE));
        assert!(!is_kit_state_scope("kit-state"));
    }

    #[test]
    fn eventual_names_include_shards_only() {
        assert!(is_eventual_name("eventual"));
        assert!(is_eventual_name("eventual#0"));
        assert!(is_eventual_name("eventual#17"));
        assert!(!is_eventual_name("eventual#"));
        assert!(!is_eventual_name("eventual#x"));
        assert!(!is_eventual_name("eventually"));
        assert!(!is_eventual_name("best_effort"));
    }

    #[test]
    fn best_effort_names_include_shards_only() {
        for shard in [None, Some(0), Some(15)] {
            assert!(is_best_effort_name(&best_effort_name(shard)), "{shard:?}");
        }
        assert_eq!(best_effort_name(None), "best_effort");
        assert_eq!(best_effort_name(Some(3)), "best_effort#3");
        assert!(!is_best_effort_name("best_effort#"));
        assert!(!is_best_effort_name("best_effort#-1"));
        assert!(!is_best_effort_name("best_efforts"));
        assert!(!is_best_effort_name("eventual#0"));
        assert!(!is_best_effort_name(LIMIT_NAME));
    }

    #[test]
    fn every_counter_name_sorts_below_the_sequence_items_so_a_bounded_query_never_reads_them() {
        let counters = [
            best_effort_name(None),
            best_effort_name(Some(u32::MAX)),
            EVENTUAL_NAME.to_owned(),
            format!("{EVENTUAL_NAME}#{}", u32::MAX),
            LIMIT_NAME.to_owned(),
        ];
        for name in &counters {
            assert!(name.as_str() < SEQUENCE_NAME, "{name} must sort below {SEQUENCE_NAME}");
            assert!(!is_sequence_name(name), "{name}");
        }
        for n in [1, 9, 10, u64::MAX] {
            let name = sequence_item_name(n);
            assert!(name.as_str() >= SEQUENCE_NAME && is_sequence_name(&name), "{name}");
            assert!(!is_best_effort_name(&name) && !is_eventual_name(&name));
        }
        assert!(is_sequence_name(SEQUENCE_NAME));
        assert!(!is_sequence_name("sequence#") && !is_sequence_name("sequences"));
    }
}
