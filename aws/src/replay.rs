//! Replaying a failed stream batch from its on-failure record (DESIGN §4).
//!
//! For a stream source, the event source mapping's on-failure destination
//! receives no records, only where they were: shard, first and last sequence
//! number, stream ARN. The DLQ reprocessor reads that range back with the
//! Streams API and runs it through the same [`Processor`] as the stream
//! handler; every write is idempotent, so a replay of records that were in
//! fact processed changes nothing.
//!
//! A message that can never be replayed (not an on-failure record, or one
//! of another stream than the stack's) is a permanent failure
//! ([`ReplayError::is_permanent`]): the reprocessor sends it to DLQ2 at
//! once with its reason in the message attribute [`REASON_ATTRIBUTE`],
//! instead of failing it `maxReceiveCount` times (DESIGN §5b).

use aws_lambda_events::event::dynamodb::EventRecord;
use hybrid_counter::EpochMillis;
use hybrid_counter::error::StoreError;
use hybrid_counter::store::StreamStore;
use hybrid_counter::stream::record::{created_at, sequence_number};
use hybrid_counter::stream::{BatchReport, ChangeRecord, Processor, filter};
use serde::{Deserialize, Serialize};

use crate::streams::ShardReader;

/// The message Lambda sends to an on-failure destination for a stream
/// event source (`condition` is e.g. `RetryAttemptsExhausted` or
/// `RecordAgeExceeded`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnFailureRecord {
    pub request_context: RequestContext,
    pub response_context: ResponseContext,
    pub version: String,
    pub timestamp: String,
    #[serde(rename = "DDBStreamBatchInfo")]
    pub batch_info: StreamBatchInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContext {
    pub request_id: String,
    pub function_arn: String,
    pub condition: String,
    pub approximate_invoke_count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseContext {
    pub status_code: u16,
    pub executed_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_error: Option<String>,
}

/// `DDBStreamBatchInfo`: where the failed batch lies in the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamBatchInfo {
    pub shard_id: String,
    pub start_sequence_number: String,
    pub end_sequence_number: String,
    pub approximate_arrival_of_first_record: String,
    pub approximate_arrival_of_last_record: String,
    pub batch_size: u32,
    pub stream_arn: String,
}

/// The SQS message attribute (String) that carries why a message in DLQ2
/// was sent there at once: the [`ReplayError`] of a permanent failure.
pub const REASON_ATTRIBUTE: &str = "hck-permanent-failure";

/// The SQS message attribute (String) that carries the DLQ1 message id of
/// a permanent failure the reprocessor re-sent to DLQ2: the re-sent message
/// gets a new id, and this one is what the reprocessor's log and the
/// operator's alarm investigation saw.
pub const ORIGINAL_MESSAGE_ID_ATTRIBUTE: &str = "hck-original-message-id";

/// Why a message could not be replayed. A permanent one
/// ([`ReplayError::is_permanent`]) goes to DLQ2 at once; every other one
/// leaves the message in the queue (partial batch failure), to be retried
/// and, after `maxReceiveCount` receives, moved to DLQ2 by SQS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("not an on-failure record of a DynamoDB stream: {0}")]
    NotAnOnFailureRecord(String),
    #[error("an on-failure record of stream {stream_arn}, not of the stack's stream {expected}")]
    WrongStream { stream_arn: String, expected: String },
    #[error(
        "records {start}..={end} of shard {shard} are no longer in the stream ({why}); run `counterctl audit --repair` for the affected scopes"
    )]
    LeftTheStream {
        shard: String,
        start: String,
        end: String,
        why: String,
    },
    #[error(
        "the read of records {start}..={end} of shard {shard} stopped at {read_through} before the range's end; \
         nothing was processed and the message is retried"
    )]
    Incomplete {
        shard: String,
        start: String,
        end: String,
        /// The last sequence number read.
        read_through: String,
    },
    #[error("the failed-batch object {object} does not exist (expired by the bucket's lifecycle rule, or deleted)")]
    ObjectMissing { object: String },
    #[error("the object {object} is not a failed batch of a DynamoDB stream: {why}")]
    NotAFailedBatchObject { object: String, why: String },
    #[error("the object {object} is not one of the stack's failed batches: {why}")]
    ForeignObject { object: String, why: String },
    #[error("the object {object} holds {size} bytes, more than a failed batch can ({max} bytes): not read")]
    ObjectTooLarge { object: String, size: u64, max: u64 },
    #[error("could not read the failed-batch object {object}: {why}")]
    ObjectStore { object: String, why: String },
    #[error("could not read the stream: {0}")]
    Stream(String),
    #[error("replay stopped at sequence number {sequence_number}: {reason}")]
    Processing { sequence_number: String, reason: String },
}

