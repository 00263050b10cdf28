//! What `plan` and `deploy` share, [`propose`]: package the handlers, work
//! out the parameters, create a change set and turn it into a diff; `plan`
//! then throws the change set away, `deploy` executes it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_cloudformation::types::{ChangeSetType, StackStatus, TemplateStage};
use hybrid_counter::scope_keys::ScopeKeys;
use serde_json::Value;

use super::cfn::{self, ChangeSetRequest, ChangeSetState, Readiness, StackInfo, TemplateSource};

use super::diff::{self, Diff};
use super::package::{self, Artifact};
use super::parameters::{emulator_role_assumer, plan_parameters};
use crate::cli::Target;
use crate::commands::Context;
use crate::config::StackInputs;
use crate::error::{self, Error, Result};

/// Second header line of a template adjusted for the emulator.
const EMULATOR_HEADER: &str = "# counterctl --target local: Number parameter references inlined for fakecloud \
                               (aws/src/emulator/template_numbers.rs).\n";

/// How long a change set may take to compute.
const CHANGE_SET_TIMEOUT: Duration = Duration::from_secs(600);

/// A computed change set and everything that went into it.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub before: Option<StackInfo>,
    pub stack_id: String,
    pub change_set_type: ChangeSetType,
    /// The change set, while it exists; `None` once deleted.
    pub change_set_id: Option<String>,
    pub diff: Diff,
    pub no_changes: bool,
    pub no_change_reason: Option<String>,
    pub parameters: BTreeMap<String, String>,
    /// The stack's tags after the deploy: the deployed ones with `--tag`
    /// added or changed.
    pub tags: BTreeMap<String, String>,
    /// The tags that `--tag` adds or changes.
    pub changed_tags: BTreeMap<String, String>,
    pub artifacts: Vec<Artifact>,
    pub bucket: String,
    pub template_bytes: usize,
    pub template_url: Option<String>,
    /// Number parameters inlined into the body for the emulator.
    pub inlined_parameters: Vec<String>,
    /// The scope-key layout the parameters give after the deploy, as the
    /// guard checked it: what the deploy records.
    pub layout: ScopeKeys,
    /// What the operator should know before applying (also logged).
    pub warnings: Vec<String>,
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
    let mut before = cfn::describe(cfn, &config.stack_name).await?;
    let updating = before
        .as_ref()
        .filter(|s| cfn::readiness(Some(&s.status)) == Readiness::Update);
    if let Some(stack) = updating {
        // Before anything is uploaded or created: the keys of the data.
        let recorded = super::scope_keys::recorded(ctx, stack).await?;
        super::scope_keys::guard(stack, &inputs.overrides, recorded)?;
    }
    // Every check that can refuse the deploy comes before the one step
    // that deletes anything (replacing a failed create).
    let account = clients
        .sts
        .get_caller_identity()
        .send()
        .await
        .map_err(error::aws("GetCallerIdentity"))?
        .account()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| Error::Aws {
            action: "GetCallerIdentity",
            message: "the caller's account is unknown: the artifacts bucket's expected owner cannot be checked"
                .to_owned(),
        })?
        .to_owned();
    if let Some(role) = &inputs.role_arn {
        // CloudFormation takes a service role of the stack's own account.
        crate::config::validate_role_arn(role, &account)?;
    }
    crate::config::check_operator_account(&inputs.overrides, &account)?;
    if let Some(stack) = updating {
        super::parameters::check_previous_operator(&stack.parameters, &inputs.overrides)?;
    }
    // Only deploy replaces a failed create; plan reports it (below).
    let failed_create = before
        .as_ref()
        .filter(|s| cfn::readiness(Some(&s.status)) == Readiness::FailedCreate);
    if let Some(stack) = failed_create.filter(|_| packaging == Packaging::Upload) {
        replaceable(stack)?;
        remove_failed_create(ctx, stack).await?;
        before = None;
    }
    let kind = match (cfn::readiness(before.as_ref().map(|s| &s.status)), &before) {
        (Readiness::Create, _) => ChangeSetType::Create,
        (Readiness::Update, _) => ChangeSetType::Update,
        // `plan` on a failed create, which only `deploy` replaces.
        (Readiness::FailedCreate, _) => {
            return Err(Error::FailedCreate {
                name: config.stack_name.clone(),
            });
        }
        (Readiness::Busy | Readiness::Unusable, None) => ChangeSetType::Create,
        (Readiness::Busy, Some(stack)) => {
            return Err(Error::StackBusy {
                name: config.stack_name.clone(),
                status: stack.status.as_str().to_owned(),
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
                status: stack.status.as_str().to_owned(),
            });
        }
    };
    // A stack left in review by an earlier CREATE change set has no values yet.
    let previous = before
        .as_ref()
        .filter(|_| kind == ChangeSetType::Update)
        .map(|s| &s.parameters);

    let bucket = match &inputs.artifacts_bucket {
        Some(bucket) => bucket.clone(),
        None => package::bucket_name(&config.stack_name, &account, &clients.region)?,
    };
    if packaging == Packaging::Upload {
        ui.step(format!("artifacts bucket {bucket}"));
        if package::ensure_bucket(&clients.s3, &bucket, &account, &clients.region).await? {
            ui.log(format!("created the artifacts bucket {bucket}"));
        }
    }
    match packaging {
        Packaging::Upload => {
            ui.step("uploading changed handler zips");
            package::upload(&clients.s3, &bucket, &account, &mut artifacts).await?;
            for artifact in &artifacts {
                let again = match artifact.state {
                    package::ArtifactState::Uploaded => String::new(),
                    package::ArtifactState::Replaced => {
                        format!(" again: {}", artifact.note.as_deref().unwrap_or("not verified"))
                    }
                    _ => continue,
                };
                ui.log(format!(
                    "uploaded {} ({} bytes) to s3://{bucket}/{}{again}",
                    artifact.package, artifact.size, artifact.key
                ));
            }
        }
        Packaging::Inspect => {
            let exists = package::bucket_exists(&clients.s3, &bucket, &account).await?;
            package::check(&clients.s3, &bucket, &account, exists, &mut artifacts).await?;
        }
    }

    let mut managed = BTreeMap::from([
        (stack::params::ARTIFACTS_BUCKET.to_owned(), bucket.clone()),
        (
            stack::params::EMULATOR_ROLE_ASSUMER.to_owned(),
            emulator_role_assumer(config.target, &account),
        ),
    ]);
    for artifact in &artifacts {
        managed.insert(artifact.parameter.clone(), artifact.key.clone());
    }
    let parameters = plan_parameters(&template, &inputs.overrides, &managed, previous, &config.stack_name)?;
    let layout = super::scope_keys::scope_keys_param(&parameters.effective)?;
    let warnings: Vec<String> = super::parameters::scope_path_upgrade_warning(previous, &inputs.overrides)
        .into_iter()
        .chain(super::scope_keys::ec_shard_advice(&parameters.effective))
        .collect();
    for warning in &warnings {
        ui.log(format!("warning: {warning}"));
    }

    // The body that is sent: as generated, or with Number parameters
    // inlined for the embedded emulator (see `hybrid_counter_aws::emulator::template_numbers`).
    let generated: Value = serde_yaml_ng::from_str(&yaml).map_err(Error::Template)?;
    let (body, sent, inlined) = if config.target == Target::Local {
        let mut tree = generated.clone();
        let inlined =
            hybrid_counter_aws::emulator::template_numbers::inline_number_parameters(&mut tree, &parameters.effective);
        let rendered = serde_yaml_ng::to_string(&tree).map_err(Error::Template)?;
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
        package::ensure_bucket(&clients.s3, &bucket, &account, &clients.region).await?;
    }
    let template_url = if too_large {
        let key = package::upload_template(&clients.s3, &bucket, &account, &body).await?;
        Some(package::template_url(
            clients.endpoint.as_deref(),
            &bucket,
            &clients.region,
            &key,
        ))
    } else {
        None
    };
    let (tags, changed_tags) = effective_tags(before.as_ref().map(|s| &s.tags), &inputs.tags);
    let request = ChangeSetRequest {
        stack_name: config.stack_name.clone(),
        kind: kind.clone(),
        template: template_url
            .clone()
            .map_or_else(|| TemplateSource::Body(body.clone()), TemplateSource::Url),
        parameters: parameters.sdk.clone(),
        tags: tags.clone(),
        description: format!("counterctl {purpose}"),
        role_arn: inputs.role_arn.clone(),
    };
    ui.step(format!("creating the change set ({})", kind.as_str()));
    let (change_set_id, stack_id) = cfn::create_change_set(cfn, &request).await?;
    let state = cfn::wait_change_set(cfn, &change_set_id, clients.poll, CHANGE_SET_TIMEOUT).await?;

    let mut proposal = Proposal {
        stack_id,
        change_set_type: kind.clone(),
        change_set_id: Some(change_set_id.clone()),
        diff: Diff::default(),
        no_changes: false,
        no_change_reason: None,
        parameters: parameters.effective.clone(),
        tags,
        changed_tags,
        artifacts,
        bucket,
        template_bytes: body.len(),
        template_url,
        inlined_parameters: inlined.into_iter().collect(),
        layout,
        warnings,
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
                // The stack as it is now, not as read before the change set:
                // an update made outside counterctl since then is a change
                // this change set undoes (the layout is sent as a value).
                let now = cfn::describe(cfn, &before.id).await?;
                let deployed = now.as_ref().map_or(&before.parameters, |s| &s.parameters);
                match deployed_template(cfn, &before.id).await {
                    Ok(old) => {
                        let comparison = diff::compare(&old, deployed, &sent, &parameters.effective, &generated);
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
            if !proposal.changed_tags.is_empty() {
                // New tags change the stack (and every tagged resource)
                // even when the template and parameters do not.
                proposal.no_changes = false;
                proposal.no_change_reason = None;
            }
            if proposal.diff.is_empty() && !proposal.no_changes && proposal.changed_tags.is_empty() {
                proposal.no_changes = true;
                proposal.no_change_reason = Some("no resource would change".to_owned());
            }
        }
    }
    Ok(proposal)
}

