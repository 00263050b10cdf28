//! A scope spread over several partition keys (`ScopeKeyShards`): with
//! N > 1 an item of scope `s` lives under the key `s#k`, `k` a stable hash
//! of its id, and each `s#k` is a scope of its own to the rest of the kit
//! (its counters, stream transactions, audit) that admits up to its share
//! of `s`'s limit. With N = 1 the key is `s` itself, byte for byte.

use crate::error::Error;
use crate::ids::{ResourceId, Scope};

/// Most keys a stack may spread a scope over (the `ScopeKeyShards`
/// parameter's maximum): a limit override is a copy on every key, so a
/// `limit set` writes up to this many items.
pub const MAX_KEYS: u32 = 100;

/// How many partition keys each scope is spread over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeKeys {
    count: u32,
}

impl Default for ScopeKeys {
    fn default() -> Self {
        Self { count: 1 }
    }
}

impl ScopeKeys {
    /// `count` keys per scope, from 1 to [`MAX_KEYS`].
    pub fn new(count: u32) -> Result<Self, Error> {
        if (1..=MAX_KEYS).contains(&count) {
            Ok(Self { count })
        } else {
            Err(Error::InvalidInput(format!(
                "a scope is spread over 1 to {MAX_KEYS} keys, not {count}"
            )))
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Which of the scope's keys `id` lives under: FNV-1a of its bytes, so
    /// every process and release agrees (sequential ids spread too).
    pub fn index(&self, id: &ResourceId) -> u32 {
        (crate::hash::fnv1a(id.as_str().as_bytes()) % u64::from(self.count)) as u32
    }

    /// The partition key of `id` in `scope`. Refused when the suffix makes
    /// the key longer than a scope may be (a stream record carrying it
    /// would fail validation).
    pub fn key_of(&self, scope: &Scope, id: &ResourceId) -> Result<Scope, Error> {
        self.key(scope, self.index(id))
    }

    /// Key `index` of `scope` (`scope` itself when the scope has one key).
    /// Refused for every index alike when the scope is too long for its
    /// longest key, or holds `#` (with N > 1 every partition key of the
    /// tables is `s#k`, `k` the digits after the last `#`; a scope with a
    /// `#` of its own would share a bare partition, its sequences', with
    /// another scope's key).
    pub fn key(&self, scope: &Scope, index: u32) -> Result<Scope, Error> {
        if self.count == 1 {
            return Ok(scope.clone());
        }
        let refused = |why: String| {
            Error::InvalidInput(format!(
                "scope {scope:?} cannot be spread over {} keys: {why}",
                self.count
            ))
        };
        if scope.as_str().contains('#') {
            return Err(refused(
                "a scope may not contain '#' on a stack whose scopes are spread over keys".into(),
            ));
        }
        // The longest key decides, so a scope is valid for every id or none.
        Scope::new(format!("{scope}#{}", self.count - 1)).map_err(|err| refused(err.to_string()))?;
        Scope::new(format!("{scope}#{index}")).map_err(|err| refused(err.to_string()))
    }

    /// Every key of `scope`, in index order.
    pub fn keys(&self, scope: &Scope) -> Result<Vec<Scope>, Error> {
        (0..self.count).map(|index| self.key(scope, index)).collect()
    }

    /// The scope and index of a partition key `key` of this layout: `s#k`
    /// with `k` written as [`ScopeKeys::key`] writes it and below the
    /// count. `None` with one key (every key is its own scope) and for
    /// anything else (a bare scope, `s#007`, `s#k` with `k` >= N).
    pub fn split<'a>(&self, key: &'a str) -> Option<(&'a str, u32)> {
        if self.count == 1 {
            return None;
        }
        let (scope, suffix) = key.rsplit_once('#')?;
        let index = suffix.parse::<u32>().ok()?;
        (!scope.is_empty() && index < self.count && index.to_string() == suffix).then_some((scope, index))
    }

    /// Key `index`'s share of a scope limit of `limit`: the limit divided
    /// as evenly as integers allow (the first `limit % N` keys get one
    /// more), so the shares add up to the limit exactly and a scope never
    /// holds more than its limit when no key holds more than its share.
    pub fn share(&self, limit: u64, index: u32) -> u64 {
        let count = u64::from(self.count);
        limit / count + u64::from(u64::from(index) < limit % count)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn scope(s: &str) -> Scope {
        Scope::new(s).unwrap()
    }

    #[test]
    fn one_key_is_the_scope_itself() {
        let keys = ScopeKeys::default();
        let id = ResourceId::new("r-1").unwrap();
        assert_eq!(keys.key_of(&scope("acct-1"), &id).unwrap(), scope("acct-1"));
        assert_eq!(keys.keys(&scope("acct-1")).unwrap(), vec![scope("acct-1")]);
        assert_eq!(keys.share(7, 0), 7);
    }

    #[test]
    fn keys_are_suffixed_and_the_index_is_stable() {
        let keys = ScopeKeys::new(64).unwrap();
        let id = ResourceId::new("r-1").unwrap();
        // Pinned: a change of hash would move every stored item.
        assert_eq!(keys.index(&id), 59);
        assert_eq!(keys.key_of(&scope("acct-1"), &id).unwrap(), scope("acct-1#59"));
        assert_eq!(keys.keys(&scope("a")).unwrap().len(), 64);
    }

    #[test]
    fn sequential_ids_spread_over_every_key() {
        let keys = ScopeKeys::new(64).unwrap();
        let mut per_key = [0u32; 64];
        for n in 0..64_000 {
            per_key[keys.index(&ResourceId::new(format!("item-{n:08}")).unwrap()) as usize] += 1;
        }
        let (min, max) = (per_key.iter().min().unwrap(), per_key.iter().max().unwrap());
        assert!(
            *min > 850 && *max < 1150,
            "sequential ids spread unevenly: {min}..{max} per key"
        );
    }

    #[test]
    fn a_scope_too_long_for_its_suffix_is_refused_with_the_reason() {
        let keys = ScopeKeys::new(8).unwrap();
        let long = scope(&"s".repeat(crate::ids::MAX_ID_BYTES));
        let err = keys.key_of(&long, &ResourceId::new("r").unwrap()).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput(ref m) if m.contains("cannot be spread over 8 keys")),
            "{err}"
        );
    }

