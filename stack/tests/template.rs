//! What the kit's stack guarantees: the committed YAML is exactly the
//! generator's output and passes cfn-lint, and the model keeps the promises
//! the design makes — retained, encrypted, recoverable tables; roles without
//! wildcards (what each grants is checked against the code in
//! `tests/access.rs`); a stream mapping that bisects, reports partial
//! failures, filters with the consumer's own patterns and fails over to
//! DLQ1; DLQ1 redriving to DLQ2; and outputs under the names the CLI reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use stack::expr::{Expr, Literal};
use stack::resources::dynamodb::{BillingMode, KeyType, StreamViewType, Table};
use stack::resources::iam::{Role, Statement};
use stack::resources::lambda::{AuthType, EventSourceMapping, Function, FunctionResponseType, StartingPosition, Url};
use stack::resources::sqs::Queue;
use stack::template::Policy;
use stack::{ResourceKind, Template, failed_batches, logical, outputs, params};

const COMMITTED: &str = "templates/hybrid-counter.yaml";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn committed_path() -> PathBuf {
    workspace_root().join(COMMITTED)
}

macro_rules! kind {
    ($template:expr, $id:expr, $variant:ident) => {
        match &$template
            .resources
            .get($id)
            .unwrap_or_else(|| panic!("no resource {}", $id))
            .kind
        {
            ResourceKind::$variant(properties) => properties,
            other => panic!("{} is not a {}: {other:?}", $id, stringify!($variant)),
        }
    };
}

fn table<'a>(t: &'a Template, id: &str) -> &'a Table {
    kind!(t, id, Table)
}
fn queue<'a>(t: &'a Template, id: &str) -> &'a Queue {
    kind!(t, id, Queue)
}
fn function<'a>(t: &'a Template, id: &str) -> &'a Function {
    kind!(t, id, Function)
}
fn mapping<'a>(t: &'a Template, id: &str) -> &'a EventSourceMapping {
    kind!(t, id, EventSourceMapping)
}

fn reference(id: &str) -> Expr {
    Expr::reference(id)
}

fn arn(id: &str) -> Expr {
    Expr::get_att(id, "Arn")
}

/// The path of the first difference between two trees, for a readable
/// failure message.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(u), Some(v)) => first_difference(u, v, &format!("{path}.{k}")),
                _ => Some(format!("{path}.{k}")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(u, v, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(path.to_owned()),
    }
}

#[test]
fn committed_template_matches_the_generator() {
    let text = std::fs::read_to_string(committed_path())
        .unwrap_or_else(|e| panic!("cannot read {COMMITTED} ({e}); fix: make templates"));
    let committed: Value =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{COMMITTED} is not YAML ({e}); fix: make templates"));
    let generated: Value = serde_yaml_ng::from_str(&stack::to_yaml(&stack::template())).unwrap();
    // The rendering must also say exactly what the model says.
    assert_eq!(generated, serde_json::to_value(stack::template()).unwrap());
    if let Some(path) = first_difference(&committed, &generated, "$") {
        panic!("{COMMITTED} is stale (first difference at {path}); fix: make templates");
    }
}

const REFERENCE: &str = "docs/configuration.md";

#[test]
fn committed_configuration_reference_matches_the_generator() {
    let committed = std::fs::read_to_string(workspace_root().join(REFERENCE))
        .unwrap_or_else(|e| panic!("cannot read {REFERENCE} ({e}); fix: make docs"));
    let generated = stack::reference::configuration_markdown(&stack::template());
    if let Some((n, (c, g))) = committed
        .lines()
        .zip(generated.lines())
        .enumerate()
        .find(|(_, (c, g))| c != g)
    {
        panic!(
            "{REFERENCE} is stale (line {}: committed {c:?}, generated {g:?}); fix: make docs",
            n + 1
        );
    }
    assert_eq!(
        committed.lines().count(),
        generated.lines().count(),
        "{REFERENCE} is stale (its length differs); fix: make docs"
    );
}

#[test]
fn every_parameter_says_what_it_changes_and_whether_a_live_change_is_safe() {
    for (name, parameter) in &stack::template().parameters {
        let effect = parameter
            .effect
            .as_ref()
            .unwrap_or_else(|| panic!("parameter {name} has no .effect(...): say what it changes at runtime"));
        assert!(!effect.runtime.trim().is_empty(), "{name}: empty runtime effect");
        assert!(!effect.note.trim().is_empty(), "{name}: empty live-change note");
    }
}

