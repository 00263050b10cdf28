//! Decoding of stream records into the changes the counter cares about.
//!
//! Records are the Lambda event's (`aws_lambda_events`): what the stream
//! handler receives, and what the AWS layer turns a Streams API record
//! (`GetRecords`, read by the reprocessor, the local runner and the tests)
//! into. One decoder, so every path classifies a record identically.
//!
//! A record of an item without the kit's `incarnation` attribute is not ours
//! and is ignored. A record that claims to be ours but is malformed is a
//! [`DecodeError`]: the caller reports it as failed rather than dropping it,
//! so it ends in the dead-letter queues where an operator sees it.

use aws_lambda_events::event::dynamodb::EventRecord;
use serde::Deserialize;
use serde_dynamo::Item;

use crate::ids::{IdError, ResourceId, Scope};
use crate::keys;
use crate::store::ResourceKey;

/// What a record means for the eventual counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new item not yet counted: count it.
    Insert { key: ResourceKey, incarnation: String },
    /// `deleted` went false → true: un-count (if counted) and hard-delete.
    SoftDelete { key: ResourceKey, incarnation: String },
    /// Anything else: the consumer's own writes, hard deletes, payload edits,
    /// items that are not the kit's.
    Ignore(IgnoreReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoreReason {
    NotOurs,
    Remove,
    AlreadyCounted,
    OtherModify,
}

/// A decoded record with its position in the shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    pub sequence_number: String,
    pub change: Change,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record is not a DynamoDB stream record: {0}")]
    NotAStreamRecord(String),
    #[error("record has no sequence number")]
    MissingSequenceNumber,
    #[error("unknown event name {0:?}")]
    UnknownEventName(String),
    #[error("{event} record has no {image} image; the stream must use NEW_AND_OLD_IMAGES")]
    MissingImage { event: &'static str, image: &'static str },
    #[error("malformed kit attributes: {0}")]
    BadAttributes(String),
    #[error("invalid key: {0}")]
    BadKey(#[from] IdError),
}

/// The kit's attributes of an image; the owner's payload is ignored.
#[derive(Debug, Deserialize)]
struct KitImage {
    scope: String,
    id: String,
    incarnation: Option<String>,
    #[serde(default)]
    counter_processed: Option<bool>,
    #[serde(default)]
    deleted: Option<bool>,
}

fn is_ours(image: &Item) -> bool {
    image.contains_key(keys::INCARNATION)
}

fn kit_image(image: Item) -> Result<KitImage, DecodeError> {
    serde_dynamo::from_item(image).map_err(|e| DecodeError::BadAttributes(e.to_string()))
}

/// The image's incarnation: the kit always writes a non-empty one, so a
/// missing, null or empty value is a malformed record, not an item to count.
fn incarnation_of(image: &KitImage, key: &ResourceKey) -> Result<String, DecodeError> {
    image.incarnation.clone().filter(|i| !i.is_empty()).ok_or_else(|| {
        DecodeError::BadAttributes(format!("{}/{}: empty or null {}", key.scope, key.id, keys::INCARNATION))
    })
}

fn key_of(image: &KitImage) -> Result<ResourceKey, DecodeError> {
    Ok(ResourceKey {
        scope: Scope::new(image.scope.clone())?,
        id: ResourceId::new(image.id.clone())?,
    })
}

/// Decodes one record given its parts. Empty images count as absent (the
/// Lambda event encodes a missing image as an empty map).
pub fn decode(event_name: &str, new_image: Option<Item>, old_image: Option<Item>) -> Result<Change, DecodeError> {
    let new_image = new_image.filter(|i| !i.is_empty());
    let old_image = old_image.filter(|i| !i.is_empty());
    match event_name {
        "INSERT" => {
            let new = new_image.ok_or(DecodeError::MissingImage {
                event: "INSERT",
                image: "new",
            })?;
            if !is_ours(&new) {
                return Ok(Change::Ignore(IgnoreReason::NotOurs));
            }
            let image = kit_image(new)?;
            let key = key_of(&image)?;
            let incarnation = incarnation_of(&image, &key)?;
            match image.counter_processed {
                Some(false) => Ok(Change::Insert { key, incarnation }),
                Some(true) => Ok(Change::Ignore(IgnoreReason::AlreadyCounted)),
                None => Err(DecodeError::BadAttributes(format!(
                    "{}/{}: INSERT without {}",
                    key.scope,
                    key.id,
                    keys::COUNTER_PROCESSED
                ))),
            }
        }
        "MODIFY" => {
            let new = new_image.ok_or(DecodeError::MissingImage {
                event: "MODIFY",
                image: "new",
            })?;
            let old = old_image.ok_or(DecodeError::MissingImage {
                event: "MODIFY",
                image: "old",
            })?;
            if !is_ours(&new) {
                return Ok(Change::Ignore(IgnoreReason::NotOurs));
            }
            let new = kit_image(new)?;
            let old = kit_image(old)?;
            let key = key_of(&new)?;
            let went_deleted = new.deleted == Some(true) && old.deleted != Some(true);
            if went_deleted {
                let incarnation = incarnation_of(&new, &key)?;
                Ok(Change::SoftDelete { key, incarnation })
            } else {
                Ok(Change::Ignore(IgnoreReason::OtherModify))
            }
        }
        "REMOVE" => Ok(Change::Ignore(IgnoreReason::Remove)),
        other => Err(DecodeError::UnknownEventName(other.to_owned())),
    }
}

impl ChangeRecord {
    /// Decodes a record of a Lambda stream event. The outer `Err` carries
    /// the sequence number when there is one, so the failure can be reported.
    pub fn from_lambda(record: &EventRecord) -> Result<Self, (Option<String>, DecodeError)> {
        let sequence_number = record.change.sequence_number.clone().filter(|s| !s.is_empty());
        let Some(seq) = sequence_number else {
            return Err((None, DecodeError::MissingSequenceNumber));
        };
        decode(
            &record.event_name,
            Some(record.change.new_image.clone()),
            Some(record.change.old_image.clone()),
        )
        .map(|change| ChangeRecord {
            sequence_number: seq.clone(),
            change,
        })
        .map_err(|e| (Some(seq), e))
    }

    /// Decodes a raw JSON record of a Lambda event: a record that does not
    /// even parse is still reported by its sequence number when present.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, (Option<String>, DecodeError)> {
        match serde_json::from_value::<EventRecord>(value.clone()) {
            Ok(record) => Self::from_lambda(&record),
            Err(err) => {
                let seq = value
                    .pointer("/dynamodb/SequenceNumber")
                    .and_then(|v| v.as_str())
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned);
                Err((seq, DecodeError::NotAStreamRecord(err.to_string())))
            }
        }
    }
}

