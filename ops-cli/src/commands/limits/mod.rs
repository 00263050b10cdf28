//! `counterctl limits plan | apply | export`: the per-scope limit
//! overrides as code. The reviewed YAML file and its checks are the core's
//! (`hybrid_counter::limits::file`, shared with the scheduled drift check),
//! [`plan`] the diff
//! against the table, [`apply`] the writes conditioned
//! on the plan, [`export`] the table as a file, [`table`] the deployed
//! stack they all work on. The store calls are the
//! ones `limit set|clear` uses (`hybrid_counter_aws::limits`).

pub mod apply;
pub mod export;
pub mod plan;
pub mod table;

use std::path::Path;

use super::Context;
use crate::config::{LimitsAction, LimitsOptions};
use crate::error::{Error, Result};
use hybrid_counter::limits::file::LimitsFile;
use plan::LimitsPlan;
use table::{Limits, write};

/// What a `limits` command reads before it connects: the file, or a saved
/// plan. A bad one fails with exit code 2 before anything is sent.
#[derive(Debug, Clone)]
pub enum Input {
    File(LimitsFile),
    Plan(Box<LimitsPlan>),
    None,
}

/// Reads and checks a limits file.
pub fn read_file(path: &Path) -> Result<LimitsFile> {
    let text = read(path)?;
    LimitsFile::parse(&path.display().to_string(), &text)
        .map_err(|e| Error::LimitsFile(format!("invalid limits file {e}")))
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
            let invalid = |e: String| {
                Error::LimitsFile(format!(
                    "invalid plan {}: {e} (write one with `limits plan FILE --out`)",
                    path.display()
                ))
            };
            let plan: LimitsPlan = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
            plan.check().map_err(invalid)?;
            return Ok(Input::Plan(Box::new(plan)));
        }
        LimitsAction::Export { .. } => return Ok(Input::None),
    };
    read_file(path).map(Input::File)
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::LimitsFileRead {
        path: path.display().to_string(),
        source,
    })
}

/// What a `limits` command reports.
#[derive(Debug, Clone)]
pub enum LimitsReport {
    Plan(LimitsPlan),
    Apply(apply::LimitsApplyReport),
    Export(export::LimitsExportReport),
}

/// Runs `limits plan|apply|export`.
pub async fn run(ctx: &Context<'_>, options: &LimitsOptions, input: Input) -> Result<LimitsReport> {
    use LimitsReport as Report;
    let limits = Limits::open(ctx).await?;
    Ok(match (&options.action, input) {
        (LimitsAction::Plan { out, .. }, Input::File(file)) => {
            let plan = plan::run(&limits, &file).await?;
            if let Some(out) = out {
                write(out, &format!("{}\n", serde_json::to_string_pretty(&plan)?))?;
            }
            Report::Plan(plan)
        }
        (LimitsAction::Apply { allow_below_usage, .. }, input) => {
            let (plan, saved) = match input {
                Input::File(file) => (plan::run(&limits, &file).await?, false),
                Input::Plan(plan) => (*plan, true),
                Input::None => unreachable!("apply reads a file or a plan"),
            };
            Report::Apply(apply::run(&limits, plan, saved, *allow_below_usage).await?)
        }
        (LimitsAction::Export { out }, _) => Report::Export(export::run(&limits, out.as_deref()).await?),
        (LimitsAction::Plan { .. }, _) => unreachable!("plan reads a file"),
    })
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// A limits file that cannot be read is the operator's mistake (exit 2),
    /// named, with the I/O error kept as its source.
    #[test]
    fn an_unreadable_limits_file_is_a_usage_error_that_keeps_its_cause() {
        let path = std::env::temp_dir().join(format!("hck-no-limits-{}.yaml", fastrand::u64(..)));
        let err = read_file(&path).unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        assert!(
            err.to_string()
                .starts_with(&format!("cannot read {}: ", path.display())),
            "{err}"
        );
        let io = err
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("io source");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    }
}
