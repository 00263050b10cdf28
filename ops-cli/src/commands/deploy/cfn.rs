//! The CloudFormation engine of the stack lifecycle: reading a stack (which
//! `status`, `local run` and the data commands do too), deciding from its
//! typed status whether it can take a change set, creating change sets and
//! waiting for them (both ways a service says "no changes"), and following
//! stack events until a final status. The status tables are pure functions
//! over the SDK's enums, with unit tests; the rest is SDK calls, paged by
//! the SDK's paginators. A status newer than the SDK (its `Unknown`) is
//! classified by its name, as the service spells it (`..._IN_PROGRESS`,
//! `..._FAILED`).
//!
//! Change sets and stack operations are followed by polls of our own, not
//! the SDK's waiters: those wait 30 s before their second look and up to
//! 120 s between looks (fixed in the generated builders), which would add
//! at least 30 s to every `plan` and `deploy` on AWS, where a change set
//! takes a few seconds; the change-set waiter also keeps polling a change
//! set deleted under it until its timeout, the stack waiters cannot print
//! the events as they come, and a waiter's timeout loses the last status
//! the report names. Why not `cloudformatious`: docs/design.md, "Choices
//! worth knowing".

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::operation::describe_change_set::DescribeChangeSetOutput;
use aws_sdk_cloudformation::types::{
    Capability, Change, ChangeSetStatus, ChangeSetType, Parameter, ResourceStatus, StackEvent, StackResourceSummary,
    StackStatus, Tag,
};
use serde::{Serialize, Serializer};

use crate::error::{self, Error, Result};
use crate::progress::Ui;

/// What counterctl needs to know about a stack.
#[derive(Debug, Clone, Serialize)]
pub struct StackInfo {
    pub id: String,
    pub name: String,
    #[serde(serialize_with = "as_str")]
    pub status: StackStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, String>,
    /// Stack-level tags, which CloudFormation propagates to the resources.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<String>,
    /// The template's `Description`, when the service returns it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Serializes one of the SDK's enums (which have no serde) as the
/// service's own string, the way the reports show it.
pub fn as_str<T: AsRef<str>, S: Serializer>(value: &T, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(value.as_ref())
}

/// [`as_str`] for an optional one.
pub fn option_as_str<T: AsRef<str>, S: Serializer>(
    value: &Option<T>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.serialize_some(value.as_ref()),
        None => serializer.serialize_none(),
    }
}

/// The stack named (or with the id) `name`, or `None` if it does not exist.
pub async fn describe(cfn: &Client, name: &str) -> Result<Option<StackInfo>> {
    let output = match cfn.describe_stacks().stack_name(name).send().await {
        Ok(output) => output,
        Err(err) if error::is_stack_missing(&err) => return Ok(None),
        Err(err) => return Err(error::aws("DescribeStacks")(err)),
    };
    let Some(stack) = output.stacks().first() else {
        return Ok(None);
    };
    let status = stack.stack_status().cloned().unwrap_or_else(|| StackStatus::from(""));
    if status == StackStatus::DeleteComplete {
        return Ok(None);
    }
    Ok(Some(StackInfo {
        id: stack.stack_id().unwrap_or(name).to_owned(),
        name: stack.stack_name().unwrap_or(name).to_owned(),
        status,
        status_reason: stack.stack_status_reason().map(str::to_owned),
        description: stack.description().map(str::to_owned),
        // Pseudo parameters (`AWS::Region`, ...) are not the template's;
        // an emulator may list them.
        parameters: stack
            .parameters()
            .iter()
            .filter(|p| p.parameter_key().is_some_and(|k| !k.starts_with("AWS::")))
            .filter_map(|p| {
                Some((
                    p.parameter_key()?.to_owned(),
                    p.parameter_value().unwrap_or_default().to_owned(),
                ))
            })
            .collect(),
        outputs: stack
            .outputs()
            .iter()
            .filter_map(|o| {
                Some((
                    o.output_key()?.to_owned(),
                    o.output_value().unwrap_or_default().to_owned(),
                ))
            })
            .collect(),
        tags: stack
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
            .collect(),
        last_updated: stack
            .last_updated_time()
            .or(stack.creation_time())
            .map(|t| t.to_string()),
    }))
}

/// Whether a stack in `status` can take a change set, and of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// No stack, or one a `CREATE` change set left in review: create it.
    Create,
    /// A stable stack: update it.
    Update,
    /// A create that failed and rolled back (`ROLLBACK_COMPLETE`): the
    /// stack holds nothing (the tables' `RetainExceptOnCreate` deleted them
    /// too) and can take no change set; deploy deletes it and creates anew.
    FailedCreate,
    /// Another operation is running.
    Busy,
    /// A failed create, a failed delete or a stuck rollback: it has to go.
    Unusable,
}

pub fn readiness(status: Option<&StackStatus>) -> Readiness {
    match status {
        None | Some(StackStatus::DeleteComplete | StackStatus::ReviewInProgress) => Readiness::Create,
        Some(
            StackStatus::CreateComplete
            | StackStatus::UpdateComplete
            | StackStatus::UpdateRollbackComplete
            | StackStatus::UpdateFailed
            | StackStatus::ImportComplete
            | StackStatus::ImportRollbackComplete,
        ) => Readiness::Update,
        Some(StackStatus::RollbackComplete) => Readiness::FailedCreate,
        Some(s) if in_progress(s) => Readiness::Busy,
        Some(_) => Readiness::Unusable,
    }
}

/// Whether `value` is newer than the SDK (its `Unknown`, which the SDK
/// asks not to match on): none of the values it knows, `values`.
pub fn is_unknown(value: &impl AsRef<str>, values: &[&str]) -> bool {
    !values.contains(&value.as_ref())
}

/// The statuses of an operation still running; a status newer than the
/// SDK is one when its name says so (`..._IN_PROGRESS`).
fn in_progress(status: &StackStatus) -> bool {
    if is_unknown(status, StackStatus::values()) {
        return status.as_str().ends_with("_IN_PROGRESS");
    }
    matches!(
        status,
        StackStatus::CreateInProgress
            | StackStatus::DeleteInProgress
            | StackStatus::ImportInProgress
            | StackStatus::ImportRollbackInProgress
            | StackStatus::ReviewInProgress
            | StackStatus::RollbackInProgress
            | StackStatus::UpdateCompleteCleanupInProgress
            | StackStatus::UpdateInProgress
            | StackStatus::UpdateRollbackCompleteCleanupInProgress
            | StackStatus::UpdateRollbackInProgress
    )
}

