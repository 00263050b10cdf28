//! What reaches an operator: the alarm topic (created and encrypted with a
//! key of its own, or an existing one passed as `AlarmTopicArn`), an
//! optional email subscription, the alarms, and the dashboard.
//!
//! | alarm | fires when |
//! |---|---|
//! | `<fn>-errors`, each function | the function failed an invocation (crash, timeout, a batch failed whole) |
//! | `<fn>-throttles`, each function | Lambda refused an invocation for lack of concurrency |
//! | `dlq1-oldest-message` | a failed stream range has waited in DLQ1 longer than `Dlq1AgeAlarmSeconds` |
//! | `dlq2-not-empty` | a range failed every reprocessing attempt, or can never be replayed |
//! | `stream-counter-iterator-age` | the stream counter falls behind the stream |
//! | `stream-dropped-events` | the stream mapping dropped records (`DroppedEventCount`) |
//! | `stream-on-failure-delivery` | Lambda could not deliver a failed batch's record to the on-failure destination |
//! | `drift` | the scheduled drift check found scopes whose counters drifted |
//! | `limits-drift` | overrides differ from the limits file (`LimitsFileUri` set only) |
//! | `limits-file` | the drift check could not read, parse or compare the limits file (`LimitsFileUri` set only) |
//!
//! Every alarm notifies the topic on `ALARM`, and on `OK` too except the
//! drift check's: they go back to `OK` when no check ran in their period,
//! which is not a repair. Idle is healthy, so missing data never breaches.
//! The two limits alarms exist only under [`LIMITS_FILE_SET`], so the
//! dashboard, whose body names every alarm unconditionally, leaves them out
//! (it shows their metrics).

use serde_json::{Value, json};

use hybrid_counter::metrics::{
    DESTINATION_DELIVERY_FAILURES, DIMENSION_MAPPING, DIMENSION_STACK, LAMBDA_NAMESPACE, MappingMetric, Metric,
    NAMESPACE,
};

use crate::expr::{AWS_STACK_NAME, Expr};
use crate::kit::FunctionSpec;
use crate::logical::LIMITS_FILE_SET;
use crate::resources::cloudwatch::{Alarm, ComparisonOperator, Dashboard, Dimension, Statistic, TreatMissingData};
use crate::resources::kms::{Key, KeyPolicy, KeyPrincipal, KeyStatement, KeyTag};
use crate::resources::sns::{Protocol, Subscription, Topic};
use crate::template::{LiveChange, Parameter, Resource, Template};
use crate::{logical, params};

/// Condition: no `AlarmTopicArn` was given, so the stack creates the topic.
pub const CREATE_ALARM_TOPIC: &str = "CreateAlarmTopic";
/// Condition: the stack creates the topic and an `AlarmEmail` was given.
pub const SUBSCRIBE_ALARM_EMAIL: &str = "SubscribeAlarmEmail";

/// The period of the function and queue alarms, seconds.
pub const PERIOD: u32 = 300;
/// The period of the drift alarm, seconds: a drift check runs at most
/// about this often, so one data point keeps it in `ALARM` for the period.
pub const DRIFT_PERIOD: u32 = 3600;

/// Adds the alarm parameters, conditions, topic, alarms, dashboard and
/// their outputs for the stack's `functions`.
pub(crate) fn add(t: &mut Template, functions: &[&FunctionSpec]) {
    add_parameters(t);
    add_topic(t);
    for spec in functions {
        add_function_alarms(t, spec);
    }
    add_pipeline_alarms(t);
    add_loss_alarms(t);
    add_drift_alarm(t);
    add_limits_alarms(t);
    add_dashboard(t, functions);
    t.output(
        crate::outputs::DROPPED_EVENTS_ALARM_NAME,
        "Stream mapping dropped-events alarm name",
        Expr::reference(logical::STREAM_DROPPED_EVENTS_ALARM),
    );
    t.output(
        crate::outputs::ON_FAILURE_DELIVERY_ALARM_NAME,
        "Stream mapping on-failure delivery alarm name",
        Expr::reference(logical::STREAM_ON_FAILURE_DELIVERY_ALARM),
    );
    t.output(
        crate::outputs::ALARM_TOPIC_ARN,
        "SNS topic the alarms notify",
        topic_arn(),
    );
    t.output(
        crate::outputs::DASHBOARD_NAME,
        "CloudWatch dashboard of the kit",
        Expr::reference(logical::DASHBOARD),
    );
}

