//! Lambda entry point of the drift check: reads the configuration (tables,
//! shards, admission mode, read budget, limits file) and builds the
//! DynamoDB store and the S3 client once,
//! and hands every scheduled event to [`drift_check::handle_drift_check`].

use drift_check::{Settings, handle_drift_check};
use hybrid_counter::Clock;
use hybrid_counter_aws::lambda::store_from_env;
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = Settings::from_lookup(|name| std::env::var(name).ok())?;
    let (store, config, sdk) = store_from_env().await?;
    let s3 = hybrid_counter_aws::s3::client(&sdk);
    let clock = Clock::system();
    lambda_runtime::run(service_fn(|event| {
        handle_drift_check(&store, &s3, &config, &settings, &clock, event)
    }))
    .await
}
