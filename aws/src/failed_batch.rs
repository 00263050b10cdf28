//! Failed batches kept with their records (DESIGN §5b, stack parameter
//! `FailedBatchRecords`).
//!
//! With `pointer`, the stream mapping's on-failure destination is DLQ1 and
//! a DLQ1 message is the [`OnFailureRecord`] itself: a sequence range the
//! reprocessor can read back only while the stream keeps it (24 hours).
//! With `payload`, the destination is an S3 bucket: Lambda writes one object
//! per failed batch, the same invocation record plus `payload`, the whole
//! invocation event with its records ([`FailedBatchObject`]), under
//! `aws/lambda/<mapping uuid>/<shard id>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<uuid>`
//! ([`object_key`]). The bucket's event notification (object created) puts
//! an S3 event in DLQ1, and the reprocessor replays the object's records
//! ([`replay_payload`]), so a range that has left the stream is still
//! counted, through the same [`Processor`] as every other path.
//!
//! [`Dlq1Message::parse_of`] tells the kinds of DLQ1 message apart: a
//! pointer, an S3 object-created notification, or the `s3:TestEvent` S3
//! sends when the notification is configured (handled by ignoring it).
//! Anything else is a permanent failure, as are an object that is gone, an
//! object that is not a failed batch, and one of another stream.
//!
//! A notification only names an object, and anyone who can send to the
//! queue can forge one. So an object is read only where Lambda writes
//! failed batches ([`Expected`]): under `aws/lambda/<mapping uuid>/` and,
//! where the reader's own permissions do not already confine it (the
//! operator's `redrive --replay`), in the stack's bucket under its stream
//! mapping's UUID; and it is read only up to [`MAX_OBJECT_BYTES`]. An
//! object that fails either check is a permanent failure, with its reason.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::s3::S3Entity;
use hybrid_counter::EpochMillis;
use hybrid_counter::store::StreamStore;
use hybrid_counter::stream::record::sequence_number;
use hybrid_counter::stream::{BatchReport, Processor};
use serde::{Deserialize, Serialize};

use crate::replay::{OnFailureRecord, ReplayError, process_range};

/// The object Lambda writes to an S3 on-failure destination for a stream
/// source: the invocation record of [`OnFailureRecord`] and `payload`, the
/// invocation event (`{"Records": [...]}`) the function failed on.
///
/// Lambda writes `payload` as a string holding the event's JSON; an object
/// in its place is read too. It is written back as a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedBatchObject {
    #[serde(flatten)]
    pub record: OnFailureRecord,
    #[serde(with = "payload_json")]
    pub payload: Event,
}

/// An S3 object: where a failed batch lies (named by an event
/// notification), or the drift check's limits file (an `s3://` URI).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectRef {
    pub bucket: String,
    /// Decoded: notifications carry the key URL-encoded.
    pub key: String,
}