/// The topic every alarm notifies: the created one, or `AlarmTopicArn`.
pub fn topic_arn() -> Expr {
    Expr::when(
        CREATE_ALARM_TOPIC,
        Expr::reference(logical::ALARM_TOPIC),
        Expr::reference(params::ALARM_TOPIC_ARN),
    )
}

fn add_parameters(t: &mut Template) {
    t.parameter(
        params::ALARM_TOPIC_ARN,
        Parameter::string(
            "ARN of an existing SNS topic for the alarms (its policy must let CloudWatch publish, and its \
             key, if any, let CloudWatch encrypt). Empty: the stack creates an encrypted topic.",
        )
        .default_string("")
        .pattern(
            "^$|^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$",
            "empty, or an SNS topic ARN",
        )
        .effect(
            "The topic every alarm notifies. Empty: the stack creates `<NamePrefix>-alarms` with a KMS key \
             of its own.",
            LiveChange::Safe,
            "The alarms switch topics in place. Giving a topic deletes the created topic, its key and its \
             email subscription; emptying it creates them again (the email must be confirmed again).",
        ),
    );
    t.parameter(
        params::ALARM_EMAIL,
        Parameter::string(
            "Email address subscribed to the created alarm topic (it must confirm the subscription). Empty: \
             none. Ignored when AlarmTopicArn is given.",
        )
        .default_string("")
        .pattern("^$|^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", "empty, or an email address")
        .effect(
            "An email subscription of the created alarm topic.",
            LiveChange::Safe,
            "A new address receives nothing until it confirms the subscription; the old subscription is \
             deleted by the same update.",
        ),
    );
    t.parameter(
        params::ITERATOR_AGE_ALARM_MILLISECONDS,
        Parameter::number(
            "Iterator age (ms) of the stream counter above which it counts as falling behind, for 5 \
             consecutive minutes.",
            60_000,
            1_000,
            86_400_000,
        )
        .effect(
            "The threshold of the stream-counter-iterator-age alarm.",
            LiveChange::Safe,
            "The alarm is updated in place and judges its next period by the new threshold.",
        ),
    );
    t.parameter(
        params::DLQ1_AGE_ALARM_SECONDS,
        Parameter::number(
            "Age (s) of DLQ1's oldest message above which the reprocessor counts as stuck. A replayable \
             message leaves DLQ1 within seconds; one that fails waits the visibility timeout between \
             attempts.",
            900,
            60,
            1_209_600,
        )
        .effect(
            "The threshold of the dlq1-oldest-message alarm.",
            LiveChange::Safe,
            "The alarm is updated in place and judges its next period by the new threshold.",
        ),
    );
    let no_topic_given = Expr::equals(Expr::reference(params::ALARM_TOPIC_ARN), "".into());
    t.condition(CREATE_ALARM_TOPIC, no_topic_given);
    t.condition(
        SUBSCRIBE_ALARM_EMAIL,
        Expr::and(vec![
            Expr::condition(CREATE_ALARM_TOPIC),
            Expr::differs(params::ALARM_EMAIL, ""),
        ]),
    );
}

