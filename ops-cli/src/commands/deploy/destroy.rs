//! `counterctl destroy`: deletes the stack and waits for it. The two tables
//! carry `DeletionPolicy: Retain`, so the data survives; `--delete-data`
//! deletes them too after the stack is gone, once confirmed (`--yes`, or
//! typing the stack name at a terminal; never silently). Deleting a stack
//! that does not exist succeeds with nothing to do.
//!
//! Only the kit's own stacks are deleted ([`kit_stack`]): a wrong
//! `--stack-name` must not delete someone else's stack. Before deleting,
//! the messages DLQ1 and DLQ2 still hold (failed batches not yet counted)
//! are counted, logged and reported: they are deleted with the queues.
//!
//! The failed-batch bucket (`FailedBatchRecords=payload`) is retained,
//! even with `--delete-data`: it is versioned, and its objects are the only
//! copy of failed batches that have left the stream, so emptying it is
//! left to a deliberate command the report prints (it needs
//! `s3:ListBucketVersions`, `s3:DeleteObjectVersion` and `s3:DeleteBucket`,
//! which the operator policy does not grant).

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cfn::{self, Event, FailedResource, Settled, StackInfo};
use crate::commands::{Context, Location};
use crate::config::DestroyOptions;
use crate::error::{self, Error, Result};

#[derive(Debug, Clone, Default, Serialize)]
pub struct DestroyReport {
    #[serde(flatten)]
    pub location: Location,
    /// False when there was no stack to delete.
    pub existed: bool,
    pub deleted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    pub seconds: f64,
    /// Tables left in place (DeletionPolicy Retain).
    pub retained_tables: Vec<String>,
    /// Tables deleted because of --delete-data.
    pub deleted_tables: Vec<String>,
    /// Messages DLQ1 and DLQ2 held (visible and in flight, approximate)
    /// when the stack was deleted, queues whose count could be read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<QueuedMessages>,
    /// The failed-batch bucket, kept (DeletionPolicy Retain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retained_bucket: Option<String>,
    pub events: Vec<Event>,
    pub failures: Vec<FailedResource>,
}

/// What one of the failure queues still held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueuedMessages {
    pub queue: String,
    pub messages: u64,
}

/// The parameters `counterctl deploy` always writes (the artifacts bucket
/// and the handler zips' keys): a stack without them was not deployed by
/// the kit.
const KIT_PARAMETERS: [&str; 3] = [
    stack::params::ARTIFACTS_BUCKET,
    stack::params::STREAM_COUNTER_CODE_KEY,
    stack::params::DLQ_REPROCESSOR_CODE_KEY,
];

/// Whether `stack` is one of the kit's: it has the parameters `deploy`
/// writes, and its description, when the service returns one, is the
/// kit's. Parameters are there in every status, even after a failed
/// creation rolled back (outputs are not).
pub fn kit_stack(stack: &StackInfo) -> std::result::Result<(), String> {
    let missing: Vec<&str> = KIT_PARAMETERS
        .iter()
        .copied()
        .filter(|p| !stack.parameters.contains_key(*p))
        .collect();
    if !missing.is_empty() {
        return Err(format!("it has no parameter {}", missing.join(", ")));
    }
    let kit = stack::kit::DESCRIPTION;
    let prefix = &kit[..kit.find(':').unwrap_or(kit.len())];
    match &stack.description {
        Some(description) if !description.is_empty() && !description.starts_with(prefix) => {
            Err(format!("its description is {description:?}, not the kit's"))
        }
        _ => Ok(()),
    }
}

impl DestroyReport {
    pub fn succeeded(&self) -> bool {
        self.failures.is_empty()
    }
}

