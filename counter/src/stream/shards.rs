//! Reading a table's stream with the DynamoDB Streams API: the shards, and
//! the records of one shard from a position. Used wherever records are read
//! outside a Lambda event: replaying a DLQ range, the local event-source
//! runner and the tests.

use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};

use crate::error::StoreError;

/// Where to start reading a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    TrimHorizon,
    At(String),
    After(String),
}

/// One shard of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    pub shard_id: String,
    pub parent_shard_id: Option<String>,
    /// Set once the shard is closed (it will get no more records).
    pub ending_sequence_number: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ShardReader {
    client: Client,
    stream_arn: String,
}

/// Whether a Streams API error code means the records (or the stream) are
/// gone for good, so retrying cannot help.
pub fn is_gone(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("TrimmedDataAccessException" | "ResourceNotFoundException" | "ExpiredIteratorException")
    )
}

fn unavailable<E, R>(err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let text = DisplayErrorContext(&err).to_string();
    if is_gone(err.code()) {
        StoreError::Gone(text)
    } else if crate::store::dynamo::is_throttle(err.code()) {
        StoreError::Transient(text)
    } else {
        StoreError::Unavailable(text)
    }
}

impl ShardReader {
    pub fn new(client: Client, stream_arn: impl Into<String>) -> Self {
        Self {
            client,
            stream_arn: stream_arn.into(),
        }
    }

    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    /// A shard iterator at `position`.
    async fn iterator(&self, shard_id: &str, position: &Position) -> Result<Option<String>, StoreError> {
        let (kind, seq) = match position {
            Position::TrimHorizon => (ShardIteratorType::TrimHorizon, None),
            Position::At(seq) => (ShardIteratorType::AtSequenceNumber, Some(seq.clone())),
            Position::After(seq) => (ShardIteratorType::AfterSequenceNumber, Some(seq.clone())),
        };
        Ok(self
            .client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard_id)
            .shard_iterator_type(kind)
            .set_sequence_number(seq)
            .send()
            .await
            .map_err(unavailable)?
            .shard_iterator)
    }

    /// Every shard of the stream (DescribeStream, across pages).
    pub async fn shards(&self) -> Result<Vec<Shard>, StoreError> {
        let mut shards = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.clone())
                .send()
                .await
                .map_err(unavailable)?;
            let Some(description) = out.stream_description else {
                break;
            };
            for shard in description.shards() {
                shards.push(Shard {
                    shard_id: shard.shard_id().unwrap_or_default().to_owned(),
                    parent_shard_id: shard.parent_shard_id().map(str::to_owned),
                    ending_sequence_number: shard
                        .sequence_number_range()
                        .and_then(|r| r.ending_sequence_number())
                        .map(str::to_owned),
                });
            }
            match description.last_evaluated_shard_id {
                Some(next) if Some(&next) != start.as_ref() => start = Some(next),
                _ => break,
            }
        }
        Ok(shards)
    }

    /// Reads records of `shard_id` from `position` until the shard has no
    /// more records right now, or `max_records` were read.
    pub async fn read(
        &self,
        shard_id: &str,
        position: &Position,
        max_records: usize,
    ) -> Result<Vec<Record>, StoreError> {
        let mut iterator = self.iterator(shard_id, position).await?;
        let mut records = Vec::new();
        while let Some(current) = iterator.take() {
            if records.len() >= max_records {
                break;
            }
            let limit = i32::try_from((max_records - records.len()).min(1000)).unwrap_or(1000);
            let out = self
                .client
                .get_records()
                .shard_iterator(current)
                .limit(limit)
                .send()
                .await
                .map_err(unavailable)?;
            let page = out.records.unwrap_or_default();
            if page.is_empty() {
                break;
            }
            records.extend(page);
            iterator = out.next_shard_iterator;
        }
        Ok(records)
    }
}

impl ShardReader {
    /// Reads the records of `shard_id` from `start` through `end` (both
    /// inclusive), across as many GetRecords pages as it takes.
    pub async fn read_range(&self, shard_id: &str, start: &str, end: &str) -> Result<Vec<Record>, StoreError> {
        let mut iterator = self.iterator(shard_id, &Position::At(start.to_owned())).await?;
        let mut records = Vec::new();
        // GetRecords may answer an empty page for a part of the shard that
        // holds no records before later pages that do: empty pages are
        // followed, up to MAX_EMPTY_PAGES in a row (an open shard's tip
        // answers empty pages for ever).
        let mut empty_pages = 0;
        while let Some(current) = iterator.take() {
            let out = self
                .client
                .get_records()
                .shard_iterator(current)
                .send()
                .await
                .map_err(unavailable)?;
            let page = out.records.unwrap_or_default();
            if page.is_empty() {
                empty_pages += 1;
                if empty_pages >= MAX_EMPTY_PAGES {
                    break;
                }
            } else {
                empty_pages = 0;
            }
            for record in page {
                let seq = record.dynamodb().and_then(|d| d.sequence_number()).unwrap_or_default();
                match super::replay::sequence_cmp(seq, end) {
                    std::cmp::Ordering::Greater => return Ok(records),
                    std::cmp::Ordering::Equal => {
                        records.push(record);
                        return Ok(records);
                    }
                    std::cmp::Ordering::Less => records.push(record),
                }
            }
            iterator = out.next_shard_iterator;
        }
        Ok(records)
    }
}