#[test]
fn the_template_and_the_reference_take_each_description_from_the_model() {
    let mut t = stack::template();
    let marker = "Marker description of the default limit, written once.";
    t.parameters.get_mut(params::DEFAULT_LIMIT).unwrap().description = marker.to_owned();
    let yaml: Value = serde_yaml_ng::from_str(&stack::to_yaml(&t)).unwrap();
    assert_eq!(yaml["Parameters"][params::DEFAULT_LIMIT]["Description"], marker);
    let markdown = stack::reference::configuration_markdown(&t);
    assert!(
        markdown.contains(&format!("## `{}`\n\n{marker}\n", params::DEFAULT_LIMIT)),
        "{markdown}"
    );
    // The runtime effect is reference-only: the template does not carry it.
    let effect = &t.parameters[params::DEFAULT_LIMIT].effect.as_ref().unwrap().runtime;
    assert!(markdown.contains(effect.as_str()));
    assert!(!stack::to_yaml(&t).contains(effect.as_str()));
}

fn find_cfn_lint() -> Option<PathBuf> {
    let venv = workspace_root().join(".venv/bin/cfn-lint");
    if venv.is_file() {
        return Some(venv);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("cfn-lint"))
        .find(|candidate| candidate.is_file())
}

#[test]
fn template_passes_cfn_lint() {
    let Some(cfn_lint) = find_cfn_lint() else {
        panic!("cfn-lint not found in .venv/bin or on PATH; run `make tools`");
    };
    let out = Command::new(&cfn_lint)
        .arg("--")
        .arg(committed_path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; run `make tools`", cfn_lint.display()));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "cfn-lint ({}) on {COMMITTED}: {}\n{report}",
        cfn_lint.display(),
        out.status
    );
}

/// Kept on stack deletion and replacement, deleted only when the create
/// that made them rolls back (`RetainExceptOnCreate`): a failed first
/// create must not leave fixed-name tables behind that fail every retry
/// with "already exists". `UpdateReplacePolicy` does not take
/// `RetainExceptOnCreate`, so it stays `Retain`.
#[test]
fn tables_are_retained_except_by_a_failed_create_encrypted_and_recoverable() {
    let t = stack::template();
    for id in [logical::RESOURCES_TABLE, logical::COUNTERS_TABLE] {
        let resource = &t.resources[id];
        assert_eq!(resource.deletion_policy, Some(Policy::RetainExceptOnCreate), "{id}");
        assert_eq!(resource.update_replace_policy, Some(Policy::Retain), "{id}");
        let table = table(&t, id);
        assert!(table.sse_specification.sse_enabled, "{id}");
        assert!(
            table
                .point_in_time_recovery_specification
                .point_in_time_recovery_enabled,
            "{id}"
        );
        assert_eq!(table.billing_mode, BillingMode::PayPerRequest, "{id}");
    }
}

/// The key attribute of `key_type`, if any.
fn key(table: &Table, key_type: KeyType) -> Option<&str> {
    table
        .key_schema
        .iter()
        .find(|k| k.key_type == key_type)
        .map(|k| k.attribute_name.as_str())
}

#[test]
fn tables_use_the_libraries_key_layout() {
    let t = stack::template();
    let resources = table(&t, logical::RESOURCES_TABLE);
    assert_eq!(key(resources, KeyType::Hash), Some(hybrid_counter::keys::SCOPE));
    assert_eq!(key(resources, KeyType::Range), Some(hybrid_counter::keys::ID));
    assert_eq!(
        resources.stream_specification.as_ref().map(|s| s.stream_view_type),
        Some(StreamViewType::NewAndOldImages)
    );
    let counters = table(&t, logical::COUNTERS_TABLE);
    assert_eq!(key(counters, KeyType::Hash), Some(hybrid_counter::keys::SCOPE));
    assert_eq!(key(counters, KeyType::Range), Some(hybrid_counter::keys::NAME));
    assert!(counters.stream_specification.is_none());
}

fn roles(t: &Template) -> impl Iterator<Item = (&String, &Role)> {
    t.resources.iter().filter_map(|(id, r)| match &r.kind {
        ResourceKind::Role(role) => Some((id, role)),
        _ => None,
    })
}

/// Every statement of the role's inline policies.
fn permission_statements(role: &Role) -> impl Iterator<Item = &Statement> {
    role.policies.iter().flat_map(|p| p.policy_document.statement.iter())
}

/// The literal string, if `expr` is one: a bare `*` without
/// pattern-matching on the nesting.
fn as_literal_str(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Literal(Literal::String(s)) => Some(s),
        _ => None,
    }
}

