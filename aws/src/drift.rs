//! The drift check's own DynamoDB requests, on [`DynamoStore`]
//! ([`DriftStore`]): a keys-only Scan of the counters table, page by page
//! from a cursor, the limit overrides (`scan_limits`, as `counterctl
//! limits` reads them), and the check's state item in the counters table's
//! reserved partition ([`keys::KIT_STATE_SCOPE`], which no scope can name).
//! The state is a JSON document in one attribute beside a `version`
//! number, written conditioned on the version read, so two overlapping
//! runs cannot both advance the cursor.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use hybrid_counter::audit::drift::{CounterKey, DriftCheckState, DriftStore, ScanPage};
use hybrid_counter::error::StoreError;
use hybrid_counter::keys;
use hybrid_counter::limits::LimitTable;

use crate::DynamoStore;

fn key_of(scope: &str, name: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (keys::SCOPE.to_owned(), AttributeValue::S(scope.to_owned())),
        (keys::NAME.to_owned(), AttributeValue::S(name.to_owned())),
    ])
}

fn state_key() -> HashMap<String, AttributeValue> {
    key_of(keys::KIT_STATE_SCOPE, keys::DRIFT_CHECK_NAME)
}

fn string_of(item: &HashMap<String, AttributeValue>, name: &str) -> Result<String, StoreError> {
    match item.get(name) {
        Some(AttributeValue::S(value)) => Ok(value.clone()),
        _ => Err(StoreError::Malformed(format!(
            "counters-table key without a string {name}"
        ))),
    }
}

fn counter_key(item: &HashMap<String, AttributeValue>) -> Result<CounterKey, StoreError> {
    Ok(CounterKey {
        scope: string_of(item, keys::SCOPE)?,
        name: string_of(item, keys::NAME)?,
    })
}

/// The state as stored: its JSON document, with the `version` attribute
/// (the one the condition reads) written over the document's.
fn parse_state(item: &HashMap<String, AttributeValue>) -> Result<DriftCheckState, StoreError> {
    let document = string_of(item, keys::STATE)?;
    let mut state: DriftCheckState =
        serde_json::from_str(&document).map_err(|e| StoreError::Malformed(format!("drift-check state: {e}")))?;
    state.version = match item.get(keys::VERSION) {
        Some(AttributeValue::N(v)) => v
            .parse()
            .map_err(|e| StoreError::Malformed(format!("drift-check state version {v:?}: {e}")))?,
        _ => 0,
    };
    Ok(state)
}

