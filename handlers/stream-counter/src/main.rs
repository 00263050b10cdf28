//! Lambda entry point of the stream counter: builds the processor once and
//! hands every stream batch to [`stream_counter::handle_stream_event`].

use hybrid_counter_aws::lambda::{init_tracing, processor_from_env};
use lambda_runtime::{Error, service_fn};
use stream_counter::handle_stream_event;

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let (processor, _) = processor_from_env().await?;
    lambda_runtime::run(service_fn(|event| handle_stream_event(&processor, event))).await
}