#[test]
fn roles_grant_no_wildcard_action_or_resource() {
    let t = stack::template();
    assert_eq!(roles(&t).count(), 4);
    for (id, role) in roles(&t) {
        for statement in permission_statements(role) {
            for action in &statement.action {
                assert!(!action.as_str().contains('*'), "{id}: {}", action.as_str());
            }
            assert!(!statement.resource.is_empty(), "{id}: a statement without resources");
            for resource in &statement.resource {
                assert!(
                    as_literal_str(resource).is_none_or(|s| !s.contains('*')),
                    "{id}: literal resource {resource:?}"
                );
            }
        }
    }
    // Also on the rendered document, where nothing can hide in a nesting.
    let rendered = serde_json::to_value(&t).unwrap();
    for (id, role) in rendered["Resources"].as_object().unwrap() {
        if role["Type"] != "AWS::IAM::Role" {
            continue;
        }
        for policy in role["Properties"]["Policies"].as_array().unwrap() {
            // A policy held only under a template condition is the second
            // element of its `Fn::If`.
            let policy = policy.get("Fn::If").map_or(policy, |branches| &branches[1]);
            for statement in policy["PolicyDocument"]["Statement"].as_array().unwrap() {
                assert!(!statement["Action"].to_string().contains('*'), "{id}");
                assert!(
                    !statement["Resource"].as_array().unwrap().contains(&Value::from("*")),
                    "{id}"
                );
            }
        }
    }
}

// What each role grants, action by action and resource by resource, is
// checked against the code's own SDK calls in `tests/access.rs`.

#[test]
fn each_function_runs_as_its_own_role_and_logs_to_its_own_group() {
    let t = stack::template();
    let cases = [
        (
            logical::STREAM_COUNTER_FUNCTION,
            logical::STREAM_COUNTER_ROLE,
            logical::STREAM_COUNTER_LOG_GROUP,
            60,
        ),
        (
            logical::DLQ_REPROCESSOR_FUNCTION,
            logical::DLQ_REPROCESSOR_ROLE,
            logical::DLQ_REPROCESSOR_LOG_GROUP,
            120,
        ),
        (logical::API_FUNCTION, logical::API_ROLE, logical::API_LOG_GROUP, 10),
        (
            logical::DRIFT_CHECK_FUNCTION,
            logical::DRIFT_CHECK_ROLE,
            logical::DRIFT_CHECK_LOG_GROUP,
            300,
        ),
    ];
    for (function_id, role_id, group_id, timeout) in cases {
        let f = function(&t, function_id);
        assert_eq!(f.role, arn(role_id), "{function_id}");
        assert_eq!(f.logging_config.log_group, reference(group_id), "{function_id}");
        assert_eq!(f.timeout, timeout, "{function_id}");
        assert_eq!(f.handler, "bootstrap");
        assert_eq!(f.architectures, vec![reference(params::LAMBDA_ARCHITECTURE)]);
        assert!(matches!(&t.resources[group_id].kind, ResourceKind::LogGroup(_)));
    }
}

