//! The SQS poller of a queue mapping (DLQ1 → reprocessor): receives up to the
//! batch size with the queue's visibility timeout, invokes the function with
//! an SQS event, and deletes what succeeded. Nothing else touches the
//! messages: a failed one stays invisible until its visibility timeout runs
//! out, comes back with a higher `ApproximateReceiveCount`, and after
//! `maxReceiveCount` receives the queue's own redrive policy moves it to its
//! dead-letter queue (the emulator does that inside `ReceiveMessage`, as SQS
//! does).

use std::collections::HashSet;

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use serde_json::{Map, Value, json};
use tracing::{debug, info, warn};

use crate::batch::{SqsVerdict, passes, sqs_verdict};
use crate::ctx::{Ctx, Drained};
use crate::discover::{Mapping, QueueSettings, parse_queue_arn};
use crate::error::{Error, sdk_message};
use crate::invoke::Invoke;

/// `ReceiveMessage` returns at most 10 messages per call.
const RECEIVE_MAX: usize = 10;

/// Renders a received message as Lambda's SQS event record
/// (https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html, "Example
/// standard queue message event").
pub fn to_lambda_record(message: &Message, queue_arn: &str) -> Value {
    let region = parse_queue_arn(queue_arn).map(|(r, _, _)| r).unwrap_or_default();
    let attributes: Map<String, Value> = message
        .attributes()
        .map(|attrs| {
            attrs
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), Value::String(v.clone())))
                .collect()
        })
        .unwrap_or_default();
    let message_attributes: Map<String, Value> = message
        .message_attributes()
        .map(|attrs| {
            attrs
                .iter()
                .map(|(name, value)| {
                    let mut v = Map::new();
                    if let Some(s) = value.string_value() {
                        v.insert("stringValue".into(), json!(s));
                    }
                    if let Some(b) = value.binary_value() {
                        v.insert(
                            "binaryValue".into(),
                            json!(aws_smithy_types::base64::encode(b.as_ref())),
                        );
                    }
                    v.insert("stringListValues".into(), json!([]));
                    v.insert("binaryListValues".into(), json!([]));
                    v.insert("dataType".into(), json!(value.data_type()));
                    (name.clone(), Value::Object(v))
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "messageId": message.message_id().unwrap_or_default(),
        "receiptHandle": message.receipt_handle().unwrap_or_default(),
        "body": message.body().unwrap_or_default(),
        "attributes": attributes,
        "messageAttributes": message_attributes,
        "md5OfBody": message.md5_of_body().unwrap_or_default(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    })
}

/// The record as filter patterns see it: a JSON body is matched as JSON
/// ("Filtering Amazon SQS messages",
/// https://docs.aws.amazon.com/lambda/latest/dg/with-sqs-filtering.html).
fn filter_view(record: &Value) -> Value {
    let mut view = record.clone();
    if let Some(parsed) = record["body"]
        .as_str()
        .and_then(|b| serde_json::from_str::<Value>(b).ok())
    {
        view["body"] = parsed;
    }
    view
}

/// Receives and processes batches until the queue has no visible message.
pub(crate) async fn drain_queue<I: Invoke>(
    ctx: &Ctx<I>,
    mapping: &Mapping,
    settings: &QueueSettings,
) -> Result<Drained, Error> {
    let mut drained = Drained::default();
    loop {
        if ctx.stopping() {
            return Ok(drained);
        }
        let messages = receive(ctx, mapping, settings).await?;
        if messages.is_empty() {
            return Ok(drained);
        }
        drained.progressed = true;
        ctx.update_report(mapping, |r| r.messages_received += messages.len() as u64);
        let records: Vec<Value> = messages
            .iter()
            .map(|m| to_lambda_record(m, &mapping.source_arn))
            .collect();
        // Lambda deletes messages that match no filter pattern.
        let (deliver, dropped): (Vec<usize>, Vec<usize>) =
            (0..messages.len()).partition(|&i| passes(&mapping.filters, &filter_view(&records[i])));
        if !dropped.is_empty() {
            delete(ctx, settings, dropped.iter().map(|&i| &messages[i])).await?;
            ctx.update_report(mapping, |r| {
                r.records_filtered += dropped.len() as u64;
                r.messages_deleted += dropped.len() as u64;
            });
        }
        if deliver.is_empty() {
            continue;
        }
        let ids: Vec<String> = deliver
            .iter()
            .map(|&i| messages[i].message_id().unwrap_or_default().to_owned())
            .collect();
        let payload = json!({ "Records": deliver.iter().map(|&i| &records[i]).collect::<Vec<_>>() });
        let invocation = match ctx.invoker.invoke(&mapping.function_name, payload).await {
            Ok(invocation) => invocation,
            Err(err) => {
                // The messages stay in flight and come back after the
                // visibility timeout, as after any failed delivery.
                warn!(mapping = %mapping.uuid, error = %err, "could not invoke; the messages return after the visibility timeout");
                ctx.update_report(mapping, |r| r.messages_returned += deliver.len() as u64);
                continue;
            }
        };
        ctx.update_report(mapping, |r| {
            r.invocations += 1;
            r.records_delivered += deliver.len() as u64;
        });
        let verdict = sqs_verdict(&invocation, &ids, mapping.report_batch_item_failures);
        debug!(mapping = %mapping.uuid, messages = deliver.len(), ?verdict, "sqs batch invoked");
        let keep: HashSet<String> = match verdict {
            SqsVerdict::DeleteAll => HashSet::new(),
            SqsVerdict::DeleteAllBut(failed) => {
                ctx.update_report(mapping, |r| r.partial_failures += 1);
                failed
            }
            SqsVerdict::DeleteNone { reason } => {
                if matches!(invocation, crate::Invocation::FunctionError { .. }) {
                    ctx.update_report(mapping, |r| r.function_errors += 1);
                }
                info!(mapping = %mapping.uuid, messages = deliver.len(), %reason, "sqs batch failed; the messages return after the visibility timeout");
                ids.iter().cloned().collect()
            }
        };
        let to_delete: Vec<&Message> = deliver
            .iter()
            .map(|&i| &messages[i])
            .filter(|m| !keep.contains(m.message_id().unwrap_or_default()))
            .collect();
        let deleted = to_delete.len() as u64;
        delete(ctx, settings, to_delete.into_iter()).await?;
        ctx.update_report(mapping, |r| {
            r.messages_deleted += deleted;
            r.messages_returned += keep.len() as u64;
        });
    }
}

/// Up to the batch size of visible messages, hidden for the queue's
/// visibility timeout.
async fn receive<I: Invoke>(ctx: &Ctx<I>, mapping: &Mapping, settings: &QueueSettings) -> Result<Vec<Message>, Error> {
    let mut messages = Vec::new();
    while messages.len() < mapping.batch_size {
        let want = (mapping.batch_size - messages.len()).min(RECEIVE_MAX);
        let out = ctx
            .sqs
            .receive_message()
            .queue_url(&settings.queue_url)
            .max_number_of_messages(i32::try_from(want).unwrap_or(10))
            .visibility_timeout(i32::try_from(settings.visibility_timeout.as_secs()).unwrap_or(i32::MAX))
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .wait_time_seconds(0)
            .send()
            .await
            .map_err(|e| Error::emulator("SQS", "ReceiveMessage")(sdk_message(e)))?;
        let page = out.messages.unwrap_or_default();
        if page.is_empty() {
            break;
        }
        messages.extend(page);
    }
    Ok(messages)
}

async fn delete<'a, I: Invoke>(
    ctx: &Ctx<I>,
    settings: &QueueSettings,
    messages: impl Iterator<Item = &'a Message>,
) -> Result<(), Error> {
    let entries: Vec<DeleteMessageBatchRequestEntry> = messages
        .enumerate()
        .filter_map(|(n, m)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(format!("m{n}"))
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .build()
                .ok()
        })
        .collect();
    for chunk in entries.chunks(RECEIVE_MAX) {
        let out = ctx
            .sqs
            .delete_message_batch()
            .queue_url(&settings.queue_url)
            .set_entries(Some(chunk.to_vec()))
            .send()
            .await
            .map_err(|e| Error::emulator("SQS", "DeleteMessageBatch")(sdk_message(e)))?;
        if !out.failed().is_empty() {
            return Err(Error::emulator("SQS", "DeleteMessageBatch")(format!(
                "some deletes failed: {:?}",
                out.failed()
            )));
        }
    }
    Ok(())
}