/// The tables a stack created and still lists as its own
/// (`CREATE_COMPLETE`). After a create that rolled back, AWS lists none: the
/// rollback deleted them (`DeletionPolicy: RetainExceptOnCreate`). An
/// emulator may keep them, and its stack deletion then retains them. A
/// table whose create failed is never one of them: its name may be a table
/// that existed before the stack (the very cause of the failure).
pub async fn tables_left(cfn: &Client, stack_id: &str) -> Result<Vec<String>> {
    Ok(resources(cfn, stack_id, "AWS::DynamoDB::Table")
        .await?
        .iter()
        .filter(|r| r.resource_status() == Some(&ResourceStatus::CreateComplete))
        .filter_map(|r| r.physical_resource_id().filter(|id| !id.is_empty()).map(str::to_owned))
        .collect())
}

/// The stack's resources of type `kind` (`AWS::CloudWatch::Alarm`, ...).
pub async fn resources(cfn: &Client, stack_id: &str, kind: &str) -> Result<Vec<StackResourceSummary>> {
    let all: Vec<StackResourceSummary> = cfn
        .list_stack_resources()
        .stack_name(stack_id)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(error::aws("ListStackResources"))?;
    Ok(all.into_iter().filter(|r| r.resource_type() == Some(kind)).collect())
}

/// Deletes the stack `stack_id` (named `stack_name` in the report) and
/// follows the deletion until it settles: `counterctl destroy`, and a
/// create that rolled back (`ROLLBACK_COMPLETE`), which takes no change set,
/// only a delete.
pub async fn delete_stack(
    cfn: &Client,
    stack_id: &str,
    stack_name: &str,
    poll: Duration,
    timeout: Duration,
    ui: &Ui,
) -> Result<WaitOutcome> {
    let since = newest_event_id(cfn, stack_id).await?;
    cfn.delete_stack()
        .stack_name(stack_id)
        .client_request_token(change_set_name(std::time::SystemTime::now()))
        .send()
        .await
        .map_err(error::aws("DeleteStack"))?;
    let watch = Watch {
        cfn,
        stack_id,
        stack_name,
        poll,
        timeout,
    };
    watch.follow(since, Operation::Delete, ui).await
}

/// Where a stack operation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    InProgress,
    Succeeded,
    Failed,
}

/// How a deploy (create or update) stands at `status`.
pub fn deploy_settled(status: &StackStatus) -> Settled {
    match status {
        StackStatus::CreateComplete | StackStatus::UpdateComplete | StackStatus::ImportComplete => Settled::Succeeded,
        s if in_progress(s) => Settled::InProgress,
        _ => Settled::Failed,
    }
}

/// How a delete stands at `status` (`None`: the stack is gone).
pub fn delete_settled(status: Option<&StackStatus>) -> Settled {
    match status {
        None | Some(StackStatus::DeleteComplete) => Settled::Succeeded,
        Some(s) if in_progress(s) => Settled::InProgress,
        Some(_) => Settled::Failed,
    }
}

/// A change set's "nothing to do". AWS fails the change set with one of two
/// status reasons (the wording has varied over the years), so this is the
/// one place that reads them.
pub fn is_no_change_reason(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    reason.contains("didn't contain changes")
        || reason.contains("did not contain changes")
        || reason.contains("no updates are to be performed")
}

/// Where the template comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateSource {
    Body(String),
    Url(String),
}

/// A change set to create.
#[derive(Debug, Clone)]
pub struct ChangeSetRequest {
    pub stack_name: String,
    pub kind: ChangeSetType,
    pub template: TemplateSource,
    pub parameters: Vec<Parameter>,
    /// Stack tags; empty sends none (an update then keeps the stack's).
    pub tags: BTreeMap<String, String>,
    pub description: String,
    /// The CloudFormation service role (`--role-arn`); `None`: the one the
    /// stack already has, if any.
    pub role_arn: Option<String>,
}

/// A fresh, valid change set name (`[a-zA-Z][-a-zA-Z0-9]*`).
pub fn change_set_name(now: std::time::SystemTime) -> String {
    let millis = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("counterctl-{millis}")
}

/// Creates the change set; returns (change set id, stack id).
pub async fn create_change_set(cfn: &Client, request: &ChangeSetRequest) -> Result<(String, String)> {
    let mut call = cfn
        .create_change_set()
        .stack_name(&request.stack_name)
        .change_set_name(change_set_name(std::time::SystemTime::now()))
        .change_set_type(request.kind.clone())
        .description(&request.description)
        .capabilities(Capability::CapabilityIam)
        .capabilities(Capability::CapabilityNamedIam)
        .set_parameters(Some(request.parameters.clone()))
        .set_role_arn(request.role_arn.clone());
    for (key, value) in &request.tags {
        call = call.tags(Tag::builder().key(key).value(value).build());
    }
    call = match &request.template {
        TemplateSource::Body(body) => call.template_body(body),
        TemplateSource::Url(url) => call.template_url(url),
    };
    let output = call.send().await.map_err(error::aws("CreateChangeSet"))?;
    let id = output.id().unwrap_or_default().to_owned();
    let stack_id = output.stack_id().unwrap_or(&request.stack_name).to_owned();
    Ok((id, stack_id))
}

/// How a change set ended up.
#[derive(Debug, Clone)]
pub enum ChangeSetState {
    Ready { changes: Vec<Change> },
    NoChanges { reason: String },
    Failed { reason: String },
}

