//! Typed items of both tables, mapped with serde_dynamo. Payload attributes
//! of a resource are the owner's and pass through untouched.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{ResourceId, Scope};
use crate::time::EpochMillis;

/// A resource item as the kit writes and reads it. Attributes the owner adds
/// are carried separately (see [`crate::request::Counter::create`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceItem {
    pub scope: Scope,
    pub id: ResourceId,
    pub counter_processed: bool,
    #[serde(default)]
    pub deleted: bool,
    pub incarnation: String,
    pub created_at: EpochMillis,
    /// The best-effort shard the create counted this item on
    /// ([`crate::keys::BE_SHARD`]); `None`: the unsharded `best_effort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub be_shard: Option<u32>,
}

/// The kit's view of a resource item at one moment, as the stream consumer
/// needs it to decide a delete; read from the item's kit attributes (the
/// flags absent: `false`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ResourceState {
    #[serde(default)]
    pub counter_processed: bool,
    #[serde(default)]
    pub deleted: bool,
    pub incarnation: String,
    /// Where a delete takes its `-1` from (see [`ResourceItem::be_shard`]).
    #[serde(default)]
    pub be_shard: Option<u32>,
}

impl From<ResourceItem> for ResourceState {
    fn from(item: ResourceItem) -> Self {
        Self {
            counter_processed: item.counter_processed,
            deleted: item.deleted,
            incarnation: item.incarnation,
            be_shard: item.be_shard,
        }
    }
}

/// A resource item as an audit reads it: its id, the kit's flags, and when
/// the request path last wrote it. Every kit attribute is optional here,
/// because the table may also hold items the kit did not write (no
/// `incarnation`): an audit reports those apart and never counts them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ItemRow {
    pub id: String,
    #[serde(default)]
    pub counter_processed: bool,
    #[serde(default)]
    pub deleted: bool,
    #[serde(default)]
    pub incarnation: Option<String>,
    #[serde(default)]
    pub created_at: Option<EpochMillis>,
    /// Set by the soft delete.
    #[serde(default)]
    pub deleted_at: Option<EpochMillis>,
    /// The best-effort shard the item's create counted on (`None`: the
    /// unsharded `best_effort`): a repair never lowers a shard below the
    /// live items recorded on it.
    #[serde(default)]
    pub be_shard: Option<u32>,
}

impl ItemRow {
    /// Whether the kit wrote this item (it carries an incarnation).
    pub fn is_kits(&self) -> bool {
        self.incarnation.is_some()
    }

    /// The last time the request path wrote this item (its create, or its
    /// soft delete), 0 when the item carries neither time.
    pub fn last_request_write(&self) -> EpochMillis {
        self.created_at.unwrap_or(0).max(self.deleted_at.unwrap_or(0))
    }
}

/// One item of the counters table (`best_effort`, `best_effort#n`,
/// `eventual`, `eventual#n`, `limit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterItem {
    pub scope: String,
    pub name: String,
    #[serde(default)]
    pub count: i64,
    #[serde(default)]
    pub version: i64,
    #[serde(default)]
    pub updated_at: EpochMillis,
    /// Only on best-effort items a strict raise fenced ([`crate::keys::EPOCH`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Only on the `limit` item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Only on the `limit` item: the token of its last write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
    /// Only on a `limit` item of a scope over several keys: this key's
    /// share of the limit ([`crate::shares`]), and the token of the write
    /// that assigned it (read only while it is the item's `rev`, so any
    /// later write of the limit alone, by an older `counterctl`, leaves
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_rev: Option<String>,
}

/// Everything the counters table holds for one scope, read in one Query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Sum over `best_effort` and every `best_effort#n` shard.
    pub best_effort: i64,
    /// Sum over `eventual` and every `eventual#n` shard.
    pub eventual: i64,
    /// Per-scope override of the default limit.
    pub limit_override: Option<u64>,
    /// This key's share of the override, when one was assigned for it
    /// ([`crate::shares`]).
    pub limit_share: Option<u64>,
    /// The `limit` item's `version` and write token, when there is one
    /// (what a limit write conditions on).
    pub limit_copy: Option<(i64, Option<String>)>,
    /// Each best-effort item read (`best_effort`, `best_effort#n`) and its
    /// count: what strict admission splits the limit over.
    pub best_effort_items: BTreeMap<String, i64>,
    /// The epoch of each best-effort item read that carries one
    /// ([`crate::best_effort::Layout::fences`]).
    pub best_effort_epochs: BTreeMap<String, u64>,
}

impl CounterSnapshot {
    /// Folds the counters-table items of one scope into a snapshot.
    pub fn from_items(items: impl IntoIterator<Item = CounterItem>) -> Self {
        let mut snap = Self::default();
        for item in items {
            if item.name == crate::keys::LIMIT_NAME {
                snap.limit_override = item.limit;
                snap.limit_copy = Some((item.version, item.rev.clone()));
                snap.limit_share = item
                    .share
                    .filter(|_| item.share_rev.is_some() && item.share_rev == item.rev);
            } else {
                snap.add(&item.name, item.count);
                if let Some(epoch) = item.epoch.filter(|_| crate::keys::is_best_effort_name(&item.name)) {
                    snap.best_effort_epochs.insert(item.name, epoch);
                }
            }
        }
        snap
    }

