//! Lambda entry point of the drift check: reads the configuration (tables,
//! shards, admission mode, read budget) and builds the DynamoDB store once,
//! and hands every scheduled event to [`drift_check::handle_drift_check`].

use drift_check::{Settings, handle_drift_check};
use hybrid_counter::Clock;
use hybrid_counter_aws::lambda::{init_tracing, store_from_env};
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let settings = Settings::from_lookup(|name| std::env::var(name).ok())?;
    let (store, config, _) = store_from_env().await?;
    let clock = Clock::system();
    lambda_runtime::run(service_fn(|event| {
        handle_drift_check(&store, &config, &settings, &clock, event)
    }))
    .await
}