/// Waits until the change set is computed, looking every `poll` for at
/// most `timeout`, then collects every page of its changes. Not the SDK's
/// waiter: its fixed 30 to 120 s between looks (see the module's header).
pub async fn wait_change_set(cfn: &Client, id: &str, poll: Duration, timeout: Duration) -> Result<ChangeSetState> {
    // Tokio's clock, which the tests pause and advance.
    let started = tokio::time::Instant::now();
    loop {
        let first = cfn
            .describe_change_set()
            .change_set_name(id)
            .send()
            .await
            .map_err(error::aws("DescribeChangeSet"))?;
        let reason = first.status_reason().unwrap_or_default();
        match first.status() {
            Some(ChangeSetStatus::CreateComplete) => return all_changes(cfn, id, first).await,
            Some(ChangeSetStatus::Failed) if is_no_change_reason(reason) => {
                return Ok(ChangeSetState::NoChanges {
                    reason: reason.to_owned(),
                });
            }
            Some(ChangeSetStatus::Failed) => {
                return Ok(ChangeSetState::Failed {
                    reason: if reason.is_empty() { "no reason given" } else { reason }.to_owned(),
                });
            }
            // Deleted under the wait: it will never be computed.
            Some(
                status @ (ChangeSetStatus::DeletePending
                | ChangeSetStatus::DeleteInProgress
                | ChangeSetStatus::DeleteComplete
                | ChangeSetStatus::DeleteFailed),
            ) => {
                return Ok(ChangeSetState::Failed {
                    reason: if reason.is_empty() {
                        format!("the change set was deleted ({})", status.as_str())
                    } else {
                        reason.to_owned()
                    },
                });
            }
            // `CREATE_PENDING`, `CREATE_IN_PROGRESS`, or a status newer
            // than the SDK: still computing, until the timeout says not.
            _ => {}
        }
        if started.elapsed() > timeout {
            return Ok(ChangeSetState::Failed {
                reason: format!("not computed within {}s", timeout.as_secs()),
            });
        }
        tokio::time::sleep(poll).await;
    }
}

/// Every change of a computed change set: the first page's, then the
/// pages the paginator reads on from its token.
async fn all_changes(cfn: &Client, id: &str, first: DescribeChangeSetOutput) -> Result<ChangeSetState> {
    let mut changes = first.changes().to_vec();
    // An empty token is no next page (an emulator may hand one back).
    if let Some(next) = first.next_token().filter(|t| !t.is_empty()) {
        let rest: Vec<Change> = cfn
            .describe_change_set()
            .change_set_name(id)
            .next_token(next)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(error::aws("DescribeChangeSet"))?;
        changes.extend(rest);
    }
    Ok(if changes.is_empty() {
        ChangeSetState::NoChanges {
            reason: "the change set has no changes".to_owned(),
        }
    } else {
        ChangeSetState::Ready { changes }
    })
}

pub async fn delete_change_set(cfn: &Client, id: &str) -> Result<()> {
    cfn.delete_change_set()
        .change_set_name(id)
        .send()
        .await
        .map_err(error::aws("DeleteChangeSet"))?;
    Ok(())
}

/// One stack event, as printed and reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    pub id: String,
    pub timestamp: String,
    pub logical_id: String,
    pub resource_type: String,
    /// The resource's status; on the stack's own events, the stack's.
    #[serde(serialize_with = "as_str")]
    pub status: ResourceStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Event {
    fn from_sdk(event: &StackEvent) -> Self {
        Self {
            id: event.event_id().unwrap_or_default().to_owned(),
            timestamp: event.timestamp().map(|t| t.to_string()).unwrap_or_default(),
            logical_id: event.logical_resource_id().unwrap_or_default().to_owned(),
            resource_type: event.resource_type().unwrap_or_default().to_owned(),
            status: event
                .resource_status()
                .cloned()
                .unwrap_or_else(|| ResourceStatus::from("")),
            reason: event
                .resource_status_reason()
                .filter(|r| !r.is_empty())
                .map(str::to_owned),
        }
    }

    /// Is this the stack's own event rather than a resource's?
    pub fn is_stack_event(&self) -> bool {
        self.resource_type == "AWS::CloudFormation::Stack"
    }

    /// The stack status a stack event carries in its resource status field
    /// (`UPDATE_ROLLBACK_COMPLETE` and others are stack statuses only,
    /// which `ResourceStatus` holds as unknown).
    fn stack_status(&self) -> StackStatus {
        StackStatus::from(self.status.as_str())
    }

    /// One line for the live log.
    pub fn line(&self) -> String {
        // `2025-01-02T03:04:05.678Z` -> `03:04:05`
        let time = self.timestamp.get(11..19).unwrap_or(&self.timestamp);
        let mut line = format!(
            "{time}  {:<28} {:<32} {}",
            self.status.as_str(),
            self.logical_id,
            self.resource_type
        );
        if let Some(reason) = &self.reason {
            line.push_str("  ");
            line.push_str(reason);
        }
        line
    }
}

/// A resource that failed, for the failure report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedResource {
    pub logical_id: String,
    pub resource_type: String,
    pub status: String,
    pub reason: String,
}

/// `LogicalId (Type) STATUS: reason`, as the reports list a failure.
impl std::fmt::Display for FailedResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}) {}: {}",
            self.logical_id, self.resource_type, self.status, self.reason
        )
    }
}

/// A resource status that says the operation on the resource failed; a
/// status newer than the SDK is one when its name says so (`..._FAILED`).
fn resource_failed(status: &ResourceStatus) -> bool {
    if is_unknown(status, ResourceStatus::values()) {
        return status.as_str().ends_with("_FAILED");
    }
    matches!(
        status,
        ResourceStatus::CreateFailed
            | ResourceStatus::DeleteFailed
            | ResourceStatus::ExportFailed
            | ResourceStatus::ExportRollbackFailed
            | ResourceStatus::ImportFailed
            | ResourceStatus::ImportRollbackFailed
            | ResourceStatus::RollbackFailed
            | ResourceStatus::UpdateFailed
            | ResourceStatus::UpdateRollbackFailed
    )
}

/// A stack status that says an operation failed or is rolled back; a
/// status newer than the SDK is one when its name has `FAILED` or
/// `ROLLBACK` in it.
fn failed_or_rolled_back(status: &StackStatus) -> bool {
    if is_unknown(status, StackStatus::values()) {
        let name = status.as_str();
        return name.contains("FAILED") || name.contains("ROLLBACK");
    }
    matches!(
        status,
        StackStatus::CreateFailed
            | StackStatus::DeleteFailed
            | StackStatus::ImportRollbackComplete
            | StackStatus::ImportRollbackFailed
            | StackStatus::ImportRollbackInProgress
            | StackStatus::RollbackComplete
            | StackStatus::RollbackFailed
            | StackStatus::RollbackInProgress
            | StackStatus::UpdateFailed
            | StackStatus::UpdateRollbackComplete
            | StackStatus::UpdateRollbackCompleteCleanupInProgress
            | StackStatus::UpdateRollbackFailed
            | StackStatus::UpdateRollbackInProgress
    )
}

