//! The stack's lifecycle, in one folder: [`plan`], `deploy` (this file) and
//! [`destroy`], and the machinery they share: [`proposal`] packages the
//! handlers, decides the [`parameters`] and turns a change set into a
//! [`diff`]; [`package`] hashes and uploads the handler zips; [`cfn`] is the
//! CloudFormation engine (stack status, change sets, stack events);
//! [`scope_keys`] refuses a change of `ScopeKeyShards` or
//! `ResourceKeySpread` on a deployed stack.
//!
//! `counterctl deploy`: package, create the change set, execute it and
//! follow the stack's events to a final status. Idempotent: a deploy with
//! nothing to change (the service fails the change set with "no changes",
//! or, like the emulator, lists changes although the template and every
//! parameter equal the deployed ones) executes nothing and succeeds. A
//! rollback is reported with each failed resource and exits 1. An update of
//! a stack whose tables have global-table replicas is refused before
//! anything is uploaded, unless `--allow-replicas` is given
//! ([`super::replicas::guard`]).
//!
//! On the embedded emulator a deploy also takes the stack's SQS mapping
//! over for the local runner ([`hybrid_counter_aws::esm::take_over`]) as
//! soon as the stack is in place: the emulator's own poller cannot run the
//! function yet still receives the queue's messages, so a message sent
//! before the runner's first look would be lost to it.

pub mod cfn;
pub mod destroy;
pub mod diff;
pub mod package;
pub mod parameters;
pub mod plan;
pub mod proposal;
pub mod scope_keys;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use aws_sdk_cloudformation::types::ChangeSetType;
use hybrid_counter::scope_keys::ScopeKeys;
use serde::Serialize;

use cfn::{Event, FailedResource, Operation, Settled, Watch};
use diff::Diff;
use package::{Artifact, ArtifactState};
use proposal::{Packaging, propose};

use super::{Context, Location};
use crate::config::StackInputs;
use crate::error::{self, Error, Result};

/// How a deploy ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Created,
    Updated,
    /// Nothing to change; nothing was executed. The default, for a report
    /// built before anything was done.
    #[default]
    Unchanged,
    Failed,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct DeployReport {
    #[serde(flatten)]
    pub location: Location,
    pub outcome: Outcome,
    pub stack_id: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    pub change_set_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_change_reason: Option<String>,
    pub seconds: f64,
    pub diff: Diff,
    pub parameters: BTreeMap<String, String>,
    /// The stack's tags (kept from earlier deploys, plus `--tag`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    pub bucket: String,
    pub artifacts: Vec<Artifact>,
    pub events: Vec<Event>,
    pub failures: Vec<FailedResource>,
    pub outputs: BTreeMap<String, String>,
    /// Number parameters inlined into the template for the emulator.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inlined_parameters: Vec<String>,
    /// Mappings disabled in the embedded emulator for the local runner.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taken_over: Vec<String>,
    /// What the operator chose to go ahead despite (`--allow-replicas`),
    /// and what to know about the parameters (as `plan` shows them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Why the layout record or the parameters are not the layout this
    /// deploy checked (a failed write; parameters changed outside
    /// counterctl meanwhile), with the remedy: the deploy fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout_unrecorded: Option<String>,
}

impl DeployReport {
    pub fn succeeded(&self) -> bool {
        self.outcome != Outcome::Failed && self.layout_unrecorded.is_none()
    }
}

