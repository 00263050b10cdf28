//! Exit codes of `counterctl`, one place for their numbers and their meaning.
//! Scripts branch on them (`make deploy`, CI jobs), so a number never changes
//! meaning; `counterctl --help` prints [`HELP`].

use std::process::ExitCode;

/// The command did what was asked (a plan or deploy with no changes included).
pub const SUCCESS: u8 = 0;
/// The operation ran and failed: the stack rolled back, a change set was
/// rejected, a delete failed, the operator declined a confirmation; or
/// `status` found something that needs an operator.
pub const FAILED: u8 = 1;
/// Bad command line or configuration: nothing was sent anywhere. Also a
/// command this build lacks (`local run` without the `local` feature).
pub const USAGE: u8 = 2;
/// The stack does not exist.
pub const NOT_FOUND: u8 = 3;
/// The environment is not usable: the emulator is not installed or does not
/// start, the endpoint does not answer, credentials are missing or refused,
/// a service call failed.
pub const ENVIRONMENT: u8 = 4;
/// Gave up waiting for CloudFormation (the operation may still be
/// running), or for `local run --until-idle` to drain the event sources.
pub const TIMEOUT: u8 = 5;

/// The exit code section of `counterctl --help`.
pub const HELP: &str = "\
Exit codes:
  0  success (a plan or deploy with nothing to change included)
  1  the operation failed: deploy rolled back, change set rejected, delete
     failed, confirmation declined; for deploy also: the layout record
     could not be confirmed, or the parameters changed while it ran; for status: something needs attention;
     for audit: a counter differs from the items (drift); for load: drift
     after the stream drained; for redrive: a message stays in DLQ2
     (failed or skipped); for verify: a check failed; for seq next: the
     sequence stayed contended and no number was claimed; for limits plan:
     the table differs from the file; for limits apply: a scope was
     refused (changed since the plan, or below usage) or failed
  2  usage or configuration error: bad flag or --param, missing handler
     zip, invalid limits file
  3  the stack does not exist
  4  environment error: emulator not installed or not answering, missing
     credentials, a failed AWS call
  5  timed out waiting for CloudFormation (it may still be in progress),
     or for `local run --until-idle` to drain the event sources";

pub fn code(value: u8) -> ExitCode {
    ExitCode::from(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_code_once() {
        for value in [SUCCESS, FAILED, USAGE, NOT_FOUND, ENVIRONMENT, TIMEOUT] {
            let line = format!("\n  {value}  ");
            assert_eq!(HELP.matches(&line).count(), 1, "exit code {value} in:\n{HELP}");
        }
    }
}
