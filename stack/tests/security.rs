//! The template's security promises, checked by established policy checkers
//! rather than by reading strings: checkov (its built-in CloudFormation checks
//! plus the kit's graph policies in `tests/policies/checkov/`) and a cfn-lint
//! JSON-schema rule (`tests/policies/cfn-lint/`) for the tables' retention,
//! which checkov cannot see. Together they fail the build when a role gets a
//! wildcard action or resource, a table lacks SSE, PITR or Retain, or a queue
//! lacks encryption. A deliberately weakened copy of the model proves each of
//! those checks can fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use stack::expr::{Expr, Literal};
use stack::template::Policy;
use stack::{ResourceKind, logical};

const COMMITTED: &str = "templates/hybrid-counter.yaml";

/// checkov checks that do not apply to this kit, each with the reason.
const SKIPPED_CHECKOV_CHECKS: &[&str] = &[
    // Reserved concurrency: the stream and queue mappings already bound the
    // consumers' concurrency (parallelization factor, batch size); reserving
    // account concurrency is a capacity decision left to the operator.
    "CKV_AWS_115",
    // Function DLQ: it catches failed asynchronous invokes only. The stream,
    // queue and API functions are invoked synchronously (event source
    // mappings, function URL); stream failures go to DLQ1 through the
    // mapping's on-failure destination. The one asynchronous invoke, the drift
    // check's schedule, carries nothing to keep: its progress is its cursor,
    // and the next tick resumes from it.
    "CKV_AWS_116",
    // VPC: the functions reach only AWS APIs with signed TLS requests and no
    // private network resource exists, so a VPC adds NAT or endpoints and nothing else.
    "CKV_AWS_117",
    // Customer managed key for DynamoDB: the tables are encrypted under KMS with
    // the AWS managed key (enforced by CKV2_HCK_3); a CMK is the operator's choice.
    "CKV_AWS_119",
    // Customer managed key for log groups: CloudWatch Logs encrypts at rest
    // already, and the logs carry ids and counts, no secrets.
    "CKV_AWS_158",
    // KMS key for environment variables: they hold table names and numbers
    // only (CKV_AWS_45, which looks for secrets in them, still runs).
    "CKV_AWS_173",
    // SQS encryption: checkov 3.3's CloudFormation check accepts only a KMS
    // key, not SqsManagedSseEnabled; CKV2_HCK_4 accepts either.
    "CKV_AWS_27",
    // S3 server access logging on the failed-batch bucket: it would need a
    // second bucket that logs every PUT Lambda and GET the reprocessor make;
    // the objects are written by the stack's own mapping and read by its own
    // reprocessor, and CloudTrail data events are the operator's choice.
    "CKV_AWS_18",
];

