//! Stream records that claim to be the kit's (they carry an incarnation) but
//! are malformed: wrong attribute types in either image, missing or invalid
//! keys, event names and type descriptors the decoder does not know. Each is
//! an error that keeps the record's sequence number, so the consumer reports
//! that record as a batch item failure and it reaches DLQ1 instead of being
//! dropped or counted wrongly.

use serde_json::{Value, json};

use super::tests::lambda_record as record;
use crate::stream::{ChangeRecord, DecodeError};

/// A well-formed, uncounted, live kit item.
fn image() -> Value {
    json!({
        "scope": {"S": "acct"}, "id": {"S": "w1"}, "incarnation": {"S": "inc1"},
        "counter_processed": {"BOOL": false}, "deleted": {"BOOL": false}
    })
}

fn with(attribute: &str, value: Value) -> Value {
    let mut item = image();
    item[attribute] = value;
    item
}

fn without(attribute: &str) -> Value {
    let mut item = image();
    item.as_object_mut().unwrap().remove(attribute);
    item
}

fn decode_error(record: &Value) -> (Option<String>, DecodeError) {
    match ChangeRecord::from_json(record) {
        Ok(decoded) => panic!("decoded {decoded:?} from {record}"),
        Err(failure) => failure,
    }
}

#[test]
fn kit_records_with_wrong_attribute_types_are_errors_with_their_sequence_number() {
    let soft_deleted = with("deleted", json!({"BOOL": true}));
    let cases = [
        (
            "incarnation as a number",
            record("INSERT", "1", with("incarnation", json!({"N": "7"})), Value::Null),
        ),
        (
            "incarnation as a bool",
            record("INSERT", "2", with("incarnation", json!({"BOOL": true})), Value::Null),
        ),
        (
            "scope as a number",
            record("INSERT", "3", with("scope", json!({"N": "5"})), Value::Null),
        ),
        ("id missing", record("INSERT", "4", without("id"), Value::Null)),
        (
            "counter_processed as a number",
            record("INSERT", "5", with("counter_processed", json!({"N": "0"})), Value::Null),
        ),
        (
            "counter_processed null",
            record(
                "INSERT",
                "6",
                with("counter_processed", json!({"NULL": true})),
                Value::Null,
            ),
        ),
        (
            "deleted as a string, new image",
            record("MODIFY", "7", with("deleted", json!({"S": "true"})), image()),
        ),
        (
            "deleted as a string, old image",
            record("MODIFY", "8", soft_deleted, with("deleted", json!({"S": "no"}))),
        ),
    ];
    for (what, record) in cases {
        let seq = record["dynamodb"]["SequenceNumber"].as_str().map(str::to_owned);
        let (reported, err) = decode_error(&record);
        assert_eq!(reported, seq, "{what}: reported under another sequence number");
        assert!(matches!(err, DecodeError::BadAttributes(_)), "{what}: {err:?}");
        assert!(
            err.to_string().starts_with("malformed kit attributes: "),
            "{what}: {err}"
        );
    }
}

#[test]
fn kit_records_with_invalid_keys_name_the_key_and_the_reason() {
    let long_scope = "a".repeat(crate::ids::MAX_ID_BYTES + 1);
    let cases = [
        (
            record("INSERT", "21", with("scope", json!({"S": long_scope})), Value::Null),
            "invalid key: scope is 257 bytes long; the maximum is 256 bytes",
        ),
        (
            record("INSERT", "22", with("id", json!({"S": "w\u{7}1"})), Value::Null),
            "invalid key: resource id contains a control character at byte 1; use printable characters only",
        ),
        (
            record("MODIFY", "23", with("id", json!({"S": " w1"})), image()),
            "invalid key: resource id must not start or end with whitespace",
        ),
    ];
    for (record, message) in cases {
        let (seq, err) = decode_error(&record);
        assert_eq!(seq.as_deref(), record["dynamodb"]["SequenceNumber"].as_str());
        assert!(matches!(err, DecodeError::BadKey(_)), "{err:?}");
        assert_eq!(err.to_string(), message);
    }
}

#[test]
fn unknown_event_names_and_type_descriptors_are_reported_not_ignored() {
    let (seq, err) = decode_error(&record("", "31", image(), Value::Null));
    assert_eq!(
        (seq.as_deref(), err),
        (Some("31"), DecodeError::UnknownEventName(String::new()))
    );
    // Event names are exact: DynamoDB sends them upper case.
    let (seq, err) = decode_error(&record("insert", "32", image(), Value::Null));
    assert_eq!(
        (seq.as_deref(), err),
        (Some("32"), DecodeError::UnknownEventName("insert".into()))
    );
    // An attribute type DynamoDB does not have: the record does not parse, and
    // is still reported by its sequence number.
    let (seq, err) = decode_error(&record(
        "INSERT",
        "33",
        with("incarnation", json!({"Q": "x"})),
        Value::Null,
    ));
    assert_eq!(seq.as_deref(), Some("33"));
    assert!(matches!(err, DecodeError::NotAStreamRecord(_)), "{err:?}");
    // A sequence number of the wrong type is no sequence number: the decoder
    // cannot name the record, so the consumer fails the whole batch (retried,
    // bisected, then sent to DLQ1) rather than dropping it.
    let mut numeric = record("INSERT", "34", image(), Value::Null);
    numeric["dynamodb"]["SequenceNumber"] = json!(34);
    let (seq, err) = decode_error(&numeric);
    assert_eq!(seq, None);
    assert!(matches!(err, DecodeError::NotAStreamRecord(_)), "{err:?}");
}
