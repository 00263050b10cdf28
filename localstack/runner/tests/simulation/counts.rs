//! What the tables say under the schedule's scope-key layout, mapped by the
//! library's own [`ScopeKeys`]: per counters key its items over its
//! resources keys by state, its counters summed over their shards and the
//! live items recorded on each best-effort shard; per scope the sums over
//! its keys; what strict admission bounds (each key's share, the scope's
//! limit); and any item under a partition other than its resources key.

use std::collections::{BTreeMap, BTreeSet};

use hybrid_counter::audit::ScopeCounts;
use hybrid_counter::keys;
use hybrid_counter::memory::Tables;
use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter::{ResourceId, Scope};

/// One counters key of a scope, or a partition that is no key of the
/// layout (counted on its own, `index` `None`).
#[derive(Debug, Default, Clone)]
pub(crate) struct KeyCount {
    /// The counters-table partition key.
    pub(crate) key: String,
    pub(crate) scope: String,
    /// Its index among the scope's counters keys.
    pub(crate) index: Option<u32>,
    /// The kit's items under the key's resources keys, by state.
    pub(crate) counts: ScopeCounts,
    pub(crate) be: i64,
    pub(crate) ec: i64,
    /// Live items per best-effort shard name they were recorded on.
    pub(crate) recorded: BTreeMap<String, i64>,
}

impl KeyCount {
    fn merge(&mut self, other: &KeyCount) {
        self.counts.merge(&other.counts);
        self.be += other.be;
        self.ec += other.ec;
        for (name, n) in &other.recorded {
            *self.recorded.entry(name.clone()).or_default() += n;
        }
    }

    /// The key, and whose key it is when the scope has several.
    pub(crate) fn name(&self) -> String {
        match self.index {
            Some(index) if self.key != self.scope => format!("{} (counters key {index} of {})", self.key, self.scope),
            _ => self.key.clone(),
        }
    }
}

/// The scope a partition of the layout belongs to (itself with one key).
fn scope_of(layout: ScopeKeys, partition: &str) -> &str {
    layout
        .split_resource_key(partition)
        .map_or(partition, |(scope, _)| scope)
}

/// Every counters key of every scope the tables hold, in order: a scope's
/// keys are [`ScopeKeys::keys`], each counting the items under its
/// [`ScopeKeys::resource_keys_of`]; a partition none of them covers comes
/// last, on its own.
pub(crate) fn key_counts(tables: &Tables, layout: ScopeKeys) -> Vec<KeyCount> {
    let mut items: BTreeMap<&str, KeyCount> = BTreeMap::new();
    for ((partition, _), r) in &tables.resources {
        let part = items.entry(partition).or_default();
        if r.is_kits() {
            part.counts.add(r.state.counter_processed, r.state.deleted);
            if !r.state.deleted {
                *part
                    .recorded
                    .entry(keys::best_effort_name(r.state.be_shard))
                    .or_default() += 1;
            }
        }
    }
    let mut counters: BTreeMap<&str, KeyCount> = BTreeMap::new();
    for ((partition, name), count) in &tables.counters {
        let part = counters.entry(partition).or_default();
        if keys::is_best_effort_name(name) {
            part.be += count;
        } else if keys::is_eventual_name(name) {
            part.ec += count;
        }
    }
    let scopes: BTreeSet<&str> = items
        .keys()
        .chain(counters.keys())
        .map(|p| scope_of(layout, p))
        .collect();
    let mut out = Vec::new();
    for scope in scopes {
        let Some(keys_of_scope) = Scope::new(scope).ok().and_then(|s| layout.keys(&s).ok()) else {
            continue;
        };
        for (index, key) in keys_of_scope.iter().enumerate() {
            let mut unit = KeyCount {
                key: key.to_string(),
                scope: scope.to_owned(),
                index: Some(index as u32),
                ..KeyCount::default()
            };
            if let Some(part) = counters.remove(key.as_str()) {
                unit.merge(&part);
            }
            for resource_key in layout.resource_keys_of(key) {
                if let Some(part) = items.remove(resource_key.as_str()) {
                    unit.merge(&part);
                }
            }
            out.push(unit);
        }
    }
    let mut rest: BTreeMap<&str, KeyCount> = BTreeMap::new();
    for (partition, part) in items.into_iter().chain(counters) {
        let unit = rest.entry(partition).or_insert_with(|| KeyCount {
            key: partition.to_owned(),
            scope: partition.to_owned(),
            ..KeyCount::default()
        });
        unit.merge(&part);
    }
    out.extend(rest.into_values());
    out
}

/// A scope's sums over its keys.
pub(crate) fn scope_count(units: &[KeyCount], scope: &str) -> KeyCount {
    let mut total = KeyCount {
        key: scope.to_owned(),
        scope: scope.to_owned(),
        ..KeyCount::default()
    };
    for unit in units.iter().filter(|u| u.scope == scope) {
        total.merge(unit);
    }
    total
}

