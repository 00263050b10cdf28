//! Test helpers of the redrive paths: an SQS client that answers from a
//! script of mocked calls (any call out of order fails the test), the
//! answers it gives, and the messages and on-failure records they carry.

use std::sync::{Arc, Mutex};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchOutput;
use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchResultEntry, DeleteMessageBatchResultEntry, Message, SendMessageBatchResultEntry,
};
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};
use hybrid_counter_aws::replay::OnFailureRecord;

pub(super) const SOURCE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/hck-dlq2";
pub(super) const DESTINATION: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/hck-dlq1";
/// The stack's stream, the one [`record`] names.
pub(super) const STREAM: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/hck-resources/stream/x";

/// An on-failure record of a one-record batch, as an SQS body.
pub(super) fn record() -> String {
    use hybrid_counter_aws::replay::{RequestContext, ResponseContext, StreamBatchInfo};
    serde_json::to_string(&OnFailureRecord {
        request_context: RequestContext {
            request_id: "r".into(),
            function_arn: "arn:aws:lambda:us-east-1:123456789012:function:hck-stream-counter".into(),
            condition: "RetryAttemptsExhausted".into(),
            approximate_invoke_count: 2,
        },
        response_context: ResponseContext {
            status_code: 200,
            executed_version: "$LATEST".into(),
            function_error: Some("Unhandled".into()),
        },
        version: "1.0".into(),
        timestamp: "2026-01-01T00:00:00Z".into(),
        batch_info: StreamBatchInfo {
            shard_id: "shardId-1".into(),
            start_sequence_number: "800000000003126276362".into(),
            end_sequence_number: "800000000003126276362".into(),
            approximate_arrival_of_first_record: "2026-01-01T00:00:00Z".into(),
            approximate_arrival_of_last_record: "2026-01-01T00:00:00Z".into(),
            batch_size: 1,
            stream_arn: STREAM.into(),
        },
    })
    .unwrap()
}

/// A client answering from `rules` in order: any call out of that order
/// fails the test.
pub(super) fn client(rules: &[&Rule]) -> Client {
    let interceptor = rules.iter().fold(
        MockResponseInterceptor::new().rule_mode(RuleMode::Sequential),
        |interceptor, rule| interceptor.with_rule(rule),
    );
    Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .with_test_defaults()
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .http_client(create_mock_http_client())
            .interceptor(interceptor)
            .build(),
    )
}

pub(super) fn message(id: &str, body: &str) -> Message {
    Message::builder()
        .message_id(id)
        .receipt_handle(format!("handle-{id}"))
        .body(body)
        .build()
}

pub(super) fn receive(messages: Vec<Message>) -> Rule {
    mock!(Client::receive_message).then_output(move || {
        ReceiveMessageOutput::builder()
            .set_messages(Some(messages.clone()))
            .build()
    })
}

pub(super) fn receive_nothing() -> Rule {
    mock!(Client::receive_message).then_output(|| ReceiveMessageOutput::builder().build())
}

/// Confirms every entry sent (send) or deleted (delete), recording the
/// bodies or receipt handles in `log`.
pub(super) fn send_ok(log: Arc<Mutex<Vec<String>>>) -> Rule {
    mock!(Client::send_message_batch)
        .match_requests(|req| req.queue_url() == Some(DESTINATION))
        .then_compute_output(move |req| {
            let mut out = SendMessageBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .set_failed(Some(Vec::new()));
            for entry in req.entries() {
                log.lock().unwrap().push(format!("send {}", entry.message_body()));
                out = out.successful(
                    SendMessageBatchResultEntry::builder()
                        .id(entry.id())
                        .message_id("new")
                        .md5_of_message_body("md5")
                        .build()
                        .unwrap(),
                );
            }
            out.build().unwrap()
        })
}

pub(super) fn delete_ok(log: Arc<Mutex<Vec<String>>>) -> Rule {
    mock!(Client::delete_message_batch)
        .match_requests(|req| req.queue_url() == Some(SOURCE))
        .then_compute_output(move |req| {
            let mut out = DeleteMessageBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .set_failed(Some(Vec::new()));
            for entry in req.entries() {
                log.lock().unwrap().push(format!("delete {}", entry.receipt_handle()));
                out = out.successful(DeleteMessageBatchResultEntry::builder().id(entry.id()).build().unwrap());
            }
            out.build().unwrap()
        })
}

pub(super) fn release_ok(log: Arc<Mutex<Vec<String>>>) -> Rule {
    mock!(Client::change_message_visibility_batch)
        .match_requests(|req| req.entries().iter().all(|e| e.visibility_timeout() == Some(0)))
        .then_compute_output(move |req| {
            let mut out = ChangeMessageVisibilityBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .set_failed(Some(Vec::new()));
            for entry in req.entries() {
                log.lock().unwrap().push(format!("release {}", entry.receipt_handle()));
                out = out.successful(
                    ChangeMessageVisibilityBatchResultEntry::builder()
                        .id(entry.id())
                        .build()
                        .unwrap(),
                );
            }
            out.build().unwrap()
        })
}

pub(super) fn log() -> Arc<Mutex<Vec<String>>> {
    Arc::default()
}
