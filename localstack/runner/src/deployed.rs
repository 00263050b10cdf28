//! A function as deployed ([`DeployedFunction`], read from
//! `GetFunctionConfiguration`): what a handler process is started with
//! ([`crate::process`]), so a difference after a redeploy (environment,
//! memory, timeout, code) restarts it, and the `Timeout` that bounds each
//! of its invocations.

use std::collections::BTreeMap;
use std::time::Duration;

/// What a function's process was started with, from its deployed
/// configuration: a difference means a redeploy changed the function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployedFunction {
    pub function_arn: String,
    pub environment: BTreeMap<String, String>,
    pub memory_size: i32,
    pub code_sha256: Option<String>,
    /// Its `Timeout`: how long one invocation may run before Lambda stops
    /// it (`None`: the configuration has none, the runner's
    /// [`ProcessConfig::invoke_timeout`] applies).
    pub timeout: Option<Duration>,
    /// What Lambda sets from its `LoggingConfig` (advanced logging
    /// controls): `AWS_LAMBDA_LOG_FORMAT`, and with JSON the application's
    /// `AWS_LAMBDA_LOG_LEVEL`, which lambda_runtime's default subscriber
    /// reads (<https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-advanced.html>).
    pub logging: BTreeMap<String, String>,
}

impl DeployedFunction {
    pub(crate) fn of(
        configuration: &aws_sdk_lambda::operation::get_function_configuration::GetFunctionConfigurationOutput,
    ) -> Self {
        Self {
            function_arn: configuration.function_arn().unwrap_or_default().to_owned(),
            environment: crate::discover::environment_variables(configuration.environment()),
            memory_size: configuration.memory_size().unwrap_or(128),
            code_sha256: configuration.code_sha256().map(str::to_owned),
            timeout: configuration
                .timeout()
                .and_then(|secs| u64::try_from(secs).ok())
                .filter(|secs| *secs > 0)
                .map(Duration::from_secs),
            logging: logging_environment(configuration.logging_config()),
        }
    }

    /// How long one invocation of this function may run: its deployed
    /// `Timeout`, else `fallback`.
    pub(crate) fn invoke_timeout(&self, fallback: Duration) -> Duration {
        self.timeout.unwrap_or(fallback)
    }

    /// What changed from `self` to `now`, for the log.
    pub(crate) fn changes(&self, now: &Self) -> String {
        let keys: std::collections::BTreeSet<&String> = self.environment.keys().chain(now.environment.keys()).collect();
        let mut changed: Vec<String> = keys
            .into_iter()
            .filter(|key| self.environment.get(*key) != now.environment.get(*key))
            .map(|key| format!("${key}"))
            .collect();
        if self.memory_size != now.memory_size {
            changed.push("memory".to_owned());
        }
        if self.code_sha256 != now.code_sha256 {
            changed.push("code".to_owned());
        }
        if self.timeout != now.timeout {
            changed.push("timeout".to_owned());
        }
        if self.logging != now.logging {
            changed.push("logging".to_owned());
        }
        changed.join(", ")
    }
}

/// The variables Lambda sets from a function's `LoggingConfig`.
fn logging_environment(config: Option<&aws_sdk_lambda::types::LoggingConfig>) -> BTreeMap<String, String> {
    let mut variables = BTreeMap::new();
    let Some((config, format)) = config.and_then(|c| Some((c, c.log_format()?))) else {
        return variables;
    };
    variables.insert("AWS_LAMBDA_LOG_FORMAT".to_owned(), format.as_str().to_owned());
    if *format == aws_sdk_lambda::types::LogFormat::Json
        && let Some(level) = config.application_log_level()
    {
        variables.insert("AWS_LAMBDA_LOG_LEVEL".to_owned(), level.as_str().to_owned());
    }
    variables
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redeploy_is_an_environment_or_code_difference_and_the_log_names_it() {
        let deployed = |mode: &str, sha: &str| DeployedFunction {
            function_arn: "arn:fn".to_owned(),
            memory_size: 128,
            environment: BTreeMap::from([
                ("ADMISSION_MODE".to_owned(), mode.to_owned()),
                ("TABLE".to_owned(), "t".to_owned()),
            ]),
            code_sha256: Some(sha.to_owned()),
            timeout: Some(Duration::from_secs(30)),
            logging: BTreeMap::new(),
        };
        let started = deployed("best-effort", "a");
        assert_eq!(started, deployed("best-effort", "a"), "the same deploy: no restart");
        assert_eq!(started.changes(&deployed("strict", "a")), "$ADMISSION_MODE");
        assert_eq!(started.changes(&deployed("best-effort", "b")), "code");
        let mut added = deployed("strict", "b");
        added.environment.insert("BE_SHARDS".to_owned(), "4".to_owned());
        assert_eq!(started.changes(&added), "$ADMISSION_MODE, $BE_SHARDS, code");
        let shorter = DeployedFunction {
            timeout: Some(Duration::from_secs(2)),
            ..deployed("best-effort", "a")
        };
        assert_eq!(
            started.changes(&shorter),
            "timeout",
            "a redeploy's timeout restarts the function"
        );
    }

    /// Each function's invocations are bounded by its own deployed
    /// `Timeout`, read from `GetFunctionConfiguration`; the runner's
    /// setting only when the configuration has none.
    #[test]
    fn an_invocation_is_bounded_by_the_functions_deployed_timeout() {
        let configuration = |timeout: Option<i32>| {
            aws_sdk_lambda::operation::get_function_configuration::GetFunctionConfigurationOutput::builder()
                .function_arn("arn:fn")
                .set_timeout(timeout)
                .build()
        };
        let fallback = Duration::from_secs(300);
        let short = DeployedFunction::of(&configuration(Some(2)));
        assert_eq!(short.timeout, Some(Duration::from_secs(2)));
        assert_eq!(short.invoke_timeout(fallback), Duration::from_secs(2));
        let unset = DeployedFunction::of(&configuration(None));
        assert_eq!(unset.invoke_timeout(fallback), fallback);
    }

    /// The function's `LoggingConfig` reaches its process as Lambda passes
    /// it to a custom runtime: the format always, the application's level
    /// only with JSON (Lambda filters no text logs by level).
    #[test]
    fn the_logging_config_becomes_the_variables_lambda_sets() {
        use aws_sdk_lambda::types::{ApplicationLogLevel, LogFormat, LoggingConfig};
        let configuration = |logging: Option<LoggingConfig>| {
            aws_sdk_lambda::operation::get_function_configuration::GetFunctionConfigurationOutput::builder()
                .function_arn("arn:fn")
                .set_logging_config(logging)
                .build()
        };
        let json = LoggingConfig::builder()
            .log_format(LogFormat::Json)
            .application_log_level(ApplicationLogLevel::Warn)
            .build();
        assert_eq!(
            DeployedFunction::of(&configuration(Some(json))).logging,
            BTreeMap::from([
                ("AWS_LAMBDA_LOG_FORMAT".to_owned(), "JSON".to_owned()),
                ("AWS_LAMBDA_LOG_LEVEL".to_owned(), "WARN".to_owned()),
            ])
        );
        let text = LoggingConfig::builder()
            .log_format(LogFormat::Text)
            .application_log_level(ApplicationLogLevel::Warn)
            .build();
        assert_eq!(
            DeployedFunction::of(&configuration(Some(text))).logging,
            BTreeMap::from([("AWS_LAMBDA_LOG_FORMAT".to_owned(), "Text".to_owned())])
        );
        assert!(DeployedFunction::of(&configuration(None)).logging.is_empty());
    }
}