impl ReplayError {
    /// Whether the same message can never succeed, however often it is
    /// retried: it cannot be parsed, it names another stream than the one
    /// the stack's mapping reads, or the S3 object it names is outside the
    /// stack's failed batches, too large, gone or not a failed batch
    /// ([`crate::failed_batch`]; S3 reads are strongly
    /// consistent, so an object that is not there now never will be).
    /// Everything else may succeed later: an S3 read that failed,
    /// throttling, a store or stream that does not answer, a read that
    /// stopped short ([`ReplayError::Incomplete`]), a failed write. A range
    /// that seems to have left the stream ([`ReplayError::LeftTheStream`])
    /// is retried too: an expired iterator or a read that found only empty
    /// pages looks the same as a trimmed range, and the retries cost
    /// nothing but time.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::NotAnOnFailureRecord(_)
            | Self::WrongStream { .. }
            | Self::ObjectMissing { .. }
            | Self::NotAFailedBatchObject { .. }
            | Self::ForeignObject { .. }
            | Self::ObjectTooLarge { .. } => true,
            Self::LeftTheStream { .. }
            | Self::Incomplete { .. }
            | Self::ObjectStore { .. }
            | Self::Stream(_)
            | Self::Processing { .. } => false,
        }
    }
}

impl OnFailureRecord {
    /// The record Lambda writes when a batch of `records` (in shard order,
    /// not empty) from `shard_id` is given up on for `condition`.
    pub fn for_batch(
        function_arn: &str,
        condition: &str,
        invoke_count: u32,
        stream_arn: &str,
        shard_id: &str,
        records: &[EventRecord],
        now: std::time::SystemTime,
    ) -> Self {
        let iso = |at: std::time::SystemTime| {
            chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        };
        let seq = |r: Option<&EventRecord>| r.map(sequence_number).unwrap_or_default().to_owned();
        let arrival = |r: Option<&EventRecord>| r.map(|r| iso(created_at(r))).unwrap_or_default();
        Self {
            request_context: RequestContext {
                request_id: uuid::Uuid::new_v4().to_string(),
                function_arn: function_arn.to_owned(),
                condition: condition.to_owned(),
                approximate_invoke_count: invoke_count,
            },
            response_context: ResponseContext {
                status_code: 200,
                executed_version: "$LATEST".to_owned(),
                function_error: Some("Unhandled".to_owned()),
            },
            version: "1.0".to_owned(),
            timestamp: iso(now),
            batch_info: StreamBatchInfo {
                shard_id: shard_id.to_owned(),
                start_sequence_number: seq(records.first()),
                end_sequence_number: seq(records.last()),
                approximate_arrival_of_first_record: arrival(records.first()),
                approximate_arrival_of_last_record: arrival(records.last()),
                batch_size: u32::try_from(records.len()).unwrap_or(u32::MAX),
                stream_arn: stream_arn.to_owned(),
            },
        }
    }

    /// Parses an SQS message body.
    pub fn from_body(body: &str) -> Result<Self, ReplayError> {
        serde_json::from_str(body).map_err(|e| ReplayError::NotAnOnFailureRecord(e.to_string()))
    }

