//! The commands. `plan` and `deploy` share [`propose`]: package the
//! handlers, work out the parameters, create a change set and turn it into
//! a diff; `plan` then throws the change set away, `deploy` executes it.

pub mod audit;
pub mod deploy;
pub mod destroy;
pub mod load;
pub mod local;
pub mod plan;
pub mod redrive;
pub mod scope;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_cloudformation::types::{ChangeSetType, Parameter, TemplateStage};
use serde::Serialize;
use serde_json::Value;
use stack::template::Template;

use crate::cfn::{self, ChangeSetRequest, ChangeSetState, Readiness, StackInfo, TemplateSource};
use crate::cli::Target;
use crate::compat;
use crate::config::{self, Config, StackInputs};
use crate::connect::{self, Clients};
use crate::diff::{self, Diff};
use crate::error::{self, Error, Result};
use crate::package::{self, Artifact};
use crate::progress::Ui;

/// Second header line of a template adjusted for the emulator.
const EMULATOR_HEADER: &str =
    "# counterctl --target local: Number parameter references inlined for fakecloud (ops-cli/src/compat.rs).\n";

/// How long a change set may take to compute.
const CHANGE_SET_TIMEOUT: Duration = Duration::from_secs(600);

/// What every command works with.
pub struct Context<'a> {
    pub config: &'a Config,
    pub clients: &'a Clients,
    pub ui: &'a Ui,
}

impl Context<'_> {
    fn not_found(&self) -> Error {
        Error::StackNotFound {
            name: self.config.stack_name.clone(),
            target: self.config.target.to_string(),
            region: self.clients.region.clone(),
        }
    }
}

/// A deployed stack, for the commands that work with its resources.
pub struct Deployed {
    pub stack: StackInfo,
}

impl Deployed {
    /// One of the stack's outputs, or an error naming the missing one.
    pub fn output(&self, key: &str) -> Result<String> {
        self.stack
            .outputs
            .get(key)
            .cloned()
            .ok_or_else(|| Error::StackIncomplete {
                name: self.stack.name.clone(),
                missing: key.to_owned(),
            })
    }