    /// Adds one counter item's count to the sum it belongs to (others are
    /// ignored).
    pub fn add(&mut self, name: &str, count: i64) {
        if crate::keys::is_best_effort_name(name) {
            self.best_effort += count;
            *self.best_effort_items.entry(name.to_owned()).or_default() += count;
        } else if crate::keys::is_eventual_name(name) {
            self.eventual += count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attributes a delete decision reads, by the names the kit writes
    /// them under ([`crate::keys`]): a renamed field would read its
    /// default from every item and fail here.
    #[test]
    fn a_resource_state_reads_the_kit_attributes_by_their_names() {
        use serde_dynamo::AttributeValue::{Bool, N, S};
        let item = |attributes: Vec<(&str, serde_dynamo::AttributeValue)>| -> serde_dynamo::Item {
            attributes
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<std::collections::HashMap<_, _>>()
                .into()
        };
        let full = item(vec![
            (crate::keys::COUNTER_PROCESSED, Bool(true)),
            (crate::keys::DELETED, Bool(true)),
            (crate::keys::INCARNATION, S("inc".into())),
            (crate::keys::BE_SHARD, N("3".into())),
            ("payload", S("ignored".into())),
        ]);
        let state: ResourceState = serde_dynamo::from_item(full).unwrap();
        let expected = ResourceState {
            counter_processed: true,
            deleted: true,
            incarnation: "inc".into(),
            be_shard: Some(3),
        };
        assert_eq!(state, expected);
        let bare: ResourceState =
            serde_dynamo::from_item(item(vec![(crate::keys::INCARNATION, S("inc".into()))])).unwrap();
        assert_eq!(
            bare,
            ResourceState {
                counter_processed: false,
                deleted: false,
                be_shard: None,
                ..expected
            }
        );
        let no_incarnation = item(vec![(crate::keys::DELETED, Bool(true))]);
        assert!(serde_dynamo::from_item::<_, ResourceState>(no_incarnation).is_err());
    }

    fn counter(name: &str, count: i64) -> CounterItem {
        CounterItem {
            scope: "s".into(),
            name: name.into(),
            count,
            version: 1,
            updated_at: 0,
            epoch: None,
            limit: None,
            share: None,
            rev: None,
            share_rev: None,
        }
    }

    /// A share is read only beside the write that assigned it: a later
    /// write of the limit alone (an older `counterctl`, whatever value)
    /// leaves the even split.
    #[test]
    fn a_share_is_read_only_beside_the_write_that_assigned_it() {
        let limit = |rev: &str, share_rev: &str| CounterItem {
            limit: Some(4),
            rev: Some(rev.into()),
            share: Some(3),
            share_rev: Some(share_rev.into()),
            ..counter("limit", 0)
        };
        assert_eq!(CounterSnapshot::from_items([limit("t1", "t1")]).limit_share, Some(3));
        assert_eq!(CounterSnapshot::from_items([limit("t2", "t1")]).limit_share, None);
        let unassigned = CounterItem {
            share: Some(3),
            ..counter("limit", 0)
        };
        assert_eq!(CounterSnapshot::from_items([unassigned]).limit_share, None);
    }

    #[test]
    fn snapshot_sums_both_counters_shards_and_reads_limit_override() {
        let mut limit = counter("limit", 0);
        limit.limit = Some(7);
        let snap = CounterSnapshot::from_items([
            counter("best_effort", 3),
            counter("best_effort#0", 5),
            counter("best_effort#2", -1),
            counter("best_effort#x", 50),
            counter("eventual", 1),
            counter("eventual#0", 2),
            counter("eventual#3", 4),
            counter("unrelated", 100),
            limit,
        ]);
        assert_eq!(
            snap,
            CounterSnapshot {
                best_effort: 7,
                eventual: 7,
                limit_override: Some(7),
                limit_share: None,
                limit_copy: Some((1, None)),
                best_effort_items: [("best_effort", 3), ("best_effort#0", 5), ("best_effort#2", -1)]
                    .into_iter()
                    .map(|(n, c)| (n.to_owned(), c))
                    .collect(),
                best_effort_epochs: BTreeMap::new(),
            }
        );
    }

    #[test]
    fn resource_item_round_trips_through_dynamodb_attribute_values() {
        let item = ResourceItem {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new("w1").unwrap(),
            counter_processed: false,
            deleted: false,
            incarnation: "inc".into(),
            created_at: 1_700_000_000_000,
            be_shard: None,
        };
        let av: serde_dynamo::Item = serde_dynamo::to_item(&item).unwrap();
        assert_eq!(av["counter_processed"], serde_dynamo::AttributeValue::Bool(false));
        assert_eq!(
            av["created_at"],
            serde_dynamo::AttributeValue::N("1700000000000".into())
        );
        assert!(!av.contains_key("be_shard"), "unsharded items carry no shard");
        let back: ResourceItem = serde_dynamo::from_item(av).unwrap();
        assert_eq!(back, item);
        let sharded = ResourceItem {
            be_shard: Some(3),
            ..item
        };
        let av: serde_dynamo::Item = serde_dynamo::to_item(&sharded).unwrap();
        assert_eq!(av["be_shard"], serde_dynamo::AttributeValue::N("3".into()));
        assert_eq!(serde_dynamo::from_item::<_, ResourceItem>(av).unwrap(), sharded);
    }
}