#[test]
fn functions_get_the_environment_their_handlers_read() {
    use hybrid_counter::config::{ENV_COUNTERS_TABLE, ENV_DEFAULT_LIMIT, ENV_RESOURCES_TABLE};
    let t = stack::template();
    let env = |id: &str| function(&t, id).environment.variables.clone();
    // Every function: the tables, and the stack's name for its metrics.
    let tables = [
        (ENV_RESOURCES_TABLE.to_owned(), reference(logical::RESOURCES_TABLE)),
        (ENV_COUNTERS_TABLE.to_owned(), reference(logical::COUNTERS_TABLE)),
        (
            hybrid_counter::metrics::ENV_STACK_NAME.to_owned(),
            reference("AWS::StackName"),
        ),
    ];
    let with = |extra: (&str, &str)| {
        let mut vars: BTreeMap<String, Expr> = tables.clone().into();
        vars.insert(extra.0.to_owned(), reference(extra.1));
        vars
    };
    // Every function that reads or counts items: which key an item lives
    // under and which counters key counts it.
    let layout = [
        (
            hybrid_counter::config::ENV_SCOPE_KEYS.to_owned(),
            reference(params::SCOPE_KEY_SHARDS),
        ),
        (
            hybrid_counter::config::ENV_RESOURCE_KEY_SPREAD.to_owned(),
            reference(params::RESOURCE_KEY_SPREAD),
        ),
    ];
    let mut stream = with((hybrid_counter::config::ENV_EC_SHARDS, params::EC_SHARD_COUNT));
    stream.insert(
        hybrid_counter::config::ENV_PROCESSING_MODE.to_owned(),
        reference(params::PROCESSING_MODE),
    );
    stream.extend(layout.clone());
    assert_eq!(env(logical::STREAM_COUNTER_FUNCTION), stream);
    // The reprocessor also knows the stream its mapping's records come from
    // (an on-failure record of any other is a permanent failure) and DLQ2.
    let mut reprocessor = stream.clone();
    reprocessor.insert(
        hybrid_counter::config::ENV_STREAM_ARN.to_owned(),
        Expr::get_att(logical::RESOURCES_TABLE, "StreamArn"),
    );
    reprocessor.insert(
        hybrid_counter::config::ENV_DLQ2_URL.to_owned(),
        reference(logical::DLQ2),
    );
    assert_eq!(env(logical::DLQ_REPROCESSOR_FUNCTION), reprocessor);
    assert_eq!(
        mapping(&t, logical::STREAM_MAPPING).event_source_arn,
        reprocessor[hybrid_counter::config::ENV_STREAM_ARN],
        "the stream the reprocessor expects is the one the stream mapping reads"
    );
    let mut api = with((ENV_DEFAULT_LIMIT, params::DEFAULT_LIMIT));
    api.insert(
        hybrid_counter::config::ENV_ADMISSION_MODE.to_owned(),
        reference(params::ADMISSION_MODE),
    );
    api.insert(
        hybrid_counter::config::ENV_BE_SHARDS.to_owned(),
        reference(params::BE_SHARD_COUNT),
    );
    api.extend(layout);
    api.insert(
        hybrid_counter::config::ENV_SCOPE_AUTHORIZATION.to_owned(),
        reference(params::SCOPE_AUTHORIZATION),
    );
    assert_eq!(env(logical::API_FUNCTION), api);
}

#[test]
fn every_shard_count_defaults_to_one_and_stays_within_what_the_functions_accept() {
    let t = stack::template();
    for (param, env) in [
        (params::BE_SHARD_COUNT, hybrid_counter::config::ENV_BE_SHARDS),
        (params::EC_SHARD_COUNT, hybrid_counter::config::ENV_EC_SHARDS),
        (params::SCOPE_KEY_SHARDS, hybrid_counter::config::ENV_SCOPE_KEYS),
        (
            params::RESOURCE_KEY_SPREAD,
            hybrid_counter::config::ENV_RESOURCE_KEY_SPREAD,
        ),
    ] {
        let p = &t.parameters[param];
        assert_eq!(
            serde_json::to_value(p).unwrap()["Default"],
            serde_json::json!(1),
            "{param}"
        );
        for value in [p.min_value.unwrap(), p.max_value.unwrap()] {
            let config = hybrid_counter::CounterConfig::from_lookup(|name| match name {
                "RESOURCES_TABLE" | "COUNTERS_TABLE" => Some("t".to_owned()),
                n if n == env => Some(value.to_string()),
                _ => None,
            });
            assert!(config.is_ok(), "{param} = {value}: {config:?}");
        }
        for value in [p.min_value.unwrap() - 1, p.max_value.unwrap() + 1] {
            let config = hybrid_counter::CounterConfig::from_lookup(|name| match name {
                "RESOURCES_TABLE" | "COUNTERS_TABLE" => Some("t".to_owned()),
                n if n == env => Some(value.to_string()),
                _ => None,
            });
            assert!(
                config.is_err(),
                "{param} = {value} is refused by the template and the functions alike"
            );
        }
    }
}

#[test]
fn admission_mode_is_a_closed_choice_defaulting_to_best_effort() {
    let t = stack::template();
    let p = &t.parameters[params::ADMISSION_MODE];
    assert_eq!(p.allowed_values, vec!["best-effort".to_owned(), "strict".to_owned()]);
    assert_eq!(
        serde_json::to_value(p).unwrap()["Default"],
        serde_json::json!("best-effort")
    );
    // Every allowed value is one the API's configuration accepts.
    for value in &p.allowed_values {
        let config = hybrid_counter::CounterConfig::from_lookup(|name| match name {
            "RESOURCES_TABLE" | "COUNTERS_TABLE" => Some("t".to_owned()),
            "ADMISSION_MODE" => Some(value.clone()),
            _ => None,
        })
        .unwrap();
        assert_eq!(config.admission.as_str(), value);
    }
}

