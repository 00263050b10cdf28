//! The DLQ reprocessor's Lambda glue: a batch of DLQ1 messages, each an
//! on-failure record replayed on its own by
//! [`hybrid_counter_aws::replay::replay`], and the partial batch response
//! that returns only the messages that may still succeed to the queue. A
//! message that never can (not an on-failure record, or one of another
//! stream than the stack's: [`ReplayError::is_permanent`]) goes to DLQ2 at
//! once, its body unchanged and its reason in the message attribute
//! [`REASON_ATTRIBUTE`], and is reported as handled so DLQ1 deletes it.
//! Every invocation prints one line of the kit's metrics (replays,
//! permanent failures, events counted, retries, transactions, conflicts,
//! write units; see [`hybrid_counter::metrics`]). `main.rs` wires it to the
//! runtime; the end-to-end tests call the same function.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use hybrid_counter::config::{ENV_DLQ2_URL, ENV_STREAM_ARN};
use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter::store::Store;
use hybrid_counter::stream::Processor;
use hybrid_counter_aws::info_with_cost;
use hybrid_counter_aws::lambda::{CostWatch, emit_metrics};
use hybrid_counter_aws::replay::{OnFailureRecord, REASON_ATTRIBUTE, ReplayError, replay};
use lambda_runtime::LambdaEvent;
use tracing::{info, warn};

/// The longest reason sent as an attribute, in bytes: attributes count
/// toward SQS's 256 KiB message limit, and the body is sent unchanged.
pub const MAX_REASON_BYTES: usize = 1024;

/// Where a permanent failure goes and how one is recognised: the stream the
/// stack's mapping reads and DLQ2.
#[derive(Debug, Clone)]
pub struct PermanentFailures {
    pub sqs: aws_sdk_sqs::Client,
    /// `DLQ2_URL`.
    pub dlq2_url: String,
    /// `STREAM_ARN`: an on-failure record of any other stream is permanent.
    pub stream_arn: String,
}