impl ObjectRef {
    /// `s3://bucket/key`, both parts non-empty; `None` for anything else.
    pub fn from_s3_uri(uri: &str) -> Option<Self> {
        uri.strip_prefix("s3://")
            .and_then(|rest| rest.split_once('/'))
            .filter(|(bucket, key)| !bucket.is_empty() && !key.is_empty())
            .map(|(bucket, key)| Self {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
            })
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// Where Lambda writes failed batches of stream sources: "The S3 object
/// containing the invocation record uses the following naming convention:
/// `aws/lambda/<ESM-UUID>/<shardID>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<Random UUID>`"
/// (Lambda developer guide, "Retain discarded records for a DynamoDB event
/// source in Lambda", services-dynamodb-errors.html), [`object_key`].
pub const KEY_PREFIX: &str = "aws/lambda/";

/// The largest failed-batch object read, bytes. The stream mapping invokes
/// the function synchronously, whose request payload Lambda caps at 6 MB
/// (6,291,456 bytes); the object holds that event as a JSON string, where
/// escaping adds at most one byte per byte (a `\` before each `"` or `\`),
/// plus the invocation record (about 1 KB). Twice the payload limit and
/// 64 KiB of margin covers every object Lambda can write; anything larger
/// is not one, and is not read into the function's memory.
pub const MAX_OBJECT_BYTES: u64 = 2 * 6 * 1024 * 1024 + 64 * 1024;

/// Which objects a reader accepts as failed batches of the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected<'a> {
    /// The stack's failed-batch bucket and its stream mapping's UUID: the
    /// operator's path, whose credentials may read any bucket.
    Stack { bucket: &'a str, mapping_uuid: &'a str },
    /// Lambda's key layout (`aws/lambda/<uuid>/...`) in any bucket: the
    /// reprocessor, whose role may read the stack's bucket only.
    KeyLayout,
}

impl Expected<'_> {
    /// Whether `object` may be read, else why not (permanent).
    pub fn check(&self, object: &ObjectRef) -> Result<(), ReplayError> {
        let foreign = |why: String| ReplayError::ForeignObject {
            object: object.to_string(),
            why,
        };
        let rest = object.key.strip_prefix(KEY_PREFIX).ok_or_else(|| {
            foreign(format!(
                "its key is not under {KEY_PREFIX}, where Lambda writes failed batches"
            ))
        })?;
        let mapping = rest.split_once('/').map(|(uuid, _)| uuid).unwrap_or_default();
        if mapping.is_empty() || mapping == "." || mapping == ".." {
            return Err(foreign(format!("its key is not under {KEY_PREFIX}<mapping uuid>/")));
        }
        if let Self::Stack { bucket, mapping_uuid } = *self {
            if object.bucket != bucket {
                return Err(foreign(format!(
                    "it is not in the stack's failed-batch bucket {bucket}"
                )));
            }
            if mapping != mapping_uuid {
                return Err(foreign(format!(
                    "its key is not under {KEY_PREFIX}{mapping_uuid}/, the stack's stream mapping"
                )));
            }
        }
        Ok(())
    }
}

/// What a DLQ1 message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Dlq1Message {
    /// `FailedBatchRecords=pointer`: the range to read back from the stream.
    Pointer(Box<OnFailureRecord>),
    /// `FailedBatchRecords=payload`: the object holding the failed batch.
    Object(ObjectRef),
    /// The message S3 sends once when the notification is configured; it
    /// names no batch, and is deleted without further ado.
    S3TestEvent,
}

/// The body of the message S3 sends to a queue when a notification
/// configuration is put (`"Event": "s3:TestEvent"`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct S3TestEvent {
    service: String,
    event: String,
}

const S3_TEST_EVENT: &str = "s3:TestEvent";

/// An S3 event notification as SQS receives it, with only the fields read
/// here required: `aws_lambda_events`' `S3EventRecord` also requires
/// `eventTime`, `userIdentity` and `requestParameters`, which S3 always
/// sends but an emulator may leave out (fakecloud does); the `s3` entity
/// (bucket and object) is `aws_lambda_events`' own.
#[derive(Debug, Deserialize)]
struct S3Notification {
    #[serde(rename = "Records")]
    records: Vec<S3NotificationRecord>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct S3NotificationRecord {
    #[serde(default)]
    event_source: Option<String>,
    #[serde(default)]
    event_name: Option<String>,
    s3: S3Entity,
}

impl Dlq1Message {
    /// Parses a DLQ1 message body, whatever the stack's `FailedBatchRecords`.
    pub fn parse(body: &str) -> Result<Self, ReplayError> {
        let not_ours = |why: String| ReplayError::NotAnOnFailureRecord(why);
        let value: serde_json::Value = serde_json::from_str(body).map_err(|e| not_ours(e.to_string()))?;
        let has = |field: &str| value.get(field).is_some();
        if has("DDBStreamBatchInfo") {
            return serde_json::from_value(value)
                .map(|record| Self::Pointer(Box::new(record)))
                .map_err(|e| not_ours(e.to_string()));
        }
        if has("Records") {
            let event: S3Notification =
                serde_json::from_value(value).map_err(|e| not_ours(format!("an S3 event: {e}")))?;
            return object_created(event).map(Self::Object).map_err(not_ours);
        }
        if let Ok(test) = serde_json::from_value::<S3TestEvent>(value)
            && test.event == S3_TEST_EVENT
            && test.service == "Amazon S3"
        {
            return Ok(Self::S3TestEvent);
        }
        Err(not_ours(
            "neither DDBStreamBatchInfo nor the Records of an S3 event notification".to_owned(),
        ))
    }

