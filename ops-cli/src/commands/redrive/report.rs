//! What `redrive` reports: the queues, what was moved or replayed, what
//! failed or was skipped and why, the dry run's preview, the move task's
//! last state, and whether DLQ2 still holds something for an operator
//! (exit 1). [`Tally`] is what one pass contributes to it.

use std::fmt;

use hybrid_counter_aws::replay::OnFailureRecord;
use serde::Serialize;

use crate::commands::Location;
use crate::config::{RedriveMethod, RedriveMode};

/// A queue of the stack.
#[derive(Debug, Clone, Serialize)]
pub struct QueueRef {
    pub name: String,
    pub url: String,
    pub arn: String,
}

/// How a [`MessageProblem`]'s reason starts when the message was replayed
/// but its delete from DLQ2 failed: it stays hidden for the hold, then
/// comes back.
pub const REPLAYED_NOT_DELETED: &str = "replayed, but not deleted from dlq2";
/// The same for a message moved to DLQ1.
pub const MOVED_NOT_DELETED: &str = "sent to dlq1 but not deleted from dlq2";

/// A message left in DLQ2, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageProblem {
    pub message_id: String,
    pub reason: String,
}

/// The stream range an on-failure record names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RangeSummary {
    pub condition: String,
    pub shard_id: String,
    pub start_sequence_number: String,
    pub end_sequence_number: String,
    pub batch_size: u32,
    pub stream_arn: String,
}

impl RangeSummary {
    pub(super) fn of(record: &OnFailureRecord) -> Self {
        let info = &record.batch_info;
        Self {
            condition: record.request_context.condition.clone(),
            shard_id: info.shard_id.clone(),
            start_sequence_number: info.start_sequence_number.clone(),
            end_sequence_number: info.end_sequence_number.clone(),
            batch_size: info.batch_size,
            stream_arn: info.stream_arn.clone(),
        }
    }
}

/// What `--dry-run` found in one message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preview {
    pub message_id: String,
    /// The id the operator saw: DLQ1's message id of a permanent failure
    /// the reprocessor re-sent (its attribute), else the message's own.
    pub original_message_id: String,
    /// The body's first [`BODY_EXCERPT_CHARS`] characters.
    pub body_excerpt: String,
    /// Whether the body is longer than the excerpt.
    pub body_truncated: bool,
    /// `move`, `replay`, or `skip` (`--replay` of a message that is not an
    /// on-failure record).
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<RangeSummary>,
    /// The object keeping the failed batch with its records
    /// (`FailedBatchRecords=payload`): `s3://<bucket>/<key>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Why the reprocessor sent the message to DLQ2 at once (a permanent
    /// failure: its message attribute); none for a message SQS moved there
    /// after `maxReceiveCount` receives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// How much of a message body the dry run shows.
pub const BODY_EXCERPT_CHARS: usize = 200;

impl Preview {
    /// The excerpt as a JSON string (quoted, control characters escaped),
    /// `…` after the closing quote when the body goes on.
    fn quoted_excerpt(&self) -> String {
        let quoted = serde_json::Value::from(self.body_excerpt.as_str()).to_string();
        if self.body_truncated {
            format!("{quoted}…")
        } else {
            quoted
        }
    }
}

/// The message move task as `ListMessageMoveTasks` last reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MoveTask {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_handle: Option<String>,
    /// `COMPLETED`, `CANCELLED` or `FAILED`.
    pub status: String,
    pub moved: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_move: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

