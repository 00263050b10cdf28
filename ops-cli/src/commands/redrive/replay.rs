//! `--replay`, for when the reprocessor itself is broken: each DLQ2
//! message is parsed as a DLQ1 message of the stack's stream (a pointer to
//! a range, or the S3 notification of a batch kept with its records), the
//! batch replayed with the function given (the library code the
//! reprocessor runs), and the message deleted from DLQ2 once that
//! succeeded. A message the reprocessor could never replay either (not one
//! of those, another stream) is skipped.

use std::future::Future;

use aws_sdk_sqs::Client;
use hybrid_counter_aws::failed_batch::Dlq1Message;
use indicatif::ProgressBar;

use super::receive::{Limits, Receiver, delete, problem};
use super::report::{REPLAYED_NOT_DELETED, Tally};
use crate::error::Result;

/// Replays DLQ2's messages one at a time with `replay_one` (normally the
/// library's range replay) and deletes each that succeeded. A message that
/// is not an on-failure record of `stream_arn` is skipped; one whose replay
/// fails stays.
pub async fn replay_messages<F, Fut>(
    sqs: &Client,
    url: &str,
    stream_arn: &str,
    limits: Limits,
    bar: &ProgressBar,
    replay_one: F,
) -> Result<Tally>
where
    F: Fn(Dlq1Message) -> Fut,
    Fut: Future<Output = std::result::Result<(), String>>,
{
    let mut rx = Receiver::new(sqs, url, limits);
    let mut tally = Tally::default();
    while let Some(page) = rx.next_page(&mut tally).await? {
        for message in &page {
            match Dlq1Message::parse_of(message.body().unwrap_or_default(), stream_arn) {
                Err(err) => {
                    tally.skipped.push(problem(message, format!("{err}; left in dlq2")));
                    rx.hold(message);
                }
                Ok(record) => match replay_one(record).await {
                    Err(reason) => {
                        tally.failed.push(problem(message, format!("{reason}; left in dlq2")));
                        rx.hold(message);
                    }
                    Ok(()) => match delete(sqs, url, &[message]).await.remove(0) {
                        Ok(()) => tally.replayed += 1,
                        Err(reason) => tally.failed.push(problem(
                            message,
                            format!("{REPLAYED_NOT_DELETED} ({reason}); replaying it again changes nothing"),
                        )),
                    },
                },
            }
            bar.inc(1);
        }
    }
    tally.notes.extend(rx.release().await);
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::commands::redrive::receive::limits;
    use crate::commands::redrive::testing::{
        SOURCE, STREAM, client, delete_ok, log, message, receive, receive_nothing, record, release_ok,
    };

    #[tokio::test]
    async fn replay_deletes_only_what_it_replayed_and_skips_what_is_not_an_on_failure_record() {
        let calls = log();
        let rules = [
            receive(vec![message("a", &record())]),
            delete_ok(calls.clone()),
            receive(vec![message("b", "garbage")]),
            receive(vec![message("c", &record())]),
            receive(vec![message("d", &record().replace(STREAM, "arn:aws:dynamodb:other"))]),
            receive_nothing(),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let attempts = Arc::new(Mutex::new(0));
        let counter = attempts.clone();
        let tally = replay_messages(
            &sqs,
            SOURCE,
            STREAM,
            Limits { page: 1, ..limits() },
            &ProgressBar::hidden(),
            |message: Dlq1Message| {
                let counter = counter.clone();
                async move {
                    let Dlq1Message::Pointer(record) = message else {
                        panic!("{message:?}")
                    };
                    assert_eq!(record.batch_info.batch_size, 1);
                    let mut n = counter.lock().unwrap();
                    *n += 1;
                    if *n == 1 {
                        Ok(())
                    } else {
                        Err("records 1..=2 of shard s are no longer in the stream".to_owned())
                    }
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(tally.replayed, 1);
        assert_eq!(tally.skipped.len(), 2);
        assert_eq!(tally.skipped[0].message_id, "b");
        assert!(
            tally.skipped[0].reason.contains("not an on-failure record"),
            "{tally:?}"
        );
        assert_eq!(tally.skipped[1].message_id, "d");
        assert!(
            tally.skipped[1].reason.contains("not of the stack's stream"),
            "another stream's range is never applied to the stack's tables: {tally:?}"
        );
        assert_eq!(*attempts.lock().unwrap(), 2, "only a and c were replayed");
        assert_eq!(tally.failed.len(), 1);
        assert!(tally.failed[0].reason.contains("no longer in the stream"), "{tally:?}");
        assert_eq!(
            *calls.lock().unwrap(),
            [
                "delete handle-a",
                "release handle-b",
                "release handle-c",
                "release handle-d"
            ]
        );
    }
}
