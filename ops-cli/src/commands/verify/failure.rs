//! `verify --failure-path`: one batch through DLQ1 and the reprocessor, on
//! a real stack, touching only verify's own scope.
//!
//! A batch fails in production when the stream function gives up on it; its
//! items stay uncounted and the mapping sends an on-failure record (shard and
//! sequence range, no records) to DLQ1. Verify builds exactly that state
//! without breaking anything: it writes [`ITEMS`] items into its scope
//! `verify-<run>-dlq`, waits for the stream to count them, and finds their
//! INSERT records in the stream (read from iterators taken at `LATEST`
//! before the writes, so it never reads the stream's history). It then takes
//! the stream's count back in one transaction ([`DynamoStore::uncount`]: EC
//! down by their number, their flags back to false, so `EC == processed`
//! holds throughout; the flag flip is a MODIFY the filter and the consumer
//! ignore), and sends DLQ1 the on-failure record of their range, as Lambda
//! would. The check passes when the reprocessor has counted them again
//! (`EC == live`, nothing pending) within `--timeout`.
//!
//! Safe on a production stack: the range may hold other scopes' records
//! written meanwhile, and replaying them is what the reprocessor does for
//! every failed batch (each write is conditional, so records already counted
//! change nothing). A record that is never replayed (the reprocessor broken)
//! stays in DLQ1 and, after its receives, DLQ2; once verify's cleanup has
//! removed the scope, replaying it writes nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::EventRecord;
use hybrid_counter::stream::plan::ShardChoice;
use hybrid_counter::stream::record::sequence_number;
use hybrid_counter::stream::{Change, ChangeRecord};
use hybrid_counter::{ResourceId, Scope, now_millis};
use hybrid_counter_aws::replay::OnFailureRecord;
use hybrid_counter_aws::streams::{Position, ShardReader};

use super::support::{Outcome, Verify, during, id, room_for};
use crate::error::{Error, Result, invalid};

/// Items written and failed on purpose.
pub const ITEMS: u64 = 5;

/// The scope of the failure path in run `run`.
pub fn scope_of(run: &str) -> Result<Scope> {
    Scope::new(format!("verify-{run}-dlq")).map_err(invalid)
}

/// What the failure path writes, in words (for `--dry-run`).
pub fn plan(scope: &Scope) -> Vec<String> {
    vec![
        format!(
            "{scope}: create {ITEMS} items (f0..f{}), wait for the stream to count them, then take that count back \
             in one transaction (EC -{ITEMS}, their flags back to false), as if their batch had failed",
            ITEMS - 1
        ),
        format!(
            "send DLQ1 the on-failure record of their stream range (RetryAttemptsExhausted) and wait for the \
             reprocessor to count them again"
        ),
    ]
}

/// The stack resources the failure path uses.
pub struct Target {
    pub stream_arn: String,
    pub dlq1_url: String,
    /// The stream function's ARN, for the on-failure record.
    pub function_arn: String,
}

/// The `(id, incarnation)` of each item of a failed range, by the
/// partition key it lives under (the scope itself under one key).
pub type FailedItems = BTreeMap<Scope, Vec<(ResourceId, String)>>;

/// Verify's INSERT records of the scope whose partition keys are `keys`
/// among `records` (one shard's, in order): the slice from the first
/// through the last of them (the range the on-failure record names, other
/// scopes' records included) and the `(id, incarnation)` of each, by key.
pub fn failed_range<'a>(records: &'a [EventRecord], keys: &[Scope]) -> Option<(&'a [EventRecord], FailedItems)> {
    let ours: Vec<(usize, Scope, ResourceId, String)> = records
        .iter()
        .enumerate()
        .filter_map(|(at, record)| match ChangeRecord::from_lambda(record).ok()?.change {
            Change::Insert { key, incarnation } if keys.contains(&key.scope) => {
                Some((at, key.scope, key.id, incarnation))
            }
            _ => None,
        })
        .collect();
    let first = ours.first()?.0;
    let last = ours.last()?.0;
    let mut items = FailedItems::new();
    for (_, key, id, incarnation) in ours {
        items.entry(key).or_default().push((id, incarnation));
    }
    Some((&records[first..=last], items))
}

