//! The move on AWS: SQS's message move task from DLQ2 to DLQ1, started and
//! followed until it ends.

use std::time::Duration;

use aws_sdk_sqs::Client;
use indicatif::ProgressBar;

use super::report::{MoveTask, Tally};
use crate::error::{self, Error, Result};

/// Starts SQS's message move task from `source_arn` to `destination_arn`
/// and follows it with `ListMessageMoveTasks` until it ends. Interrupting
/// counterctl does not stop the task; `aws sqs cancel-message-move-task`
/// does.
pub async fn move_task(
    sqs: &Client,
    source_arn: &str,
    destination_arn: &str,
    rate: Option<u32>,
    poll: Duration,
    bar: &ProgressBar,
) -> Result<Tally> {
    let started = sqs
        .start_message_move_task()
        .source_arn(source_arn)
        .destination_arn(destination_arn)
        .set_max_number_of_messages_per_second(rate.and_then(|r| i32::try_from(r).ok()))
        .send()
        .await
        .map_err(error::aws("StartMessageMoveTask"))?;
    let handle = started.task_handle().map(str::to_owned);
    loop {
        let listed = sqs
            .list_message_move_tasks()
            .source_arn(source_arn)
            .max_results(10)
            .send()
            .await
            .map_err(error::aws("ListMessageMoveTasks"))?;
        // A task's handle is listed only while it runs; once it has ended,
        // the most recent task of the queue (listed first) is this one:
        // a queue runs one task at a time.
        let task = listed
            .results()
            .iter()
            .find(|t| handle.is_some() && t.task_handle() == handle.as_deref())
            .or_else(|| listed.results().first())
            .ok_or_else(|| Error::Aws {
                action: "ListMessageMoveTasks",
                message: format!("the message move task just started on {source_arn} is not listed"),
            })?;
        let moved = u64::try_from(task.approximate_number_of_messages_moved()).unwrap_or(0);
        let to_move = task
            .approximate_number_of_messages_to_move()
            .and_then(|n| u64::try_from(n).ok());
        if let Some(total) = to_move {
            bar.set_length(total);
        }
        bar.set_position(moved);
        let status = task.status().unwrap_or("UNKNOWN").to_owned();
        if !matches!(status.as_str(), "RUNNING" | "CANCELLING") {
            return Ok(Tally {
                moved,
                task: Some(MoveTask {
                    task_handle: handle,
                    status,
                    moved,
                    to_move,
                    failure_reason: task.failure_reason().map(str::to_owned),
                }),
                ..Tally::default()
            });
        }
        tokio::time::sleep(poll).await;
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::operation::list_message_move_tasks::ListMessageMoveTasksOutput;
    use aws_sdk_sqs::operation::start_message_move_task::StartMessageMoveTaskOutput;
    use aws_sdk_sqs::types::ListMessageMoveTasksResultEntry;
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::commands::redrive::testing::client;

    #[tokio::test]
    async fn the_move_task_is_followed_until_it_completes() {
        let start = mock!(Client::start_message_move_task)
            .match_requests(|req| {
                req.source_arn() == Some("arn:dlq2")
                    && req.destination_arn() == Some("arn:dlq1")
                    && req.max_number_of_messages_per_second() == Some(50)
            })
            .then_output(|| StartMessageMoveTaskOutput::builder().task_handle("task-1").build());
        let entry = |handle: Option<&str>, status: &str, moved: i64| {
            ListMessageMoveTasksResultEntry::builder()
                .set_task_handle(handle.map(str::to_owned))
                .status(status)
                .approximate_number_of_messages_moved(moved)
                .approximate_number_of_messages_to_move(3)
                .build()
        };
        let list = mock!(Client::list_message_move_tasks)
            .sequence()
            .output(move || {
                ListMessageMoveTasksOutput::builder()
                    .results(entry(Some("task-1"), "RUNNING", 1))
                    .build()
            })
            .output(move || {
                ListMessageMoveTasksOutput::builder()
                    .results(entry(None, "COMPLETED", 3))
                    .results(entry(None, "COMPLETED", 7))
                    .build()
            })
            .build();
        let sqs = client(&[&start, &list]);
        let bar = ProgressBar::hidden();
        let tally = move_task(&sqs, "arn:dlq2", "arn:dlq1", Some(50), Duration::ZERO, &bar)
            .await
            .unwrap();
        assert_eq!(tally.moved, 3);
        let task = tally.task.unwrap();
        assert_eq!((task.status.as_str(), task.to_move), ("COMPLETED", Some(3)));
        assert_eq!(task.task_handle.as_deref(), Some("task-1"));
        assert_eq!(bar.position(), 3);
    }
}
