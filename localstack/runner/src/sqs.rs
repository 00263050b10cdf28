//! The SQS poller of a queue mapping (DLQ1 → reprocessor): receives up to the
//! batch size with the queue's visibility timeout, invokes the function with
//! an SQS event, and deletes what succeeded. Nothing else touches the
//! messages: a failed one stays invisible until its visibility timeout runs
//! out, comes back with a higher `ApproximateReceiveCount`, and after
//! `maxReceiveCount` receives the queue's own redrive policy moves it to its
//! dead-letter queue (the emulator does that inside `ReceiveMessage`, as SQS
//! does). Receiving, deleting and the Lambda record are the AWS layer's
//! (`hybrid_counter_aws::sqs`); this module decides what to deliver, what
//! to delete and what to leave.

use std::collections::HashSet;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::Message;
use hybrid_counter_aws::sqs::{self as aws_sqs, lambda_record};
use serde_json::Value;
use tracing::{debug, info, warn};

use crate::batch::{SqsVerdict, passes, sqs_verdict};
use crate::ctx::{Ctx, Drained};
use crate::discover::{Mapping, QueueSettings};
use crate::error::{Error, sdk_message};
use crate::invoke::Invoke;

/// The record as filter patterns see it: a JSON body is matched as JSON
/// ("Filtering Amazon SQS messages",
/// https://docs.aws.amazon.com/lambda/latest/dg/with-sqs-filtering.html).
fn filter_view(record: &SqsMessage) -> Value {
    let mut view = to_json(record);
    if let Some(parsed) = record
        .body
        .as_deref()
        .and_then(|b| serde_json::from_str::<Value>(b).ok())
    {
        view["body"] = parsed;
    }
    view
}

/// The JSON Lambda's event carries: string-keyed maps of strings, which
/// always serialize.
fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("an SQS event serializes")
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
        let records: Vec<SqsMessage> = messages.iter().map(|m| lambda_record(m, &mapping.source_arn)).collect();
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
        let mut event = SqsEvent::default();
        event.records = deliver.iter().map(|&i| records[i].clone()).collect();
        let payload = to_json(&event);
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
        let page = aws_sqs::receive(
            &ctx.sqs,
            &settings.queue_url,
            mapping.batch_size - messages.len(),
            settings.visibility_timeout,
            Duration::ZERO,
        )
        .await
        .map_err(|e| Error::emulator("SQS", "ReceiveMessage")(sdk_message(e)))?;
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
    let entries: Vec<(&str, &str)> = messages
        .map(|m| {
            (
                m.message_id().unwrap_or_default(),
                m.receipt_handle().unwrap_or_default(),
            )
        })
        .collect();
    let failures = aws_sqs::delete_batch(&ctx.sqs, &settings.queue_url, &entries)
        .await
        .map_err(|e| Error::emulator("SQS", "DeleteMessageBatch")(sdk_message(e)))?;
    if !failures.is_empty() {
        let failures: Vec<String> = failures.iter().map(ToString::to_string).collect();
        return Err(Error::emulator("SQS", "DeleteMessageBatch")(format!(
            "some deletes failed: {}",
            failures.join("; ")
        )));
    }
    Ok(())
}
