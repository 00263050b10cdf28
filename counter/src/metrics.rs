//! The kit's own CloudWatch metrics, as documents in the embedded metric
//! format (EMF): one JSON log line that CloudWatch Logs turns into metric
//! data points, with no PutMetricData call, no client and no extra latency
//! in the function.
//!
//! Every metric is in the namespace [`NAMESPACE`] with the one dimension
//! [`DIMENSION_STACK`], whose value is the stack's name from the environment
//! variable [`ENV_STACK_NAME`] (the template sets it on every function), so
//! two stacks in one account (`hc-dev`, `hc-prod`) never mix their figures.
//! [`Metric`] names every metric the kit emits; the stack builds its alarms
//! and dashboard from the same names.
//!
//! This module builds the documents and never writes them:
//! `hybrid_counter_aws::lambda::emit_metrics` prints one per invocation.
//! A small serde type rather than a crate: the format is a dozen lines of
//! JSON (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>),
//! and the stack, which has no logging at all, needs the names.

use serde_json::{Map, Value, json};

use crate::EpochMillis;
use crate::store::meter::MeterSnapshot;
use crate::stream::BatchReport;
use crate::throttle::{self, ThrottleReason};

/// The CloudWatch namespace of every metric of the kit.
pub const NAMESPACE: &str = "HybridCounterKit";
/// The one dimension of every metric: the stack's name.
pub const DIMENSION_STACK: &str = "Stack";
/// Environment variable with the stack's name (`!Ref AWS::StackName`).
pub const ENV_STACK_NAME: &str = "KIT_STACK_NAME";
/// The dimension's value when [`ENV_STACK_NAME`] is unset or blank (a
/// function started by hand): CloudWatch refuses an empty dimension value.
pub const UNKNOWN_STACK: &str = "unknown";

/// An enum of metrics, each variant written once with its name in
/// CloudWatch; `ALL` (in declaration order) and `name()` come from the list.
macro_rules! named_metrics {
    ($(#[$meta:meta])* pub enum $ty:ident { $($(#[$attr:meta])* $variant:ident => $name:literal),* $(,)? }) => {
        $(#[$meta])*
        pub enum $ty {
            $($(#[$attr])* $variant,)*
        }

        impl $ty {
            /// Every metric, in declaration order (the dashboard's). Its
            /// length is the number of names.
            pub const ALL: [$ty; [$($name),*].len()] = [$($ty::$variant),*];

            /// The metric's name in CloudWatch.
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)*
                }
            }
        }
    };
}

named_metrics! {
/// Every metric the kit emits, in the order of the dashboard. Each is a sum
/// over an invocation, so the `Sum` statistic over a period is the figure
/// of that period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Items whose create or delete the stream's transactions counted
    /// (stream counter and reprocessor).
    EventsCounted => "EventsCounted",
    /// Transactions committed.
    Transactions => "Transactions",
    /// Transactions cancelled by a conflict with a concurrent writer.
    Conflicts => "Conflicts",
    /// Retries spent on conflicts, throttling and transient errors.
    Retries => "Retries",
    /// Write capacity units DynamoDB reported.
    WriteUnits => "WriteUnits",
    /// Best-effort counter writes the request path gave up on (the
    /// best-effort counter undercounts until the stream catches up).
    SwallowedBestEffortWrites => "SwallowedBestEffortWrites",
    /// DLQ1 messages whose stream range the reprocessor replayed.
    Replays => "Replays",
    /// DLQ1 messages that can never be replayed, sent to DLQ2 at once.
    PermanentFailures => "PermanentFailures",
    /// Scopes the scheduled drift check found drifted; the drift alarm
    /// watches it.
    DriftedScopes => "DriftedScopes",
    /// Scopes whose limit override differs from the limits file the drift
    /// check compares with (`LimitsFileUri`), plus one when the deployed
    /// default limit does; the limits-drift alarm watches it.
    LimitsDrifted => "LimitsDrifted",
    /// 1 when the drift check could not compare with the limits file (a
    /// missing, unreadable or invalid file, a failed Scan), 0 when it did;
    /// the limits-file alarm watches it.
    LimitsFileErrors => "LimitsFileErrors",
    /// Requests DynamoDB throttled (as the kit saw them, after the SDK's
    /// own retries where they are on). Published twice: the total per
    /// stack, and per [`throttle::DIMENSION`] in documents of their own
    /// ([`Metrics::documents`]).
    Throttles => "Throttles",
}
}

