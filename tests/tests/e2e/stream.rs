//! The stream path: records read back with GetRecords from the emulator's
//! DynamoDB Streams API and delivered to the real handler function.

use e2e::{Kit, deliver_with};
use hybrid_counter::stream::Processor;
use serde_dynamo::Item;

use crate::{NOW, id, scope};

fn event_name(r: &aws_lambda_events::event::dynamodb::EventRecord) -> &str {
    &r.event_name
}

#[tokio::test]
async fn eventual_counter_converges_to_the_live_count() {
    let mut kit = Kit::start(100).await;
    let (a, b) = (scope("acct-a"), scope("acct-b"));
    for n in 0..12 {
        kit.counter
            .create(&a, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    for n in 0..5 {
        kit.counter
            .create(&b, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    // Part of the stream first: invariants hold mid-way too.
    let first = kit.new_records().await;
    assert_eq!(first.len(), 17);
    assert!(kit.deliver(&first[..9]).await.is_empty());
    kit.assert_invariants(&a).await;
    assert!(kit.deliver(&first[9..]).await.is_empty());
    for n in [0, 3, 7] {
        kit.counter.delete(&a, &id(&format!("w{n}")), NOW).await.unwrap();
    }
    kit.counter.delete(&b, &id("w4"), NOW).await.unwrap();
    kit.assert_invariants(&a).await;
    kit.drain().await;
    kit.assert_converged(&a).await;
    kit.assert_converged(&b).await;
    assert_eq!(kit.counter.usage(&a).await.unwrap().eventual, 9);
    assert_eq!(kit.counter.usage(&b).await.unwrap().eventual, 4);
}

#[tokio::test]
async fn the_same_batch_delivered_twice_does_not_double_count() {
    let mut kit = Kit::start(100).await;
    let s = scope("acct");
    for n in 0..6 {
        kit.counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    kit.counter.delete(&s, &id("w1"), NOW).await.unwrap();
    let batch = kit.new_records().await;
    assert!(kit.deliver(&batch).await.is_empty());
    assert!(kit.deliver(&batch).await.is_empty());
    kit.assert_invariants(&s).await;
    // The handler's own writes come back through the stream; replaying the
    // whole stream from the trim horizon changes nothing either.
    kit.drain().await;
    let everything = kit.all_records().await;
    assert!(everything.len() > batch.len());
    assert!(kit.deliver(&everything).await.is_empty());
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 5);
}

#[tokio::test]
async fn concurrent_deliveries_of_one_batch_count_each_item_once() {
    // Two invocations racing on the same records (a retry overlapping a slow
    // first attempt): transaction conflicts are retried, condition failures
    // read as already done.
    let mut kit = Kit::start(100).await;
    let s = scope("hot");
    for n in 0..20 {
        kit.counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    let batch = kit.new_records().await;
    let second = Processor::new(kit.store.clone()).with_seed(2);
    let (x, y) = tokio::join!(kit.deliver(&batch), deliver_with(&second, &batch));
    assert!(x.is_empty() && y.is_empty(), "{x:?} {y:?}");
    kit.drain().await;
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 20);
}

#[tokio::test]
async fn a_delete_processed_before_its_insert_leaves_the_eventual_counter_exact() {
    let mut kit = Kit::start(100).await;
    let s = scope("acct");
    kit.counter.create(&s, &id("keep"), Item::default(), NOW).await.unwrap();
    kit.counter.create(&s, &id("gone"), Item::default(), NOW).await.unwrap();
    kit.counter.delete(&s, &id("gone"), NOW).await.unwrap();
    let records = kit.new_records().await;
    let names: Vec<&str> = records.iter().map(event_name).collect();
    assert_eq!(names, ["INSERT", "INSERT", "MODIFY"]);
    // The delete arrives first (its INSERT is, say, stuck in a DLQ).
    assert!(kit.deliver(&records[2..]).await.is_empty());
    kit.assert_invariants(&s).await;
    assert_eq!(
        kit.counts(&s).await.pending_delete,
        0,
        "the uncounted item is hard-deleted"
    );
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 0, "EC must not go to -1");
    // Then the INSERTs, late.
    assert!(kit.deliver(&records[..2]).await.is_empty());
    kit.assert_invariants(&s).await;
    kit.drain().await;
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 1);
}

#[tokio::test]
async fn a_recreated_id_is_counted_once_per_incarnation() {
    let mut kit = Kit::start(100).await;
    let s = scope("acct");
    let w = id("w");
    // Incarnation 1, fully processed.
    kit.counter.create(&s, &w, Item::default(), NOW).await.unwrap();
    kit.drain().await;
    kit.counter.delete(&s, &w, NOW).await.unwrap();
    kit.drain().await;
    kit.assert_converged(&s).await;
    assert_eq!(kit.counts(&s).await.live, 0);
    // Incarnations 2 and 3 come and go before the stream catches up.
    let second = kit.counter.create(&s, &w, Item::default(), NOW).await.unwrap();
    // Incarnation 2 is still soft-deleted, so the id is not free yet:
    kit.counter.delete(&s, &w, NOW).await.unwrap();
    let err = kit.counter.create(&s, &w, Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, hybrid_counter::Error::AlreadyExists), "{err}");
    kit.drain().await;
    let third = kit.counter.create(&s, &w, Item::default(), NOW).await.unwrap();
    assert_ne!(second.incarnation, third.incarnation);
    kit.drain().await;
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 1);
    // Replaying every record of every incarnation: still exactly one.
    assert!(kit.deliver(&kit.all_records().await).await.is_empty());
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 1);
}

