//! The result of a command: the report type of each command (defined with
//! the command, gathered here), `Serialize` for `--output json` and
//! `Display` for people, and the exit code it implies (a report can carry a
//! failure: a rolled-back deploy is still reported in full, then exits 1).

use std::fmt;

use serde::Serialize;

use crate::cli::OutputFormat;
use crate::commands::deploy::DeployReport;
use crate::commands::deploy::destroy::DestroyReport;
use crate::commands::deploy::plan::PlanReport;
use crate::commands::status::StatusReport;
use crate::error::Result;
use crate::exit;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "command", rename_all = "lowercase")]
pub enum Report {
    Plan(PlanReport),
    Deploy(DeployReport),
    Destroy(DestroyReport),
    Status(Box<StatusReport>),
    Audit(crate::commands::audit::AuditReport),
    Usage(crate::commands::scope::UsageReport),
    Limit(crate::commands::scope::LimitReport),
    Seq(crate::commands::scope::SequenceReport),
    #[serde(rename = "limits-plan")]
    LimitsPlan(crate::commands::limits::plan::LimitsPlan),
    #[serde(rename = "limits-apply")]
    LimitsApply(crate::commands::limits::apply::LimitsApplyReport),
    #[serde(rename = "limits-export")]
    LimitsExport(crate::commands::limits::export::LimitsExportReport),
    Load(crate::commands::load::LoadReport),
    Redrive(crate::commands::redrive::RedriveReport),
    #[cfg(feature = "local")]
    Local(crate::commands::local::LocalRunReport),
    /// `completions`, `man`: a file, printed as is.
    Generated(crate::commands::docs::Generated),
    Verify(crate::commands::verify::VerifyReport),
}

impl From<crate::commands::limits::LimitsReport> for Report {
    fn from(report: crate::commands::limits::LimitsReport) -> Self {
        use crate::commands::limits::LimitsReport;
        match report {
            LimitsReport::Plan(plan) => Report::LimitsPlan(plan),
            LimitsReport::Apply(apply) => Report::LimitsApply(apply),
            LimitsReport::Export(export) => Report::LimitsExport(export),
        }
    }
}

impl Report {
    /// 0, or 1 when the report records a failure (or, for `status`,
    /// something that needs an operator).
    pub fn exit_code(&self) -> u8 {
        let ok = match self {
            Report::Plan(_) => true,
            Report::Deploy(report) => report.succeeded(),
            Report::Destroy(report) => report.succeeded(),
            Report::Status(report) => report.healthy(),
            Report::Audit(report) => report.healthy(),
            Report::Usage(_) | Report::Limit(_) | Report::Seq(_) => true,
            // Like `plan` scripts: 1 says there is something to apply.
            Report::LimitsPlan(plan) => !plan.has_changes(),
            Report::LimitsApply(report) => report.succeeded(),
            Report::LimitsExport(_) => true,
            Report::Load(report) => report.healthy(),
            Report::Redrive(report) => report.succeeded(),
            #[cfg(feature = "local")]
            Report::Local(report) => report.succeeded(),
            Report::Generated(_) => true,
            Report::Verify(report) => report.passed(),
        };
        if ok { exit::SUCCESS } else { exit::FAILED }
    }