fn add_topic(t: &mut Template) {
    let account_root = Expr::sub("arn:${AWS::Partition}:iam::${AWS::AccountId}:root");
    t.resource(
        logical::ALARM_TOPIC_KEY,
        Resource::from(Key {
            description: "Encrypts the hybrid counter kit's alarm topic".to_owned(),
            enable_key_rotation: true,
            tags: vec![KeyTag {
                key: crate::service_role::KEY_TAG.to_owned(),
                value: Expr::reference("AWS::StackName"),
            }],
            key_policy: KeyPolicy {
                version: "2012-10-17".to_owned(),
                statement: vec![
                    // The account administers the key through IAM, as with
                    // the default key policy: without it nobody could.
                    KeyStatement::allow("AccountAdministers", KeyPrincipal::aws(account_root), &["kms:*"]),
                    // CloudWatch encrypts each notification it publishes:
                    // only for this account's alarms of this stack, so the
                    // service cannot be used as a confused deputy.
                    KeyStatement::allow(
                        "CloudWatchPublishes",
                        KeyPrincipal::service("cloudwatch.amazonaws.com"),
                        &["kms:Decrypt", "kms:GenerateDataKey*"],
                    )
                    .when("StringEquals", "aws:SourceAccount", Expr::reference("AWS::AccountId"))
                    .when(
                        "ArnLike",
                        "aws:SourceArn",
                        Expr::sub(
                            "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:${NamePrefix}-*",
                        ),
                    ),
                ],
            },
        })
        .only_if(CREATE_ALARM_TOPIC),
    );
    t.resource(
        logical::ALARM_TOPIC,
        Resource::from(Topic {
            topic_name: Expr::sub("${NamePrefix}-alarms"),
            kms_master_key_id: Expr::reference(logical::ALARM_TOPIC_KEY),
        })
        .only_if(CREATE_ALARM_TOPIC),
    );
    t.resource(
        logical::ALARM_EMAIL_SUBSCRIPTION,
        Resource::from(Subscription {
            topic_arn: Expr::reference(logical::ALARM_TOPIC),
            protocol: Protocol::Email,
            endpoint: Expr::reference(params::ALARM_EMAIL),
        })
        .only_if(SUBSCRIBE_ALARM_EMAIL),
    );
}

/// An alarm on `namespace`/`metric` with the common settings: any data
/// point above 0 in a minute, idle not breaching, the topic notified on
/// `ALARM` and `OK`. Each alarm overrides what differs.
fn alarm(name_suffix: &str, description: &str, namespace: &str, metric: &str, dimension: (&str, Expr)) -> Alarm {
    Alarm {
        alarm_name: Expr::sub(format!("${{NamePrefix}}-{name_suffix}")),
        alarm_description: description.to_owned(),
        namespace: namespace.to_owned(),
        metric_name: metric.to_owned(),
        dimensions: vec![Dimension {
            name: dimension.0.to_owned(),
            value: dimension.1,
        }],
        statistic: Statistic::Maximum,
        period: 60,
        evaluation_periods: 1,
        threshold: 0.into(),
        comparison_operator: ComparisonOperator::GreaterThanThreshold,
        treat_missing_data: TreatMissingData::NotBreaching,
        alarm_actions: vec![topic_arn()],
        ok_actions: vec![topic_arn()],
    }
}

fn add_function_alarms(t: &mut Template, spec: &FunctionSpec) {
    let suffix = spec.name_suffix;
    let alarms = [
        (
            logical::errors_alarm(spec.function),
            "Errors",
            format!(
                "The {suffix} function failed an invocation (a crash, a timeout, or a batch failed whole) in \
                 the last 5 minutes. Read its log group for the error; `counterctl status` shows the queues."
            ),
        ),
        (
            logical::throttles_alarm(spec.function),
            "Throttles",
            format!(
                "Lambda refused invocations of the {suffix} function for lack of concurrency in the last 5 \
                 minutes. Raise the account's concurrency or lower ParallelizationFactor; stream and queue \
                 sources retry, the API's callers get 429."
            ),
        ),
    ];
    for (id, metric, description) in alarms {
        let name_suffix = format!("{suffix}-{}", metric.to_lowercase());
        let dimension = ("FunctionName", Expr::reference(spec.function));
        t.resource(
            &id,
            Alarm {
                statistic: Statistic::Sum,
                period: PERIOD,
                threshold: 1.into(),
                comparison_operator: ComparisonOperator::GreaterThanOrEqualToThreshold,
                ..alarm(&name_suffix, &description, "AWS/Lambda", metric, dimension)
            },
        );
    }
}

