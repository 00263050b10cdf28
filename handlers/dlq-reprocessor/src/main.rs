//! Lambda entry point of the DLQ reprocessor: builds the clients once and
//! hands every DLQ1 batch to the shared replay code.

use hybrid_counter::lambda::{handle_dlq_event, init_tracing};
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
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    lambda_runtime::run(service_fn(|event| handle_dlq_event(&processor, &streams, event))).await
}
