//! `counterctl local run`: plays the deployed stack's event source mappings
//! and the drift check's schedule in the embedded emulator, which stores
//! them but cannot run Lambda code (DESIGN §8). The local event-source runner (`esm-runner`) reads the
//! mappings of the stack's functions back from the emulator's Lambda API,
//! polls the stream and DLQ1, and invokes the real handler binaries (one
//! process per function, the binaries the build step left, started here
//! against a Lambda runtime API the runner serves; or a `cargo lambda
//! watch` already running with `--attach`), with the mappings' batch size,
//! filter, bisect, retry, record age and on-failure semantics.
//!
//! While it runs until stopped it also serves the api function's URL on
//! loopback (`--api-port`, default 9001): the real `api` binary, with
//! function URL semantics and IAM auth off
//! (`esm_runner::function_url`); `counterctl status` shows the URL.
//!
//! It runs until Ctrl-C or SIGTERM (`make local-stop`); the batch in flight
//! on each source finishes first. `--until-idle` drains what the sources
//! hold now and exits. Progress is logged on stderr (tracing, `RUST_LOG`);
//! the report of what was played goes to stdout at the end.
//!
//! Built only with the `local` feature (`cargo build --bin counterctl
//! --features ops-cli/local`, as `make deploy` does), so that a build
//! without it does not link the runner; without it, `local run` still parses and [`crate::config`]
//! refuses it with a usage error that says how to build it.

use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

use esm_runner::{HandlerProcesses, Host, RunReport, Runner, RunnerConfig};
use serde::Serialize;
use tracing::info;

use super::deploy::cfn;
use super::{Context, Location};
use crate::config::LocalRunOptions;
use crate::connect;
use crate::error::{Error, Result};

/// The default log filter of `local run` when `RUST_LOG` is not set: what
/// the runner plays, and warnings from everything else.
pub const LOG_FILTER: &str = "warn,esm_runner=info,ops_cli=info";

/// The line `localstack/local-runner.sh start` waits for in the log.
pub const STARTED: &str = "local runner started";

/// Starts the log line of each function URL served, which
/// `localstack/local-runner.sh start` repeats (so `make deploy` prints it).
pub const API_LINE: &str = "local API:";

/// The stack outputs naming the functions whose mappings (and, for the
/// drift check, schedule) are played.
const FUNCTIONS: [&str; 4] = [
    stack::outputs::STREAM_COUNTER_FUNCTION,
    stack::outputs::DLQ_REPROCESSOR_FUNCTION,
    stack::outputs::API_FUNCTION,
    stack::outputs::DRIFT_CHECK_FUNCTION,
];

/// The runner's configuration for the emulator at `endpoint`.
pub fn runner_config(
    endpoint: &str,
    region: &str,
    workspace: PathBuf,
    functions: Vec<String>,
    options: &LocalRunOptions,
) -> RunnerConfig {
    let mut config = RunnerConfig::new(endpoint, workspace);
    config.host = if options.localstack {
        Host::LocalStack
    } else {
        Host::Fakecloud
    };
    config.region = region.to_owned();
    config.poll_interval = options.poll_interval;
    config.functions = Some(functions);
    config.idle_timeout = options.idle_timeout;
    config.wait_for_in_flight = options.wait_for_in_flight;
    config.processes.attach.clone_from(&options.attach);
    config.processes.release = options.release;
    config.function_url_port = options.api_port.unwrap_or(0);
    config
}

#[derive(Debug, Clone, Serialize)]
pub struct LocalRunReport {
    #[serde(flatten)]
    pub location: Location,
    /// `until-idle` or `until-stopped`.
    pub mode: String,
    /// The stack's functions whose mappings were played.
    pub functions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attach: Option<String>,
    /// `--until-idle` was stopped by a signal before the sources were drained.
    pub interrupted: bool,
    /// The LocalStack mappings disabled while the runner played them and
    /// enabled again when it stopped (empty on the embedded emulator).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub handed_back: Vec<String>,
    pub seconds: f64,
    pub runner: RunReport,
}