/// The stack's name for the dimension: `lookup(`[`ENV_STACK_NAME`]`)`, or
/// [`UNKNOWN_STACK`] when it is unset or blank.
pub fn stack_from_lookup(lookup: impl Fn(&str) -> Option<String>) -> String {
    lookup(ENV_STACK_NAME)
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| UNKNOWN_STACK.to_owned())
}

/// One invocation's metrics: values are added up per metric, and the
/// document lists each metric once, in the order first recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    stack: String,
    values: Vec<(Metric, f64)>,
    /// [`Metric::Throttles`] per reason, in the order first recorded.
    throttles: Vec<(ThrottleReason, f64)>,
}

impl Metrics {
    /// No metrics yet, for the stack named `stack`.
    pub fn new(stack: impl Into<String>) -> Self {
        Self {
            stack: stack.into(),
            values: Vec::new(),
            throttles: Vec::new(),
        }
    }

    /// For the stack named by the environment ([`stack_from_lookup`]).
    pub fn from_env() -> Self {
        Self::new(stack_from_lookup(|name| std::env::var(name).ok()))
    }

    /// Adds `value` to `metric` (recording it at zero is recording it: an
    /// alarm then sees a data point, not missing data).
    pub fn add(&mut self, metric: Metric, value: f64) -> &mut Self {
        match self.values.iter_mut().find(|(m, _)| *m == metric) {
            Some((_, total)) => *total += value,
            None => self.values.push((metric, value)),
        }
        self
    }

    /// The sum recorded for `metric`, if any.
    pub fn value(&self, metric: Metric) -> Option<f64> {
        self.values.iter().find(|(m, _)| *m == metric).map(|(_, v)| *v)
    }

    /// Adds `value` throttled requests for `reason`: to the stack's
    /// [`Metric::Throttles`] and to the reason's.
    pub fn add_throttles(&mut self, reason: ThrottleReason, value: f64) -> &mut Self {
        match self.throttles.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, total)) => *total += value,
            None => self.throttles.push((reason, value)),
        }
        self.add(Metric::Throttles, value)
    }

    /// The throttled requests recorded for `reason`, if any.
    pub fn throttles(&self, reason: ThrottleReason) -> Option<f64> {
        self.throttles.iter().find(|(r, _)| *r == reason).map(|(_, v)| *v)
    }

    /// Transactions, conflicts, write units and throttles (per reason) of
    /// the store's requests.
    pub fn add_cost(&mut self, cost: &MeterSnapshot) -> &mut Self {
        for (reason, n) in cost.throttles.nonzero() {
            self.add_throttles(reason, n as f64);
        }
        self.add(Metric::Transactions, cost.transactions_committed as f64)
            .add(Metric::Conflicts, cost.transactions_cancelled.conflict as f64)
            .add(Metric::WriteUnits, cost.write_units)
    }

    /// Events counted (creates and deletes) and retries of a processed
    /// batch.
    pub fn add_batch(&mut self, report: &BatchReport) -> &mut Self {
        self.add(
            Metric::EventsCounted,
            f64::from(report.counted) + f64::from(report.deleted_counted),
        )
        .add(Metric::Retries, f64::from(report.retries))
    }

    /// The EMF document at time `now`: `_aws` with the timestamp and one
    /// metric directive, the dimension, and each metric's value as a
    /// top-level member. `None` when nothing was recorded.
    pub fn document(&self, now: EpochMillis) -> Option<Value> {
        if self.values.is_empty() {
            return None;
        }
        let values: Vec<(&str, f64)> = self
            .values
            .iter()
            .map(|(metric, value)| (metric.name(), *value))
            .collect();
        Some(emf_document(now, NAMESPACE, &[(DIMENSION_STACK, &self.stack)], &values))
    }

    /// Every document of the invocation: [`Self::document`], then one per
    /// throttle reason with [`Metric::Throttles`] under the stack and the
    /// reason (one EMF document holds one value per dimension).
    pub fn documents(&self, now: EpochMillis) -> Vec<Value> {
        let throttles = Metric::Throttles;
        self.document(now)
            .into_iter()
            .chain(self.throttles.iter().map(|(reason, value)| {
                emf_document(
                    now,
                    NAMESPACE,
                    &[(DIMENSION_STACK, &self.stack), (throttle::DIMENSION, reason.name())],
                    &[(throttles.name(), *value)],
                )
            }))
            .collect()
    }
}

