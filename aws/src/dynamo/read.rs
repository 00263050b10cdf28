//! The store's strongly consistent `GetItem`, of any item or of a
//! counters-table item; the tests of the reads `store.rs` sends: a chunk's
//! resource states (`BatchGetItem`, unprocessed keys asked again) and a
//! scope's counter items (`Query`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};

use hybrid_counter::error::StoreError;
use hybrid_counter::ids::Scope;
use hybrid_counter::store::meter::Operation;

use super::attributes::counter_key;
use super::store::DynamoStore;

impl DynamoStore {
    /// Strongly consistent `GetItem` of `key` in `table`, projected to
    /// `projection` (placeholders bound by `names`), deserialized as `T`;
    /// `what` names the item in a malformed-item error.
    pub(super) async fn get_consistent<T: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        key: HashMap<String, AttributeValue>,
        projection: &str,
        names: HashMap<String, String>,
        what: impl FnOnce() -> String,
    ) -> Result<Option<T>, StoreError> {
        self.meter.request(Operation::GetItem);
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .projection_expression(projection)
            .set_expression_attribute_names(Some(names))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| self.classify(e))
            .inspect_err(|_| self.meter.failed())?;
        self.consumed_read(out.consumed_capacity.as_ref());
        out.item
            .map(|item| serde_dynamo::from_item(item).map_err(|e| StoreError::Malformed(format!("{}: {e}", what()))))
            .transpose()
    }

    /// [`Self::get_consistent`] of counters-table item `name` of `scope`.
    pub(crate) async fn get_counters_item<T: serde::de::DeserializeOwned>(
        &self,
        scope: &Scope,
        name: &str,
        projection: &str,
        names: &[(&str, &str)],
    ) -> Result<Option<T>, StoreError> {
        let names = names.iter().map(|(p, n)| ((*p).to_owned(), (*n).to_owned())).collect();
        self.get_consistent(
            &self.counters_table,
            counter_key(scope, name),
            projection,
            names,
            || format!("counters item {scope}/{name}"),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_smithy_mocks::{Rule, mock};
    use hybrid_counter::ids::ResourceId;
    use hybrid_counter::store::meter::Meter;
    use hybrid_counter::store::{AuditStore, ResourceRead, StreamStore};

    use aws_sdk_dynamodb::types::KeysAndAttributes;
    use hybrid_counter::keys;
    use hybrid_counter::store::ResourceKey;

    use super::*;
    use crate::dynamo::attributes::{resource_key, s};
    use crate::dynamo::retry::UNPROCESSED_KEYS_BACKOFF;
    use crate::dynamo::test_support::{counter_item, key, scope, store};

    /// A `BatchGetItem` answer for the resources table: `found` as items
    /// (live, incarnation `inc-<id>`), `left` as unprocessed keys.
    fn batch_answer(found: &[&str], left: &[&str]) -> aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput {
        use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
        let key_of = |id: &str| ResourceKey {
            scope: scope(),
            id: ResourceId::new(id).unwrap(),
        };
        let items = found
            .iter()
            .map(|id| {
                let mut item = resource_key(&key_of(id));
                item.insert(keys::INCARNATION.to_owned(), s(format!("inc-{id}")));
                item
            })
            .collect();
        let mut out = BatchGetItemOutput::builder().responses("resources", items);
        if !left.is_empty() {
            let keys = KeysAndAttributes::builder()
                .set_keys(Some(left.iter().map(|id| resource_key(&key_of(id))).collect()))
                .build()
                .unwrap();
            out = out.unprocessed_keys("resources", keys);
        }
        out.build()
    }

    fn resource_keys(ids: &[&str]) -> Vec<ResourceKey> {
        ids.iter()
            .map(|id| ResourceKey {
                scope: scope(),
                id: ResourceId::new(*id).unwrap(),
            })
            .collect()
    }

    /// DynamoDB may answer part of a `BatchGetItem` and return the rest as
    /// `UnprocessedKeys` (throttling, the 16 MB answer limit: "If you
    /// request more than 100 items, or the response exceeds 16 MB, or
    /// there is not enough provisioned throughput, BatchGetItem returns a
    /// partial result", BatchGetItem, DynamoDB API Reference). The store
    /// asks again for exactly those keys and answers in the order asked;
    /// a key left unprocessed is never reported as an absent item.
    #[tokio::test(start_paused = true)]
    async fn get_resources_asks_again_for_unprocessed_keys_and_keeps_the_order() {
        let first = mock!(Client::batch_get_item)
            .match_requests(|r| {
                r.request_items()
                    .and_then(|i| i.get("resources"))
                    .map(|k| k.keys().len())
                    == Some(3)
            })
            .then_output(|| batch_answer(&["c"], &["a", "b"]));
        // DynamoDB's `UnprocessedKeys` echo the request's parameters; the
        // mock returns the keys only, and the retry is still consistent.
        let second = mock!(Client::batch_get_item)
            .match_requests(|r| {
                r.request_items()
                    .and_then(|i| i.get("resources"))
                    .is_some_and(|k| k.keys().len() == 2 && k.consistent_read() == Some(true))
            })
            .then_output(|| batch_answer(&["b"], &["a"]));
        let third = mock!(Client::batch_get_item)
            .match_requests(|r| {
                r.request_items()
                    .and_then(|i| i.get("resources"))
                    .map(|k| k.keys().len())
                    == Some(1)
            })
            .then_output(|| batch_answer(&[], &[]));
        let st = store(&[first.clone(), second.clone(), third.clone()]);
        let states = st.get_resources(&resource_keys(&["a", "b", "c"])).await.unwrap();
        let incarnations: Vec<Option<String>> = states.into_iter().map(|s| s.map(|s| s.incarnation)).collect();
        assert_eq!(incarnations, vec![None, Some("inc-b".into()), Some("inc-c".into())]);
        assert_eq!((first.num_calls(), second.num_calls(), third.num_calls()), (1, 1, 1));
    }

    /// Keys DynamoDB keeps leaving unprocessed past the store's budget are
    /// a transient error (the stream handler retries the batch), never
    /// "absent": a delete decided on an absent item would be dropped as
    /// already done and the eventual counter would stay one high.
    #[tokio::test(start_paused = true)]
    async fn keys_left_unprocessed_past_the_budget_are_an_error_not_absent_items() {
        let rules: Vec<Rule> = (0..UNPROCESSED_KEYS_BACKOFF.max_attempts)
            .map(|_| mock!(Client::batch_get_item).then_output(|| batch_answer(&["b"], &["a"])))
            .collect();
        let err = store(&rules)
            .get_resources(&resource_keys(&["a", "b"]))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Transient(_)), "{err:?}");
        assert!(rules.iter().all(|r| r.num_calls() == 1), "every attempt was made");
    }

    /// `get_resources` reads each item's state flattened beside its key:
    /// every kit attribute by the name the kit writes it under.
    #[tokio::test]
    async fn a_batch_read_gives_every_kit_attribute_of_each_item() {
        use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
        let rule = mock!(Client::batch_get_item).then_output(|| {
            let mut item = resource_key(&key());
            item.insert(keys::COUNTER_PROCESSED.to_owned(), AttributeValue::Bool(true));
            item.insert(keys::DELETED.to_owned(), AttributeValue::Bool(true));
            item.insert(keys::INCARNATION.to_owned(), s("inc"));
            item.insert(keys::BE_SHARD.to_owned(), AttributeValue::N("5".into()));
            BatchGetItemOutput::builder().responses("resources", vec![item]).build()
        });
        let st = store(std::slice::from_ref(&rule));
        let states = st.get_resources(&[key()]).await.unwrap();
        let expected = hybrid_counter::items::ResourceState {
            counter_processed: true,
            deleted: true,
            incarnation: "inc".into(),
            be_shard: Some(5),
        };
        assert_eq!(states, vec![Some(expected)]);
    }

    #[tokio::test]
    async fn a_read_item_gives_the_shard_its_create_counted_on() {
        let rule = mock!(Client::get_item)
            .match_requests(|r| r.projection_expression().is_some_and(|p| p.contains("#shard")))
            .then_output(|| {
                GetItemOutput::builder()
                    .item("incarnation", AttributeValue::S("inc".into()))
                    .item("counter_processed", AttributeValue::Bool(false))
                    .item("be_shard", AttributeValue::N("5".into()))
                    .build()
            });
        let s = store(std::slice::from_ref(&rule));
        let state = s.get_resource(&key()).await.unwrap().unwrap();
        assert_eq!(state.be_shard, Some(5));
    }

    #[tokio::test]
    async fn the_counters_query_stops_below_the_sequence_items() {
        let query = mock!(Client::query)
            .match_requests(|r| {
                r.key_condition_expression() == Some("#scope = :scope AND #name < :sequence")
                    && r.expression_attribute_values().and_then(|v| v.get(":sequence")) == Some(&s("sequence"))
            })
            .then_output(|| QueryOutput::builder().build());
        let st = store(std::slice::from_ref(&query));
        assert_eq!(st.counter_items(&scope()).await, Ok(vec![]));
        assert_eq!(query.num_calls(), 1, "the Query carried the bound");
    }

    #[tokio::test]
    async fn the_counters_query_reads_every_page_and_meters_each() {
        let item =
            |name: &str| -> HashMap<String, AttributeValue> { serde_dynamo::to_item(counter_item(name, 1)).unwrap() };
        let (first, second) = (item("eventual"), item("best_effort"));
        let next = HashMap::from([("scope".to_owned(), s("acct")), ("name".to_owned(), s("eventual"))]);
        let pages = [
            mock!(Client::query)
                .match_requests(|r| r.exclusive_start_key().is_none())
                .then_output(move || {
                    QueryOutput::builder()
                        .items(first.clone())
                        .set_last_evaluated_key(Some(next.clone()))
                        .build()
                }),
            mock!(Client::query)
                .match_requests(|r| r.exclusive_start_key().is_some())
                .then_output(move || QueryOutput::builder().items(second.clone()).build()),
        ];
        let st = store(&pages);
        let names: Vec<String> = st
            .counter_items(&scope())
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["eventual", "best_effort"]);
        assert_eq!(st.meter().snapshot().requests.query, 2, "one request per page");
    }

    /// Each page's request is on the meter before DynamoDB answers it
    /// (a Query cancelled in flight is charged), and no more are.
    #[tokio::test]
    async fn the_counters_query_meters_each_page_before_it_is_sent() {
        let meter = Meter::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answered = |meter: &Meter, seen: &Arc<Mutex<Vec<u64>>>| {
            let (meter, seen) = (meter.clone(), seen.clone());
            move || seen.lock().unwrap().push(meter.snapshot().requests.query)
        };
        let key = HashMap::from([("scope".to_owned(), s("acct")), ("name".to_owned(), s("eventual"))]);
        let (first_seen, second_seen) = (answered(&meter, &seen), answered(&meter, &seen));
        let repeated = key.clone();
        let pages = [
            mock!(Client::query)
                .match_requests(|r| r.exclusive_start_key().is_none())
                .then_output(move || {
                    first_seen();
                    QueryOutput::builder().set_last_evaluated_key(Some(key.clone())).build()
                }),
            // The same key again: the paginator stops there, and so
            // does the meter.
            mock!(Client::query)
                .match_requests(|r| r.exclusive_start_key().is_some())
                .then_output(move || {
                    second_seen();
                    QueryOutput::builder()
                        .set_last_evaluated_key(Some(repeated.clone()))
                        .build()
                }),
        ];
        let st = store(&pages).with_meter(meter.clone());
        assert_eq!(st.counter_items(&scope()).await, Ok(vec![]));
        assert_eq!(*seen.lock().unwrap(), [1, 2], "each request counted before its answer");
        assert_eq!(
            meter.snapshot().requests.query,
            2,
            "no request counted that was not sent"
        );
    }
}
