//! What the strategies' unit tests share: an SDK client answered by
//! `aws-smithy-mocks` rules in order (one rule, one request), with the SDK
//! retries every strategy gets in `make compare` (3 attempts, millisecond
//! backoffs) or none, and the SDK's random client request tokens.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::ErrorMetadata;
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client};

use crate::strategy::Place;

pub fn client(rules: &[Rule], sdk_retries: bool) -> aws_sdk_dynamodb::Client {
    client_in_mode(rules, sdk_retries, RuleMode::Sequential)
}

/// [`client`] with the rules matched in `mode` (`MatchAny`: the first rule
/// whose matcher takes the request answers it).
pub fn client_in_mode(rules: &[Rule], sdk_retries: bool, mode: RuleMode) -> aws_sdk_dynamodb::Client {
    let interceptor = rules
        .iter()
        .fold(MockResponseInterceptor::new().rule_mode(mode), |interceptor, rule| {
            interceptor.with_rule(rule)
        });
    let retries = if sdk_retries {
        RetryConfig::standard()
            .with_max_attempts(3)
            .with_initial_backoff(std::time::Duration::from_millis(1))
    } else {
        RetryConfig::disabled()
    };
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            // Not the test defaults: they pin one client request token.
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "lab",
            ))
            .retry_config(retries)
            .http_client(create_mock_http_client())
            .interceptor(interceptor)
            .build(),
    )
}

pub fn place(rules: &[Rule], sdk_retries: bool) -> Place {
    Place::new(client(rules, sdk_retries), "lab", "hot")
}

/// A modeled error with `code`, as the SDK parses one.
pub fn meta(code: &str) -> ErrorMetadata {
    ErrorMetadata::builder().code(code).build()
}

/// A record of requests, filled by a rule's `match_requests`.
pub type Log<T> = Arc<Mutex<Vec<T>>>;

pub fn log<T>() -> Log<T> {
    Arc::default()
}

/// A rule's request matcher that records every request in `log` and
/// matches it.
pub fn logging<T: Clone + Send + 'static>(log: &Log<T>) -> impl Fn(&T) -> bool + Send + Sync + 'static {
    let log = log.clone();
    move |input| {
        log.lock().unwrap().push(input.clone());
        true
    }
}

pub fn logged<T: Clone>(log: &Log<T>) -> Vec<T> {
    log.lock().unwrap().clone()
}
