//! The lab's table layout, in one place: a partition key `pk` (the
//! counter, or a marker of one change) and a sort key `sk` (the counter
//! item, or one ledger entry). Every strategy but the hybrid (which runs on
//! the kit's own tables) keeps its counter here, under a partition key of
//! its own.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnConsumedCapacity,
    ScalarAttributeType, TimeToLiveSpecification,
};
use hybrid_counter::error::StoreError;
use hybrid_counter::store::meter::Meter;
use hybrid_counter_aws::dynamo::classify;

use crate::strategy::{Place, charge_read};

pub const PK: &str = "pk";
pub const SK: &str = "sk";
/// The sort key of a counter's own item.
pub const COUNTER_SK: &str = "counter";
/// The counter's value (a number).
pub const VALUE: &str = "n";
/// OCC's version.
pub const VERSION: &str = "version";
/// OCC's entity tag (the blog's `entityTag`): random per change.
pub const ENTITY_TAG: &str = "entityTag";
/// OCC with history: the last writers' tokens, oldest first.
pub const WRITERS: &str = "writers";
/// The token set.
pub const TOKENS: &str = "tokens";
/// A ledger entry's change.
pub const DELTA: &str = "delta";
/// The TTL attribute (epoch seconds) of the markers.
pub const EXPIRES_AT: &str = "expires_at";

pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub fn key(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))])
}

/// The values of `ADD #n :delta` and its condition: none, or for a +1
/// under `threshold` that the value is still below it (`:limit`).
pub fn add_below(delta: i64, threshold: Option<i64>) -> (HashMap<String, AttributeValue>, Option<String>) {
    let mut values = HashMap::from([(":delta".to_owned(), n(delta))]);
    let condition = match threshold {
        Some(limit) if delta > 0 => {
            values.insert(":limit".to_owned(), n(limit));
            Some("attribute_not_exists(#n) OR #n < :limit".to_owned())
        }
        _ => None,
    };
    (values, condition)
}

/// The number attribute `name` of `item`, 0 when absent.
pub fn number(item: Option<&HashMap<String, AttributeValue>>, name: &str) -> i64 {
    item.and_then(|item| item.get(name))
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The counter item of `place`, read strongly consistent (`None`: not
/// written yet).
pub async fn counter_item(place: &Place, meter: &Meter) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
    read_counter_item(place, meter, true).await
}

/// [`counter_item`], read strongly consistent or not (`consistent`).
pub async fn read_counter_item(
    place: &Place,
    meter: &Meter,
    consistent: bool,
) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
    let out = place
        .client
        .get_item()
        .table_name(&place.table)
        .set_key(Some(key(&place.counter, COUNTER_SK)))
        .consistent_read(consistent)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .map_err(classify)?;
    charge_read(meter, out.consumed_capacity());
    Ok(out.item)
}

/// The counter's [`VALUE`] (0 before its first write).
pub async fn value(place: &Place, meter: &Meter) -> Result<i64, StoreError> {
    let item = counter_item(place, meter).await?;
    Ok(number(item.as_ref(), VALUE))
}

/// Creates the lab's table `name` (on demand, TTL on [`EXPIRES_AT`]).
pub async fn create_table(client: &Client, name: &str) -> Result<(), StoreError> {
    let attribute = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("attribute definition")
    };
    let element = |name: &str, key_type| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(key_type)
            .build()
            .expect("key element")
    };
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute(PK))
        .attribute_definitions(attribute(SK))
        .key_schema(element(PK, KeyType::Hash))
        .key_schema(element(SK, KeyType::Range))
        .send()
        .await
        .map_err(classify)?;
    client
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(EXPIRES_AT)
                .build()
                .expect("ttl specification"),
        )
        .send()
        .await
        .map_err(classify)?;
    Ok(())
}
