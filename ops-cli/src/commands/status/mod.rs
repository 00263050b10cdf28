//! `counterctl status`: the stack's status and outputs, the two event
//! source mappings (state, the settings that decide retries and the
//! failure path, and the metrics Lambda publishes for them), the DLQ
//! depths, every alarm of the stack with its state and the topic it
//! notifies (the dropped-events and on-failure delivery alarms among
//! them), the tables' warm throughput, maximum and Contributor Insights,
//! the drift check's last run ([`super::drift_check`]) and the scope-key
//! layout against its record ([`layout`]). A missing stack is
//! an error (exit 3). Anything an operator should act on (a failed stack,
//! a disabled mapping, a stream mapping whose dropped records no metric
//! counts, messages in DLQ2, an alarm firing) is listed under
//! `attention`, and makes the command exit 1; so is a table with global-table
//! replicas ([`super::replicas`]), on which the kit cannot count.
//!
//! On ministack (`--target localstack` without a token, what `make deploy`
//! deploys to) alarms have no actions and no mapping publishes metrics:
//! those are the emulator's limits, not the stack's, so there they are
//! listed under `emulator_limits` and do not make the command exit 1
//! ([`local`], with the local runner's health). The text report: [`render`].

use hybrid_counter::limits::drift::LimitsDrift;
use hybrid_counter::limits::file::LimitsFile;
use hybrid_counter_aws::esm::{MappingConfig, RUNNER_HEALTH_TAG};
use std::collections::BTreeMap;
use std::path::Path;

use aws_sdk_cloudformation::types::StackStatus;
use serde::Serialize;

mod layout;
mod local;
mod render;

use local::{NO_EVENT_COUNTS, NOTIFIES_NO_ONE, is_ministack_limit, ministack_limits, on_ministack};
pub use local::{RUNNER_NOT_RUNNING, RUNNER_NOT_RUNNING_ON_MINISTACK, runner_problem};

use super::deploy::cfn;
use super::drift_check::DriftCheckStatus;
use super::replicas::{self, TableReplicas};
use super::{Context, Location};
use crate::error::{self, Result};

#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    #[serde(flatten)]
    pub location: Location,
    pub stack_id: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, String>,
    pub mappings: Vec<MappingStatus>,
    pub queues: Vec<QueueStatus>,
    pub alarms: Vec<AlarmStatus>,
    /// The example HTTP API's function URL, deployed and (locally) served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api: Option<ApiStatus>,
    /// The SNS topic the alarms notify (the `AlarmTopicArn` output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alarm_topic: Option<String>,
    pub drift_check: DriftCheckStatus,
    /// The scope-key layout and its record (`None`: no counters table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<layout::LayoutStatus>,
    /// The two tables and their global-table replicas (none: single-region).
    pub tables: Vec<TableReplicas>,
    /// `--limits FILE`: the overrides compared with the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsDrift>,
    /// What needs an operator; empty when all is well.
    pub attention: Vec<String>,
    /// What the emulator cannot do, which would need attention on AWS
    /// (ministack: alarm actions, mapping metrics); not counted as attention.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub emulator_limits: Vec<String>,
}

impl StatusReport {
    pub fn healthy(&self) -> bool {
        self.attention.is_empty()
    }

    /// Where the stream mapping sends a batch it gives up on, and what a
    /// DLQ1 message then is (stack parameter `FailedBatchRecords`).
    pub fn failed_batches(&self) -> String {
        failed_batches(&self.parameters, &self.outputs)
    }
}

fn failed_batches(parameters: &BTreeMap<String, String>, outputs: &BTreeMap<String, String>) -> String {
    let mode = parameters.get(stack::params::FAILED_BATCH_RECORDS).map(String::as_str);
    match (mode, outputs.get(stack::outputs::FAILED_BATCH_BUCKET)) {
        (Some(stack::failed_batches::PAYLOAD), Some(bucket)) => format!(
            "kept with their records in s3://{bucket} (FailedBatchRecords=payload); a dlq1 message names an object, \
                 replayable after the stream's 24 h"
        ),
        (Some(stack::failed_batches::POINTER), _) => "pointers to stream ranges in dlq1 (FailedBatchRecords=pointer); \
                 a range is replayable only while the stream keeps it (24 h)"
            .to_owned(),
        (None, _) => "pointers to stream ranges in dlq1 (a stack from before FailedBatchRecords)".to_owned(),
        (Some(other), _) => format!("FailedBatchRecords={other}"),
    }
}

