//! What `local run` is given: how the local event-source runner polls, and
//! whether it drains what the sources hold and exits or runs until stopped.
//! Checked in every build, also one without the runner (the `local`
//! feature), where `Config::from_cli` then refuses `local run`.

use std::time::Duration;

use crate::cli::{LocalCommand, Target};
use crate::error::{Error, Result};

/// A validated `local run` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRunOptions {
    pub poll_interval: Duration,
    pub until_idle: bool,
    pub idle_timeout: Duration,
    pub wait_for_in_flight: bool,
    pub attach: Option<String>,
    pub release: bool,
    /// `--target localstack`: the runner plays the stack's stream and DLQ1
    /// mappings in LocalStack, whose own copies it disables while it plays
    /// and enables again when it stops.
    pub localstack: bool,
    /// Where the api function's URL is served (0: any free port); `None`
    /// with `--until-idle`, which serves nothing. On LocalStack (and
    /// ministack) it is served too, on loopback beside the emulator's own
    /// URL, so the local API has one address on every local target.
    pub api_port: Option<u16>,
}

/// The path LocalStack answers its health on.
pub const LOCALSTACK_HEALTH_PATH: &str = "/_localstack/health";

/// Whether `local run --target localstack` can go on, given whether
/// LocalStack at `endpoint` answered its health path: when it does not,
/// the error says how to start it (the compose file needs
/// LOCALSTACK_AUTH_TOKEN; without one counterctl starts ministack itself)
/// and that the stack must then be deployed again (neither keeps state).
pub fn localstack_answered(endpoint: &str, answered: bool) -> Result<()> {
    if answered {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "LocalStack does not answer at {endpoint}{LOCALSTACK_HEALTH_PATH}: start it with `docker compose -f \
         localstack/docker-compose.yml up -d` (it needs LOCALSTACK_AUTH_TOKEN; without a token and without \
         --endpoint-url counterctl starts ministack instead), deploy with `make deploy TARGET=localstack`, then \
         run `counterctl --target localstack local run` again"
    )))
}

impl LocalRunOptions {
    /// Checks the flags against the target; no I/O.
    pub fn from_args(command: &LocalCommand, target: Target) -> Result<Self> {
        let LocalCommand::Run(args) = command;
        if target == Target::Aws {
            return Err(Error::InvalidArgument(
                "`local run` plays event source mappings in an emulator (--target local or localstack); on aws \
                 Lambda runs them itself, with bisect and the parallelization factor"
                    .to_owned(),
            ));
        }
        if !(10..=60_000).contains(&args.poll_interval) {
            return Err(Error::InvalidArgument(format!(
                "--poll-interval {}: expected 10 to 60000 milliseconds",
                args.poll_interval
            )));
        }
        if args.idle_timeout == 0 {
            return Err(Error::InvalidArgument(
                "--idle-timeout must be at least 1 second".to_owned(),
            ));
        }
        let attach = args.attach.as_deref().map(validate_attach).transpose()?;
        Ok(Self {
            poll_interval: Duration::from_millis(args.poll_interval),
            until_idle: args.until_idle,
            idle_timeout: Duration::from_secs(args.idle_timeout),
            wait_for_in_flight: args.wait_for_in_flight,
            attach,
            release: args.release,
            localstack: target == Target::Localstack,
            api_port: (!args.until_idle).then_some(args.api_port),
        })
    }

    /// Parses `local run` followed by `args`, then checks them: what the
    /// tests of the options and of the runner's configuration start from.
    #[cfg(test)]
    pub(crate) fn parse(args: &[&str], target: Target) -> Result<Self> {
        use clap::Parser;

        #[derive(Parser)]
        struct Test {
            #[command(subcommand)]
            command: LocalCommand,
        }
        let argv = ["local", "run"].into_iter().chain(args.iter().copied());
        let parsed = Test::try_parse_from(argv).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        Self::from_args(&parsed.command, target)
    }
}