    /// [`Dlq1Message::parse`], and a pointer must name `stream_arn`, the
    /// stream the stack's mapping reads (an object's stream is only known
    /// once it is read: [`FailedBatchObject::from_bytes_of`]).
    pub fn parse_of(body: &str, stream_arn: &str) -> Result<Self, ReplayError> {
        match Self::parse(body)? {
            Self::Pointer(record) => record.of_stream(stream_arn).map(|r| Self::Pointer(Box::new(r))),
            other => Ok(other),
        }
    }

    /// One line for operators: the pointer's range or the object's address.
    pub fn describe(&self) -> String {
        match self {
            Self::Pointer(record) => {
                let info = &record.batch_info;
                format!(
                    "records {}..={} of {} ({} records)",
                    info.start_sequence_number, info.end_sequence_number, info.shard_id, info.batch_size
                )
            }
            Self::Object(object) => format!("failed batch kept in {object}"),
            Self::S3TestEvent => "S3's test event (ignored)".to_owned(),
        }
    }
}

/// The one object an S3 `ObjectCreated:*` notification names. S3 sends one
/// record per notification; anything else is not a failed batch.
fn object_created(event: S3Notification) -> Result<ObjectRef, String> {
    let [record] = <[_; 1]>::try_from(event.records)
        .map_err(|records: Vec<_>| format!("an S3 notification of {} records, not one", records.len()))?;
    let name = record.event_name.unwrap_or_default();
    if record.event_source.as_deref() != Some("aws:s3") || !name.starts_with("ObjectCreated:") {
        return Err(format!("an S3 notification of {name:?}, not of an object created"));
    }
    let bucket = record.s3.bucket.name.filter(|b| !b.is_empty());
    let key = record.s3.object.key.filter(|k| !k.is_empty());
    let (Some(bucket), Some(key)) = (bucket, key) else {
        return Err("an S3 notification without a bucket name or an object key".to_owned());
    };
    Ok(ObjectRef {
        bucket,
        key: decode_key(&key)?,
    })
}

/// S3 notifications URL-encode the key, with `+` for a space.
fn decode_key(key: &str) -> Result<String, String> {
    let plus_decoded = key.replace('+', " ");
    percent_encoding::percent_decode_str(&plus_decoded)
        .decode_utf8()
        .map(|k| k.into_owned())
        .map_err(|e| format!("an object key that is not UTF-8 once decoded: {e}"))
}

impl FailedBatchObject {
    /// The object Lambda writes for a batch given up on, `record` describing
    /// it and `records` its records (what the function was invoked with).
    pub fn new(record: OnFailureRecord, records: Vec<EventRecord>) -> Self {
        let mut payload = Event::default();
        payload.records = records;
        Self { record, payload }
    }