impl Verify<'_> {
    pub(super) async fn failure_path(&self, scope: &Scope, target: &Target) -> Outcome {
        let started = Instant::now();
        let timeout = self.options.timeout;
        let reader = ShardReader::new(self.ctx.clients.dynamodbstreams.clone(), target.stream_arn.clone());
        // Iterators at the tip of every open shard, before the writes.
        let mut tips: BTreeMap<String, Option<String>> = BTreeMap::new();
        for shard in reader.shards().await.map_err(during("describing the stream"))? {
            if shard.ending_sequence_number.is_none() {
                let at = reader
                    .iterator(&shard.shard_id, &Position::Latest)
                    .await
                    .map_err(during("reading the stream"))?;
                tips.insert(shard.shard_id, at);
            }
        }
        self.ctx.ui.step(format!("verify: writing {ITEMS} items in {scope}"));
        self.store
            .set_scope_limit(
                self.config.scope_keys,
                scope,
                Some(room_for(self.config.scope_keys, ITEMS + 1)),
                now_millis(),
            )
            .await
            .map_err(during("setting a limit override"))?;
        for n in 0..ITEMS {
            if let Err(err) = self
                .counter
                .create(scope, &id(format!("f{n}"))?, Default::default(), now_millis())
                .await
            {
                return Ok(Err(format!("create {scope}/f{n} answered {err}")));
            }
        }
        if let Err(detail) = self.counted(scope, ITEMS, "the stream").await? {
            return Ok(Err(format!("before the failure: {detail}")));
        }

        let keys = self.resource_keys(scope)?;
        // Their INSERT records, per shard (a shard opened since is read from
        // its start: it holds only what was written since).
        let mut read: BTreeMap<String, Vec<EventRecord>> = BTreeMap::new();
        let mut found = 0;
        let mut ranges = Vec::new();
        while found < ITEMS as usize {
            if started.elapsed() >= timeout {
                return Ok(Err(format!(
                    "found {found} of the {ITEMS} INSERT records of {scope} in the stream {} within {}s",
                    target.stream_arn,
                    timeout.as_secs()
                )));
            }
            for shard in reader.shards().await.map_err(during("describing the stream"))? {
                if let std::collections::btree_map::Entry::Vacant(new) = tips.entry(shard.shard_id) {
                    let at = reader
                        .iterator(new.key(), &Position::TrimHorizon)
                        .await
                        .map_err(during("reading the stream"))?;
                    new.insert(at);
                }
            }
            for (shard, at) in &mut tips {
                let (records, next) = reader
                    .read_from(at.take(), 10_000)
                    .await
                    .map_err(during("reading the stream"))?;
                *at = next;
                read.entry(shard.clone()).or_default().extend(records);
            }
            ranges = read
                .iter()
                .filter_map(|(shard, records)| {
                    failed_range(records, &keys).map(|(range, items)| (shard.clone(), range.to_vec(), items))
                })
                .collect::<Vec<_>>();
            found = ranges
                .iter()
                .flat_map(|(_, _, items)| items.values())
                .map(Vec::len)
                .sum();
            if found < ITEMS as usize {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }

        let mut sent = Vec::new();
        for (shard, range, items) in &ranges {
            let first = range.first().map(sequence_number);
            // Each key's count, in one transaction per key: the stream
            // counted each key's items on that key's counter.
            // A key that fails stops the loop, but the on-failure record
            // still goes to DLQ1: the keys already taken back must be
            // replayed (replaying records still counted writes nothing).
            let mut failed = None;
            for (key, items) in items {
                let counters_key = self.config.scope_keys.counters_key_of(key);
                let counter = ShardChoice::for_batch(self.config.eventual_shards, first).counter_name(&counters_key);
                if let Err(err) = self
                    .store
                    .uncount(&counters_key, &counter, key, items, now_millis())
                    .await
                {
                    failed = Some(during("taking back the stream's count of verify's items")(err));
                    break;
                }
            }
            let record = OnFailureRecord::for_batch(
                &target.function_arn,
                "RetryAttemptsExhausted",
                1,
                &target.stream_arn,
                shard,
                range,
                std::time::SystemTime::now(),
            );
            let body = serde_json::to_string(&record).map_err(during("writing the on-failure record"))?;
            let message = hybrid_counter_aws::sqs::send(&self.ctx.clients.sqs, &target.dlq1_url, &body, &[])
                .await
                .map_err(|e| Error::Aws {
                    action: "sending the on-failure record to DLQ1",
                    message: aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                })?;
            sent.push(format!("{} records of shard {shard} (message {message})", range.len()));
            if let Some(err) = failed {
                return Err(err);
            }
        }
        self.ctx
            .ui
            .step(format!("verify: waiting for the reprocessor to count {ITEMS} items"));
        let replayed = Instant::now();
        Ok(match self.counted(scope, ITEMS, "the reprocessor").await? {
            Ok(_) => Ok(format!(
                "{ITEMS} items failed on purpose were counted again by the reprocessor {:.1}s after their \
                 on-failure record reached DLQ1 ({})",
                replayed.elapsed().as_secs_f64(),
                sent.join(", ")
            )),
            Err(detail) => Err(format!(
                "{detail}: the on-failure record sent to DLQ1 ({}) was not replayed. Is the reprocessor's DLQ1 \
                 mapping enabled and its function healthy? See `counterctl status`; the record stays in DLQ1 \
                 (then DLQ2) and replays nothing once this scope is removed",
                sent.join(", ")
            )),
        })
    }

    /// Waits until `scope` has `live` items, all counted (`EC == live`,
    /// nothing pending); `Err` says what is still missing after `--timeout`.
    async fn counted(&self, scope: &Scope, live: u64, by: &str) -> Result<std::result::Result<(), String>> {
        let started = Instant::now();
        loop {
            let count = self.scope_count(scope).await?;
            if count.live == live && count.settled() {
                return Ok(Ok(()));
            }
            if let Some(problem) = self.runner_problem(started.elapsed()).await {
                return Ok(Err(format!("{by} had not counted {scope}: {problem}")));
            }
            if started.elapsed() >= self.options.timeout {
                return Ok(Err(format!(
                    "after {}s {by} had not counted {scope}: EC {}, live {}, {} pending",
                    self.options.timeout.as_secs(),
                    count.eventual,
                    count.live,
                    count.pending
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(seq: &str, event: &str, scope: &str, id: &str, processed: bool) -> EventRecord {
        serde_json::from_value(json!({
            "eventID": seq, "eventName": event, "eventSource": "aws:dynamodb", "eventVersion": "1.1",
            "awsRegion": "us-east-1", "eventSourceARN": "arn:stream",
            "dynamodb": {
                "SequenceNumber": seq, "SizeBytes": 10, "StreamViewType": "NEW_AND_OLD_IMAGES",
                "ApproximateCreationDateTime": 1.7e9,
                "Keys": {"scope": {"S": scope}, "id": {"S": id}},
                "NewImage": {
                    "scope": {"S": scope}, "id": {"S": id}, "incarnation": {"S": format!("inc-{id}")},
                    "counter_processed": {"BOOL": processed}, "deleted": {"BOOL": false}
                }
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_failed_range_runs_from_verifys_first_insert_to_its_last_with_others_between() {
        let scope = scope_of("r").unwrap();
        let records = vec![
            record("100", "INSERT", "tenant", "a", false),
            record("101", "INSERT", "verify-r-dlq", "f0", false),
            record("102", "INSERT", "tenant", "b", false),
            record("103", "INSERT", "verify-r-dlq", "f1", false),
            record("104", "MODIFY", "verify-r-dlq", "f1", true),
            record("105", "INSERT", "tenant", "c", false),
        ];
        let keys = [scope.clone()];
        let (range, items) = failed_range(&records, &keys).unwrap();
        let seqs: Vec<&str> = range.iter().map(sequence_number).collect();
        assert_eq!(seqs, ["101", "102", "103"]);
        let ids: Vec<(&str, &str)> = items[&scope]
            .iter()
            .map(|(id, inc)| (id.as_str(), inc.as_str()))
            .collect();
        assert_eq!(ids, [("f0", "inc-f0"), ("f1", "inc-f1")]);
        assert!(failed_range(&records[..1], &keys).is_none(), "no record of the scope");
    }

    #[test]
    fn at_several_keys_the_failed_range_spans_every_key_of_the_scope_and_groups_its_items_by_key() {
        let keys = hybrid_counter::scope_keys::ScopeKeys::new(4)
            .unwrap()
            .keys(&scope_of("r").unwrap())
            .unwrap();
        let records = vec![
            record("100", "INSERT", "verify-r-dlq#1", "f0", false),
            record("101", "INSERT", "tenant#1", "a", false),
            record("102", "INSERT", "verify-r-dlq#3", "f1", false),
            record("103", "INSERT", "verify-r-dlq#1", "f2", false),
            // The bare scope is not one of its keys.
            record("104", "INSERT", "verify-r-dlq", "f3", false),
        ];
        let (range, items) = failed_range(&records, &keys).unwrap();
        let seqs: Vec<&str> = range.iter().map(sequence_number).collect();
        assert_eq!(seqs, ["100", "101", "102", "103"]);
        let by_key: Vec<(&str, Vec<&str>)> = items
            .iter()
            .map(|(key, items)| (key.as_str(), items.iter().map(|(id, _)| id.as_str()).collect()))
            .collect();
        assert_eq!(
            by_key,
            [("verify-r-dlq#1", vec!["f0", "f2"]), ("verify-r-dlq#3", vec!["f1"])]
        );
    }

    #[test]
    fn the_failure_scope_is_verifys_own_and_the_plan_says_what_it_fails() {
        assert_eq!(scope_of("18c0ffee").unwrap().as_str(), "verify-18c0ffee-dlq");
        let text = plan(&scope_of("r").unwrap()).join("\n");
        assert!(
            text.contains("verify-r-dlq") && text.contains("take that count back"),
            "{text}"
        );
        assert!(text.contains("DLQ1") && text.contains("reprocessor"), "{text}");
    }
}