/// Renders a Streams API record as the Lambda event source mapping delivers
/// it (`Records[n]` of a DynamoDB stream event), so locally replayed records
/// go through exactly the JSON path Lambda uses.
pub fn to_lambda_record(record: &Record, event_source_arn: &str) -> serde_json::Value {
    use serde_json::{Value, json};
    let image = |map: Option<&std::collections::HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| {
        map.map(|m| serde_json::to_value(serde_dynamo::Item::from(m.clone())).unwrap_or(Value::Null))
    };
    let mut dynamodb = serde_json::Map::new();
    if let Some(data) = record.dynamodb() {
        if let Some(at) = data.approximate_creation_date_time() {
            dynamodb.insert("ApproximateCreationDateTime".into(), json!(at.as_secs_f64()));
        }
        for (name, value) in [
            ("Keys", image(data.keys.as_ref())),
            ("NewImage", image(data.new_image.as_ref())),
            ("OldImage", image(data.old_image.as_ref())),
        ] {
            if let Some(value) = value {
                dynamodb.insert(name.into(), value);
            }
        }
        if let Some(seq) = data.sequence_number() {
            dynamodb.insert("SequenceNumber".into(), json!(seq));
        }
        dynamodb.insert("SizeBytes".into(), json!(data.size_bytes().unwrap_or_default()));
        if let Some(view) = data.stream_view_type() {
            dynamodb.insert("StreamViewType".into(), json!(view.as_str()));
        }
    }
    json!({
        "eventID": record.event_id().unwrap_or_default(),
        "eventName": record.event_name().map(|e| e.as_str()).unwrap_or_default(),
        "eventVersion": record.event_version().unwrap_or("1.1"),
        "eventSource": record.event_source().unwrap_or("aws:dynamodb"),
        "awsRegion": record.aws_region().unwrap_or_default(),
        "eventSourceARN": event_source_arn,
        "dynamodb": Value::Object(dynamodb),
    })
}