/// One event source mapping and its key settings (the fields of
/// [`MappingConfig`], flattened into the report and readable through
/// `Deref`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct MappingStatus {
    pub name: String,
    #[serde(flatten)]
    pub config: MappingConfig,
    /// Disabled in the emulator because the local event-source runner plays
    /// it (`esm-runner` takes SQS mappings over from fakecloud's own poller).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub played_by_local_runner: bool,
    /// The local runner that plays it (an emulator) is not running, or
    /// cannot invoke the handlers: its heartbeat says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_problem: Option<String>,
    /// Its function carries the local runner's heartbeat (fresh or not).
    #[serde(skip)]
    pub runner_heartbeat: bool,
    /// Why the mapping could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl MappingStatus {
    /// Whether the mapping reads a DynamoDB stream (not a queue).
    pub fn is_stream(&self) -> bool {
        self.event_source_arn
            .as_deref()
            .is_some_and(|a| a.contains(":dynamodb:") && a.contains("/stream/"))
    }
}

impl std::ops::Deref for MappingStatus {
    type Target = MappingConfig;

    fn deref(&self) -> &MappingConfig {
        &self.config
    }
}

/// A queue's approximate depth.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueueStatus {
    pub name: String,
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visible: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The api function's URL. On the embedded emulator nothing answers at
/// the deployed URL; the local runner serves the function on loopback
/// instead, without IAM auth, and tags the function with that URL.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ApiStatus {
    pub function_name: String,
    /// The deployed function URL (the stack output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The deployed `AuthType`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_type: Option<String>,
    /// `--target local`: where the local runner serves the function.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_url: Option<String>,
    /// Whether `local_url` accepts connections now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_answering: Option<bool>,
    /// `false` at `local_url`: requests are not signed or checked there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_iam_auth: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct AlarmStatus {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the alarm sends its `ALARM` notifications.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

const MAPPINGS: [(&str, &str); 2] = [
    ("stream -> stream counter", stack::outputs::STREAM_MAPPING_ID),
    ("dlq1 -> reprocessor", stack::outputs::DLQ1_MAPPING_ID),
];
const QUEUES: [(&str, &str); 2] = [("dlq1", stack::outputs::DLQ1_URL), ("dlq2", stack::outputs::DLQ2_URL)];
/// The CloudFormation type whose physical ids are the alarm names.
const ALARM_TYPE: &str = "AWS::CloudWatch::Alarm";
/// The tag the local runner puts on a function whose URL it serves
/// (`esm_runner::function_url::LOCAL_URL_TAG`), valued with the local URL.
const LOCAL_URL_TAG: &str = "esm-runner:local-url";

/// `status --limits FILE`: the overrides compared with the limits file
/// (one Scan, the plan without the usage reads; the comparison is the
/// core's, the scheduled drift check's too). An override changed outside
/// the file, or a scope under a prefix entry with no override yet, is an
/// attention item; a failed read is reported, not raised, so the rest of
/// `status` still prints.
async fn limits_drift(ctx: &Context<'_>, path: &Path, file: &LimitsFile) -> LimitsDrift {
    let name = path.display().to_string();
    let planned = async {
        let limits = super::limits::table::Limits::open(ctx).await?;
        super::limits::plan::read(&limits, file).await
    };
    match planned.await {
        Ok(plan) => {
            let changes: Vec<_> = plan.changes.into_iter().map(|p| p.change).collect();
            LimitsDrift::of(&name, &changes, &plan.default_limit)
        }
        Err(e) => LimitsDrift::failed(&name, e.to_string()),
    }
}

