//! The DLQ reprocessor's Lambda glue: a batch of DLQ1 messages, each an
//! on-failure record replayed on its own by
//! [`hybrid_counter_aws::replay::replay`], and the partial batch response
//! that returns only the messages that could not be replayed to the queue.
//! `main.rs` wires it to the runtime; the end-to-end tests call the same
//! function.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use hybrid_counter::store::Store;
use hybrid_counter::stream::Processor;
use hybrid_counter_aws::info_with_cost;
use hybrid_counter_aws::lambda::CostWatch;
use hybrid_counter_aws::replay::{OnFailureRecord, replay};
use lambda_runtime::LambdaEvent;
use tracing::{info, warn};

/// Handles one batch of DLQ1 messages: each is replayed on its own, and
/// only those that could not be replayed are reported, so a garbage message
/// never holds back the others (it alone returns to the queue and, after
/// `maxReceiveCount` receives, moves to DLQ2).
pub async fn handle_dlq_event<S: Store>(
    processor: &Processor<S>,
    streams: &aws_sdk_dynamodbstreams::Client,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let watch = CostWatch::start(processor.store());
    let mut response = SqsBatchResponse::default();
    for message in &event.payload.records {
        let Some(message_id) = message.message_id.clone().filter(|id| !id.is_empty()) else {
            return Err("an SQS message without a messageId cannot be reported; failing the batch".into());
        };
        let outcome = match OnFailureRecord::from_body(message.body.as_deref().unwrap_or_default()) {
            Ok(record) => Box::pin(replay(
                processor,
                streams,
                &record.batch_info,
                hybrid_counter::now_millis(),
            ))
            .await
            .map(|report| (record, report)),
            Err(err) => Err(err),
        };
        match outcome {
            Ok((record, report)) => info!(
                %message_id,
                shard_id = %record.batch_info.shard_id,
                start = %record.batch_info.start_sequence_number,
                end = %record.batch_info.end_sequence_number,
                counted = report.counted,
                deleted_counted = report.deleted_counted,
                deleted_uncounted = report.deleted_uncounted,
                already_done = report.already_done,
                "replayed a failed stream batch"
            ),
            Err(err) => {
                warn!(%message_id, error = %err, "could not replay this message; it stays in the queue");
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = message_id;
                response.batch_item_failures.push(failure);
            }
        }
    }
    info_with_cost!(
        watch.cost(processor.store()),
        messages = event.payload.records.len(),
        failed = response.batch_item_failures.len(),
        "DLQ batch handled"
    );
    Ok(response)
}