fn add_pipeline_alarms(t: &mut Template) {
    t.resource(
        logical::DLQ1_AGE_ALARM,
        Alarm {
            threshold: Expr::reference(params::DLQ1_AGE_ALARM_SECONDS),
            ..alarm(
                "dlq1-oldest-message",
                "A failed stream batch has waited in DLQ1 longer than Dlq1AgeAlarmSeconds: the reprocessor keeps \
                 failing it (read its log group). After Dlq1MaxReceiveCount receives it moves to DLQ2. Under \
                 FailedBatchRecords=pointer its range must be replayed within the stream's 24 hours; under \
                 payload the bucket keeps the batch with its records.",
                "AWS/SQS",
                "ApproximateAgeOfOldestMessage",
                ("QueueName", Expr::get_att(logical::DLQ1, "QueueName")),
            )
        },
    );
    t.resource(
        logical::DLQ2_NOT_EMPTY_ALARM,
        Alarm {
            threshold: 1.into(),
            comparison_operator: ComparisonOperator::GreaterThanOrEqualToThreshold,
            ..alarm(
                "dlq2-not-empty",
                "A failed stream batch failed every reprocessing attempt, or can never be replayed, and waits in \
                 DLQ2. `counterctl redrive --dry-run` shows why; fix the cause, then `counterctl redrive`. Under \
                 FailedBatchRecords=pointer a range that has left the stream's 24 h retention cannot be replayed: \
                 run `counterctl audit --repair` for the affected scopes.",
                "AWS/SQS",
                "ApproximateNumberOfMessagesVisible",
                ("QueueName", Expr::get_att(logical::DLQ2, "QueueName")),
            )
        },
    );
    t.resource(
        logical::ITERATOR_AGE_ALARM,
        Alarm {
            evaluation_periods: 5,
            threshold: Expr::reference(params::ITERATOR_AGE_ALARM_MILLISECONDS),
            ..alarm(
                "stream-counter-iterator-age",
                "The stream counter is falling behind the resources table's stream. Records that stay \
                 unprocessed past MaximumRecordAgeInSeconds go to DLQ1, and past 24 hours they leave the stream.",
                "AWS/Lambda",
                "IteratorAge",
                ("FunctionName", Expr::reference(logical::STREAM_COUNTER_FUNCTION)),
            )
        },
    );
}

/// The two ways a stream record leaves the pipeline unseen, from Lambda's
/// own metrics (<https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html>).
/// `DroppedEventCount`, an event source mapping metric (`MetricsConfig:
/// EventCount` on the mapping), counts records the mapping abandoned at
/// `MaximumRetryAttempts` or `MaximumRecordAgeInSeconds`. A delivery
/// failure of the on-failure destination is not in the mapping's metrics
/// (`OnFailureDestinationDeliveredEventCount` counts the deliveries that
/// succeeded): Lambda reports it as the function's
/// `DestinationDeliveryFailures`, "for asynchronous invocation and supported
/// event source mappings" (stream sources), under `FunctionName`. Either
/// is a loss an operator must see at once: any data point alarms.
fn add_loss_alarms(t: &mut Template) {
    let losses = [
        (
            logical::STREAM_DROPPED_EVENTS_ALARM,
            "stream-dropped-events",
            "The stream mapping dropped records: it gave up on them (MaximumRetryAttempts or \
             MaximumRecordAgeInSeconds spent). Compare OnFailureDestinationDeliveredEventCount of the same \
             minutes: records with an on-failure record wait in the failure path (DLQ1, the failed-batch bucket); \
             the rest were never counted: run `counterctl audit --repair`.",
            MappingMetric::Dropped.name(),
            (DIMENSION_MAPPING, Expr::reference(logical::STREAM_MAPPING)),
        ),
        (
            logical::STREAM_ON_FAILURE_DELIVERY_ALARM,
            "stream-on-failure-delivery",
            "Lambda could not deliver a failed stream batch's record to the on-failure destination (the \
             failed-batch bucket or DLQ1: permissions, a missing bucket or queue, size): the batch left the stream \
             with no record to replay. Fix the destination (`counterctl status` names it), then run `counterctl \
             audit --repair`.",
            DESTINATION_DELIVERY_FAILURES,
            ("FunctionName", Expr::reference(logical::STREAM_COUNTER_FUNCTION)),
        ),
    ];
    for (id, name_suffix, description, metric, dimension) in losses {
        t.resource(
            id,
            Alarm {
                statistic: Statistic::Sum,
                ..alarm(name_suffix, description, LAMBDA_NAMESPACE, metric, dimension)
            },
        );
    }
}

/// An alarm of the drift check: any data point above 0 in the hour, to
/// the topic on `ALARM` only (no check in the hour is not a repair).
fn drift_check_alarm(name_suffix: &str, description: &str, metric: Metric) -> Alarm {
    let dimension = (DIMENSION_STACK, Expr::reference(AWS_STACK_NAME));
    Alarm {
        period: DRIFT_PERIOD,
        ok_actions: Vec::new(),
        ..alarm(name_suffix, description, NAMESPACE, metric.name(), dimension)
    }
}

