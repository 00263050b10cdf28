//! The alarms reach someone and the dashboard shows what exists: every
//! alarm notifies the one topic (created, or `AlarmTopicArn`), each function
//! has its errors and throttles alarms, the drift alarm watches the metric
//! the drift check emits for this stack, and the dashboard names only
//! resources of the template.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use stack::alarms::{CREATE_ALARM_TOPIC, SUBSCRIBE_ALARM_EMAIL, topic_arn};
use stack::resources::cloudwatch::{Alarm, ComparisonOperator, TreatMissingData};
use stack::{Expr, ResourceKind, Template, logical, params};

fn alarms(t: &Template) -> Vec<(&String, &Alarm)> {
    t.resources
        .iter()
        .filter_map(|(id, r)| match &r.kind {
            ResourceKind::Alarm(a) => Some((id, a)),
            _ => None,
        })
        .collect()
}

fn functions(t: &Template) -> Vec<&String> {
    t.resources
        .iter()
        .filter(|(_, r)| matches!(r.kind, ResourceKind::Function(_)))
        .map(|(id, _)| id)
        .collect()
}

#[test]
fn every_alarm_notifies_the_topic_and_all_but_the_drift_check_s_notify_ok() {
    let t = stack::template();
    let all = alarms(&t);
    assert!(all.len() >= 10, "{}", all.len());
    for (id, alarm) in all {
        assert_eq!(alarm.alarm_actions, vec![topic_arn()], "{id}");
        let drift_check = [
            logical::DRIFT_ALARM,
            logical::LIMITS_DRIFT_ALARM,
            logical::LIMITS_FILE_ALARM,
        ];
        let expected_ok = if drift_check.contains(&id.as_str()) {
            vec![]
        } else {
            vec![topic_arn()]
        };
        assert_eq!(alarm.ok_actions, expected_ok, "{id}");
        assert_eq!(
            alarm.treat_missing_data,
            TreatMissingData::NotBreaching,
            "{id}: idle is healthy"
        );
        assert!(
            matches!(&alarm.alarm_name, Expr::Sub(name) if name.starts_with("${NamePrefix}-")),
            "{id}: the name carries the stack's prefix, so two stacks never clash"
        );
    }
}

#[test]
fn the_topic_is_the_created_one_unless_an_arn_is_given() {
    let t = stack::template();
    assert_eq!(
        serde_json::to_value(topic_arn()).unwrap(),
        json!({"Fn::If": [CREATE_ALARM_TOPIC, {"Ref": logical::ALARM_TOPIC}, {"Ref": params::ALARM_TOPIC_ARN}]})
    );
    assert_eq!(
        serde_json::to_value(&t.conditions[CREATE_ALARM_TOPIC]).unwrap(),
        json!({"Fn::Equals": [{"Ref": params::ALARM_TOPIC_ARN}, ""]})
    );
    for id in [logical::ALARM_TOPIC, logical::ALARM_TOPIC_KEY] {
        assert_eq!(t.resources[id].condition.as_deref(), Some(CREATE_ALARM_TOPIC), "{id}");
    }
    // The email goes only on a topic the stack owns.
    assert_eq!(
        t.resources[logical::ALARM_EMAIL_SUBSCRIPTION].condition.as_deref(),
        Some(SUBSCRIBE_ALARM_EMAIL)
    );
    assert_eq!(
        serde_json::to_value(&t.conditions[SUBSCRIBE_ALARM_EMAIL]).unwrap(),
        json!({"Fn::And": [
            {"Condition": CREATE_ALARM_TOPIC},
            {"Fn::Not": [{"Fn::Equals": [{"Ref": params::ALARM_EMAIL}, ""]}]},
        ]})
    );
    let ResourceKind::Topic(topic) = &t.resources[logical::ALARM_TOPIC].kind else {
        panic!("not a topic")
    };
    assert_eq!(
        topic.kms_master_key_id,
        Expr::reference(logical::ALARM_TOPIC_KEY),
        "encrypted with a key CloudWatch may use"
    );
    let ResourceKind::Key(key) = &t.resources[logical::ALARM_TOPIC_KEY].kind else {
        panic!("not a key")
    };
    let key = serde_json::to_value(key).unwrap();
    assert_eq!(key["EnableKeyRotation"], true);
    let cloudwatch = key["KeyPolicy"]["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Principal"]["Service"] == "cloudwatch.amazonaws.com")
        .expect("CloudWatch may use the key");
    assert_eq!(cloudwatch["Action"], json!(["kms:Decrypt", "kms:GenerateDataKey*"]));
    // Only on behalf of this account's alarms of this stack: CloudWatch
    // cannot be made to use the key for anyone else (confused deputy).
    assert_eq!(
        cloudwatch["Condition"],
        json!({
            "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
            "ArnLike": {"aws:SourceArn": {"Fn::Sub": "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:${NamePrefix}-*"}},
        })
    );
    // Every alarm's name matches the ARN pattern the key allows.
    for (id, alarm) in alarms(&t) {
        let name = serde_json::to_value(&alarm.alarm_name).unwrap();
        assert!(
            name["Fn::Sub"]
                .as_str()
                .is_some_and(|n| n.starts_with("${NamePrefix}-")),
            "{id}: {name}"
        );
    }
}

