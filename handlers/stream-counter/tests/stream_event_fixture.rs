//! The DynamoDB Stream event as Lambda delivers it to this function
//! (`NEW_AND_OLD_IMAGES`: a create, then a soft delete), kept next to the
//! handler. It round-trips through the `aws_lambda_events` type, and the
//! handler counts it: the insert is counted, the soft-deleted item is
//! removed and uncounted.

use aws_lambda_events::event::dynamodb::Event;
use hybrid_counter::keys;
use hybrid_counter::memory::MemoryStore;
use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter::store::ResourceKey;
use hybrid_counter::stream::Processor;
use hybrid_counter::{ResourceId, ResourceRead, Scope};
use serde_json::Value;
use stream_counter::{RawStreamEvent, handle_stream_event, process_stream_event};

const FIXTURE: &str = include_str!("../fixtures/stream-event.json");

#[test]
fn the_fixture_round_trips_through_the_lambda_event_type() {
    let original: Value = serde_json::from_str(FIXTURE).unwrap();
    let event: Event = serde_json::from_str(FIXTURE).unwrap();
    assert_eq!(event.records.len(), 2);
    let back = serde_json::to_value(&event).unwrap();
    let again: Event = serde_json::from_value(back.clone()).unwrap();
    assert_eq!(again, event);
    // What the kit reads of each record survives the round trip unchanged,
    // but for one thing the type does: an image a record does not carry (an
    // INSERT's old image) comes back as an empty map, which the kit's decoder
    // reads as absent too.
    let image = |v: &Value| if v.is_null() { serde_json::json!({}) } else { v.clone() };
    let records = |v: &Value| v["Records"].as_array().unwrap().clone();
    for (theirs, ours) in records(&original).iter().zip(records(&back).iter()) {
        assert_eq!(theirs["eventName"], ours["eventName"]);
        for field in ["Keys", "SequenceNumber", "StreamViewType"] {
            assert_eq!(theirs["dynamodb"][field], ours["dynamodb"][field], "{field}");
        }
        for field in ["NewImage", "OldImage"] {
            assert_eq!(image(&theirs["dynamodb"][field]), ours["dynamodb"][field], "{field}");
        }
        let decoded = hybrid_counter::stream::ChangeRecord::from_json(theirs).unwrap();
        assert_eq!(hybrid_counter::stream::ChangeRecord::from_json(ours).unwrap(), decoded);
    }
}

/// The table as it stands when the fixture's records arrive: "w1" just
/// created, "w0" counted earlier and soft-deleted since.
async fn table_before_the_fixture() -> MemoryStore {
    let store = MemoryStore::new();
    store
        .put_item("acct", "w1", "0f9e4c7277984185ba79a3ce49a37a2c", false, false)
        .await;
    store
        .put_item("acct", "w0", "8f3040b29a794ab1a7e25dd30d2b2d4b", true, true)
        .await;
    store.set_counter("acct", keys::EVENTUAL_NAME, 1);
    store
}

#[tokio::test]
async fn the_handler_counts_the_fixture() {
    let processor = Processor::new(table_before_the_fixture().await);
    let event: RawStreamEvent = serde_json::from_str(FIXTURE).unwrap();
    let response = handle_stream_event(
        &processor,
        lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()),
    )
    .await
    .unwrap();
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let store = processor.store();
    assert_eq!(store.counter("acct", keys::EVENTUAL_NAME), 1, "+1 for w1, -1 for w0");
    let key = |id: &str| ResourceKey {
        scope: Scope::new("acct").unwrap(),
        id: ResourceId::new(id).unwrap(),
    };
    assert!(store.get_resource(&key("w1")).await.unwrap().unwrap().counter_processed);
    assert_eq!(store.get_resource(&key("w0")).await.unwrap(), None, "hard-deleted");
}

#[tokio::test]
async fn one_invocation_emits_one_metrics_document_with_the_batch_s_counts() {
    let processor = Processor::new(table_before_the_fixture().await);
    let event: RawStreamEvent = serde_json::from_str(FIXTURE).unwrap();
    let mut metrics = Metrics::new("hc-dev");
    process_stream_event(
        &processor,
        lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()),
        &mut metrics,
    )
    .await
    .unwrap();
    let doc = metrics.document(1).unwrap();
    let directive = &doc["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "HybridCounterKit");
    assert_eq!(directive["Dimensions"], serde_json::json!([["Stack"]]));
    assert_eq!(doc["Stack"], "hc-dev");
    let names: Vec<&str> = directive["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["EventsCounted", "Retries", "Transactions", "Conflicts", "WriteUnits"]
    );
    assert_eq!(
        doc[Metric::EventsCounted.name()],
        2.0,
        "the create and the counted delete"
    );
    assert_eq!(doc[Metric::Retries.name()], 0.0);
}
