//! Glue shared by the Lambda binaries (feature `lambda`): JSON logs and the
//! stream event handler, so each `main.rs` is a few lines and tests drive
//! exactly the code Lambda runs.

use aws_lambda_events::event::streams::DynamoDbEventResponse;
use lambda_runtime::LambdaEvent;
use serde::Deserialize;
use tracing::info;

use crate::store::Store;
use crate::store::meter::MeterSnapshot;
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

/// What both stream-processing functions build once at start-up: the
/// processor over the tables named by the environment (`RESOURCES_TABLE`,
/// `COUNTERS_TABLE`, `EC_SHARDS`, `PROCESSING_MODE`) and the SDK configuration (standard
/// chain, `AWS_ENDPOINT_URL` honoured) for any other client they need.
pub async fn processor_from_env()
-> Result<(Processor<crate::DynamoStore>, aws_config::SdkConfig), lambda_runtime::Error> {
    let config = crate::CounterConfig::from_env()?;
    let mode = crate::CounterConfig::processing_mode_from_lookup(|name| std::env::var(name).ok())?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let store = crate::DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config);
    let processor = Processor::new(store)
        .with_eventual_shards(config.eventual_shards)
        .with_mode(mode)
        .with_clock(crate::Clock::system());
    Ok((processor, sdk))
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
    // Boxed: the batched processor's future is deep enough to overflow the
    // compiler's layout recursion limit when inlined into `main`.
    let before = processor.store().cost_meter().map(|m| m.snapshot());
    let report = Box::pin(processor.process_json(&event.payload.records, crate::now_millis())).await;
    let cost = cost_since(processor.store(), before);
    info!(
        requests = cost.requests.total(),
        transactions = cost.transactions_committed,
        items_written = cost.items_written(),
        counter_item_writes = cost.counter_item_writes(),
        write_units = cost.write_units,
        conflicts = cost.transactions_cancelled.conflict,
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

/// What the store's requests cost since `before` (zeros for a store
/// without a meter), for an invocation's log line.
fn cost_since<S: Store>(store: &S, before: Option<MeterSnapshot>) -> MeterSnapshot {
    store
        .cost_meter()
        .zip(before)
        .map(|(meter, before)| meter.snapshot().since(&before))
        .unwrap_or_default()
}

/// Handles one batch of DLQ1 messages: each is replayed on its own, and
/// only those that could not be replayed are reported, so a garbage message
/// never holds back the others (it alone returns to the queue and, after
/// `maxReceiveCount` receives, moves to DLQ2).
pub async fn handle_dlq_event<S: Store>(
    processor: &Processor<S>,
    streams: &aws_sdk_dynamodbstreams::Client,
    event: LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>,
) -> Result<aws_lambda_events::event::sqs::SqsBatchResponse, lambda_runtime::Error> {
    use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse};
    use tracing::warn;

    use crate::stream::replay::{OnFailureRecord, replay};

    let before = processor.store().cost_meter().map(|m| m.snapshot());
    let mut response = SqsBatchResponse::default();
    for message in &event.payload.records {
        let Some(message_id) = message.message_id.clone().filter(|id| !id.is_empty()) else {
            return Err("an SQS message without a messageId cannot be reported; failing the batch".into());
        };
        let outcome = match OnFailureRecord::from_body(message.body.as_deref().unwrap_or_default()) {
            Ok(record) => Box::pin(replay(processor, streams, &record.batch_info, crate::now_millis()))
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
    let cost = cost_since(processor.store(), before);
    info!(
        messages = event.payload.records.len(),
        failed = response.batch_item_failures.len(),
        requests = cost.requests.total(),
        transactions = cost.transactions_committed,
        items_written = cost.items_written(),
        counter_item_writes = cost.counter_item_writes(),
        write_units = cost.write_units,
        conflicts = cost.transactions_cancelled.conflict,
        "DLQ batch handled"
    );
    Ok(response)
}