#[test]
fn each_function_has_an_errors_and_a_throttles_alarm() {
    let t = stack::template();
    let functions = functions(&t);
    assert!(functions.len() >= 3);
    for function in functions {
        for (id, metric) in [
            (logical::errors_alarm(function), "Errors"),
            (logical::throttles_alarm(function), "Throttles"),
        ] {
            let ResourceKind::Alarm(alarm) = &t.resources.get(&id).unwrap_or_else(|| panic!("no {id}")).kind else {
                panic!("{id} is not an alarm")
            };
            assert_eq!(
                (alarm.namespace.as_str(), alarm.metric_name.as_str()),
                ("AWS/Lambda", metric)
            );
            assert_eq!(alarm.dimensions[0].value, Expr::reference(function), "{id}");
            assert_eq!(alarm.threshold, 1.into());
        }
    }
}

#[test]
fn the_limits_alarms_exist_only_with_a_limits_file_and_watch_its_metrics() {
    let t = stack::template();
    for (id, metric) in [
        (
            logical::LIMITS_DRIFT_ALARM,
            hybrid_counter::metrics::Metric::LimitsDrifted,
        ),
        (
            logical::LIMITS_FILE_ALARM,
            hybrid_counter::metrics::Metric::LimitsFileErrors,
        ),
    ] {
        let resource = &t.resources[id];
        assert_eq!(resource.condition.as_deref(), Some(logical::LIMITS_FILE_SET), "{id}");
        let ResourceKind::Alarm(alarm) = &resource.kind else {
            panic!("{id} is not an alarm")
        };
        assert_eq!(alarm.namespace, hybrid_counter::metrics::NAMESPACE);
        assert_eq!(alarm.metric_name, metric.name(), "{id}");
        assert_eq!(alarm.dimensions[0].value, Expr::reference("AWS::StackName"));
        assert_eq!(alarm.comparison_operator, ComparisonOperator::GreaterThanThreshold);
        assert_eq!(alarm.threshold, 0.into());
    }
}

#[test]
fn the_drift_alarm_watches_this_stack_s_drifted_scopes() {
    let t = stack::template();
    let ResourceKind::Alarm(alarm) = &t.resources[logical::DRIFT_ALARM].kind else {
        panic!("not an alarm")
    };
    assert_eq!(alarm.namespace, hybrid_counter::metrics::NAMESPACE);
    assert_eq!(alarm.metric_name, hybrid_counter::metrics::Metric::DriftedScopes.name());
    assert_eq!(alarm.dimensions.len(), 1);
    assert_eq!(alarm.dimensions[0].name, hybrid_counter::metrics::DIMENSION_STACK);
    assert_eq!(alarm.dimensions[0].value, Expr::reference("AWS::StackName"));
    assert_eq!(alarm.comparison_operator, ComparisonOperator::GreaterThanThreshold);
    assert_eq!(alarm.threshold, 0.into());
}

