//! The runner's heartbeat, so that `counterctl status` (another process)
//! can tell a runner that plays the mappings from one that died or cannot
//! invoke the handlers: while [`crate::Runner::run`] runs it tags the
//! functions it plays with [`RUNNER_HEALTH_TAG`] every
//! [`HEARTBEAT_INTERVAL`], `ok` or `failing` with the reason, and removes
//! the tag when it stops cleanly. What it says is kept per source
//! ([`Problems`]): a source's problem is cleared only when that source
//! makes progress, so one healthy mapping neither hides another's problem
//! nor makes the tag flap.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hybrid_counter_aws::esm::{RUNNER_HEALTH_TAG, RunnerHealth};
use tracing::warn;

use crate::error::{Error, sdk_message};

/// Starts the log line of the runner's first heartbeat, `ok` or `failing:
/// <reason>`, written once the mappings are discovered and the handlers
/// started: what `localstack/local-runner.sh start` (`make deploy`) waits for.
pub const FIRST_HEARTBEAT: &str = "first runner heartbeat:";

/// How often the heartbeat is written.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// Whether `err` means the runner cannot invoke the handlers (as opposed to
/// an emulator hiccup, retried on the next poll).
pub(crate) fn cannot_invoke(err: &Error) -> bool {
    matches!(
        err,
        Error::Invoke { .. }
            | Error::BinaryMissing { .. }
            | Error::HandlerNotReady { .. }
            | Error::UnknownFunction { .. }
            | Error::AssumeRole { .. }
    )
}

/// Why the handlers cannot be invoked: the last discovery's problem (it
/// starts them) and each source's (`K`, a mapping's shard or queue) since
/// it last made progress.
pub(crate) struct Problems<K> {
    discovery: Option<String>,
    sources: HashMap<K, String>,
}

impl<K> Default for Problems<K> {
    fn default() -> Self {
        Self {
            discovery: None,
            sources: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash> Problems<K> {
    /// A discovery ended, with `err` when it (or preparing a function) failed.
    pub(crate) fn discovered(&mut self, err: Option<&Error>) {
        self.discovery = err.filter(|e| cannot_invoke(e)).map(ToString::to_string);
    }

    /// Source `key` failed with `err`.
    pub(crate) fn failed(&mut self, key: K, err: &Error) {
        if cannot_invoke(err) {
            self.sources.insert(key, err.to_string());
        }
    }

    /// Source `key` made progress: its problem is over.
    pub(crate) fn progressed(&mut self, key: &K) {
        self.sources.remove(key);
    }

    /// What the heartbeat says now: the discovery's problem, else one of
    /// the sources' (the same one each time).
    pub(crate) fn current(&self) -> Option<&str> {
        self.discovery
            .as_deref()
            .or_else(|| self.sources.values().min().map(String::as_str))
    }
}

/// The heartbeat's state: each function's ARN, read once.
#[derive(Default)]
pub(crate) struct Heartbeat {
    arns: HashMap<String, String>,
}

impl Heartbeat {
    async fn arn(&mut self, lambda: &aws_sdk_lambda::Client, function: &str) -> Option<String> {
        if let Some(arn) = self.arns.get(function) {
            return Some(arn.clone());
        }
        let configuration = lambda
            .get_function_configuration()
            .function_name(function)
            .send()
            .await
            .ok()?;
        let arn = configuration.function_arn()?.to_owned();
        self.arns.insert(function.to_owned(), arn.clone());
        Some(arn)
    }

    /// Tags each of `functions` with the runner's health now.
    pub(crate) async fn beat(&mut self, lambda: &aws_sdk_lambda::Client, functions: &[String], problem: Option<&str>) {
        let health = RunnerHealth {
            at_unix_secs: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
            problem: problem.map(str::to_owned),
        };
        for function in functions {
            let Some(arn) = self.arn(lambda, function).await else {
                continue;
            };
            let tagged = lambda
                .tag_resource()
                .resource(&arn)
                .tags(RUNNER_HEALTH_TAG, health.tag_value())
                .send()
                .await;
            if let Err(err) = tagged {
                warn!(%function, error = %sdk_message(err), "could not write the runner's heartbeat");
            }
        }
    }

    /// Removes the tag from every function it was written on.
    pub(crate) async fn clear(&self, lambda: &aws_sdk_lambda::Client) {
        for arn in self.arns.values() {
            let _ = lambda
                .untag_resource()
                .resource(arn)
                .tag_keys(RUNNER_HEALTH_TAG)
                .send()
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(function: &str) -> Error {
        Error::Invoke {
            function: function.to_owned(),
            message: "no answer".to_owned(),
        }
    }

    #[test]
    fn a_sources_problem_clears_only_when_that_source_progresses() {
        let mut problems = Problems::default();
        problems.failed("stream", &unknown("stream-counter"));
        let said = problems.current().map(str::to_owned);
        assert!(
            said.as_deref().is_some_and(|p| p.contains("stream-counter")),
            "{said:?}"
        );
        // Another source's progress does not hide it (no flapping).
        problems.progressed(&"dlq1");
        assert_eq!(problems.current().map(str::to_owned), said);
        problems.failed("dlq1", &unknown("dlq-reprocessor"));
        problems.progressed(&"stream");
        assert!(problems.current().is_some_and(|p| p.contains("dlq-reprocessor")));
        problems.progressed(&"dlq1");
        assert_eq!(problems.current(), None);
        // A discovery's problem comes first, until a discovery succeeds.
        problems.discovered(Some(&unknown("api")));
        assert!(problems.current().is_some_and(|p| p.contains("api")));
        problems.discovered(None);
        assert_eq!(problems.current(), None);
    }

    #[test]
    fn the_tag_keeps_the_reason_and_the_log_tail_and_cuts_the_path() {
        let err = Error::HandlerNotReady {
            function: "hybrid-counter-stream-counter".to_owned(),
            reason: "it exited (exit status: 1)".to_owned(),
            log: std::path::PathBuf::from(format!("/{}/stream-counter.log", "very-long-directory/".repeat(20))),
            tail: "Error: missing RESOURCES_TABLE".to_owned(),
        };
        let value = hybrid_counter_aws::esm::RunnerHealth {
            at_unix_secs: 1,
            problem: Some(err.to_string()),
        }
        .tag_value();
        assert!(value.contains("it exited"), "{value}");
        assert!(value.contains("Error: missing RESOURCES_TABLE"), "{value}");
        assert!(
            !value.contains("stream-counter.log"),
            "the path is what is cut: {value}"
        );
    }
}
