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

/// Counters table `name` of the best-effort counter.
pub const BEST_EFFORT_NAME: &str = "best_effort";
/// Counters table `name` of the eventual counter (and prefix of its shards,
/// `eventual#<n>`).
pub const EVENTUAL_NAME: &str = "eventual";
/// Counters table `name` of the per-scope limit override.
pub const LIMIT_NAME: &str = "limit";

/// Attribute names the kit owns on a resource item; an owner's payload may
/// not use them.
pub const RESERVED_RESOURCE_ATTRIBUTES: [&str; 7] = [
    SCOPE,
    ID,
    COUNTER_PROCESSED,
    DELETED,
    INCARNATION,
    CREATED_AT,
    DELETED_AT,
];

/// Whether a counters-table `name` belongs to the eventual counter
/// (`eventual` or one of its shards `eventual#<n>`).
pub fn is_eventual_name(name: &str) -> bool {
    name == EVENTUAL_NAME
        || name
            .strip_prefix(EVENTUAL_NAME)
            .and_then(|rest| rest.strip_prefix('#'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