#[test]
fn processing_mode_is_a_closed_choice_defaulting_to_batched() {
    let t = stack::template();
    let p = &t.parameters[params::PROCESSING_MODE];
    assert_eq!(p.allowed_values, vec!["batched".to_owned(), "per-record".to_owned()]);
    assert_eq!(
        serde_json::to_value(p).unwrap()["Default"],
        serde_json::json!("batched")
    );
    // Every allowed value is one the stream functions accept.
    for value in &p.allowed_values {
        let mode = hybrid_counter::CounterConfig::processing_mode_from_lookup(|name| {
            (name == "PROCESSING_MODE").then(|| value.clone())
        })
        .unwrap();
        assert_eq!(mode.as_str(), value);
    }
}

#[test]
fn stream_mapping_bisects_reports_item_failures_and_fails_over_to_dlq1() {
    let t = stack::template();
    let m = mapping(&t, logical::STREAM_MAPPING);
    assert_eq!(m.event_source_arn, Expr::get_att(logical::RESOURCES_TABLE, "StreamArn"));
    assert_eq!(m.function_name, reference(logical::STREAM_COUNTER_FUNCTION));
    assert_eq!(m.starting_position, Some(StartingPosition::TrimHorizon));
    assert_eq!(m.bisect_batch_on_function_error, Some(true));
    assert_eq!(
        m.function_response_types,
        vec![FunctionResponseType::ReportBatchItemFailures]
    );
    let on_failure = m.destination_config.as_ref().map(|d| &d.on_failure.destination);
    assert_eq!(
        on_failure,
        Some(&Expr::when(
            failed_batches::KEEP_PAYLOAD,
            arn(logical::FAILED_BATCH_BUCKET),
            arn(logical::DLQ1)
        )),
        "the bucket under FailedBatchRecords=payload, DLQ1 under pointer"
    );
    assert_eq!(m.batch_size, reference(params::STREAM_BATCH_SIZE));
    assert_eq!(
        m.parallelization_factor,
        Some(reference(params::PARALLELIZATION_FACTOR))
    );
    assert_eq!(
        m.maximum_retry_attempts,
        Some(reference(params::MAXIMUM_RETRY_ATTEMPTS))
    );
    assert_eq!(
        m.maximum_record_age_in_seconds,
        Some(reference(params::MAXIMUM_RECORD_AGE_IN_SECONDS))
    );
}

#[test]
fn the_stream_mapping_publishes_its_event_counts_and_the_queue_mapping_nothing_extra() {
    let t = stack::template();
    let stream = mapping(&t, logical::STREAM_MAPPING);
    assert_eq!(
        serde_json::to_value(&stream.metrics_config).unwrap(),
        serde_json::json!({"Metrics": ["EventCount"]}),
        "DroppedEventCount, which an alarm watches, is one of the EventCount metrics"
    );
    assert!(mapping(&t, logical::DLQ1_MAPPING).metrics_config.is_none());
}

#[test]
fn with_the_capacity_parameters_unset_the_tables_are_what_they_always_were() {
    let t = stack::template();
    for id in [logical::RESOURCES_TABLE, logical::COUNTERS_TABLE] {
        let table = serde_json::to_value(table(&t, id)).unwrap();
        for (property, condition) in [
            ("WarmThroughput", "WarmThroughputSet"),
            ("OnDemandThroughput", "MaxThroughputSet"),
            ("ContributorInsightsSpecification", "ContributorInsightsOn"),
        ] {
            let branches = &table[property]["Fn::If"];
            assert!(
                branches[0].as_str().unwrap().ends_with(condition),
                "{id}.{property}: {branches}"
            );
            assert_eq!(
                branches[2],
                serde_json::json!({"Ref": "AWS::NoValue"}),
                "{id}.{property}"
            );
        }
    }
    for (name, p) in &t.parameters {
        let capacity = name.contains("UnitsPerSecond") || name.contains("RequestUnits");
        if capacity {
            // Warm throughput is a String parameter (its pattern says "0 or at least N").
            assert!(
                p.default == Some(Literal::Integer(0)) || p.default == Some(Literal::String("0".to_owned())),
                "{name}: 0 is not set"
            );
        }
    }
    // Each condition of a default deploy: every unit parameter is 0, and
    // Contributor Insights is off by default.
    assert_eq!(
        t.parameters[params::CONTRIBUTOR_INSIGHTS].default,
        Some(Literal::String(stack::capacity::INSIGHTS_OFF.to_owned()))
    );
}