    /// The kit's data location: its tables (from the outputs), the default
    /// limit, the eventual-counter shard count and the admission mode (from
    /// the parameters; a stack deployed before `AdmissionMode` existed is
    /// best-effort). What `audit`, `usage`, `limit`, `load` and `redrive
    /// --replay` work against.
    pub fn counter_config(&self) -> Result<hybrid_counter::CounterConfig> {
        let number = |key: &str| {
            self.stack
                .parameters
                .get(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Ok(hybrid_counter::CounterConfig {
            resources_table: self.output(stack::outputs::RESOURCES_TABLE)?,
            counters_table: self.output(stack::outputs::COUNTERS_TABLE)?,
            default_limit: number(stack::params::DEFAULT_LIMIT),
            eventual_shards: number(stack::params::EC_SHARD_COUNT)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(1),
            admission: self.admission()?,
        })
    }

    /// The deployed `AdmissionMode` parameter (the API function's
    /// `ADMISSION_MODE`); best-effort when the stack does not have it.
    pub fn admission(&self) -> Result<hybrid_counter::Admission> {
        match self.stack.parameters.get(stack::params::ADMISSION_MODE) {
            None => Ok(hybrid_counter::Admission::default()),
            Some(value) if value.trim().is_empty() => Ok(hybrid_counter::Admission::default()),
            Some(value) => value.parse().map_err(|_| Error::ParamValue {
                key: stack::params::ADMISSION_MODE.to_owned(),
                value: value.clone(),
                reason: format!(
                    "the deployed stack has an admission mode counterctl does not know; expected one of {}",
                    hybrid_counter::Admission::NAMES.join(", ")
                ),
            }),
        }
    }
}

/// The stack named by the command line, or [`Error::StackNotFound`].
pub async fn deployed(ctx: &Context<'_>) -> Result<Deployed> {
    let stack = cfn::describe(&ctx.clients.cloudformation, &ctx.config.stack_name)
        .await?
        .ok_or_else(|| ctx.not_found())?;
    Ok(Deployed { stack })
}

/// [`Deployed::counter_config`] of the stack named by the command line.
pub async fn counter_config(ctx: &Context<'_>) -> Result<hybrid_counter::CounterConfig> {
    deployed(ctx).await?.counter_config()
}

/// Where a command ran, for the reports.
#[derive(Debug, Clone, Serialize)]
pub struct Location {
    pub stack_name: String,
    pub target: String,
    pub region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

impl Location {
    fn of(ctx: &Context<'_>) -> Self {
        Self {
            stack_name: ctx.config.stack_name.clone(),
            target: ctx.config.target.to_string(),
            region: ctx.clients.region.clone(),
            endpoint: ctx.clients.endpoint.clone(),
        }
    }
}

/// The handler zips' directory: `--artifacts-dir`, else cargo-lambda's
/// output under the target directory (`CARGO_TARGET_DIR` or the
/// workspace's `target/`).
pub fn artifacts_dir(config: &Config, inputs: &StackInputs, workspace: Option<&Path>) -> PathBuf {
    if let Some(dir) = &inputs.artifacts_dir {
        return dir.clone();
    }
    let base = workspace.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let target = match &config.env.cargo_target_dir {
        Some(dir) if dir.is_absolute() => dir.clone(),
        Some(dir) => base.join(dir),
        None => base.join("target"),
    };
    target.join("lambda")
}

/// Finds and hashes the handler zips: the first thing plan and deploy do,
/// before any request (a missing zip is a usage error, exit 2).
pub fn locate_artifacts(config: &Config, inputs: &StackInputs) -> Result<Vec<Artifact>> {
    package::locate(&artifacts_dir(config, inputs, connect::workspace_root().as_deref()))
}

/// The parameters to send and the values they end up with.
#[derive(Debug, Clone, PartialEq)]
pub struct ParameterPlan {
    pub sdk: Vec<Parameter>,
    /// Every template parameter's value after the deploy (defaults included).
    pub effective: BTreeMap<String, String>,
}

/// Decides each template parameter's value: counterctl's own (bucket and
/// code keys) and `--param` overrides first; on an existing stack, the
/// deployed value (`UsePreviousValue`, as `aws cloudformation deploy` does,
/// so a redeploy never silently resets a tuned setting); on a new stack,
/// `NamePrefix` from the stack name, so two stacks never share physical
/// names; otherwise the template default.
pub fn plan_parameters(
    template: &Template,
    overrides: &BTreeMap<String, String>,
    managed: &BTreeMap<String, String>,
    previous: Option<&BTreeMap<String, String>>,
    stack_name: &str,
) -> Result<ParameterPlan> {
    let mut sdk = Vec::new();
    let mut effective = BTreeMap::new();
    for key in template.parameters.keys() {
        let given = managed.get(key).or_else(|| overrides.get(key));
        if let Some(value) = given {
            sdk.push(Parameter::builder().parameter_key(key).parameter_value(value).build());
            effective.insert(key.clone(), value.clone());
        } else if let Some(value) = previous.and_then(|p| p.get(key)) {
            sdk.push(Parameter::builder().parameter_key(key).use_previous_value(true).build());
            effective.insert(key.clone(), value.clone());
        } else if key == stack::params::NAME_PREFIX && previous.is_none() {
            let prefix = name_prefix(stack_name)?;
            sdk.push(Parameter::builder().parameter_key(key).parameter_value(&prefix).build());
            effective.insert(key.clone(), prefix);
        } else if let Some(default) = config::default_value(template, key) {
            effective.insert(key.clone(), default);
        }
    }
    Ok(ParameterPlan { sdk, effective })
}

/// The stack name as a `NamePrefix`: lowercase letters, digits and inner
/// hyphens, at most 40 characters (the template's constraint).
fn name_prefix(stack_name: &str) -> Result<String> {
    let prefix = stack_name.to_ascii_lowercase();
    let valid = (1..=40).contains(&prefix.len())
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && !prefix.ends_with('-')
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(prefix)
    } else {
        Err(Error::ParamValue {
            key: stack::params::NAME_PREFIX.to_owned(),
            value: prefix,
            reason: "the stack name does not fit the resource name prefix (at most 40 characters, not ending \
                     in a hyphen); pass --param NamePrefix=<prefix>"
                .to_owned(),
        })
    }
}

/// A computed change set and everything that went into it.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub before: Option<StackInfo>,
    pub stack_id: String,
    pub change_set_type: &'static str,
    /// The change set, while it exists; `None` once deleted.
    pub change_set_id: Option<String>,
    pub diff: Diff,
    pub no_changes: bool,
    pub no_change_reason: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub artifacts: Vec<Artifact>,
    pub bucket: String,
    pub template_bytes: usize,
    pub template_url: Option<String>,
    /// Number parameters inlined into the body for the emulator.
    pub inlined_parameters: Vec<String>,
}

/// Whether a proposal may write to the artifacts bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packaging {
    /// Hash the zips and look in the bucket, write nothing.
    Inspect,
    /// Create the bucket if needed and upload what is missing.
    Upload,
}