fn add_drift_alarm(t: &mut Template) {
    t.resource(
        logical::DRIFT_ALARM,
        drift_check_alarm(
            "drift",
            "The scheduled drift check found scopes whose counters disagree with their items. Run \
             `counterctl status` for the last check, then `counterctl audit --repair` (for the scopes it \
             names, or all). The alarm notifies only on ALARM: it returns to OK when no check ran in the \
             hour, which is not a repair.",
            Metric::DriftedScopes,
        ),
    );
}

/// The drift check's comparison with the limits file: overrides that
/// differ, and a comparison that could not be made; both only with a file.
fn add_limits_alarms(t: &mut Template) {
    t.resource(
        logical::LIMITS_DRIFT_ALARM,
        Resource::from(drift_check_alarm(
            "limits-drift",
            "Limit overrides differ from the limits file (LimitsFileUri): changed outside it (`counterctl \
             limit set`), not in it, or a scope under a prefix entry without its override. The drift \
             check's log names each scope; run `counterctl limits plan FILE` and apply the file, or \
             change the file. The alarm notifies only on ALARM.",
            Metric::LimitsDrifted,
        ))
        .only_if(LIMITS_FILE_SET),
    );
    t.resource(
        logical::LIMITS_FILE_ALARM,
        Resource::from(drift_check_alarm(
            "limits-file",
            "The drift check could not compare the overrides with the limits file (LimitsFileUri): the \
             object is missing or not readable by the function's role (both read AccessDenied), or the \
             file is invalid. Its log says which, with the line and column; the counters' drift check \
             runs all the same. The alarm notifies only on ALARM.",
            Metric::LimitsFileErrors,
        ))
        .only_if(LIMITS_FILE_SET),
    );
}

/// Every unconditioned alarm's logical id, the function alarms first.
pub(crate) fn alarm_ids(functions: &[&FunctionSpec]) -> Vec<String> {
    let mut ids: Vec<String> = functions
        .iter()
        .flat_map(|f| [logical::errors_alarm(f.function), logical::throttles_alarm(f.function)])
        .collect();
    ids.extend(
        [
            logical::DLQ1_AGE_ALARM,
            logical::DLQ2_NOT_EMPTY_ALARM,
            logical::ITERATOR_AGE_ALARM,
            logical::STREAM_DROPPED_EVENTS_ALARM,
            logical::STREAM_ON_FAILURE_DELIVERY_ALARM,
            logical::DRIFT_ALARM,
        ]
        .map(str::to_owned),
    );
    ids
}

/// A metric widget; `metrics` in the dashboard's array form.
fn widget(title: &str, x: u32, y: u32, stat: &str, metrics: Vec<Value>) -> Value {
    json!({
        "type": "metric",
        "x": x, "y": y, "width": 12, "height": 6,
        "properties": {
            "title": title,
            "region": "${AWS::Region}",
            "stat": stat,
            "period": PERIOD,
            "view": "timeSeries",
            "metrics": metrics,
        },
    })
}

/// The kit's own metrics of this stack.
fn kit_metrics(metrics: &[Metric]) -> Vec<Value> {
    metrics
        .iter()
        .map(|m| json!([NAMESPACE, m.name(), DIMENSION_STACK, "${AWS::StackName}"]))
        .collect()
}