impl PermanentFailures {
    /// From the function's environment as `lookup` reads it (`DLQ2_URL`,
    /// `STREAM_ARN`, both set by the stack); a missing one is an error at
    /// start-up, not a surprise on the first bad message.
    pub fn from_lookup(
        sqs: aws_sdk_sqs::Client,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, lambda_runtime::Error> {
        let required = |name: &str| {
            lookup(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| format!("environment variable {name} is not set"))
        };
        Ok(Self {
            sqs,
            dlq2_url: required(ENV_DLQ2_URL)?,
            stream_arn: required(ENV_STREAM_ARN)?,
        })
    }

    /// Sends `body` to DLQ2 with `error` as its reason; DLQ2's message id.
    async fn send(&self, body: &str, error: &ReplayError) -> Result<String, String> {
        let reason = error.to_string();
        let reason = truncate(&reason, MAX_REASON_BYTES);
        hybrid_counter_aws::sqs::send(&self.sqs, &self.dlq2_url, body, &[(REASON_ATTRIBUTE, reason)])
            .await
            .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Handles one batch of DLQ1 messages: each is replayed on its own, and
/// only those that may still succeed and could not be replayed are
/// reported, so a bad message never holds back the others. A permanent
/// failure is sent to DLQ2 and reported as handled; if that send fails it
/// is reported like any other failure and stays in DLQ1 (it reaches DLQ2
/// after `maxReceiveCount` receives, as before), so nothing is lost. The
/// invocation's metrics are printed once, whatever the outcome.
pub async fn handle_dlq_event<S: Store>(
    processor: &Processor<S>,
    streams: &aws_sdk_dynamodbstreams::Client,
    permanent: &PermanentFailures,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let mut metrics = Metrics::from_env();
    let response = process_dlq_event(processor, streams, permanent, event, &mut metrics).await;
    emit_metrics(&metrics);
    response
}

/// [`handle_dlq_event`] without the printing: replays, permanent failures
/// sent to DLQ2, the replayed batches' counts and the cost are added to
/// `metrics`.
pub async fn process_dlq_event<S: Store>(
    processor: &Processor<S>,
    streams: &aws_sdk_dynamodbstreams::Client,
    permanent: &PermanentFailures,
    event: LambdaEvent<SqsEvent>,
    metrics: &mut Metrics,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let watch = CostWatch::start(processor.store());
    let mut response = SqsBatchResponse::default();
    let mut sent_to_dlq2 = 0;
    // Zeros first, counted up per message: a batch that fails part-way
    // still reports what it did, and an idle one reports data, not nothing.
    metrics.add(Metric::Replays, 0.0).add(Metric::PermanentFailures, 0.0);
    for message in &event.payload.records {
        let Some(message_id) = message.message_id.clone().filter(|id| !id.is_empty()) else {
            return Err("an SQS message without a messageId cannot be reported; failing the batch".into());
        };
        let body = message.body.as_deref().unwrap_or_default();
        let outcome = match OnFailureRecord::from_body_of(body, &permanent.stream_arn) {
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
        let failed = match outcome {
            Ok((record, report)) => {
                info!(
                    %message_id,
                    shard_id = %record.batch_info.shard_id,
                    start = %record.batch_info.start_sequence_number,
                    end = %record.batch_info.end_sequence_number,
                    counted = report.counted,
                    deleted_counted = report.deleted_counted,
                    deleted_uncounted = report.deleted_uncounted,
                    already_done = report.already_done,
                    "replayed a failed stream batch"
                );
                metrics.add(Metric::Replays, 1.0).add_batch(&report);
                false
            }
            Err(err) if err.is_permanent() => match permanent.send(body, &err).await {
                Ok(dlq2_message_id) => {
                    sent_to_dlq2 += 1;
                    metrics.add(Metric::PermanentFailures, 1.0);
                    warn!(%message_id, %dlq2_message_id, reason = %err, "this message can never be replayed; sent to DLQ2");
                    false
                }
                Err(send_error) => {
                    warn!(%message_id, reason = %err, error = %send_error, "this message can never be replayed, but sending it to DLQ2 failed; it stays in the queue");
                    true
                }
            },
            Err(err) => {
                warn!(%message_id, error = %err, "could not replay this message; it stays in the queue");
                true
            }
        };
        if failed {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = message_id;
            response.batch_item_failures.push(failure);
        }
    }
    let cost = watch.cost(processor.store());
    metrics.add_cost(&cost);
    info_with_cost!(
        cost,
        messages = event.payload.records.len(),
        failed = response.batch_item_failures.len(),
        sent_to_dlq2,
        "DLQ batch handled"
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    //! The routing of each kind of message, with the SQS and Streams
    //! clients intercepted: what reaches DLQ2, what is reported back.

    use aws_lambda_events::event::sqs::SqsMessage;
    use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorError;
    use aws_sdk_sqs::operation::send_message::{SendMessageError, SendMessageOutput};
    use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};
    use hybrid_counter::memory::MemoryStore;

    use super::*;

    const DLQ2: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/hck-dlq2";
    const STREAM: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/hck-resources/stream/2026-01-01T00:00:00.000";
    const OTHER_STREAM: &str =
        "arn:aws:dynamodb:us-east-1:123456789012:table/someone-else/stream/2026-01-01T00:00:00.000";

    fn interceptor(rules: &[&Rule]) -> MockResponseInterceptor {
        rules.iter().fold(
            MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny),
            |interceptor, rule| interceptor.with_rule(rule),
        )
    }

    fn sqs(rules: &[&Rule]) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::Config::builder()
                .with_test_defaults()
                .region(aws_sdk_sqs::config::Region::new("us-east-1"))
                .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
                .http_client(create_mock_http_client())
                .interceptor(interceptor(rules))
                .build(),
        )
    }

    /// A Streams client whose every shard iterator request is throttled:
    /// a replay that may succeed later.
    fn throttled_streams(rule: &Rule) -> aws_sdk_dynamodbstreams::Client {
        aws_sdk_dynamodbstreams::Client::from_conf(
            aws_sdk_dynamodbstreams::Config::builder()
                .with_test_defaults()
                .region(aws_sdk_dynamodbstreams::config::Region::new("us-east-1"))
                .retry_config(aws_sdk_dynamodbstreams::config::retry::RetryConfig::disabled())
                .http_client(create_mock_http_client())
                .interceptor(interceptor(&[rule]))
                .build(),
        )
    }

    fn throttle() -> Rule {
        mock!(aws_sdk_dynamodbstreams::Client::get_shard_iterator).then_error(|| {
            GetShardIteratorError::generic(
                aws_smithy_types::error::ErrorMetadata::builder()
                    .code("ThrottlingException")
                    .message("slow down")
                    .build(),
            )
        })
    }

    /// Accepts a send to DLQ2 with the reason attribute, recording the body
    /// and the reason.
    fn dlq2_accepts(sent: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>) -> Rule {
        mock!(aws_sdk_sqs::Client::send_message)
            .match_requests(|r| r.queue_url() == Some(DLQ2))
            .then_compute_output(move |r| {
                let reason = r
                    .message_attributes()
                    .and_then(|a| a.get(REASON_ATTRIBUTE))
                    .and_then(|v| v.string_value())
                    .unwrap_or_default()
                    .to_owned();
                sent.lock()
                    .unwrap()
                    .push((r.message_body().unwrap_or_default().to_owned(), reason));
                SendMessageOutput::builder().message_id("in-dlq2").build()
            })
    }

    fn on_failure_body(stream_arn: &str) -> String {
        let fixture = include_str!("../../../aws/src/fixtures/on_failure_record.json");
        let mut record = OnFailureRecord::from_body(fixture).unwrap();
        record.batch_info.stream_arn = stream_arn.to_owned();
        serde_json::to_string(&record).unwrap()
    }

    fn event(bodies: &[&str]) -> LambdaEvent<SqsEvent> {
        let mut event = SqsEvent::default();
        for (n, body) in bodies.iter().enumerate() {
            let mut message = SqsMessage::default();
            message.message_id = Some(format!("m{n}"));
            message.body = Some((*body).to_owned());
            event.records.push(message);
        }
        LambdaEvent::new(event, lambda_runtime::Context::default())
    }

    fn failed_ids(response: &SqsBatchResponse) -> Vec<String> {
        response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect()
    }

    fn permanent(sqs: aws_sdk_sqs::Client) -> PermanentFailures {
        PermanentFailures {
            sqs,
            dlq2_url: DLQ2.to_owned(),
            stream_arn: STREAM.to_owned(),
        }
    }

    #[tokio::test]
    async fn permanent_failures_go_to_dlq2_with_their_reason_and_the_rest_keep_their_retries() {
        let sent = std::sync::Arc::default();
        let send = dlq2_accepts(std::sync::Arc::clone(&sent));
        let throttled = throttle();
        let (garbage, wrong_stream, ours) = ("{not json", on_failure_body(OTHER_STREAM), on_failure_body(STREAM));
        let mut metrics = Metrics::new("hc-dev");
        let response = process_dlq_event(
            &Processor::new(MemoryStore::new()),
            &throttled_streams(&throttled),
            &permanent(sqs(&[&send])),
            event(&[garbage, &wrong_stream, &ours]),
            &mut metrics,
        )
        .await
        .unwrap();
        assert_eq!(failed_ids(&response), ["m2"], "only the throttled replay is retried");
        assert_eq!(metrics.value(Metric::PermanentFailures), Some(2.0));
        assert_eq!(
            metrics.value(Metric::Replays),
            Some(0.0),
            "the throttled replay did not happen"
        );
        assert!(throttled.num_calls() >= 1, "the good record was replayed");
        let sent = sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[0].0, garbage, "the body goes to DLQ2 unchanged");
        assert!(
            sent[0].1.starts_with("not an on-failure record of a DynamoDB stream"),
            "{sent:?}"
        );
        assert_eq!(sent[1].0, wrong_stream);
        assert!(
            sent[1].1.contains(OTHER_STREAM) && sent[1].1.contains(STREAM),
            "{sent:?}"
        );
    }