    /// The report as printed on stdout; a generated file as is, whatever
    /// the format.
    pub fn render(&self, format: OutputFormat) -> Result<String> {
        if let Report::Generated(generated) = self {
            return Ok(generated.text.clone());
        }
        Ok(match format {
            OutputFormat::Text => self.to_string(),
            OutputFormat::Json => format!("{}\n", serde_json::to_string_pretty(self)?),
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Plan(report) => report.fmt(f),
            Report::Deploy(report) => report.fmt(f),
            Report::Destroy(report) => report.fmt(f),
            Report::Status(report) => report.fmt(f),
            Report::Audit(report) => report.fmt(f),
            Report::Usage(report) => report.fmt(f),
            Report::Limit(report) => report.fmt(f),
            Report::Seq(report) => report.fmt(f),
            Report::LimitsPlan(report) => report.fmt(f),
            Report::LimitsApply(report) => report.fmt(f),
            Report::LimitsExport(report) => report.fmt(f),
            Report::Load(report) => report.fmt(f),
            Report::Redrive(report) => report.fmt(f),
            #[cfg(feature = "local")]
            Report::Local(report) => report.fmt(f),
            Report::Generated(generated) => f.write_str(&generated.text),
            Report::Verify(report) => report.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::commands::Location;
    use crate::commands::deploy::Outcome;
    use crate::commands::deploy::diff::Diff;

    fn deploy(outcome: Outcome) -> Report {
        Report::Deploy(DeployReport {
            location: Location {
                stack_name: "hybrid-counter".into(),
                target: "local".into(),
                region: "us-east-1".into(),
                endpoint: Some("http://127.0.0.1:4566".into()),
            },
            outcome,
            stack_id: "arn:stack".into(),
            status: "UPDATE_ROLLBACK_COMPLETE".into(),
            status_reason: None,
            change_set_type: "UPDATE".into(),
            no_change_reason: None,
            seconds: 1.5,
            diff: Diff::default(),
            parameters: BTreeMap::new(),
            tags: BTreeMap::new(),
            bucket: "b".into(),
            artifacts: Vec::new(),
            events: Vec::new(),
            failures: vec![crate::commands::deploy::cfn::FailedResource {
                logical_id: "StreamMapping".into(),
                resource_type: "AWS::Lambda::EventSourceMapping".into(),
                status: "UPDATE_FAILED".into(),
                reason: "bad batch size".into(),
            }],
            outputs: BTreeMap::from([("Dlq1Url".into(), "http://q".into())]),
            inlined_parameters: Vec::new(),
            taken_over: Vec::new(),
            warnings: Vec::new(),
            layout_unrecorded: None,
        })
    }

    #[test]
    fn a_failed_deploy_exits_1_and_names_the_failed_resource() {
        let report = deploy(Outcome::Failed);
        assert_eq!(report.exit_code(), exit::FAILED);
        let text = report.render(OutputFormat::Text).unwrap();
        assert!(
            text.starts_with("Stack hybrid-counter: DEPLOY FAILED (UPDATE_ROLLBACK_COMPLETE)"),
            "{text}"
        );
        assert!(
            text.contains("StreamMapping (AWS::Lambda::EventSourceMapping) UPDATE_FAILED: bad batch size"),
            "{text}"
        );
    }

    #[test]
    fn successful_and_unchanged_deploys_exit_0() {
        assert_eq!(deploy(Outcome::Updated).exit_code(), exit::SUCCESS);
        assert_eq!(deploy(Outcome::Unchanged).exit_code(), exit::SUCCESS);
    }

    #[test]
    fn a_deploy_whose_layout_was_not_recorded_exits_1_and_says_how_to_record_it() {
        let Report::Deploy(mut report) = deploy(Outcome::Created) else {
            unreachable!()
        };
        report.layout_unrecorded = Some("throttled: run counterctl deploy again".into());
        let report = Report::Deploy(report);
        assert_eq!(report.exit_code(), exit::FAILED);
        let text = report.render(OutputFormat::Text).unwrap();
        assert!(
            text.contains("FAILED: the stack is deployed, but its layout record is not right: throttled: run"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.render(OutputFormat::Json).unwrap()).unwrap();
        assert_eq!(json["layout_unrecorded"], "throttled: run counterctl deploy again");
    }

    #[test]
    fn json_output_is_tagged_with_the_command() {
        let json: serde_json::Value =
            serde_json::from_str(&deploy(Outcome::Failed).render(OutputFormat::Json).unwrap()).unwrap();
        assert_eq!(json["command"], "deploy");
        assert_eq!(json["outcome"], "failed");
        assert_eq!(json["stack_name"], "hybrid-counter");
        assert_eq!(json["failures"][0]["logical_id"], "StreamMapping");
        assert_eq!(json["outputs"]["Dlq1Url"], "http://q");
    }
}
