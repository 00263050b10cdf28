//! `counterctl destroy`: deletes the stack and waits for it. The two tables
//! carry `DeletionPolicy: Retain`, so the data survives; `--delete-data`
//! deletes them too after the stack is gone, once confirmed (`--yes`, or
//! typing the stack name at a terminal; never silently). Deleting a stack
//! that does not exist succeeds with nothing to do.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cfn::{self, Event, FailedResource, Operation, Settled, Watch};
use crate::commands::{Context, Location};
use crate::config::DestroyOptions;
use crate::error::{self, Error, Result};

#[derive(Debug, Clone, Serialize)]
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
    pub events: Vec<Event>,
    pub failures: Vec<FailedResource>,
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
        existed: false,
        deleted: false,
        status: None,
        seconds: 0.0,
        retained_tables: Vec::new(),
        deleted_tables: Vec::new(),
        events: Vec::new(),
        failures: Vec::new(),
    };
    ctx.ui.step(format!("reading stack {name}"));
    let Some(stack) = cfn::describe(cfn, name).await? else {
        return Ok(report);
    };
    report.existed = true;
    let tables: Vec<String> = [stack::outputs::RESOURCES_TABLE, stack::outputs::COUNTERS_TABLE]
        .iter()
        .filter_map(|key| stack.outputs.get(*key).cloned())
        .collect();
    if options.delete_data {
        confirm(ctx, name, &tables, options.yes)?;
    }

    let since = cfn::newest_event_id(cfn, &stack.id).await?;
    ctx.ui.step(format!("deleting stack {name}"));
    cfn.delete_stack()
        .stack_name(&stack.id)
        .client_request_token(cfn::change_set_name(std::time::SystemTime::now()))
        .send()
        .await
        .map_err(error::aws("DeleteStack"))?;
    let watch = Watch {
        cfn,
        stack_id: &stack.id,
        stack_name: name,
        poll: ctx.clients.poll,
        timeout: options.timeout,
    };
    let waited = watch.follow(since, Operation::Delete, ctx.ui).await?;
    report.status = Some(waited.status.clone().unwrap_or_else(|| "DELETE_COMPLETE".to_owned()));
    report.events = waited.events;
    if waited.settled != Settled::Succeeded {
        let status = report.status.clone().unwrap_or_default();
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
async fn delete_table(ctx: &Context<'_>, table: &str, timeout: Duration) -> Result<()> {
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
                writeln!(
                    f,
                    "  {} ({}) {}: {}",
                    failure.logical_id, failure.resource_type, failure.status, failure.reason
                )?;
            }
            return Ok(());
        }
        writeln!(f, "Stack {name}: deleted in {:.1}s", self.seconds)?;
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
        writeln!(f, "The artifacts bucket is kept.")
    }
}
