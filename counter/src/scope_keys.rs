//! A scope spread over several partition keys. `ScopeKeyShards` (N)
//! counters keys `s#c`, each admitting up to its share of `s`'s limit; and
//! `ResourceKeySpread` (M) resources keys per counters key, `s#r` with
//! `r mod N = c`, that hold items and no state. `c` and `r` are stable
//! hashes of an item's id. With N = M = 1 every key is `s`, byte for byte;
//! otherwise every key is suffixed, `s` itself is never one.

use crate::error::Error;
use crate::ids::{ResourceId, Scope};

/// Most keys a stack may spread a scope over (the `ScopeKeyShards`
/// parameter's maximum): a limit override is a copy on every key, so a
/// `limit set` writes up to this many items.
pub const MAX_KEYS: u32 = 100;

/// Most resources keys per counters key (the `ResourceKeySpread`
/// parameter's maximum): an audit of one counters key reads this many
/// partitions of the resources table.
pub const MAX_SPREAD: u32 = 1_000;

/// How many partition keys each scope is spread over: `count` counters
/// keys, and `spread` resources keys for each of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeKeys {
    count: u32,
    spread: u32,
}

impl Default for ScopeKeys {
    fn default() -> Self {
        Self::ONE
    }
}

impl ScopeKeys {
    /// One key per scope: the scope itself.
    pub const ONE: Self = Self { count: 1, spread: 1 };

    /// `count` keys per scope, from 1 to [`MAX_KEYS`].
    pub fn new(count: u32) -> Result<Self, Error> {
        if (1..=MAX_KEYS).contains(&count) {
            Ok(Self { count, spread: 1 })
        } else {
            Err(Error::InvalidInput(format!(
                "a scope is spread over 1 to {MAX_KEYS} keys, not {count}"
            )))
        }
    }

    /// `spread` resources keys per counters key, from 1 to [`MAX_SPREAD`].
    pub fn with_spread(self, spread: u32) -> Result<Self, Error> {
        if (1..=MAX_SPREAD).contains(&spread) {
            Ok(Self { spread, ..self })
        } else {
            Err(Error::InvalidInput(format!(
                "a counters key is spread over 1 to {MAX_SPREAD} resources keys, not {spread}"
            )))
        }
    }

    /// Counters keys per scope.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Resources keys per counters key.
    pub fn spread(&self) -> u32 {
        self.spread
    }

    /// Resources keys per scope.
    pub fn resource_key_count(&self) -> u32 {
        self.count * self.spread
    }

    /// Whether a scope's keys are suffixed (`s#k`): any layout but one key
    /// per level, whose only key is the scope itself. With N = 1 and M > 1
    /// the counters key is `s#0`, so no key of the layout is the bare scope
    /// (where sequences live, and where an item of another layout would).
    pub fn is_suffixed(&self) -> bool {
        self.resource_key_count() > 1
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

    /// Which of the scope's resources keys `id` lives under: its counters
    /// key's index plus N times a second digit of the same hash, so the
    /// resources key `r` belongs to counters key `r mod N`.
    pub fn resource_index(&self, id: &ResourceId) -> u32 {
        let hash = crate::hash::fnv1a(id.as_str().as_bytes());
        let (count, spread) = (u64::from(self.count), u64::from(self.spread));
        (hash % count + count * ((hash / count) % spread)) as u32
    }

    /// The resources-table partition key of `id` in `scope` (its counters
    /// key when the spread is 1).
    pub fn resource_key_of(&self, scope: &Scope, id: &ResourceId) -> Result<Scope, Error> {
        if self.spread == 1 {
            return self.key_of(scope, id);
        }
        self.check(scope)?;
        Ok(suffixed(scope, self.resource_index(id)))
    }

    /// The counters key whose counters count the items under the resources
    /// key `resource_key` (itself when the spread is 1, and for a key this
    /// layout did not write: the stream counts such an item on its own
    /// partition, as with one key, and the audit reports it there).
    pub fn counters_key_of(&self, resource_key: &Scope) -> Scope {
        if self.spread == 1 {
            return resource_key.clone();
        }
        match self.split_resource_key(resource_key.as_str()) {
            Some((scope, index)) => Scope::new(scope)
                .map_err(|e| Error::InvalidInput(e.to_string()))
                .and_then(|scope| self.key(&scope, index % self.count))
                .unwrap_or_else(|_| resource_key.clone()),
            None => resource_key.clone(),
        }
    }

    /// The resources keys whose items counters key `counters_key` counts,
    /// in index order (itself alone when the spread is 1).
    pub fn resource_keys_of(&self, counters_key: &Scope) -> Vec<Scope> {
        if self.spread == 1 {
            return vec![counters_key.clone()];
        }
        let Some((scope, index)) = self.split(counters_key.as_str()) else {
            return vec![counters_key.clone()];
        };
        let Ok(scope) = Scope::new(scope) else {
            return vec![counters_key.clone()];
        };
        if self.check(&scope).is_err() {
            return vec![counters_key.clone()];
        }
        (0..self.spread)
            .map(|j| suffixed(&scope, index + self.count * j))
            .collect()
    }

    /// The scope and resources index of a resources key this layout wrote
    /// (`s#r`, `r` below N x M); `None` otherwise and with one key.
    pub fn split_resource_key<'a>(&self, key: &'a str) -> Option<(&'a str, u32)> {
        self.is_suffixed()
            .then(|| split_below(key, self.resource_key_count()))
            .flatten()
    }

