//! What the requests share: attribute values, the two tables' keys, the
//! counter update, the resource state projection and what it reads back
//! as, and the error of a request that could not be built.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;

use hybrid_counter::EpochMillis;
use hybrid_counter::error::StoreError;
use hybrid_counter::ids::Scope;
use hybrid_counter::items::ResourceState;
use hybrid_counter::keys;
use hybrid_counter::store::ResourceKey;

pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub(crate) fn n(value: impl Into<i128>) -> AttributeValue {
    AttributeValue::N(value.into().to_string())
}

pub(super) fn resource_key(key: &ResourceKey) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (keys::SCOPE.to_owned(), s(key.scope.as_str())),
        (keys::ID.to_owned(), s(key.id.as_str())),
    ])
}

pub(crate) fn counter_key(scope: &Scope, name: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (keys::SCOPE.to_owned(), s(scope.as_str())),
        (keys::NAME.to_owned(), s(name)),
    ])
}

/// `ADD count :delta, version :one SET updated_at = :now` on a counter item.
pub(super) const COUNTER_UPDATE: &str = "ADD #count :delta, #version :one SET #updated_at = :now";

pub(super) fn counter_names() -> HashMap<String, String> {
    HashMap::from([
        ("#count".to_owned(), keys::COUNT.to_owned()),
        ("#version".to_owned(), keys::VERSION.to_owned()),
        ("#updated_at".to_owned(), keys::UPDATED_AT.to_owned()),
    ])
}

pub(super) fn counter_values(delta: i64, now: EpochMillis) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (":delta".to_owned(), n(delta)),
        (":one".to_owned(), n(1)),
        (":now".to_owned(), n(now)),
    ])
}

pub(super) fn build_error(err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("could not build request: {err}"))
}

/// The kit attributes a resource's state is read with (`ResourceRead::get_resource`,
/// `get_resources`, the audit's Scan), for a projection expression (with
/// [`state_names`]).
pub(super) const STATE_PROJECTION: &str = "#cp, #del, #inc, #shard";

/// The placeholders of [`STATE_PROJECTION`].
pub(super) fn state_names() -> HashMap<String, String> {
    HashMap::from([
        ("#cp".to_owned(), keys::COUNTER_PROCESSED.to_owned()),
        ("#del".to_owned(), keys::DELETED.to_owned()),
        ("#inc".to_owned(), keys::INCARNATION.to_owned()),
        ("#shard".to_owned(), keys::BE_SHARD.to_owned()),
    ])
}

/// A resource item's [`ResourceState`] with its key, for
/// [`StreamStore::get_resources`](hybrid_counter::store::StreamStore::get_resources).
#[derive(Deserialize)]
pub(super) struct KeyedStateImage {
    pub(super) scope: String,
    pub(super) id: String,
    #[serde(flatten)]
    pub(super) state: ResourceState,
}