/// `HOST:PORT` with a port from 1 to 65535.
fn validate_attach(raw: &str) -> Result<String> {
    let raw = raw.trim();
    let valid = raw
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if valid {
        Ok(raw.to_owned())
    } else {
        Err(Error::InvalidArgument(format!(
            "--attach {raw:?}: expected the invoke API address of `cargo lambda watch` as HOST:PORT, e.g. \
             127.0.0.1:9000"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str], target: Target) -> Result<LocalRunOptions> {
        LocalRunOptions::parse(args, target)
    }

    #[test]
    fn defaults_poll_four_times_a_second_until_stopped() {
        let parsed = options(&[], Target::Local).unwrap();
        assert_eq!(parsed.poll_interval, Duration::from_millis(250));
        assert!(!parsed.until_idle);
        assert_eq!(parsed.attach, None);
        assert_eq!(parsed.api_port, Some(crate::cli::DEFAULT_API_PORT));
    }

    #[test]
    fn the_api_is_served_only_while_running_until_stopped() {
        assert_eq!(options(&["--api-port", "0"], Target::Local).unwrap().api_port, Some(0));
        assert_eq!(options(&["--until-idle"], Target::Local).unwrap().api_port, None);
        assert_eq!(
            options(&[], Target::Localstack).unwrap().api_port,
            Some(crate::cli::DEFAULT_API_PORT),
            "the local API has one address on every local target"
        );
        let err = options(&["--until-idle", "--api-port", "9100"], Target::Local).unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::USAGE, "{err}");
    }

    #[cfg(feature = "local")]
    #[test]
    fn the_default_api_port_is_the_runners() {
        assert_eq!(crate::cli::DEFAULT_API_PORT, esm_runner::DEFAULT_FUNCTION_URL_PORT);
    }

    #[test]
    fn the_runner_plays_an_emulators_mappings_never_aws_ones() {
        let err = options(&[], Target::Aws).unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        assert!(err.to_string().contains("--target local or localstack"), "{err}");
        assert!(!options(&[], Target::Local).unwrap().localstack);
        assert!(options(&[], Target::Localstack).unwrap().localstack);
    }

    #[test]
    fn a_localstack_that_does_not_answer_is_refused_with_how_to_start_it() {
        assert!(localstack_answered("http://localhost:4566", true).is_ok());
        let err = localstack_answered("http://localhost:4566", false).unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        let text = err.to_string();
        assert!(
            text.contains("http://localhost:4566/_localstack/health")
                && text.contains("docker compose -f localstack/docker-compose.yml up -d")
                && text.contains("LOCALSTACK_AUTH_TOKEN")
                && text.contains("make deploy TARGET=localstack"),
            "{text}"
        );
    }

    #[test]
    fn attach_needs_host_and_port() {
        let parsed = options(&["--attach", "127.0.0.1:9000"], Target::Local).unwrap();
        assert_eq!(parsed.attach.as_deref(), Some("127.0.0.1:9000"));
        for bad in ["9000", "127.0.0.1", ":9000", "localhost:0", "localhost:http"] {
            let err = options(&["--attach", bad], Target::Local).unwrap_err();
            assert!(err.to_string().contains("HOST:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn poll_interval_and_idle_flags_are_checked() {
        assert!(options(&["--poll-interval", "5"], Target::Local).is_err());
        assert!(options(&["--poll-interval", "60001"], Target::Local).is_err());
        assert!(
            options(&["--idle-timeout", "5"], Target::Local).is_err(),
            "--idle-timeout needs --until-idle"
        );
        assert!(options(&["--until-idle", "--idle-timeout", "0"], Target::Local).is_err());
        let idle = options(
            &["--until-idle", "--idle-timeout", "30", "--wait-for-in-flight"],
            Target::Local,
        )
        .unwrap();
        assert!(idle.until_idle && idle.wait_for_in_flight);
        assert_eq!(idle.idle_timeout, Duration::from_secs(30));
    }
}
