//! What the runner did, per mapping: a `Serialize` report for `--output json`
//! and a `Display` table for people; for a stream mapping, also the counts
//! Lambda publishes as the mapping's metrics ([`MappingReport::event_counts`]),
//! which the runner writes as EMF lines like Lambda's (`DeletedEventCount`,
//! a Kafka and Amazon MQ count, does not apply to a stream).

use std::collections::BTreeMap;
use std::fmt;

use hybrid_counter::EpochMillis;
use hybrid_counter::metrics::MappingMetric;
use serde::Serialize;
use serde_json::Value;

/// Counters of one mapping.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MappingReport {
    pub uuid: String,
    pub function_name: String,
    pub source_arn: String,
    /// `stream` or `sqs`.
    pub kind: String,
    pub invocations: u64,
    /// Stream records read and done with: delivered, filtered or given up on
    /// (a record read ahead and read again later counts once).
    pub records_polled: u64,
    /// Records (or messages) handed to the function, counting redeliveries.
    pub records_delivered: u64,
    /// Records of invocations that failed: a function error, or the records
    /// from the first one a partial batch response reported failed.
    pub records_failed_invoke: u64,
    /// Stream records dropped by the filter without an invocation.
    pub records_filtered: u64,
    /// Re-invocations of a failed batch (or of its unprocessed tail).
    pub retries: u64,
    /// Failed batches split in two.
    pub bisects: u64,
    pub function_errors: u64,
    /// Invocations that reported some records in `batchItemFailures`.
    pub partial_failures: u64,
    /// On-failure records sent (one per abandoned batch).
    pub batches_to_on_failure: u64,
    /// Records those batches covered.
    pub records_to_on_failure: u64,
    /// Records abandoned with no on-failure destination to record them.
    pub records_discarded: u64,
    pub messages_received: u64,
    pub messages_deleted: u64,
    /// Messages left for the queue to redeliver after the visibility timeout.
    pub messages_returned: u64,
}

impl MappingReport {
    /// The counts Lambda publishes as the mapping's metrics (`MetricsConfig:
    /// EventCount`), as far as the runner keeps them.
    pub fn event_counts(&self) -> [(MappingMetric, u64); 6] {
        [
            (MappingMetric::Polled, self.records_polled),
            (MappingMetric::FilteredOut, self.records_filtered),
            (MappingMetric::Invoked, self.records_delivered),
            (MappingMetric::FailedInvoke, self.records_failed_invoke),
            (MappingMetric::Dropped, self.records_discarded),
            (MappingMetric::OnFailureDestinationDelivered, self.records_to_on_failure),
        ]
    }

    /// What happened between `earlier` and `self` as the mapping's metrics:
    /// one EMF document under its UUID, or `None` when nothing did.
    pub fn metrics_since(&self, earlier: &MappingReport, now: EpochMillis) -> Option<Value> {
        let counts: Vec<(MappingMetric, u64)> = self
            .event_counts()
            .iter()
            .zip(earlier.event_counts())
            .map(|((metric, n), (_, before))| (*metric, n.saturating_sub(before)))
            .collect();
        MappingMetric::document(&self.uuid, &counts, now)
    }
}

/// A function URL the runner serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedUrl {
    pub function_name: String,
    #[serde(skip)]
    pub function_arn: String,
    /// Where to send requests, e.g. `http://127.0.0.1:9001/`.
    pub local_url: String,
    /// The URL the deployed configuration names (unreachable locally).
    pub deployed_url: String,
    /// The deployed `AuthType` (`AWS_IAM`, `NONE`); not enforced locally.
    pub deployed_auth_type: String,
}

impl ServedUrl {
    /// What a caller must know: the URL, and that IAM auth is off.
    pub fn describe(&self) -> String {
        format!(
            "{} serves the function URL of {} (deployed auth {}; IAM auth is off locally: requests are not signed)",
            self.local_url, self.function_name, self.deployed_auth_type
        )
    }
}

/// Counters of one scheduled function.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScheduleReport {
    pub function_name: String,
    /// As deployed, e.g. `rate(5 minutes)`.
    pub expression: String,
    pub invocations: u64,
    pub function_errors: u64,
    /// The last run's response (the drift check's outcome).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_response: Option<serde_json::Value>,
}