    /// Refuses `scope` when any of its keys cannot be written: a `#` in a
    /// spread scope, or a scope too long for its longest key.
    fn check(&self, scope: &Scope) -> Result<(), Error> {
        let total = self.resource_key_count();
        let refused =
            |why: String| Error::InvalidInput(format!("scope {scope:?} cannot be spread over {} keys: {why}", total));
        if scope.as_str().contains('#') {
            return Err(refused(
                "a scope may not contain '#' on a stack whose scopes are spread over keys".into(),
            ));
        }
        // The longest key decides, so a scope is valid for every id or none.
        Scope::new(format!("{scope}#{}", total - 1)).map_err(|err| refused(err.to_string()))?;
        Ok(())
    }

    /// Key `index` of `scope` (`scope` itself when the scope has one key).
    /// Refused for every index alike when the scope is too long for its
    /// longest key, or holds `#` (with N > 1 every partition key of the
    /// tables is `s#k`, `k` the digits after the last `#`; a scope with a
    /// `#` of its own would share a bare partition, its sequences', with
    /// another scope's key).
    pub fn key(&self, scope: &Scope, index: u32) -> Result<Scope, Error> {
        if self.resource_key_count() == 1 {
            return Ok(scope.clone());
        }
        self.check(scope)?;
        Ok(suffixed(scope, index))
    }

    /// Every resources key of `scope`, grouped by counters key.
    pub fn resource_keys(&self, scope: &Scope) -> Result<Vec<Scope>, Error> {
        Ok(self
            .keys(scope)?
            .iter()
            .flat_map(|key| self.resource_keys_of(key))
            .collect())
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
        self.is_suffixed().then(|| split_below(key, self.count)).flatten()
    }

    /// Key `index`'s share of a scope limit of `limit`: the limit divided
    /// as evenly as integers allow (the first `limit % N` keys get one
    /// more), so the shares add up to the limit exactly and a scope never
    /// holds more than its limit when no key holds more than its share.
    /// An override assigns each key its own instead ([`crate::shares`]).
    pub fn share(&self, limit: u64, index: u32) -> u64 {
        let count = u64::from(self.count);
        limit / count + u64::from(u64::from(index) < limit % count)
    }
}

/// `scope#index`.
fn suffixed(scope: &Scope, index: u32) -> Scope {
    Scope::new(format!("{scope}#{index}")).expect("checked against the longest key")
}

