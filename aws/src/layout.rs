//! The layout record on [`DynamoStore`] ([`LayoutStore`]): one item in the
//! counters table's reserved partition [`keys::LAYOUT_SCOPE`], written once
//! with `attribute_not_exists` and read with a consistent `GetItem`.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use hybrid_counter::error::StoreError;
use hybrid_counter::keys;
use hybrid_counter::layout::LayoutStore;
use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter::time::EpochMillis;

use crate::DynamoStore;

fn record_key() -> HashMap<String, AttributeValue> {
    HashMap::from([
        (keys::SCOPE.to_owned(), AttributeValue::S(keys::LAYOUT_SCOPE.to_owned())),
        (keys::NAME.to_owned(), AttributeValue::S(keys::LAYOUT_NAME.to_owned())),
    ])
}

/// The layout an item records.
fn parse(item: &HashMap<String, AttributeValue>) -> Result<ScopeKeys, StoreError> {
    let count = |name: &str| match item.get(name) {
        Some(AttributeValue::N(n)) => n
            .parse::<u32>()
            .map_err(|e| StoreError::Malformed(format!("layout record {name} {n:?}: {e}"))),
        _ => Err(StoreError::Malformed(format!("layout record without a number {name}"))),
    };
    let (shards, spread) = (count(keys::LAYOUT_KEYS)?, count(keys::LAYOUT_SPREAD)?);
    ScopeKeys::new(shards)
        .and_then(|k| k.with_spread(spread))
        .map_err(|e| StoreError::Malformed(format!("layout record: {e}")))
}

impl LayoutStore for DynamoStore {
    async fn layout_record(&self) -> Result<Option<ScopeKeys>, StoreError> {
        let out = self
            .client()
            .get_item()
            .table_name(self.counters_table())
            .set_key(Some(record_key()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        out.item.as_ref().map(parse).transpose()
    }

    async fn record_layout(&self, layout: ScopeKeys, now: EpochMillis) -> Result<(), StoreError> {
        let mut item = record_key();
        item.insert(
            keys::LAYOUT_KEYS.to_owned(),
            AttributeValue::N(layout.count().to_string()),
        );
        item.insert(
            keys::LAYOUT_SPREAD.to_owned(),
            AttributeValue::N(layout.spread().to_string()),
        );
        item.insert(keys::UPDATED_AT.to_owned(), AttributeValue::N(now.to_string()));
        self.client()
            .put_item()
            .table_name(self.counters_table())
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#scope)")
            .expression_attribute_names("#scope", keys::SCOPE)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.classify(e))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_smithy_mocks::mock;

    use super::*;

    #[tokio::test]
    async fn the_record_is_read_consistently_and_created_only_where_none_is() {
        let read = mock!(Client::get_item)
            .match_requests(|r| r.consistent_read() == Some(true) && r.key() == Some(&record_key()))
            .then_output(|| {
                let mut item = record_key();
                item.insert(keys::LAYOUT_KEYS.to_owned(), AttributeValue::N("4".into()));
                item.insert(keys::LAYOUT_SPREAD.to_owned(), AttributeValue::N("8".into()));
                GetItemOutput::builder().set_item(Some(item)).build()
            });
        let write = mock!(Client::put_item)
            .match_requests(|r| {
                r.condition_expression() == Some("attribute_not_exists(#scope)")
                    && r.item().and_then(|i| i.get(keys::LAYOUT_SPREAD)) == Some(&AttributeValue::N("2".into()))
            })
            .then_output(|| aws_sdk_dynamodb::operation::put_item::PutItemOutput::builder().build());
        let store = crate::test_util::mock_store(&[read, write]);
        let recorded = store.layout_record().await.unwrap().unwrap();
        assert_eq!((recorded.count(), recorded.spread()), (4, 8));
        let layout = ScopeKeys::new(2).unwrap().with_spread(2).unwrap();
        store.record_layout(layout, 1).await.unwrap();
    }
}
