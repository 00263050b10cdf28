//! `impl DriftStore for MemoryStore`: the drift check's Scans of the
//! counters table (its keys, its limit overrides) and its state item, each
//! a plain call that faults can be aimed at.

use super::MemoryStore;
use super::chaos::Op;
use crate::audit::drift::{CounterKey, DriftCheckState, DriftStore, ScanPage};
use crate::error::StoreError;
use crate::keys;
use crate::limits::{LimitItem, LimitTable};

impl DriftStore for MemoryStore {
    /// The counters table's keys in key order (the limit overrides are
    /// items of it too), `next` set when the page is full, as DynamoDB sets
    /// `LastEvaluatedKey` when a Scan stops at its `Limit`.
    async fn scan_counter_keys(&self, after: Option<&CounterKey>, limit: u32) -> Result<ScanPage, StoreError> {
        self.call(Op::ScanCounterKeys, &[], |t, _| {
            let mut all: std::collections::BTreeSet<(String, String)> = t.counters.keys().cloned().collect();
            all.extend(t.limits.keys().map(|s| (s.clone(), keys::LIMIT_NAME.to_owned())));
            // A scope's gapless sequence is items of its partition too.
            all.extend(t.sequences.keys().map(|s| (s.clone(), keys::SEQUENCE_NAME.to_owned())));
            all.extend(
                t.sequence_items
                    .keys()
                    .map(|(s, n)| (s.clone(), keys::sequence_item_name(*n))),
            );
            let start = after.map(|k| (k.scope.clone(), k.name.clone()));
            let limit = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
            let keys: Vec<CounterKey> = all
                .into_iter()
                .filter(|k| start.as_ref().is_none_or(|s| k > s))
                .take(limit)
                .map(|(scope, name)| CounterKey { scope, name })
                .collect();
            let next = (keys.len() == limit).then(|| keys.last().cloned()).flatten();
            Ok(ScanPage { keys, next })
        })
    }

    /// Every override with its version and write token (as the Query of
    /// its scope reads them), and the scopes with a counter under `prefixes`.
    async fn limit_overrides(&self, prefixes: &[String]) -> Result<LimitTable, StoreError> {
        self.call(Op::ScanLimits, &[], |t, _| {
            let under = |scope: &str| prefixes.iter().any(|p| scope.starts_with(p.as_str()));
            Ok(LimitTable {
                overrides: t
                    .limits
                    .iter()
                    .map(|(scope, limit)| {
                        let (version, rev) = t.limit_revs.get(scope).cloned().unwrap_or_default();
                        let item = LimitItem {
                            limit: *limit,
                            version: u64::try_from(version).unwrap_or(0),
                            rev: Some(rev),
                        };
                        (scope.clone(), item)
                    })
                    .collect(),
                prefixed_scopes: t
                    .counters
                    .keys()
                    .map(|(scope, _)| scope)
                    .chain(t.limits.keys())
                    .filter(|scope| under(scope))
                    .cloned()
                    .collect(),
                ..LimitTable::default()
            })
        })
    }

    async fn drift_state(&self) -> Result<Option<DriftCheckState>, StoreError> {
        self.call(Op::DriftState, &[], |t, _| Ok(t.drift_state.clone()))
    }

    async fn put_drift_state(&self, state: &DriftCheckState, read_version: Option<i64>) -> Result<bool, StoreError> {
        self.call(Op::DriftState, &[], |t, _| {
            if t.drift_state.as_ref().map(|s| s.version) != read_version {
                return Ok(false);
            }
            let mut stored = state.clone();
            stored.version = read_version.map_or(1, |v| v + 1);
            t.drift_state = Some(stored);
            Ok(true)
        })
    }
}
