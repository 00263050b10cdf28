//! The event source mapping's `FilterCriteria`: only the two kinds of record
//! the consumer acts on reach it (an uncounted INSERT, a soft delete). The
//! consumer's own writes — the flag flip (a MODIFY with `deleted` unchanged)
//! and hard deletes (REMOVE) — are dropped by Lambda before an invocation.
//!
//! The stack writes these patterns into the template and the local runner
//! applies them, so both use this one definition. The consumer still
//! ignores such records itself (see [`super::record`]), so a mapping without
//! the filter is only slower, never wrong.

use serde_json::{Value, json};

use crate::keys;

/// The filter patterns, each a JSON document as Lambda expects in
/// `FilterCriteria.Filters[].Pattern`. A record passes if any pattern matches.
pub fn patterns() -> Vec<Value> {
    vec![
        json!({
            "eventName": ["INSERT"],
            "dynamodb": { "NewImage": { keys::COUNTER_PROCESSED: { "BOOL": [false] } } }
        }),
        json!({
            "eventName": ["MODIFY"],
            "dynamodb": {
                "NewImage": { keys::DELETED: { "BOOL": [true] } },
                "OldImage": { keys::DELETED: { "BOOL": [false] } }
            }
        }),
    ]
}

/// The compact JSON text of a pattern with object keys in sorted order, so
/// the text is the same whether or not serde_json's `preserve_order`
/// feature is on somewhere in the build (templates are compared as text).
pub fn pattern_text(pattern: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(fields) => {
                let mut keys: Vec<&String> = fields.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&fields[k]))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(pattern).to_string()
}

/// Whether `event` (a Lambda-shaped record) matches `pattern`, under the
/// subset of the EventBridge pattern language the patterns above use: nested
/// objects, and arrays of allowed literal values.
pub fn matches(pattern: &Value, event: &Value) -> bool {
    match pattern {
        Value::Object(fields) => fields.iter().all(|(name, sub)| match event.get(name) {
            Some(value) => matches(sub, value),
            None => false,
        }),
        Value::Array(allowed) => allowed.iter().any(|literal| literal == event),
        _ => false,
    }
}

/// Whether a record passes the kit's filter (any pattern matches).
pub fn passes(event: &Value) -> bool {
    patterns().iter().any(|p| matches(p, event))
}

/// [`passes`] for a typed Lambda stream record.
pub fn passes_record(record: &aws_lambda_events::event::dynamodb::EventRecord) -> bool {
    serde_json::to_value(record).is_ok_and(|event| passes(&event))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(event: &str, new: Value, old: Value) -> Value {
        json!({"eventName": event, "dynamodb": {"NewImage": new, "OldImage": old}})
    }

    fn image(processed: bool, deleted: bool) -> Value {
        json!({"counter_processed": {"BOOL": processed}, "deleted": {"BOOL": deleted}})
    }

    #[test]
    fn lets_through_exactly_what_the_consumer_acts_on() {
        assert!(passes(&record("INSERT", image(false, false), Value::Null)));
        assert!(passes(&record("MODIFY", image(false, true), image(false, false))));
        assert!(passes(&record("MODIFY", image(true, true), image(true, false))));
    }

    #[test]
    fn pattern_text_sorts_keys_whatever_the_map_order() {
        let text = pattern_text(&json!({"b": [1], "a": {"d": [true], "c": [false]}}));
        assert_eq!(text, r#"{"a":{"c":[false],"d":[true]},"b":[1]}"#);
        assert_eq!(
            serde_json::from_str::<Value>(&pattern_text(&patterns()[0])).unwrap(),
            patterns()[0]
        );
    }

    #[test]
    fn drops_the_consumers_own_writes_and_unrelated_changes() {
        // The flag flip.
        assert!(!passes(&record("MODIFY", image(true, false), image(false, false))));
        // A payload edit of a soft-deleted item.
        assert!(!passes(&record("MODIFY", image(true, true), image(true, true))));
        assert!(!passes(&record("REMOVE", Value::Null, image(true, true))));
        // Items that are not the kit's.
        assert!(!passes(&record("INSERT", json!({"other": {"S": "x"}}), Value::Null)));
    }
}