/// One EMF document at time `now`: `_aws` with the timestamp and one
/// metric directive in `namespace` whose one dimension set is
/// `dimensions`' names (every metric's `Unit` is `Count`), each
/// dimension's value and each metric's value as top-level members (the
/// format's rule:
/// <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>).
pub fn emf_document(now: EpochMillis, namespace: &str, dimensions: &[(&str, &str)], values: &[(&str, f64)]) -> Value {
    let definitions: Vec<Value> = values
        .iter()
        .map(|(name, _)| json!({ "Name": name, "Unit": "Count" }))
        .collect();
    let names: Vec<&str> = dimensions.iter().map(|(name, _)| *name).collect();
    let mut document = Map::new();
    document.insert(
        "_aws".into(),
        json!({
            "Timestamp": now,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [names],
                "Metrics": definitions,
            }],
        }),
    );
    for (name, value) in dimensions {
        document.insert((*name).into(), Value::String((*value).to_owned()));
    }
    for (name, value) in values {
        document.insert((*name).into(), json!(value));
    }
    Value::Object(document)
}

named_metrics! {
/// Lambda's event source mapping metrics (`MetricsConfig: EventCount`),
/// in `AWS/Lambda` under [`DIMENSION_MAPPING`]
/// (<https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html>).
/// The stack alarms on two of them; the local runner, which plays the
/// mappings on the emulator, writes the counts it knows as EMF documents
/// of the same names. `ALL`'s order is the dashboard's; `name()` is the
/// name in `AWS/Lambda`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MappingMetric {
    /// Records read from the source.
    Polled => "PolledEventCount",
    /// Records the filter criteria dropped without an invocation.
    FilteredOut => "FilteredOutEventCount",
    /// Records handed to the function (each invocation counts its records).
    Invoked => "InvokedEventCount",
    /// Records of invocations that failed (function error, or records a
    /// partial batch response reported failed).
    FailedInvoke => "FailedInvokeEventCount",
    /// Records abandoned (retries or record age spent) without an
    /// on-failure record: lost unless the audit repairs them.
    Dropped => "DroppedEventCount",
    /// Records whose on-failure record reached the destination.
    OnFailureDestinationDelivered => "OnFailureDestinationDeliveredEventCount",
}
}

/// The namespace of Lambda's own metrics.
pub const LAMBDA_NAMESPACE: &str = "AWS/Lambda";
/// The dimension of the event source mapping metrics: the mapping's UUID.
pub const DIMENSION_MAPPING: &str = "EventSourceMappingUUID";
/// Lambda's function metric of on-failure records it could not deliver to
/// a mapping's destination (dimension `FunctionName`).
pub const DESTINATION_DELIVERY_FAILURES: &str = "DestinationDeliveryFailures";