/// The sequence number of a Lambda stream record (empty when it has none).
pub fn sequence_number(record: &EventRecord) -> &str {
    record.change.sequence_number.as_deref().unwrap_or_default()
}

/// When a Lambda stream record was written (`ApproximateCreationDateTime`),
/// what a mapping's `MaximumRecordAgeInSeconds` measures from.
pub fn created_at(record: &EventRecord) -> std::time::SystemTime {
    record.change.approximate_creation_date_time.into()
}

/// Orders DynamoDB Streams sequence numbers: decimal strings of varying
/// length, so a longer one is larger.
pub fn sequence_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod bad_records;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Lambda stream record of the kit's table (`new`/`old`: images or null).
    pub(super) fn lambda_record(
        event: &str,
        seq: &str,
        new: serde_json::Value,
        old: serde_json::Value,
    ) -> serde_json::Value {
        let mut dynamodb = json!({
            "ApproximateCreationDateTime": 1_700_000_000.0,
            "Keys": {"scope": {"S": "acct"}, "id": {"S": "w1"}},
            "SequenceNumber": seq,
            "SizeBytes": 100,
            "StreamViewType": "NEW_AND_OLD_IMAGES"
        });
        if !new.is_null() {
            dynamodb["NewImage"] = new;
        }
        if !old.is_null() {
            dynamodb["OldImage"] = old;
        }
        json!({
            "eventID": "e1", "eventName": event, "eventVersion": "1.1",
            "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/res/stream/2026",
            "dynamodb": dynamodb
        })
    }

    fn image(processed: bool, deleted: bool) -> serde_json::Value {
        json!({
            "scope": {"S": "acct"}, "id": {"S": "w1"}, "incarnation": {"S": "inc1"},
            "counter_processed": {"BOOL": processed}, "deleted": {"BOOL": deleted},
            "created_at": {"N": "1"}, "color": {"S": "blue"}
        })
    }

    fn key() -> ResourceKey {
        ResourceKey {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new("w1").unwrap(),
        }
    }

    #[test]
    fn insert_of_an_uncounted_item_is_counted() {
        let rec = ChangeRecord::from_json(&lambda_record("INSERT", "100", image(false, false), json!(null))).unwrap();
        assert_eq!(rec.sequence_number, "100");
        assert_eq!(
            rec.change,
            Change::Insert {
                key: key(),
                incarnation: "inc1".into()
            }
        );
    }

    #[test]
    fn soft_delete_is_detected_from_the_images() {
        let rec =
            ChangeRecord::from_json(&lambda_record("MODIFY", "200", image(false, true), image(false, false))).unwrap();
        assert_eq!(
            rec.change,
            Change::SoftDelete {
                key: key(),
                incarnation: "inc1".into()
            }
        );
    }

    #[test]
    fn own_flag_flip_payload_edits_and_removes_are_ignored() {
        let flip =
            ChangeRecord::from_json(&lambda_record("MODIFY", "3", image(true, false), image(false, false))).unwrap();
        assert_eq!(flip.change, Change::Ignore(IgnoreReason::OtherModify));
        let again =
            ChangeRecord::from_json(&lambda_record("MODIFY", "4", image(true, true), image(true, true))).unwrap();
        assert_eq!(again.change, Change::Ignore(IgnoreReason::OtherModify));
        let remove = ChangeRecord::from_json(&lambda_record("REMOVE", "5", json!(null), image(true, true))).unwrap();
        assert_eq!(remove.change, Change::Ignore(IgnoreReason::Remove));
    }

    #[test]
    fn items_without_an_incarnation_are_not_ours() {
        let foreign = json!({"scope": {"S": "acct"}, "id": {"S": "x"}, "other": {"N": "1"}});
        let rec = ChangeRecord::from_json(&lambda_record("INSERT", "6", foreign, json!(null))).unwrap();
        assert_eq!(rec.change, Change::Ignore(IgnoreReason::NotOurs));
    }

    #[test]
    fn malformed_kit_records_are_errors_that_keep_their_sequence_number() {
        let mut bad = image(false, false);
        bad["counter_processed"] = json!({"S": "nope"});
        let (seq, err) = ChangeRecord::from_json(&lambda_record("INSERT", "7", bad, json!(null))).unwrap_err();
        assert_eq!(seq.as_deref(), Some("7"));
        assert!(matches!(err, DecodeError::BadAttributes(_)), "{err}");

        let mut bad_key = image(false, false);
        bad_key["scope"] = json!({"S": ""});
        let (_, err) = ChangeRecord::from_json(&lambda_record("INSERT", "8", bad_key, json!(null))).unwrap_err();
        assert_eq!(err.to_string(), "invalid key: scope must not be empty");

        let (seq, err) =
            ChangeRecord::from_json(&lambda_record("TRUNCATE", "9", image(false, false), json!(null))).unwrap_err();
        assert_eq!(seq.as_deref(), Some("9"));
        assert_eq!(err, DecodeError::UnknownEventName("TRUNCATE".into()));

        let (seq, err) =
            ChangeRecord::from_json(&lambda_record("MODIFY", "10", image(false, true), json!(null))).unwrap_err();
        assert_eq!(seq.as_deref(), Some("10"));
        assert!(matches!(err, DecodeError::MissingImage { image: "old", .. }));
    }

    #[test]
    fn garbage_json_is_reported_with_whatever_sequence_number_it_has() {
        let (seq, err) = ChangeRecord::from_json(&json!({"dynamodb": {"SequenceNumber": "11"}})).unwrap_err();
        assert_eq!(seq.as_deref(), Some("11"));
        assert!(matches!(err, DecodeError::NotAStreamRecord(_)));
        let (seq, _) = ChangeRecord::from_json(&json!("not a record")).unwrap_err();
        assert_eq!(seq, None);
    }

    #[test]
    fn sequence_numbers_compare_numerically() {
        use std::cmp::Ordering::*;
        assert_eq!(sequence_cmp("900", "1000"), Less);
        assert_eq!(sequence_cmp("1000", "1000"), Equal);
        assert_eq!(sequence_cmp("1001", "1000"), Greater);
    }
}
