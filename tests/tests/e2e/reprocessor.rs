//! The DLQ reprocessor: on-failure records naming a range of the real stream
//! are replayed through the shared processor.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use dlq_reprocessor::process_dlq_event;
use e2e::Kit;
use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter_aws::replay::{OnFailureRecord, REASON_ATTRIBUTE};
use serde_dynamo::Item;

use crate::{NOW, id, scope};

async fn replay_messages(kit: &Kit, bodies: &[String]) -> Vec<String> {
    replay_with_metrics(kit, bodies).await.0
}

/// The ids of the messages reported as failed, and the invocation's metrics.
async fn replay_with_metrics(kit: &Kit, bodies: &[String]) -> (Vec<String>, Metrics) {
    let mut event = SqsEvent::default();
    for (n, body) in bodies.iter().enumerate() {
        let mut message = SqsMessage::default();
        message.message_id = Some(format!("m{n}"));
        message.body = Some(body.clone());
        event.records.push(message);
    }
    let sdk = kit.emulator.sdk_config().await;
    let sources = dlq_reprocessor::Sources {
        streams: aws_sdk_dynamodbstreams::Client::new(&sdk),
        s3: hybrid_counter_aws::s3::client(&sdk),
    };
    let mut metrics = Metrics::new("e2e");
    let response = process_dlq_event(
        &kit.processor,
        &sources,
        &kit.permanent_failures().await,
        lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()),
        &mut metrics,
    )
    .await
    .expect("reprocessor invocation");
    let failed = response
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    (failed, metrics)
}

async fn on_failure_body(kit: &Kit, records: &[aws_lambda_events::event::dynamodb::EventRecord]) -> String {
    let shard = kit.reader.shards().await.unwrap().remove(0).shard_id;
    let record = OnFailureRecord::for_batch(
        "arn:aws:lambda:us-east-1:123456789012:function:hck-stream-counter",
        "RetryAttemptsExhausted",
        3,
        kit.reader.stream_arn(),
        &shard,
        records,
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(NOW as u64),
    );
    serde_json::to_string(&record).unwrap()
}

#[tokio::test]
async fn a_failed_batch_is_replayed_from_the_stream_and_counted_once() {
    let mut kit = Kit::start(100).await;
    let s = scope("acct");
    for n in 0..8 {
        kit.counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    kit.counter.delete(&s, &id("w2"), NOW).await.unwrap();
    // The handler "gave up" on these records: nothing was counted.
    let records = kit.new_records().await;
    assert_eq!(records.len(), 9);
    let body = on_failure_body(&kit, &records).await;
    let (failed, metrics) = replay_with_metrics(&kit, std::slice::from_ref(&body)).await;
    assert!(failed.is_empty());
    kit.assert_invariants(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 7);
    assert_eq!(metrics.value(Metric::Replays), Some(1.0));
    assert_eq!(
        metrics.value(Metric::EventsCounted),
        Some(9.0),
        "8 creates and 1 delete"
    );
    assert!(metrics.value(Metric::Transactions).unwrap() >= 1.0, "{metrics:?}");
    // A duplicate of the message (SQS is at-least-once) changes nothing.
    let (failed, metrics) = replay_with_metrics(&kit, &[body]).await;
    assert!(failed.is_empty());
    assert_eq!(metrics.value(Metric::Replays), Some(1.0));
    assert_eq!(metrics.value(Metric::EventsCounted), Some(0.0), "nothing counted twice");
    kit.drain().await;
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 7);
}

/// Garbage and a range of another stream can never be replayed: DLQ2 at
/// once, with the reason, not reported (so DLQ1 deletes them). A range
/// that is not in the stream (trimmed or invented) may be a read that
/// found nothing yet: it keeps its retries, alone.
#[tokio::test]
async fn permanent_failures_go_to_dlq2_at_once_and_an_unreplayable_range_fails_alone() {
    let mut kit = Kit::start(100).await;
    let s = scope("acct");
    for n in 0..3 {
        kit.counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    let records = kit.new_records().await;
    let good = on_failure_body(&kit, &records).await;
    let mut gone: OnFailureRecord = serde_json::from_str(&good).unwrap();
    gone.batch_info.start_sequence_number = "1".into();
    let gone = serde_json::to_string(&gone).unwrap();
    let mut foreign: OnFailureRecord = serde_json::from_str(&good).unwrap();
    foreign.batch_info.stream_arn = "arn:aws:dynamodb:us-east-1:000000000000:table/other/stream/x".into();
    let foreign = serde_json::to_string(&foreign).unwrap();
    let failed = replay_messages(&kit, &["{not json".into(), gone, good, "{}".into(), foreign.clone()]).await;
    assert_eq!(failed, vec!["m1"], "only the range that may come back is retried");
    assert_eq!(
        kit.counter.usage(&s).await.unwrap().eventual,
        3,
        "the good one was replayed"
    );
    kit.assert_invariants(&s).await;
    let permanent = kit.permanent_failures().await;
    let parked: Vec<(String, String)> = e2e::receive_all(&permanent.sqs, &permanent.dlq2_url)
        .await
        .iter()
        .map(|m| {
            let reason = hybrid_counter_aws::sqs::string_attribute(m, REASON_ATTRIBUTE).unwrap_or_default();
            (m.body().unwrap_or_default().to_owned(), reason.to_owned())
        })
        .collect();
    let reason = |body: &str| {
        let found = parked.iter().filter(|(b, _)| b == body).collect::<Vec<_>>();
        assert_eq!(found.len(), 1, "{body} once, unchanged, in DLQ2: {parked:?}");
        found[0].1.clone()
    };
    assert_eq!(parked.len(), 3, "{parked:?}");
    assert!(
        reason("{not json").starts_with("not an on-failure record"),
        "{parked:?}"
    );
    assert!(reason("{}").starts_with("not an on-failure record"), "{parked:?}");
    assert!(reason(&foreign).contains("table/other/stream/x"), "{parked:?}");
}
