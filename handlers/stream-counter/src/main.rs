//! Lambda entry point of the stream counter: builds the DynamoDB client once
//! and hands every stream batch to the shared processor.

use hybrid_counter::lambda::{handle_stream_event, init_tracing};
use hybrid_counter::stream::Processor;
use hybrid_counter::{CounterConfig, DynamoStore};
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = CounterConfig::from_env()?;
    let sdk = aws_config::load_from_env().await;
    let processor = Processor::new(DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config))
        .with_eventual_shards(config.eventual_shards);
    lambda_runtime::run(service_fn(|event| handle_stream_event(&processor, event))).await
}
