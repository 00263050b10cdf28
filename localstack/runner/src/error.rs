//! The runner's one error type. Messages are lowercase and say what to do.

use std::path::PathBuf;
use std::time::Duration;

use crate::report::RunReport;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the emulator's {service} API failed during {operation}: {message}")]
    Emulator {
        service: &'static str,
        operation: &'static str,
        message: String,
    },
    #[error("event source mapping {uuid} cannot be played: {reason}")]
    UnsupportedMapping { uuid: String, reason: String },
    #[error(
        "no handler package under {handlers_dir} matches the deployed function {function}; \
         expected a name ending in one of: {known}"
    )]
    UnknownFunction {
        function: String,
        handlers_dir: PathBuf,
        known: String,
    },
    #[error(
        "the handler binary {binary} is not built ({path} is missing); build it with `cargo build --locked --bins` \
         (`make deploy` does), then start the runner again"
    )]
    BinaryMissing { binary: String, path: PathBuf },
    // The reason and the log's tail first, its path last: the heartbeat tag
    // keeps 256 characters, and the path is what it may cut.
    #[error("the handler process of {function} did not start: {reason}; its log ends:\n{tail}\n(log {})", log.display())]
    HandlerNotReady {
        function: String,
        reason: String,
        log: PathBuf,
        tail: String,
    },
    #[error("cannot serve on 127.0.0.1:{port}: {message}; free the port or choose another (`--api-port`, 0 for any)")]
    PortUnavailable { port: u16, message: String },
    #[error(
        "cannot obtain the credentials of {function}'s execution role {role}: {message}; on the embedded \
         emulator the roles let the runner assume them only when deployed by `counterctl deploy --target local` \
         (parameter EmulatorRoleAssumer)"
    )]
    AssumeRole {
        function: String,
        role: String,
        message: String,
    },
    #[error("invoking {function} failed before it returned: {message}")]
    Invoke { function: String, message: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(
        "the event sources were not drained within {after:?}; a batch may be retrying forever \
         (MaximumRetryAttempts -1). Progress so far:\n{report}"
    )]
    NotIdle { after: Duration, report: Box<RunReport> },
}

impl Error {
    pub(crate) fn emulator(service: &'static str, operation: &'static str) -> impl FnOnce(String) -> Self {
        move |message| Self::Emulator {
            service,
            operation,
            message,
        }
    }
}

/// Renders an SDK error with its whole source chain (the SDK's own Display
/// says only "service error").
pub(crate) fn sdk_message<E: std::error::Error>(err: E) -> String {
    aws_smithy_types::error::display::DisplayErrorContext(err).to_string()
}