    /// Reads the object at `object` and checks that it is a failed batch of
    /// `stream_arn` whose records are the range its record describes: not
    /// one is [`ReplayError::NotAFailedBatchObject`], one of another stream
    /// [`ReplayError::WrongStream`]; both are permanent.
    pub fn from_bytes_of(bytes: &[u8], object: &ObjectRef, stream_arn: &str) -> Result<Self, ReplayError> {
        let garbage = |why: String| ReplayError::NotAFailedBatchObject {
            object: object.to_string(),
            why,
        };
        let parsed: Self = serde_json::from_slice(bytes).map_err(|e| garbage(e.to_string()))?;
        let info = &parsed.record.batch_info;
        let records = &parsed.payload.records;
        let wrong_stream = |arn: &str| ReplayError::WrongStream {
            stream_arn: arn.to_owned(),
            expected: stream_arn.to_owned(),
        };
        if info.stream_arn != stream_arn {
            return Err(wrong_stream(&info.stream_arn));
        }
        if let Some(foreign) = records
            .iter()
            .filter_map(|r| r.event_source_arn.as_deref())
            .find(|arn| *arn != stream_arn)
        {
            return Err(wrong_stream(foreign));
        }
        let (first, last) = (
            records.first().map(sequence_number),
            records.last().map(sequence_number),
        );
        if first != Some(info.start_sequence_number.as_str()) || last != Some(info.end_sequence_number.as_str()) {
            return Err(garbage(format!(
                "its payload runs {first:?}..={last:?}, its record says {}..={}",
                info.start_sequence_number, info.end_sequence_number
            )));
        }
        Ok(parsed)
    }
}

/// Where Lambda puts the object of a failed batch, as the Lambda
/// documentation gives it for stream sources:
/// `aws/lambda/<mapping uuid>/<shard id>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<uuid>`.
pub fn object_key(mapping_uuid: &str, shard_id: &str, at: std::time::SystemTime) -> String {
    let at = chrono::DateTime::<chrono::Utc>::from(at);
    format!(
        "aws/lambda/{mapping_uuid}/{shard_id}/{}/{}-{}",
        at.format("%Y/%m/%d"),
        at.format("%Y-%m-%dT%H.%M.%S"),
        uuid::Uuid::new_v4()
    )
}

/// Processes the records of a failed batch kept in S3: the same path as a
/// range read back from the stream ([`crate::replay::replay_records`]),
/// without the stream, so it works after the range has left it.
pub async fn replay_payload<S: StreamStore>(
    processor: &Processor<S>,
    object: &FailedBatchObject,
    now: EpochMillis,
) -> Result<BatchReport, ReplayError> {
    process_range(processor, &object.payload.records, now).await
}

/// `payload`: the event's JSON in a string, as Lambda writes it; an
/// embedded object is read too.
mod payload_json {
    use aws_lambda_events::event::dynamodb::Event;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(event: &Event, serializer: S) -> Result<S::Ok, S::Error> {
        let json = serde_json::to_string(event).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&json)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Event, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(json) => {
                serde_json::from_str(&json).map_err(|e| D::Error::custom(format!("payload: {e}")))
            }
            object @ serde_json::Value::Object(_) => {
                serde_json::from_value(object).map_err(|e| D::Error::custom(format!("payload: {e}")))
            }
            other => Err(D::Error::custom(format!(
                "payload: a JSON string or object, not {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed batch object as Lambda writes it (payload as a string).
    const OBJECT: &str = include_str!("fixtures/failed_batch_object.json");
    /// The S3 notification of that object, as S3 sends it to SQS.
    const NOTIFICATION: &str = include_str!("fixtures/s3_object_created.json");
    /// S3's test event, sent when the notification is configured.
    const TEST_EVENT: &str = include_str!("fixtures/s3_test_event.json");
    const STREAM: &str =
        "arn:aws:dynamodb:us-east-1:123456789012:table/hybrid-counter-resources/stream/2026-11-14T00:04:06.388";

    #[test]
    fn an_s3_uri_names_a_bucket_and_a_key_and_anything_else_is_refused() {
        let uri = ObjectRef::from_s3_uri("s3://ops-config/hc/prod/limits.yaml").unwrap();
        assert_eq!(
            (uri.bucket.as_str(), uri.key.as_str()),
            ("ops-config", "hc/prod/limits.yaml")
        );
        assert_eq!(uri.to_string(), "s3://ops-config/hc/prod/limits.yaml");
        for bad in [
            "",
            "ops-config/limits.yaml",
            "s3://ops-config",
            "s3://ops-config/",
            "s3:///limits.yaml",
        ] {
            assert_eq!(ObjectRef::from_s3_uri(bad), None, "{bad:?}");
        }
    }

    fn our_object() -> ObjectRef {
        match Dlq1Message::parse(NOTIFICATION).unwrap() {
            Dlq1Message::Object(object) => object,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_failed_batch_object_round_trips_with_its_payload_as_a_string() {
        let object = FailedBatchObject::from_bytes_of(OBJECT.as_bytes(), &our_object(), STREAM).unwrap();
        assert_eq!(object.payload.records.len(), 2);
        assert_eq!(object.record.batch_info.batch_size, 2);
        let mut back = serde_json::to_value(&object).unwrap();
        let mut original: serde_json::Value = serde_json::from_str(OBJECT).unwrap();
        let payload = |v: &mut serde_json::Value| -> Event {
            let json = v.as_object_mut().unwrap().remove("payload").unwrap();
            serde_json::from_str(json.as_str().expect("payload is a string")).unwrap()
        };
        assert_eq!(payload(&mut back), payload(&mut original));
        assert_eq!(back, original, "the invocation record is written back unchanged");
        let original: serde_json::Value = serde_json::from_str(OBJECT).unwrap();
        // An embedded object in place of the string is read the same.
        let mut embedded = original.clone();
        embedded["payload"] = serde_json::from_str(original["payload"].as_str().unwrap()).unwrap();
        let again = FailedBatchObject::from_bytes_of(embedded.to_string().as_bytes(), &our_object(), STREAM).unwrap();
        assert_eq!(again, object);
    }

    #[test]
    fn an_object_created_notification_names_the_object_with_its_key_decoded() {
        assert_eq!(
            our_object(),
            ObjectRef {
                bucket: "hybrid-counter-failed-batches-123456789012-us-east-1".to_owned(),
                key: "aws/lambda/7a3f09c2-2c7b-4bd8-9a55-1c2d9f0e4b11/shardId-00000001573689847184-864758bb/2026/11/14/2026-11-14T00.13.49-5b9e1f7c-8a2d-4e6b-9c3f-0d1e2f3a4b5c".to_owned(),
            }
        );
        // Without the fields only AWS sends (an emulator's notification).
        let mut value: serde_json::Value = serde_json::from_str(NOTIFICATION).unwrap();
        for field in ["eventTime", "userIdentity", "requestParameters", "responseElements"] {
            value["Records"][0].as_object_mut().unwrap().remove(field);
        }
        assert_eq!(
            Dlq1Message::parse(&value.to_string()).unwrap(),
            Dlq1Message::Object(our_object())
        );
        value["Records"][0]["s3"]["object"]["key"] = "a+b%3Ac%2Bd".into();
        match Dlq1Message::parse(&value.to_string()).unwrap() {
            Dlq1Message::Object(object) => assert_eq!(object.key, "a b:c+d"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_s3_test_event_is_recognised_and_names_no_batch() {
        assert_eq!(Dlq1Message::parse(TEST_EVENT).unwrap(), Dlq1Message::S3TestEvent);
        assert_eq!(
            Dlq1Message::parse_of(TEST_EVENT, STREAM).unwrap(),
            Dlq1Message::S3TestEvent
        );
    }

    #[test]
    fn pointers_still_parse_and_must_name_our_stream() {
        let body = include_str!("fixtures/on_failure_record.json");
        let Dlq1Message::Pointer(record) = Dlq1Message::parse_of(body, STREAM).unwrap() else {
            panic!("a pointer");
        };
        assert_eq!(record.batch_info.stream_arn, STREAM);
        let err = Dlq1Message::parse_of(body, "arn:other").unwrap_err();
        assert!(
            matches!(err, ReplayError::WrongStream { .. }) && err.is_permanent(),
            "{err}"
        );
    }

    #[test]
    fn other_messages_are_permanent_failures_with_a_reason() {
        let notification = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut value: serde_json::Value = serde_json::from_str(NOTIFICATION).unwrap();
            edit(&mut value);
            value.to_string()
        };
        let cases = [
            ("not json".to_owned(), "expected"),
            ("{}".to_owned(), "neither DDBStreamBatchInfo"),
            (r#"{"Records": 3}"#.to_owned(), "an S3 event"),
            (
                notification(&|v| v["Records"][0]["eventName"] = "ObjectRemoved:Delete".into()),
                "ObjectRemoved:Delete",
            ),
            (
                notification(&|v| {
                    let record = v["Records"][0].clone();
                    v["Records"] = serde_json::json!([record.clone(), record]);
                }),
                "2 records, not one",
            ),
            (
                notification(&|v| v["Records"][0]["s3"]["object"]["key"] = "".into()),
                "without a bucket name or an object key",
            ),
            (
                r#"{"Service": "Amazon S3", "Event": "s3:ObjectCreated:Put"}"#.to_owned(),
                "neither",
            ),
        ];
        for (body, why) in cases {
            let err = Dlq1Message::parse(&body).unwrap_err();
            assert!(matches!(err, ReplayError::NotAnOnFailureRecord(_)), "{body}: {err}");
            assert!(err.is_permanent(), "{body}");
            assert!(err.to_string().contains(why), "{body}: {err}");
        }
    }

    #[test]
    fn an_object_that_is_not_a_failed_batch_of_our_stream_is_a_permanent_failure() {
        let at = our_object();
        let edit = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut value: serde_json::Value = serde_json::from_str(OBJECT).unwrap();
            edit(&mut value);
            value.to_string()
        };
        let garbage = [
            "".to_owned(),
            "<Error><Code>AccessDenied</Code></Error>".to_owned(),
            edit(&|v| v["payload"] = "{\"Records\": 7}".into()),
            edit(&|v| v["payload"] = 42.into()),
            edit(&|v| {
                v.as_object_mut().unwrap().remove("payload");
            }),
            // Records that are not the range the record names.
            edit(&|v| v["DDBStreamBatchInfo"]["endSequenceNumber"] = "900000000000000000001".into()),
            edit(&|v| v["payload"] = "{\"Records\": []}".into()),
        ];
        for body in garbage {
            let err = FailedBatchObject::from_bytes_of(body.as_bytes(), &at, STREAM).unwrap_err();
            assert!(
                matches!(err, ReplayError::NotAFailedBatchObject { .. }),
                "{body}: {err}"
            );
            assert!(err.is_permanent() && err.to_string().contains(&at.to_string()), "{err}");
        }
        let other = "arn:aws:dynamodb:us-east-1:123456789012:table/other/stream/2026-01-01T00:00:00.000";
        let err = FailedBatchObject::from_bytes_of(OBJECT.as_bytes(), &at, other).unwrap_err();
        assert_eq!(
            err,
            ReplayError::WrongStream {
                stream_arn: STREAM.to_owned(),
                expected: other.to_owned()
            }
        );
        // A record of the payload from another stream, under our batch info.
        let mixed = edit(&|v| {
            let mut payload: serde_json::Value = serde_json::from_str(v["payload"].as_str().unwrap()).unwrap();
            payload["Records"][1]["eventSourceARN"] = other.into();
            v["payload"] = payload.to_string().into();
        });
        let err = FailedBatchObject::from_bytes_of(mixed.as_bytes(), &at, STREAM).unwrap_err();
        assert!(
            matches!(&err, ReplayError::WrongStream { stream_arn, .. } if stream_arn == other),
            "{err}"
        );
    }

    #[test]
    fn object_keys_follow_lambdas_layout() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_400_029);
        let key = object_key("7a3f09c2", "shardId-0001", at);
        let (prefix, id) = key.split_at("aws/lambda/7a3f09c2/shardId-0001/2026/11/23/2026-11-23T02.13.49-".len());
        assert_eq!(
            prefix,
            "aws/lambda/7a3f09c2/shardId-0001/2026/11/23/2026-11-23T02.13.49-"
        );
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{key}");
    }

    /// The payload's records are counted exactly once by the shared path:
    /// replaying the same object twice changes nothing the second time.
    #[tokio::test]
    async fn replaying_a_payload_counts_its_records_once() {
        use hybrid_counter::memory::MemoryStore;
        let object = FailedBatchObject::from_bytes_of(OBJECT.as_bytes(), &our_object(), STREAM).unwrap();
        let store = MemoryStore::new();
        store.put_item("acct", "w1", "inc-w1", false, false).await;
        store.put_item("acct", "w2", "inc-w2", false, false).await;
        let processor = Processor::new(store);
        let first = replay_payload(&processor, &object, 0).await.unwrap();
        assert_eq!(first.counted, 2, "{first:?}");
        let second = replay_payload(&processor, &object, 0).await.unwrap();
        assert_eq!((second.counted, second.already_done), (0, 2), "{second:?}");
        assert_eq!(processor.store().counter("acct", "eventual"), 2);
    }
}