/// Checks that must have run, and passed, on every resource of their type in
/// the committed template: what the issue asks the build to enforce.
const ENFORCED: &[(&str, &str)] = &[
    ("CKV_AWS_62", "AWS::IAM::Role"),
    ("CKV_AWS_63", "AWS::IAM::Role"),
    ("CKV_AWS_111", "AWS::IAM::Role"),
    ("CKV2_HCK_1", "AWS::IAM::Role"),
    ("CKV2_HCK_2", "AWS::IAM::Role"),
    ("CKV_AWS_28", "AWS::DynamoDB::Table"),
    ("CKV2_HCK_3", "AWS::DynamoDB::Table"),
    ("CKV2_HCK_4", "AWS::SQS::Queue"),
    // The alarm topic: encrypted, with a rotated key that names no
    // wildcard principal.
    ("CKV_AWS_26", "AWS::SNS::Topic"),
    ("CKV_AWS_7", "AWS::KMS::Key"),
    ("CKV_AWS_33", "AWS::KMS::Key"),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn policies(tool: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/policies").join(tool)
}

fn venv_tool(name: &str) -> PathBuf {
    let tool = workspace_root().join(".venv/bin").join(name);
    assert!(
        tool.is_file(),
        "{name} not found at {}; run `make tools`",
        tool.display()
    );
    tool
}

fn run(mut command: Command) -> Output {
    // Keep the rule modules' bytecode out of the source tree.
    command.env("PYTHONDONTWRITEBYTECODE", "1");
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}; run `make tools`"))
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// checkov's verdicts on `template`: `(check id, "Type.LogicalId")` pairs
/// that passed and that failed.
struct Checkov {
    passed: BTreeSet<(String, String)>,
    failed: BTreeSet<(String, String)>,
    failures: String,
}

fn checkov(template: &Path) -> Checkov {
    let out = run({
        let mut c = Command::new(venv_tool("checkov"));
        c.arg("--file")
            .arg(template)
            .args(["--framework", "cloudformation", "--output", "json", "--compact"])
            // No network: the check metadata download is for the SaaS platform.
            .arg("--skip-download")
            .arg("--external-checks-dir")
            .arg(policies("checkov"))
            .arg("--skip-check")
            .arg(SKIPPED_CHECKOV_CHECKS.join(","));
        c
    });
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "checkov printed no JSON report ({e}), {}:\n{}{}",
            out.status,
            lossy(&out.stdout),
            lossy(&out.stderr)
        )
    });
    assert_eq!(
        report["summary"]["parsing_errors"], 0,
        "checkov could not parse {template:?}"
    );
    let verdicts = |key: &str| -> BTreeSet<(String, String)> {
        report["results"][key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let field = |f: &str| c[f].as_str().unwrap_or_default().to_owned();
                (field("check_id"), field("resource"))
            })
            .collect()
    };
    let failed = verdicts("failed_checks");
    // checkov exits 1 exactly when a check failed; anything else is a crash.
    let expected_code = if failed.is_empty() { 0 } else { 1 };
    assert_eq!(
        out.status.code(),
        Some(expected_code),
        "checkov: {}",
        lossy(&out.stderr)
    );
    let failures = report["results"]["failed_checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("  {} {}: {}\n", c["check_id"], c["resource"], c["check_name"]))
        .collect();
    Checkov {
        passed: verdicts("passed_checks"),
        failed,
        failures,
    }
}

/// cfn-lint's findings of the kit's own rules on `template`, as
/// `(rule id, logical id)` pairs.
fn kit_cfn_lint_findings(template: &Path) -> (BTreeSet<(String, String)>, String) {
    let out = run({
        let mut c = Command::new(venv_tool("cfn-lint"));
        c.args(["--format", "json", "--append-rules"])
            .arg(policies("cfn-lint"))
            .arg("--")
            .arg(template);
        c
    });
    let findings: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "cfn-lint printed no JSON ({e}), {}:\n{}{}",
            out.status,
            lossy(&out.stdout),
            lossy(&out.stderr)
        )
    });
    let pairs = findings
        .iter()
        .filter(|f| f["Rule"]["Id"].as_str().is_some_and(|id| id.starts_with("E9")))
        .map(|f| {
            let rule = f["Rule"]["Id"].as_str().unwrap_or_default().to_owned();
            let resource = f["Location"]["Path"][1].as_str().unwrap_or_default().to_owned();
            (rule, resource)
        })
        .collect();
    (pairs, serde_json::to_string_pretty(&findings).unwrap())
}

