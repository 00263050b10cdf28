//! One pass over DLQ2, shared by every method that receives: each message
//! considered once (one seen again in the same pass stays where it is),
//! paced to `--rate`, held invisible while the pass handles it, deleted
//! once handled, and the messages left in DLQ2 made visible again when the
//! pass ends.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, Message};

use super::report::{MessageProblem, Tally};
use crate::error::{self, Result};

/// Messages per `ReceiveMessage`, `SendMessageBatch` and `DeleteMessageBatch`.
pub(super) const SQS_BATCH: u64 = 10;
/// How long a received message stays hidden while this run handles it.
pub(super) const HOLD: Duration = Duration::from_secs(300);
/// Long-poll wait of each receive: an empty answer then means the queue has
/// no visible message, not that a short poll missed the servers holding some.
pub(super) const RECEIVE_WAIT: Duration = Duration::from_secs(1);

/// How a pass goes through DLQ2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Messages to consider at most.
    pub max: Option<u64>,
    /// Messages per second at most.
    pub rate: Option<u32>,
    /// Messages per receive, 1 to 10.
    pub page: u64,
    /// Visibility timeout of a received message while it is handled.
    pub hold: Duration,
    /// Long-poll wait of a receive.
    pub wait: Duration,
}

/// How long to wait before receiving more when `sent` messages went out
/// `elapsed` after the start: message `n` (from 0) is due `n / rate`
/// seconds after the start, so a pass never exceeds the rate on average.
pub fn pace_delay(sent: u64, rate: Option<u32>, elapsed: Duration) -> Duration {
    match rate {
        Some(rate) if rate > 0 => Duration::from_secs_f64(sent as f64 / f64::from(rate)).saturating_sub(elapsed),
        _ => Duration::ZERO,
    }
}

/// What the tests pass: every message, a page of ten, no pacing and no
/// long-poll wait.
#[cfg(test)]
pub(super) fn limits() -> Limits {
    Limits {
        max: None,
        rate: None,
        page: SQS_BATCH,
        hold: HOLD,
        wait: Duration::ZERO,
    }
}

/// Receives DLQ2's messages for one pass: each message once, paced, and
/// the ones left in the queue released at the end.
pub(super) struct Receiver<'a> {
    sqs: &'a Client,
    url: &'a str,
    limits: Limits,
    started: Instant,
    seen: HashSet<String>,
    considered: u64,
    /// Receipt handles of messages that stay in DLQ2.
    held: Vec<String>,
}

impl<'a> Receiver<'a> {
    pub(super) fn new(sqs: &'a Client, url: &'a str, limits: Limits) -> Self {
        Self {
            sqs,
            url,
            limits,
            started: Instant::now(),
            seen: HashSet::new(),
            considered: 0,
            held: Vec::new(),
        }
    }

    /// The next messages not seen yet in this pass; empty when the queue
    /// has no other visible message or `max` is reached.
    async fn next(&mut self) -> Result<Vec<Message>> {
        let remaining = self.limits.max.map_or(u64::MAX, |max| max - self.considered);
        let want = remaining
            .min(self.limits.page)
            .min(self.limits.rate.map_or(SQS_BATCH, u64::from))
            .clamp(0, SQS_BATCH);
        if want == 0 {
            return Ok(Vec::new());
        }
        let delay = pace_delay(self.considered, self.limits.rate, self.started.elapsed());
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let messages =
            hybrid_counter_aws::sqs::receive(self.sqs, self.url, want as usize, self.limits.hold, self.limits.wait)
                .await
                .map_err(error::aws("ReceiveMessage"))?;
        let mut fresh = Vec::new();
        for message in messages {
            let id = message.message_id().unwrap_or_default().to_owned();
            if self.seen.insert(id) {
                fresh.push(message);
            } else {
                // Handled earlier in this pass and visible again (its hold
                // ran out): it stays where it is.
                self.hold(&message);
            }
        }
        self.considered += fresh.len() as u64;
        Ok(fresh)
    }

    /// The next page of the pass, or `None` once it is over: the queue has
    /// no other visible message, `max` is reached, or a receive failed after
    /// the first message (`tally` then says why the pass stopped early). A
    /// failed first receive is the command's error.
    pub(super) async fn next_page(&mut self, tally: &mut Tally) -> Result<Option<Vec<Message>>> {
        match self.next().await {
            Ok(page) => Ok((!page.is_empty()).then_some(page)),
            Err(err) if self.considered == 0 => Err(err),
            Err(err) => {
                tally.stopped_early = Some(err.to_string());
                Ok(None)
            }
        }
    }

    /// Leaves `message` in DLQ2, visible again when the pass ends.
    pub(super) fn hold(&mut self, message: &Message) {
        if let Some(handle) = message.receipt_handle() {
            self.held.push(handle.to_owned());
        }
    }

    /// Makes the held messages visible at once; a note when that failed
    /// (they then come back when their visibility timeout runs out).
    pub(super) async fn release(self) -> Option<String> {
        let mut stuck = 0;
        let mut reason = String::new();
        for chunk in self.held.chunks(SQS_BATCH as usize) {
            let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .filter_map(|(n, handle)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(n.to_string())
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .build()
                        .ok()
                })
                .collect();
            match self
                .sqs
                .change_message_visibility_batch()
                .queue_url(self.url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => {
                    stuck += out.failed().len();
                    if let Some(failed) = out.failed().first() {
                        reason = format!("{}: {}", failed.code(), failed.message().unwrap_or_default());
                    }
                }
                Err(err) => {
                    stuck += chunk.len();
                    reason = error::aws("ChangeMessageVisibilityBatch")(err).to_string();
                }
            }
        }
        (stuck > 0).then(|| {
            format!(
                "{stuck} message(s) left in dlq2 could not be made visible again ({reason}); they reappear after \
                 {}s",
                self.limits.hold.as_secs()
            )
        })
    }
}

pub(super) fn problem(message: &Message, reason: impl Into<String>) -> MessageProblem {
    MessageProblem {
        message_id: message.message_id().unwrap_or_default().to_owned(),
        reason: reason.into(),
    }
}

/// Deletes `messages` from the queue; one result per message, in order.
pub(super) async fn delete(sqs: &Client, url: &str, messages: &[&Message]) -> Vec<std::result::Result<(), String>> {
    let ids: Vec<String> = (0..messages.len()).map(|n| n.to_string()).collect();
    let entries: Vec<(&str, &str)> = ids
        .iter()
        .zip(messages)
        .map(|(id, m)| (id.as_str(), m.receipt_handle().unwrap_or_default()))
        .collect();
    match hybrid_counter_aws::sqs::delete_batch(sqs, url, &entries).await {
        Ok(failures) => ids
            .iter()
            .map(|id| match failures.iter().find(|f| &f.id == id) {
                Some(failure) => Err(failure.reason.clone()),
                None => Ok(()),
            })
            .collect(),
        Err(err) => {
            let reason = error::aws("DeleteMessageBatch")(err).to_string();
            ids.iter().map(|_| Err(reason.clone())).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_spreads_messages_over_time_at_the_rate() {
        assert_eq!(pace_delay(0, Some(10), Duration::ZERO), Duration::ZERO);
        assert_eq!(pace_delay(10, Some(10), Duration::ZERO), Duration::from_secs(1));
        assert_eq!(
            pace_delay(10, Some(10), Duration::from_millis(400)),
            Duration::from_millis(600)
        );
        assert_eq!(pace_delay(10, Some(10), Duration::from_secs(5)), Duration::ZERO);
        assert_eq!(pace_delay(1_000, None, Duration::ZERO), Duration::ZERO);
    }
}
