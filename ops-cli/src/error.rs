//! The one error type of `counterctl`. Messages are lowercase, say what went
//! wrong and what to do about it, and each variant maps to a documented exit
//! code ([`crate::exit`], the only module of this crate it uses). A stack
//! operation that runs and fails (a rollback) is not an error: it is a
//! report with a failed outcome, so its details still reach stdout and
//! `--output json`.

use std::path::PathBuf;

use aws_smithy_types::error::metadata::ProvideErrorMetadata;

use crate::exit;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A limits file or a saved plan that cannot be read or is invalid;
    /// the message names it (a file's error with its line and column).
    #[error("{0}")]
    LimitsFile(String),

    #[error("cannot read {path}: {source}")]
    LimitsFileRead {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("--param {raw:?} is not of the form Key=Value")]
    ParamSyntax { raw: String },

    #[error("unknown parameter {key:?} in --param; the template's parameters are: {known}")]
    UnknownParam { key: String, known: String },

    #[error("parameter {key} is set by counterctl from the packaged handler zips; it cannot be given with --param")]
    ManagedParam { key: String },

    #[error("parameter {key} is given twice with --param")]
    DuplicateParam { key: String },

    #[error("invalid value {value:?} for parameter {key}: {reason}")]
    ParamValue { key: String, value: String, reason: String },

    #[error("invalid --tag {raw:?}: {reason}")]
    Tag { raw: String, reason: String },

    #[error("tag {key} is given twice with --tag")]
    DuplicateTag { key: String },

    /// `max` is CloudFormation's limit (`config::STACK_NAME_MAX`), carried
    /// here so that errors depend on nothing above them.
    #[error("invalid stack name {name:?}: use 1-{max} characters, letters, digits and hyphens, starting with a letter")]
    StackName { name: String, max: usize },

    #[error("invalid endpoint url {url:?}: it must start with http:// or https://")]
    EndpointUrl { url: String },

    #[error("invalid region {region:?}: expected something like us-east-1")]
    Region { region: String },

    #[error("no AWS region: pass --region, set AWS_REGION, or set a region in the profile")]
    NoRegion,

    #[error("invalid --account {account:?}: an AWS account id is 12 digits")]
    Account { account: String },

    #[error("invalid --partition {partition:?}: expected aws, aws-cn or aws-us-gov")]
    Partition { partition: String },

    #[error(
        "invalid role ARN {arn:?}: expected a role of account {account}, arn:aws:iam::{account}:role/<name> \
         (CloudFormation takes a service role of the stack's own account)"
    )]
    RoleArn { arn: String, account: String },

    #[error("--service-role-arn goes with `policy operator` only")]
    ServiceRoleArnOnlyForOperator,

    #[error(
        "stack name {name:?} is {len} characters: with a CloudFormation service role (--role-arn, policy \
         service-role) it may have at most {max}, or CloudFormation shortens the names it gives the \
         functions' roles and the service role may not create them (AccessDenied); choose a shorter \
         --stack-name"
    )]
    StackNameTooLongForServiceRole { name: String, len: usize, max: usize },

    #[error(
        "--role-arn needs the roles' permissions boundary: the service role creates roles only with it; \
         leave {param} unset (counterctl fills in {expected}) or pass --param {param}=<the boundary's ARN> \
         (counterctl policy service-role --boundary prints the policy to create)"
    )]
    NoBoundaryWithRoleArn { param: &'static str, expected: String },

    #[error(
        "the stack's OperatorPrincipalArn is the account root {arn}, which the template no longer takes (a \
         root names every principal of the account, so anyone with s3:* could read the failed batches); \
         deploy once with --param OperatorPrincipalArn=arn:aws:iam::{account}:role/<the role that runs \
         counterctl redrive> (or user/<name>), or --param OperatorPrincipalArn= to let only the reprocessor \
         read them"
    )]
    RootOperatorPrincipal { arn: String, account: String },

    #[error(
        "{key}={value:?} names a principal of account {other}, not this stack's account {account}: the failed-batch \
         bucket's objects are encrypted with this account's aws/s3 key, which another account cannot use"
    )]
    ForeignOperator {
        key: String,
        value: String,
        other: String,
        account: String,
    },

    #[error("the artifacts bucket name {name:?} is not a valid S3 bucket name ({reason}); pass --artifacts-bucket")]
    BucketName { name: String, reason: String },

    #[error("handler zip for {package} not found at {}: run `make build` first, or pass --artifacts-dir", path.display())]
    MissingArtifact { package: String, path: PathBuf },

    #[error("refusing to delete the data tables without confirmation: pass --yes, or run in a terminal to be asked")]
    ConfirmationRequired,

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error(
        "stack {name} has no output {missing}: it was not deployed by this version of counterctl; run `counterctl deploy`"
    )]
    StackIncomplete { name: String, missing: String },

    #[error("aborted: {0}")]
    Aborted(String),

    #[error("stack {name} does not exist (target {target}, region {region})")]
    StackNotFound {
        name: String,
        target: String,
        region: String,
    },

    #[error("stack {name} is {status}: another operation is in progress; wait for it (`counterctl status`)")]
    StackBusy { name: String, status: String },

    #[error(
        "stack {name} is {status}{reason} and cannot be updated: run `counterctl destroy` (tables are retained) and deploy again"
    )]
    StackUnusable {
        name: String,
        status: String,
        reason: String,
    },

    #[error(
        "stack {name} is ROLLBACK_COMPLETE: its first create failed and it can take no change set; `counterctl deploy` \
         deletes it (the rollback left nothing in it) and creates it again"
    )]
    FailedCreate { name: String },

    #[error(
        "stack {name} is not a hybrid counter kit stack ({why}); nothing was deleted: check --stack-name, and \
         delete other stacks with their own tools"
    )]
    NotTheKit { name: String, why: String },

    #[error(
        "refusing to update the stack: {tables}; the kit counts correctly in one region only \
         (docs/multi-region.md): remove the replicas, or pass --allow-replicas to deploy anyway"
    )]
    ReplicatedTables { tables: String },

    #[error(
        "refusing to change {param} from {from} to {to} on the deployed stack {stack}: every item's partition \
         key depends on ScopeKeyShards and ResourceKeySpread (scope#k, k a hash of its id), and every limit \
         override's copy on ScopeKeyShards, so what is stored under the old layout would be hidden from its \
         scope's counters, audits and deletes, and while Lambda rolls the change out, old and new instances \
         would write and count one scope under both layouts, even on an empty table; the layout is fixed when \
         a stack is created and no migration command exists: deploy a new stack (another --stack-name) with \
         the new layout"
    )]
    ScopeKeysChange {
        param: &'static str,
        from: u32,
        to: u32,
        stack: String,
    },

    #[error(
        "stack {stack}: {given} give ScopeKeyShards={keys} ResourceKeySpread={spread}, but its items are written \
         under ScopeKeyShards={recorded_keys} ResourceKeySpread={recorded_spread} (the layout record in the counters \
         table): its functions refuse to start until the parameters are set back (counterctl deploy --param \
         ScopeKeyShards={recorded_keys} --param ResourceKeySpread={recorded_spread}), and counterctl reads no items \
         under the wrong layout"
    )]
    LayoutMismatch {
        stack: String,
        /// Where the layout compared comes from: the stack's parameters,
        /// with or without a deploy's `--param` flags.
        given: &'static str,
        recorded_keys: u32,
        recorded_spread: u32,
        keys: u32,
        spread: u32,
    },

    #[error(
        "the layout record in table {table} (partition \" kit-layout\", name \"scope-keys\") is malformed: {reason}. \
         Only counterctl deploy writes it. Check that the stack's ScopeKeyShards and ResourceKeySpread are the ones \
         its items were written under, delete the record (aws dynamodb delete-item --table-name {table} --key \
         '{{\"scope\":{{\"S\":\" kit-layout\"}},\"name\":{{\"S\":\"scope-keys\"}}}}'), then run counterctl deploy \
         to record them again (docs/admission-and-sharding.md)"
    )]
    LayoutRecordMalformed { table: String, reason: String },

    #[error("the change set for stack {name} failed: {reason}")]
    ChangeSetFailed { name: String, reason: String },

    #[error(
        "fakecloud is not installed (looked for {binary}): run `make tools` or `localstack/fakecloud.sh install` \
         (a one-time ~25 min build), or pass --endpoint-url"
    )]
    EmulatorNotInstalled { binary: String },

    #[error(
        "no LOCALSTACK_AUTH_TOKEN, and ministack (the token-free LocalStack-compatible emulator) is not installed \
         (no {}): run `make tools` or `localstack/ministack.sh install` (seconds, from PyPI); or export \
         LOCALSTACK_AUTH_TOKEN and start LocalStack; or pass --endpoint-url",
        venv.display()
    )]
    MinistackNotInstalled { venv: std::path::PathBuf },

    #[error("cannot start the emulator: {0}; start it with `make emulator-start` or pass --endpoint-url")]
    EmulatorStart(String),

    #[error(
        "nothing answers at {endpoint}: start the emulator (`make emulator-start`) or fix --endpoint-url / AWS_ENDPOINT_URL"
    )]
    EndpointDown { endpoint: String },

    #[error("{action} failed: {message}")]
    Aws { action: &'static str, message: String },

    /// `seq next` spent its retry budget; no number was claimed.
    #[error("{0}")]
    SequenceContended(String),

    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "timed out after {seconds}s waiting for stack {name} (last status {status}); it may still be in progress: run `counterctl status`"
    )]
    Timeout { name: String, status: String, seconds: u64 },

    #[error("cannot render the template: {0}")]
    Template(#[source] serde_yaml_ng::Error),

    #[error("cannot render the man page: {0}")]
    ManPage(std::io::Error),

    #[error("cannot render the report as JSON: {0}")]
    Json(#[from] serde_json::Error),

    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),

    /// The local event-source runner (`local run`); its messages say what to do.
    #[cfg(feature = "local")]
    #[error(transparent)]
    Runner(#[from] esm_runner::Error),

    /// `local run` in a build without the runner (the `local` feature).
    #[error(
        "this counterctl was built without the local runner: cargo build --bin counterctl --features ops-cli/local"
    )]
    NoLocalRunner,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Stack `stack`'s parameters give `configured`, its items are written
    /// under `recorded` (the layout record).
    pub(crate) fn layout_mismatch(
        stack: &str,
        recorded: hybrid_counter::scope_keys::ScopeKeys,
        configured: hybrid_counter::scope_keys::ScopeKeys,
        given: &'static str,
    ) -> Self {
        Error::LayoutMismatch {
            stack: stack.to_owned(),
            given,
            recorded_keys: recorded.count(),
            recorded_spread: recorded.spread(),
            keys: configured.count(),
            spread: configured.spread(),
        }
    }

    /// The documented exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::ParamSyntax { .. }
            | Error::UnknownParam { .. }
            | Error::ManagedParam { .. }
            | Error::DuplicateParam { .. }
            | Error::ParamValue { .. }
            | Error::Tag { .. }
            | Error::DuplicateTag { .. }
            | Error::StackName { .. }
            | Error::EndpointUrl { .. }
            | Error::Region { .. }
            | Error::Account { .. }
            | Error::Partition { .. }
            | Error::RoleArn { .. }
            | Error::ServiceRoleArnOnlyForOperator
            | Error::StackNameTooLongForServiceRole { .. }
            | Error::NoBoundaryWithRoleArn { .. }
            | Error::RootOperatorPrincipal { .. }
            | Error::ForeignOperator { .. }
            | Error::NoRegion
            | Error::BucketName { .. }
            | Error::MissingArtifact { .. }
            | Error::ConfirmationRequired
            | Error::NotTheKit { .. }
            | Error::ReplicatedTables { .. }
            | Error::ScopeKeysChange { .. }
            | Error::LayoutMismatch { .. }
            | Error::LayoutRecordMalformed { .. }
            | Error::InvalidArgument(_)
            | Error::LimitsFile(_)
            | Error::LimitsFileRead { .. }
            | Error::NoLocalRunner => exit::USAGE,
            Error::Aborted(_)
            | Error::StackBusy { .. }
            | Error::StackUnusable { .. }
            | Error::FailedCreate { .. }
            | Error::ChangeSetFailed { .. }
            | Error::StackIncomplete { .. }
            | Error::Template(_)
            | Error::ManPage(_)
            | Error::SequenceContended(_) => exit::FAILED,
            Error::StackNotFound { .. } => exit::NOT_FOUND,
            Error::EmulatorNotInstalled { .. }
            | Error::MinistackNotInstalled { .. }
            | Error::EmulatorStart(_)
            | Error::EndpointDown { .. }
            | Error::Aws { .. }
            | Error::Io { .. }
            | Error::Json(_)
            | Error::Runtime(_) => exit::ENVIRONMENT,
            Error::Timeout { .. } => exit::TIMEOUT,
            #[cfg(feature = "local")]
            Error::Runner(inner) => match inner {
                esm_runner::Error::NotIdle { .. } => exit::TIMEOUT,
                esm_runner::Error::UnsupportedMapping { .. } => exit::FAILED,
                _ => exit::ENVIRONMENT,
            },
        }
    }

    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { action, path, source }
    }
}