pub async fn run(
    ctx: &Context<'_>,
    inputs: &StackInputs,
    artifacts: Vec<Artifact>,
    timeout: Duration,
    allow_replicas: bool,
) -> Result<DeployReport> {
    let started = Instant::now();
    let cfn = &ctx.clients.cloudformation;
    let mut warnings = replicated_tables_guard(ctx, allow_replicas).await?;
    let proposal = propose(ctx, inputs, artifacts, Packaging::Upload, "deploy").await?;
    warnings.extend(proposal.warnings.iter().cloned());
    let mut report = DeployReport {
        location: Location::of(ctx),
        stack_id: proposal.stack_id.clone(),
        status: proposal
            .before
            .as_ref()
            .map(|s| s.status.as_str().to_owned())
            .unwrap_or_default(),
        change_set_type: proposal.change_set_type.as_str().to_owned(),
        no_change_reason: proposal.no_change_reason.clone(),
        diff: proposal.diff.clone(),
        parameters: proposal.parameters.clone(),
        tags: proposal.tags.clone(),
        bucket: proposal.bucket.clone(),
        artifacts: proposal.artifacts.clone(),
        outputs: proposal.before.as_ref().map(|s| s.outputs.clone()).unwrap_or_default(),
        inlined_parameters: proposal.inlined_parameters.clone(),
        warnings,
        ..Default::default()
    };

    let change_set = match (&proposal.change_set_id, proposal.no_changes) {
        (Some(id), false) => id.clone(),
        (id, _) => {
            if let Some(id) = id {
                cfn::delete_change_set(cfn, id).await?;
            }
            ctx.ui.log(format!(
                "no changes: {}",
                proposal.no_change_reason.as_deref().unwrap_or("nothing to deploy")
            ));
            // A stack that predates the layout record gets it here too,
            // checked against the stack as it is now, not as it was read
            // before the change set (an update outside counterctl may have
            // landed since; the change set sent the layout as a value).
            let now = cfn::describe(cfn, &proposal.stack_id).await?;
            record_layout(ctx, now.as_ref(), proposal.layout, &mut report).await;
            report.taken_over = take_over_for_local_runner(ctx, &report.outputs).await?;
            report.seconds = started.elapsed().as_secs_f64();
            return Ok(report);
        }
    };

    ctx.ui.log(format!(
        "Changes to stack {}:\n{}",
        ctx.config.stack_name, proposal.diff
    ));
    if proposal.change_set_type == ChangeSetType::Update {
        // Before anything changes: the layout the functions run under now,
        // recorded for a stack that predates the record, so an execution
        // that fails or is made obsolete by an update outside counterctl
        // still leaves it (checked against the parameters after the
        // deploy, or in the error of an execution refused).
        if let Some(stack) = &proposal.before
            && let Some(Err(e)) = scope_keys::record(ctx, stack, proposal.layout).await
        {
            ctx.ui.log(format!("the layout is not recorded yet: {e}"));
        }
    }
    let since = cfn::newest_event_id(cfn, &proposal.stack_id).await?;
    ctx.ui
        .step(format!("executing change set ({})", proposal.change_set_type.as_str()));
    let executed = cfn
        .execute_change_set()
        .change_set_name(&change_set)
        .client_request_token(cfn::change_set_name(std::time::SystemTime::now()))
        .send()
        .await;
    if let Err(err) = executed {
        // AWS reports a failed execution through the stack status; the
        // emulator executes synchronously and answers the call with the
        // error. Only a stack that actually failed is followed as a failure.
        let now = cfn::describe(cfn, &proposal.stack_id).await?;
        if now.as_ref().map(|s| cfn::deploy_settled(&s.status)) != Some(Settled::Failed) {
            // Refused (a stack busy with, or a change set made obsolete
            // by, an update outside counterctl): say what that update did
            // to the layout, which the record already holds.
            let mut message = error::describe_sdk_error(&err);
            if let Some(why) = now.and_then(|s| scope_keys::unrecorded(Ok(()), &s.parameters, proposal.layout)) {
                message = format!("{message}; meanwhile {why}");
            }
            return Err(Error::Aws {
                action: "ExecuteChangeSet",
                message,
            });
        }
    }

    let watch = Watch {
        cfn,
        stack_id: &proposal.stack_id,
        stack_name: &ctx.config.stack_name,
        poll: ctx.clients.poll,
        timeout,
    };
    let waited = watch.follow(since, Operation::Deploy, ctx.ui).await?;
    let status = waited.final_status();
    let resource_events = waited.events.iter().filter(|e| !e.is_stack_event()).count();
    report.outcome = match (waited.settled, proposal.change_set_type) {
        (Settled::Succeeded, ChangeSetType::Create) => Outcome::Created,
        // Executed, yet no resource moved: the service found nothing to do.
        (Settled::Succeeded, _) if resource_events == 0 => Outcome::Unchanged,
        (Settled::Succeeded, _) => Outcome::Updated,
        _ => Outcome::Failed,
    };
    if report.outcome == Outcome::Unchanged {
        report.no_change_reason = Some("the change set executed without changing any resource".to_owned());
    }
    if report.outcome == Outcome::Failed {
        report.failures = cfn::failures(&waited.events, &status, waited.status_reason.as_deref());
    }
    report.status = status.as_str().to_owned();
    report.status_reason = waited.status_reason;
    report.events = waited.events;
    let deployed = cfn::describe(cfn, &proposal.stack_id).await?;
    report.outputs = deployed.as_ref().map(|s| s.outputs.clone()).unwrap_or_default();
    if report.succeeded() {
        record_layout(ctx, deployed.as_ref(), proposal.layout, &mut report).await;
        report.taken_over = take_over_for_local_runner(ctx, &report.outputs).await?;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Records `approved`, the layout this deploy checked, for `stack` as
/// described after the deploy ([`scope_keys::record`]); a failure, or
/// parameters that give another layout, fail the report.
async fn record_layout(
    ctx: &Context<'_>,
    stack: Option<&cfn::StackInfo>,
    approved: ScopeKeys,
    report: &mut DeployReport,
) {
    let Some(stack) = stack else { return };
    let Some(written) = scope_keys::record(ctx, stack, approved).await else {
        return;
    };
    if let Some(why) = scope_keys::unrecorded(written, &stack.parameters, approved) {
        ctx.ui.log(format!("the layout record is not right: {why}"));
        report.layout_unrecorded = Some(why);
    }
}

/// Refuses to update an existing stack whose tables have replicas unless
/// `allow` (then returns the warnings, also logged); a new stack has no
/// tables to look at.
async fn replicated_tables_guard(ctx: &Context<'_>, allow: bool) -> Result<Vec<String>> {
    let Some(stack) = cfn::describe(&ctx.clients.cloudformation, &ctx.config.stack_name).await? else {
        return Ok(Vec::new());
    };
    ctx.ui.step("checking the tables for global-table replicas");
    let tables = super::replicas::read(&ctx.clients.dynamodb, &stack.outputs).await;
    let warnings = super::replicas::guard(&tables, allow)?;
    for warning in &warnings {
        ctx.ui.log(format!("warning: {warning}"));
    }
    Ok(warnings)
}

/// On the embedded emulator, disables the stack's SQS mapping that the
/// emulator still polls and tags it for the local runner; returns the
/// mappings taken over (none elsewhere, or when already taken over).
async fn take_over_for_local_runner(ctx: &Context<'_>, outputs: &BTreeMap<String, String>) -> Result<Vec<String>> {
    use hybrid_counter_aws::esm;
    if ctx.clients.target != crate::cli::Target::Local {
        return Ok(Vec::new());
    }
    let Some(uuid) = outputs.get(stack::outputs::DLQ1_MAPPING_ID) else {
        return Ok(Vec::new());
    };
    let lambda = &ctx.clients.lambda;
    let mapping = esm::get_mapping(lambda, uuid)
        .await
        .map_err(error::aws("GetEventSourceMapping"))?;
    let (Some(source), Some(function)) = (&mapping.event_source_arn, &mapping.function_arn) else {
        return Ok(Vec::new());
    };
    if !esm::is_queue_source(source) || !esm::is_active_state(mapping.state.as_deref()) {
        return Ok(Vec::new());
    }
    esm::take_over(lambda, uuid, function).await.map_err(|e| match e {
        esm::TakeOverError::Tag(e) => error::aws("TagResource")(e),
        esm::TakeOverError::Disable(e) => error::aws("UpdateEventSourceMapping")(e),
    })?;
    ctx.ui.log(format!(
        "took the DLQ1 mapping {uuid} over for the local runner (the emulator cannot run its function)"
    ));
    Ok(vec![uuid.clone()])
}

impl fmt::Display for DeployReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headline = match self.outcome {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Failed => "DEPLOY FAILED",
        };
        writeln!(
            f,
            "Stack {}: {headline} ({}) in {:.1}s; target {}, region {}",
            self.location.stack_name,
            if self.status.is_empty() { "-" } else { &self.status },
            self.seconds,
            self.location.target,
            self.location.region
        )?;
        if let Some(reason) = &self.no_change_reason {
            writeln!(f, "  no changes: {reason}")?;
        }
        for warning in &self.warnings {
            writeln!(f, "  warning: {warning}")?;
        }
        if let Some(why) = &self.layout_unrecorded {
            writeln!(
                f,
                "  FAILED: the stack is deployed, but its layout record is not right: {why}"
            )?;
        }
        if !self.failures.is_empty() {
            writeln!(f, "Failed resources:")?;
            for failure in &self.failures {
                writeln!(f, "  {failure}")?;
            }
            if self.change_set_type == "CREATE" {
                writeln!(
                    f,
                    "  the creation was rolled back: fix the cause, run `counterctl destroy`, then deploy again"
                )?;
            } else {
                writeln!(
                    f,
                    "  the update was rolled back: the stack runs its previous configuration"
                )?;
            }
        }
        if matches!(self.outcome, Outcome::Created | Outcome::Updated | Outcome::Failed) && !self.diff.is_empty() {
            writeln!(f, "Change set ({}):", self.change_set_type)?;
            write!(f, "{}", self.diff)?;
        }
        let uploaded = self
            .artifacts
            .iter()
            .filter(|a| matches!(a.state, ArtifactState::Uploaded | ArtifactState::Replaced))
            .count();
        if !self.tags.is_empty() {
            let tags: Vec<String> = self.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
            writeln!(f, "Stack tags: {}", tags.join(", "))?;
        }
        writeln!(
            f,
            "Handler zips: {uploaded} uploaded, {} unchanged (bucket {})",
            self.artifacts.len() - uploaded,
            self.bucket
        )?;
        for artifact in self.artifacts.iter().filter(|a| a.state == ArtifactState::Replaced) {
            writeln!(
                f,
                "  {} uploaded again: {}",
                artifact.package,
                artifact.note.as_deref().unwrap_or("not verified")
            )?;
        }
        if !self.outputs.is_empty() {
            crate::commands::write_outputs(f, &self.outputs)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_cloudformation::operation::describe_stacks::DescribeStacksOutput;
    use aws_sdk_cloudformation::types::{Output, Stack, StackStatus};
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
    use aws_sdk_dynamodb::types::{ReplicaDescription, TableDescription};
    use aws_smithy_mocks::{Rule, RuleMode, mock};
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;
    use crate::config::Config;
    use crate::connect::Clients;
    use crate::progress::Ui;

    /// The deployed stack `hybrid-counter`, naming its two tables.
    fn deployed() -> Rule {
        mock!(aws_sdk_cloudformation::Client::describe_stacks).then_output(|| {
            let output = |key: &str, value: &str| Output::builder().output_key(key).output_value(value).build();
            DescribeStacksOutput::builder()
                .stacks(
                    Stack::builder()
                        .stack_id("arn:stack")
                        .stack_name("hybrid-counter")
                        .stack_status(StackStatus::UpdateComplete)
                        .outputs(output(stack::outputs::RESOURCES_TABLE, "hc-resources"))
                        .outputs(output(stack::outputs::COUNTERS_TABLE, "hc-counters"))
                        .build(),
                )
                .build()
        })
    }

    /// The deployed stack `hybrid-counter` with its scopes over `keys`
    /// partition keys (`None`: deployed before `ScopeKeyShards` existed).
    fn deployed_with_keys(keys: Option<&'static str>) -> Rule {
        mock!(aws_sdk_cloudformation::Client::describe_stacks).then_output(move || {
            let output = |key: &str, value: &str| Output::builder().output_key(key).output_value(value).build();
            let mut stack = Stack::builder()
                .stack_id("arn:stack")
                .stack_name("hybrid-counter")
                .stack_status(StackStatus::UpdateComplete)
                .outputs(output(stack::outputs::RESOURCES_TABLE, "hc-resources"))
                .outputs(output(stack::outputs::COUNTERS_TABLE, "hc-counters"));
            if let Some(keys) = keys {
                stack = stack.parameters(
                    aws_sdk_cloudformation::types::Parameter::builder()
                        .parameter_key(stack::params::SCOPE_KEY_SHARDS)
                        .parameter_value(keys)
                        .build(),
                );
            }
            DescribeStacksOutput::builder().stacks(stack.build()).build()
        })
    }

    fn ctx_parts(verb: &str, extra: &[&str]) -> Config {
        let mut argv = vec!["counterctl", "--target", "aws", "--region", "us-east-1", verb];
        argv.extend(extra);
        Config::from_cli(Cli::try_parse_from(argv).unwrap(), &|_| None).unwrap()
    }

    #[tokio::test]
    async fn deploy_and_plan_refuse_to_change_scope_keys_on_a_deployed_stack_before_any_change_set() {
        for verb in ["deploy", "plan"] {
            let config = ctx_parts(verb, &["--param", "ScopeKeyShards=8"]);
            let inputs = match &config.command {
                crate::config::CommandConfig::Deploy { inputs, .. } | crate::config::CommandConfig::Plan(inputs) => {
                    inputs
                }
                _ => panic!("deploy or plan expected"),
            };
            // The STS and S3 clients answer nothing and CloudFormation only
            // DescribeStacks: anything past the refusal fails otherwise.
            let mut dynamodb = Vec::new();
            if verb == "deploy" {
                dynamodb.extend([tables(&[]), tables(&[])]);
            }
            // No layout record yet: the deployed parameters decide.
            dynamodb.push(
                aws_smithy_mocks::mock!(aws_sdk_dynamodb::Client::get_item)
                    .then_output(|| aws_sdk_dynamodb::operation::get_item::GetItemOutput::builder().build()),
            );
            let clients = mocked_clients(
                &[deployed_with_keys(Some("1")), deployed_with_keys(Some("1"))],
                &dynamodb,
            );
            let ui = Ui::quiet();
            let ctx = Context {
                config: &config,
                clients: &clients,
                ui: &ui,
            };
            let err = if verb == "deploy" {
                run(&ctx, inputs, Vec::new(), Duration::from_secs(1), false)
                    .await
                    .unwrap_err()
            } else {
                plan::run(&ctx, inputs, Vec::new()).await.unwrap_err()
            };
            assert!(
                matches!(err, crate::error::Error::ScopeKeysChange { from: 1, to: 8, .. }),
                "{verb}: {err}"
            );
            let message = err.to_string();
            for why in [
                "partition key",
                "hidden",
                "rolls the change out",
                "empty table",
                "no migration",
                "new stack",
            ] {
                assert!(message.contains(why), "{verb}: {why:?} not in {message}");
            }
            assert_eq!(err.exit_code(), crate::exit::USAGE, "{verb}");
        }
    }

    /// Review 1: an empty table is no exception (old and new instances
    /// admit one scope under two layouts during Lambda's rollout).
    #[test]
    fn scope_keys_are_fixed_once_a_stack_exists() {
        let stack = |keys: Option<&str>| cfn::StackInfo {
            id: "arn:stack".into(),
            name: "hybrid-counter".into(),
            status: StackStatus::UpdateComplete,
            status_reason: None,
            parameters: keys
                .map(|k| BTreeMap::from([(stack::params::SCOPE_KEY_SHARDS.to_owned(), k.to_owned())]))
                .unwrap_or_default(),
            outputs: BTreeMap::new(),
            tags: BTreeMap::new(),
            last_updated: None,
            description: None,
        };
        let to = |n: &str| BTreeMap::from([(stack::params::SCOPE_KEY_SHARDS.to_owned(), n.to_owned())]);
        // No change: given equal, not given, or 1 on a stack that predates
        // the parameter.
        for (deployed, given) in [(Some("8"), to("8")), (Some("8"), BTreeMap::new()), (None, to("1"))] {
            scope_keys::guard(&stack(deployed), &given, None).unwrap();
        }
        // Any change, whichever way.
        for (deployed, given, from, into) in [(Some("1"), "8", 1, 8), (Some("8"), "1", 8, 1), (None, "2", 1, 2)] {
            let err = scope_keys::guard(&stack(deployed), &to(given), None).unwrap_err();
            assert!(
                matches!(err, crate::error::Error::ScopeKeysChange { from: f, to: t, .. } if (f, t) == (from, into)),
                "{err}"
            );
        }
    }

    /// `DescribeTable` of one table (a rule answers one request), with
    /// replicas in `regions`.
    fn tables(regions: &'static [&'static str]) -> Rule {
        mock!(aws_sdk_dynamodb::Client::describe_table).then_output(move || {
            let mut table = TableDescription::builder().table_name("t");
            for region in regions {
                table = table.replicas(ReplicaDescription::builder().region_name(*region).build());
            }
            DescribeTableOutput::builder().table(table.build()).build()
        })
    }

    /// Clients whose CloudFormation and DynamoDB answer `cfn` and `dynamodb`;
    /// the others answer nothing (a call would fail the test).
    fn mocked_clients(cfn: &[Rule], dynamodb: &[Rule]) -> Clients {
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .build();
        Clients {
            cloudformation: aws_smithy_mocks::mock_client!(aws_sdk_cloudformation, RuleMode::Sequential, cfn),
            s3: aws_smithy_mocks::mock_client!(aws_sdk_s3, RuleMode::Sequential, &[] as &[Rule]),
            lambda: aws_sdk_lambda::Client::new(&sdk),
            sqs: aws_smithy_mocks::mock_client!(aws_sdk_sqs, RuleMode::Sequential, &[] as &[Rule]),
            cloudwatch: aws_sdk_cloudwatch::Client::new(&sdk),
            sts: aws_sdk_sts::Client::new(&sdk),
            dynamodb: aws_smithy_mocks::mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, dynamodb),
            dynamodbstreams: aws_sdk_dynamodbstreams::Client::new(&sdk),
            region: "us-east-1".into(),
            endpoint: None,
            target: crate::cli::Target::Aws,
            poll: Duration::from_millis(1),
        }
    }

    fn deploy_config(extra: &[&str]) -> Config {
        let mut argv = vec!["counterctl", "--target", "aws", "--region", "us-east-1", "deploy"];
        argv.extend(extra);
        Config::from_cli(Cli::try_parse_from(argv).unwrap(), &|_| None).unwrap()
    }

    #[tokio::test]
    async fn an_update_of_a_stack_whose_tables_have_replicas_is_refused_before_anything_is_sent() {
        let config = deploy_config(&[]);
        let crate::config::CommandConfig::Deploy {
            inputs, allow_replicas, ..
        } = &config.command
        else {
            panic!("deploy expected")
        };
        let clients = mocked_clients(
            &[deployed()],
            &[tables(&["us-east-1", "eu-west-1"]), tables(&["us-east-1", "eu-west-1"])],
        );
        let ui = Ui::quiet();
        let ctx = Context {
            config: &config,
            clients: &clients,
            ui: &ui,
        };
        // The S3, SQS and STS clients answer nothing: packaging would fail
        // with another error than the refusal.
        let err = run(&ctx, inputs, Vec::new(), Duration::from_secs(1), *allow_replicas)
            .await
            .unwrap_err();
        assert!(matches!(err, crate::error::Error::ReplicatedTables { .. }), "{err}");
        assert!(err.to_string().contains("us-east-1, eu-west-1"), "{err}");
    }

    #[tokio::test]
    async fn allow_replicas_lets_the_update_go_ahead_with_a_warning_per_table() {
        let config = deploy_config(&["--allow-replicas"]);
        let clients = mocked_clients(&[deployed()], &[tables(&["eu-west-1"]), tables(&["eu-west-1"])]);
        let ui = Ui::quiet();
        let ctx = Context {
            config: &config,
            clients: &clients,
            ui: &ui,
        };
        let warnings = replicated_tables_guard(&ctx, true).await.unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings.iter().all(|w| w.contains("--allow-replicas")), "{warnings:?}");
    }

    #[tokio::test]
    async fn single_region_tables_and_a_new_stack_pass_without_warnings() {
        let config = deploy_config(&[]);
        let ui = Ui::quiet();
        let clients = mocked_clients(&[deployed()], &[tables(&[]), tables(&[])]);
        let ctx = Context {
            config: &config,
            clients: &clients,
            ui: &ui,
        };
        assert!(replicated_tables_guard(&ctx, false).await.unwrap().is_empty());

        let missing = mock!(aws_sdk_cloudformation::Client::describe_stacks).then_http_response(|| {
            aws_smithy_runtime_api::http::Response::new(
                aws_smithy_runtime_api::http::StatusCode::try_from(400).unwrap(),
                aws_smithy_types::body::SdkBody::from(
                    "<ErrorResponse><Error><Type>Sender</Type><Code>ValidationError</Code>\
                     <Message>Stack with id hybrid-counter does not exist</Message></Error>\
                     <RequestId>r</RequestId></ErrorResponse>",
                ),
            )
        });
        // No DescribeTable rule: a new stack's tables are not looked at.
        let clients = mocked_clients(&[missing], &[]);
        let ctx = Context {
            config: &config,
            clients: &clients,
            ui: &ui,
        };
        assert!(replicated_tables_guard(&ctx, false).await.unwrap().is_empty());
    }
}