    /// Review 1 (6): a 254-byte scope fits `#0`..`#9` but not `#10`: it is
    /// refused for every id, not for the ids that hash past key 9.
    #[test]
    fn a_scope_that_fits_some_keys_only_is_refused_for_every_key() {
        let keys = ScopeKeys::new(16).unwrap();
        let long = scope(&"s".repeat(crate::ids::MAX_ID_BYTES - 2));
        for index in 0..16 {
            assert!(keys.key(&long, index).is_err(), "key {index}");
        }
        assert!(keys.keys(&long).is_err());
        let fits = scope(&"s".repeat(crate::ids::MAX_ID_BYTES - 3));
        assert_eq!(keys.keys(&fits).unwrap().len(), 16);
    }

    /// Review 1 (5): with N > 1 no scope may hold `#`, so no partition of
    /// one scope is another scope's bare key.
    #[test]
    fn a_scope_with_a_hash_sign_is_refused_when_spread_and_kept_when_not() {
        let id = ResourceId::new("r").unwrap();
        let err = ScopeKeys::new(4).unwrap().key_of(&scope("a#3"), &id).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput(ref m) if m.contains("may not contain '#'")),
            "{err}"
        );
        assert_eq!(ScopeKeys::default().key_of(&scope("a#3"), &id).unwrap(), scope("a#3"));
    }

    #[test]
    fn a_key_splits_into_its_scope_and_index_only_when_this_layout_wrote_it() {
        let keys = ScopeKeys::new(8).unwrap();
        assert_eq!(keys.split("acct#3"), Some(("acct", 3)));
        assert_eq!(keys.split("a#b#7"), Some(("a#b", 7)));
        for other in ["acct", "acct#8", "acct#03", "acct#", "#3", "acct#x", "acct#+3"] {
            assert_eq!(keys.split(other), None, "{other}");
        }
        assert_eq!(ScopeKeys::default().split("acct#0"), None);
        for index in 0..8 {
            let key = keys.key(&scope("s"), index).unwrap();
            assert_eq!(keys.split(key.as_str()), Some(("s", index)));
        }
    }

    #[test]
    fn counts_outside_one_to_the_maximum_are_refused() {
        assert!(ScopeKeys::new(0).is_err());
        assert!(ScopeKeys::new(MAX_KEYS + 1).is_err());
        assert!(ScopeKeys::new(MAX_KEYS).is_ok());
    }

    proptest! {
        #[test]
        fn shares_add_up_to_the_limit_and_differ_by_at_most_one(limit in 0u64..1_000_000, count in 1u32..=MAX_KEYS) {
            let keys = ScopeKeys::new(count).unwrap();
            let shares: Vec<u64> = (0..count).map(|k| keys.share(limit, k)).collect();
            prop_assert_eq!(shares.iter().sum::<u64>(), limit);
            prop_assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
        }
    }
}
