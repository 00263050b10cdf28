//! The scheduled drift check (`handlers/drift-check`): its parameters,
//! function, role and log group, and — only when `DriftCheckSchedule` is
//! not empty — the EventBridge rule that runs it and the permission that
//! lets the rule invoke it.
//!
//! An `AWS::Events::Rule` with a `ScheduleExpression` rather than an
//! `AWS::Scheduler::Schedule`: both run a Lambda on `rate(...)` or
//! `cron(...)` on AWS, and the rule also deploys on the emulator the kit's
//! tests use (fakecloud creates it, its target and the permission). The
//! rule invokes the function asynchronously; a run that fails is retried by
//! Lambda and, at the latest, by the next tick, from the same cursor.
//!
//! The role reads (Query on both tables, a keys-only Scan of the counters
//! table) and writes one item: `GetItem`/`PutItem` on the counters table
//! only under the partition key of the kit's state
//! ([`keys::KIT_STATE_SCOPE`], `dynamodb:LeadingKeys`), which no scope can
//! name. It cannot write a counter or a resource item.

use hybrid_counter::audit::drift::DEFAULT_BUDGET;
use hybrid_counter::config::{ENV_DRIFT_CHECK_BUDGET, ENV_DRIFT_CHECK_SCHEDULE, ENV_LIMITS_FILE_URI};
use hybrid_counter::keys;

use crate::expr::Expr;
use crate::kit::{FunctionSpec, add_function, arn, code_key};
use crate::logical::LIMITS_FILE_SET;
use crate::resources::events::{RetryPolicy, Rule, RuleState, Target};
use crate::resources::iam::{Action, InlinePolicy, Statement};
use crate::resources::lambda::{Permission, PermissionAction};
use crate::template::{LiveChange, Parameter, Resource, Template};
use crate::{logical, outputs, params};

/// Seconds a run may take. The default budget reads in seconds; the rest is
/// room for throttled reads and larger budgets.
pub const DRIFT_CHECK_TIMEOUT: u32 = 300;

/// What `LimitsFileUri` accepts: empty, or `s3://` and a bucket name (3 to
/// 63 lowercase letters, digits, dots and hyphens) and a key without `*`
/// or `?` (which would make the role's grant a wildcard), `$` (an IAM
/// policy variable), white space (trimmed by the handler, not by the
/// grant) or `:` (a second `s3://`, on which the template splits): each
/// of these would make the grant name another object than the one read.
pub const LIMITS_FILE_URI_PATTERN: &str = "^$|^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^*?$:\\s]+$";

/// A delivery EventBridge could not make is dropped after this long: by
/// then the next tick is due.
pub const MAXIMUM_EVENT_AGE_SECONDS: u32 = 300;

const EVENTS_SERVICE: &str = "events.amazonaws.com";

pub(crate) const SPEC: FunctionSpec = FunctionSpec {
    function: logical::DRIFT_CHECK_FUNCTION,
    role: logical::DRIFT_CHECK_ROLE,
    log_group: logical::DRIFT_CHECK_LOG_GROUP,
    name_suffix: "drift-check",
    code_key: params::DRIFT_CHECK_CODE_KEY,
    timeout: DRIFT_CHECK_TIMEOUT,
    // The audit reads BE by the admission mode and both counters' shards.
    default_limit: true,
    ec_shards: true,
    permanent_failures: false,
    permissions,
    conditional_policies: limits_file_policies,
    environment,
};

