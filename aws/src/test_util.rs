//! What the unit tests of the SDK-calling modules share: an SDK client
//! intercepted by `aws-smithy-mocks`, so each test states what the service
//! answers and checks what the kit makes of it, without a network.

/// A [`crate::DynamoStore`] over the tables `resources` and `counters`
/// (best-effort admission, one shard each, default limit 10) whose client
/// answers `rules` in order.
pub(crate) fn mock_store(rules: &[aws_smithy_mocks::Rule]) -> crate::DynamoStore {
    let client = aws_smithy_mocks::mock_client!(aws_sdk_dynamodb, rules);
    crate::DynamoStore::new(client, &config())
}

/// The configuration of [`mock_store`]: tables `resources` and `counters`,
/// best-effort admission, one shard each, default limit 10.
pub(crate) fn config() -> hybrid_counter::config::CounterConfig {
    hybrid_counter::config::CounterConfig {
        resources_table: "resources".into(),
        counters_table: "counters".into(),
        default_limit: Some(10),
        eventual_shards: 1,
        best_effort_shards: 1,
        admission: hybrid_counter::config::Admission::BestEffort,
        scope_keys: Default::default(),
    }
}