/// Empty `GetRecords` pages in a row after which [`ShardReader::read_range`]
/// stops looking for the end of its range.
const MAX_EMPTY_PAGES: u32 = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{Change, ChangeRecord};

    use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput;
    use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorOutput;
    use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};

    fn record(seq: &str) -> Record {
        Record::builder()
            .dynamodb(StreamRecord::builder().sequence_number(seq).build())
            .build()
    }

    fn iterator_rule() -> Rule {
        mock!(Client::get_shard_iterator)
            .then_output(|| GetShardIteratorOutput::builder().shard_iterator("it0").build())
    }

    /// A GetRecords page for iterator `from`, with `next` as the next
    /// iterator (`None`: the shard is closed and read to its end).
    fn page(from: &'static str, next: Option<&'static str>, seqs: &'static [&'static str]) -> Rule {
        mock!(Client::get_records)
            .match_requests(move |r| r.shard_iterator() == Some(from))
            .then_output(move || {
                GetRecordsOutput::builder()
                    .set_records(Some(seqs.iter().map(|s| record(s)).collect()))
                    .set_next_shard_iterator(next.map(str::to_owned))
                    .build()
            })
    }

    /// A reader whose Streams client answers `rules` in order.
    fn reader(rules: &[Rule]) -> ShardReader {
        let interceptor = rules.iter().fold(
            MockResponseInterceptor::new().rule_mode(RuleMode::Sequential),
            |interceptor, rule| interceptor.with_rule(rule),
        );
        let client = Client::from_conf(
            aws_sdk_dynamodbstreams::Config::builder()
                .with_test_defaults()
                .region(aws_sdk_dynamodbstreams::config::Region::new("us-east-1"))
                .http_client(create_mock_http_client())
                .interceptor(interceptor)
                .build(),
        );
        ShardReader::new(client, "arn:stream")
    }

    fn seqs(records: &[Record]) -> Vec<&str> {
        records
            .iter()
            .filter_map(|r| r.dynamodb().and_then(|d| d.sequence_number()))
            .collect()
    }

    #[tokio::test]
    async fn a_range_read_follows_empty_pages_and_stops_at_its_end() {
        // Two empty pages, then the range 100..=102 across two pages; the
        // page after the end is never asked for.
        let rules = [
            iterator_rule(),
            page("it0", Some("it1"), &[]),
            page("it1", Some("it2"), &[]),
            page("it2", Some("it3"), &["100", "101"]),
            page("it3", Some("it4"), &["102", "103"]),
        ];
        let records = reader(&rules).read_range("shard-1", "100", "102").await.unwrap();
        assert_eq!(seqs(&records), ["100", "101", "102"]);
        assert_eq!(rules[4].num_calls(), 1);
    }

    /// A replay over a read that stopped short of its range's end.
    async fn replay_of(rules: &[Rule]) -> Result<crate::stream::BatchReport, crate::stream::replay::ReplayError> {
        let store = crate::store::memory::MemoryStore::new();
        let processor = crate::stream::Processor::new(store);
        let info = crate::stream::replay::StreamBatchInfo {
            shard_id: "shard-1".into(),
            start_sequence_number: "100".into(),
            end_sequence_number: "102".into(),
            approximate_arrival_of_first_record: String::new(),
            approximate_arrival_of_last_record: String::new(),
            batch_size: 3,
            stream_arn: "arn:stream".into(),
        };
        let records = reader(rules).read_range("shard-1", "100", "102").await;
        crate::stream::replay::replay_records(&processor, &info, records, 0).await
    }

    #[tokio::test]
    async fn a_replay_that_did_not_read_through_its_range_is_a_retryable_failure() {
        use crate::stream::replay::ReplayError;
        // The shard looks closed after 101 (no next iterator).
        let closed = [iterator_rule(), page("it0", None, &["100", "101"])];
        let err = replay_of(&closed).await.unwrap_err();
        assert!(
            matches!(&err, ReplayError::Incomplete { read_through, end, .. } if read_through == "101" && end == "102"),
            "{err}"
        );
        assert!(err.to_string().contains("before the range's end"), "{err}");
        // The reader gives up after MAX_EMPTY_PAGES empty pages in a row.
        let mut empty = vec![iterator_rule(), page("it0", Some("e0"), &["100"])];
        let names: Vec<&'static str> = (0..=MAX_EMPTY_PAGES)
            .map(|n| &*Box::leak(format!("e{n}").into_boxed_str()))
            .collect();
        for pair in names.windows(2) {
            empty.push(page(pair[0], Some(pair[1]), &[]));
        }
        let err = replay_of(&empty).await.unwrap_err();
        assert!(
            matches!(&err, ReplayError::Incomplete { read_through, .. } if read_through == "100"),
            "{err}"
        );
        // A range whose first record is gone stays LeftTheStream.
        let trimmed = [iterator_rule(), page("it0", None, &["101", "102"])];
        assert!(matches!(
            replay_of(&trimmed).await,
            Err(ReplayError::LeftTheStream { .. })
        ));
    }

    use aws_sdk_dynamodbstreams::types::{AttributeValue as Av, OperationType, StreamRecord, StreamViewType};
    use std::collections::HashMap;

    #[test]
    fn lambda_rendering_round_trips_through_the_lambda_event_type() {
        let image = HashMap::from([
            ("scope".to_owned(), Av::S("acct".into())),
            ("id".to_owned(), Av::S("w1".into())),
            ("incarnation".to_owned(), Av::S("i1".into())),
            ("counter_processed".to_owned(), Av::Bool(false)),
            ("tags".to_owned(), Av::Ss(vec!["a".into()])),
            ("created_at".to_owned(), Av::N("17".into())),
        ]);
        let record = Record::builder()
            .event_id("ev1")
            .event_name(OperationType::Insert)
            .aws_region("us-east-1")
            .dynamodb(
                StreamRecord::builder()
                    .sequence_number("000100")
                    .size_bytes(42)
                    .stream_view_type(StreamViewType::NewAndOldImages)
                    .set_keys(Some(HashMap::from([
                        ("scope".to_owned(), Av::S("acct".into())),
                        ("id".to_owned(), Av::S("w1".into())),
                    ])))
                    .set_new_image(Some(image))
                    .build(),
            )
            .build();
        let json = to_lambda_record(&record, "arn:stream");
        assert_eq!(
            json["dynamodb"]["NewImage"]["counter_processed"],
            serde_json::json!({"BOOL": false})
        );
        let typed: aws_lambda_events::event::dynamodb::EventRecord = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(typed.event_source_arn.as_deref(), Some("arn:stream"));
        let via_lambda = ChangeRecord::from_json(&json).unwrap();
        let via_api = ChangeRecord::from_streams_api(&record).unwrap();
        assert_eq!(via_lambda, via_api);
        assert!(matches!(via_api.change, Change::Insert { .. }));
    }
}
