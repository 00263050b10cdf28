//! `counterctl limits plan | apply | export`: the per-scope limit
//! overrides as code. [`file`] is the reviewed YAML file and its checks,
//! [`plan`] the diff against the table, [`apply`] the writes conditioned
//! on the plan, [`export`] the table as a file. The store calls are the
//! ones `limit set|clear` uses (`hybrid_counter_aws::limits`).

pub mod apply;
pub mod export;
pub mod file;
pub mod plan;

use std::path::Path;

use futures_util::future::join_all;
use hybrid_counter::Counter;
use hybrid_counter_aws::DynamoStore;

use super::Context;
use super::deployed::counter_config;
use crate::config::{LimitsAction, LimitsOptions};
use crate::error::{Error, Result};
use file::LimitsFile;
use plan::{Change, LimitsPlan};

/// Scopes whose usage is read, or whose override is written, at once.
const CONCURRENCY: usize = 16;

/// What every `limits` command works with: the deployed stack's counters
/// table and default limit.
pub struct Limits<'a> {
    pub ctx: &'a Context<'a>,
    pub store: DynamoStore,
    pub default_limit: u64,
}

/// What a `limits` command reads before it connects: the file, or a saved
/// plan. A bad one fails with exit code 2 before anything is sent.
#[derive(Debug, Clone)]
pub enum Input {
    File(LimitsFile),
    Plan(Box<LimitsPlan>),
    None,
}

/// Reads and checks the file or plan the command names.
pub fn read_input(options: &LimitsOptions) -> Result<Input> {
    let path = match &options.action {
        LimitsAction::Plan { file, .. } => file,
        LimitsAction::Apply {
            source: crate::config::ApplySource::File(file),
            ..
        } => file,
        LimitsAction::Apply {
            source: crate::config::ApplySource::Plan(path),
            ..
        } => {
            let text = read(path)?;
            let plan =
                serde_json::from_str(&text).map_err(|e| Error::LimitsFile(format!("{}: {e}", path.display())))?;
            return Ok(Input::Plan(Box::new(plan)));
        }
        LimitsAction::Export { .. } => return Ok(Input::None),
    };
    let text = read(path)?;
    LimitsFile::parse(&path.display().to_string(), &text)
        .map(Input::File)
        .map_err(|e| Error::LimitsFile(e.to_string()))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::LimitsFile(format!("{}: {e}", path.display())))
}

/// Writes `text` to `path` (a plan, an exported file).
pub(crate) fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", path.display())))
}

pub(crate) fn store_error(action: &'static str) -> impl Fn(hybrid_counter::error::StoreError) -> Error {
    move |e| Error::Aws {
        action,
        message: e.to_string(),
    }
}

impl<'a> Limits<'a> {
    pub async fn open(ctx: &'a Context<'a>) -> Result<Self> {
        let config = counter_config(ctx).await?;
        Ok(Self {
            ctx,
            default_limit: config.default_limit.unwrap_or_default(),
            store: DynamoStore::new(ctx.clients.dynamodb.clone(), &config),
        })
    }

    /// Reads each changed scope's effective usage (what admission compares
    /// with the limit) and flags the changes whose new limit is below it.
    pub async fn annotate_usage(&self, changes: &mut [Change]) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let counter = Counter::new(self.store.clone(), self.default_limit);
        let bar = self
            .ctx
            .ui
            .bar(changes.len() as u64, "reading the changed scopes' usage");
        for chunk in changes.chunks_mut(CONCURRENCY) {
            let reads = chunk.iter().map(|c| async {
                let scope = hybrid_counter::Scope::new(c.scope.clone())
                    .map_err(|e| Error::InvalidArgument(format!("scope {:?} in the table: {e}", c.scope)))?;
                counter.usage(&scope).await.map_err(|e| Error::Aws {
                    action: "reading a scope's usage",
                    message: e.to_string(),
                })
            });
            let usages = join_all(reads).await;
            for (change, usage) in chunk.iter_mut().zip(usages) {
                let effective = u64::try_from(usage?.effective).unwrap_or(0);
                let after = change.new.unwrap_or(self.default_limit);
                change.usage = effective;
                // A removal leaves the scope at the default.
                change.below_usage = after < effective;
                bar.inc(1);
            }
        }
        Ok(())
    }
}

/// Runs `limits plan|apply|export`.
pub async fn run(ctx: &Context<'_>, options: &LimitsOptions, input: Input) -> Result<crate::report::Report> {
    use crate::report::Report;
    let limits = Limits::open(ctx).await?;
    Ok(match (&options.action, input) {
        (LimitsAction::Plan { out, .. }, Input::File(file)) => {
            let plan = plan::run(&limits, &file).await?;
            if let Some(out) = out {
                write(out, &format!("{}\n", serde_json::to_string_pretty(&plan)?))?;
            }
            Report::LimitsPlan(plan)
        }
        (LimitsAction::Apply { allow_below_usage, .. }, input) => {
            let plan = match input {
                Input::File(file) => plan::run(&limits, &file).await?,
                Input::Plan(plan) => *plan,
                Input::None => unreachable!("apply reads a file or a plan"),
            };
            Report::LimitsApply(apply::run(&limits, plan, *allow_below_usage).await?)
        }
        (LimitsAction::Export { out }, _) => Report::LimitsExport(export::run(&limits, out.as_deref()).await?),
        (LimitsAction::Plan { .. }, _) => unreachable!("plan reads a file"),
    })
}