/// The tags a deploy gives the stack, and which of them `given` adds or
/// changes: the deployed tags are kept, so a later deploy without `--tag`
/// (or with other tags) removes none.
pub fn effective_tags(
    deployed: Option<&BTreeMap<String, String>>,
    given: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut tags = deployed.cloned().unwrap_or_default();
    let changed: BTreeMap<String, String> = given
        .iter()
        .filter(|(key, value)| tags.get(*key) != Some(*value))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    tags.extend(changed.clone());
    (tags, changed)
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

/// Whether deploy may delete `stack`, a failed first create, to create it
/// again: only if it is the kit's ([`super::destroy::kit_stack`], the guard
/// `destroy` applies), never a stranger's stack that shares the name.
fn replaceable(stack: &StackInfo) -> Result<()> {
    super::destroy::kit_stack(stack).map_err(|why| Error::NotTheKit {
        name: stack.name.clone(),
        why,
    })
}

/// Deletes a stack whose first create rolled back (`ROLLBACK_COMPLETE`),
/// so the deploy can create it again without a manual step. CloudFormation
/// can only delete such a stack ("Troubleshooting CloudFormation":
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/troubleshooting.html>),
/// and the rollback already removed what the create made, the tables
/// included (`DeletionPolicy: RetainExceptOnCreate`), so nothing is lost.
/// Only after [`replaceable`] allowed it (its one caller, `propose`, checks).
async fn remove_failed_create(ctx: &Context<'_>, stack: &StackInfo) -> Result<()> {
    replaceable(stack)?;
    ctx.ui.log(format!(
        "stack {} is ROLLBACK_COMPLETE (its first create failed{}): deleting it to create it again",
        stack.name,
        stack
            .status_reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    ));
    let cfn = &ctx.clients.cloudformation;
    // What the failed create made and its rollback did not delete (an
    // emulator's): new and empty, as AWS's rollback would have deleted it.
    let left = cfn::tables_left(cfn, &stack.id).await?;
    let waited = cfn::delete_stack(
        cfn,
        &stack.id,
        &stack.name,
        ctx.clients.poll,
        FAILED_CREATE_DELETE_TIMEOUT,
        ctx.ui,
    )
    .await?;
    if waited.settled == cfn::Settled::Succeeded {
        for table in left {
            ctx.ui.log(format!("deleting table {table}, made by the failed create"));
            super::destroy::delete_table(ctx, &table, FAILED_CREATE_DELETE_TIMEOUT).await?;
        }
        Ok(())
    } else {
        Err(Error::StackUnusable {
            name: stack.name.clone(),
            status: waited.status.map(|s| s.as_str().to_owned()).unwrap_or_default(),
            reason: waited.status_reason.map(|r| format!(" ({r})")).unwrap_or_default(),
        })
    }
}