/// Adds the drift check to `t`.
pub fn add(t: &mut Template) {
    t.parameter(
        params::DRIFT_CHECK_SCHEDULE,
        Parameter::string(
            "How often the drift check runs: an EventBridge schedule expression such as rate(15 minutes) \
             or cron(0 * * * ? *). Empty (the default): the drift check is off; its function is deployed \
             but nothing invokes it.",
        )
        .default_string("")
        .length(0, 256)
        .pattern("^$|^(rate|cron)\\(.+\\)$", "empty, rate(...) or cron(...)")
        .effect(
            "The EventBridge rule that invokes the drift-check function (created only when not empty), and \
             its DRIFT_CHECK_SCHEDULE, which the local runner plays.",
            LiveChange::Safe,
            "The rule is created, changed or deleted in place. The drift check only reads; turning it off \
             leaves its last run in `counterctl status`.",
        ),
    );
    t.parameter(
        params::DRIFT_CHECK_READ_BUDGET,
        Parameter::number(
            "Items one drift-check run may read (counters-table keys scanned plus each audited scope's \
             counter and resource items); the next run resumes where it stopped. A run audits at least \
             one scope, so a scope larger than the budget is still checked.",
            i64::try_from(DEFAULT_BUDGET).unwrap_or(i64::MAX),
            100,
            10_000_000,
        )
        .effect(
            "DRIFT_CHECK_BUDGET of the drift-check function: how many items one run reads, so how many \
             scopes it audits and what it costs.",
            LiveChange::Safe,
            "Applies from the next run, which resumes from the recorded cursor.",
        ),
    );
    t.parameter(
        params::LIMITS_FILE_URI,
        Parameter::string(
            "The reviewed limits file (docs/limits.schema.json) the drift check compares the per-scope \
             limit overrides with, as s3://bucket/key, the bucket in the stack's region. Read only by \
             the scheduled drift check: needs DriftCheckSchedule. Empty (the default): no comparison.",
        )
        .default_string("")
        .length(0, 1024)
        .pattern(
            LIMITS_FILE_URI_PATTERN,
            "empty, or s3://bucket/key (a key without *, ?, $, : or white space)",
        )
        .effect(
            "LIMITS_FILE_URI of the drift-check function, s3:GetObject on that one object for its role, and \
             the limits-drift and limits-file alarms (all only when not empty).",
            LiveChange::Safe,
            "Applies from the next drift-check run; the object is read at every run, so a new version of \
             the file needs no deploy.",
        ),
    );
    t.parameter(params::DRIFT_CHECK_CODE_KEY, code_key("drift check"));
    t.condition(
        logical::DRIFT_CHECK_ENABLED,
        Expr::differs(params::DRIFT_CHECK_SCHEDULE, ""),
    );
    t.condition(LIMITS_FILE_SET, Expr::differs(params::LIMITS_FILE_URI, ""));
    add_function(t, &SPEC);
    t.resource(
        logical::DRIFT_CHECK_RULE,
        Resource::from(Rule {
            name: Expr::sub("${NamePrefix}-drift-check"),
            description: "Runs the kit's drift check (report-only audit within a read budget).".to_owned(),
            schedule_expression: Expr::reference(params::DRIFT_CHECK_SCHEDULE),
            state: RuleState::Enabled,
            targets: vec![Target {
                arn: arn(logical::DRIFT_CHECK_FUNCTION),
                id: "drift-check".to_owned(),
                retry_policy: Some(RetryPolicy {
                    maximum_event_age_in_seconds: MAXIMUM_EVENT_AGE_SECONDS,
                    maximum_retry_attempts: 2,
                }),
            }],
        })
        .only_if(logical::DRIFT_CHECK_ENABLED),
    );
    t.resource(
        logical::DRIFT_CHECK_PERMISSION,
        Resource::from(Permission {
            action: PermissionAction::InvokeFunction,
            function_name: arn(logical::DRIFT_CHECK_FUNCTION),
            principal: EVENTS_SERVICE.to_owned(),
            source_arn: arn(logical::DRIFT_CHECK_RULE),
        })
        .only_if(logical::DRIFT_CHECK_ENABLED),
    );
    t.output(
        outputs::DRIFT_CHECK_FUNCTION,
        "Drift check function name",
        Expr::reference(logical::DRIFT_CHECK_FUNCTION),
    );
}

fn environment() -> Vec<(&'static str, Expr)> {
    vec![
        (ENV_DRIFT_CHECK_BUDGET, Expr::reference(params::DRIFT_CHECK_READ_BUDGET)),
        // Reported by the function and played by the local runner.
        (ENV_DRIFT_CHECK_SCHEDULE, Expr::reference(params::DRIFT_CHECK_SCHEDULE)),
        // Empty when unset: the function then makes no comparison.
        (ENV_LIMITS_FILE_URI, Expr::reference(params::LIMITS_FILE_URI)),
    ]
}