/// The dashboard's JSON, with `${...}` for `Fn::Sub`: the stack's name,
/// region, functions, queues and alarms.
pub(crate) fn dashboard_body(functions: &[&FunctionSpec]) -> Value {
    let per_function = |metric: &str| -> Vec<Value> {
        functions
            .iter()
            .map(|f| json!(["AWS/Lambda", metric, "FunctionName", format!("${{{}}}", f.function)]))
            .collect()
    };
    let queue = |id: &str, metric: &str| json!(["AWS/SQS", metric, "QueueName", format!("${{{id}.QueueName}}")]);
    let alarms: Vec<Value> = alarm_ids(functions)
        .iter()
        .map(|id| json!(format!("${{{id}.Arn}}")))
        .collect();
    json!({
        "widgets": [
            {
                "type": "alarm",
                "x": 0, "y": 0, "width": 24, "height": 4,
                "properties": { "title": "Alarms", "alarms": alarms },
            },
            widget(
                "Events counted, transactions, conflicts, retries",
                0, 4, "Sum",
                kit_metrics(&[Metric::EventsCounted, Metric::Transactions, Metric::Conflicts, Metric::Retries]),
            ),
            widget("Write units", 12, 4, "Sum", kit_metrics(&[Metric::WriteUnits])),
            widget(
                "Failure pipeline: replays, permanent failures, DLQ depth",
                0, 10, "Sum",
                [
                    kit_metrics(&[Metric::Replays, Metric::PermanentFailures]),
                    vec![
                        queue(logical::DLQ1, "ApproximateNumberOfMessagesVisible"),
                        queue(logical::DLQ2, "ApproximateNumberOfMessagesVisible"),
                    ],
                ]
                .concat(),
            ),
            widget(
                "Swallowed best-effort writes, drifted scopes, drifted limits, limits file errors",
                12, 10, "Sum",
                kit_metrics(&[
                    Metric::SwallowedBestEffortWrites,
                    Metric::DriftedScopes,
                    Metric::LimitsDrifted,
                    Metric::LimitsFileErrors,
                ]),
            ),
            widget("Function errors", 0, 16, "Sum", per_function("Errors")),
            widget("Function throttles", 12, 16, "Sum", per_function("Throttles")),
            widget(
                "Stream counter iterator age (ms), DLQ1 oldest message (s)",
                0, 22, "Maximum",
                vec![
                    json!(["AWS/Lambda", "IteratorAge", "FunctionName", format!("${{{}}}", logical::STREAM_COUNTER_FUNCTION)]),
                    queue(logical::DLQ1, "ApproximateAgeOfOldestMessage"),
                ],
            ),
            widget(
                "Stream mapping records: polled, filtered, invoked, failed, dropped, sent on failure, undelivered",
                12, 22, "Sum",
                [
                    MappingMetric::ALL
                        .iter()
                        .map(|m| json!([LAMBDA_NAMESPACE, m.name(), DIMENSION_MAPPING, format!("${{{}}}", logical::STREAM_MAPPING)]))
                        .collect::<Vec<_>>(),
                    vec![json!([LAMBDA_NAMESPACE, DESTINATION_DELIVERY_FAILURES, "FunctionName", format!("${{{}}}", logical::STREAM_COUNTER_FUNCTION)])],
                ]
                .concat(),
            ),
            throttles_widget(0, 28),
        ],
    })
}

/// Throttled requests of the stack: the total, and one line per reason
/// DynamoDB gave (a `SEARCH`, since the reasons are dimension values only
/// known once they occur). A key-range reason says "shard the scope", a
/// table-level one "raise the limit" (`docs/operations.md`).
fn throttles_widget(x: u32, y: u32) -> Value {
    let throttles = Metric::Throttles.name();
    let search = format!(
        "SEARCH('{{{NAMESPACE},{DIMENSION_STACK},{reason}}} MetricName=\"{throttles}\" {DIMENSION_STACK}=\"${{AWS::StackName}}\"', 'Sum', {PERIOD})",
        reason = hybrid_counter::throttle::DIMENSION,
    );
    let mut w = widget(
        "DynamoDB throttles by reason",
        x,
        y,
        "Sum",
        vec![
            json!([NAMESPACE, throttles, DIMENSION_STACK, "${AWS::StackName}", { "id": "total" }]),
            json!([{ "expression": search, "id": "by_reason" }]),
        ],
    );
    w["width"] = json!(24);
    w
}

fn add_dashboard(t: &mut Template, functions: &[&FunctionSpec]) {
    t.resource(
        logical::DASHBOARD,
        Dashboard {
            dashboard_name: Expr::sub("${NamePrefix}"),
            dashboard_body: Expr::sub(canonical(dashboard_body(functions))),
        },
    );
}

/// `body` as JSON text with every object's keys sorted: the same text
/// whether or not another crate of the build turns on serde_json's
/// `preserve_order` (cargo unifies features across a workspace build), so
/// the committed template matches the generator in every build.
fn canonical(mut body: Value) -> String {
    body.sort_all_objects();
    body.to_string()
}
