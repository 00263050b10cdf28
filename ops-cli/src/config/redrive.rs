//! What `redrive` is given: the mode (move DLQ2's messages to DLQ1, or
//! replay them here), `--max` and `--rate`, and the method that follows
//! from them and the target (SQS's message move task only on AWS, and only
//! when it can honour the flags).

use serde::Serialize;

use crate::cli::{RedriveArgs, Target};
use crate::error::{Error, Result};

/// The highest `--rate`: the limit of SQS's message move task, applied to
/// every method so a rate means the same everywhere.
pub const MAX_RATE: u32 = 500;

/// What happens to DLQ2's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedriveMode {
    /// Back to DLQ1, for the reprocessor.
    Move,
    /// Replayed here with the library.
    Replay,
}

/// A validated `redrive` command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedriveOptions {
    pub mode: RedriveMode,
    pub dry_run: bool,
    pub max: Option<u64>,
    pub rate: Option<u32>,
}

impl RedriveOptions {
    /// Checks the flags; no I/O.
    pub fn from_args(args: &RedriveArgs) -> Result<Self> {
        if args.max == Some(0) {
            return Err(Error::InvalidArgument(
                "--max must be at least 1 (leave it out to handle every message)".to_owned(),
            ));
        }
        Ok(Self {
            mode: if args.replay {
                RedriveMode::Replay
            } else {
                RedriveMode::Move
            },
            dry_run: args.dry_run,
            max: args.max,
            rate: args.rate.as_deref().map(parse_rate).transpose()?,
        })
    }
}

/// `--rate`: messages per second, `N` or `N/s`, from 1 to [`MAX_RATE`].
pub fn parse_rate(raw: &str) -> Result<u32> {
    let trimmed = raw.trim();
    let number = trimmed.strip_suffix("/s").unwrap_or(trimmed).trim();
    number
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_RATE).contains(n))
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "--rate {raw:?}: expected messages per second from 1 to {MAX_RATE}, e.g. --rate 50 or --rate 50/s"
            ))
        })
}

/// How the messages are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RedriveMethod {
    /// SQS's asynchronous message move task (AWS).
    MessageMoveTask,
    /// Receive from DLQ2, send to DLQ1, delete from DLQ2.
    ReceiveSendDelete,
    /// Receive from DLQ2, replay with the library, delete from DLQ2.
    Replay,
    /// Receive and release (`--dry-run`).
    Peek,
}

impl RedriveMethod {
    pub fn describe(self) -> &'static str {
        match self {
            RedriveMethod::MessageMoveTask => "SQS message move task",
            RedriveMethod::ReceiveSendDelete => "receive, send to dlq1, then delete",
            RedriveMethod::Replay => "replay with the counter library, then delete",
            RedriveMethod::Peek => "peek (dry run)",
        }
    }
}

/// The method for `options` on `target`: the move task only on AWS and
/// only without `--max`, which a task cannot honour.
pub fn redrive_method(target: Target, options: &RedriveOptions) -> RedriveMethod {
    match options.mode {
        _ if options.dry_run => RedriveMethod::Peek,
        RedriveMode::Replay => RedriveMethod::Replay,
        RedriveMode::Move if target == Target::Aws && options.max.is_none() => RedriveMethod::MessageMoveTask,
        RedriveMode::Move => RedriveMethod::ReceiveSendDelete,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn options(args: &[&str]) -> Result<RedriveOptions> {
        #[derive(Parser)]
        struct Test {
            #[command(flatten)]
            args: RedriveArgs,
        }
        let argv = std::iter::once("redrive").chain(args.iter().copied());
        RedriveOptions::from_args(&Test::try_parse_from(argv).unwrap().args)
    }

    #[test]
    fn rates_are_messages_per_second_from_1_to_500() {
        assert_eq!(parse_rate("50").unwrap(), 50);
        assert_eq!(parse_rate("50/s").unwrap(), 50);
        assert_eq!(parse_rate(" 500/s ").unwrap(), 500);
        for bad in ["0", "501", "-1", "fast", "10/m", ""] {
            let err = parse_rate(bad).unwrap_err();
            assert_eq!(err.exit_code(), crate::exit::USAGE, "{bad}");
            assert!(err.to_string().contains("from 1 to 500"), "{bad}: {err}");
        }
    }

    #[test]
    fn flags_are_validated_before_any_io() {
        let parsed = options(&["--replay", "--max", "3", "--rate", "20/s"]).unwrap();
        assert_eq!(
            parsed,
            RedriveOptions {
                mode: RedriveMode::Replay,
                dry_run: false,
                max: Some(3),
                rate: Some(20),
            }
        );
        let err = options(&["--max", "0"]).unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        assert!(options(&["--rate", "1000"]).is_err());
        assert_eq!(options(&[]).unwrap().mode, RedriveMode::Move);
    }

    #[test]
    fn the_move_task_is_used_only_on_aws_and_only_when_it_can_honour_the_flags() {
        let move_all = options(&[]).unwrap();
        assert_eq!(redrive_method(Target::Aws, &move_all), RedriveMethod::MessageMoveTask);
        assert_eq!(
            redrive_method(Target::Local, &move_all),
            RedriveMethod::ReceiveSendDelete
        );
        assert_eq!(
            redrive_method(Target::Localstack, &move_all),
            RedriveMethod::ReceiveSendDelete
        );
        let capped = options(&["--max", "5"]).unwrap();
        assert_eq!(redrive_method(Target::Aws, &capped), RedriveMethod::ReceiveSendDelete);
        let replay = options(&["--replay"]).unwrap();
        assert_eq!(redrive_method(Target::Aws, &replay), RedriveMethod::Replay);
        let dry = options(&["--dry-run", "--replay"]).unwrap();
        assert_eq!(redrive_method(Target::Aws, &dry), RedriveMethod::Peek);
    }
}