/// What a pass over DLQ2 did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub moved: u64,
    pub replayed: u64,
    pub failed: Vec<MessageProblem>,
    pub skipped: Vec<MessageProblem>,
    pub preview: Vec<Preview>,
    pub task: Option<MoveTask>,
    /// Why the pass stopped before the queue was empty.
    pub stopped_early: Option<String>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RedriveReport {
    #[serde(flatten)]
    pub location: Location,
    pub mode: RedriveMode,
    pub method: RedriveMethod,
    pub dry_run: bool,
    pub source: QueueRef,
    /// DLQ1, where moved messages go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<QueueRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<u32>,
    /// DLQ2's approximate number of visible messages at the start.
    pub source_depth: u64,
    pub moved: u64,
    pub replayed: u64,
    /// Messages that stay in DLQ2 because moving or replaying them failed.
    pub failed: Vec<MessageProblem>,
    /// Messages left in DLQ2 on purpose: `--replay` of a message that is
    /// not an on-failure record.
    pub skipped: Vec<MessageProblem>,
    /// `--dry-run`: every message seen and what would happen to it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preview: Vec<Preview>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<MoveTask>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// After a full pass: messages DLQ2 still holds (visible or in flight)
    /// beyond those this run reports as failed or skipped — received by a
    /// request whose answer was lost, or by another consumer. They come
    /// back after their visibility timeout; a later run handles them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_behind: Option<u64>,
    pub notes: Vec<String>,
    pub seconds: f64,
}

impl RedriveReport {
    /// Everything considered was moved or replayed (a dry run always
    /// succeeds): otherwise DLQ2 still holds something for an operator.
    pub fn succeeded(&self) -> bool {
        self.dry_run
            || (self.failed.is_empty()
                && self.skipped.is_empty()
                && self.stopped_early.is_none()
                && self.left_behind.is_none()
                && self.task.as_ref().is_none_or(|t| t.status == "COMPLETED"))
    }
}

