//! What every poller of the runner shares: its configuration
//! ([`RunnerConfig`]), its clock, and the state of one run ([`Ctx`]: the
//! clients, the checkpoints per shard, the report, the stop flag).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hybrid_counter::stream::record::sequence_cmp;
use serde::{Deserialize, Serialize};

use crate::discover::{self, Mapping};
use crate::error::Error;
use crate::invoke::Invoke;
use crate::process::ProcessConfig;
use crate::report::{MappingReport, RunReport, ServedUrl};

/// Which emulator the runner plays the mappings of; it decides which of
/// the emulator's own copies of the mappings the runner disables while it
/// plays them ([`Host::takes_over`]), whether it enables them again when
/// it stops ([`Host::hands_back`]), and whether it plays scheduled
/// functions ([`Host::plays_schedules`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Host {
    /// The embedded emulator: it cannot run Lambda code, and its SQS poller
    /// deletes a mapped queue's messages unprocessed, so the runner takes the
    /// SQS mappings over for good; its stream poller only moves its own
    /// checkpoint and is left alone.
    #[default]
    Fakecloud,
    /// LocalStack runs both mappings itself, without bisect or a
    /// parallelization factor on the stream: the runner disables both of
    /// its copies while it plays them, so that no record is delivered
    /// twice at once, and enables them again when it stops.
    LocalStack,
}

impl Host {
    /// Whether the runner disables the emulator's enabled copy of a mapping
    /// of `source` before playing it.
    pub fn takes_over(self, source: &crate::discover::Source) -> bool {
        match self {
            Host::Fakecloud => matches!(source, crate::discover::Source::Queue(_)),
            Host::LocalStack => true,
        }
    }

    /// Whether the runner enables the emulator's copies again when it stops.
    pub fn hands_back(self) -> bool {
        self == Host::LocalStack
    }

    /// Whether the runner invokes scheduled functions (the drift check) at
    /// their rate: on the embedded emulator, which stores the EventBridge
    /// rule but runs no Lambda code; not on LocalStack, whose EventBridge
    /// invokes the function itself (playing it too would run it twice).
    pub fn plays_schedules(self) -> bool {
        self == Host::Fakecloud
    }
}
/// Where the first function URL is served unless configured: beside
/// `cargo lambda watch`'s own default, 9000 (`--attach`).
pub const DEFAULT_FUNCTION_URL_PORT: u16 = 9001;

/// Where the emulator is and how the runner polls it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunnerConfig {
    /// The emulator's endpoint, e.g. `http://127.0.0.1:4566`.
    pub endpoint: String,
    /// Which emulator that is.
    #[serde(default)]
    pub host: Host,
    pub region: String,
    /// How [`run`] and [`run_until_idle`] invoke functions: start the
    /// prebuilt handler binaries, or attach to a `cargo lambda watch`.
    pub processes: ProcessConfig,
    /// Pause between polls of a source that had nothing new. Lambda polls
    /// stream shards four times a second.
    pub poll_interval: Duration,
    /// How often [`run`] re-reads the mappings, to pick up a new deploy.
    pub discovery_interval: Duration,
    /// Pause before retrying a failed batch.
    pub retry_delay: Duration,
    /// Only play the mappings of these (deployed) functions; all when `None`.
    pub functions: Option<Vec<String>>,
    /// [`run_until_idle`] fails with [`Error::NotIdle`] after this long.
    pub idle_timeout: Duration,
    /// Whether [`run_until_idle`] also waits for SQS messages in flight (a
    /// failed message invisible until its visibility timeout) to come back
    /// and be retried, deleted or redriven to the dead-letter queue.
    pub wait_for_in_flight: bool,
    /// Loopback port of the first function URL [`crate::Runner::serve_function_urls`]
    /// serves, the next ones on the ports after it; 0: any free port.
    pub function_url_port: u16,
}

impl RunnerConfig {
    /// Defaults for an emulator at `endpoint`, invoking the handler
    /// binaries built in the workspace at `workspace`.
    pub fn new(endpoint: impl Into<String>, workspace: impl Into<std::path::PathBuf>) -> Self {
        Self {
            endpoint: endpoint.into(),
            host: Host::default(),
            region: "us-east-1".to_owned(),
            processes: ProcessConfig::new(workspace),
            poll_interval: Duration::from_millis(250),
            discovery_interval: Duration::from_secs(10),
            retry_delay: Duration::from_millis(200),
            functions: None,
            idle_timeout: Duration::from_secs(600),
            wait_for_in_flight: false,
            function_url_port: DEFAULT_FUNCTION_URL_PORT,
        }
    }
}

/// The current time; tests pass a clock that runs ahead to age records.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// What draining one source did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Drained {
    /// Something was read (and delivered, filtered or given up on).
    pub(crate) progressed: bool,
    /// The shard is closed and read to its end.
    pub(crate) finished: bool,
}

