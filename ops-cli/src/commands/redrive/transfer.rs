//! The move without SQS's message move task (the emulators, or `--max`):
//! receive from DLQ2, send to DLQ1, and delete from DLQ2 only once DLQ1
//! confirmed the message. A crash between the send and the delete leaves a
//! duplicate, which the idempotent replay absorbs; never a lost range.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use indicatif::ProgressBar;

use super::receive::{Limits, Receiver, delete, problem};
use super::report::{MOVED_NOT_DELETED, Tally};
use crate::error::{self, Result};

/// Receives DLQ2's messages, sends each to DLQ1 and deletes it from DLQ2
/// only once DLQ1 confirmed it. A failed receive after the first message
/// ends the pass early (reported), as does a failed send: the destination
/// is then likely down for every message.
pub async fn move_messages(
    sqs: &Client,
    source_url: &str,
    destination_url: &str,
    limits: Limits,
    bar: &ProgressBar,
) -> Result<Tally> {
    let mut rx = Receiver::new(sqs, source_url, limits);
    let mut tally = Tally::default();
    while let Some(page) = rx.next_page(&mut tally).await? {
        let entries: Vec<SendMessageBatchRequestEntry> = page
            .iter()
            .enumerate()
            .filter_map(|(n, m)| {
                SendMessageBatchRequestEntry::builder()
                    .id(n.to_string())
                    .message_body(m.body().unwrap_or_default())
                    .set_message_attributes(m.message_attributes.clone())
                    .build()
                    .ok()
            })
            .collect();
        let sent = sqs
            .send_message_batch()
            .queue_url(destination_url)
            .set_entries(Some(entries))
            .send()
            .await;
        let sent = match sent {
            Ok(sent) => sent,
            Err(err) => {
                let reason = error::aws("SendMessageBatch")(err).to_string();
                for message in &page {
                    tally
                        .failed
                        .push(problem(message, format!("not sent to dlq1 ({reason}); left in dlq2")));
                    rx.hold(message);
                }
                tally.stopped_early = Some(format!("sending to dlq1 failed: {reason}"));
                bar.inc(page.len() as u64);
                break;
            }
        };
        let mut delivered = Vec::new();
        for (n, message) in page.iter().enumerate() {
            let id = n.to_string();
            if sent.successful().iter().any(|s| s.id() == id) {
                delivered.push(message);
            } else {
                let why = sent.failed().iter().find(|f| f.id() == id).map_or_else(
                    || "not confirmed".to_owned(),
                    |f| format!("{}: {}", f.code(), f.message().unwrap_or_default()),
                );
                tally
                    .failed
                    .push(problem(message, format!("not sent to dlq1 ({why}); left in dlq2")));
                rx.hold(message);
            }
        }
        let deleted = delete(sqs, source_url, &delivered).await;
        for (message, result) in delivered.iter().zip(deleted) {
            match result {
                Ok(()) => tally.moved += 1,
                Err(reason) => tally.failed.push(problem(
                    message,
                    format!(
                        "{MOVED_NOT_DELETED} ({reason}); it returns to dlq2 and may be moved \
                         again, a duplicate the reprocessor absorbs"
                    ),
                )),
            }
        }
        bar.inc(page.len() as u64);
    }
    tally.notes.extend(rx.release().await);
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchOutput;
    use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
    use aws_sdk_sqs::operation::send_message_batch::{SendMessageBatchError, SendMessageBatchOutput};
    use aws_sdk_sqs::types::error::QueueDoesNotExist;
    use aws_sdk_sqs::types::{BatchResultErrorEntry, SendMessageBatchResultEntry};
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::commands::redrive::receive::limits;
    use crate::commands::redrive::testing::{
        DESTINATION, SOURCE, client, delete_ok, log, message, receive, receive_nothing, release_ok, send_ok,
    };

    #[tokio::test]
    async fn each_message_is_sent_to_dlq1_before_it_is_deleted_from_dlq2() {
        let calls = log();
        let rules = [
            receive(vec![message("a", "first"), message("b", "second")]),
            send_ok(calls.clone()),
            delete_ok(calls.clone()),
            receive(vec![message("c", "third")]),
            send_ok(calls.clone()),
            delete_ok(calls.clone()),
            receive_nothing(),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 3);
        assert!(tally.failed.is_empty() && tally.stopped_early.is_none(), "{tally:?}");
        assert_eq!(
            *calls.lock().unwrap(),
            [
                "send first",
                "send second",
                "delete handle-a",
                "delete handle-b",
                "send third",
                "delete handle-c"
            ]
        );
    }

    #[tokio::test]
    async fn a_message_dlq1_did_not_accept_is_not_deleted_but_released() {
        let calls = log();
        let partial = mock!(Client::send_message_batch).then_output(|| {
            SendMessageBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .set_failed(Some(Vec::new()))
                .successful(
                    SendMessageBatchResultEntry::builder()
                        .id("0")
                        .message_id("new")
                        .md5_of_message_body("md5")
                        .build()
                        .unwrap(),
                )
                .failed(
                    BatchResultErrorEntry::builder()
                        .id("1")
                        .code("InternalError")
                        .message("try again")
                        .sender_fault(false)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap()
        });
        let rules = [
            receive(vec![message("a", "first"), message("b", "second")]),
            partial,
            delete_ok(calls.clone()),
            receive_nothing(),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 1);
        assert_eq!(tally.failed.len(), 1);
        assert_eq!(tally.failed[0].message_id, "b");
        assert!(tally.failed[0].reason.contains("InternalError: try again"), "{tally:?}");
        assert_eq!(*calls.lock().unwrap(), ["delete handle-a", "release handle-b"]);
    }

    #[tokio::test]
    async fn a_failed_send_deletes_nothing_stops_the_pass_and_releases_the_messages() {
        let calls = log();
        let down = mock!(Client::send_message_batch)
            .then_error(|| SendMessageBatchError::QueueDoesNotExist(QueueDoesNotExist::builder().build()));
        let rules = [
            receive(vec![message("a", "first"), message("b", "second")]),
            down,
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 0);
        assert_eq!(tally.failed.len(), 2, "{tally:?}");
        assert!(
            tally.stopped_early.as_deref().unwrap().contains("SendMessageBatch"),
            "{tally:?}"
        );
        assert_eq!(*calls.lock().unwrap(), ["release handle-a", "release handle-b"]);
    }

    #[tokio::test]
    async fn a_message_sent_but_not_deleted_is_reported_as_a_possible_duplicate() {
        let calls = log();
        let refused = mock!(Client::delete_message_batch).then_output(|| {
            DeleteMessageBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .set_failed(Some(Vec::new()))
                .failed(
                    BatchResultErrorEntry::builder()
                        .id("0")
                        .code("ReceiptHandleIsInvalid")
                        .sender_fault(true)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap()
        });
        let rules = [
            receive(vec![message("a", "first")]),
            send_ok(calls.clone()),
            refused,
            receive_nothing(),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 0);
        assert!(
            tally.failed[0].reason.contains("sent to dlq1 but not deleted")
                && tally.failed[0].reason.contains("duplicate"),
            "{tally:?}"
        );
        assert_eq!(*calls.lock().unwrap(), ["send first"]);
    }

    #[tokio::test]
    async fn max_stops_the_pass_after_that_many_messages() {
        let calls = log();
        let two_only = mock!(Client::receive_message)
            .match_requests(|req| req.max_number_of_messages() == Some(2))
            .then_output(|| {
                ReceiveMessageOutput::builder()
                    .messages(message("a", "first"))
                    .messages(message("b", "second"))
                    .build()
            });
        let rules = [two_only, send_ok(calls.clone()), delete_ok(calls.clone())];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let capped = Limits {
            max: Some(2),
            ..limits()
        };
        let tally = move_messages(&sqs, SOURCE, DESTINATION, capped, &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 2, "no third receive: {tally:?}");
    }

    #[tokio::test]
    async fn a_message_seen_again_in_the_same_pass_is_not_moved_twice() {
        let calls = log();
        let rules = [
            receive(vec![message("a", "first")]),
            send_ok(calls.clone()),
            delete_ok(calls.clone()),
            // Its hold ran out before the delete reached the queue: it is back.
            receive(vec![message("a", "first")]),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = move_messages(&sqs, SOURCE, DESTINATION, limits(), &ProgressBar::hidden())
            .await
            .unwrap();
        assert_eq!(tally.moved, 1);
        assert_eq!(
            *calls.lock().unwrap(),
            ["send first", "delete handle-a", "release handle-a"]
        );
    }
}
