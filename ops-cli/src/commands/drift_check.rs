//! The drift check as `counterctl status` shows it: off (the stack's
//! `DriftCheckSchedule` is empty), never ran, or its last run (when, how
//! many scopes, which drifted or were held back, how far the pass has got
//! and when the last full pass ended), read from its state item in the
//! counters table (`hybrid_counter_aws::drift`).

use std::fmt;

use hybrid_counter::EpochMillis;
use hybrid_counter::audit::drift::{DriftCheckState, DriftRun, DriftStore, FullPass};
use hybrid_counter_aws::DynamoStore;
use serde::Serialize;

use super::Context;
use super::deploy::cfn::StackInfo;
use super::deployed::Deployed;

/// Whether the drift check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftCheckMode {
    /// `DriftCheckSchedule` is empty (or the stack predates it).
    Off,
    /// Scheduled, no run recorded yet.
    NeverRan,
    /// A run is recorded (`last_run`).
    Ran,
    /// The state could not be read (`problem`).
    Unknown,
}

/// The drift check's section of the status report.
#[derive(Debug, Clone, Serialize)]
pub struct DriftCheckStatus {
    pub state: DriftCheckMode,
    /// The deployed `DriftCheckSchedule`; `None` when off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<DriftRun>,
    /// The scope the next run resumes after; `None`: a new pass starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumes_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass_started_at: Option<EpochMillis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_full_pass: Option<FullPass>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Tables of the stack with global-table replicas, on which the drift
    /// check's findings mean nothing (`docs/multi-region.md`); `status`
    /// fills it from [`super::replicas`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replicated_tables: Vec<String>,
}

impl DriftCheckStatus {
    fn new(schedule: Option<String>, state: Option<DriftCheckState>) -> Self {
        let ran = state.as_ref().is_some_and(|s| s.last_run.is_some());
        let state_kind = match (&schedule, ran) {
            (None, _) => DriftCheckMode::Off,
            (Some(_), true) => DriftCheckMode::Ran,
            (Some(_), false) => DriftCheckMode::NeverRan,
        };
        let state = state.unwrap_or_default();
        Self {
            state: state_kind,
            schedule,
            last_run: state.last_run,
            resumes_after: state.cursor.map(|c| c.scope),
            pass_started_at: state.pass_started_at,
            last_full_pass: state.last_full_pass,
            problem: None,
            replicated_tables: Vec::new(),
        }
    }

    /// What an operator should act on: drift the last run found, while the
    /// check is on (a check turned off leaves its last run behind, which no
    /// later run will clear; `status` still shows it).
    pub fn attention(&self) -> Option<String> {
        self.schedule.as_ref()?;
        let run = self.last_run.as_ref().filter(|r| r.drifted > 0)?;
        let first = run.drifted_scopes.first().map_or("", String::as_str);
        Some(format!(
            "the drift check found {} drifted scope(s) at {} ({} a defect of the kit): see docs/operations.md, \
             \"When the drift check finds drift\"; start with `counterctl audit --scope {first:?} --repair`",
            run.drifted,
            time(run.finished_at),
            run.defects
        ))
    }
}