fn resources_of_type(t: &Value, kind: &str) -> Vec<String> {
    t["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .map(|(id, _)| format!("{kind}.{id}"))
        .collect()
}

#[test]
fn committed_template_passes_the_policy_checks() {
    let path = workspace_root().join(COMMITTED);
    let result = checkov(&path);
    assert!(
        result.failed.is_empty(),
        "checkov rejects {COMMITTED}:\n{}",
        result.failures
    );
    let rendered = serde_json::to_value(stack::template()).unwrap();
    for (check, kind) in ENFORCED {
        let resources = resources_of_type(&rendered, kind);
        assert!(!resources.is_empty(), "no {kind} in the template");
        for resource in resources {
            assert!(
                result.passed.contains(&(check.to_string(), resource.clone())),
                "{check} did not run on {resource}: is the policy in tests/policies/checkov loaded?"
            );
        }
    }
    let (findings, report) = kit_cfn_lint_findings(&path);
    assert!(
        findings.is_empty(),
        "cfn-lint's kit rules reject {COMMITTED}:\n{report}"
    );
}

/// The kit's template with one weakness per check: every role, table and
/// queue keeps its logical id, so each failure names where it was planted.
fn weakened_template() -> Value {
    let mut t = stack::template();
    // A resource wildcard on the API role's (specific) actions.
    match &mut t.resources.get_mut(logical::API_ROLE).unwrap().kind {
        ResourceKind::Role(role) => {
            role.policies[0].policy_document.statement[0]
                .resource
                .push(Expr::Literal(Literal::String("*".to_owned())));
        }
        other => panic!("{} is not a role: {other:?}", logical::API_ROLE),
    }
    match &mut t.resources.get_mut(logical::RESOURCES_TABLE).unwrap().kind {
        ResourceKind::Table(table) => {
            table
                .point_in_time_recovery_specification
                .point_in_time_recovery_enabled = false;
            table.sse_specification.sse_enabled = false;
        }
        other => panic!("{} is not a table: {other:?}", logical::RESOURCES_TABLE),
    }
    t.resources.get_mut(logical::COUNTERS_TABLE).unwrap().deletion_policy = Some(Policy::Delete);
    match &mut t.resources.get_mut(logical::DLQ1).unwrap().kind {
        ResourceKind::Queue(queue) => queue.sqs_managed_sse_enabled = false,
        other => panic!("{} is not a queue: {other:?}", logical::DLQ1),
    }
    // The typed model has no wildcard action (its `Action` enum names exact
    // operations), so those are planted in the rendered tree.
    let mut rendered = serde_json::to_value(&t).unwrap();
    let push = |rendered: &mut Value, role: &str, statement: Value| {
        rendered["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("{role} has no inline policy statements"))
            .push(statement);
    };
    // A service wildcard on a specific table.
    push(
        &mut rendered,
        logical::STREAM_COUNTER_ROLE,
        json!({"Effect": "Allow", "Action": ["dynamodb:*"], "Resource": [{"Fn::GetAtt": [logical::COUNTERS_TABLE, "Arn"]}]}),
    );
    // Everything on everything.
    push(
        &mut rendered,
        logical::DLQ_REPROCESSOR_ROLE,
        json!({"Effect": "Allow", "Action": ["dynamodb:*"], "Resource": ["*"]}),
    );
    rendered
}

#[test]
fn weakened_template_is_rejected_by_the_policy_checks() {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hybrid-counter-weakened.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&weakened_template()).unwrap()).unwrap();
    let result = checkov(&path);
    let expected = [
        ("CKV2_HCK_2", "AWS::IAM::Role", logical::API_ROLE),
        ("CKV2_HCK_1", "AWS::IAM::Role", logical::STREAM_COUNTER_ROLE),
        ("CKV2_HCK_1", "AWS::IAM::Role", logical::DLQ_REPROCESSOR_ROLE),
        ("CKV2_HCK_2", "AWS::IAM::Role", logical::DLQ_REPROCESSOR_ROLE),
        ("CKV_AWS_111", "AWS::IAM::Role", logical::DLQ_REPROCESSOR_ROLE),
        ("CKV_AWS_28", "AWS::DynamoDB::Table", logical::RESOURCES_TABLE),
        ("CKV2_HCK_3", "AWS::DynamoDB::Table", logical::RESOURCES_TABLE),
        ("CKV2_HCK_4", "AWS::SQS::Queue", logical::DLQ1),
    ];
    for (check, kind, id) in expected {
        assert!(
            result.failed.contains(&(check.to_owned(), format!("{kind}.{id}"))),
            "checkov did not report {check} on {id}; it reported:\n{}",
            result.failures
        );
    }
    // Only the planted weaknesses: the untouched resources still pass.
    for (_, resource) in &result.failed {
        let id = resource.split_once('.').map_or(resource.as_str(), |(_, id)| id);
        assert!(
            [
                logical::API_ROLE,
                logical::STREAM_COUNTER_ROLE,
                logical::DLQ_REPROCESSOR_ROLE,
                logical::RESOURCES_TABLE,
                logical::DLQ1
            ]
            .contains(&id),
            "checkov rejects untouched {resource}:\n{}",
            result.failures
        );
    }
    let (findings, report) = kit_cfn_lint_findings(&path);
    assert_eq!(
        findings,
        BTreeSet::from([("E9001".to_owned(), logical::COUNTERS_TABLE.to_owned())]),
        "{report}"
    );
}