    /// The record, if it describes a batch of `stream_arn`; otherwise
    /// [`ReplayError::WrongStream`].
    pub fn of_stream(self, stream_arn: &str) -> Result<Self, ReplayError> {
        if self.batch_info.stream_arn != stream_arn {
            return Err(ReplayError::WrongStream {
                stream_arn: self.batch_info.stream_arn,
                expected: stream_arn.to_owned(),
            });
        }
        Ok(self)
    }
}

/// Reads the batch's range back from the stream and processes it.
pub async fn replay<S: StreamStore>(
    processor: &Processor<S>,
    streams: &aws_sdk_dynamodbstreams::Client,
    info: &StreamBatchInfo,
    now: EpochMillis,
) -> Result<BatchReport, ReplayError> {
    let reader = ShardReader::new(streams.clone(), info.stream_arn.clone());
    let records = reader
        .read_range(&info.shard_id, &info.start_sequence_number, &info.end_sequence_number)
        .await;
    replay_records(processor, info, records, now).await
}

/// Processes the records read back for `info` (the part of [`replay`]
/// after the read, shared with the simulation, which reads an in-memory
/// stream): a range whose first record is gone is [`ReplayError::LeftTheStream`];
/// a read that did not reach the range's end record (a reader that gave up
/// on empty pages, or a shard taken for closed) is [`ReplayError::Incomplete`]
/// and processes nothing, so the message is retried rather than deleted with
/// part of its range never counted.
pub async fn replay_records<S: StreamStore>(
    processor: &Processor<S>,
    info: &StreamBatchInfo,
    records: Result<Vec<EventRecord>, StoreError>,
    now: EpochMillis,
) -> Result<BatchReport, ReplayError> {
    let left = |why: String| ReplayError::LeftTheStream {
        shard: info.shard_id.clone(),
        start: info.start_sequence_number.clone(),
        end: info.end_sequence_number.clone(),
        why,
    };
    let records = records.map_err(|err| match err {
        StoreError::Gone(why) => left(why),
        other => ReplayError::Stream(other.to_string()),
    })?;
    let first = records.first().map(sequence_number);
    if first != Some(info.start_sequence_number.as_str()) {
        return Err(left(format!(
            "the first record read is {first:?}, not {}",
            info.start_sequence_number
        )));
    }
    let last = records.last().map(sequence_number);
    if last != Some(info.end_sequence_number.as_str()) {
        return Err(ReplayError::Incomplete {
            shard: info.shard_id.clone(),
            start: info.start_sequence_number.clone(),
            end: info.end_sequence_number.clone(),
            read_through: last.unwrap_or_default().to_owned(),
        });
    }
    process_range(processor, &records, now).await
}

