//! What the store's unit tests share: a store over an intercepted client
//! (no network), with or without the SDK's retries, and the scope, key and
//! answers most of them use.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_smithy_mocks::{Rule, mock};
use aws_smithy_types::error::ErrorMetadata;
use hybrid_counter::ids::{ResourceId, Scope};
use hybrid_counter::items::CounterItem;
use hybrid_counter::store::ResourceKey;

use super::store::DynamoStore;

/// A store whose client answers `rules` in order, with the SDK's own
/// retries off (each rule answers one request).
pub(super) fn store(rules: &[Rule]) -> DynamoStore {
    crate::test_util::mock_store(rules)
}

pub(super) fn scope() -> Scope {
    Scope::new("acct").unwrap()
}

pub(super) fn key() -> ResourceKey {
    ResourceKey {
        scope: scope(),
        id: ResourceId::new("w").unwrap(),
    }
}

pub(super) fn update_error(code: &'static str) -> Rule {
    mock!(Client::update_item).then_error(move || UpdateItemError::generic(ErrorMetadata::builder().code(code).build()))
}

/// A store whose client keeps the SDK's standard retries (3 attempts),
/// as a deployed function's does: what each write overrides is what
/// reaches DynamoDB.
pub(super) fn retrying_store(rules: &[&Rule]) -> DynamoStore {
    let client = aws_smithy_mocks::mock_client!(aws_sdk_dynamodb, aws_smithy_mocks::RuleMode::MatchAny, rules, |c| {
        c.region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .retry_config(RetryConfig::standard().with_max_attempts(3))
    });
    DynamoStore::new(client, &crate::test_util::config())
}

pub(super) fn counter_item(name: &str, version: i64) -> CounterItem {
    CounterItem {
        scope: "acct".into(),
        name: name.into(),
        count: 3,
        version,
        updated_at: 0,
        epoch: None,
        limit: None,
        share: None,
        rev: None,
        share_rev: None,
    }
}
