//! Lambda entry point of the DLQ reprocessor: builds the processor, the
//! Streams and S3 clients and the route of permanent failures to DLQ2 once, and
//! hands every DLQ1 batch to [`dlq_reprocessor::handle_dlq_event`].

use dlq_reprocessor::{PermanentFailures, Sources, handle_dlq_event};
use hybrid_counter_aws::lambda::processor_from_env;
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let (processor, sdk) = processor_from_env().await?;
    let sources = Sources {
        streams: aws_sdk_dynamodbstreams::Client::new(&sdk),
        s3: hybrid_counter_aws::s3::client(&sdk),
    };
    let permanent = PermanentFailures::from_lookup(aws_sdk_sqs::Client::new(&sdk), |name| std::env::var(name).ok())?;
    lambda_runtime::run(service_fn(|event| {
        handle_dlq_event(&processor, &sources, &permanent, event)
    }))
    .await
}