impl fmt::Display for RedriveReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let route = match &self.destination {
            Some(destination) => format!("{} -> {}", self.source.name, destination.name),
            None => format!("{} (replayed here)", self.source.name),
        };
        writeln!(
            f,
            "Redrive {route} of stack {} (target {}, region {}): {}",
            self.location.stack_name,
            self.location.target,
            self.location.region,
            self.method.describe()
        )?;
        writeln!(
            f,
            "  {} held about {} message(s) at the start",
            self.source.name, self.source_depth
        )?;
        if self.dry_run {
            let count = |action: &str| self.preview.iter().filter(|p| p.action == action).count();
            writeln!(
                f,
                "  dry run, nothing was sent, replayed or deleted: would move {}, replay {}, skip {}",
                count("move"),
                count("replay"),
                count("skip")
            )?;
            for p in &self.preview {
                let what = match (&p.range, &p.object, &p.problem) {
                    (Some(r), _, _) => format!(
                        "pointer: {} shard {} sequence {}..={} ({} record(s))",
                        r.condition, r.shard_id, r.start_sequence_number, r.end_sequence_number, r.batch_size
                    ),
                    (None, Some(object), _) => format!("kept batch: {object}"),
                    (None, None, Some(problem)) => problem.clone(),
                    (None, None, None) => String::new(),
                };
                writeln!(f, "    {:<7} {}  {what}", p.action, p.message_id)?;
                if p.original_message_id != p.message_id {
                    writeln!(f, "            original message id {}", p.original_message_id)?;
                }
                writeln!(f, "            body {}", p.quoted_excerpt())?;
                if let Some(reason) = &p.reason {
                    writeln!(f, "            sent to {} at once: {reason}", self.source.name)?;
                }
            }
        } else {
            writeln!(
                f,
                "  moved {}  replayed {}  failed {}  skipped {}",
                self.moved,
                self.replayed,
                self.failed.len(),
                self.skipped.len()
            )?;
        }
        if let Some(task) = &self.task {
            writeln!(
                f,
                "  move task {}: {} of {} moved{}",
                task.status,
                task.moved,
                task.to_move.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                task.failure_reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )?;
        }
        for (label, problems) in [("failed", &self.failed), ("skipped", &self.skipped)] {
            if !problems.is_empty() {
                writeln!(f, "  {label}:")?;
                for p in problems {
                    writeln!(f, "    {}: {}", p.message_id, p.reason)?;
                }
            }
        }
        if let Some(reason) = &self.stopped_early {
            writeln!(f, "  stopped early: {reason}")?;
        }
        if let Some(left) = self.left_behind {
            writeln!(
                f,
                "  left behind: about {left} message(s) still in {}",
                self.source.name
            )?;
        }
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::redrive::testing::SOURCE;

    fn report(tally: Tally, dry_run: bool) -> RedriveReport {
        RedriveReport {
            location: Location {
                stack_name: "hybrid-counter".into(),
                target: "aws".into(),
                region: "us-east-1".into(),
                endpoint: None,
            },
            mode: RedriveMode::Move,
            method: RedriveMethod::MessageMoveTask,
            dry_run,
            source: QueueRef {
                name: "dlq2".into(),
                url: SOURCE.into(),
                arn: "arn:dlq2".into(),
            },
            destination: None,
            max: None,
            rate: None,
            source_depth: 3,
            moved: tally.moved,
            replayed: tally.replayed,
            failed: tally.failed,
            skipped: tally.skipped,
            preview: tally.preview,
            task: tally.task,
            stopped_early: tally.stopped_early,
            left_behind: None,
            notes: tally.notes,
            seconds: 0.5,
        }
    }

    #[test]
    fn a_dry_run_prints_the_original_message_id_and_the_body_escaped() {
        let preview = |id: &str, original: &str, body: &str, truncated| Preview {
            message_id: id.into(),
            original_message_id: original.into(),
            body_excerpt: body.into(),
            body_truncated: truncated,
            action: "move".into(),
            receive_count: None,
            range: None,
            object: None,
            reason: Some("not an on-failure record".into()),
            problem: None,
        };
        let text = report(
            Tally {
                preview: vec![
                    preview("dlq2-id", "dlq1-id", "{\"a\":\n1}", false),
                    preview("own", "own", "xyz", true),
                ],
                ..Tally::default()
            },
            true,
        )
        .to_string();
        let expected = [
            "    move    dlq2-id  ",
            "            original message id dlq1-id",
            r#"            body "{\"a\":\n1}""#,
            "            sent to dlq2 at once: not an on-failure record",
            "    move    own  ",
            r#"            body "xyz"…"#,
        ]
        .join("\n");
        assert!(text.contains(&expected), "{text}");
        assert_eq!(text.matches("original message id").count(), 1, "{text}");
    }

    #[test]
    fn a_failed_move_task_or_anything_left_behind_fails_the_report() {
        let task = |status: &str| MoveTask {
            task_handle: None,
            status: status.into(),
            moved: 1,
            to_move: Some(3),
            failure_reason: Some("AccessDenied".into()),
        };
        let completed = report(
            Tally {
                moved: 3,
                task: Some(task("COMPLETED")),
                ..Tally::default()
            },
            false,
        );
        assert!(completed.succeeded());
        let failed = report(
            Tally {
                task: Some(task("FAILED")),
                ..Tally::default()
            },
            false,
        );
        assert!(!failed.succeeded());
        assert!(
            failed
                .to_string()
                .contains("move task FAILED: 1 of 3 moved (AccessDenied)"),
            "{failed}"
        );
        let skipped = report(
            Tally {
                skipped: vec![MessageProblem {
                    message_id: "m".into(),
                    reason: "not an on-failure record".into(),
                }],
                ..Tally::default()
            },
            false,
        );
        assert!(!skipped.succeeded());
        let json = serde_json::to_value(&skipped).unwrap();
        assert_eq!(json["skipped"][0]["message_id"], "m");
        assert_eq!(json["method"], "message-move-task");
        assert!(report(Tally::default(), true).succeeded());
        // Messages still in DLQ2 that the pass did not account for.
        let mut lost_receive = report(Tally::default(), false);
        assert!(lost_receive.succeeded());
        lost_receive.left_behind = Some(4);
        assert!(!lost_receive.succeeded());
        assert!(
            lost_receive
                .to_string()
                .contains("left behind: about 4 message(s) still in dlq2"),
            "{lost_receive}"
        );
        assert_eq!(serde_json::to_value(&lost_receive).unwrap()["left_behind"], 4);
    }
}