/// With a limits file: GetObject on that one object, nothing else of its
/// bucket (a missing object then reads AccessDenied, as the function's
/// error says).
fn limits_file_policies() -> Vec<InlinePolicy> {
    vec![
        InlinePolicy::new(
            "limits-file",
            vec![Statement::allow(
                "ReadLimitsFile",
                &[Action::S3GetObject],
                vec![crate::access::limits_file_arn()],
            )],
        )
        .only_if(LIMITS_FILE_SET),
    ]
}

fn permissions() -> Vec<Statement> {
    vec![
        Statement::allow(
            "CountersTableRead",
            // Query: a scope's counters (read twice per audit); Scan: the
            // scopes, keys only, page by page from the cursor.
            &[Action::DynamoDbQuery, Action::DynamoDbScan],
            vec![arn(logical::COUNTERS_TABLE)],
        ),
        Statement::allow(
            "ResourcesTableRead",
            // A scope's items, one paginated Query.
            &[Action::DynamoDbQuery],
            vec![arn(logical::RESOURCES_TABLE)],
        ),
        Statement::allow(
            "OwnStateItem",
            // The cursor and last run, in the one partition no scope can
            // name: never a counter.
            &[Action::DynamoDbGetItem, Action::DynamoDbPutItem],
            vec![arn(logical::COUNTERS_TABLE)],
        )
        .when(
            "ForAllValues:StringEquals",
            "dynamodb:LeadingKeys",
            Expr::List(vec![keys::KIT_STATE_SCOPE.into()]),
        ),
        crate::kit::permissions::layout_record(),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn rendered() -> Value {
        serde_json::to_value(crate::template()).unwrap()
    }

    #[test]
    fn the_schedule_is_off_by_default_and_gates_the_rule_and_its_permission() {
        let t = rendered();
        assert_eq!(t["Parameters"][params::DRIFT_CHECK_SCHEDULE]["Default"], json!(""));
        assert_eq!(
            t["Conditions"][logical::DRIFT_CHECK_ENABLED],
            json!({"Fn::Not": [{"Fn::Equals": [{"Ref": params::DRIFT_CHECK_SCHEDULE}, ""]}]})
        );
        for id in [logical::DRIFT_CHECK_RULE, logical::DRIFT_CHECK_PERMISSION] {
            assert_eq!(
                t["Resources"][id]["Condition"],
                json!(logical::DRIFT_CHECK_ENABLED),
                "{id}"
            );
        }
        // The function is always there (status reads its name), unconditioned.
        assert!(t["Resources"][logical::DRIFT_CHECK_FUNCTION].get("Condition").is_none());
        let rule = &t["Resources"][logical::DRIFT_CHECK_RULE]["Properties"];
        assert_eq!(rule["ScheduleExpression"], json!({"Ref": params::DRIFT_CHECK_SCHEDULE}));
        assert_eq!(
            rule["Targets"][0]["Arn"],
            json!({"Fn::GetAtt": [logical::DRIFT_CHECK_FUNCTION, "Arn"]})
        );
        let permission = &t["Resources"][logical::DRIFT_CHECK_PERMISSION]["Properties"];
        assert_eq!(permission["Principal"], json!("events.amazonaws.com"));
        assert_eq!(
            permission["SourceArn"],
            json!({"Fn::GetAtt": [logical::DRIFT_CHECK_RULE, "Arn"]}),
            "only the kit's rule may invoke it"
        );
    }

    #[test]
    fn the_role_reads_and_writes_only_its_own_state_item() {
        let t = rendered();
        let statements =
            t["Resources"][logical::DRIFT_CHECK_ROLE]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
                .as_array()
                .unwrap()
                .clone();
        let writes: Vec<&Value> = statements
            .iter()
            .filter(|s| {
                s["Action"].as_array().unwrap().iter().any(|a| {
                    ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"].contains(&a.as_str().unwrap())
                })
            })
            .collect();
        assert_eq!(writes.len(), 1, "{statements:#?}");
        assert_eq!(
            writes[0]["Condition"],
            json!({"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [keys::KIT_STATE_SCOPE]}})
        );
        assert_eq!(writes[0]["Action"], json!(["dynamodb:GetItem", "dynamodb:PutItem"]));
    }

    #[test]
    fn the_function_gets_its_budget_schedule_and_the_audits_settings() {
        let t = rendered();
        let variables = &t["Resources"][logical::DRIFT_CHECK_FUNCTION]["Properties"]["Environment"]["Variables"];
        assert_eq!(
            variables[ENV_DRIFT_CHECK_BUDGET],
            json!({"Ref": params::DRIFT_CHECK_READ_BUDGET})
        );
        assert_eq!(
            variables[ENV_DRIFT_CHECK_SCHEDULE],
            json!({"Ref": params::DRIFT_CHECK_SCHEDULE})
        );
        for name in [
            "ADMISSION_MODE",
            "BE_SHARDS",
            "EC_SHARDS",
            "SCOPE_KEY_SHARDS",
            "COUNTERS_TABLE",
            "RESOURCES_TABLE",
        ] {
            assert!(variables.get(name).is_some(), "{name}: {variables}");
        }
    }

    #[test]
    fn a_limits_file_is_off_by_default_and_its_uri_must_name_one_object() {
        let t = rendered();
        let parameter = &t["Parameters"][params::LIMITS_FILE_URI];
        assert_eq!(parameter["Default"], json!(""));
        assert_eq!(
            t["Conditions"][LIMITS_FILE_SET],
            json!({"Fn::Not": [{"Fn::Equals": [{"Ref": params::LIMITS_FILE_URI}, ""]}]})
        );
        let pattern = regex::Regex::new(parameter["AllowedPattern"].as_str().unwrap()).unwrap();
        for good in ["", "s3://ops-config/limits/prod.yaml", "s3://a.b-c/limits.yaml"] {
            assert!(pattern.is_match(good), "{good:?}");
        }
        for bad in [
            "ops-config/limits.yaml",
            "s3://ops-config",
            "s3://ops-config/",
            "s3://Ops/limits.yaml",
            "s3://ops-config/*",
            "s3://ops-config/limits?.yaml",
            "https://ops-config.s3.amazonaws.com/limits.yaml",
            "s3://ops-config/x/s3://other/limits.yaml",
            "s3://ops-config/limits.yaml ",
            "s3://ops-config/${aws:username}.yaml",
        ] {
            assert!(!pattern.is_match(bad), "{bad:?}");
        }
        let variables = &t["Resources"][logical::DRIFT_CHECK_FUNCTION]["Properties"]["Environment"]["Variables"];
        assert_eq!(variables[ENV_LIMITS_FILE_URI], json!({"Ref": params::LIMITS_FILE_URI}));
    }

    #[test]
    fn the_role_reads_the_limits_file_object_alone_and_only_when_set() {
        let t = rendered();
        let policies = t["Resources"][logical::DRIFT_CHECK_ROLE]["Properties"]["Policies"]
            .as_array()
            .unwrap();
        let reads: Vec<&Value> = policies.iter().filter(|p| p.to_string().contains("s3:")).collect();
        assert_eq!(reads.len(), 1, "{policies:#?}");
        let policy = &reads[0]["Fn::If"];
        assert_eq!(policy[0], json!(LIMITS_FILE_SET));
        assert_eq!(policy[2], json!({"Ref": "AWS::NoValue"}));
        let statements = policy[1]["PolicyDocument"]["Statement"].as_array().unwrap();
        assert_eq!(statements.len(), 1);
        assert_eq!(statements[0]["Action"], json!(["s3:GetObject"]));
        assert_eq!(
            statements[0]["Resource"],
            json!([{"Fn::Join": ["", [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":s3:::",
                {"Fn::Select": ["1", {"Fn::Split": ["s3://", {"Ref": params::LIMITS_FILE_URI}]}]},
            ]]}])
        );
    }
}
