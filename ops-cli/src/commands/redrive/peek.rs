//! `--dry-run`: DLQ2's messages received, described (what would happen to
//! each, the stream range it names) and made visible again at the end;
//! nothing is sent, replayed or deleted.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use hybrid_counter_aws::replay::OnFailureRecord;
use indicatif::ProgressBar;

use super::receive::{Limits, Receiver};
use super::report::{Preview, RangeSummary, Tally};
use crate::config::RedriveMode;
use crate::error::Result;

/// Describes DLQ2's messages without changing anything: each is received,
/// parsed, and made visible again at the end.
pub async fn peek(sqs: &Client, url: &str, mode: RedriveMode, limits: Limits, bar: &ProgressBar) -> Result<Tally> {
    let mut rx = Receiver::new(sqs, url, limits);
    let mut tally = Tally::default();
    while let Some(page) = rx.next_page(&mut tally).await? {
        for message in &page {
            tally.preview.push(preview(message, mode));
            rx.hold(message);
        }
        bar.inc(page.len() as u64);
    }
    tally.notes.extend(rx.release().await);
    Ok(tally)
}

fn preview(message: &Message, mode: RedriveMode) -> Preview {
    let parsed = OnFailureRecord::from_body(message.body().unwrap_or_default());
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
        range: parsed.as_ref().ok().map(RangeSummary::of),
        problem: parsed.err().map(|e| match mode {
            RedriveMode::Move => format!("{e}: the reprocessor will fail on it again"),
            RedriveMode::Replay => format!("{e}: it would stay in dlq2"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::redrive::receive::limits;
    use crate::commands::redrive::testing::{
        SOURCE, client, log, message, receive, receive_nothing, record, release_ok,
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
        let tally = peek(&sqs, SOURCE, RedriveMode::Replay, limits(), &ProgressBar::hidden())
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
}