    #[tokio::test]
    async fn a_permanent_failure_that_cannot_reach_dlq2_stays_in_dlq1() {
        let refused = mock!(aws_sdk_sqs::Client::send_message).then_error(|| {
            SendMessageError::generic(
                aws_smithy_types::error::ErrorMetadata::builder()
                    .code("AccessDenied")
                    .message("no sqs:SendMessage on DLQ2")
                    .build(),
            )
        });
        let throttled = throttle();
        let response = handle_dlq_event(
            &Processor::new(MemoryStore::new()),
            &throttled_streams(&throttled),
            &permanent(sqs(&[&refused])),
            event(&["garbage", "{}"]),
        )
        .await
        .unwrap();
        assert_eq!(failed_ids(&response), ["m0", "m1"]);
        assert_eq!(refused.num_calls(), 2, "each was tried once");
    }

    #[test]
    fn the_environment_must_name_dlq2_and_the_stream() {
        let client = sqs(&[]);
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        let ok = PermanentFailures::from_lookup(client.clone(), env(&[(ENV_DLQ2_URL, DLQ2), (ENV_STREAM_ARN, STREAM)]))
            .unwrap();
        assert_eq!((ok.dlq2_url.as_str(), ok.stream_arn.as_str()), (DLQ2, STREAM));
        let missing = PermanentFailures::from_lookup(client.clone(), env(&[(ENV_STREAM_ARN, STREAM)])).unwrap_err();
        assert_eq!(missing.to_string(), "environment variable DLQ2_URL is not set");
        let blank =
            PermanentFailures::from_lookup(client, env(&[(ENV_DLQ2_URL, DLQ2), (ENV_STREAM_ARN, " ")])).unwrap_err();
        assert_eq!(blank.to_string(), "environment variable STREAM_ARN is not set");
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        let reason = "é".repeat(MAX_REASON_BYTES);
        let cut = truncate(&reason, MAX_REASON_BYTES);
        assert_eq!(cut.len(), MAX_REASON_BYTES);
        assert_eq!(
            truncate(&format!("x{reason}"), MAX_REASON_BYTES).len(),
            MAX_REASON_BYTES - 1
        );
        assert_eq!(truncate("short", MAX_REASON_BYTES), "short");
    }
}
