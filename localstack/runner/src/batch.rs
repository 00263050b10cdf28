//! The event source mapping's decisions, as pure functions over what was read
//! and what the function answered: which records form the next batch, what
//! a response means for the checkpoint, which records are too old. The
//! pollers ([`crate::stream`], [`crate::sqs`]) only do the I/O around them.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::invoke::Invocation;

/// Records of one batch (or of a part of it after a bisect or a partial
/// failure), with what they cost so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part<R> {
    pub records: Vec<R>,
    /// Retries used; inherited by both halves of a bisect.
    pub retries: u32,
    pub invocations: u32,
}

impl<R> Part<R> {
    /// A whole batch, nothing spent on it yet.
    pub fn new(records: Vec<R>) -> Self {
        Self {
            records,
            retries: 0,
            invocations: 0,
        }
    }

    /// `BisectBatchOnFunctionError`: the two halves of a part of more than
    /// one record, each keeping the retries and invocations used so far
    /// (bisecting itself consumes no retry); the part itself when it cannot
    /// be split.
    pub fn bisect(mut self) -> Result<(Self, Self), Self> {
        if self.records.len() < 2 {
            return Err(self);
        }
        let second = self.records.split_off(self.records.len() / 2);
        let (retries, invocations) = (self.retries, self.invocations);
        Ok((
            self,
            Self {
                records: second,
                retries,
                invocations,
            },
        ))
    }
}

/// The next batch within records read from a shard (in shard order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Records `..end` are consumed by this batch: delivered or filtered.
    pub end: usize,
    /// Indices of the records to deliver, at most the batch size.
    pub deliver: Vec<usize>,
}

/// Chooses the next batch. A record that matches no filter pattern is
/// skipped: "once your filter criteria processes a Kinesis or DynamoDB
/// record, the streams iterator advances past this record" ("Control which
/// events Lambda sends to your function",
/// https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html),
/// so filtered records never cost an invocation. The window ends with the
/// last delivered record, or with the last record read when the batch is
/// not full, so trailing filtered records are consumed too.
pub fn next_window(records: &[Value], filters: &[Value], batch_size: usize) -> Window {
    let mut deliver = Vec::new();
    for (index, record) in records.iter().enumerate() {
        if deliver.len() == batch_size {
            return Window { end: index, deliver };
        }
        if passes(filters, record) {
            deliver.push(index);
        }
    }
    Window {
        end: records.len(),
        deliver,
    }
}

/// Whether a record passes the mapping's filter: any pattern matches, or
/// there is no filter.
pub fn passes(filters: &[Value], record: &Value) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .any(|pattern| hybrid_counter::stream::filter::matches(pattern, record))
}

/// The shards of a stream a mapping may read now, as positions in
/// `lineage` (`(shard id, parent shard id)` in `DescribeStream` order): not
/// `finished` (closed and read to its end), and whose parent is finished or
/// no longer listed (its records expired). A child waits for its parent so
/// that an item's records reach the function in order across a split:
/// "the parent shard is processed before its children" (Lambda developer
/// guide, "Using AWS Lambda with Amazon DynamoDB", with-ddb.html; DynamoDB
/// Streams developer guide, "DynamoDB Streams and shard lineage").
pub fn readable_shards(lineage: &[(&str, Option<&str>)], finished: impl Fn(&str) -> bool) -> Vec<usize> {
    let listed: HashSet<&str> = lineage.iter().map(|(id, _)| *id).collect();
    lineage
        .iter()
        .enumerate()
        .filter(|(_, (id, parent))| {
            !finished(id) && parent.is_none_or(|parent| !listed.contains(parent) || finished(parent))
        })
        .map(|(at, _)| at)
        .collect()
}

/// What a stream invocation means for its batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamVerdict {
    /// Checkpoint after the batch.
    Success,
    /// Records before this index succeeded: checkpoint before it and retry
    /// from it.
    RetryFrom(usize),
    /// The whole batch failed. `function_error` is false when the function
    /// returned normally but its partial batch response was invalid.
    Failed { function_error: bool, reason: String },
}

/// Reads a stream invocation's outcome against the batch's sequence numbers,
/// per "Configuring partial batch response with DynamoDB and Lambda"
/// (https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html):
/// an empty or null `batchItemFailures`, or an empty or null response, is a
/// complete success; with several failures Lambda checkpoints at the lowest
/// sequence number and retries everything from it; a null or empty
/// `itemIdentifier`, or one under a wrong key, fails the whole batch. An
/// identifier naming no record of the batch is treated the same way (it
/// cannot be checkpointed at). Without `ReportBatchItemFailures` on the
/// mapping, Lambda ignores the response body.
pub fn stream_verdict(invocation: &Invocation, sequence_numbers: &[String], report_failures: bool) -> StreamVerdict {
    let response = match invocation {
        Invocation::FunctionError { error_type, body } => {
            return StreamVerdict::Failed {
                function_error: true,
                reason: format!("{error_type}: {}", error_message(body)),
            };
        }
        Invocation::Response(response) => response,
    };
    if !report_failures {
        return StreamVerdict::Success;
    }
    let identifiers = match item_identifiers(response) {
        Ok(ids) => ids,
        Err(reason) => {
            return StreamVerdict::Failed {
                function_error: false,
                reason,
            };
        }
    };
    let mut lowest: Option<usize> = None;
    for id in identifiers {
        match sequence_numbers.iter().position(|seq| *seq == id) {
            Some(index) => lowest = Some(lowest.map_or(index, |l| l.min(index))),
            None => {
                return StreamVerdict::Failed {
                    function_error: false,
                    reason: format!("batchItemFailures names {id:?}, which is not a sequence number of the batch"),
                };
            }
        }
    }
    match lowest {
        None => StreamVerdict::Success,
        Some(index) => StreamVerdict::RetryFrom(index),
    }
}

