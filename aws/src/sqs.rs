//! SQS as the kit uses it: receiving messages with all their attributes
//! ([`receive`]), sending one with message attributes ([`send`]; the
//! reprocessor moves a permanent failure to DLQ2 with its reason) and
//! reading one back ([`string_attribute`]), deleting them in batches with each entry's outcome
//! ([`delete_batch`]), a queue's depth ([`depth`]) and the attributes a
//! queue mapping's poller follows ([`queue_attributes`]: visibility
//! timeout, redrive policy), and a received message as the record of
//! Lambda's SQS event ([`lambda_record`], the `aws_lambda_events` type the
//! reprocessor reads). The local runner polls DLQ1 with these;
//! `counterctl redrive` and `status` read the same things.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::event::sqs::{SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchError;
use aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesError;
use aws_sdk_sqs::operation::receive_message::ReceiveMessageError;
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
};
use serde::Serialize;
use serde_json::Value;

/// The most messages one `ReceiveMessage` returns and one
/// `DeleteMessageBatch` takes.
pub const MAX_BATCH: usize = 10;

/// The longest long-poll wait SQS allows.
const MAX_WAIT_SECONDS: i32 = 20;

/// A queue's visibility timeout when it does not say (SQS's default).
const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);

/// One `ReceiveMessage` of up to `max` messages (at most [`MAX_BATCH`]),
/// with every system and message attribute, hidden for `visibility`;
/// `wait` is the long-poll wait (zero: answer at once). Fewer than `max`,
/// or none, does not mean the queue has no more.
pub async fn receive(
    client: &Client,
    url: &str,
    max: usize,
    visibility: Duration,
    wait: Duration,
) -> Result<Vec<Message>, SdkError<ReceiveMessageError>> {
    if max == 0 {
        return Ok(Vec::new());
    }
    let output = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(i32::try_from(max.min(MAX_BATCH)).unwrap_or(1))
        .visibility_timeout(i32::try_from(visibility.as_secs()).unwrap_or(i32::MAX))
        .wait_time_seconds(i32::try_from(wait.as_secs()).unwrap_or(MAX_WAIT_SECONDS))
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await?;
    Ok(output.messages.unwrap_or_default())
}

/// Sends `body` to the queue at `url` with the String message attributes
/// `attributes` (name, value; SQS refuses an empty value); returns the new
/// message's id.
pub async fn send(
    client: &Client,
    url: &str,
    body: &str,
    attributes: &[(&str, &str)],
) -> Result<String, SdkError<SendMessageError>> {
    let mut request = client.send_message().queue_url(url).message_body(body);
    for (name, value) in attributes {
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(*value)
            .build()
            .map_err(SdkError::construction_failure)?;
        request = request.message_attributes(*name, value);
    }
    let output = request.send().await?;
    Ok(output.message_id.unwrap_or_default())
}

/// The String value of the message attribute `name` of a received message
/// (received with [`receive`], which asks for every attribute).
pub fn string_attribute<'a>(message: &'a Message, name: &str) -> Option<&'a str> {
    message.message_attributes()?.get(name)?.string_value()
}

/// A message `DeleteMessageBatch` did not delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeleteFailure {
    /// The caller's id of the entry.
    pub id: String,
    /// `code: message` as SQS gave it, or `not confirmed` when the answer
    /// listed the entry neither as deleted nor as failed.
    pub reason: String,
}

impl fmt::Display for DeleteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.id, self.reason)
    }
}

/// Deletes the messages `entries` names as `(id, receipt handle)`, in
/// requests of [`MAX_BATCH`]; the ids are the caller's (any text, only
/// handed back), the requests number the entries themselves. Returns the
/// entries that were not deleted. A request that fails as a whole ends the
/// call with its error; the requests before it did their deletes.
pub async fn delete_batch(
    client: &Client,
    url: &str,
    entries: &[(&str, &str)],
) -> Result<Vec<DeleteFailure>, SdkError<DeleteMessageBatchError>> {
    let mut failures = Vec::new();
    for chunk in entries.chunks(MAX_BATCH) {
        let request = chunk
            .iter()
            .enumerate()
            .map(|(n, (_, receipt))| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(n.to_string())
                    .receipt_handle(*receipt)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(SdkError::construction_failure)?;
        let output = client
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(request))
            .send()
            .await?;
        for (n, (id, _)) in chunk.iter().enumerate() {
            let entry = n.to_string();
            if output.successful().iter().any(|s| s.id() == entry) {
                continue;
            }
            let reason = output.failed().iter().find(|f| f.id() == entry).map_or_else(
                || "not confirmed".to_owned(),
                |f| format!("{}: {}", f.code(), f.message().unwrap_or_default()),
            );
            failures.push(DeleteFailure {
                id: (*id).to_owned(),
                reason,
            });
        }
    }
    Ok(failures)
}

