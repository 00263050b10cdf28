//! Lambda entry point of the stream counter: builds the processor once and
//! hands every stream batch to [`stream_counter::handle_stream_event`].

use hybrid_counter_aws::lambda::processor_from_env;
use lambda_runtime::{Error, service_fn};
use stream_counter::handle_stream_event;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let (processor, _) = processor_from_env().await?;
    lambda_runtime::run(service_fn(|event| handle_stream_event(&processor, event))).await
}