/// Packages `artifacts` (hashed beforehand by [`locate_artifacts`]), creates
/// the change set and computes its diff. On a change set that fails for
/// another reason than "no changes", cleans up and errors.
pub async fn propose(
    ctx: &Context<'_>,
    inputs: &StackInputs,
    mut artifacts: Vec<Artifact>,
    packaging: Packaging,
    purpose: &str,
) -> Result<Proposal> {
    let (config, clients, ui) = (ctx.config, ctx.clients, ctx.ui);
    let cfn = &clients.cloudformation;
    let template = stack::template();
    let yaml = stack::to_yaml(&template);

    ui.step(format!("reading stack {}", config.stack_name));
    let before = cfn::describe(cfn, &config.stack_name).await?;
    let kind = match (cfn::readiness(before.as_ref().map(|s| s.status.as_str())), &before) {
        (Readiness::Create, _) => ChangeSetType::Create,
        (Readiness::Update, _) => ChangeSetType::Update,
        (Readiness::Busy | Readiness::Unusable, None) => ChangeSetType::Create,
        (Readiness::Busy, Some(stack)) => {
            return Err(Error::StackBusy {
                name: config.stack_name.clone(),
                status: stack.status.clone(),
            });
        }
        (Readiness::Unusable, Some(stack)) => {
            return Err(Error::StackUnusable {
                name: config.stack_name.clone(),
                reason: stack
                    .status_reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default(),
                status: stack.status.clone(),
            });
        }
    };
    // A stack left in review by an earlier CREATE change set has no values yet.
    let previous = before
        .as_ref()
        .filter(|_| kind == ChangeSetType::Update)
        .map(|s| &s.parameters);

    let account = clients
        .sts
        .get_caller_identity()
        .send()
        .await
        .map_err(error::aws("GetCallerIdentity"))?
        .account()
        .unwrap_or_default()
        .to_owned();
    let bucket = match &inputs.artifacts_bucket {
        Some(bucket) => bucket.clone(),
        None => package::bucket_name(&config.stack_name, &account, &clients.region)?,
    };
    if packaging == Packaging::Upload {
        ui.step(format!("artifacts bucket {bucket}"));
        if package::ensure_bucket(&clients.s3, &bucket, &clients.region).await? {
            ui.log(format!("created the artifacts bucket {bucket}"));
        }
    }
    match packaging {
        Packaging::Upload => {
            ui.step("uploading changed handler zips");
            package::upload(&clients.s3, &bucket, &mut artifacts).await?;
            for artifact in artifacts.iter().filter(|a| a.state == package::ArtifactState::Uploaded) {
                ui.log(format!(
                    "uploaded {} ({} bytes) to s3://{bucket}/{}",
                    artifact.package, artifact.size, artifact.key
                ));
            }
        }
        Packaging::Inspect => {
            let exists = package::bucket_exists(&clients.s3, &bucket).await?;
            package::check(&clients.s3, &bucket, exists, &mut artifacts).await?;
        }
    }

    let mut managed = BTreeMap::from([(stack::params::ARTIFACTS_BUCKET.to_owned(), bucket.clone())]);
    for artifact in &artifacts {
        managed.insert(artifact.parameter.clone(), artifact.key.clone());
    }
    let parameters = plan_parameters(&template, &inputs.overrides, &managed, previous, &config.stack_name)?;

    // The body that is sent: as generated, or with Number parameters
    // inlined for the embedded emulator (see `compat`).
    let generated: Value = serde_yaml_ng::from_str(&yaml).map_err(|e| Error::Template(e.to_string()))?;
    let (body, sent, inlined) = if config.target == Target::Local {
        let mut tree = generated.clone();
        let inlined = compat::inline_number_parameters(&mut tree, &parameters.effective);
        let rendered = serde_yaml_ng::to_string(&tree).map_err(|e| Error::Template(e.to_string()))?;
        (
            format!("{}{EMULATOR_HEADER}{rendered}", stack::YAML_HEADER),
            tree,
            inlined,
        )
    } else {
        (yaml.clone(), generated.clone(), BTreeSet::new())
    };
    let too_large = body.len() > package::INLINE_TEMPLATE_MAX;
    if too_large && packaging == Packaging::Inspect {
        ui.step(format!("artifacts bucket {bucket}"));
        package::ensure_bucket(&clients.s3, &bucket, &clients.region).await?;
    }
    let template_url = if too_large {
        let key = package::upload_template(&clients.s3, &bucket, &body).await?;
        Some(package::template_url(
            clients.endpoint.as_deref(),
            &bucket,
            &clients.region,
            &key,
        ))
    } else {
        None
    };
    let request = ChangeSetRequest {
        stack_name: config.stack_name.clone(),
        kind: kind.clone(),
        template: template_url
            .clone()
            .map_or_else(|| TemplateSource::Body(body.clone()), TemplateSource::Url),
        parameters: parameters.sdk.clone(),
        description: format!("counterctl {purpose}"),
    };
    ui.step(format!("creating the change set ({})", kind.as_str()));
    let (change_set_id, stack_id) = cfn::create_change_set(cfn, &request).await?;
    let state = cfn::wait_change_set(cfn, &change_set_id, clients.poll, CHANGE_SET_TIMEOUT).await?;

    let mut proposal = Proposal {
        stack_id,
        change_set_type: if kind == ChangeSetType::Create {
            "CREATE"
        } else {
            "UPDATE"
        },
        change_set_id: Some(change_set_id.clone()),
        diff: Diff::default(),
        no_changes: false,
        no_change_reason: None,
        parameters: parameters.effective.clone(),
        artifacts,
        bucket,
        template_bytes: body.len(),
        template_url,
        inlined_parameters: inlined.into_iter().collect(),
        before,
    };
    match state {
        ChangeSetState::NoChanges { reason } => {
            // A failed change set stays listed on the stack until deleted.
            cfn::delete_change_set(cfn, &change_set_id).await?;
            proposal.change_set_id = None;
            proposal.no_changes = true;
            proposal.no_change_reason = Some(reason);
        }
        ChangeSetState::Failed { reason } => {
            let _ = cfn::delete_change_set(cfn, &change_set_id).await;
            if kind == ChangeSetType::Create && proposal.before.is_none() {
                remove_review_stack(ctx, &proposal.stack_id).await;
            }
            return Err(Error::ChangeSetFailed {
                name: config.stack_name.clone(),
                reason,
            });
        }
        ChangeSetState::Ready { changes } => {
            proposal.diff = Diff::from_changes(&changes);
            if let Some(before) = proposal.before.as_ref().filter(|_| kind == ChangeSetType::Update) {
                match deployed_template(cfn, &before.id).await {
                    Ok(old) => {
                        let comparison =
                            diff::compare(&old, &before.parameters, &sent, &parameters.effective, &generated);
                        proposal.diff.enrich(&comparison);
                        if comparison.identical {
                            proposal.no_change_reason =
                                Some("the template and every parameter equal the deployed ones".to_owned());
                        }
                        proposal.no_changes = comparison.identical;
                    }
                    Err(err) => ui.log(format!("note: cannot compare with the deployed template: {err}")),
                }
            }
            if proposal.diff.is_empty() && !proposal.no_changes {
                proposal.no_changes = true;
                proposal.no_change_reason = Some("no resource would change".to_owned());
            }
        }
    }
    Ok(proposal)
}