#[test]
fn stream_filter_is_the_consumers_own_definition() {
    let t = stack::template();
    let filters = &mapping(&t, logical::STREAM_MAPPING)
        .filter_criteria
        .as_ref()
        .expect("the stream mapping filters")
        .filters;
    let patterns: Vec<Value> = filters
        .iter()
        .map(|f| serde_json::from_str(&f.pattern).expect("each pattern is a JSON string"))
        .collect();
    assert_eq!(patterns, hybrid_counter::stream::filter::patterns());
}

#[test]
fn dlq1_is_consumed_by_the_reprocessor_with_partial_batch_failures() {
    let t = stack::template();
    let m = mapping(&t, logical::DLQ1_MAPPING);
    assert_eq!(m.event_source_arn, arn(logical::DLQ1));
    assert_eq!(m.function_name, reference(logical::DLQ_REPROCESSOR_FUNCTION));
    assert_eq!(m.batch_size, Expr::Literal(Literal::Integer(10)));
    assert_eq!(
        m.function_response_types,
        vec![FunctionResponseType::ReportBatchItemFailures]
    );
    // Stream-only settings would make CreateEventSourceMapping fail on a queue.
    assert!(m.starting_position.is_none() && m.bisect_batch_on_function_error.is_none());
}

#[test]
fn dlq1_redrives_to_dlq2_after_the_configured_receives() {
    let t = stack::template();
    let dlq1 = queue(&t, logical::DLQ1);
    let redrive = dlq1.redrive_policy.as_ref().expect("DLQ1 has a redrive policy");
    assert_eq!(redrive.dead_letter_target_arn, arn(logical::DLQ2));
    assert_eq!(redrive.max_receive_count, reference(params::DLQ1_MAX_RECEIVE_COUNT));
    let reprocessor_timeout = function(&t, logical::DLQ_REPROCESSOR_FUNCTION).timeout;
    assert_eq!(dlq1.visibility_timeout, Some(6 * reprocessor_timeout));
    let dlq2 = queue(&t, logical::DLQ2);
    assert!(dlq2.redrive_policy.is_none(), "DLQ2 is the end of the line");
    for q in [dlq1, dlq2] {
        assert!(q.sqs_managed_sse_enabled);
        assert_eq!(q.message_retention_period, 1_209_600);
    }
}

#[test]
fn record_age_stays_inside_the_streams_retention() {
    let t = stack::template();
    let p = &t.parameters[params::MAXIMUM_RECORD_AGE_IN_SECONDS];
    assert_eq!(p.min_value, Some(60));
    assert_eq!(p.max_value, Some(24 * 60 * 60));
    assert_eq!(p.default, Some(Literal::Integer(21_600)));
}

#[test]
fn api_url_requires_signed_requests() {
    let t = stack::template();
    let url: &Url = kind!(t, logical::API_FUNCTION_URL, Url);
    assert_eq!(url.auth_type, AuthType::AwsIam);
    assert_eq!(url.target_function_arn, arn(logical::API_FUNCTION));
}

#[test]
fn every_output_and_parameter_constant_is_in_the_template() {
    let t = stack::template();
    let output_names: BTreeSet<&str> = t.outputs.keys().map(String::as_str).collect();
    assert_eq!(
        output_names,
        outputs::ALL.into_iter().chain([outputs::FAILED_BATCH_BUCKET]).collect()
    );
    let parameter_names: BTreeSet<&str> = t.parameters.keys().map(String::as_str).collect();
    assert_eq!(parameter_names, params::ALL.into_iter().collect());
}

/// Every `Ref`, `Fn::GetAtt` and `${Name}` of `Fn::Sub` under `value`.
fn references(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("Ref") {
                found.push(target.clone());
            }
            if let Some(Value::Array(parts)) = map.get("Fn::GetAtt") {
                found.extend(parts.first().and_then(Value::as_str).map(str::to_owned));
            }
            if let Some(Value::String(template)) = map.get("Fn::Sub") {
                for piece in template.split("${").skip(1) {
                    let name = piece.split('}').next().unwrap_or_default();
                    found.push(name.split('.').next().unwrap_or_default().to_owned());
                }
            }
            map.values().for_each(|v| references(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, found)),
        _ => {}
    }
}