/// `map_err(during("reading the counters"))`: any error (the store's,
/// the counter's, a task's) as [`Error::Aws`] naming what was being done.
pub fn during<E: std::fmt::Display>(action: &'static str) -> impl Fn(E) -> Error {
    move |e| Error::Aws {
        action,
        message: e.to_string(),
    }
}

/// [`Error::InvalidArgument`] with `e`'s message.
pub(crate) fn invalid(e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(e.to_string())
}

/// Turns an SDK error into [`Error::Aws`] naming the call: the service's
/// error code and message when it answered, otherwise the transport failure
/// with the SDK's full context (connection refused, timeout, credentials).
pub fn aws<E, R>(action: &'static str) -> impl FnOnce(aws_smithy_runtime_api::client::result::SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    move |err| Error::Aws {
        action,
        message: describe_sdk_error(&err),
    }
}

/// `Code: message`, or the code alone; `None` without a code.
fn describe_service_error(err: &impl ProvideErrorMetadata) -> Option<String> {
    match (err.code(), err.message()) {
        (Some(code), Some(message)) => Some(format!("{code}: {message}")),
        (Some(code), None) => Some(code.to_owned()),
        _ => None,
    }
}

pub(crate) fn describe_sdk_error<E, R>(err: &aws_smithy_runtime_api::client::result::SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    use aws_smithy_runtime_api::client::result::SdkError;
    match err {
        SdkError::ServiceError(service) => describe_service_error(service.err())
            .unwrap_or_else(|| aws_smithy_types::error::display::DisplayErrorContext(err).to_string()),
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => format!(
            "could not reach the service (is the endpoint right and the service up? are credentials configured?): {}",
            aws_smithy_types::error::display::DisplayErrorContext(err)
        ),
        _ => aws_smithy_types::error::display::DisplayErrorContext(err).to_string(),
    }
}

