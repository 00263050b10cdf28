//! Lambda entry point of the example HTTP API: reads the configuration
//! (tables, default limit, admission mode, best-effort shards, scope
//! authorization), builds the counter and the scope check once (with
//! `principal-tag`, an IAM client reads the callers' tags), and runs the
//! API's axum app on every function URL request.

use std::sync::Arc;

use hybrid_counter::{Counter, CounterConfig};
use hybrid_counter_aws::DynamoStore;
use lambda_http::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = CounterConfig::from_env()?;
    let default_limit = config.require_default_limit()?;
    let sdk = hybrid_counter_aws::sdk::defaults().load().await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config);
    // Started with another layout than the items': no request is served
    // (the function URL answers 502) rather than items hidden or miscounted.
    hybrid_counter_aws::lambda::confirm_layout(&store, &config).await?;
    let counter = Counter::configured(store, default_limit, &config);
    let authorizer = api::Authorizer {
        mode: api::ScopeAuthorization::from_lookup(|name| std::env::var(name).ok())?,
        tags: api::IamTags {
            iam: aws_sdk_iam::Client::new(&sdk),
        },
    };
    lambda_http::run(api::app(Arc::new(api::Api { counter, authorizer }))).await
}