impl DriftStore for DynamoStore {
    async fn scan_counter_keys(&self, after: Option<&CounterKey>, limit: u32) -> Result<ScanPage, StoreError> {
        let out = self
            .client()
            .scan()
            .table_name(self.counters_table())
            .projection_expression("#scope, #name")
            .expression_attribute_names("#scope", keys::SCOPE)
            .expression_attribute_names("#name", keys::NAME)
            .limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX))
            .set_exclusive_start_key(after.map(|k| key_of(&k.scope, &k.name)))
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        let mut keys_read = Vec::new();
        for item in out.items.unwrap_or_default() {
            let key = counter_key(&item)?;
            if !keys::is_kit_state_scope(&key.scope) {
                keys_read.push(key);
            }
        }
        let next = match out.last_evaluated_key {
            Some(item) if !item.is_empty() => Some(counter_key(&item)?),
            _ => None,
        };
        Ok(ScanPage { keys: keys_read, next })
    }

    async fn limit_overrides(&self, prefixes: &[String]) -> Result<LimitTable, StoreError> {
        self.scan_limits(prefixes).await
    }

    async fn drift_state(&self) -> Result<Option<DriftCheckState>, StoreError> {
        let out = self
            .client()
            .get_item()
            .table_name(self.counters_table())
            .set_key(Some(state_key()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        out.item.as_ref().map(parse_state).transpose()
    }

    async fn put_drift_state(&self, state: &DriftCheckState, read_version: Option<i64>) -> Result<bool, StoreError> {
        let version = read_version.map_or(1, |v| v + 1);
        let mut stored = state.clone();
        stored.version = version;
        let document =
            serde_json::to_string(&stored).map_err(|e| StoreError::Malformed(format!("drift-check state: {e}")))?;
        let mut item = state_key();
        item.insert(keys::VERSION.to_owned(), AttributeValue::N(version.to_string()));
        item.insert(keys::STATE.to_owned(), AttributeValue::S(document));
        let request = self
            .client()
            .put_item()
            .table_name(self.counters_table())
            .set_item(Some(item));
        // Each branch names only what its condition uses: DynamoDB refuses
        // a request with an unused expression attribute name
        // (ValidationException), so a `#scope` left on the versioned write
        // failed every run after the first.
        let request = match read_version {
            None => request
                .condition_expression("attribute_not_exists(#scope)")
                .expression_attribute_names("#scope", keys::SCOPE),
            Some(v) => request
                .condition_expression("#version = :read")
                .expression_attribute_names("#version", keys::VERSION)
                .expression_attribute_values(":read", AttributeValue::N(v.to_string())),
        };
        match request.send().await.map_err(|e| self.classify(e)) {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The requests as DynamoDB receives them, through an intercepted client.

    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemOutput};
    use aws_sdk_dynamodb::operation::scan::ScanOutput;
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::{Rule, mock};
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    fn store(rules: &[Rule]) -> DynamoStore {
        crate::test_util::mock_store(rules)
    }

    #[tokio::test]
    async fn a_scan_page_resumes_at_the_cursor_and_never_yields_the_kit_state() {
        let scan = mock!(aws_sdk_dynamodb::Client::scan)
            .match_requests(|r| {
                r.exclusive_start_key() == Some(&key_of("s1", "eventual"))
                    && r.limit() == Some(3)
                    && r.projection_expression() == Some("#scope, #name")
            })
            .then_output(|| {
                ScanOutput::builder()
                    .items(key_of("s2", "best_effort"))
                    .items(key_of(keys::KIT_STATE_SCOPE, keys::DRIFT_CHECK_NAME))
                    .items(key_of("s3", "eventual"))
                    .set_last_evaluated_key(Some(key_of("s3", "eventual")))
                    .build()
            });
        let store = store(&[scan]);
        let after = CounterKey {
            scope: "s1".into(),
            name: "eventual".into(),
        };
        let page = store.scan_counter_keys(Some(&after), 3).await.unwrap();
        let scopes: Vec<&str> = page.keys.iter().map(|k| k.scope.as_str()).collect();
        assert_eq!(scopes, ["s2", "s3"]);
        assert_eq!(page.next.unwrap().scope, "s3");
    }

    #[tokio::test]
    async fn the_audits_scan_of_the_counters_table_takes_the_state_item_for_no_scope() {
        let counter = |scope: &str, name: &str, count: i64| {
            let mut item = key_of(scope, name);
            item.insert(keys::COUNT.into(), AttributeValue::N(count.to_string()));
            item
        };
        let mut state = state_key();
        state.insert(keys::VERSION.into(), AttributeValue::N("3".into()));
        state.insert(keys::STATE.into(), AttributeValue::S("{}".into()));
        let scan = mock!(aws_sdk_dynamodb::Client::scan).then_output(move || {
            ScanOutput::builder()
                .items(counter("s1", keys::EVENTUAL_NAME, 2))
                .items(state.clone())
                .items(counter("s2", keys::BEST_EFFORT_NAME, 1))
                .build()
        });
        let scopes = store(&[scan]).scan_counters().await.unwrap();
        assert_eq!(scopes.keys().collect::<Vec<_>>(), ["s1", "s2"]);
    }

    /// The placeholders a request names, sorted: DynamoDB refuses one that
    /// no expression uses.
    fn names(names: Option<&std::collections::HashMap<String, String>>) -> Vec<&str> {
        let mut names: Vec<&str> = names.into_iter().flat_map(|n| n.keys().map(String::as_str)).collect();
        names.sort_unstable();
        names
    }

    #[tokio::test]
    async fn the_state_is_written_under_the_version_read_and_a_lost_race_is_false() {
        let first = mock!(aws_sdk_dynamodb::Client::put_item)
            .match_requests(|r| {
                r.condition_expression() == Some("attribute_not_exists(#scope)")
                    && r.item().and_then(|i| i.get(keys::VERSION)) == Some(&AttributeValue::N("1".into()))
                    && names(r.expression_attribute_names()) == ["#scope"]
            })
            .then_output(|| PutItemOutput::builder().build());
        let raced = mock!(aws_sdk_dynamodb::Client::put_item)
            .match_requests(|r| {
                r.condition_expression() == Some("#version = :read")
                    && r.expression_attribute_values().and_then(|v| v.get(":read"))
                        == Some(&AttributeValue::N("4".into()))
                    && names(r.expression_attribute_names()) == ["#version"]
            })
            .then_error(|| {
                PutItemError::ConditionalCheckFailedException(
                    ConditionalCheckFailedException::builder()
                        .meta(ErrorMetadata::builder().code("ConditionalCheckFailedException").build())
                        .build(),
                )
            });
        let store = store(&[first, raced]);
        let state = DriftCheckState::default();
        assert!(store.put_drift_state(&state, None).await.unwrap());
        assert!(!store.put_drift_state(&state, Some(4)).await.unwrap());
    }

    #[tokio::test]
    async fn the_state_reads_back_with_the_version_attribute() {
        let stored = DriftCheckState {
            cursor: Some(CounterKey {
                scope: "s9".into(),
                name: "limit".into(),
            }),
            ..DriftCheckState::default()
        };
        let document = serde_json::to_string(&stored).unwrap();
        let get = mock!(aws_sdk_dynamodb::Client::get_item)
            .match_requests(|r| r.key() == Some(&state_key()) && r.consistent_read() == Some(true))
            .then_output(move || {
                let mut item = state_key();
                item.insert(keys::VERSION.into(), AttributeValue::N("12".into()));
                item.insert(keys::STATE.into(), AttributeValue::S(document.clone()));
                GetItemOutput::builder().set_item(Some(item)).build()
            });
        let state = store(&[get]).drift_state().await.unwrap().unwrap();
        assert_eq!(state.version, 12);
        assert_eq!(state.cursor, stored.cursor);
    }
}
