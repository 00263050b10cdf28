//! `--dry-run`: DLQ2's messages received, described (what would happen to
//! each, the stream range it names or the S3 object keeping the batch, the
//! reason the reprocessor gave when it sent a permanent failure there at
//! once, the message id the operator saw — DLQ1's, carried as an attribute
//! of a re-sent message — and the start of the body) and made visible
//! again at the end; nothing is sent, replayed or deleted.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use hybrid_counter_aws::failed_batch::Dlq1Message;
use hybrid_counter_aws::replay::{ORIGINAL_MESSAGE_ID_ATTRIBUTE, REASON_ATTRIBUTE};
use hybrid_counter_aws::sqs::string_attribute;
use indicatif::ProgressBar;

use super::receive::{Limits, Receiver};
use super::report::{BODY_EXCERPT_CHARS, Preview, RangeSummary, Tally};
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
    let body = message.body().unwrap_or_default();
    let parsed = Dlq1Message::parse_of(body, stream_arn);
    let message_id = message.message_id().unwrap_or_default();
    let mut chars = body.chars();
    let body_excerpt: String = chars.by_ref().take(BODY_EXCERPT_CHARS).collect();
    let action = match (mode, &parsed) {
        (RedriveMode::Move, _) => "move",
        (RedriveMode::Replay, Ok(_)) => "replay",
        (RedriveMode::Replay, Err(_)) => "skip",
    };
    Preview {
        message_id: message_id.to_owned(),
        original_message_id: string_attribute(message, ORIGINAL_MESSAGE_ID_ATTRIBUTE)
            .unwrap_or(message_id)
            .to_owned(),
        body_excerpt,
        body_truncated: chars.next().is_some(),
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

    /// `peek` of [`SOURCE`] as DLQ2 of [`STREAM`]'s stack.
    async fn dry_run(sqs: &Client, mode: RedriveMode) -> Tally {
        peek(sqs, SOURCE, mode, STREAM, limits(), &ProgressBar::hidden())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_dry_run_describes_every_message_and_makes_them_visible_again() {
        let calls = log();
        let rules = [
            receive(vec![message("a", &record()), message("b", "garbage")]),
            receive_nothing(),
            release_ok(calls.clone()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = dry_run(&sqs, RedriveMode::Replay).await;
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
        let tally = dry_run(&sqs, RedriveMode::Replay).await;
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
        let string = |value: &str| {
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .unwrap()
        };
        let sent_at_once = Message::builder()
            .message_id("g")
            .receipt_handle("handle-g")
            .body("garbage")
            .message_attributes(REASON_ATTRIBUTE, string(reason))
            .message_attributes(ORIGINAL_MESSAGE_ID_ATTRIBUTE, string("dlq1-id-of-g"))
            .build();
        let other_stream = record().replace(STREAM, "arn:aws:dynamodb:us-east-1:1:table/t/stream/s");
        let rules = [
            receive(vec![sent_at_once, message("o", &other_stream), message("r", &record())]),
            receive_nothing(),
            release_ok(log()),
        ];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = dry_run(&sqs, RedriveMode::Move).await;
        let [garbage, other, retried] = &tally.preview[..] else {
            panic!("{tally:?}")
        };
        assert_eq!(garbage.reason.as_deref(), Some(reason));
        assert_eq!(
            (garbage.message_id.as_str(), garbage.original_message_id.as_str()),
            ("g", "dlq1-id-of-g"),
            "the id the operator saw in DLQ1, beside DLQ2's own"
        );
        assert_eq!(
            (garbage.body_excerpt.as_str(), garbage.body_truncated),
            ("garbage", false)
        );
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
        assert_eq!(
            retried.original_message_id, "r",
            "a message SQS moved keeps its id: it is its own original"
        );
    }

    #[tokio::test]
    async fn a_dry_run_shows_a_bounded_excerpt_of_a_long_body() {
        let long = format!("é\n{}", "x".repeat(400));
        let rules = [receive(vec![message("l", &long)]), receive_nothing(), release_ok(log())];
        let sqs = client(&rules.iter().collect::<Vec<_>>());
        let tally = dry_run(&sqs, RedriveMode::Move).await;
        let preview = &tally.preview[0];
        assert_eq!(preview.body_excerpt.chars().count(), BODY_EXCERPT_CHARS);
        assert!(preview.body_excerpt.starts_with("é\nxx"), "{preview:?}");
        assert!(preview.body_truncated);
        let json = serde_json::to_value(preview).unwrap();
        assert_eq!(json["original_message_id"], "l");
        assert_eq!(
            json["body_excerpt"].as_str().unwrap().chars().count(),
            BODY_EXCERPT_CHARS
        );
        assert_eq!(json["body_truncated"], true);
    }
}