impl MappingMetric {
    /// One mapping's counts as an EMF document (`None` when all are zero:
    /// nothing happened).
    pub fn document(uuid: &str, counts: &[(MappingMetric, u64)], now: EpochMillis) -> Option<Value> {
        if counts.iter().all(|(_, n)| *n == 0) {
            return None;
        }
        let values: Vec<(&str, f64)> = counts.iter().map(|(metric, n)| (metric.name(), *n as f64)).collect();
        Some(emf_document(
            now,
            LAMBDA_NAMESPACE,
            &[(DIMENSION_MAPPING, uuid)],
            &values,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_follows_the_emf_specification() {
        let mut metrics = Metrics::new("hc-dev");
        metrics.add(Metric::Replays, 2.0).add(Metric::PermanentFailures, 0.0);
        let doc = metrics.document(1_700_000_000_000).unwrap();
        assert_eq!(
            doc,
            json!({
                "_aws": {
                    "Timestamp": 1_700_000_000_000u64,
                    "CloudWatchMetrics": [{
                        "Namespace": "HybridCounterKit",
                        "Dimensions": [["Stack"]],
                        "Metrics": [
                            { "Name": "Replays", "Unit": "Count" },
                            { "Name": "PermanentFailures", "Unit": "Count" },
                        ],
                    }],
                },
                "Stack": "hc-dev",
                "Replays": 2.0,
                "PermanentFailures": 0.0,
            })
        );
    }

    #[test]
    fn a_metric_recorded_twice_is_one_definition_with_the_sum() {
        let mut metrics = Metrics::new("s");
        metrics.add(Metric::EventsCounted, 3.0).add(Metric::EventsCounted, 4.0);
        let doc = metrics.document(1).unwrap();
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap().len(),
            1
        );
        assert_eq!(doc["EventsCounted"], json!(7.0));
    }

    #[test]
    fn nothing_recorded_is_no_document() {
        assert_eq!(Metrics::new("s").document(1), None);
    }

    #[test]
    fn the_stack_dimension_comes_from_the_environment_and_is_never_empty() {
        let named = |value: &'static str| move |name: &str| (name == ENV_STACK_NAME).then(|| value.to_owned());
        assert_eq!(stack_from_lookup(named("hc-prod")), "hc-prod");
        assert_eq!(stack_from_lookup(named("  ")), UNKNOWN_STACK);
        assert_eq!(stack_from_lookup(|_| None), UNKNOWN_STACK);
    }

    #[test]
    fn a_batch_and_its_cost_fill_the_stream_metrics() {
        let report = BatchReport {
            counted: 3,
            deleted_counted: 2,
            deleted_uncounted: 1,
            retries: 4,
            ..BatchReport::default()
        };
        let mut cost = MeterSnapshot {
            transactions_committed: 2,
            write_units: 10.0,
            ..MeterSnapshot::default()
        };
        cost.transactions_cancelled.conflict = 1;
        let mut metrics = Metrics::new("s");
        metrics.add_batch(&report).add_cost(&cost);
        assert_eq!(metrics.value(Metric::EventsCounted), Some(5.0));
        assert_eq!(metrics.value(Metric::Retries), Some(4.0));
        assert_eq!(metrics.value(Metric::Transactions), Some(2.0));
        assert_eq!(metrics.value(Metric::Conflicts), Some(1.0));
        assert_eq!(metrics.value(Metric::WriteUnits), Some(10.0));
    }

    #[test]
    fn throttles_are_a_total_and_one_document_per_reason() {
        let hot = ThrottleReason::parse("TableWriteKeyRangeThroughputExceeded");
        let capped = ThrottleReason::parse("TableReadMaxOnDemandThroughputExceeded");
        let meter = crate::store::meter::Meter::new();
        meter.throttled(&[hot]);
        meter.throttled(&[hot]);
        meter.throttled(&[capped]);
        let mut metrics = Metrics::new("hc-dev");
        metrics.add_cost(&meter.snapshot());
        assert_eq!(metrics.value(Metric::Throttles), Some(3.0));
        assert_eq!(metrics.throttles(hot), Some(2.0));
        let docs = metrics.documents(5);
        assert_eq!(docs.len(), 3, "{docs:?}");
        assert_eq!(docs[0]["Throttles"], json!(3.0));
        assert_eq!(
            docs[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Stack"]])
        );
        // In the meter's reason order: the table read before the table write.
        assert_eq!(
            docs[1]["ThrottleReason"],
            json!("TableReadMaxOnDemandThroughputExceeded")
        );
        assert_eq!(
            docs[2],
            json!({
                "_aws": {
                    "Timestamp": 5,
                    "CloudWatchMetrics": [{
                        "Namespace": "HybridCounterKit",
                        "Dimensions": [["Stack", "ThrottleReason"]],
                        "Metrics": [{ "Name": "Throttles", "Unit": "Count" }],
                    }],
                },
                "Stack": "hc-dev",
                "ThrottleReason": "TableWriteKeyRangeThroughputExceeded",
                "Throttles": 2.0,
            })
        );
    }

    #[test]
    fn no_throttle_is_no_throttle_document() {
        let mut metrics = Metrics::new("s");
        metrics.add(Metric::Replays, 1.0);
        assert_eq!(metrics.documents(1).len(), 1);
        assert_eq!(metrics.value(Metric::Throttles), None);
    }

    #[test]
    fn mapping_counts_are_lambdas_metrics_under_the_mappings_uuid() {
        let doc =
            MappingMetric::document("uuid-1", &[(MappingMetric::Polled, 10), (MappingMetric::Dropped, 2)], 9).unwrap();
        assert_eq!(
            doc,
            json!({
                "_aws": {
                    "Timestamp": 9,
                    "CloudWatchMetrics": [{
                        "Namespace": "AWS/Lambda",
                        "Dimensions": [["EventSourceMappingUUID"]],
                        "Metrics": [
                            { "Name": "PolledEventCount", "Unit": "Count" },
                            { "Name": "DroppedEventCount", "Unit": "Count" },
                        ],
                    }],
                },
                "EventSourceMappingUUID": "uuid-1",
                "PolledEventCount": 10.0,
                "DroppedEventCount": 2.0,
            })
        );
        assert_eq!(MappingMetric::document("u", &[(MappingMetric::Polled, 0)], 1), None);
    }

    #[test]
    fn metric_names_are_unique_and_fit_cloudwatch() {
        let names: std::collections::HashSet<_> = Metric::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names.len(), Metric::ALL.len());
        assert!(names.iter().all(|n| !n.is_empty() && n.len() <= 255 && n.is_ascii()));
    }
}
