//! Replaying a failed stream batch from its on-failure record (DESIGN §4).
//!
//! For a stream source, the event source mapping's on-failure destination
//! receives no records, only where they were: shard, first and last sequence
//! number, stream ARN. The DLQ reprocessor reads that range back with the
//! Streams API and runs it through the same [`Processor`] as the stream
//! handler; every write is idempotent, so a replay of records that were in
//! fact processed changes nothing.

use aws_lambda_events::event::dynamodb::EventRecord;
use hybrid_counter::EpochMillis;
use hybrid_counter::error::StoreError;
use hybrid_counter::store::Store;
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

/// Why a message could not be replayed. Every variant leaves the message
/// in the queue (partial batch failure), so after `maxReceiveCount` it
/// reaches DLQ2 for an operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("not an on-failure record of a DynamoDB stream: {0}")]
    NotAnOnFailureRecord(String),
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
    #[error("could not read the stream: {0}")]
    Stream(String),
    #[error("replay stopped at sequence number {sequence_number}: {reason}")]
    Processing { sequence_number: String, reason: String },
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
}

/// Reads the batch's range back from the stream and processes it.
pub async fn replay<S: Store>(
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
pub async fn replay_records<S: Store>(
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
        }
    }
}