/// What an SQS invocation means for its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqsVerdict {
    /// Delete every message of the batch.
    DeleteAll,
    /// Delete all but these message ids; they return to the queue after
    /// the visibility timeout.
    DeleteAllBut(HashSet<String>),
    /// Delete nothing: the whole batch returns to the queue.
    DeleteNone { reason: String },
}

/// Reads an SQS invocation's outcome, per "Handling errors for an SQS event
/// source in Lambda"
/// (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html):
/// on a function error every message becomes visible again after the
/// visibility timeout; with `ReportBatchItemFailures` only the reported
/// messages do, and an empty, null or unknown `itemIdentifier` fails the
/// whole batch.
pub fn sqs_verdict(invocation: &Invocation, message_ids: &[String], report_failures: bool) -> SqsVerdict {
    let response = match invocation {
        Invocation::FunctionError { error_type, body } => {
            return SqsVerdict::DeleteNone {
                reason: format!("function error {error_type}: {}", error_message(body)),
            };
        }
        Invocation::Response(response) => response,
    };
    if !report_failures {
        return SqsVerdict::DeleteAll;
    }
    match item_identifiers(response) {
        Err(reason) => SqsVerdict::DeleteNone { reason },
        Ok(ids) if ids.is_empty() => SqsVerdict::DeleteAll,
        Ok(ids) => match ids.iter().find(|id| !message_ids.contains(id)) {
            Some(unknown) => SqsVerdict::DeleteNone {
                reason: format!("batchItemFailures names {unknown:?}, which is not a message of the batch"),
            },
            None => SqsVerdict::DeleteAllBut(ids.into_iter().collect()),
        },
    }
}

/// The `itemIdentifier`s of a partial batch response; an error when one is
/// missing, empty or not a string.
fn item_identifiers(response: &Value) -> Result<Vec<String>, String> {
    let failures = match response.get("batchItemFailures") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(failures)) => failures,
        Some(other) => return Err(format!("batchItemFailures is not a list: {other}")),
    };
    failures
        .iter()
        .map(|failure| match failure.get("itemIdentifier") {
            Some(Value::String(id)) if !id.is_empty() => Ok(id.clone()),
            _ => Err(format!(
                "a batchItemFailures entry has no usable itemIdentifier: {failure}"
            )),
        })
        .collect()
}

fn error_message(body: &Value) -> String {
    body.get("errorMessage")
        .and_then(Value::as_str)
        .map_or_else(|| body.to_string(), str::to_owned)
}

/// How many records at the start of a batch are older than `max_age` at
/// `now`, by their `ApproximateCreationDateTime` (records without one are
/// never too old). Records of a shard are in creation order, so the expired
/// ones are a prefix. Lambda discards such records instead of retrying
/// them and sends them to the on-failure destination with condition
/// `RecordAgeExceeded` (`MaximumRecordAgeInSeconds`,
/// https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html).
pub fn expired_prefix(created: &[Option<SystemTime>], now: SystemTime, max_age: Duration) -> usize {
    created
        .iter()
        .take_while(|at| at.is_some_and(|at| now.duration_since(at).is_ok_and(|age| age > max_age)))
        .count()
}