/// `s#k` with `k` written as [`suffixed`] writes it and below `count`.
fn split_below(key: &str, count: u32) -> Option<(&str, u32)> {
    let (scope, suffix) = key.rsplit_once('#')?;
    let index = suffix.parse::<u32>().ok()?;
    (!scope.is_empty() && index < count && index.to_string() == suffix).then_some((scope, index))
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

    #[test]
    fn a_resources_key_maps_to_the_counters_key_of_its_id() {
        for (count, spread) in [(1, 1), (4, 1), (1, 8), (4, 8), (7, 3)] {
            let keys = ScopeKeys::new(count).unwrap().with_spread(spread).unwrap();
            let s = scope("acct");
            let mut reached = std::collections::BTreeSet::new();
            for n in 0..2_000 {
                let id = ResourceId::new(format!("item-{n}")).unwrap();
                let resource = keys.resource_key_of(&s, &id).unwrap();
                let counters = keys.key_of(&s, &id).unwrap();
                assert_eq!(keys.counters_key_of(&resource), counters, "N={count} M={spread} {id:?}");
                assert!(
                    keys.resource_keys_of(&counters).contains(&resource),
                    "N={count} M={spread}"
                );
                reached.insert(resource);
            }
            assert_eq!(reached.len() as u32, keys.resource_key_count(), "N={count} M={spread}");
            // The counters keys' resources keys partition the scope's resources keys.
            let mut all: Vec<Scope> = keys
                .keys(&s)
                .unwrap()
                .iter()
                .flat_map(|k| keys.resource_keys_of(k))
                .collect();
            all.sort();
            let mut expected: Vec<Scope> = reached.into_iter().collect();
            expected.sort();
            assert_eq!(all, expected, "N={count} M={spread}");
        }
    }

    #[test]
    fn a_spread_of_one_is_the_single_level_layout_byte_for_byte() {
        let keys = ScopeKeys::new(64).unwrap();
        let id = ResourceId::new("r-1").unwrap();
        assert_eq!(keys.with_spread(1).unwrap(), keys);
        assert_eq!(keys.resource_key_of(&scope("acct-1"), &id).unwrap(), scope("acct-1#59"));
        assert_eq!(keys.resource_keys_of(&scope("acct-1#59")), vec![scope("acct-1#59")]);
        // Pinned: a change of hash would move every stored item.
        let two = ScopeKeys::new(4).unwrap().with_spread(8).unwrap();
        assert_eq!(two.resource_index(&id), 27);
        assert_eq!(two.resource_key_of(&scope("acct-1"), &id).unwrap(), scope("acct-1#27"));
        assert_eq!(two.key_of(&scope("acct-1"), &id).unwrap(), scope("acct-1#3"));
    }

    #[test]
    fn a_spread_scope_refuses_a_hash_sign_and_a_scope_too_long_for_its_longest_resources_key() {
        let id = ResourceId::new("r").unwrap();
        let keys = ScopeKeys::default().with_spread(16).unwrap();
        assert!(keys.key_of(&scope("a#3"), &id).is_err());
        assert!(keys.resource_key_of(&scope("a#3"), &id).is_err());
        // The counters key of N = 1 is `s#0`, never the bare scope: an item
        // under the bare scope (another layout's) is counted and audited there.
        assert_eq!(keys.key_of(&scope("a"), &id).unwrap(), scope("a#0"));
        assert_eq!(keys.resource_keys_of(&scope("a#0")).len(), 16);
        assert_eq!(keys.resource_keys_of(&scope("a")), vec![scope("a")]);
        assert_eq!(keys.counters_key_of(&scope("a")), scope("a"));
        // A key whose prefix is no scope (leading or trailing space) is its
        // own, never a panic (review 1).
        assert_eq!(keys.counters_key_of(&scope("x #3")), scope("x #3"));
        let long = scope(&"s".repeat(crate::ids::MAX_ID_BYTES - 2));
        assert!(keys.key_of(&long, &id).is_err(), "#15 does not fit, so no key does");
        assert!(ScopeKeys::default().with_spread(0).is_err());
        assert!(ScopeKeys::default().with_spread(MAX_SPREAD + 1).is_err());
        // A key this layout did not write is counted where it is.
        assert_eq!(keys.counters_key_of(&scope("a#99")), scope("a#99"));
        assert_eq!(keys.counters_key_of(&scope("plain")), scope("plain"));
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
