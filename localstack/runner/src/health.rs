//! The runner's heartbeat, so that `counterctl status` (another process)
//! can tell a runner that plays the mappings from one that died or cannot
//! invoke the handlers: while [`crate::Runner::run`] runs it tags the
//! functions it plays with [`RUNNER_HEALTH_TAG`] every
//! [`HEARTBEAT_INTERVAL`], `ok` or `failing` with the reason, and removes
//! the tag when it stops cleanly.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hybrid_counter_aws::esm::{RUNNER_HEALTH_TAG, RunnerHealth};
use tracing::warn;

use crate::error::{Error, sdk_message};

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