/// Processes the records of a failed batch, wherever they were found (read
/// back from the stream, or kept in an S3 object): the one path of every
/// replay, with the stream handler's idempotent [`Processor`].
pub(crate) async fn process_range<S: StreamStore>(
    processor: &Processor<S>,
    records: &[EventRecord],
    now: EpochMillis,
) -> Result<BatchReport, ReplayError> {
    // The batch only held records that passed the mapping's filter.
    // Collected before the await so the future stays `Send`.
    let decoded: Vec<_> = records
        .iter()
        .filter(|r| filter::passes_record(r))
        .map(ChangeRecord::from_lambda)
        .collect();
    let report = processor.process(decoded, now).await;
    match (&report.failed_sequence_number, &report.failure_reason) {
        (None, None) => Ok(report),
        (seq, reason) => Err(ReplayError::Processing {
            sequence_number: seq.clone().unwrap_or_default(),
            reason: reason.clone().unwrap_or_default(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The on-failure record as documented for DynamoDB Streams sources.
    const FIXTURE: &str = include_str!("fixtures/on_failure_record.json");

    #[test]
    fn the_documented_on_failure_record_round_trips() {
        let record = OnFailureRecord::from_body(FIXTURE).unwrap();
        assert_eq!(record.request_context.condition, "RetryAttemptsExhausted");
        assert_eq!(record.batch_info.batch_size, 1);
        assert_eq!(record.batch_info.start_sequence_number, "800000000003126276362");
        let back = serde_json::to_value(&record).unwrap();
        let original: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        assert_eq!(back, original);
    }

    #[test]
    fn garbage_bodies_are_rejected_with_a_reason() {
        for body in ["", "null", "{}", "{\"DDBStreamBatchInfo\": 3}", "not json"] {
            let err = OnFailureRecord::from_body(body).unwrap_err();
            assert!(matches!(err, ReplayError::NotAnOnFailureRecord(_)), "{body}: {err}");
            assert!(err.is_permanent(), "{body}: {err}");
        }
    }

    #[test]
    fn a_record_of_another_stream_is_a_permanent_failure_naming_both_streams() {
        let ours = OnFailureRecord::from_body(FIXTURE).unwrap().batch_info.stream_arn;
        let record = OnFailureRecord::from_body(FIXTURE)
            .and_then(|r| r.of_stream(&ours))
            .unwrap();
        assert_eq!(record.batch_info.stream_arn, ours);
        let other = "arn:aws:dynamodb:us-east-1:123456789012:table/other/stream/2026-01-01T00:00:00.000";
        let err = OnFailureRecord::from_body(FIXTURE)
            .and_then(|r| r.of_stream(other))
            .unwrap_err();
        assert_eq!(
            err,
            ReplayError::WrongStream {
                stream_arn: ours.clone(),
                expected: other.to_owned()
            }
        );
        assert!(err.is_permanent());
        assert!(
            err.to_string().contains(&ours) && err.to_string().contains(other),
            "{err}"
        );
        // Garbage stays garbage, whatever stream is expected.
        assert!(matches!(
            OnFailureRecord::from_body("{").and_then(|r| r.of_stream(other)),
            Err(ReplayError::NotAnOnFailureRecord(_))
        ));
    }

    #[test]
    fn failures_that_may_pass_later_keep_their_retries() {
        let range = || ("shardId-1".to_owned(), "100".to_owned(), "102".to_owned());
        let (shard, start, end) = range();
        let retryable = [
            ReplayError::Incomplete {
                shard,
                start,
                end,
                read_through: "101".into(),
            },
            ReplayError::Stream("ThrottlingException: slow down".into()),
            ReplayError::Stream("service unavailable".into()),
            ReplayError::Processing {
                sequence_number: "101".into(),
                reason: "TransactionConflict".into(),
            },
            {
                let (shard, start, end) = range();
                ReplayError::LeftTheStream {
                    shard,
                    start,
                    end,
                    why: "TrimmedDataAccessException".into(),
                }
            },
        ];
        for err in retryable {
            assert!(!err.is_permanent(), "{err}");
        }
    }

    /// What the reprocessor reads: a read that stops short or a store that
    /// fails is retryable, the classification of [`replay_records`]' own
    /// errors included.
    #[tokio::test]
    async fn replay_errors_from_the_store_are_retryable() {
        use hybrid_counter::memory::MemoryStore;
        let record = OnFailureRecord::from_body(FIXTURE).unwrap();
        let processor = Processor::new(MemoryStore::new());
        for err in [
            StoreError::Transient("ThrottlingException".into()),
            StoreError::Unavailable("connection refused".into()),
        ] {
            let outcome = replay_records(&processor, &record.batch_info, Err(err), 0).await;
            let err = outcome.unwrap_err();
            assert!(matches!(err, ReplayError::Stream(_)), "{err}");
            assert!(!err.is_permanent(), "{err}");
        }
        let outcome = replay_records(&processor, &record.batch_info, Ok(Vec::new()), 0).await;
        assert!(!outcome.unwrap_err().is_permanent());
    }
}