/// How long deleting a rolled-back, empty stack may take.
const FAILED_CREATE_DELETE_TIMEOUT: Duration = Duration::from_secs(600);

/// Deletes the empty `REVIEW_IN_PROGRESS` stack a `CREATE` change set
/// leaves behind once that change set is gone. Best effort: a leftover is
/// harmless (the next deploy creates into it) but clutters listings.
pub(super) async fn remove_review_stack(ctx: &Context<'_>, stack_id: &str) {
    let cfn = &ctx.clients.cloudformation;
    let in_review = matches!(
        cfn::describe(cfn, stack_id).await,
        Ok(Some(stack)) if stack.status == StackStatus::ReviewInProgress
    );
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

    fn rolled_back(parameters: &[&str], description: &str) -> StackInfo {
        StackInfo {
            id: "arn:aws:cloudformation:eu-west-1:123456789012:stack/hck/1".into(),
            name: "hck".into(),
            status: "ROLLBACK_COMPLETE".into(),
            status_reason: None,
            parameters: parameters.iter().map(|p| ((*p).to_owned(), "v".to_owned())).collect(),
            outputs: BTreeMap::new(),
            tags: BTreeMap::new(),
            last_updated: None,
            description: Some(description.to_owned()),
        }
    }

    #[test]
    fn a_failed_create_that_is_not_the_kits_is_refused_not_deleted() {
        let foreign = rolled_back(&["VpcCidr"], "Production VPC");
        assert_eq!(cfn::readiness(Some(&foreign.status)), Readiness::FailedCreate);
        let err = replaceable(&foreign).unwrap_err();
        assert!(matches!(err, Error::NotTheKit { .. }), "{err}");
        let kit = rolled_back(
            &[
                stack::params::ARTIFACTS_BUCKET,
                stack::params::STREAM_COUNTER_CODE_KEY,
                stack::params::DLQ_REPROCESSOR_CODE_KEY,
            ],
            stack::kit::DESCRIPTION,
        );
        assert!(replaceable(&kit).is_ok());
    }

    /// `propose` refuses a wrong service role or operator account before it
    /// deletes a failed create, not after.
    #[test]
    fn the_failed_create_is_removed_only_after_every_check() {
        let source = include_str!("proposal.rs");
        let body = &source[source.find("pub async fn propose(").unwrap()..];
        let body = &body[..body.find("\n}\n").unwrap()];
        let removal = body.find("remove_failed_create(ctx").unwrap();
        for check in ["replaceable(stack)?", "validate_role_arn(", "check_operator_account("] {
            assert!(body.find(check).unwrap() < removal, "{check} after the removal");
        }
    }

    #[test]
    fn deployed_tags_are_kept_and_given_ones_added_or_changed() {
        let deployed = map(&[("team", "a"), ("env", "dev")]);
        let (tags, changed) = effective_tags(Some(&deployed), &map(&[("env", "prod"), ("owner", "me")]));
        assert_eq!(tags, map(&[("env", "prod"), ("owner", "me"), ("team", "a")]));
        assert_eq!(changed, map(&[("env", "prod"), ("owner", "me")]));
        let (tags, changed) = effective_tags(Some(&deployed), &BTreeMap::new());
        assert_eq!(tags, deployed, "a deploy without --tag removes none");
        assert!(changed.is_empty());
        let (_, changed) = effective_tags(Some(&deployed), &map(&[("team", "a")]));
        assert!(changed.is_empty(), "the same value again is no change");
        let (tags, changed) = effective_tags(None, &map(&[("team", "a")]));
        assert_eq!((tags.clone(), changed), (tags.clone(), tags));
    }
}