/// State shared by the pollers.
pub(crate) struct Ctx<I> {
    pub(crate) invoker: I,
    pub(crate) streams: aws_sdk_dynamodbstreams::Client,
    pub(crate) sqs: aws_sdk_sqs::Client,
    /// Writes failed batches to an S3 on-failure destination.
    pub(crate) s3: aws_sdk_s3::Client,
    pub(crate) lambda: aws_sdk_lambda::Client,
    pub(crate) config: RunnerConfig,
    pub(crate) clock: Clock,
    pub(crate) stopping: AtomicBool,
    /// Last sequence number processed, per (mapping, shard). In memory only.
    pub(crate) checkpoints: Mutex<HashMap<(String, String), String>>,
    pub(crate) finished_shards: Mutex<HashSet<(String, String)>>,
    /// The scheduled functions found by the last discovery.
    pub(crate) schedules: Mutex<Vec<crate::schedule::Schedule>>,
    pub(crate) report: Mutex<RunReport>,
    pub(crate) queue_urls: tokio::sync::Mutex<HashMap<String, String>>,
    /// The function URLs served, untagged when [`crate::Runner::run`] stops.
    pub(crate) served: Mutex<Vec<ServedUrl>>,
}

impl<I: Invoke> Ctx<I> {
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub(crate) fn now(&self) -> SystemTime {
        (self.clock)()
    }

    pub(crate) async fn pause(&self) {
        tokio::time::sleep(self.config.retry_delay).await;
    }

    pub(crate) fn checkpoint(&self, uuid: &str, shard_id: &str) -> Option<String> {
        self.checkpoints
            .lock()
            .expect("checkpoints lock")
            .get(&(uuid.to_owned(), shard_id.to_owned()))
            .cloned()
    }

    /// Moves the checkpoint to `sequence_number` if that is further on.
    pub(crate) fn advance(&self, uuid: &str, shard_id: &str, sequence_number: &str) {
        if sequence_number.is_empty() {
            return;
        }
        let mut checkpoints = self.checkpoints.lock().expect("checkpoints lock");
        let slot = checkpoints.entry((uuid.to_owned(), shard_id.to_owned())).or_default();
        if slot.is_empty() || sequence_cmp(sequence_number, slot).is_gt() {
            *slot = sequence_number.to_owned();
        }
    }

    /// The report of `mapping` so far.
    pub(crate) fn mapping_report(&self, mapping: &Mapping) -> MappingReport {
        self.report.lock().expect("report lock").mapping(&mapping.uuid)
    }

    /// Writes what `mapping` did since `before` as Lambda's event source
    /// mapping metrics: one EMF line, as Lambda would publish them (nothing
    /// when nothing happened), on stderr with the runner's log
    /// (`.run/local-runner.log`): stdout carries only the run's report.
    pub(crate) fn emit_mapping_metrics(&self, mapping: &Mapping, before: &MappingReport) {
        let now = self
            .now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as hybrid_counter::EpochMillis);
        if let Some(document) = self.mapping_report(mapping).metrics_since(before, now) {
            eprintln!("{document}");
        }
    }

    pub(crate) fn update_report(&self, mapping: &Mapping, change: impl FnOnce(&mut MappingReport)) {
        let mut report = self.report.lock().expect("report lock");
        change(report.mappings.entry(mapping.uuid.clone()).or_default());
    }

    pub(crate) async fn queue_url(&self, arn: &str) -> Result<String, Error> {
        let mut urls = self.queue_urls.lock().await;
        if let Some(url) = urls.get(arn) {
            return Ok(url.clone());
        }
        let url = discover::queue_url(&self.sqs, arn).await?;
        urls.insert(arn.to_owned(), url.clone());
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{QueueSettings, Source, StartingPosition, StreamSettings};

    fn stream() -> Source {
        Source::Stream(StreamSettings {
            starting_position: StartingPosition::TrimHorizon,
            bisect_batch_on_function_error: true,
            maximum_retry_attempts: Some(3),
            maximum_record_age: None,
            on_failure_destination: Some("arn:aws:sqs:us-east-1:000000000000:dlq1".into()),
        })
    }

    fn queue() -> Source {
        Source::Queue(QueueSettings {
            queue_url: "http://localhost:4566/000000000000/dlq1".into(),
            visibility_timeout: Duration::from_secs(720),
            redrive: None,
        })
    }

    #[test]
    fn on_localstack_the_runner_disables_both_mappings_while_it_plays_and_hands_them_back() {
        assert!(
            Host::LocalStack.takes_over(&stream()),
            "LocalStack's stream mapping lacks bisect"
        );
        assert!(
            Host::LocalStack.takes_over(&queue()),
            "LocalStack's SQS mapping would race the runner"
        );
        assert!(Host::LocalStack.hands_back());
        assert!(
            !Host::LocalStack.plays_schedules(),
            "LocalStack's EventBridge invokes the drift check itself"
        );
    }

    #[test]
    fn on_fakecloud_the_runner_takes_only_the_sqs_mapping_and_keeps_it() {
        assert!(
            Host::Fakecloud.takes_over(&queue()),
            "fakecloud's poller deletes messages unprocessed"
        );
        assert!(
            !Host::Fakecloud.takes_over(&stream()),
            "fakecloud's stream poller only moves its checkpoint"
        );
        assert!(
            !Host::Fakecloud.hands_back(),
            "re-enabling would let fakecloud delete DLQ1's messages"
        );
        assert!(
            Host::Fakecloud.plays_schedules(),
            "fakecloud stores the rule but runs no Lambda code"
        );
        assert_eq!(RunnerConfig::new("http://127.0.0.1:4566", "/kit").host, Host::Fakecloud);
    }

    #[test]
    fn a_config_without_a_host_is_the_embedded_emulators() {
        let mut json = serde_json::to_value(RunnerConfig::new("http://x", "/kit")).unwrap();
        json.as_object_mut().unwrap().remove("host");
        let config: RunnerConfig = serde_json::from_value(json).unwrap();
        assert_eq!(config.host, Host::Fakecloud);
    }
}