/// The failed resources among `events`, in order; when no resource event
/// failed (an emulator may only mark the stack), the stack's own failure.
pub fn failures(events: &[Event], stack_status: &StackStatus, stack_reason: Option<&str>) -> Vec<FailedResource> {
    let resources: Vec<FailedResource> = events
        .iter()
        .filter(|e| resource_failed(&e.status) && !e.is_stack_event())
        .map(|e| FailedResource {
            logical_id: e.logical_id.clone(),
            resource_type: e.resource_type.clone(),
            status: e.status.as_str().to_owned(),
            reason: e.reason.clone().unwrap_or_else(|| "no reason given".to_owned()),
        })
        .collect();
    if !resources.is_empty() {
        return resources;
    }
    let stack_event = events
        .iter()
        .rev()
        .find(|e| e.is_stack_event() && e.reason.is_some() && failed_or_rolled_back(&e.stack_status()));
    let reason = stack_event
        .and_then(|e| e.reason.clone())
        .or_else(|| stack_reason.map(str::to_owned))
        .unwrap_or_else(|| "no reason given".to_owned());
    vec![FailedResource {
        logical_id: stack_event.map_or_else(|| "(stack)".to_owned(), |e| e.logical_id.clone()),
        resource_type: "AWS::CloudFormation::Stack".to_owned(),
        status: stack_status.as_str().to_owned(),
        reason,
    }]
}

/// The id of the newest event of the stack, to tell later events apart.
pub async fn newest_event_id(cfn: &Client, stack_id: &str) -> Result<Option<String>> {
    match cfn.describe_stack_events().stack_name(stack_id).send().await {
        Ok(output) => Ok(output
            .stack_events()
            .first()
            .and_then(|e| e.event_id())
            .map(str::to_owned)),
        Err(err) if error::is_stack_missing(&err) => Ok(None),
        Err(err) => Err(error::aws("DescribeStackEvents")(err)),
    }
}

/// Events newer than `since` (all when `None`), oldest first. The service
/// lists newest first, so pages are read until `since` shows up.
pub async fn events_since(cfn: &Client, stack_id: &str, since: Option<&str>) -> Result<Vec<Event>> {
    let mut newest_first = Vec::new();
    let mut events = cfn
        .describe_stack_events()
        .stack_name(stack_id)
        .into_paginator()
        .items()
        .send();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(err) if error::is_stack_missing(&err) => break,
            Err(err) => return Err(error::aws("DescribeStackEvents")(err)),
        };
        if since.is_some() && event.event_id() == since {
            break;
        }
        newest_first.push(Event::from_sdk(&event));
    }
    newest_first.reverse();
    Ok(newest_first)
}

/// What waiting for an operation ended with.
#[derive(Debug, Clone)]
pub struct WaitOutcome {
    pub settled: Settled,
    /// `None` when the stack is gone (deleted).
    pub status: Option<StackStatus>,
    pub status_reason: Option<String>,
    pub events: Vec<Event>,
}

impl WaitOutcome {
    /// The final status; `DELETE_COMPLETE` when the stack is gone.
    pub fn final_status(&self) -> StackStatus {
        self.status.clone().unwrap_or(StackStatus::DeleteComplete)
    }
}

/// Which operation is being waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Deploy,
    Delete,
}

/// The stack an operation is being followed on, and how patiently.
pub struct Watch<'a> {
    pub cfn: &'a Client,
    pub stack_id: &'a str,
    pub stack_name: &'a str,
    pub poll: Duration,
    pub timeout: Duration,
}

impl Watch<'_> {
    /// Follows the stack's events after `since` (printing each new one)
    /// until the operation settles or the timeout passes.
    pub async fn follow(&self, since: Option<String>, operation: Operation, ui: &Ui) -> Result<WaitOutcome> {
        let started = Instant::now();
        let mut cursor = since;
        let mut events = Vec::new();
        loop {
            self.pull(&mut cursor, &mut events, ui).await?;
            let stack = describe(self.cfn, self.stack_id).await?;
            let status = stack.as_ref().map(|s| s.status.clone());
            let shown = status.clone().unwrap_or(StackStatus::DeleteComplete);
            let settled = match operation {
                Operation::Deploy => deploy_settled(&shown),
                Operation::Delete => delete_settled(status.as_ref()),
            };
            ui.step(format!("{}: {}", self.stack_name, shown.as_str()));
            if settled != Settled::InProgress {
                // Events written between the last read and the final status.
                self.pull(&mut cursor, &mut events, ui).await?;
                return Ok(WaitOutcome {
                    settled,
                    status_reason: stack.and_then(|s| s.status_reason),
                    status,
                    events,
                });
            }
            if started.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    name: self.stack_name.to_owned(),
                    status: status.map(|s| s.as_str().to_owned()).unwrap_or_default(),
                    seconds: self.timeout.as_secs(),
                });
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    async fn pull(&self, cursor: &mut Option<String>, events: &mut Vec<Event>, ui: &Ui) -> Result<()> {
        let new = events_since(self.cfn, self.stack_id, cursor.as_deref()).await?;
        for event in &new {
            ui.log(event.line());
        }
        if let Some(last) = new.last() {
            *cursor = Some(last.id.clone());
        }
        events.extend(new);
        Ok(())
    }
}

#[cfg(test)]
mod sdk_tests {
    use aws_sdk_cloudformation::operation::describe_change_set::DescribeChangeSetOutput;
    use aws_sdk_cloudformation::operation::describe_stack_events::DescribeStackEventsOutput;
    use aws_sdk_cloudformation::operation::describe_stacks::DescribeStacksOutput;
    use aws_sdk_cloudformation::types::{ChangeAction, ChangeSetStatus, ResourceChange, Stack};
    use aws_smithy_mocks::{Rule, RuleMode, mock};
    use aws_smithy_runtime_api::http::{Response, StatusCode};
    use aws_smithy_types::body::SdkBody;

    use super::*;

