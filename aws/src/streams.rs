//! Reading a table's stream with the DynamoDB Streams API: the shards, and
//! the records of one shard from a position. Used wherever records are read
//! outside a Lambda event: replaying a DLQ range, the local event-source
//! runner and the tests. Records leave this module as the Lambda event's
//! records ([`EventRecord`], via [`event_record`]), the one form the core
//! decodes, filters and reports on.

use aws_lambda_events::event::dynamodb::{EventRecord, StreamRecord, StreamViewType};
use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use hybrid_counter::error::StoreError;
#[cfg(test)]
use hybrid_counter::stream::filter;
use hybrid_counter::stream::record::{sequence_cmp, sequence_number};

/// Where to start reading a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    TrimHorizon,
    /// Just past the shard's newest record: what is written from then on.
    Latest,
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
    } else if crate::dynamo::is_throttle(err.code()) {
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

    /// A shard iterator at `position` (`None` for a closed shard read past
    /// its end), to read later with [`ShardReader::read_from`]: an iterator
    /// taken at [`Position::Latest`] before some writes reads exactly what
    /// was written since. Iterators expire after 15 minutes.
    pub async fn iterator(&self, shard_id: &str, position: &Position) -> Result<Option<String>, StoreError> {
        let (kind, seq) = match position {
            Position::TrimHorizon => (ShardIteratorType::TrimHorizon, None),
            Position::Latest => (ShardIteratorType::Latest, None),
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
    ) -> Result<Vec<EventRecord>, StoreError> {
        let iterator = self.iterator(shard_id, position).await?;
        Ok(self.read_from(iterator, max_records).await?.0)
    }

    /// Reads records from `iterator` until the shard has no more records
    /// right now, or `max_records` were read; with the iterator to go on
    /// from (`None` once a closed shard is read through).
    pub async fn read_from(
        &self,
        mut iterator: Option<String>,
        max_records: usize,
    ) -> Result<(Vec<EventRecord>, Option<String>), StoreError> {
        let mut records = Vec::new();
        while let Some(current) = iterator.take() {
            if records.len() >= max_records {
                iterator = Some(current);
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
            iterator = out.next_shard_iterator;
            if page.is_empty() {
                break;
            }
            records.extend(page.iter().map(|r| event_record(r, &self.stream_arn)));
        }
        Ok((records, iterator))
    }
}

impl ShardReader {
    /// Reads the records of `shard_id` from `start` through `end` (both
    /// inclusive), across as many GetRecords pages as it takes.
    pub async fn read_range(&self, shard_id: &str, start: &str, end: &str) -> Result<Vec<EventRecord>, StoreError> {
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
            for record in page.iter().map(|r| event_record(r, &self.stream_arn)) {
                match sequence_cmp(sequence_number(&record), end) {
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

/// A Streams API record as the Lambda event source mapping delivers it
/// (`Records[n]` of a DynamoDB stream event), so locally read records go
/// through exactly the path Lambda's do. The images convert through
/// serde_dynamo's item type, which both crates share.
pub fn event_record(record: &Record, event_source_arn: &str) -> EventRecord {
    let image = |map: Option<&std::collections::HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| {
        map.map(|m| serde_dynamo::Item::from(m.clone())).unwrap_or_default()
    };
    let mut change = StreamRecord::default();
    if let Some(data) = record.dynamodb() {
        change.approximate_creation_date_time = data
            .approximate_creation_date_time()
            .and_then(|at| chrono::DateTime::from_timestamp_millis(at.to_millis().ok()?))
            .unwrap_or_default();
        change.keys = image(data.keys.as_ref());
        change.new_image = image(data.new_image.as_ref());
        change.old_image = image(data.old_image.as_ref());
        change.sequence_number = data.sequence_number().map(str::to_owned);
        change.size_bytes = data.size_bytes().unwrap_or_default();
        change.stream_view_type = data.stream_view_type().and_then(|view| {
            use aws_sdk_dynamodbstreams::types::StreamViewType as Sdk;
            match view {
                Sdk::NewAndOldImages => Some(StreamViewType::NewAndOldImages),
                Sdk::NewImage => Some(StreamViewType::NewImage),
                Sdk::OldImage => Some(StreamViewType::OldImage),
                Sdk::KeysOnly => Some(StreamViewType::KeysOnly),
                _ => None,
            }
        });
    }
    let mut event = EventRecord::default();
    event.change = change;
    event.event_id = record.event_id().unwrap_or_default().to_owned();
    event.event_name = record.event_name().map(|e| e.as_str()).unwrap_or_default().to_owned();
    event.event_version = Some(record.event_version().unwrap_or("1.1").to_owned());
    event.event_source = Some(record.event_source().unwrap_or("aws:dynamodb").to_owned());
    event.aws_region = record.aws_region().unwrap_or_default().to_owned();
    event.event_source_arn = Some(event_source_arn.to_owned());
    event
}

/// Empty `GetRecords` pages in a row after which [`ShardReader::read_range`]
/// stops looking for the end of its range.
const MAX_EMPTY_PAGES: u32 = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_mocks::mock_client;
    use hybrid_counter::stream::{Change, ChangeRecord};

    use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput;
    use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorOutput;
    use aws_smithy_mocks::{Rule, mock};

    fn record(seq: &str) -> Record {
        Record::builder()
            .dynamodb(
                aws_sdk_dynamodbstreams::types::StreamRecord::builder()
                    .sequence_number(seq)
                    .build(),
            )
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
        let client = mock_client!(aws_sdk_dynamodbstreams, rules);
        ShardReader::new(client, "arn:stream")
    }

    fn seqs(records: &[EventRecord]) -> Vec<&str> {
        records.iter().map(sequence_number).collect()
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
    async fn replay_of(rules: &[Rule]) -> Result<hybrid_counter::stream::BatchReport, crate::replay::ReplayError> {
        let store = hybrid_counter::memory::MemoryStore::new();
        let processor = hybrid_counter::stream::Processor::new(store);
        let info = crate::replay::StreamBatchInfo {
            shard_id: "shard-1".into(),
            start_sequence_number: "100".into(),
            end_sequence_number: "102".into(),
            approximate_arrival_of_first_record: String::new(),
            approximate_arrival_of_last_record: String::new(),
            batch_size: 3,
            stream_arn: "arn:stream".into(),
        };
        let records = reader(rules).read_range("shard-1", "100", "102").await;
        crate::replay::replay_records(&processor, &info, records, 0).await
    }

    #[tokio::test]
    async fn a_replay_that_did_not_read_through_its_range_is_a_retryable_failure() {
        use crate::replay::ReplayError;
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
    use aws_smithy_types::DateTime;
    use std::collections::HashMap;

    #[test]
    fn a_streams_api_record_converts_to_the_lambda_record_and_round_trips_through_its_json() {
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
                    .approximate_creation_date_time(DateTime::from_millis(1_700_000_000_500))
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
        let event = event_record(&record, "arn:stream");
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json["dynamodb"]["NewImage"]["counter_processed"],
            serde_json::json!({"BOOL": false})
        );
        // Lambda's JSON carries whole seconds (rounded down), as Lambda sends them.
        assert_eq!(
            json["dynamodb"]["ApproximateCreationDateTime"],
            serde_json::json!(1_700_000_000)
        );
        assert_eq!(
            event.change.approximate_creation_date_time.timestamp_millis(),
            1_700_000_000_500
        );
        assert_eq!(
            json["dynamodb"]["StreamViewType"],
            serde_json::json!("NEW_AND_OLD_IMAGES")
        );
        assert_eq!(json["eventSourceARN"], serde_json::json!("arn:stream"));
        assert!(filter::passes(&json));
        // Through Lambda's JSON and back: the same record, decoded the same.
        let mut typed: EventRecord = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(typed.change.approximate_creation_date_time.timestamp(), 1_700_000_000);
        typed.change.approximate_creation_date_time = event.change.approximate_creation_date_time;
        assert_eq!(typed, event);
        let via_json = ChangeRecord::from_json(&json).unwrap();
        let via_event = ChangeRecord::from_lambda(&event).unwrap();
        assert_eq!(via_json, via_event);
        assert!(matches!(via_event.change, Change::Insert { .. }));
    }
}
