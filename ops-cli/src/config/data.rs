//! What the commands that work on the kit's data are given (`audit`,
//! `usage`, `limit`, `load`): scopes validated the way the API validates
//! them, the repair mode, and the load generator's settings.

use std::path::PathBuf;
use std::time::Duration;

use hybrid_counter::audit::RepairMode;
use hybrid_counter::{ResourceId, Scope};

use crate::cli::{AuditArgs, LimitCommand, LimitsCommand, LoadArgs, SeqCommand};
use crate::error::{Error, Result, invalid};

/// What to audit and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditOptions {
    pub scope: Option<hybrid_counter::Scope>,
    pub mode: RepairMode,
    /// Parallel Scan segments.
    pub segments: u32,
    /// Tries per scope before it is reported as under continuous writes.
    pub attempts: u32,
    /// How long after a scope's last write a BE move that an in-flight
    /// request could push past the invariant may be written.
    pub grace_ms: hybrid_counter::EpochMillis,
}

/// What `limit` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitAction {
    Get,
    /// `None` clears the override.
    Set(Option<u64>),
}

/// What `limits` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsOptions {
    pub action: LimitsAction,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitsAction {
    Plan {
        file: PathBuf,
        out: Option<PathBuf>,
    },
    Apply {
        source: ApplySource,
        allow_below_usage: bool,
    },
    Export {
        out: Option<PathBuf>,
    },
}

/// What `limits apply` applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplySource {
    /// Planned now from the file.
    File(PathBuf),
    /// A plan saved by `limits plan --out`.
    Plan(PathBuf),
}

impl From<LimitsCommand> for LimitsOptions {
    fn from(command: LimitsCommand) -> Self {
        let action = match command {
            LimitsCommand::Plan { file, out } => LimitsAction::Plan { file, out },
            LimitsCommand::Apply {
                file,
                plan,
                allow_below_usage,
            } => LimitsAction::Apply {
                // clap requires one of the two.
                source: plan.map_or_else(|| ApplySource::File(file.unwrap_or_default()), ApplySource::Plan),
                allow_below_usage,
            },
            LimitsCommand::Export { out } => LimitsAction::Export { out },
        };
        Self { action }
    }
}

/// What `seq` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeqAction {
    Get,
    /// Claim the next number, for `owner` if given.
    Next {
        owner: Option<String>,
    },
}

/// When the load workers stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadStop {
    Operations(u64),
    Duration(Duration),
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoadOptions {
    pub scopes: u32,
    pub scope_prefix: String,
    pub workers: u32,
    pub stop: LoadStop,
    /// Share of operations that delete one of the worker's own items.
    pub delete_ratio: f64,
    /// Per-scope limit override written before the run.
    pub limit: Option<u64>,
    /// How long to wait for the stream consumer to drain; zero skips the
    /// wait and the audit.
    pub drain_timeout: Duration,
    pub seed: u64,
    /// Who sees each call (a library caller's; never set from the
    /// command line).
    pub observer: Observer,
}

/// Sees each call of the load as it is invoked and as it is answered
/// (the e2e tests record them for their history check). `counterctl`
/// itself sets none ([`LoadOptions::observer`]).
pub trait CallObserver: Send + Sync {
    /// A create (`create`) or delete of `scope`/`id` is invoked now; the
    /// token names the call in its answer.
    fn invoked(&self, create: bool, scope: &Scope, id: &ResourceId) -> usize;
    /// The create named by `token` is answered now.
    fn created(&self, token: usize, answer: &std::result::Result<hybrid_counter::Created, hybrid_counter::Error>);
    /// The delete named by `token` is answered now.
    fn deleted(&self, token: usize, answer: &std::result::Result<(), hybrid_counter::Error>);
}

/// A library caller's [`CallObserver`] of a load, if any.
#[derive(Clone, Default)]
pub struct Observer(pub Option<std::sync::Arc<dyn CallObserver>>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Observer(set)"
        } else {
            "Observer(none)"
        })
    }
}

/// The same observer, or none on both sides.
impl PartialEq for Observer {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

/// What `verify` writes and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOptions {
    pub scopes: u32,
    /// Items created per scope.
    pub operations: u64,
    pub timeout: Duration,
    pub dry_run: bool,
    /// Also push one batch through DLQ1 and the reprocessor.
    pub failure_path: bool,
}

impl From<crate::cli::VerifyArgs> for VerifyOptions {
    fn from(args: crate::cli::VerifyArgs) -> Self {
        Self {
            scopes: args.scopes,
            operations: args.operations,
            timeout: Duration::from_secs(args.timeout),
            dry_run: args.dry_run,
            failure_path: args.failure_path,
        }
    }
}