/// Whether another retry is allowed after `retries` retries already made
/// (`None`: retry forever, `MaximumRetryAttempts` -1).
pub fn may_retry(retries: u32, maximum_retry_attempts: Option<u32>) -> bool {
    maximum_retry_attempts.is_none_or(|max| retries < max)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_child_shard_is_read_only_after_its_parent_is_finished() {
        let lineage = [
            ("root", None),
            ("left", Some("root")),
            ("right", Some("root")),
            ("leaf", Some("left")),
        ];
        let readable = |finished: &[&str]| readable_shards(&lineage, |id| finished.contains(&id));
        assert_eq!(readable(&[]), [0]);
        assert_eq!(readable(&["root"]), [1, 2]);
        assert_eq!(readable(&["root", "left"]), [2, 3]);
        // A parent no longer listed (its records expired) holds nothing back.
        assert_eq!(readable_shards(&lineage[1..], |_| false), [0, 1]);
    }

    fn seqs(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("{}", 100 + i)).collect()
    }

    #[test]
    fn a_window_holds_at_most_the_batch_size_and_skips_filtered_records() {
        let filters = vec![json!({"eventName": ["INSERT"]})];
        let records: Vec<Value> = ["INSERT", "MODIFY", "INSERT", "INSERT", "REMOVE"]
            .iter()
            .map(|e| json!({ "eventName": e }))
            .collect();
        assert_eq!(
            next_window(&records, &filters, 2),
            Window {
                end: 3,
                deliver: vec![0, 2]
            }
        );
        assert_eq!(
            next_window(&records[3..], &filters, 2),
            Window {
                end: 2,
                deliver: vec![0]
            },
            "trailing filtered records are consumed with the batch"
        );
        assert_eq!(
            next_window(&records[4..], &filters, 2),
            Window {
                end: 1,
                deliver: vec![]
            },
            "only filtered records: consumed without an invocation"
        );
        assert_eq!(next_window(&records, &[], 10).deliver.len(), 5, "no filter: everything");
    }

    #[test]
    fn empty_or_absent_failures_are_a_complete_success() {
        for response in [
            json!(null),
            json!({}),
            json!({"batchItemFailures": []}),
            json!({"batchItemFailures": null}),
        ] {
            assert_eq!(
                stream_verdict(&Invocation::Response(response.clone()), &seqs(3), true),
                StreamVerdict::Success,
                "{response}"
            );
        }
    }

    #[test]
    fn the_lowest_failed_sequence_number_is_the_retry_point() {
        let response = json!({"batchItemFailures": [{"itemIdentifier": "103"}, {"itemIdentifier": "102"}]});
        assert_eq!(
            stream_verdict(&Invocation::Response(response), &seqs(4), true),
            StreamVerdict::RetryFrom(1)
        );
    }

    #[test]
    fn an_unusable_item_identifier_fails_the_whole_batch() {
        for failure in [
            json!({"itemIdentifier": ""}),
            json!({"itemIdentifier": null}),
            json!({"sequenceNumber": "101"}),
            json!({"itemIdentifier": "999"}),
        ] {
            let response = json!({ "batchItemFailures": [failure] });
            assert!(
                matches!(
                    stream_verdict(&Invocation::Response(response.clone()), &seqs(3), true),
                    StreamVerdict::Failed {
                        function_error: false,
                        ..
                    }
                ),
                "{response}"
            );
        }
    }

    #[test]
    fn without_report_batch_item_failures_the_response_is_ignored() {
        let response = json!({"batchItemFailures": [{"itemIdentifier": "101"}]});
        assert_eq!(
            stream_verdict(&Invocation::Response(response), &seqs(2), false),
            StreamVerdict::Success
        );
    }

    #[test]
    fn a_function_error_fails_the_batch() {
        assert!(matches!(
            stream_verdict(&Invocation::error("Boom", "poison"), &seqs(2), true),
            StreamVerdict::Failed {
                function_error: true,
                ..
            }
        ));
    }

    #[test]
    fn sqs_deletes_all_but_the_reported_messages_and_none_on_error() {
        let ids: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        let partial = json!({"batchItemFailures": [{"itemIdentifier": "b"}]});
        assert_eq!(
            sqs_verdict(&Invocation::Response(partial), &ids, true),
            SqsVerdict::DeleteAllBut(HashSet::from(["b".to_owned()]))
        );
        assert_eq!(
            sqs_verdict(&Invocation::Response(json!({})), &ids, true),
            SqsVerdict::DeleteAll
        );
        assert!(matches!(
            sqs_verdict(&Invocation::error("Boom", "x"), &ids, true),
            SqsVerdict::DeleteNone { .. }
        ));
        let unknown = json!({"batchItemFailures": [{"itemIdentifier": "zzz"}]});
        assert!(matches!(
            sqs_verdict(&Invocation::Response(unknown), &ids, true),
            SqsVerdict::DeleteNone { .. }
        ));
    }

    #[test]
    fn records_older_than_the_maximum_age_form_the_expired_prefix() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let at = |s: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        let created = [at(9_000), at(9_930), at(9_950), None];
        assert_eq!(expired_prefix(&created, now, Duration::from_secs(60)), 2);
        assert_eq!(expired_prefix(&created, now, Duration::from_secs(5_000)), 0);
        assert_eq!(expired_prefix(&[None, at(1)], now, Duration::from_secs(60)), 0);
    }

    #[test]
    fn retries_are_bounded_unless_minus_one() {
        assert!(may_retry(0, Some(1)));
        assert!(!may_retry(1, Some(1)));
        assert!(!may_retry(0, Some(0)));
        assert!(may_retry(u32::MAX - 1, None));
    }

    #[test]
    fn a_bisect_halves_a_part_and_both_halves_keep_what_was_spent() {
        let mut part = Part::new(vec![1, 2, 3, 4, 5]);
        part.retries = 2;
        part.invocations = 3;
        let (first, second) = part.bisect().unwrap();
        assert_eq!(first.records, [1, 2]);
        assert_eq!(second.records, [3, 4, 5]);
        assert_eq!((first.retries, first.invocations), (2, 3));
        assert_eq!((second.retries, second.invocations), (2, 3));
        let single = Part::new(vec![9]);
        assert_eq!(single.clone().bisect().unwrap_err(), single);
    }
}