/// A queue's approximate message counts; an attribute the answer lacks
/// counts 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    /// Waiting to be received (`ApproximateNumberOfMessages`).
    pub visible: u64,
    /// Received and neither deleted nor visible again (`NotVisible`).
    pub in_flight: u64,
    /// Sent with a delay that has not run out (`Delayed`).
    pub delayed: u64,
}

/// The approximate depth of the queue at `url`.
pub async fn depth(client: &Client, url: &str) -> Result<QueueDepth, SdkError<GetQueueAttributesError>> {
    let attributes = get_attributes(
        client,
        url,
        &[
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ],
    )
    .await?;
    let count = |name: QueueAttributeName| attributes.get(&name).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(QueueDepth {
        visible: count(QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        delayed: count(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    })
}

/// The settings of a queue that decide how a message returns and where it
/// ends up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueAttributes {
    /// How long a received message stays hidden (30 s when the queue does
    /// not say, SQS's default).
    pub visibility_timeout: Duration,
    pub redrive_policy: Option<RedrivePolicy>,
}

/// The visibility timeout and redrive policy of the queue at `url`.
pub async fn queue_attributes(
    client: &Client,
    url: &str,
) -> Result<QueueAttributes, SdkError<GetQueueAttributesError>> {
    let attributes = get_attributes(
        client,
        url,
        &[QueueAttributeName::VisibilityTimeout, QueueAttributeName::RedrivePolicy],
    )
    .await?;
    Ok(QueueAttributes {
        visibility_timeout: attributes
            .get(&QueueAttributeName::VisibilityTimeout)
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(DEFAULT_VISIBILITY_TIMEOUT, Duration::from_secs),
        redrive_policy: attributes
            .get(&QueueAttributeName::RedrivePolicy)
            .and_then(|raw| parse_redrive_policy(raw)),
    })
}

async fn get_attributes(
    client: &Client,
    url: &str,
    names: &[QueueAttributeName],
) -> Result<HashMap<QueueAttributeName, String>, SdkError<GetQueueAttributesError>> {
    let output = client
        .get_queue_attributes()
        .queue_url(url)
        .set_attribute_names(Some(names.to_vec()))
        .send()
        .await?;
    Ok(output.attributes.unwrap_or_default())
}

/// Where a queue sends a message received too often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedrivePolicy {
    pub dead_letter_target_arn: String,
    pub max_receive_count: u32,
}

/// `RedrivePolicy` is a JSON string; `maxReceiveCount` comes as a number or
/// a numeric string depending on who wrote it.
pub fn parse_redrive_policy(raw: &str) -> Option<RedrivePolicy> {
    let value: Value = serde_json::from_str(raw).ok()?;
    let max_receive_count = match &value["maxReceiveCount"] {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => s.parse().ok()?,
        _ => return None,
    };
    Some(RedrivePolicy {
        dead_letter_target_arn: value["deadLetterTargetArn"].as_str()?.to_owned(),
        max_receive_count: u32::try_from(max_receive_count).ok()?,
    })
}

/// Region, account and name of an SQS queue ARN (`arn:aws:sqs:REGION:ACCOUNT:NAME`).
pub fn parse_queue_arn(arn: &str) -> Option<(&str, &str, &str)> {
    match arn.split(':').collect::<Vec<_>>().as_slice() {
        ["arn", _, "sqs", region, account, name] if !name.is_empty() => Some((region, account, name)),
        _ => None,
    }
}

