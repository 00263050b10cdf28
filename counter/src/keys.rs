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
/// Counters table: the per-scope limit override, on the [`LIMIT_NAME`] item.
pub const LIMIT: &str = "limit";

/// Counters table `name` of the best-effort counter (and prefix of its
/// shards, `best_effort#<n>`).
pub const BEST_EFFORT_NAME: &str = "best_effort";
/// Counters table `name` of the eventual counter (and prefix of its shards,
/// `eventual#<n>`).
pub const EVENTUAL_NAME: &str = "eventual";
/// Counters table `name` of the per-scope limit override.
pub const LIMIT_NAME: &str = "limit";

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

/// Whether a counters-table partition is the kit's own state, not a scope.
pub fn is_kit_state_scope(scope: &str) -> bool {
    scope == KIT_STATE_SCOPE
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
}