#[test]
fn every_reference_names_a_parameter_or_resource_and_every_parameter_is_used() {
    let t = stack::template();
    let rendered = serde_json::to_value(&t).unwrap();
    let mut found = Vec::new();
    references(&rendered["Resources"], &mut found);
    references(&rendered["Outputs"], &mut found);
    references(&rendered["Conditions"], &mut found);
    for name in &found {
        assert!(
            t.parameters.contains_key(name) || t.resources.contains_key(name) || name.starts_with("AWS::"),
            "dangling reference to {name}"
        );
    }
    for name in t.parameters.keys() {
        assert!(found.contains(name), "parameter {name} is never used");
    }
}

/// `FailedBatchRecords=payload` (the default) adds a bucket that keeps every
/// failed batch: retained with the stack, encrypted, versioned, private,
/// TLS-only, expiring its objects, announcing each new object under Lambda's
/// prefix to DLQ1, whose policy lets in that bucket's notifications only.
/// `pointer` creates none of it.
#[test]
fn failed_batches_are_kept_in_a_private_retained_bucket_that_feeds_dlq1() {
    let t = stack::template();
    let parameter = serde_json::to_value(&t.parameters[params::FAILED_BATCH_RECORDS]).unwrap();
    assert_eq!(parameter["Default"], "payload");
    assert_eq!(parameter["AllowedValues"], serde_json::json!(["payload", "pointer"]));
    let rendered = serde_json::to_value(&t).unwrap();
    let resource = |id: &str| rendered["Resources"][id].clone();
    for id in [
        logical::FAILED_BATCH_BUCKET,
        logical::FAILED_BATCH_BUCKET_POLICY,
        logical::DLQ1_POLICY,
    ] {
        assert_eq!(resource(id)["Condition"], failed_batches::KEEP_PAYLOAD, "{id}");
    }
    let bucket = resource(logical::FAILED_BATCH_BUCKET);
    assert_eq!(
        (&bucket["DeletionPolicy"], &bucket["UpdateReplacePolicy"]),
        (&"RetainExceptOnCreate".into(), &"Retain".into())
    );
    // The policy's denies stay with the kept bucket: a destroy or a switch to
    // `pointer` must not leave the item images readable by anyone with s3:*
    // ("DeletionPolicy attribute":
    // https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html).
    let policy = resource(logical::FAILED_BATCH_BUCKET_POLICY);
    assert_eq!(
        (&policy["DeletionPolicy"], &policy["UpdateReplacePolicy"]),
        (&bucket["DeletionPolicy"], &bucket["UpdateReplacePolicy"])
    );
    assert_eq!(bucket["DependsOn"], serde_json::json!([logical::DLQ1_POLICY]));
    let p = &bucket["Properties"];
    assert_eq!(
        p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"],
        "aws:kms"
    );
    for block in [
        "BlockPublicAcls",
        "BlockPublicPolicy",
        "IgnorePublicAcls",
        "RestrictPublicBuckets",
    ] {
        assert_eq!(p["PublicAccessBlockConfiguration"][block], true, "{block}");
    }
    let rule = &p["LifecycleConfiguration"]["Rules"][0];
    assert_eq!(rule["Status"], "Enabled");
    assert_eq!(rule["ExpirationInDays"], failed_batches::FAILED_BATCH_RETENTION_DAYS);
    let notification = &p["NotificationConfiguration"]["QueueConfigurations"][0];
    assert_eq!(notification["Event"], "s3:ObjectCreated:*");
    assert_eq!(notification["Queue"], serde_json::to_value(arn(logical::DLQ1)).unwrap());
    assert_eq!(notification["Filter"]["S3Key"]["Rules"][0]["Value"], "aws/lambda/");

    let deny = &resource(logical::FAILED_BATCH_BUCKET_POLICY)["Properties"]["PolicyDocument"]["Statement"][0];
    assert_eq!(deny["Effect"], "Deny");
    assert_eq!(deny["Principal"], "*");
    assert_eq!(deny["Condition"]["Bool"]["aws:SecureTransport"], "false");

    let allow = &resource(logical::DLQ1_POLICY)["Properties"]["PolicyDocument"]["Statement"][0];
    assert_eq!(allow["Principal"]["Service"], "s3.amazonaws.com");
    assert_eq!(allow["Action"], serde_json::json!(["sqs:SendMessage"]));
    // The queue policy names the bucket by the same expression as its name.
    let source = serde_json::to_string(&allow["Condition"]["ArnEquals"]["aws:SourceArn"]).unwrap();
    let name = serde_json::to_string(&p["BucketName"]).unwrap();
    assert!(source.contains(&name), "{source} does not name {name}");
    assert_eq!(
        allow["Condition"]["StringEquals"]["aws:SourceAccount"],
        serde_json::json!({"Ref": "AWS::AccountId"})
    );
    assert_eq!(
        rendered["Outputs"][outputs::FAILED_BATCH_BUCKET]["Condition"],
        failed_batches::KEEP_PAYLOAD
    );
}

