//! `counterctl plan`: the change set a deploy would execute, shown as a
//! diff and then deleted. Nothing is applied: the zips are hashed and
//! looked up in the bucket, not uploaded (only a template too large to send
//! inline is stored there), and a new stack's empty review placeholder is
//! removed again.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::cfn;
use super::diff::Diff;
use super::package::{Artifact, ArtifactState};
use super::proposal::{Packaging, propose, remove_review_stack};
use crate::commands::{Context, Location};
use crate::config::StackInputs;
use crate::error::Result;

#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    #[serde(flatten)]
    pub location: Location,
    /// `CREATE` for a new stack, `UPDATE` otherwise.
    pub change_set_type: String,
    pub no_changes: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_change_reason: Option<String>,
    pub diff: Diff,
    pub parameters: BTreeMap<String, String>,
    /// The stack's tags after the deploy.
    pub tags: BTreeMap<String, String>,
    /// The tags `--tag` adds or changes.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub changed_tags: BTreeMap<String, String>,
    pub bucket: String,
    pub artifacts: Vec<Artifact>,
    pub template_bytes: usize,
    /// Number parameters inlined into the template for the emulator.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inlined_parameters: Vec<String>,
    /// What to know before applying: a breaking upgrade, too few
    /// eventual-counter shards for the layout.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

pub async fn run(ctx: &Context<'_>, inputs: &StackInputs, artifacts: Vec<Artifact>) -> Result<PlanReport> {
    let proposal = propose(ctx, inputs, artifacts, Packaging::Inspect, "plan").await?;
    if let Some(id) = &proposal.change_set_id {
        ctx.ui.step("deleting the change set");
        cfn::delete_change_set(&ctx.clients.cloudformation, id).await?;
    }
    if proposal.before.is_none() {
        remove_review_stack(ctx, &proposal.stack_id).await;
    }
    Ok(PlanReport {
        location: Location::of(ctx),
        change_set_type: proposal.change_set_type.as_str().to_owned(),
        no_changes: proposal.no_changes,
        no_change_reason: proposal.no_change_reason,
        diff: proposal.diff,
        parameters: proposal.parameters,
        tags: proposal.tags,
        changed_tags: proposal.changed_tags,
        bucket: proposal.bucket,
        artifacts: proposal.artifacts,
        template_bytes: proposal.template_bytes,
        inlined_parameters: proposal.inlined_parameters,
        warnings: proposal.warnings,
    })
}

impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.change_set_type == "CREATE" {
            "create"
        } else {
            "update"
        };
        writeln!(
            f,
            "Plan for stack {} ({what}; target {}, region {}):",
            self.location.stack_name, self.location.target, self.location.region
        )?;
        if self.no_changes {
            writeln!(
                f,
                "  no changes: {}",
                self.no_change_reason.as_deref().unwrap_or("nothing to deploy")
            )?;
        } else {
            write!(f, "{}", self.diff)?;
        }
        for warning in &self.warnings {
            writeln!(f, "  warning: {warning}")?;
        }
        if !self.tags.is_empty() {
            writeln!(f, "Stack tags (on every resource that takes tags):")?;
            for (key, value) in &self.tags {
                let note = if self.changed_tags.contains_key(key) {
                    "  (new)"
                } else {
                    ""
                };
                writeln!(f, "  {key}={value}{note}")?;
            }
        }
        writeln!(f, "Handler zips (bucket {}):", self.bucket)?;
        for artifact in &self.artifacts {
            let state = match artifact.state {
                ArtifactState::Present => "already in the bucket",
                ArtifactState::Missing => "to upload",
                ArtifactState::Untrusted => "in the bucket, unverified: to upload again",
                ArtifactState::Uploaded => "uploaded",
                ArtifactState::Replaced => "uploaded again",
                ArtifactState::Local => "not checked",
            };
            let note = artifact.note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default();
            writeln!(
                f,
                "  {:<16} {:>10} bytes  {}  {state}{note}",
                artifact.package, artifact.size, artifact.key
            )?;
        }
        if !self.no_changes {
            writeln!(
                f,
                "Nothing was applied; run `counterctl deploy` with the same --param and --tag flags to apply."
            )?;
        }
        Ok(())
    }
}