/// A message received from the queue `queue_arn` as the record Lambda's SQS
/// event carries ("Example standard queue message event",
/// https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html).
pub fn lambda_record(message: &Message, queue_arn: &str) -> SqsMessage {
    let text = |s: Option<&str>| Some(s.unwrap_or_default().to_owned());
    let mut record = SqsMessage::default();
    record.message_id = text(message.message_id());
    record.receipt_handle = text(message.receipt_handle());
    record.body = text(message.body());
    record.md5_of_body = text(message.md5_of_body());
    record.md5_of_message_attributes = message.md5_of_message_attributes().map(str::to_owned);
    record.attributes = message
        .attributes()
        .map(|attrs| attrs.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
        .unwrap_or_default();
    record.message_attributes = message
        .message_attributes()
        .map(|attrs| {
            attrs
                .iter()
                .map(|(name, value)| {
                    let binary = |b: &aws_smithy_types::Blob| {
                        let mut data = Base64Data::default();
                        data.extend_from_slice(b.as_ref());
                        data
                    };
                    let mut attribute = SqsMessageAttribute::default();
                    attribute.string_value = value.string_value().map(str::to_owned);
                    attribute.binary_value = value.binary_value().map(binary);
                    attribute.string_list_values = value.string_list_values().to_vec();
                    attribute.binary_list_values = value.binary_list_values().iter().map(binary).collect();
                    attribute.data_type = Some(value.data_type().to_owned());
                    (name.clone(), attribute)
                })
                .collect()
        })
        .unwrap_or_default();
    record.event_source = Some("aws:sqs".to_owned());
    record.event_source_arn = Some(queue_arn.to_owned());
    record.aws_region = Some(
        parse_queue_arn(queue_arn)
            .map(|(r, _, _)| r)
            .unwrap_or_default()
            .to_owned(),
    );
    record
}

#[cfg(test)]
mod tests {
    //! Receive, delete, depth and attributes through an intercepted SQS
    //! client; the Lambda record against the documented event.

    use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchOutput;
    use aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesOutput;
    use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
    use aws_sdk_sqs::operation::send_message::SendMessageOutput;
    use aws_sdk_sqs::types::{BatchResultErrorEntry, DeleteMessageBatchResultEntry};
    use aws_smithy_mocks::{Rule, mock};
    use aws_smithy_types::Blob;
    use serde_json::json;

    use super::*;
    use aws_smithy_mocks::mock_client;

    const URL: &str = "http://sqs.us-east-1.localhost/123456789012/hck-dlq1";

    /// One record of Lambda's documented SQS event.
    const DOCUMENTED_RECORD: &str = include_str!("fixtures/sqs_record.json");

    fn message(id: &str) -> Message {
        Message::builder()
            .message_id(id)
            .receipt_handle(format!("rh-{id}"))
            .build()
    }

    fn attributes(pairs: &'static [(QueueAttributeName, &'static str)]) -> Rule {
        mock!(Client::get_queue_attributes).then_output(move || {
            GetQueueAttributesOutput::builder()
                .set_attributes(Some(pairs.iter().cloned().map(|(k, v)| (k, v.to_owned())).collect()))
                .build()
        })
    }

    /// A `DeleteMessageBatch` answer: the request's entries whose receipt
    /// handle is in `fail` fail with `code`, the others succeed, except
    /// those in `silent`, which the answer leaves out.
    fn delete_answer(fail: &'static [&'static str], silent: &'static [&'static str]) -> Rule {
        mock!(Client::delete_message_batch)
            .match_requests(|r| r.queue_url() == Some(URL))
            .then_compute_output(move |request| {
                let (mut successful, mut failed) = (Vec::new(), Vec::new());
                for entry in request.entries() {
                    let (id, receipt) = (entry.id(), entry.receipt_handle());
                    if fail.contains(&receipt) {
                        let error = BatchResultErrorEntry::builder()
                            .id(id)
                            .sender_fault(true)
                            .code("ReceiptHandleIsInvalid")
                            .message("gone");
                        failed.push(error.build().unwrap());
                    } else if !silent.contains(&receipt) {
                        successful.push(DeleteMessageBatchResultEntry::builder().id(id).build().unwrap());
                    }
                }
                DeleteMessageBatchOutput::builder()
                    .set_successful(Some(successful))
                    .set_failed(Some(failed))
                    .build()
                    .unwrap()
            })
    }

    #[tokio::test]
    async fn a_receive_asks_for_every_attribute_within_the_limits() {
        let rule = mock!(Client::receive_message)
            .match_requests(|r| {
                r.queue_url() == Some(URL)
                    && r.max_number_of_messages() == Some(10)
                    && r.visibility_timeout() == Some(30)
                    && r.wait_time_seconds() == Some(0)
                    && r.message_system_attribute_names() == [MessageSystemAttributeName::All]
                    && r.message_attribute_names() == ["All"]
            })
            .then_output(|| ReceiveMessageOutput::builder().messages(message("a")).build());
        let client = mock_client!(aws_sdk_sqs, &[rule]);
        let got = receive(&client, URL, 25, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(got, vec![message("a")]);
    }

    #[tokio::test]
    async fn an_empty_answer_is_no_messages_and_asking_for_none_asks_nothing() {
        let rule = mock!(Client::receive_message)
            .match_requests(|r| r.max_number_of_messages() == Some(3) && r.wait_time_seconds() == Some(20))
            .then_output(|| ReceiveMessageOutput::builder().build());
        let client = mock_client!(aws_sdk_sqs, [&rule]);
        let wait = Duration::from_secs(20);
        assert!(receive(&client, URL, 3, Duration::ZERO, wait).await.unwrap().is_empty());
        assert!(receive(&client, URL, 0, Duration::ZERO, wait).await.unwrap().is_empty());
        assert_eq!(rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_send_carries_the_body_unchanged_and_each_attribute_as_a_string() {
        let body = "{\"not\": \"an on-failure record\"}";
        let rule = mock!(Client::send_message)
            .match_requests(move |r| {
                let attributes = r.message_attributes().cloned().unwrap_or_default();
                let text = |name: &str| {
                    attributes.get(name).map(|v| {
                        (
                            v.data_type().to_owned(),
                            v.string_value().unwrap_or_default().to_owned(),
                        )
                    })
                };
                r.queue_url() == Some(URL)
                    && r.message_body() == Some(body)
                    && attributes.len() == 2
                    && text("Reason") == Some(("String".into(), "garbage".into()))
                    && text("Source") == Some(("String".into(), "m-1".into()))
            })
            .then_output(|| SendMessageOutput::builder().message_id("new-id").build());
        let client = mock_client!(aws_sdk_sqs, [&rule]);
        let id = send(&client, URL, body, &[("Reason", "garbage"), ("Source", "m-1")])
            .await
            .unwrap();
        assert_eq!(id, "new-id");
        assert_eq!(rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_refused_send_is_an_error() {
        use aws_sdk_sqs::types::error::QueueDoesNotExist;
        let rule = mock!(Client::send_message)
            .then_error(|| SendMessageError::QueueDoesNotExist(QueueDoesNotExist::builder().build()));
        let client = mock_client!(aws_sdk_sqs, &[rule]);
        assert!(send(&client, URL, "body", &[("Reason", "r")]).await.is_err());
    }

    #[test]
    fn a_string_attribute_reads_back_and_a_missing_one_is_none() {
        let message = documented_message();
        assert_eq!(string_attribute(&message, "myAttribute"), Some("myValue"));
        assert_eq!(string_attribute(&message, "other"), None);
        assert_eq!(string_attribute(&Message::builder().build(), "myAttribute"), None);
    }

    #[tokio::test]
    async fn deletes_go_out_in_tens_and_report_each_entry_not_deleted() {
        let ids: Vec<String> = (0..23).map(|n| format!("message-{n}")).collect();
        let receipts: Vec<String> = (0..23).map(|n| format!("rh-{n}")).collect();
        let entries: Vec<(&str, &str)> = ids
            .iter()
            .map(String::as_str)
            .zip(receipts.iter().map(String::as_str))
            .collect();
        let client = mock_client!(
            aws_sdk_sqs,
            &[
                delete_answer(&["rh-4"], &[]),
                delete_answer(&[], &["rh-17"]),
                delete_answer(&["rh-22"], &[]),
            ]
        );
        let failures = delete_batch(&client, URL, &entries).await.unwrap();
        assert_eq!(
            failures,
            [
                DeleteFailure {
                    id: "message-4".into(),
                    reason: "ReceiptHandleIsInvalid: gone".into()
                },
                DeleteFailure {
                    id: "message-17".into(),
                    reason: "not confirmed".into()
                },
                DeleteFailure {
                    id: "message-22".into(),
                    reason: "ReceiptHandleIsInvalid: gone".into()
                },
            ]
        );
        assert_eq!(failures[0].to_string(), "message-4: ReceiptHandleIsInvalid: gone");
    }

    #[tokio::test]
    async fn a_failed_delete_request_is_an_error() {
        use aws_sdk_sqs::types::error::InvalidAddress;
        let rule = mock!(Client::delete_message_batch).then_error(|| {
            DeleteMessageBatchError::InvalidAddress(InvalidAddress::builder().message("no such queue").build())
        });
        let client = mock_client!(aws_sdk_sqs, &[rule]);
        assert!(delete_batch(&client, URL, &[("a", "rh-a")]).await.is_err());
        assert!(delete_batch(&client, URL, &[]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn depth_reads_the_three_counts_and_a_missing_one_is_zero() {
        let client = mock_client!(
            aws_sdk_sqs,
            &[attributes(&[
                (QueueAttributeName::ApproximateNumberOfMessages, "3"),
                (QueueAttributeName::ApproximateNumberOfMessagesNotVisible, "2"),
            ])]
        );
        assert_eq!(
            depth(&client, URL).await.unwrap(),
            QueueDepth {
                visible: 3,
                in_flight: 2,
                delayed: 0
            }
        );
    }

    #[tokio::test]
    async fn queue_attributes_read_the_visibility_timeout_and_the_redrive_policy() {
        let client = mock_client!(
            aws_sdk_sqs,
            &[
                attributes(&[
                    (QueueAttributeName::VisibilityTimeout, "45"),
                    (
                        QueueAttributeName::RedrivePolicy,
                        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq2","maxReceiveCount":"5"}"#,
                    ),
                ]),
                attributes(&[]),
            ]
        );
        assert_eq!(
            queue_attributes(&client, URL).await.unwrap(),
            QueueAttributes {
                visibility_timeout: Duration::from_secs(45),
                redrive_policy: Some(RedrivePolicy {
                    dead_letter_target_arn: "arn:aws:sqs:us-east-1:1:dlq2".into(),
                    max_receive_count: 5,
                }),
            }
        );
        assert_eq!(
            queue_attributes(&client, URL).await.unwrap(),
            QueueAttributes {
                visibility_timeout: Duration::from_secs(30),
                redrive_policy: None,
            }
        );
    }

    #[test]
    fn redrive_policies_parse_with_numeric_or_string_counts() {
        let expected = RedrivePolicy {
            dead_letter_target_arn: "arn:aws:sqs:us-east-1:1:dlq2".into(),
            max_receive_count: 5,
        };
        for raw in [
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq2","maxReceiveCount":5}"#,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq2","maxReceiveCount":"5"}"#,
        ] {
            assert_eq!(parse_redrive_policy(raw), Some(expected.clone()));
        }
        assert_eq!(parse_redrive_policy("{}"), None);
    }

    #[test]
    fn queue_arns_split_into_region_account_and_name() {
        assert_eq!(
            parse_queue_arn("arn:aws:sqs:us-east-1:123456789012:hck-dlq1"),
            Some(("us-east-1", "123456789012", "hck-dlq1"))
        );
        assert_eq!(parse_queue_arn("arn:aws:sns:us-east-1:123456789012:topic"), None);
    }

    /// The documented record's message as `ReceiveMessage` returns it.
    fn documented_message() -> Message {
        let system = [
            (MessageSystemAttributeName::ApproximateReceiveCount, "1"),
            (MessageSystemAttributeName::SentTimestamp, "1545082649183"),
            (MessageSystemAttributeName::SenderId, "AIDAIENQZJOLO23YVJ4VO"),
            (
                MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
                "1545082649185",
            ),
        ];
        Message::builder()
            .message_id("059f36b4-87a3-44ab-83d2-661975830a7d")
            .receipt_handle("AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a...")
            .body("Test message.")
            .md5_of_body("e4e68fb7bd0e697a0ae8f1bb342846b3")
            .set_attributes(Some(system.into_iter().map(|(k, v)| (k, v.to_owned())).collect()))
            .message_attributes(
                "myAttribute",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value("myValue")
                    .build()
                    .unwrap(),
            )
            .build()
    }

    #[test]
    fn a_message_becomes_the_documented_lambda_record() {
        let record = lambda_record(&documented_message(), "arn:aws:sqs:us-east-2:123456789012:my-queue");
        let mut documented: Value = serde_json::from_str(DOCUMENTED_RECORD).unwrap();
        // Where the typed record's JSON differs from what Lambda sends: it
        // writes an absent optional field as null, which Lambda leaves out.
        // A handler reading `SqsMessage` sees the same record either way.
        documented["md5OfMessageAttributes"] = Value::Null;
        documented["messageAttributes"]["myAttribute"]["binaryValue"] = Value::Null;
        assert_eq!(serde_json::to_value(&record).unwrap(), documented);
        // And the documented record reads back as the same typed record.
        let parsed: SqsMessage = serde_json::from_str(DOCUMENTED_RECORD).unwrap();
        assert_eq!(parsed, record);
    }

    #[test]
    fn binary_attributes_are_base64_as_in_the_lambda_record() {
        let message = Message::builder()
            .message_id("m")
            .message_attributes(
                "blob",
                MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(Blob::new(b"1100".to_vec()))
                    .build()
                    .unwrap(),
            )
            .build();
        let record = serde_json::to_value(lambda_record(&message, "not an arn")).unwrap();
        assert_eq!(
            record["messageAttributes"]["blob"],
            json!({
                "stringValue": null,
                "binaryValue": "MTEwMA==",
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": "Binary",
            })
        );
        // A missing field of the message is an empty string, as Lambda never
        // leaves these out; an ARN that names no region gives an empty one.
        assert_eq!(record["body"], json!(""));
        assert_eq!(record["awsRegion"], json!(""));
        assert_eq!(record["eventSource"], json!("aws:sqs"));
    }
}
