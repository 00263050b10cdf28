//! The lanes of the stream mapping: a parallelization factor of 1 to 10
//! lanes per shard, records keyed to a lane by partition key, lanes polled
//! concurrently; the record of deliveries that `mapping.rs` checks against
//! AWS's promise that each item's records reach the function in order.

use std::collections::{BTreeMap, BTreeSet};

use aws_lambda_events::event::dynamodb::EventRecord as Record;
use hybrid_counter::keys;
use hybrid_counter::stream::record::sequence_number;
use serde_json::Value;

/// One lane of one shard of the stream mapping.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Lane {
    pub(crate) shard: String,
    pub(crate) lane: u32,
}

/// The lane of a record under a parallelization factor of `lanes`: by its
/// partition key (the scope), so "Lambda processes records with the same
/// partition key in order" ("Using AWS Lambda with Amazon DynamoDB",
/// concurrent reading of shards,
/// <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html>).
pub(crate) fn lane_of(event: &Value, lanes: u32) -> u32 {
    let scope = key_text(event, keys::SCOPE);
    let hash = scope.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (hash % u64::from(lanes.max(1))) as u32
}

/// A string key attribute of a record in its Lambda event form.
pub(crate) fn key_text<'a>(event: &'a Value, name: &str) -> &'a str {
    event["dynamodb"]["Keys"][name]["S"].as_str().unwrap_or_default()
}

pub(crate) fn seq(record: &Record) -> String {
    sequence_number(record).to_owned()
}

pub(crate) fn previous_sequence(seq: &str) -> Option<String> {
    seq.parse::<u64>().ok()?.checked_sub(1).map(|n| n.to_string())
}

/// The stream function's deliveries so far: every sequence number, and
/// per item (`(scope, id)`) the highest one.
#[derive(Debug, Default)]
pub(crate) struct Deliveries {
    pub(crate) seen: BTreeSet<u64>,
    pub(crate) highest: BTreeMap<(String, String), u64>,
}

/// One future of a group joined by [`join_all`].
pub(crate) type Task<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

/// Polls every future until all are done (the lanes of one round).
pub(crate) async fn join_all(mut futures: Vec<Task<'_>>) {
    std::future::poll_fn(|cx| {
        futures.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if futures.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}
