//! `--dry-run`: DLQ2's messages received, described (what would happen to
//! each, the stream range it names or the S3 object keeping the batch, and
//! the reason the reprocessor gave
//! when it sent a permanent failure there at once) and made visible again
//! at the end; nothing is sent, replayed or deleted.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use hybrid_counter_aws::failed_batch::Dlq1Message;
use hybrid_counter_aws::replay::REASON_ATTRIBUTE;
use hybrid_counter_aws::sqs::string_attribute;
use indicatif::ProgressBar;

use super::receive::{Limits, Receiver};
use super::report::{Preview, RangeSummary, Tally};
use crate::config::RedriveMode;
use crate::error::Result;

/// Describes DLQ2's messages without changing anything: each is received,
/// parsed as an on-failure record of `stream_arn` (the stack's stream), and
/// made visible again at the end.
pub async fn peek(
    sqs: &Client,
    url: &str,
    mode: RedriveMode,
    stream_arn: &str,
    limits: Limits,
    bar: &ProgressBar,
) -> Result<Tally> {
    let mut rx = Receiver::new(sqs, url, limits);
    let mut tally = Tally::default();
    while let Some(page) = rx.next_page(&mut tally).await? {
        for message in &page {
            tally.preview.push(preview(message, mode, stream_arn));
            rx.hold(message);
        }
        bar.inc(page.len() as u64);
    }
    tally.notes.extend(rx.release().await);
    Ok(tally)
}

fn preview(message: &Message, mode: RedriveMode, stream_arn: &str) -> Preview {
    let parsed = Dlq1Message::parse_of(message.body().unwrap_or_default(), stream_arn);
    let action = match (mode, &parsed) {
        (RedriveMode::Move, _) => "move",
        (RedriveMode::Replay, Ok(_)) => "replay",
        (RedriveMode::Replay, Err(_)) => "skip",
    };
    Preview {
        message_id: message.message_id().unwrap_or_default().to_owned(),
        action: action.to_owned(),
        receive_count: message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|v| v.parse().ok()),
        range: match &parsed {
            Ok(Dlq1Message::Pointer(record)) => Some(RangeSummary::of(record)),
            _ => None,
        },
        object: match &parsed {
            Ok(Dlq1Message::Object(object)) => Some(object.to_string()),
            _ => None,
        },
        reason: string_attribute(message, REASON_ATTRIBUTE).map(str::to_owned),
        problem: parsed.err().map(|e| match mode {
            RedriveMode::Move => format!("{e}: the reprocessor will send it straight back to dlq2"),
            RedriveMode::Replay => format!("{e}: it would stay in dlq2"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::redrive::receive::limits;
    use crate::commands::redrive::testing::{
        SOURCE, STREAM, client, log, message, receive, receive_nothing, record, release_ok,
    };

    #[tokio::test]
    async fn a_dry_run_describes_every_message_and_makes_them_visible_again() {
        let calls = log();
        let rules = [
            receive(vec![message("a", &record()), message("b", "garbage")]),
            receive_nothing(),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = peek(
            &sqs,
            SOURCE,
            RedriveMode::Replay,
            STREAM,
            limits(),
            &ProgressBar::hidden(),
        )
        .await
        .unwrap();
        assert_eq!(tally.moved + tally.replayed, 0);
        assert_eq!(tally.preview.len(), 2);
        assert_eq!(tally.preview[0].action, "replay");
        let range = tally.preview[0].range.as_ref().unwrap();
        assert_eq!(range.condition, "RetryAttemptsExhausted");
        assert_eq!(range.start_sequence_number, "800000000003126276362");
        assert_eq!(tally.preview[1].action, "skip");
        assert!(tally.preview[1].problem.is_some());
        assert_eq!(*calls.lock().unwrap(), ["release handle-a", "release handle-b"]);
    }

    /// `FailedBatchRecords=payload`: the dry run names the object that
    /// keeps the batch, and a pointer keeps showing its range.
    #[tokio::test]
    async fn a_dry_run_shows_a_kept_batch_by_its_object_and_a_pointer_by_its_range() {
        let notification = include_str!("../../../../aws/src/fixtures/s3_object_created.json");
        let rules = [
            receive(vec![message("k", notification), message("p", &record())]),
            receive_nothing(),
            release_ok(log()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = peek(
            &sqs,
            SOURCE,
            RedriveMode::Replay,
            STREAM,
            limits(),
            &ProgressBar::hidden(),
        )
        .await
        .unwrap();
        let kept = &tally.preview[0];
        assert_eq!(kept.action, "replay");
        assert!(kept.range.is_none() && kept.problem.is_none(), "{kept:?}");
        let object = kept.object.as_deref().unwrap();
        assert!(
            object.starts_with("s3://hybrid-counter-failed-batches-123456789012-us-east-1/aws/lambda/"),
            "{object}"
        );
        let pointer = &tally.preview[1];
        assert!(pointer.object.is_none() && pointer.range.is_some(), "{pointer:?}");
    }

    #[tokio::test]
    async fn a_dry_run_shows_why_the_reprocessor_sent_a_message_straight_to_dlq2() {
        use aws_sdk_sqs::types::MessageAttributeValue;
        let reason = "not an on-failure record of a DynamoDB stream: expected value at line 1 column 1";
        let sent_at_once = Message::builder()
            .message_id("g")
            .receipt_handle("handle-g")
            .body("garbage")
            .message_attributes(
                REASON_ATTRIBUTE,
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(reason)
                    .build()
                    .unwrap(),
            )
            .build();
        let other_stream = record().replace(STREAM, "arn:aws:dynamodb:us-east-1:1:table/t/stream/s");
        let rules = [
            receive(vec![sent_at_once, message("o", &other_stream), message("r", &record())]),
            receive_nothing(),
            release_ok(log()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = peek(
            &sqs,
            SOURCE,
            RedriveMode::Move,
            STREAM,
            limits(),
            &ProgressBar::hidden(),
        )
        .await
        .unwrap();
        let [garbage, other, retried] = &tally.preview[..] else {
            panic!("{tally:?}")
        };
        assert_eq!(garbage.reason.as_deref(), Some(reason));
        assert!(
            garbage
                .problem
                .as_deref()
                .unwrap()
                .ends_with("the reprocessor will send it straight back to dlq2"),
            "{garbage:?}"
        );
        assert!(
            other.problem.as_deref().unwrap().contains("not of the stack's stream"),
            "{other:?}"
        );
        assert_eq!(other.range, None);
        assert_eq!(
            retried.reason, None,
            "a message that used up its receives has no reason attribute"
        );
        assert_eq!(retried.problem, None);
    }
}