    /// A client answering from `rules`: the first rule that matches the
    /// call and still has responses answers it.
    fn client(rules: &[&Rule]) -> Client {
        aws_smithy_mocks::mock_client!(aws_sdk_cloudformation, RuleMode::MatchAny, rules.iter().copied())
    }

    fn change(id: &str) -> Change {
        Change::builder()
            .resource_change(
                ResourceChange::builder()
                    .action(ChangeAction::Modify)
                    .logical_resource_id(id)
                    .build(),
            )
            .build()
    }

    /// Between looks, the poll of a real deploy (2 s on AWS).
    const POLL: Duration = Duration::from_secs(2);

    /// [`wait_change_set`] every [`POLL`] for at most `timeout`, on
    /// tokio's paused clock: a wait that does not end within a minute past
    /// its timeout fails the test rather than hanging it.
    async fn wait_paused(cfn: &Client, timeout: Duration) -> ChangeSetState {
        tokio::time::timeout(
            timeout + Duration::from_secs(60),
            wait_change_set(cfn, "cs", POLL, timeout),
        )
        .await
        .expect("the wait ends by its timeout")
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_set_failed_for_lack_of_changes_is_no_changes() {
        let rule = mock!(Client::describe_change_set)
            .sequence()
            .output(|| DescribeChangeSetOutput::builder().status(ChangeSetStatus::CreatePending).build())
            .output(|| {
                DescribeChangeSetOutput::builder()
                    .status(ChangeSetStatus::Failed)
                    .status_reason(
                        "The submitted information didn't contain changes. Submit different information to create a change set.",
                    )
                    .build()
            })
            .build();
        let state = wait_paused(&client(&[&rule]), Duration::from_secs(600)).await;
        assert!(matches!(state, ChangeSetState::NoChanges { reason } if reason.contains("didn't contain changes")));
        assert_eq!(rule.num_calls(), 2);
    }

    /// A change set still being computed is looked at again after one
    /// poll, not after the SDK waiter's 30 s.
    #[tokio::test(start_paused = true)]
    async fn a_pending_change_set_is_ready_after_one_poll() {
        let rule = mock!(Client::describe_change_set)
            .sequence()
            .output(|| {
                DescribeChangeSetOutput::builder()
                    .status(ChangeSetStatus::CreatePending)
                    .build()
            })
            .output(|| {
                DescribeChangeSetOutput::builder()
                    .status(ChangeSetStatus::CreateComplete)
                    .changes(change("A"))
                    .build()
            })
            .build();
        let started = tokio::time::Instant::now();
        let state = wait_paused(&client(&[&rule]), Duration::from_secs(600)).await;
        assert!(
            matches!(&state, ChangeSetState::Ready { changes } if changes.len() == 1),
            "{state:?}"
        );
        assert_eq!(started.elapsed(), POLL, "one poll between the two looks");
        assert_eq!(rule.num_calls(), 2);
    }

    /// A change set deleted while it is waited on is never computed: the
    /// wait fails at once with the service's reason, not after the timeout.
    #[tokio::test(start_paused = true)]
    async fn a_deleted_change_set_fails_at_once_with_its_reason() {
        for status in [
            ChangeSetStatus::DeletePending,
            ChangeSetStatus::DeleteInProgress,
            ChangeSetStatus::DeleteComplete,
            ChangeSetStatus::DeleteFailed,
        ] {
            let answer = status.clone();
            let rule = mock!(Client::describe_change_set).then_output(move || {
                DescribeChangeSetOutput::builder()
                    .status(answer.clone())
                    .status_reason("deleted by the operator")
                    .build()
            });
            let started = tokio::time::Instant::now();
            let state = wait_paused(&client(&[&rule]), Duration::from_secs(600)).await;
            assert!(
                matches!(&state, ChangeSetState::Failed { reason } if reason == "deleted by the operator"),
                "{status:?}: {state:?}"
            );
            assert_eq!(started.elapsed(), Duration::ZERO, "{status:?}: no poll");
            assert_eq!(rule.num_calls(), 1, "{status:?}");
        }
        // Without a reason, the status says what happened.
        let rule = mock!(Client::describe_change_set).then_output(|| {
            DescribeChangeSetOutput::builder()
                .status(ChangeSetStatus::DeleteComplete)
                .build()
        });
        let state = wait_paused(&client(&[&rule]), Duration::from_secs(600)).await;
        assert!(
            matches!(&state, ChangeSetState::Failed { reason } if reason.contains("DELETE_COMPLETE")),
            "{state:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_set_never_computed_fails_after_the_timeout() {
        let rule = mock!(Client::describe_change_set).then_output(|| {
            DescribeChangeSetOutput::builder()
                .status(ChangeSetStatus::CreateInProgress)
                .build()
        });
        let state = wait_paused(&client(&[&rule]), Duration::from_secs(10)).await;
        assert!(
            matches!(&state, ChangeSetState::Failed { reason } if reason == "not computed within 10s"),
            "{state:?}"
        );
        assert_eq!(rule.num_calls(), 7, "at 0, 2, ..., 12 s");
    }

    /// An empty token on the first page is no next page: no paginator,
    /// no second request.
    #[tokio::test(start_paused = true)]
    async fn an_empty_first_token_reads_no_more_pages() {
        let rule = mock!(Client::describe_change_set).then_output(|| {
            DescribeChangeSetOutput::builder()
                .status(ChangeSetStatus::CreateComplete)
                .changes(change("A"))
                .next_token("")
                .build()
        });
        let state = wait_paused(&client(&[&rule]), Duration::from_secs(600)).await;
        assert!(
            matches!(&state, ChangeSetState::Ready { changes } if changes.len() == 1),
            "{state:?}"
        );
        assert_eq!(rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn any_other_failed_change_set_is_a_failure_with_its_reason() {
        let rule = mock!(Client::describe_change_set).then_output(|| {
            DescribeChangeSetOutput::builder()
                .status(ChangeSetStatus::Failed)
                .status_reason("Template error: instance of Fn::GetAtt references undefined resource X")
                .build()
        });
        let state = wait_change_set(&client(&[&rule]), "cs", POLL, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(state, ChangeSetState::Failed { reason } if reason.contains("undefined resource X")));
    }

    #[tokio::test]
    async fn every_page_of_changes_is_collected() {
        let rule = mock!(Client::describe_change_set)
            .sequence()
            .output(|| {
                DescribeChangeSetOutput::builder()
                    .status(ChangeSetStatus::CreateComplete)
                    .changes(change("A"))
                    .next_token("page-2")
                    .build()
            })
            .output(|| {
                DescribeChangeSetOutput::builder()
                    .status(ChangeSetStatus::CreateComplete)
                    .changes(change("B"))
                    .build()
            })
            .build();
        let state = wait_change_set(&client(&[&rule]), "cs", POLL, Duration::from_secs(5))
            .await
            .unwrap();
        let ChangeSetState::Ready { changes } = state else {
            panic!("ready expected: {state:?}")
        };
        let ids: Vec<_> = changes
            .iter()
            .filter_map(|c| c.resource_change()?.logical_resource_id())
            .collect();
        assert_eq!(ids, ["A", "B"]);
    }

    /// A query-protocol error answer, parsed by the real deserializer.
    fn error_response(code: &str, message: &str) -> Response {
        let body = format!(
            "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>\
             <RequestId>r</RequestId></ErrorResponse>"
        );
        Response::new(StatusCode::try_from(400).unwrap(), SdkBody::from(body))
    }

    #[tokio::test]
    async fn a_missing_stack_reads_as_none() {
        let rule = mock!(Client::describe_stacks)
            .then_http_response(|| error_response("ValidationError", "Stack with id hybrid-counter does not exist"));
        assert!(describe(&client(&[&rule]), "hybrid-counter").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn other_describe_errors_are_reported_with_their_code() {
        let rule = mock!(Client::describe_stacks).then_http_response(|| {
            error_response(
                "AccessDenied",
                "not authorized to perform cloudformation:DescribeStacks",
            )
        });
        let err = describe(&client(&[&rule]), "hybrid-counter").await.unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::ENVIRONMENT);
        assert!(
            err.to_string()
                .starts_with("DescribeStacks failed: AccessDenied: not authorized"),
            "{err}"
        );
    }

    fn event(id: &str, status: ResourceStatus) -> StackEvent {
        StackEvent::builder()
            .event_id(id)
            .logical_resource_id(id)
            .resource_type("AWS::SQS::Queue")
            .resource_status(status)
            .build()
    }

    #[tokio::test]
    async fn events_are_read_back_to_the_marker_and_returned_oldest_first() {
        let rule = mock!(Client::describe_stack_events)
            .sequence()
            .output(|| {
                DescribeStackEventsOutput::builder()
                    .stack_events(event("e5", ResourceStatus::CreateComplete))
                    .stack_events(event("e4", ResourceStatus::CreateInProgress))
                    .next_token("older")
                    .build()
            })
            .output(|| {
                DescribeStackEventsOutput::builder()
                    .stack_events(event("e3", ResourceStatus::CreateComplete))
                    .stack_events(event("e2", ResourceStatus::CreateInProgress))
                    .stack_events(event("e1", ResourceStatus::CreateInProgress))
                    .build()
            })
            .build();
        let events = events_since(&client(&[&rule]), "stack", Some("e2")).await.unwrap();
        let ids: Vec<_> = events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["e3", "e4", "e5"]);
    }

    fn stack(status: StackStatus) -> DescribeStacksOutput {
        DescribeStacksOutput::builder()
            .stacks(
                Stack::builder()
                    .stack_id("arn:stack")
                    .stack_name("hybrid-counter")
                    .stack_status(status)
                    .build(),
            )
            .build()
    }

    #[tokio::test]
    async fn following_waits_through_in_progress_to_the_final_status() {
        let events = mock!(Client::describe_stack_events)
            .sequence()
            .output(|| {
                DescribeStackEventsOutput::builder()
                    .stack_events(event("q-1", ResourceStatus::UpdateInProgress))
                    .stack_events(event("marker", ResourceStatus::CreateComplete))
                    .build()
            })
            .output(|| {
                DescribeStackEventsOutput::builder()
                    .stack_events(event("q-2", ResourceStatus::UpdateComplete))
                    .stack_events(event("q-1", ResourceStatus::UpdateInProgress))
                    .build()
            })
            .repeatedly()
            .build();
        let stacks = mock!(Client::describe_stacks)
            .sequence()
            .output(|| stack(StackStatus::UpdateInProgress))
            .output(|| stack(StackStatus::UpdateCompleteCleanupInProgress))
            .output(|| stack(StackStatus::UpdateComplete))
            .build();
        let cfn = client(&[&events, &stacks]);
        let watch = Watch {
            cfn: &cfn,
            stack_id: "arn:stack",
            stack_name: "hybrid-counter",
            poll: Duration::ZERO,
            timeout: Duration::from_secs(5),
        };
        let outcome = watch
            .follow(Some("marker".into()), Operation::Deploy, &Ui::quiet())
            .await
            .unwrap();
        assert_eq!(outcome.settled, Settled::Succeeded);
        assert_eq!(outcome.status, Some(StackStatus::UpdateComplete));
        let ids: Vec<_> = outcome.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["q-1", "q-2"], "each event once, oldest first");
        assert_eq!(stacks.num_calls(), 3);
    }

    fn rolled_back() -> StackInfo {
        StackInfo {
            id: "arn:stack".to_owned(),
            name: "hybrid-counter".to_owned(),
            status: StackStatus::RollbackComplete,
            status_reason: None,
            description: None,
            parameters: BTreeMap::new(),
            outputs: BTreeMap::new(),
            tags: BTreeMap::new(),
            last_updated: None,
        }
    }

    async fn delete_rolled_back(cfn: &Client) -> WaitOutcome {
        let stack = rolled_back();
        delete_stack(
            cfn,
            &stack.id,
            &stack.name,
            Duration::ZERO,
            Duration::from_secs(5),
            &Ui::quiet(),
        )
        .await
        .unwrap()
    }

    /// A failed first create leaves a ROLLBACK_COMPLETE stack that no
    /// change set can touch: deploy deletes it and waits until it is gone.
    #[tokio::test]
    async fn a_rolled_back_create_is_deleted_and_followed_until_gone() {
        let events = mock!(Client::describe_stack_events).then_output(|| DescribeStackEventsOutput::builder().build());
        let delete = mock!(Client::delete_stack)
            .match_requests(|r| r.stack_name() == Some("arn:stack"))
            .then_output(|| aws_sdk_cloudformation::operation::delete_stack::DeleteStackOutput::builder().build());
        let stacks = mock!(Client::describe_stacks)
            .sequence()
            .output(|| stack(StackStatus::DeleteInProgress))
            .output(|| stack(StackStatus::DeleteComplete))
            .build();
        let cfn = client(&[&events, &delete, &stacks]);
        let outcome = delete_rolled_back(&cfn).await;
        assert_eq!(outcome.settled, Settled::Succeeded);
        assert_eq!(delete.num_calls(), 1);
        assert_eq!(stacks.num_calls(), 2);
    }

    #[tokio::test]
    async fn only_the_tables_a_stack_still_holds_are_left_by_a_failed_create() {
        use aws_sdk_cloudformation::operation::list_stack_resources::ListStackResourcesOutput;
        use aws_sdk_cloudformation::types::StackResourceSummary;
        let summary = |kind: &str, id: &str, status: ResourceStatus| {
            StackResourceSummary::builder()
                .logical_resource_id(id)
                .physical_resource_id(id)
                .resource_type(kind)
                .resource_status(status)
                .last_updated_timestamp(aws_smithy_types::DateTime::from_secs(0))
                .build()
        };
        let rule = mock!(Client::list_stack_resources)
            .sequence()
            .output(move || {
                ListStackResourcesOutput::builder()
                    .stack_resource_summaries(summary("AWS::DynamoDB::Table", "kept", ResourceStatus::CreateComplete))
                    .stack_resource_summaries(summary("AWS::DynamoDB::Table", "gone", ResourceStatus::DeleteComplete))
                    .next_token("page-2")
                    .build()
            })
            .output(move || {
                ListStackResourcesOutput::builder()
                    .stack_resource_summaries(summary("AWS::SQS::Queue", "queue", ResourceStatus::CreateComplete))
                    .stack_resource_summaries(summary("AWS::DynamoDB::Table", "failed", ResourceStatus::CreateFailed))
                    .build()
            })
            .build();
        let tables = tables_left(&client(&[&rule]), "arn:stack").await.unwrap();
        assert_eq!(
            tables,
            ["kept"],
            "never a table whose create failed: its name may be someone else's table"
        );
    }

    #[tokio::test]
    async fn a_rolled_back_create_that_cannot_be_deleted_is_a_failure() {
        let events = mock!(Client::describe_stack_events).then_output(|| DescribeStackEventsOutput::builder().build());
        let delete = mock!(Client::delete_stack)
            .then_output(|| aws_sdk_cloudformation::operation::delete_stack::DeleteStackOutput::builder().build());
        let stacks = mock!(Client::describe_stacks).then_output(|| stack(StackStatus::DeleteFailed));
        let cfn = client(&[&events, &delete, &stacks]);
        let outcome = delete_rolled_back(&cfn).await;
        assert_eq!(outcome.settled, Settled::Failed);
        assert_eq!(outcome.status, Some(StackStatus::DeleteFailed));
    }

    #[tokio::test]
    async fn following_gives_up_after_the_timeout() {
        let events = mock!(Client::describe_stack_events).then_output(|| DescribeStackEventsOutput::builder().build());
        let stacks = mock!(Client::describe_stacks).then_output(|| stack(StackStatus::UpdateInProgress));
        let cfn = client(&[&events, &stacks]);
        let watch = Watch {
            cfn: &cfn,
            stack_id: "arn:stack",
            stack_name: "hybrid-counter",
            poll: Duration::from_millis(5),
            timeout: Duration::from_millis(20),
        };
        let err = watch.follow(None, Operation::Deploy, &Ui::quiet()).await.unwrap_err();
        assert!(
            matches!(&err, Error::Timeout { status, .. } if status == "UPDATE_IN_PROGRESS"),
            "{err}"
        );
        assert_eq!(err.exit_code(), crate::exit::TIMEOUT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_stack_status() {
        assert_eq!(readiness(None), Readiness::Create);
        assert_eq!(readiness(Some(&"REVIEW_IN_PROGRESS".into())), Readiness::Create);
        for status in [
            "CREATE_COMPLETE",
            "UPDATE_COMPLETE",
            "UPDATE_ROLLBACK_COMPLETE",
            "UPDATE_FAILED",
        ] {
            assert_eq!(readiness(Some(&status.into())), Readiness::Update, "{status}");
        }
        for status in [
            "CREATE_IN_PROGRESS",
            "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS",
            "DELETE_IN_PROGRESS",
        ] {
            assert_eq!(readiness(Some(&status.into())), Readiness::Busy, "{status}");
        }
        // A failed first create: deploy replaces it, no manual step.
        assert_eq!(readiness(Some(&"ROLLBACK_COMPLETE".into())), Readiness::FailedCreate);
        for status in [
            "ROLLBACK_FAILED",
            "CREATE_FAILED",
            "DELETE_FAILED",
            "UPDATE_ROLLBACK_FAILED",
        ] {
            assert_eq!(readiness(Some(&status.into())), Readiness::Unusable, "{status}");
        }
    }

    #[test]
    fn deploys_settle_on_complete_or_any_failure() {
        assert_eq!(deploy_settled(&"CREATE_COMPLETE".into()), Settled::Succeeded);
        assert_eq!(deploy_settled(&"UPDATE_COMPLETE".into()), Settled::Succeeded);
        assert_eq!(
            deploy_settled(&"UPDATE_COMPLETE_CLEANUP_IN_PROGRESS".into()),
            Settled::InProgress
        );
        assert_eq!(deploy_settled(&"ROLLBACK_IN_PROGRESS".into()), Settled::InProgress);
        for status in [
            "ROLLBACK_COMPLETE",
            "UPDATE_ROLLBACK_COMPLETE",
            "CREATE_FAILED",
            "UPDATE_FAILED",
        ] {
            assert_eq!(deploy_settled(&status.into()), Settled::Failed, "{status}");
        }
        assert_eq!(delete_settled(None), Settled::Succeeded);
        assert_eq!(delete_settled(Some(&"DELETE_IN_PROGRESS".into())), Settled::InProgress);
        assert_eq!(delete_settled(Some(&"DELETE_FAILED".into())), Settled::Failed);
    }

    /// A status newer than the SDK is classified by its name, as before
    /// the SDK's enums: still running when it ends in `_IN_PROGRESS`.
    #[test]
    fn an_unknown_stack_status_in_progress_is_still_running() {
        let running = StackStatus::from("IMPORT_NEW_THING_IN_PROGRESS");
        assert!(is_unknown(&running, StackStatus::values()));
        assert!(in_progress(&running));
        assert_eq!(readiness(Some(&running)), Readiness::Busy);
        assert_eq!(deploy_settled(&running), Settled::InProgress);
        assert_eq!(delete_settled(Some(&running)), Settled::InProgress);
        let done = StackStatus::from("NEW_THING_COMPLETE");
        assert!(!in_progress(&done));
        assert_eq!(readiness(Some(&done)), Readiness::Unusable);
        assert_eq!(deploy_settled(&done), Settled::Failed);
        assert_eq!(delete_settled(Some(&done)), Settled::Failed);
        assert!(!is_unknown(&StackStatus::UpdateInProgress, StackStatus::values()));
    }

    #[test]
    fn an_unknown_resource_status_ending_in_failed_is_a_failure() {
        assert!(resource_failed(&ResourceStatus::from("NEW_THING_FAILED")));
        assert!(!resource_failed(&ResourceStatus::from("NEW_THING_COMPLETE")));
        let events = [
            event("Queue", "AWS::SQS::Queue", "NEW_THING_FAILED", Some("queue said no")),
            event("s", "AWS::CloudFormation::Stack", "UPDATE_ROLLBACK_COMPLETE", None),
        ];
        let failed = failures(&events, &"UPDATE_ROLLBACK_COMPLETE".into(), None);
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].logical_id, "Queue");
        assert_eq!(failed[0].status, "NEW_THING_FAILED");
        assert_eq!(failed[0].reason, "queue said no");
    }

    #[test]
    fn an_unknown_stack_status_naming_a_failure_or_rollback_is_one() {
        for status in ["NEW_THING_FAILED", "NEW_ROLLBACK_COMPLETE"] {
            assert!(failed_or_rolled_back(&status.into()), "{status}");
            let events = [event(
                "s",
                "AWS::CloudFormation::Stack",
                status,
                Some("the stack's reason"),
            )];
            let failed = failures(&events, &status.into(), None);
            assert_eq!(failed[0].reason, "the stack's reason", "{status}");
            assert_eq!(failed[0].logical_id, "s", "{status}");
        }
        assert!(!failed_or_rolled_back(&"NEW_THING_COMPLETE".into()));
    }

    /// The typed lists above agree with CloudFormation's naming of every
    /// status this SDK knows, so an SDK upgrade that adds a status the
    /// lists miss (a new `..._IN_PROGRESS` read as final) fails here.
    #[test]
    fn the_typed_classifications_cover_every_status_the_sdk_knows() {
        for name in StackStatus::values() {
            let status = StackStatus::from(*name);
            assert_eq!(in_progress(&status), name.ends_with("_IN_PROGRESS"), "{name}");
            let failed = name.contains("FAILED") || name.contains("ROLLBACK");
            assert_eq!(failed_or_rolled_back(&status), failed, "{name}");
        }
        for name in ResourceStatus::values() {
            let status = ResourceStatus::from(*name);
            assert_eq!(resource_failed(&status), name.ends_with("_FAILED"), "{name}");
        }
    }

    #[test]
    fn both_no_change_reasons_are_recognised() {
        assert!(is_no_change_reason(
            "The submitted information didn't contain changes. Submit different information to create a change set."
        ));
        assert!(is_no_change_reason("No updates are to be performed."));
        assert!(!is_no_change_reason(
            "Template format error: Unresolved resource dependencies"
        ));
    }

    #[test]
    fn change_set_names_are_valid() {
        let name = change_set_name(std::time::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        assert_eq!(name, "counterctl-1700000000123");
    }

    fn event(logical: &str, kind: &str, status: &str, reason: Option<&str>) -> Event {
        Event {
            id: format!("{logical}-{status}"),
            timestamp: "2025-01-02T03:04:05.678Z".into(),
            logical_id: logical.into(),
            resource_type: kind.into(),
            status: status.into(),
            reason: reason.map(Into::into),
        }
    }

    #[test]
    fn failures_name_each_failed_resource_with_its_reason() {
        let events = [
            event("s", "AWS::CloudFormation::Stack", "UPDATE_IN_PROGRESS", None),
            event("Queue", "AWS::SQS::Queue", "UPDATE_FAILED", Some("queue name taken")),
            event("Fn", "AWS::Lambda::Function", "UPDATE_FAILED", None),
            event("s", "AWS::CloudFormation::Stack", "UPDATE_ROLLBACK_COMPLETE", None),
        ];
        let failed = failures(&events, &"UPDATE_ROLLBACK_COMPLETE".into(), None);
        assert_eq!(failed.len(), 2);
        assert_eq!(failed[0].logical_id, "Queue");
        assert_eq!(failed[0].resource_type, "AWS::SQS::Queue");
        assert_eq!(failed[0].reason, "queue name taken");
        assert_eq!(failed[1].reason, "no reason given");
    }

    #[test]
    fn without_failed_resources_the_stack_reason_is_reported() {
        let events = [event(
            "s",
            "AWS::CloudFormation::Stack",
            "ROLLBACK_COMPLETE",
            Some("Failed to create resource ResourcesTable: table exists"),
        )];
        let failed = failures(&events, &"ROLLBACK_COMPLETE".into(), None);
        assert_eq!(failed.len(), 1);
        assert_eq!(
            failed[0].reason,
            "Failed to create resource ResourcesTable: table exists"
        );
        let failed = failures(&[], &"ROLLBACK_COMPLETE".into(), Some("stack reason"));
        assert_eq!(failed[0].reason, "stack reason");
        assert_eq!(failed[0].logical_id, "(stack)");
    }

    #[test]
    fn event_lines_show_time_status_and_reason() {
        let line = event("Queue", "AWS::SQS::Queue", "CREATE_FAILED", Some("boom")).line();
        assert!(line.starts_with("03:04:05  CREATE_FAILED"), "{line}");
        assert!(line.ends_with("AWS::SQS::Queue  boom"), "{line}");
    }
}