/// Only the stream counter's role (the mapping's on-failure write) puts
/// failed batches, only the reprocessor's and the operator's read them;
/// object actions only, so the account's administrators can still manage
/// and delete the policy and empty the bucket.
#[test]
fn the_failed_batch_bucket_takes_writes_from_the_stream_counter_and_reads_from_the_reprocessor_and_operator() {
    let t = serde_json::to_value(stack::template()).unwrap();
    let statements = t["Resources"][logical::FAILED_BATCH_BUCKET_POLICY]["Properties"]["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap()
        .clone();
    let objects = serde_json::json!({"Fn::Sub": "${FailedBatchBucket.Arn}/*"});
    let deny = |action: &str| -> Value {
        statements
            .iter()
            .find(|s| s["Effect"] == "Deny" && s["Action"] == serde_json::json!([action]))
            .unwrap_or_else(|| panic!("no Deny of {action}: {statements:#?}"))
            .clone()
    };
    let writes = deny("s3:PutObject");
    assert_eq!(writes["Principal"], "*");
    assert_eq!(writes["Resource"], serde_json::json!([objects]));
    // Denied to every caller that is not a session of the stream counter's
    // role (`aws:userid` is `<role id>:<session>` for a role session).
    assert_eq!(
        writes["Condition"],
        serde_json::json!({"StringNotLike": {"aws:userid": {"Fn::Sub": "${StreamCounterRole.RoleId}:*"}}})
    );
    let reads = statements
        .iter()
        .find(|s| s["Sid"] == failed_batches::ONLY_REPROCESSOR_AND_OPERATOR)
        .unwrap_or_else(|| panic!("no read-and-delete Deny: {statements:#?}"))
        .clone();
    assert_eq!(reads["Effect"], "Deny");
    // Every way to read a batch's records or remove one, a versioned
    // request included (stack/tests/failed_batch_bucket.rs evaluates it).
    assert_eq!(
        reads["Action"],
        serde_json::json!([
            "s3:GetObject",
            "s3:GetObjectVersion",
            "s3:GetObjectVersionForReplication",
            "s3:DeleteObject",
            "s3:DeleteObjectVersion"
        ])
    );
    assert_eq!(reads["Principal"], "*");
    assert_eq!(reads["Resource"], serde_json::json!([objects]));
    // Denied only when both hold: not a reprocessor session, and not the
    // operator (or, without one, not the reprocessor's role again).
    assert_eq!(
        reads["Condition"],
        serde_json::json!({
            "StringNotLike": {"aws:userid": {"Fn::Sub": "${DlqReprocessorRole.RoleId}:*"}},
            "ArnNotEquals": {"aws:PrincipalArn": {"Fn::If": [
                failed_batches::HAS_OPERATOR_PRINCIPAL,
                {"Ref": params::OPERATOR_PRINCIPAL_ARN},
                {"Fn::GetAtt": [logical::DLQ_REPROCESSOR_ROLE, "Arn"]},
            ]}},
        })
    );
    // Nothing but TLS is denied on bucket-level actions.
    for statement in &statements {
        if statement["Action"] == serde_json::json!(["s3:*"]) {
            assert_eq!(
                statement["Condition"],
                serde_json::json!({"Bool": {"aws:SecureTransport": "false"}})
            );
        }
    }
    assert_eq!(statements.len(), 3, "{statements:#?}");
    assert_eq!(t["Parameters"][params::OPERATOR_PRINCIPAL_ARN]["Default"], "");
}

/// CloudFormation takes at most 51,200 bytes of template inline
/// (`TemplateBody`) and 1 MB from S3 (`TemplateURL`):
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html>.
/// counterctl uploads a larger one; the README must tell everyone else to.
#[test]
fn a_template_over_the_inline_limit_is_deployed_from_s3_as_the_readme_says() {
    const INLINE_LIMIT: usize = 51_200;
    const URL_LIMIT: usize = 1_000_000;
    let size = stack::to_yaml(&stack::template()).len();
    assert!(size < URL_LIMIT, "{size} bytes: above TemplateURL's limit");
    if size > INLINE_LIMIT {
        let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
        for needed in ["51,200", "--s3-bucket", "--template-url"] {
            assert!(
                readme.contains(needed),
                "the template is {size} bytes, and README.md does not say {needed}"
            );
        }
    }
}