/// `limits`: `--limits FILE`, read and checked.
pub async fn run(ctx: &Context<'_>, limits: Option<(&Path, &LimitsFile)>) -> Result<StatusReport> {
    let cfn = &ctx.clients.cloudformation;
    ctx.ui.step(format!("reading stack {}", ctx.config.stack_name));
    let stack = cfn::describe(cfn, &ctx.config.stack_name)
        .await?
        .ok_or_else(|| ctx.not_found())?;

    ctx.ui.step("reading event source mappings, queues and alarms");
    let ministack = on_ministack(ctx);
    let mappings = mappings(ctx, &stack.outputs, ministack).await;
    let mut queues = Vec::new();
    for (name, output) in QUEUES {
        let url = stack.outputs.get(output).cloned().unwrap_or_default();
        queues.push(queue(ctx, name, url, output).await);
    }
    let names = alarm_names(ctx, &stack.id).await?;
    let alarms = alarms(ctx, &names).await?;
    let api = match stack.outputs.get(stack::outputs::API_FUNCTION) {
        Some(function) => Some(api(ctx, function, stack.outputs.get(stack::outputs::API_FUNCTION_URL)).await),
        None => None,
    };
    let alarm_topic = stack.outputs.get(stack::outputs::ALARM_TOPIC_ARN).cloned();

    let mut tables = replicas::read(&ctx.clients.dynamodb, &stack.outputs).await;
    replicas::read_contributor_insights(&ctx.clients.dynamodb, &mut tables).await;
    let mut drift_check = super::drift_check::read(ctx, &stack).await;
    drift_check.replicated_tables = tables
        .iter()
        .filter(|t| t.replicated())
        .map(|t| t.table.clone())
        .collect();
    let mut attention = attention(&stack.status, &mappings, &queues, &alarms);
    let mut emulator_limits = Vec::new();
    if ministack {
        let (limits, rest): (Vec<String>, Vec<String>) =
            attention.into_iter().partition(|item| is_ministack_limit(item));
        attention = rest;
        emulator_limits = ministack_limits(&limits);
    }
    attention.extend(drift_check.attention());
    let layout = layout::read(ctx, &stack).await;
    attention.extend(layout.as_ref().and_then(layout::LayoutStatus::attention));
    attention.extend(replicas::attention(&tables));
    let limits = match limits {
        Some((path, file)) => Some(limits_drift(ctx, path, file).await),
        None => None,
    };
    attention.extend(limits.as_ref().and_then(LimitsDrift::attention));
    Ok(StatusReport {
        location: Location::of(ctx),
        stack_id: stack.id,
        status: stack.status.as_str().to_owned(),
        status_reason: stack.status_reason,
        last_updated: stack.last_updated,
        parameters: stack.parameters,
        outputs: stack.outputs,
        mappings,
        queues,
        alarms,
        api,
        alarm_topic,
        drift_check,
        layout,
        tables,
        limits,
        attention,
        emulator_limits,
    })
}

async fn api(ctx: &Context<'_>, function: &str, url: Option<&String>) -> ApiStatus {
    let mut status = ApiStatus {
        function_name: function.to_owned(),
        url: url.cloned(),
        ..ApiStatus::default()
    };
    let lambda = &ctx.clients.lambda;
    let config = match lambda.get_function_url_config().function_name(function).send().await {
        Ok(config) => config,
        Err(err) => {
            status.problem = Some(error::aws("GetFunctionUrlConfig")(err).to_string());
            return status;
        }
    };
    status.auth_type = Some(config.auth_type().as_str().to_owned());
    // On any emulator the local runner may serve the URL.
    if ctx.clients.endpoint.is_none() || ctx.clients.target == crate::cli::Target::Aws {
        return status;
    }
    status.local_iam_auth = Some(false);
    if let Ok(tags) = lambda.list_tags().resource(config.function_arn()).send().await {
        status.local_url = tags.tags().and_then(|t| t.get(LOCAL_URL_TAG)).cloned();
    }
    if let Some(local) = &status.local_url {
        status.local_answering = Some(answers(local).await);
    }
    status
}

/// Whether the `http://HOST:PORT/...` URL accepts a connection within a second.
async fn answers(url: &str) -> bool {
    let Some(address) = crate::connect::http_authority(url) else {
        return false;
    };
    let connect = tokio::net::TcpStream::connect(address.to_owned());
    matches!(
        tokio::time::timeout(std::time::Duration::from_secs(1), connect).await,
        Ok(Ok(_))
    )
}