/// A scope given on the command line, validated like the API validates it.
pub(super) fn scope_arg(raw: &str) -> Result<hybrid_counter::Scope> {
    hybrid_counter::Scope::new(raw).map_err(invalid)
}

pub(super) fn audit_options(args: AuditArgs) -> Result<AuditOptions> {
    Ok(AuditOptions {
        scope: args.scope.as_deref().map(scope_arg).transpose()?,
        mode: if args.repair {
            RepairMode::Apply
        } else if args.dry_run {
            RepairMode::DryRun
        } else {
            RepairMode::None
        },
        segments: args.segments,
        attempts: args.attempts,
        grace_ms: i64::from(args.grace) * 1000,
    })
}

/// The scope `limit` works on and what it does there.
pub(super) fn limit(command: LimitCommand) -> Result<(hybrid_counter::Scope, LimitAction)> {
    let (scope, action) = match command {
        LimitCommand::Get(args) => (args.scope, LimitAction::Get),
        LimitCommand::Set { scope, limit } => (scope, LimitAction::Set(Some(limit))),
        LimitCommand::Clear(args) => (args.scope, LimitAction::Set(None)),
    };
    Ok((scope_arg(&scope)?, action))
}

/// The scope `seq` works on and what it does there.
pub(super) fn seq(command: SeqCommand) -> Result<(hybrid_counter::Scope, SeqAction)> {
    let (scope, action) = match command {
        SeqCommand::Get(args) => (args.scope, SeqAction::Get),
        SeqCommand::Next { scope, owner } => {
            if owner.as_deref().is_some_and(|o| o.trim().is_empty()) {
                return Err(Error::InvalidArgument("--owner must not be empty".into()));
            }
            (scope, SeqAction::Next { owner })
        }
    };
    Ok((scope_arg(&scope)?, action))
}

pub(super) fn load_options(args: LoadArgs) -> Result<LoadOptions> {
    if !(0.0..=1.0).contains(&args.delete_ratio) {
        return Err(Error::InvalidArgument(format!(
            "--delete-ratio must be between 0 and 1, got {}",
            args.delete_ratio
        )));
    }
    // The scopes are <prefix>-<n>: check the longest one up front.
    scope_arg(&format!("{}-{}", args.scope_prefix, args.scopes.saturating_sub(1)))?;
    let stop = match (args.operations, args.duration) {
        (_, Some(0)) | (Some(0), _) => {
            return Err(Error::InvalidArgument(
                "--operations and --duration must be positive".into(),
            ));
        }
        (_, Some(seconds)) => LoadStop::Duration(Duration::from_secs(seconds)),
        (operations, None) => LoadStop::Operations(operations.unwrap_or(1000)),
    };
    Ok(LoadOptions {
        scopes: args.scopes,
        scope_prefix: args.scope_prefix,
        workers: args.workers,
        stop,
        delete_ratio: args.delete_ratio,
        limit: args.limit,
        drain_timeout: Duration::from_secs(args.drain_timeout),
        seed: args.seed,
        observer: Observer::default(),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn limits(args: &[&str]) -> std::result::Result<LimitsOptions, clap::Error> {
        let mut argv = vec!["counterctl", "limits"];
        argv.extend(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Limits(command) => Ok(command.into()),
            other => panic!("not limits: {other:?}"),
        }
    }

    #[test]
    fn limits_apply_takes_a_file_or_a_saved_plan_never_both_nor_neither() {
        assert_eq!(
            limits(&["apply", "l.yaml", "--allow-below-usage"]).unwrap().action,
            LimitsAction::Apply {
                source: ApplySource::File("l.yaml".into()),
                allow_below_usage: true
            }
        );
        assert_eq!(
            limits(&["apply", "--plan", "p.json"]).unwrap().action,
            LimitsAction::Apply {
                source: ApplySource::Plan("p.json".into()),
                allow_below_usage: false
            }
        );
        assert!(limits(&["apply"]).is_err());
        assert!(limits(&["apply", "l.yaml", "--plan", "p.json"]).is_err());
        assert_eq!(
            limits(&["plan", "l.yaml", "--out", "p.json"]).unwrap().action,
            LimitsAction::Plan {
                file: "l.yaml".into(),
                out: Some("p.json".into())
            }
        );
        assert!(limits(&["plan"]).is_err());
        assert_eq!(limits(&["export"]).unwrap().action, LimitsAction::Export { out: None });
    }
}
