//! The stream counter's Lambda glue: the DynamoDB stream event as it
//! arrives, the processing of one batch by the core's
//! [`hybrid_counter::stream::Processor`], and the partial batch response
//! that makes the event source mapping checkpoint at the first failed
//! record. Every invocation prints one line of the kit's metrics
//! (events counted, retries, transactions, conflicts, write units; see
//! [`hybrid_counter::metrics`]). `main.rs` wires it to the runtime; the
//! end-to-end tests and the simulation call the same functions.

use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use hybrid_counter::metrics::Metrics;
use hybrid_counter::store::StreamStore;
use hybrid_counter::stream::{BatchReport, Processor};
use hybrid_counter_aws::info_with_cost;
use hybrid_counter_aws::lambda::{CostWatch, emit_metrics};
use lambda_runtime::LambdaEvent;
use serde::Deserialize;

/// A DynamoDB stream event whose records are kept raw, so one malformed
/// record fails alone (by its sequence number) instead of failing the
/// deserialization of the whole batch.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RawStreamEvent {
    #[serde(rename = "Records", default)]
    pub records: Vec<serde_json::Value>,
}

/// The partial batch response for Lambda: the first failed record, or
/// nothing when all succeeded.
pub fn partial_batch_response(report: &BatchReport) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    if let Some(seq) = &report.failed_sequence_number {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(seq.clone());
        response.batch_item_failures.push(failure);
    }
    response
}

/// Handles one stream batch: the partial batch response names the first
/// record that could not be processed. A failed record without a sequence
/// number fails the invocation, which makes the mapping retry and bisect.
/// The invocation's metrics are printed once, whatever the outcome.
pub async fn handle_stream_event<S: StreamStore>(
    processor: &Processor<S>,
    event: LambdaEvent<RawStreamEvent>,
) -> Result<DynamoDbEventResponse, lambda_runtime::Error> {
    let mut metrics = Metrics::from_env();
    let response = process_stream_event(processor, event, &mut metrics).await;
    emit_metrics(&metrics);
    response
}

/// [`handle_stream_event`] without the printing: the batch's counts and
/// cost are added to `metrics`.
pub async fn process_stream_event<S: StreamStore>(
    processor: &Processor<S>,
    event: LambdaEvent<RawStreamEvent>,
    metrics: &mut Metrics,
) -> Result<DynamoDbEventResponse, lambda_runtime::Error> {
    let watch = CostWatch::start(processor.store());
    // Boxed: the batched processor's future is deep enough to overflow the
    // compiler's layout recursion limit when inlined into `main`.
    let report = Box::pin(processor.process_json(&event.payload.records, hybrid_counter::now_millis())).await;
    let cost = watch.cost(processor.store());
    metrics.add_batch(&report).add_cost(&cost);
    info_with_cost!(
        cost,
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
    Ok(partial_batch_response(&report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_names_the_first_failed_record_and_nothing_else() {
        let done = BatchReport {
            counted: 3,
            ..BatchReport::default()
        };
        assert!(partial_batch_response(&done).batch_item_failures.is_empty());
        let stopped = BatchReport {
            counted: 1,
            failed_sequence_number: Some("2".into()),
            failure_reason: Some("gave up".into()),
            ..BatchReport::default()
        };
        let response = partial_batch_response(&stopped);
        assert_eq!(response.batch_item_failures.len(), 1);
        assert_eq!(response.batch_item_failures[0].item_identifier.as_deref(), Some("2"));
    }
}