/// The names of every alarm of the stack: the physical ids of its
/// `AWS::CloudWatch::Alarm` resources, in logical-id order.
async fn alarm_names(ctx: &Context<'_>, stack_id: &str) -> Result<Vec<String>> {
    let mut names: Vec<(String, String)> = cfn::resources(&ctx.clients.cloudformation, stack_id, ALARM_TYPE)
        .await?
        .iter()
        .filter_map(|r| {
            Some((
                r.logical_resource_id()?.to_owned(),
                r.physical_resource_id()?.to_owned(),
            ))
        })
        .collect();
    names.sort();
    Ok(names.into_iter().map(|(_, name)| name).collect())
}

/// The stack's event source mappings (by its `outputs`), each with what
/// its local runner says on an emulator ([`expect_runner`], `ministack`:
/// whether the stack is on ministack).
async fn mappings(
    ctx: &Context<'_>,
    outputs: &std::collections::BTreeMap<String, String>,
    ministack: bool,
) -> Vec<MappingStatus> {
    let mut mappings = Vec::new();
    for (name, output) in MAPPINGS {
        let Some(uuid) = outputs.get(output) else {
            mappings.push(MappingStatus {
                name: name.to_owned(),
                problem: Some(format!("no {output} in the stack outputs")),
                ..MappingStatus::default()
            });
            continue;
        };
        mappings.push(mapping(ctx, name, uuid).await);
    }
    expect_runner(&mut mappings, ministack);
    mappings
}

async fn mapping(ctx: &Context<'_>, name: &str, uuid: &str) -> MappingStatus {
    let mut status = MappingStatus {
        name: name.to_owned(),
        config: MappingConfig {
            uuid: uuid.to_owned(),
            ..MappingConfig::default()
        },
        ..MappingStatus::default()
    };
    match hybrid_counter_aws::esm::get_mapping(&ctx.clients.lambda, uuid).await {
        Ok(config) => status.config = config,
        Err(err) => status.problem = Some(error::aws("GetEventSourceMapping")(err).to_string()),
    }
    if ctx.clients.target != crate::cli::Target::Aws
        && let Some(function) = &status.function_arn
        && let Ok(tags) = ctx.clients.lambda.list_tags().resource(function).send().await
    {
        let tag = hybrid_counter_aws::esm::takeover_tag(uuid);
        status.played_by_local_runner =
            status.state.as_deref() == Some("Disabled") && tags.tags().is_some_and(|t| t.contains_key(&tag));
        status.runner_problem = runner_problem(tags.tags());
        status.runner_heartbeat = tags.tags().is_some_and(|t| t.contains_key(RUNNER_HEALTH_TAG));
    }
    status
}

/// On an emulator where the kit's runner is expected, a mapping whose
/// function carries no heartbeat needs it: a runner stopped cleanly (its
/// stop removes the heartbeat) or never started. Expected where one of the
/// stack's mappings is disabled and tagged for it (`deploy` took the DLQ1
/// mapping over, or a runner took the mappings over and has not handed
/// them back): such a mapping is played by nobody. And on ministack
/// (`ministack`), where `make deploy` starts it, while no function carries
/// a heartbeat: ministack then plays the handed-back mappings itself,
/// without the kit's failure path, and the local API goes unanswered. A
/// stale heartbeat is already [`runner_problem`]'s. A mapping disabled by
/// the operator (not taken over) is played by no runner: it is its own
/// attention item, not a runner's.
fn expect_runner(mappings: &mut [MappingStatus], ministack: bool) {
    let reason = if mappings.iter().any(|m| m.played_by_local_runner) {
        RUNNER_NOT_RUNNING
    } else if ministack
        && !mappings
            .iter()
            .any(|m| m.runner_heartbeat || m.runner_problem.is_some())
    {
        RUNNER_NOT_RUNNING_ON_MINISTACK
    } else {
        return;
    };
    let played =
        |m: &MappingStatus| m.played_by_local_runner || !matches!(m.state.as_deref(), Some("Disabled" | "Disabling"));
    for m in mappings
        .iter_mut()
        .filter(|m| m.function_arn.is_some() && !m.runner_heartbeat && m.runner_problem.is_none() && played(m))
    {
        m.runner_problem = Some(reason.to_owned());
    }
}

