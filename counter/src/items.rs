//! Typed items of both tables, mapped with serde_dynamo. Payload attributes
//! of a resource are the owner's and pass through untouched.

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
}

/// The kit's view of a resource item at one moment, as the stream consumer
/// needs it to decide a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceState {
    pub counter_processed: bool,
    pub deleted: bool,
    pub incarnation: String,
}

impl From<ResourceItem> for ResourceState {
    fn from(item: ResourceItem) -> Self {
        Self {
            counter_processed: item.counter_processed,
            deleted: item.deleted,
            incarnation: item.incarnation,
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

/// One item of the counters table (`best_effort`, `eventual`, `eventual#n`).
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
    /// Only on the `limit` item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// Everything the counters table holds for one scope, read in one Query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    pub best_effort: i64,
    /// Sum over `eventual` and every `eventual#n` shard.
    pub eventual: i64,
    /// Per-scope override of the default limit.
    pub limit_override: Option<u64>,
}

impl CounterSnapshot {
    /// Folds the counters-table items of one scope into a snapshot.
    pub fn from_items(items: impl IntoIterator<Item = CounterItem>) -> Self {
        let mut snap = Self::default();
        for item in items {
            match item.name.as_str() {
                crate::keys::BEST_EFFORT_NAME => snap.best_effort += item.count,
                crate::keys::LIMIT_NAME => snap.limit_override = item.limit,
                name if crate::keys::is_eventual_name(name) => snap.eventual += item.count,
                _ => {}
            }
        }
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(name: &str, count: i64) -> CounterItem {
        CounterItem {
            scope: "s".into(),
            name: name.into(),
            count,
            version: 1,
            updated_at: 0,
            limit: None,
        }
    }

    #[test]
    fn snapshot_sums_eventual_shards_and_reads_limit_override() {
        let mut limit = counter("limit", 0);
        limit.limit = Some(7);
        let snap = CounterSnapshot::from_items([
            counter("best_effort", 3),
            counter("eventual", 1),
            counter("eventual#0", 2),
            counter("eventual#3", 4),
            counter("unrelated", 100),
            limit,
        ]);
        assert_eq!(
            snap,
            CounterSnapshot {
                best_effort: 3,
                eventual: 7,
                limit_override: Some(7)
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
        };
        let av: serde_dynamo::Item = serde_dynamo::to_item(&item).unwrap();
        assert_eq!(av["counter_processed"], serde_dynamo::AttributeValue::Bool(false));
        assert_eq!(
            av["created_at"],
            serde_dynamo::AttributeValue::N("1700000000000".into())
        );
        let back: ResourceItem = serde_dynamo::from_item(av).unwrap();
        assert_eq!(back, item);
    }
}