impl LocalRunReport {
    pub fn succeeded(&self) -> bool {
        !self.interrupted
    }
}

pub async fn run(ctx: &Context<'_>, options: &LocalRunOptions) -> Result<LocalRunReport> {
    let started = Instant::now();
    if options.localstack {
        let authority = ctx.clients.endpoint.as_deref().and_then(connect::http_authority);
        // An https or other endpoint is not probed; the SDK says what is wrong with it.
        if let (Some(endpoint), Some(authority)) = (ctx.clients.endpoint.as_deref(), authority) {
            let answered = hybrid_counter_aws::probe::answers_ok(authority, crate::config::LOCALSTACK_HEALTH_PATH);
            crate::config::localstack_answered(endpoint, answered)?;
        }
    }
    ctx.ui.step(format!("reading stack {}", ctx.config.stack_name));
    let stack = cfn::describe(&ctx.clients.cloudformation, &ctx.config.stack_name)
        .await?
        .ok_or_else(|| ctx.not_found())?;
    let functions: Vec<String> = FUNCTIONS
        .iter()
        .filter_map(|key| stack.outputs.get(*key).cloned())
        .collect();
    if functions.is_empty() {
        return Err(Error::StackIncomplete {
            name: ctx.config.stack_name.clone(),
            missing: FUNCTIONS.join(", "),
        });
    }
    let endpoint = ctx.clients.endpoint.clone().ok_or_else(|| {
        Error::InvalidArgument("`local run` needs the emulator's endpoint; use --target local or localstack".to_owned())
    })?;
    let workspace = connect::workspace_root().ok_or_else(|| {
        Error::InvalidArgument(
            "the kit's workspace (handlers/, Cargo.toml) was not found from the current directory; run `counterctl \
             local run` from it"
                .to_owned(),
        )
    })?;
    let config = runner_config(&endpoint, &ctx.clients.region, workspace, functions.clone(), options);
    let invoker = HandlerProcesses::new(config.processes.clone(), &endpoint, &ctx.clients.region)?;
    let runner = Runner::connect(config, invoker).await?;
    // From here on the runner logs through tracing; the spinner would
    // garble those lines.
    ctx.ui.finish();
    if options.api_port.is_some() {
        for url in runner.serve_function_urls().await? {
            info!("{API_LINE} {}", url.describe());
        }
    }
    info!(
        stack = %ctx.config.stack_name,
        %endpoint,
        functions = %functions.join(", "),
        until_idle = options.until_idle,
        "{STARTED}: playing the event source mappings; Ctrl-C or SIGTERM stops it"
    );
    let played = if options.until_idle {
        tokio::select! {
            result = runner.run_until_idle() => result.map(|report| (report, false)),
            () = shutdown_signal() => {
                info!("stopping before the sources were drained");
                Ok((runner.report(), true))
            }
        }
    } else {
        runner.run(shutdown_signal()).await.map(|report| (report, false))
    };
    // On LocalStack its own copies of the mappings are enabled again, also
    // after a failed run (a no-op on the embedded emulator).
    let handed_back = runner.hand_back().await;
    let (report, interrupted) = played?;
    let handed_back = handed_back?;
    info!("local runner stopped");
    Ok(LocalRunReport {
        location: Location::of(ctx),
        mode: if options.until_idle {
            "until-idle"
        } else {
            "until-stopped"
        }
        .to_owned(),
        functions,
        attach: options.attach.clone(),
        interrupted,
        handed_back,
        seconds: started.elapsed().as_secs_f64(),
        runner: report,
    })
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

impl fmt::Display for LocalRunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Local runner for stack {} ({}, {:.1}s{}):",
            self.location.stack_name,
            self.mode,
            self.seconds,
            if self.interrupted {
                ", interrupted before the sources were drained"
            } else {
                ""
            }
        )?;
        if let Some(address) = &self.attach {
            writeln!(f, "  invoked through the cargo lambda watch at {address}")?;
        }
        if !self.handed_back.is_empty() {
            writeln!(
                f,
                "  LocalStack's own mappings enabled again: {}",
                self.handed_back.join(", ")
            )?;
        }
        write!(f, "{}", self.runner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cli::Target;

    #[test]
    fn a_runner_that_does_not_drain_in_time_exits_5_and_other_runner_failures_are_environment_errors() {
        let not_idle = Error::from(esm_runner::Error::NotIdle {
            after: Duration::from_secs(1),
            report: Box::default(),
        });
        assert_eq!(not_idle.exit_code(), crate::exit::TIMEOUT);
        let missing = Error::from(esm_runner::Error::BinaryMissing {
            binary: "api".into(),
            path: "target/debug/api".into(),
        });
        assert_eq!(missing.exit_code(), crate::exit::ENVIRONMENT);
        assert!(missing.to_string().contains("cargo build"), "{missing}");
    }

    #[test]
    fn the_report_renders_the_runners_counts_as_json_and_text() {
        let report = LocalRunReport {
            location: Location {
                stack_name: "hybrid-counter".into(),
                target: "local".into(),
                region: "us-east-1".into(),
                endpoint: Some("http://127.0.0.1:4566".into()),
            },
            mode: "until-idle".into(),
            functions: vec!["hybrid-counter-stream-counter".into()],
            attach: None,
            interrupted: true,
            handed_back: vec![],
            seconds: 2.0,
            runner: RunReport::default(),
        };
        assert!(!report.succeeded(), "an interrupted drain did not finish");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["mode"], "until-idle");
        assert_eq!(json["stack_name"], "hybrid-counter");
        assert!(json["runner"]["mappings"].is_object());
        let text = report.to_string();
        assert!(
            text.contains("interrupted") && text.contains("no event source mappings played"),
            "{text}"
        );
    }

    #[test]
    fn the_background_script_waits_for_the_started_line_and_repeats_the_api_line() {
        let script = include_str!("../../../localstack/local-runner.sh");
        assert!(script.contains(&format!("READY_LINE=\"{STARTED}\"")), "STARTED");
        assert!(script.contains(&format!("API_LINE=\"{API_LINE}\"")), "API_LINE");
        let heartbeat = esm_runner::FIRST_HEARTBEAT;
        assert!(
            script.contains(&format!("HEARTBEAT_LINE=\"{heartbeat}\"")),
            "FIRST_HEARTBEAT"
        );
    }

    #[test]
    fn the_runner_plays_only_the_stacks_functions_with_the_given_settings() {
        let parsed = LocalRunOptions::parse(
            &["--poll-interval", "100", "--attach", "127.0.0.1:9000", "--release"],
            Target::Local,
        )
        .unwrap();
        let config = runner_config(
            "http://127.0.0.1:4566",
            "us-east-1",
            PathBuf::from("/kit"),
            vec!["hck-stream-counter".into()],
            &parsed,
        );
        assert_eq!(config.endpoint, "http://127.0.0.1:4566");
        assert_eq!(config.poll_interval, Duration::from_millis(100));
        assert_eq!(config.functions, Some(vec!["hck-stream-counter".to_owned()]));
        assert_eq!(config.processes.attach.as_deref(), Some("127.0.0.1:9000"));
        assert!(config.processes.release);
        assert_eq!(config.processes.workspace, PathBuf::from("/kit"));
        assert_eq!(config.function_url_port, crate::cli::DEFAULT_API_PORT);
        let idle = LocalRunOptions::parse(&["--until-idle"], Target::Local).unwrap();
        let config = runner_config(
            "http://127.0.0.1:4566",
            "us-east-1",
            PathBuf::from("/kit"),
            vec![],
            &idle,
        );
        assert_eq!(config.function_url_port, 0, "nothing is served, no port is held");
    }
}