pub async fn run(ctx: &Context<'_>, options: DestroyOptions) -> Result<DestroyReport> {
    let started = Instant::now();
    let cfn = &ctx.clients.cloudformation;
    let name = &ctx.config.stack_name;
    let mut report = DestroyReport {
        location: Location::of(ctx),
        ..Default::default()
    };
    ctx.ui.step(format!("reading stack {name}"));
    let Some(stack) = cfn::describe(cfn, name).await? else {
        return Ok(report);
    };
    report.existed = true;
    kit_stack(&stack).map_err(|why| Error::NotTheKit {
        name: name.clone(),
        why,
    })?;
    let tables: Vec<String> = [stack::outputs::RESOURCES_TABLE, stack::outputs::COUNTERS_TABLE]
        .iter()
        .filter_map(|key| stack.outputs.get(*key).cloned())
        .collect();
    report.retained_bucket = stack.outputs.get(stack::outputs::FAILED_BATCH_BUCKET).cloned();
    report.queued = queued(ctx, &stack).await;
    for queue in report.queued.iter().filter(|q| q.messages > 0) {
        ctx.ui.log(format!(
            "warning: {} still holds about {} message(s) (failed batches not yet counted); they are deleted with \
             the queue: run `counterctl audit --repair` afterwards if the tables are kept",
            queue.queue, queue.messages
        ));
    }
    if options.delete_data {
        confirm(ctx, name, &tables, options.yes)?;
    }

    ctx.ui.step(format!("deleting stack {name}"));
    let waited = cfn::delete_stack(cfn, &stack.id, name, ctx.clients.poll, options.timeout, ctx.ui).await?;
    let status = waited.final_status();
    report.status = Some(status.as_str().to_owned());
    report.events = waited.events;
    if waited.settled != Settled::Succeeded {
        report.failures = cfn::failures(&report.events, &status, waited.status_reason.as_deref());
        report.retained_tables = tables;
        report.seconds = started.elapsed().as_secs_f64();
        return Ok(report);
    }
    report.deleted = true;

    if options.delete_data {
        for table in tables {
            ctx.ui.step(format!("deleting table {table}"));
            delete_table(ctx, &table, options.timeout).await?;
            report.deleted_tables.push(table);
        }
    } else {
        report.retained_tables = tables;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The approximate number of messages in DLQ1 and DLQ2 (visible and in
/// flight); a queue whose count cannot be read is left out, with a log
/// line: a count is a warning, never a reason not to delete.
async fn queued(ctx: &Context<'_>, stack: &StackInfo) -> Vec<QueuedMessages> {
    let mut queued = Vec::new();
    for (queue, output) in [("dlq1", stack::outputs::DLQ1_URL), ("dlq2", stack::outputs::DLQ2_URL)] {
        let Some(url) = stack.outputs.get(output) else {
            continue;
        };
        match hybrid_counter_aws::sqs::depth(&ctx.clients.sqs, url)
            .await
            .map_err(crate::error::aws("GetQueueAttributes"))
        {
            Ok(depth) => queued.push(QueuedMessages {
                queue: queue.to_owned(),
                messages: depth.visible + depth.in_flight,
            }),
            Err(err) => ctx.ui.log(format!("could not count the messages in {queue}: {err}")),
        }
    }
    queued
}

/// `--yes`, or the stack name typed at a terminal; anything else refuses.
fn confirm(ctx: &Context<'_>, name: &str, tables: &[String], yes: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    if !ctx.ui.can_prompt() {
        return Err(Error::ConfirmationRequired);
    }
    let listed = if tables.is_empty() {
        "(none found in the stack outputs)".to_owned()
    } else {
        tables.join(", ")
    };
    let answer = ctx
        .ui
        .prompt(&format!(
            "This deletes stack {name} AND the tables {listed} with all their data.\nType the stack name to confirm: "
        ))
        .map_err(Error::io("cannot read the confirmation from", "stdin"))?;
    if answer == name {
        Ok(())
    } else {
        Err(Error::Aborted(format!(
            "the confirmation {answer:?} does not match the stack name {name:?}; nothing was deleted"
        )))
    }
}

/// Deletes a table and waits until it is gone; an already missing table is fine.
pub(super) async fn delete_table(ctx: &Context<'_>, table: &str, timeout: Duration) -> Result<()> {
    let dynamodb = &ctx.clients.dynamodb;
    match dynamodb.delete_table().table_name(table).send().await {
        Ok(_) => {}
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            return Ok(());
        }
        Err(err) => return Err(error::aws("DeleteTable")(err)),
    }
    let started = Instant::now();
    loop {
        match dynamodb.describe_table().table_name(table).send().await {
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                return Ok(());
            }
            Err(err) => return Err(error::aws("DescribeTable")(err)),
            Ok(_) if started.elapsed() > timeout => {
                return Err(Error::Timeout {
                    name: table.to_owned(),
                    status: "DELETING".to_owned(),
                    seconds: timeout.as_secs(),
                });
            }
            Ok(_) => tokio::time::sleep(ctx.clients.poll).await,
        }
    }
}