#[tokio::test]
async fn an_old_incarnations_insert_replayed_late_does_not_count_the_new_one() {
    let mut kit = Kit::start(100).await;
    let s = scope("acct");
    let w = id("w");
    kit.counter.create(&s, &w, Item::default(), NOW).await.unwrap();
    kit.counter.delete(&s, &w, NOW).await.unwrap();
    let old = kit.new_records().await; // INSERT(1), MODIFY(1): not delivered yet
    // The delete goes through first and frees the id.
    assert!(kit.deliver(&old[1..]).await.is_empty());
    kit.counter.create(&s, &w, Item::default(), NOW).await.unwrap();
    // The first incarnation's INSERT arrives late: it must not flip the new item.
    assert!(kit.deliver(&old[..1]).await.is_empty());
    kit.assert_invariants(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 0);
    assert_eq!(kit.counts(&s).await.pending_create, 1);
    kit.drain().await;
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 1);
}

#[tokio::test]
async fn foreign_items_are_ignored_and_a_malformed_record_is_reported_not_dropped() {
    let mut kit = Kit::start(100).await;
    let s = scope("acct");
    kit.counter.create(&s, &id("ok"), Item::default(), NOW).await.unwrap();
    // An item written by someone else, without the kit's attributes.
    kit.dynamodb
        .put_item()
        .table_name(&kit.config.resources_table)
        .item("scope", aws_sdk_dynamodb::types::AttributeValue::S("acct".into()))
        .item("id", aws_sdk_dynamodb::types::AttributeValue::S("foreign".into()))
        .send()
        .await
        .unwrap();
    // An item that claims to be the kit's but has a wrong attribute type.
    kit.dynamodb
        .put_item()
        .table_name(&kit.config.resources_table)
        .item("scope", aws_sdk_dynamodb::types::AttributeValue::S("acct".into()))
        .item("id", aws_sdk_dynamodb::types::AttributeValue::S("broken".into()))
        .item("incarnation", aws_sdk_dynamodb::types::AttributeValue::S("x".into()))
        .item(
            "counter_processed",
            aws_sdk_dynamodb::types::AttributeValue::S("no".into()),
        )
        .send()
        .await
        .unwrap();
    kit.counter
        .create(&s, &id("after"), Item::default(), NOW)
        .await
        .unwrap();
    let records = kit.new_records().await;
    assert_eq!(records.len(), 4);
    let broken_seq = hybrid_counter::stream::record::sequence_number(&records[2]).to_owned();
    let failed = kit.deliver(&records).await;
    assert_eq!(
        failed,
        vec![broken_seq],
        "the malformed record is reported by its sequence number"
    );
    // Everything before it was processed; the record after it was not (the
    // mapping redelivers from the failure), so nothing was lost or skipped.
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 1);
    let failed_again = kit.deliver(&records[3..]).await;
    assert!(failed_again.is_empty());
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 2);
}

#[tokio::test]
async fn a_sharded_eventual_counter_sums_to_the_live_count() {
    let mut kit = Kit::start(100).await;
    kit.processor = Processor::new(kit.store.clone()).with_eventual_shards(4);
    let s = scope("hot");
    for n in 0..16 {
        kit.counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    for n in 0..5 {
        kit.counter.delete(&s, &id(&format!("w{n}")), NOW).await.unwrap();
    }
    // Small batches, as concurrent invocations would see them: each batch
    // counts the scope on one shard, picked by its first sequence number.
    let records = kit.new_records().await;
    for batch in records.chunks(3) {
        assert!(kit.deliver(batch).await.is_empty(), "a batch failed");
    }
    kit.drain().await;
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 11);
    let shards = kit
        .dynamodb
        .query()
        .table_name(&kit.config.counters_table)
        .key_condition_expression("#s = :s")
        .expression_attribute_names("#s", "scope")
        .expression_attribute_values(":s", aws_sdk_dynamodb::types::AttributeValue::S("hot".into()))
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default()
        .into_iter()
        .filter_map(|item| item.get("name").and_then(|n| n.as_s().ok()).cloned())
        .filter(|name| name.starts_with("eventual#"))
        .count();
    assert!(
        shards > 1,
        "7 batches over 4 shards should use several shard items, used {shards}"
    );
}