/// Everything the runner did, per mapping UUID and per scheduled function.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunReport {
    pub mappings: BTreeMap<String, MappingReport>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub schedules: BTreeMap<String, ScheduleReport>,
    /// The function URLs served on loopback while the runner ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub function_urls: Vec<ServedUrl>,
}

impl RunReport {
    /// The report of one mapping (empty when it never ran).
    pub fn mapping(&self, uuid: &str) -> MappingReport {
        self.mappings.get(uuid).cloned().unwrap_or_default()
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for url in &self.function_urls {
            writeln!(f, "served {}", url.describe())?;
        }
        for s in self.schedules.values() {
            writeln!(
                f,
                "{} on {}: invocations {}  function errors {}",
                s.function_name, s.expression, s.invocations, s.function_errors
            )?;
        }
        if self.mappings.is_empty() {
            return writeln!(f, "no event source mappings played");
        }
        for m in self.mappings.values() {
            writeln!(f, "{} ({}) -> {}  [{}]", m.source_arn, m.kind, m.function_name, m.uuid)?;
            writeln!(
                f,
                "  invocations {}  delivered {}  filtered {}  retries {}  bisects {}  function errors {}  partial failures {}",
                m.invocations,
                m.records_delivered,
                m.records_filtered,
                m.retries,
                m.bisects,
                m.function_errors,
                m.partial_failures
            )?;
            if m.kind == "sqs" {
                writeln!(
                    f,
                    "  messages received {}  deleted {}  returned {}",
                    m.messages_received, m.messages_deleted, m.messages_returned
                )?;
            } else {
                writeln!(
                    f,
                    "  to on-failure destination: {} batches, {} records  discarded {}",
                    m.batches_to_on_failure, m.records_to_on_failure, m.records_discarded
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_played_becomes_lambdas_mapping_metrics_under_its_uuid() {
        let before = MappingReport {
            uuid: "m-1".into(),
            records_polled: 10,
            records_delivered: 10,
            ..MappingReport::default()
        };
        let after = MappingReport {
            records_polled: 110,
            records_filtered: 5,
            records_delivered: 125,
            records_failed_invoke: 20,
            records_discarded: 3,
            records_to_on_failure: 7,
            ..before.clone()
        };
        let doc = after.metrics_since(&before, 42).unwrap();
        assert_eq!(doc["EventSourceMappingUUID"], "m-1");
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], "AWS/Lambda");
        let counts: Vec<(&str, f64)> = MappingMetric::ALL
            .iter()
            .map(|m| (m.name(), doc[m.name()].as_f64().unwrap()))
            .collect();
        assert_eq!(
            counts,
            [
                ("PolledEventCount", 100.0),
                ("FilteredOutEventCount", 5.0),
                ("InvokedEventCount", 115.0),
                ("FailedInvokeEventCount", 20.0),
                ("DroppedEventCount", 3.0),
                ("OnFailureDestinationDeliveredEventCount", 7.0),
            ]
        );
        assert_eq!(after.metrics_since(&after, 43), None, "nothing happened: no line");
    }

    #[test]
    fn the_report_renders_as_json_and_text() {
        let mut report = RunReport::default();
        report.mappings.insert(
            "u1".into(),
            MappingReport {
                uuid: "u1".into(),
                function_name: "hck-stream-counter".into(),
                source_arn: "arn:stream".into(),
                kind: "stream".into(),
                invocations: 3,
                ..Default::default()
            },
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["mappings"]["u1"]["invocations"], 3);
        let text = report.to_string();
        assert!(
            text.contains("hck-stream-counter") && text.contains("invocations 3"),
            "{text}"
        );
    }

    #[test]
    fn the_description_says_iam_auth_is_off() {
        let url = ServedUrl {
            function_name: "hck-api".into(),
            function_arn: String::new(),
            local_url: "http://127.0.0.1:9001/".into(),
            deployed_url: "https://abc.lambda-url.us-east-1.on.aws/".into(),
            deployed_auth_type: "AWS_IAM".into(),
        };
        let text = url.describe();
        assert!(
            text.starts_with("http://127.0.0.1:9001/ serves the function URL of hck-api"),
            "{text}"
        );
        assert!(text.contains("IAM auth is off locally"), "{text}");
    }
}