pub(crate) fn live_count(tables: &Tables, layout: ScopeKeys, scope: &str) -> u64 {
    scope_count(&key_counts(tables, layout), scope).counts.live
}

/// The limit partition `key` reads: its override copy, or the default.
pub(crate) fn limit_on(tables: &Tables, key: &str, default_limit: u64) -> u64 {
    tables.limits.get(key).copied().unwrap_or(default_limit)
}

/// Key `index`'s part of its scope's limit as admission reads it on
/// partition `key`: the share `limit set` assigned beside its override
/// copy, else the even split of the limit it reads.
pub(crate) fn share_on(tables: &Tables, layout: ScopeKeys, key: &str, index: u32, default_limit: u64) -> u64 {
    match (tables.limits.contains_key(key), tables.limit_shares.get(key)) {
        (true, Some(&share)) => share,
        _ => layout.share(limit_on(tables, key, default_limit), index),
    }
}

/// What strict admission bounds: a scope (`index` `None`), whose keys
/// admit together up to the sum of their shares, each of the limit copy
/// it reads (the limit when the copies agree); and, with several counters
/// keys, each key on its own, up to its share ([`share_on`]).
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    pub(crate) name: String,
    pub(crate) scope: String,
    pub(crate) index: Option<u32>,
    pub(crate) live: u64,
    pub(crate) limit: u64,
}

pub(crate) fn bounds(tables: &Tables, layout: ScopeKeys, default_limit: u64) -> Vec<Bound> {
    bounds_of(&key_counts(tables, layout), tables, layout, default_limit)
}

/// [`bounds`] of the counters keys `units` of `tables`.
pub(crate) fn bounds_of(units: &[KeyCount], tables: &Tables, layout: ScopeKeys, default_limit: u64) -> Vec<Bound> {
    let mut scopes: BTreeMap<&str, Bound> = BTreeMap::new();
    let mut out = Vec::new();
    for unit in units {
        let share = unit
            .index
            .map_or(0, |index| share_on(tables, layout, &unit.key, index, default_limit));
        let scope = scopes.entry(&unit.scope).or_insert_with(|| Bound {
            name: unit.scope.clone(),
            scope: unit.scope.clone(),
            index: None,
            live: 0,
            limit: 0,
        });
        // The scope's own bound is its limit (the larger copy's when they
        // disagree), not the sum of the shares the code under test wrote.
        scope.live += unit.counts.live;
        scope.limit = scope.limit.max(limit_on(tables, &unit.key, default_limit));
        if layout.count() > 1 && unit.index.is_some() {
            out.push(Bound {
                name: unit.name(),
                scope: unit.scope.clone(),
                index: unit.index,
                live: unit.counts.live,
                limit: share,
            });
        }
    }
    out.extend(scopes.into_values());
    out
}

/// The first scope whose keys' assigned shares add up to more than the
/// limit all its copies hold (a limit write's first transaction leaves them
/// below it, its second at it).
pub(crate) fn shares_above_limit(tables: &Tables, layout: ScopeKeys, scopes: &[Scope]) -> Option<String> {
    scopes.iter().find_map(|scope| {
        let keys = layout.keys(scope).ok()?;
        let limits: Vec<Option<&u64>> = keys.iter().map(|k| tables.limits.get(k.as_str())).collect();
        let shares: Option<Vec<u64>> = keys
            .iter()
            .map(|k| tables.limit_shares.get(k.as_str()).copied())
            .collect();
        let limit = *limits[0]?;
        let sum: u64 = shares?.iter().sum();
        (layout.count() > 1 && limits.iter().all(|l| *l == Some(&limit)) && sum > limit)
            .then(|| format!("{scope}: its keys' shares add up to {sum}, above its limit {limit}"))
    })
}

/// The first of the kit's items that is not under its resources key
/// ([`ScopeKeys::resource_key_of`] of its scope and id).
pub(crate) fn misplaced(tables: &Tables, layout: ScopeKeys) -> Option<String> {
    tables
        .resources
        .iter()
        .filter(|(_, r)| r.is_kits())
        .find_map(|((partition, id), _)| {
            let scope = scope_of(layout, partition);
            let expected = Scope::new(scope)
                .ok()
                .zip(ResourceId::new(id.as_str()).ok())
                .and_then(|(scope, id)| layout.resource_key_of(&scope, &id).ok());
            (expected.as_ref().map(Scope::as_str) != Some(partition.as_str())).then(|| {
                let expected = expected.map_or_else(|| "(none: refused)".to_owned(), |key| key.to_string());
                format!("item {id} of {scope} lies under {partition}, not under its resources key {expected}")
            })
        })
}