/// The service's error code, if it answered with one. SDK errors are
/// classified by code through the named predicates below, in one place.
pub fn error_code<E, R>(err: &aws_smithy_runtime_api::client::result::SdkError<E, R>) -> Option<&str>
where
    E: ProvideErrorMetadata,
{
    err.as_service_error().and_then(|e| e.code())
}

/// CloudFormation answers a missing stack with a generic `ValidationError`
/// whose message says "does not exist"; there is no dedicated code, so this
/// is the one place that reads the message.
pub fn is_stack_missing<E, R>(err: &aws_smithy_runtime_api::client::result::SdkError<E, R>) -> bool
where
    E: ProvideErrorMetadata,
{
    err.as_service_error().is_some_and(|e| {
        e.code() == Some("ValidationError") && e.message().is_some_and(|m| m.contains("does not exist"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_errors_exit_2_and_say_what_to_do() {
        let err = Error::UnknownParam {
            key: "BatchSize".into(),
            known: "StreamBatchSize".into(),
        };
        assert_eq!(err.exit_code(), exit::USAGE);
        assert_eq!(
            err.to_string(),
            "unknown parameter \"BatchSize\" in --param; the template's parameters are: StreamBatchSize"
        );
        let missing = Error::MissingArtifact {
            package: "api".into(),
            path: "target/lambda/api/bootstrap.zip".into(),
        };
        assert_eq!(missing.exit_code(), exit::USAGE);
        assert!(missing.to_string().contains("run `make build` first"), "{missing}");
    }

    #[test]
    fn each_failure_kind_has_its_exit_code() {
        let not_found = Error::StackNotFound {
            name: "s".into(),
            target: "local".into(),
            region: "us-east-1".into(),
        };
        assert_eq!(not_found.exit_code(), exit::NOT_FOUND);
        let failed = Error::ChangeSetFailed {
            name: "s".into(),
            reason: "r".into(),
        };
        assert_eq!(failed.exit_code(), exit::FAILED);
        assert_eq!(
            Error::EmulatorNotInstalled {
                binary: "fakecloud".into()
            }
            .exit_code(),
            exit::ENVIRONMENT
        );
        let timeout = Error::Timeout {
            name: "s".into(),
            status: "UPDATE_IN_PROGRESS".into(),
            seconds: 5,
        };
        assert_eq!(timeout.exit_code(), exit::TIMEOUT);
        assert_eq!(Error::ConfirmationRequired.exit_code(), exit::USAGE);
        assert_eq!(Error::Aborted("no".into()).exit_code(), exit::FAILED);
    }

    #[test]
    fn messages_are_lowercase() {
        let samples = [
            Error::ParamSyntax { raw: "x".into() }.to_string(),
            Error::NoRegion.to_string(),
            Error::ConfirmationRequired.to_string(),
            Error::EndpointDown {
                endpoint: "http://127.0.0.1:4566".into(),
            }
            .to_string(),
        ];
        for message in samples {
            let first = message.chars().next().unwrap();
            assert!(!first.is_uppercase(), "{message}");
        }
    }
}