/// What `status` says of the stream mapping's local runner (on an
/// emulator; read as `status` reads it, with the operator's rights): a
/// stale heartbeat, one that cannot invoke the handlers, or none where a
/// runner is expected (stopped, or never started). Not ministack's own
/// playing of handed-back mappings: the stream is still counted there, so
/// `verify` goes on (`status` lists it). Reads every mapping of the stack
/// (one `GetEventSourceMapping` and one `ListTags` each), since whether a
/// runner is expected depends on all of them.
pub async fn stream_runner_problem(
    ctx: &Context<'_>,
    outputs: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    if ctx.clients.target == crate::cli::Target::Aws {
        return None;
    }
    let uuid = outputs.get(stack::outputs::STREAM_MAPPING_ID)?;
    mappings(ctx, outputs, false)
        .await
        .into_iter()
        .find(|m| m.uuid == *uuid)
        .and_then(|m| m.runner_problem)
}

async fn queue(ctx: &Context<'_>, name: &str, url: String, output: &str) -> QueueStatus {
    let mut status = QueueStatus {
        name: name.to_owned(),
        url: url.clone(),
        ..QueueStatus::default()
    };
    if url.is_empty() {
        status.problem = Some(format!("no {output} in the stack outputs"));
        return status;
    }
    match hybrid_counter_aws::sqs::depth(&ctx.clients.sqs, &url).await {
        Ok(depth) => {
            status.visible = Some(depth.visible);
            status.in_flight = Some(depth.in_flight);
            status.delayed = Some(depth.delayed);
        }
        Err(err) => status.problem = Some(error::aws("GetQueueAttributes")(err).to_string()),
    }
    status
}

async fn alarms(ctx: &Context<'_>, names: &[String]) -> Result<Vec<AlarmStatus>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let output = ctx
        .clients
        .cloudwatch
        .describe_alarms()
        .set_alarm_names(Some(names.to_vec()))
        .send()
        .await;
    let found = match output {
        Ok(output) => output.metric_alarms().to_vec(),
        Err(err) => {
            let problem = error::aws("DescribeAlarms")(err).to_string();
            return Ok(names
                .iter()
                .map(|name| AlarmStatus {
                    name: name.clone(),
                    problem: Some(problem.clone()),
                    ..AlarmStatus::default()
                })
                .collect());
        }
    };
    Ok(names
        .iter()
        .map(|name| match found.iter().find(|a| a.alarm_name() == Some(name)) {
            Some(alarm) => AlarmStatus {
                name: name.clone(),
                state: alarm.state_value().map(|s| s.as_str().to_owned()),
                reason: alarm.state_reason().map(str::to_owned),
                actions: alarm.alarm_actions().to_vec(),
                problem: None,
            },
            None => AlarmStatus {
                name: name.clone(),
                problem: Some("alarm not found".to_owned()),
                ..AlarmStatus::default()
            },
        })
        .collect())
}