#[test]
fn the_queue_alarms_watch_dlq1_s_oldest_message_and_dlq2_s_depth() {
    let t = stack::template();
    let alarm = |id: &str| match &t.resources[id].kind {
        ResourceKind::Alarm(a) => a.clone(),
        _ => panic!("{id} is not an alarm"),
    };
    let dlq1 = alarm(logical::DLQ1_AGE_ALARM);
    assert_eq!(dlq1.metric_name, "ApproximateAgeOfOldestMessage");
    assert_eq!(dlq1.dimensions[0].value, Expr::get_att(logical::DLQ1, "QueueName"));
    assert_eq!(dlq1.threshold, Expr::reference(params::DLQ1_AGE_ALARM_SECONDS));
    let dlq2 = alarm(logical::DLQ2_NOT_EMPTY_ALARM);
    assert_eq!(dlq2.metric_name, "ApproximateNumberOfMessagesVisible");
    assert_eq!(dlq2.dimensions[0].value, Expr::get_att(logical::DLQ2, "QueueName"));
}

/// The `${...}` references of an `Fn::Sub` string.
fn sub_references(text: &str) -> BTreeSet<String> {
    text.split("${")
        .skip(1)
        .map(|rest| rest.split('}').next().unwrap().to_owned())
        .collect()
}

#[test]
fn the_dashboard_names_only_the_stack_s_resources_and_shows_every_alarm() {
    let t = stack::template();
    let ResourceKind::Dashboard(dashboard) = &t.resources[logical::DASHBOARD].kind else {
        panic!("not a dashboard")
    };
    let Expr::Sub(body) = &dashboard.dashboard_body else {
        panic!("the body is an Fn::Sub")
    };
    for reference in sub_references(body) {
        let resource = reference.split('.').next().unwrap();
        assert!(
            reference.starts_with("AWS::") || t.resources.contains_key(resource),
            "the dashboard names {reference}, which is not in the template"
        );
    }
    let parsed: Value = serde_json::from_str(body).expect("the body is JSON");
    let shown: BTreeSet<String> = parsed["widgets"][0]["properties"]["alarms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .trim_start_matches("${")
                .trim_end_matches(".Arn}")
                .to_owned()
        })
        .collect();
    // A conditioned alarm cannot be named by the unconditioned body.
    let all: BTreeSet<String> = alarms(&t)
        .into_iter()
        .filter(|(id, _)| t.resources[id.as_str()].condition.is_none())
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(shown, all);
    for metric in hybrid_counter::metrics::Metric::ALL {
        assert!(
            body.contains(&format!("\"{}\"", metric.name())),
            "{metric:?} is not on the dashboard"
        );
    }
}

/// The runbook an operator opens when paged: `docs/operations.md` has a
/// row for every alarm of the template, keyed by its name after the prefix.
#[test]
fn the_runbook_has_a_row_for_every_alarm() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let runbook = std::fs::read_to_string(&path).expect("docs/operations.md");
    let rows: BTreeSet<&str> = runbook
        .lines()
        .filter_map(|line| line.strip_prefix("| `")?.split_once("` |").map(|(name, _)| name))
        .collect();
    for (id, alarm) in alarms(&stack::template()) {
        let name = serde_json::to_value(&alarm.alarm_name).unwrap();
        let name = name["Fn::Sub"].as_str().unwrap_or_else(|| panic!("{id}: {name}"));
        let suffix = name
            .strip_prefix("${NamePrefix}-")
            .unwrap_or_else(|| panic!("{id}: {name}"));
        assert!(
            rows.contains(suffix),
            "docs/operations.md has no runbook row | `{suffix}` | for the alarm {id}"
        );
    }
}
