//! Lambda entry point of the example HTTP API: reads the configuration
//! (tables, default limit, admission mode, best-effort shards), builds the DynamoDB client and
//! the counter once, and the scope authorization (`SCOPE_AUTHORIZATION`;
//! with `principal-tag` an IAM client reads the callers' tags), and hands
//! every function URL request to [`api::handle_with`] with the current time.

use hybrid_counter::{Counter, CounterConfig, now_millis};
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::lambda::init_tracing;
use lambda_http::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = CounterConfig::from_env()?;
    let default_limit = config.require_default_limit()?;
    let sdk = aws_config::load_from_env().await;
    let counter = Counter::configured(
        DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config),
        default_limit,
        &config,
    );
    let authorizer = api::Authorizer {
        mode: api::ScopeAuthorization::from_lookup(|name| std::env::var(name).ok())?,
        tags: api::IamTags {
            iam: aws_sdk_iam::Client::new(&sdk),
        },
    };
    let (counter, authorizer) = (&counter, &authorizer);
    lambda_http::run(service_fn(move |request| async move {
        Ok::<_, Error>(api::handle_with(counter, authorizer, request, now_millis()).await)
    }))
    .await
}