/// What an operator should act on.
pub fn attention(
    status: &StackStatus,
    mappings: &[MappingStatus],
    queues: &[QueueStatus],
    alarms: &[AlarmStatus],
) -> Vec<String> {
    let mut items = Vec::new();
    if !matches!(status, StackStatus::CreateComplete | StackStatus::UpdateComplete) {
        items.push(format!("stack status is {}", status.as_str()));
    }
    for m in mappings {
        if let Some(problem) = m.problem.as_ref().or(m.runner_problem.as_ref()) {
            items.push(format!("mapping {}: {problem}", m.name));
        } else if let Some(state) = m
            .state
            .as_deref()
            .filter(|s| matches!(*s, "Disabled" | "Disabling") && !m.played_by_local_runner)
        {
            items.push(format!("mapping {} is {state}", m.name));
        } else if m.is_stream() && !m.publishes_event_counts() {
            items.push(format!(
                "mapping {} {NO_EVENT_COUNTS}: the stream-dropped-events alarm cannot fire; redeploy the stack",
                m.name
            ));
        }
    }
    for q in queues {
        if let Some(problem) = &q.problem {
            items.push(format!("queue {}: {problem}", q.name));
        } else if q.name == "dlq2" && q.visible.unwrap_or(0) + q.in_flight.unwrap_or(0) > 0 {
            items.push(format!(
                "dlq2 holds {} message(s): ranges the reprocessor gave up on; fix the cause, then redrive",
                q.visible.unwrap_or(0) + q.in_flight.unwrap_or(0)
            ));
        }
    }
    for a in alarms {
        if let Some(problem) = &a.problem {
            items.push(format!("alarm {}: {problem}", a.name));
        } else if a.state.as_deref() == Some("ALARM") {
            items.push(format!("alarm {} is in ALARM", a.name));
        } else if a.actions.is_empty() {
            items.push(format!("alarm {} {NOTIFIES_NO_ONE}", a.name));
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "local")]
    #[test]
    fn the_local_url_tag_is_the_local_runners() {
        assert_eq!(LOCAL_URL_TAG, esm_runner::function_url::LOCAL_URL_TAG);
    }

    #[test]
    fn the_local_api_line_says_where_and_that_iam_auth_is_off() {
        let mut api = ApiStatus {
            function_name: "hck-api".into(),
            url: Some("https://abc.lambda-url.us-east-1.on.aws/".into()),
            auth_type: Some("AWS_IAM".into()),
            local_url: Some("http://127.0.0.1:9001/".into()),
            local_answering: Some(true),
            local_iam_auth: Some(false),
            problem: None,
        };
        let text = api.to_string();
        assert!(
            text.contains("deployed  https://abc.lambda-url.us-east-1.on.aws/  auth AWS_IAM"),
            "{text}"
        );
        assert!(
            text.contains("local     http://127.0.0.1:9001/  served by the local runner; IAM auth is off locally"),
            "{text}"
        );
        api.local_answering = Some(false);
        assert!(api.to_string().contains("not answering"), "{api}");
        api.local_url = None;
        assert!(api.to_string().contains("not served"), "{api}");
        api.local_iam_auth = None;
        assert!(
            !api.to_string().contains("local "),
            "no local line off the emulator: {api}"
        );
    }

    #[tokio::test]
    async fn only_a_listening_loopback_url_answers() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        assert!(answers(&url).await);
        drop(listener);
        assert!(!answers(&url).await, "a closed port");
        assert!(
            !answers("https://abc.lambda-url.us-east-1.on.aws/").await,
            "not a local URL"
        );
    }

    #[test]
    fn status_says_where_failed_batches_go_in_either_mode() {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        let payload = failed_batches(
            &map(&[("FailedBatchRecords", "payload")]),
            &map(&[("FailedBatchBucketName", "hc-failed-batch-1a2b3c4d")]),
        );
        assert!(
            payload.starts_with("kept with their records in s3://hc-failed-batch-1a2b3c4d"),
            "{payload}"
        );
        let pointer = failed_batches(&map(&[("FailedBatchRecords", "pointer")]), &BTreeMap::new());
        assert!(pointer.starts_with("pointers to stream ranges in dlq1"), "{pointer}");
        let older = failed_batches(&BTreeMap::new(), &BTreeMap::new());
        assert!(older.contains("from before FailedBatchRecords"), "{older}");
    }

    #[test]
    fn a_healthy_stack_needs_nothing() {
        let mappings = [MappingStatus {
            name: "m".into(),
            config: MappingConfig {
                state: Some("Enabled".into()),
                ..MappingConfig::default()
            },
            ..MappingStatus::default()
        }];
        let queues = [QueueStatus {
            name: "dlq2".into(),
            visible: Some(0),
            in_flight: Some(0),
            ..QueueStatus::default()
        }];
        let alarms = [AlarmStatus {
            name: "a".into(),
            state: Some("INSUFFICIENT_DATA".into()),
            actions: vec!["arn:aws:sns:us-east-1:123456789012:hc-alarms".into()],
            ..AlarmStatus::default()
        }];
        assert!(attention(&StackStatus::from("UPDATE_COMPLETE"), &mappings, &queues, &alarms).is_empty());
    }

    #[test]
    fn a_stream_mapping_without_event_counts_needs_attention() {
        let stream = |metrics: Vec<String>| MappingStatus {
            name: "stream -> stream counter".into(),
            config: MappingConfig {
                state: Some("Enabled".into()),
                event_source_arn: Some(
                    "arn:aws:dynamodb:us-east-1:123456789012:table/hc-resources/stream/2026-01-01T00:00:00.000".into(),
                ),
                metrics,
                ..MappingConfig::default()
            },
            ..MappingStatus::default()
        };
        let queue = MappingStatus {
            name: "dlq1 -> reprocessor".into(),
            config: MappingConfig {
                state: Some("Enabled".into()),
                event_source_arn: Some("arn:aws:sqs:us-east-1:123456789012:hc-dlq1".into()),
                ..MappingConfig::default()
            },
            ..MappingStatus::default()
        };
        assert!(
            attention(
                &StackStatus::from("UPDATE_COMPLETE"),
                &[stream(vec!["EventCount".into()]), queue.clone()],
                &[],
                &[]
            )
            .is_empty()
        );
        let items = attention(
            &StackStatus::from("UPDATE_COMPLETE"),
            &[stream(Vec::new()), queue],
            &[],
            &[],
        );
        assert_eq!(items.len(), 1, "{items:?}");
        assert!(
            items[0].starts_with("mapping stream -> stream counter publishes no event counts"),
            "{}",
            items[0]
        );
    }

    #[test]
    fn a_runner_that_died_or_cannot_invoke_needs_attention_with_its_reason() {
        let mapping = MappingStatus {
            name: "stream -> stream counter".into(),
            config: MappingConfig {
                state: Some("Disabled".into()),
                ..MappingConfig::default()
            },
            played_by_local_runner: true,
            runner_problem: Some(
                "the local runner cannot invoke the handlers: the handler binary api is not built".into(),
            ),
            ..MappingStatus::default()
        };
        let items = attention(&StackStatus::from("UPDATE_COMPLETE"), &[mapping], &[], &[]);
        assert_eq!(
            items,
            [
                "mapping stream -> stream counter: the local runner cannot invoke the handlers: the handler binary api \
              is not built"
            ]
        );
    }

    #[test]
    fn a_runner_expected_but_without_a_heartbeat_is_not_running() {
        let with_function = |name: &str, state: &str| MappingStatus {
            name: name.into(),
            config: MappingConfig {
                state: Some(state.into()),
                function_arn: Some(format!("arn:aws:lambda:us-east-1:000000000000:function:{name}")),
                ..MappingConfig::default()
            },
            ..MappingStatus::default()
        };
        let stream = with_function("stream -> stream counter", "Enabled");
        let dlq1 = MappingStatus {
            played_by_local_runner: true,
            ..with_function("dlq1 -> reprocessor", "Disabled")
        };
        // Taken over (deploy on fakecloud), no heartbeat: stopped or never started.
        let mut expected = [stream.clone(), dlq1.clone()];
        expect_runner(&mut expected, false);
        let items = attention(&StackStatus::from("UPDATE_COMPLETE"), &expected, &[], &[]);
        assert_eq!(
            items,
            [
                format!("mapping stream -> stream counter: {RUNNER_NOT_RUNNING}"),
                format!("mapping dlq1 -> reprocessor: {RUNNER_NOT_RUNNING}"),
            ]
        );
        // A running runner's heartbeat: nothing to say.
        let mut running = [
            MappingStatus {
                runner_heartbeat: true,
                ..stream.clone()
            },
            MappingStatus {
                runner_heartbeat: true,
                ..dlq1
            },
        ];
        expect_runner(&mut running, false);
        assert!(attention(&StackStatus::from("UPDATE_COMPLETE"), &running, &[], &[]).is_empty());
        // Nothing taken over (AWS, or LocalStack playing its own mappings): no runner expected.
        let mut own = [stream.clone()];
        expect_runner(&mut own, false);
        assert!(attention(&StackStatus::from("UPDATE_COMPLETE"), &own, &[], &[]).is_empty());
        // On ministack, without any heartbeat (a runner stopped cleanly hands
        // the mappings back): the runner `make deploy` started is not running.
        let mut handed_back = [stream.clone(), with_function("dlq1 -> reprocessor", "Enabled")];
        expect_runner(&mut handed_back, true);
        assert_eq!(
            attention(&StackStatus::from("UPDATE_COMPLETE"), &handed_back, &[], &[]),
            [
                format!("mapping stream -> stream counter: {RUNNER_NOT_RUNNING_ON_MINISTACK}"),
                format!("mapping dlq1 -> reprocessor: {RUNNER_NOT_RUNNING_ON_MINISTACK}"),
            ]
        );
        // With the runner's heartbeat: nothing to say.
        let mut playing = [MappingStatus {
            runner_heartbeat: true,
            ..stream
        }];
        expect_runner(&mut playing, true);
        assert!(attention(&StackStatus::from("UPDATE_COMPLETE"), &playing, &[], &[]).is_empty());
        // A mapping the operator disabled is its own attention item, not the runner's.
        let mut disabled = [with_function("stream -> stream counter", "Disabled")];
        expect_runner(&mut disabled, true);
        assert_eq!(disabled[0].runner_problem, None);
    }

    #[test]
    fn on_ministack_only_missing_alarm_actions_and_mapping_metrics_are_emulator_limits() {
        let alarms = [
            AlarmStatus {
                name: "quiet".into(),
                state: Some("OK".into()),
                ..AlarmStatus::default()
            },
            AlarmStatus {
                name: "firing".into(),
                state: Some("ALARM".into()),
                actions: vec!["arn:topic".into()],
                ..AlarmStatus::default()
            },
        ];
        let stream = MappingStatus {
            name: "stream -> stream counter".into(),
            config: MappingConfig {
                state: Some("Enabled".into()),
                event_source_arn: Some(
                    "arn:aws:dynamodb:us-east-1:123456789012:table/hc-resources/stream/2026-01-01T00:00:00.000".into(),
                ),
                ..MappingConfig::default()
            },
            ..MappingStatus::default()
        };
        let items = attention(&StackStatus::from("UPDATE_COMPLETE"), &[stream], &[], &alarms);
        let (limits, rest): (Vec<_>, Vec<_>) = items.iter().partition(|item| is_ministack_limit(item));
        assert_eq!(limits.len(), 2, "{items:?}");
        assert_eq!(rest, [&"alarm firing is in ALARM".to_owned()]);
        let limits: Vec<String> = limits.into_iter().cloned().collect();
        let said = ministack_limits(&limits);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].contains("1 alarm(s) notify no one here"), "{said:?}");
    }

    #[test]
    fn an_alarm_that_notifies_no_one_needs_attention() {
        let alarms = [AlarmStatus {
            name: "hc-dev-drift".into(),
            state: Some("OK".into()),
            ..AlarmStatus::default()
        }];
        assert_eq!(
            attention(&StackStatus::from("UPDATE_COMPLETE"), &[], &[], &alarms),
            ["alarm hc-dev-drift notifies no one (no alarm actions)"]
        );
    }

    #[test]
    fn failures_dlq2_messages_and_alarms_need_attention() {
        let mappings = [MappingStatus {
            name: "m".into(),
            config: MappingConfig {
                state: Some("Disabled".into()),
                ..MappingConfig::default()
            },
            ..MappingStatus::default()
        }];
        let queues = [
            QueueStatus {
                name: "dlq1".into(),
                visible: Some(3),
                ..QueueStatus::default()
            },
            QueueStatus {
                name: "dlq2".into(),
                visible: Some(2),
                ..QueueStatus::default()
            },
        ];
        let alarms = [AlarmStatus {
            name: "a".into(),
            state: Some("ALARM".into()),
            ..AlarmStatus::default()
        }];
        let items = attention(
            &StackStatus::from("UPDATE_ROLLBACK_COMPLETE"),
            &mappings,
            &queues,
            &alarms,
        );
        assert_eq!(items.len(), 4, "{items:?}");
        assert!(items[0].contains("UPDATE_ROLLBACK_COMPLETE"));
        assert!(items[1].contains("is Disabled"));
        assert!(items[2].starts_with("dlq2 holds 2 message(s)"));
        assert!(items[3].contains("in ALARM"));
    }
}
