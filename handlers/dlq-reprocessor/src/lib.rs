//! The DLQ reprocessor's Lambda glue: a batch of DLQ1 messages, each
//! handled on its own, and the partial batch response that returns only the
//! messages that may still succeed to the queue. A message is one of
//! ([`Dlq1Message`]):
//! - an on-failure record (`FailedBatchRecords=pointer`): its range is read
//!   back from the stream and replayed ([`hybrid_counter_aws::replay::replay`]);
//! - an S3 notification of a failed batch kept with its records
//!   (`FailedBatchRecords=payload`): the object is read
//!   ([`hybrid_counter_aws::s3::fetch_failed_batch`]) only if its key is
//!   under Lambda's `aws/lambda/<mapping uuid>/` and it is no larger than a
//!   failed batch can be (the role confines reads to the stack's bucket), and its records
//!   replayed ([`hybrid_counter_aws::failed_batch::replay_payload`]), so a
//!   range that has left the stream is still counted;
//! - S3's test event, sent once when the notification is configured:
//!   deleted, nothing to do.
//!
//! A message that never can succeed (not one of these, one of another
//! stream than the stack's, an object outside Lambda's key layout, too
//! large, gone or not a failed batch: [`ReplayError::is_permanent`]) goes to DLQ2 at once, its body
//! unchanged, its reason in the message attribute [`REASON_ATTRIBUTE`] and
//! its DLQ1 message id in [`ORIGINAL_MESSAGE_ID_ATTRIBUTE`] (the re-sent
//! message gets a new id; `redrive --dry-run` shows the original), and is
//! reported as handled so DLQ1 deletes it. Every invocation prints one
//! line of the kit's metrics (replays, permanent failures, events counted,
//! retries, transactions, conflicts, write units; see
//! [`hybrid_counter::metrics`]). `main.rs` wires it to the
//! runtime; the end-to-end tests call the same function.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use hybrid_counter::config::{ENV_DLQ2_URL, ENV_STREAM_ARN};
use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter::store::StreamStore;
use hybrid_counter::stream::BatchReport;
use hybrid_counter::stream::Processor;
use hybrid_counter_aws::failed_batch::{Dlq1Message, Expected, replay_payload};
use hybrid_counter_aws::info_with_cost;
use hybrid_counter_aws::lambda::{CostWatch, emit_metrics};
use hybrid_counter_aws::replay::{ORIGINAL_MESSAGE_ID_ATTRIBUTE, REASON_ATTRIBUTE, ReplayError, replay};
use hybrid_counter_aws::s3::fetch_failed_batch;
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

    /// Sends `body` (DLQ1's message `message_id`) to DLQ2 with `error` as
    /// its reason and `message_id` as its original id; DLQ2's message id.
    async fn send(&self, message_id: &str, body: &str, error: &ReplayError) -> Result<String, String> {
        let reason = error.to_string();
        let reason = truncate(&reason, MAX_REASON_BYTES);
        let attributes = [(REASON_ATTRIBUTE, reason), (ORIGINAL_MESSAGE_ID_ATTRIBUTE, message_id)];
        hybrid_counter_aws::sqs::send(&self.sqs, &self.dlq2_url, body, &attributes)
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

/// The services a replay reads: the stream (pointers) and the failed-batch
/// bucket (kept payloads).
#[derive(Debug, Clone)]
pub struct Sources {
    pub streams: aws_sdk_dynamodbstreams::Client,
    pub s3: aws_sdk_s3::Client,
}

/// Handles one DLQ1 message: `None` for S3's test event (nothing to
/// replay), otherwise what the replay of the batch it names came to.
async fn handle_message<S: StreamStore>(
    processor: &Processor<S>,
    sources: &Sources,
    stream_arn: &str,
    body: &str,
) -> (Option<Dlq1Message>, Result<Option<BatchReport>, ReplayError>) {
    let message = match Dlq1Message::parse_of(body, stream_arn) {
        Ok(message) => message,
        Err(err) => return (None, Err(err)),
    };
    let now = hybrid_counter::now_millis();
    let outcome = match &message {
        Dlq1Message::Pointer(record) => Box::pin(replay(processor, &sources.streams, &record.batch_info, now))
            .await
            .map(Some),
        // The role may read the stack's bucket only; the key and size are
        // checked here.
        Dlq1Message::Object(object) => {
            match fetch_failed_batch(&sources.s3, object, Expected::KeyLayout, stream_arn).await {
                Ok(batch) => Box::pin(replay_payload(processor, &batch, now)).await.map(Some),
                Err(err) => Err(err),
            }
        }
        Dlq1Message::S3TestEvent => Ok(None),
    };
    (Some(message), outcome)
}

/// Handles one batch of DLQ1 messages: each is replayed on its own, and
/// only those that may still succeed and could not be replayed are
/// reported, so a bad message never holds back the others. A permanent
/// failure is sent to DLQ2 and reported as handled; if that send fails it
/// is reported like any other failure and stays in DLQ1 (it reaches DLQ2
/// after `maxReceiveCount` receives, as before), so nothing is lost. The
/// invocation's metrics are printed once, whatever the outcome.
pub async fn handle_dlq_event<S: StreamStore>(
    processor: &Processor<S>,
    sources: &Sources,
    permanent: &PermanentFailures,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let mut metrics = Metrics::from_env();
    let response = process_dlq_event(processor, sources, permanent, event, &mut metrics).await;
    emit_metrics(&metrics);
    response
}

/// [`handle_dlq_event`] without the printing: replays, permanent failures
/// sent to DLQ2, the replayed batches' counts and the cost are added to
/// `metrics`.
pub async fn process_dlq_event<S: StreamStore>(
    processor: &Processor<S>,
    sources: &Sources,
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
        let (parsed, outcome) = handle_message(processor, sources, &permanent.stream_arn, body).await;
        let what = parsed.as_ref().map(Dlq1Message::describe).unwrap_or_default();
        let failed = match outcome {
            Ok(Some(report)) => {
                info!(
                    %message_id,
                    batch = %what,
                    counted = report.counted,
                    deleted_counted = report.deleted_counted,
                    deleted_uncounted = report.deleted_uncounted,
                    already_done = report.already_done,
                    "replayed a failed stream batch"
                );
                metrics.add(Metric::Replays, 1.0).add_batch(&report);
                false
            }
            Ok(None) => {
                info!(%message_id, "S3's test event of the failed-batch notification; nothing to replay");
                false
            }
            Err(err) if err.is_permanent() => match permanent.send(&message_id, body, &err).await {
                Ok(dlq2_message_id) => {
                    sent_to_dlq2 += 1;
                    metrics.add(Metric::PermanentFailures, 1.0);
                    warn!(%message_id, %dlq2_message_id, batch = %what, reason = %err, "this message can never be replayed; sent to DLQ2");
                    false
                }
                Err(send_error) => {
                    warn!(%message_id, batch = %what, reason = %err, error = %send_error, "this message can never be replayed, but sending it to DLQ2 failed; it stays in the queue");
                    true
                }
            },
            Err(err) => {
                warn!(%message_id, batch = %what, error = %err, "could not replay this message; it stays in the queue");
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
    use hybrid_counter_aws::replay::OnFailureRecord;

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

    /// Accepts a send to DLQ2, recording the body, the reason attribute and
    /// the original message id attribute.
    fn dlq2_accepts(sent: std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>) -> Rule {
        mock!(aws_sdk_sqs::Client::send_message)
            .match_requests(|r| r.queue_url() == Some(DLQ2))
            .then_compute_output(move |r| {
                let attribute = |name| {
                    r.message_attributes()
                        .and_then(|a| a.get(name))
                        .and_then(|v| v.string_value())
                        .unwrap_or_default()
                        .to_owned()
                };
                sent.lock().unwrap().push((
                    r.message_body().unwrap_or_default().to_owned(),
                    attribute(REASON_ATTRIBUTE),
                    attribute(ORIGINAL_MESSAGE_ID_ATTRIBUTE),
                ));
                SendMessageOutput::builder().message_id("in-dlq2").build()
            })
    }

    fn s3(rules: &[&Rule]) -> aws_sdk_s3::Client {
        aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::Config::builder()
                .with_test_defaults()
                .region(aws_sdk_s3::config::Region::new("us-east-1"))
                .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
                .http_client(create_mock_http_client())
                .interceptor(interceptor(rules))
                .build(),
        )
    }

    fn sources(streams: aws_sdk_dynamodbstreams::Client, s3: aws_sdk_s3::Client) -> Sources {
        Sources { streams, s3 }
    }

    const NOTIFICATION: &str = include_str!("../../../aws/src/fixtures/s3_object_created.json");
    const KEPT_BATCH: &str = include_str!("../../../aws/src/fixtures/failed_batch_object.json");
    /// The stream of the fixtures of a kept batch.
    const KEPT_STREAM: &str =
        "arn:aws:dynamodb:us-east-1:123456789012:table/hybrid-counter-resources/stream/2026-11-14T00:04:06.388";

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
            &sources(throttled_streams(&throttled), s3(&[])),
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
        let originals: Vec<&str> = sent.iter().map(|(_, _, original)| original.as_str()).collect();
        assert_eq!(originals, ["m0", "m1"], "each carries its DLQ1 message id");
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
            &sources(throttled_streams(&throttled), s3(&[])),
            &permanent(sqs(&[&refused])),
            event(&["garbage", "{}"]),
        )
        .await
        .unwrap();
        assert_eq!(failed_ids(&response), ["m0", "m1"]);
        assert_eq!(refused.num_calls(), 2, "each was tried once");
    }

    /// `FailedBatchRecords=payload`: the notification's object is read and
    /// its records counted, with no stream read at all (the range may have
    /// left the stream); S3's test event is deleted without a trace in
    /// DLQ2; a notification of an object that is gone, or of one outside
    /// Lambda's key layout (never read), goes to DLQ2 at once.
    #[tokio::test]
    async fn kept_batches_are_replayed_from_their_object_and_the_test_event_is_dropped() {
        let sent = std::sync::Arc::default();
        let send = dlq2_accepts(std::sync::Arc::clone(&sent));
        let throttled = throttle();
        let object_key = serde_json::from_str::<serde_json::Value>(NOTIFICATION).unwrap()["Records"][0]["s3"]["object"]
            ["key"]
            .as_str()
            .unwrap()
            .to_owned();
        let serve = mock!(aws_sdk_s3::Client::get_object)
            .match_requests(move |r| r.key() == Some(object_key.as_str()))
            .then_output(|| {
                aws_sdk_s3::operation::get_object::GetObjectOutput::builder()
                    .body(aws_sdk_s3::primitives::ByteStream::from_static(KEPT_BATCH.as_bytes()))
                    .build()
            });
        let gone = mock!(aws_sdk_s3::Client::get_object).then_error(|| {
            aws_sdk_s3::operation::get_object::GetObjectError::NoSuchKey(
                aws_sdk_s3::types::error::NoSuchKey::builder().build(),
            )
        });
        let mut missing: serde_json::Value = serde_json::from_str(NOTIFICATION).unwrap();
        missing["Records"][0]["s3"]["object"]["key"] = "aws/lambda/mapping/shardId-1/expired".into();
        let missing = missing.to_string();
        // A forged notification: an object outside Lambda's key layout.
        let mut forged: serde_json::Value = serde_json::from_str(NOTIFICATION).unwrap();
        forged["Records"][0]["s3"]["object"]["key"] = "exports/customers.json".into();
        let forged = forged.to_string();
        let store = MemoryStore::new();
        store.put_item("acct", "w1", "inc-w1", false, false).await;
        store.put_item("acct", "w2", "inc-w2", false, false).await;
        let processor = Processor::new(store);
        let mut failures = permanent(sqs(&[&send]));
        failures.stream_arn = KEPT_STREAM.to_owned();
        let test_event = include_str!("../../../aws/src/fixtures/s3_test_event.json");
        let response = handle_dlq_event(
            &processor,
            &sources(throttled_streams(&throttled), s3(&[&serve, &gone])),
            &failures,
            event(&[NOTIFICATION, test_event, &missing, &forged]),
        )
        .await
        .unwrap();
        assert!(failed_ids(&response).is_empty(), "{response:?}");
        assert_eq!(throttled.num_calls(), 0, "a kept batch never reads the stream");
        assert_eq!(processor.store().counter("acct", "eventual"), 2, "both records counted");
        let sent = sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 2, "the missing and the forged object reach DLQ2: {sent:?}");
        assert_eq!(sent[0].0, missing);
        assert!(
            sent[0].1.contains("does not exist") && sent[0].1.contains("aws/lambda/mapping/shardId-1/expired"),
            "{sent:?}"
        );
        assert_eq!(sent[1].0, forged);
        assert!(
            sent[1].1.contains("not one of the stack's failed batches") && sent[1].1.contains("not under aws/lambda/"),
            "sent at once with its reason, never read: {sent:?}"
        );
        assert_eq!(gone.num_calls(), 1, "the forged object was never requested");
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