impl fmt::Display for DestroyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.location.stack_name;
        if !self.existed {
            return writeln!(
                f,
                "Stack {name} does not exist (target {}, region {}): nothing to delete.",
                self.location.target, self.location.region
            );
        }
        if !self.failures.is_empty() {
            writeln!(
                f,
                "Stack {name}: DELETE FAILED ({})",
                self.status.as_deref().unwrap_or("-")
            )?;
            for failure in &self.failures {
                writeln!(f, "  {failure}")?;
            }
            return Ok(());
        }
        writeln!(f, "Stack {name}: deleted in {:.1}s", self.seconds)?;
        for queue in self.queued.iter().filter(|q| q.messages > 0) {
            writeln!(
                f,
                "Warning: {} held about {} message(s) when it was deleted (failed batches not yet counted); run \
                 `counterctl audit --repair` if the tables are kept",
                queue.queue, queue.messages
            )?;
        }
        if !self.retained_tables.is_empty() {
            writeln!(
                f,
                "Retained tables (DeletionPolicy Retain): {}",
                self.retained_tables.join(", ")
            )?;
            writeln!(
                f,
                "  a new stack with the same NamePrefix cannot be created while they exist; when the data is no \
                 longer needed: aws dynamodb delete-table --table-name <name>"
            )?;
        }
        if !self.deleted_tables.is_empty() {
            writeln!(f, "Deleted tables: {}", self.deleted_tables.join(", "))?;
        }
        if let Some(bucket) = &self.retained_bucket {
            writeln!(
                f,
                "Retained failed-batch bucket and its policy (DeletionPolicy Retain, even with --delete-data): \
                 {bucket}\n  its objects are the only copy of failed batches past the stream's 24 hours; its kept \
                 policy lets only the OperatorPrincipalArn read or delete them, so run these as that principal (none \
                 set: an administrator must first replace the bucket policy): it is versioned, so emptying it deletes every version: aws s3api list-object-versions --bucket \
                 {bucket}, delete them, then aws s3api delete-bucket --bucket {bucket}"
            )?;
        }
        writeln!(f, "The artifacts bucket is kept.")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn stack(parameters: &[&str], description: Option<&str>) -> StackInfo {
        StackInfo {
            id: "arn:stack".into(),
            name: "hck".into(),
            status: "ROLLBACK_COMPLETE".into(),
            status_reason: None,
            parameters: parameters.iter().map(|p| ((*p).to_owned(), "v".to_owned())).collect(),
            outputs: BTreeMap::new(),
            tags: BTreeMap::new(),
            last_updated: None,
            description: description.map(str::to_owned),
        }
    }

    #[test]
    fn only_a_stack_the_kit_deployed_is_destroyed() {
        // Even a creation that rolled back (no outputs) is the kit's.
        assert_eq!(
            kit_stack(&stack(&KIT_PARAMETERS, Some(stack::kit::DESCRIPTION))),
            Ok(())
        );
        assert_eq!(kit_stack(&stack(&KIT_PARAMETERS, None)), Ok(()));
        let err = kit_stack(&stack(&["VpcCidr"], Some("Production VPC"))).unwrap_err();
        assert!(err.contains("no parameter ArtifactsBucket"), "{err}");
        let err = kit_stack(&stack(&KIT_PARAMETERS, Some("Production VPC"))).unwrap_err();
        assert!(err.contains("\"Production VPC\", not the kit's"), "{err}");
        let refusal = Error::NotTheKit {
            name: "prod-vpc".into(),
            why: err,
        };
        assert!(refusal.to_string().contains("nothing was deleted"), "{refusal}");
        assert_eq!(refusal.exit_code(), crate::exit::USAGE);
    }

    #[test]
    fn the_report_warns_of_queued_messages_and_names_the_kept_bucket() {
        let report = DestroyReport {
            location: Location {
                stack_name: "hck".into(),
                target: "aws".into(),
                region: "us-east-1".into(),
                endpoint: None,
            },
            existed: true,
            deleted: true,
            status: Some("DELETE_COMPLETE".into()),
            seconds: 1.0,
            retained_tables: vec![],
            deleted_tables: vec!["hck-resources".into()],
            queued: vec![
                QueuedMessages {
                    queue: "dlq1".into(),
                    messages: 0,
                },
                QueuedMessages {
                    queue: "dlq2".into(),
                    messages: 3,
                },
            ],
            retained_bucket: Some("hck-failed-batches-1-us-east-1".into()),
            events: vec![],
            failures: vec![],
        };
        let text = report.to_string();
        assert!(text.contains("dlq2 held about 3 message(s)"), "{text}");
        assert!(!text.contains("dlq1 held"), "{text}");
        assert!(
            text.contains(
                "Retained failed-batch bucket and its policy (DeletionPolicy Retain, even with --delete-data)"
            )
        );
        assert!(text.contains("run these as that principal"), "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["queued"][1]["messages"], 3);
        assert_eq!(json["retained_bucket"], "hck-failed-batches-1-us-east-1");
    }
}
