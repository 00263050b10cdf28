//! What the unit tests of the SDK-calling modules share: an SDK client
//! intercepted by `aws-smithy-mocks`, so each test states what the service
//! answers and checks what the kit makes of it, without a network.

/// A client of the SDK crate `$sdk` (e.g. `aws_sdk_sqs`) whose requests
/// `$rules` (a slice of [`aws_smithy_mocks::Rule`]) answer in order, with
/// the SDK's own retries off: each rule answers one request.
macro_rules! mock_client {
    ($sdk:ident, $rules:expr) => {{
        let interceptor = $rules.iter().fold(
            ::aws_smithy_mocks::MockResponseInterceptor::new().rule_mode(::aws_smithy_mocks::RuleMode::Sequential),
            |interceptor, rule| interceptor.with_rule(rule),
        );
        $sdk::Client::from_conf(
            $sdk::Config::builder()
                .with_test_defaults()
                .region($sdk::config::Region::new("us-east-1"))
                .retry_config($sdk::config::retry::RetryConfig::disabled())
                .http_client(::aws_smithy_mocks::create_mock_http_client())
                .interceptor(interceptor)
                .build(),
        )
    }};
}

pub(crate) use mock_client;

/// A [`crate::DynamoStore`] over the tables `resources` and `counters`
/// (best-effort admission, one shard each, default limit 10) whose client
/// answers `rules` in order.
pub(crate) fn mock_store(rules: &[aws_smithy_mocks::Rule]) -> crate::DynamoStore {
    let client = mock_client!(aws_sdk_dynamodb, rules);
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
    }
}
