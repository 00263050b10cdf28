//! Glue shared by the Lambda binaries (feature `lambda`): JSON logs and the
//! stream event handler, so each `main.rs` is a few lines and tests drive
//! exactly the code Lambda runs.

use aws_lambda_events::event::streams::DynamoDbEventResponse;
use lambda_runtime::LambdaEvent;
use serde::Deserialize;
use tracing::info;

use crate::store::Store;
use crate::stream::Processor;

/// JSON logs on stdout (CloudWatch), level from `RUST_LOG` or
/// `AWS_LAMBDA_LOG_LEVEL`, default `info`.
pub fn init_tracing() {
    let filter = std::env::var("RUST_LOG")
        .or_else(|_| std::env::var("AWS_LAMBDA_LOG_LEVEL").map(|l| l.to_lowercase()))
        .unwrap_or_else(|_| "info".to_owned());
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_current_span(false)
        .with_target(false)
        .without_time()
        .init();
}

/// A DynamoDB stream event whose records are kept raw, so one malformed
/// record fails alone (by its sequence number) instead of failing the
/// deserialization of the whole batch.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RawStreamEvent {
    #[serde(rename = "Records", default)]
    pub records: Vec<serde_json::Value>,
}

/// Handles one stream batch: the partial batch response names the first
/// record that could not be processed. A failed record without a sequence
/// number fails the invocation, which makes the mapping retry and bisect.
pub async fn handle_stream_event<S: Store>(
    processor: &Processor<S>,
    event: LambdaEvent<RawStreamEvent>,
) -> Result<DynamoDbEventResponse, lambda_runtime::Error> {
    let report = processor
        .process_json(&event.payload.records, crate::now_millis())
        .await;
    info!(
        request_id = %event.context.request_id,
        records = event.payload.records.len(),
        counted = report.counted,
        deleted_counted = report.deleted_counted,
        deleted_uncounted = report.deleted_uncounted,
        already_done = report.already_done,
        ignored = report.ignored,
        retries = report.retries,
        failed_sequence_number = report.failed_sequence_number.as_deref(),
        "stream batch processed"
    );
    if report.batch_failure {
        return Err(format!(
            "a record without a sequence number failed: {}",
            report.failure_reason.unwrap_or_default()
        )
        .into());
    }
    Ok(report.to_response())
}
