//! Limits as code: the per-scope limit overrides a team agreed on, kept in
//! a reviewed file, and compared with the counters table. `file` is the
//! YAML file and its checks, `diff` what the table's overrides would
//! become under it, `drift` that difference as an attention item. Both
//! `counterctl limits|status --limits` and the scheduled drift check use
//! them, so a file means the same thing to both. The table's side
//! ([`LimitTable`]) is read by the AWS layer's one Scan (`scan_limits`)
//! and, with a scope spread over several keys, folded back onto its
//! scopes ([`LimitTable::fold`]): one logical override per scope, stored
//! as a copy on each of its keys.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use crate::scope_keys::ScopeKeys;

#[cfg(feature = "limits-file")]
pub mod diff;
#[cfg(feature = "limits-file")]
pub mod drift;
#[cfg(feature = "limits-file")]
pub mod file;
#[cfg(test)]
mod fold_tests;

/// The largest limit an override may set: the stack's `DefaultLimit`
/// parameter's MaxValue, the most `limit set` accepts and a limits file
/// may say: one maximum, so every override can be exported to a file and
/// read back. Anything above is a typo, not a limit.
pub const MAX_LIMIT: u64 = 1_000_000_000;

/// One scope's override as read: its limit, the `version` and the write
/// token (`rev`) it was read at (`None`: written before tokens were).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LimitItem {
    pub limit: u64,
    #[serde(default)]
    pub version: u64,
    #[serde(default)]
    pub rev: Option<String>,
}

/// What one Scan of the counters table found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitTable {
    /// Every override, by scope. Folded ([`LimitTable::fold`]) with a
    /// scope over several keys: the largest of its copies' limits, at
    /// version 0 and no token (each copy's are in [`LimitTable::copies`]).
    pub overrides: BTreeMap<String, LimitItem>,
    /// Every scope with an item under one of the prefixes asked for.
    pub prefixed_scopes: BTreeSet<String>,
    /// The keys each scope is spread over (one: the scope itself).
    pub keys: ScopeKeys,
    /// Folded with N > 1 keys: each scope's copies of its override, by key
    /// index (a missing index: that key has none and reads the default).
    pub copies: BTreeMap<String, BTreeMap<u32, LimitItem>>,
    /// Folded with N > 1 keys: overrides on a partition that is no key of
    /// that layout (a bare scope, left from a smaller count): no create
    /// reads them.
    pub unread: BTreeMap<String, LimitItem>,
}

impl LimitTable {
    /// The table as scopes over `keys` partition keys see it: with N > 1,
    /// an override on partition `s#k` (`k` < N) is key `k`'s copy of scope
    /// `s`'s override (each create reads only its own key's copy), folded
    /// back onto `s`; `s` counts as overridden when any copy exists, and
    /// its copies are kept per key, so a copy missing or with another
    /// limit shows as a difference to repair. With one key, unchanged.
    pub fn fold(self, keys: ScopeKeys) -> Self {
        if !keys.is_suffixed() {
            return Self { keys, ..self };
        }
        let mut copies: BTreeMap<String, BTreeMap<u32, LimitItem>> = BTreeMap::new();
        let mut unread = BTreeMap::new();
        for (partition, item) in self.overrides {
            match keys.split(&partition) {
                Some((scope, index)) => {
                    copies.entry(scope.to_owned()).or_default().insert(index, item);
                }
                None => {
                    unread.insert(partition, item);
                }
            }
        }
        let overrides = copies
            .iter()
            .filter_map(|(scope, items)| {
                let limit = items.values().map(|i| i.limit).max()?;
                Some((
                    scope.clone(),
                    LimitItem {
                        limit,
                        version: 0,
                        rev: None,
                    },
                ))
            })
            .collect();
        let prefixed_scopes = self
            .prefixed_scopes
            .iter()
            .map(|p| keys.split(p).map_or(p.as_str(), |(scope, _)| scope).to_owned())
            .collect();
        Self {
            overrides,
            prefixed_scopes,
            keys,
            copies,
            unread,
        }
    }

    /// Whether `scope`'s copies all hold `limit` (`None`: none holds one).
    pub fn copies_hold(&self, scope: &str, limit: Option<u64>) -> bool {
        let copies = self.copies.get(scope);
        match limit {
            None => copies.is_none_or(BTreeMap::is_empty),
            Some(limit) => {
                copies.is_some_and(|c| c.len() == self.keys.count() as usize && c.values().all(|i| i.limit == limit))
            }
        }
    }
}