/// The deployed template as a JSON tree (YAML or JSON body).
async fn deployed_template(cfn: &aws_sdk_cloudformation::Client, stack_id: &str) -> Result<Value> {
    let output = cfn
        .get_template()
        .stack_name(stack_id)
        .template_stage(TemplateStage::Original)
        .send()
        .await
        .map_err(error::aws("GetTemplate"))?;
    let body = output.template_body().unwrap_or_default();
    serde_yaml_ng::from_str(body).map_err(|e| Error::Aws {
        action: "GetTemplate",
        message: format!("the deployed template does not parse: {e}"),
    })
}

/// Deletes the empty `REVIEW_IN_PROGRESS` stack a `CREATE` change set
/// leaves behind once that change set is gone. Best effort: a leftover is
/// harmless (the next deploy creates into it) but clutters listings.
async fn remove_review_stack(ctx: &Context<'_>, stack_id: &str) {
    let cfn = &ctx.clients.cloudformation;
    let in_review =
        matches!(cfn::describe(cfn, stack_id).await, Ok(Some(stack)) if stack.status == "REVIEW_IN_PROGRESS");
    if !in_review {
        return;
    }
    if let Err(err) = cfn.delete_stack().stack_name(stack_id).send().await {
        ctx.ui.log(format!(
            "note: could not delete the empty stack {stack_id} in REVIEW_IN_PROGRESS: {}",
            error::aws("DeleteStack")(err)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn sent(plan: &ParameterPlan, key: &str) -> Option<(Option<String>, Option<bool>)> {
        plan.sdk
            .iter()
            .find(|p| p.parameter_key() == Some(key))
            .map(|p| (p.parameter_value().map(str::to_owned), p.use_previous_value()))
    }

    #[test]
    fn a_new_stack_gets_overrides_managed_values_defaults_and_its_name_as_prefix() {
        let template = stack::template();
        let plan = plan_parameters(
            &template,
            &map(&[("StreamBatchSize", "25")]),
            &map(&[("ArtifactsBucket", "b"), ("ApiCodeKey", "api/x.zip")]),
            None,
            "Team-A",
        )
        .unwrap();
        assert_eq!(sent(&plan, "StreamBatchSize"), Some((Some("25".into()), None)));
        assert_eq!(sent(&plan, "ArtifactsBucket"), Some((Some("b".into()), None)));
        assert_eq!(sent(&plan, "NamePrefix"), Some((Some("team-a".into()), None)));
        // Defaults are left to CloudFormation but known for the comparison.
        assert_eq!(sent(&plan, "DefaultLimit"), None);
        assert_eq!(plan.effective["DefaultLimit"], "100");
        assert_eq!(plan.effective["StreamBatchSize"], "25");
    }

    #[test]
    fn an_existing_stack_keeps_its_deployed_values_unless_overridden() {
        let template = stack::template();
        let previous = map(&[("StreamBatchSize", "25"), ("NamePrefix", "old"), ("DefaultLimit", "7")]);
        let plan = plan_parameters(
            &template,
            &map(&[("DefaultLimit", "9")]),
            &map(&[("ArtifactsBucket", "b")]),
            Some(&previous),
            "hybrid-counter",
        )
        .unwrap();
        assert_eq!(sent(&plan, "StreamBatchSize"), Some((None, Some(true))));
        assert_eq!(sent(&plan, "NamePrefix"), Some((None, Some(true))));
        assert_eq!(sent(&plan, "DefaultLimit"), Some((Some("9".into()), None)));
        assert_eq!(plan.effective["StreamBatchSize"], "25");
        assert_eq!(plan.effective["NamePrefix"], "old");
        // A parameter the deployed stack did not have yet takes its default.
        assert_eq!(sent(&plan, "EcShardCount"), None);
        assert_eq!(plan.effective["EcShardCount"], "1");
    }

    #[test]
    fn a_stack_name_that_cannot_be_a_prefix_asks_for_one() {
        let err = plan_parameters(&stack::template(), &map(&[]), &map(&[]), None, &"a".repeat(41)).unwrap_err();
        assert!(err.to_string().contains("--param NamePrefix="), "{err}");
        let given = plan_parameters(
            &stack::template(),
            &map(&[("NamePrefix", "short")]),
            &map(&[]),
            None,
            &"a".repeat(41),
        )
        .unwrap();
        assert_eq!(given.effective["NamePrefix"], "short");
    }

    #[test]
    fn the_deployed_admission_mode_comes_from_the_stack_parameter() {
        let deployed = |parameters: &[(&str, &str)]| Deployed {
            stack: StackInfo {
                id: "arn:stack".into(),
                name: "hybrid-counter".into(),
                status: "UPDATE_COMPLETE".into(),
                status_reason: None,
                parameters: map(parameters),
                outputs: map(&[
                    (stack::outputs::RESOURCES_TABLE, "res"),
                    (stack::outputs::COUNTERS_TABLE, "cnt"),
                ]),
                last_updated: None,
            },
        };
        let strict = deployed(&[("AdmissionMode", "strict"), ("DefaultLimit", "7")])
            .counter_config()
            .unwrap();
        assert_eq!(strict.admission, hybrid_counter::Admission::Strict);
        assert_eq!(strict.default_limit, Some(7));
        let older = deployed(&[("DefaultLimit", "7")]).counter_config().unwrap();
        assert_eq!(older.admission, hybrid_counter::Admission::BestEffort);
        let err = deployed(&[("AdmissionMode", "exact")]).counter_config().unwrap_err();
        assert!(err.to_string().contains("AdmissionMode"), "{err}");
    }

    #[test]
    fn the_artifacts_dir_defaults_to_cargo_lambdas_output() {
        let argv = [
            "counterctl",
            "--region",
            "",
            "--endpoint-url",
            "",
            "--profile",
            "",
            "status",
        ];
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(argv).unwrap();
        let mut config = Config::from_cli(cli, &|_| None).unwrap();
        let inputs = StackInputs::default();
        assert_eq!(
            artifacts_dir(&config, &inputs, Some(Path::new("/ws"))),
            PathBuf::from("/ws/target/lambda")
        );
        config.env.cargo_target_dir = Some(PathBuf::from("/tmp/t"));
        assert_eq!(
            artifacts_dir(&config, &inputs, Some(Path::new("/ws"))),
            PathBuf::from("/tmp/t/lambda")
        );
        let explicit = StackInputs {
            artifacts_dir: Some(PathBuf::from("/zips")),
            ..StackInputs::default()
        };
        assert_eq!(artifacts_dir(&config, &explicit, None), PathBuf::from("/zips"));
    }
}