/// The deployed schedule: `None` when the parameter is empty or absent.
fn schedule(stack: &StackInfo) -> Option<String> {
    stack
        .parameters
        .get(stack::params::DRIFT_CHECK_SCHEDULE)
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The drift check's status in the deployed `stack`. A state that cannot
/// be read is reported, not an error: status shows everything else.
pub async fn read(ctx: &Context<'_>, stack: &StackInfo) -> DriftCheckStatus {
    let schedule = schedule(stack);
    let deployed = Deployed { stack: stack.clone() };
    let state = match deployed.counter_config() {
        Ok(config) => DynamoStore::new(ctx.clients.dynamodb.clone(), &config)
            .drift_state()
            .await
            .map_err(|e| format!("reading the drift check's state: {e}")),
        Err(e) => Err(e.to_string()),
    };
    match state {
        Ok(state) => DriftCheckStatus::new(schedule, state),
        Err(problem) => DriftCheckStatus {
            state: DriftCheckMode::Unknown,
            problem: Some(problem),
            ..DriftCheckStatus::new(schedule, None)
        },
    }
}

/// An epoch-milliseconds time as RFC 3339 UTC.
pub fn time(millis: EpochMillis) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(millis).map_or_else(
        || millis.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

impl fmt::Display for DriftCheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.schedule, self.state) {
            (None, _) => write!(f, "  drift check off (DriftCheckSchedule is empty)")?,
            (Some(schedule), DriftCheckMode::NeverRan) => write!(f, "  {schedule}: never ran")?,
            (Some(schedule), _) => write!(f, "  {schedule}")?,
        }
        writeln!(f)?;
        if let Some(problem) = &self.problem {
            writeln!(f, "  {problem}")?;
        }
        if !self.replicated_tables.is_empty() {
            writeln!(
                f,
                "  its findings cannot be trusted: {} replicated to other regions (docs/multi-region.md)",
                self.replicated_tables.join(", ")
            )?;
        }
        if let Some(run) = &self.last_run {
            writeln!(
                f,
                "  last run {}: {} scope(s) checked, {} drifted, {} held back, {} failed; {} of {} items read{}",
                time(run.finished_at),
                run.scopes_checked,
                run.drifted,
                run.held_back,
                run.failed,
                run.items_read,
                run.budget,
                if run.completed_pass { "; completed a pass" } else { "" }
            )?;
            for (label, scopes) in [
                ("drifted", &run.drifted_scopes),
                ("held back", &run.held_back_scopes),
                ("failed", &run.failed_scopes),
            ] {
                if !scopes.is_empty() {
                    writeln!(f, "    {label}: {}", scopes.join(", "))?;
                }
            }
        }
        match (&self.resumes_after, self.pass_started_at) {
            (Some(scope), Some(started)) => {
                writeln!(f, "  pass started {}, resumes after scope {scope}", time(started))?
            }
            (Some(scope), None) => writeln!(f, "  resumes after scope {scope}")?,
            _ => {}
        }
        match &self.last_full_pass {
            Some(pass) => writeln!(
                f,
                "  last full pass {} to {}",
                time(pass.started_at),
                time(pass.completed_at)
            ),
            None if self.last_run.is_some() => writeln!(f, "  no full pass completed yet"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(drifted: &[&str]) -> DriftRun {
        DriftRun {
            started_at: 1_790_000_000_000,
            finished_at: 1_790_000_001_000,
            budget: 10_000,
            items_read: 42,
            scopes_checked: 7,
            drifted: drifted.len() as u64,
            defects: 1,
            drifted_scopes: drifted.iter().map(|s| (*s).to_owned()).collect(),
            ..DriftRun::default()
        }
    }

    #[test]
    fn off_never_ran_and_a_run_read_apart() {
        let off = DriftCheckStatus::new(None, None);
        assert_eq!(off.state, DriftCheckMode::Off);
        assert!(off.to_string().contains("drift check off"), "{off}");
        let never = DriftCheckStatus::new(Some("rate(5 minutes)".into()), None);
        assert_eq!(never.state, DriftCheckMode::NeverRan);
        assert!(never.to_string().contains("rate(5 minutes): never ran"), "{never}");
        assert_eq!(never.attention(), None);
        let state = DriftCheckState {
            last_run: Some(run(&["acct-7"])),
            ..DriftCheckState::default()
        };
        let ran = DriftCheckStatus::new(Some("rate(5 minutes)".into()), Some(state));
        assert_eq!(ran.state, DriftCheckMode::Ran);
        let text = ran.to_string();
        assert!(
            text.contains("last run 2026-09-21T") && text.contains("1 drifted"),
            "{text}"
        );
        assert!(text.contains("drifted: acct-7"), "{text}");
        let json = serde_json::to_value(&ran).unwrap();
        assert_eq!(json["state"], "ran");
        assert_eq!(json["last_run"]["drifted_scopes"][0], "acct-7");
        assert!(ran.attention().unwrap().contains("--scope \"acct-7\" --repair"));
    }

    #[test]
    fn replicated_tables_are_reported_in_the_drift_check_section() {
        let mut status = DriftCheckStatus::new(Some("rate(15 minutes)".into()), None);
        assert!(!status.to_string().contains("cannot be trusted"), "{status}");
        status.replicated_tables = vec!["hc-resources".into()];
        let text = status.to_string();
        assert!(
            text.contains("its findings cannot be trusted: hc-resources replicated to other regions"),
            "{text}"
        );
    }

    #[test]
    fn drift_found_by_a_check_since_turned_off_needs_no_attention() {
        let state = DriftCheckState {
            last_run: Some(run(&["acct-7"])),
            ..DriftCheckState::default()
        };
        let turned_off = DriftCheckStatus::new(None, Some(state));
        assert_eq!(turned_off.state, DriftCheckMode::Off);
        assert_eq!(
            turned_off.attention(),
            None,
            "no later run would ever clear it; status would stay at exit 1"
        );
    }
}
