//! The command line as clap sees it: every command's flags, as raw strings
//! and enums, no I/O. It is turned into a validated
//! [`crate::config::Config`] before anything is sent anywhere, so a typo
//! fails fast with exit code 2.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

const ABOUT: &str =
    "Operator CLI of the hybrid counter kit: plan, deploy, destroy and inspect its CloudFormation stack.";

const LONG_ABOUT: &str = "\
Operator CLI of the hybrid counter kit: plan, deploy, destroy and inspect
its CloudFormation stack.

Targets (default localstack, which is ministack without a token: what
`make deploy` deploys to):
  local       The embedded emulator with IAM enforcement (fakecloud, what
              `make test` runs on), started with
              localstack/fakecloud.sh when it does not answer. Endpoint:
              --endpoint-url, else AWS_ENDPOINT_URL, else the running
              emulator (.run/fakecloud.port), else http://127.0.0.1:4566.
              Dummy credentials, region us-east-1. Number parameters are
              inlined into the template, which fakecloud needs.
  localstack  LocalStack at http://localhost:4566 (or --endpoint-url)
              when LOCALSTACK_AUTH_TOKEN is set (LocalStack does not start
              without one). Without a token: ministack, a token-free
              LocalStack-compatible emulator, at 127.0.0.1:4566
              (MINISTACK_PORT), started with localstack/ministack.sh when
              nothing answers there.
  aws         AWS through the standard credential chain (AWS_PROFILE or
              --profile, AWS_REGION or --region).

Results go to stdout (--output text or json); progress and stack events
go to stderr: a spinner on a terminal, plain lines otherwise, nothing with
--quiet. NO_COLOR (set and not empty) turns off colour and the spinner.

Shell completions: counterctl completions bash|zsh|fish|elvish|powershell.
Man page: counterctl man (make man writes target/man/counterctl.1).";

/// `counterctl`: the kit's operator CLI.
#[derive(Debug, Parser)]
#[command(name = "counterctl", version, about = ABOUT, long_about = LONG_ABOUT, after_long_help = crate::exit::HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the stack lives and how results are printed; valid with every command.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Where to deploy: LocalStack (without LOCALSTACK_AUTH_TOKEN: ministack, which `make deploy` starts), the
    /// embedded emulator with IAM enforcement (fakecloud), or AWS.
    #[arg(long, value_enum, default_value_t = Target::Localstack, global = true)]
    pub target: Target,

    /// CloudFormation stack name; also names the artifacts bucket and, for a new stack, the resources (NamePrefix).
    #[arg(long, default_value = "hybrid-counter", global = true)]
    pub stack_name: String,

    /// AWS region [default for local and localstack: us-east-1].
    #[arg(long, env = "AWS_REGION", global = true)]
    pub region: Option<String>,

    /// Named profile of the shared AWS config (aws target).
    #[arg(long, env = "AWS_PROFILE", global = true)]
    pub profile: Option<String>,

    /// Endpoint of every AWS service; overrides the target's default.
    #[arg(long, env = "AWS_ENDPOINT_URL", global = true)]
    pub endpoint_url: Option<String>,

    /// Result format on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text, global = true)]
    pub output: OutputFormat,

    /// Only results: no progress and no informational lines on stderr (errors and questions still appear).
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Local,
    Localstack,
    Aws,
}

/// As `--target` spells it (clap's names: local, localstack, aws).
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.to_possible_value().expect("no target is skipped").get_name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a deploy would change (a CloudFormation change set, deleted afterwards); applies nothing.
    Plan(StackArgs),
    /// Package the handlers, then create or update the stack through a change set, streaming its events.
    Deploy(DeployArgs),
    /// Delete the stack; the data tables are retained unless --delete-data is given and confirmed.
    Destroy(DestroyArgs),
    /// Stack status and outputs, event source mappings, DLQ depths and alarm states.
    Status(StatusArgs),
    /// Count every scope's items by state and compare them with the counters; exit 1 when a counter differs.
    /// --repair heals it (EC := processed, BE := live, never above) with optimistic concurrency.
    Audit(AuditArgs),
    /// One scope's best-effort, eventual and effective usage, and its limit.
    Usage(ScopeArgs),
    /// Read or change one scope's limit override.
    #[command(subcommand)]
    Limit(LimitCommand),
    /// Per-scope limit overrides as code: plan and apply a reviewed limits file, or export today's.
    #[command(subcommand)]
    Limits(LimitsCommand),
    /// Read or claim one scope's gapless sequence numbers (1, 2, 3, ..., none skipped, none given twice).
    #[command(subcommand)]
    Seq(SeqCommand),
    /// Generate load with the counter library (create/delete in many scopes), then wait for the
    /// stream to drain and audit the scopes.
    Load(LoadArgs),
    /// Move DLQ2's messages back to DLQ1 for the reprocessor (--replay: replay them here); --dry-run shows
    /// what would move.
    Redrive(RedriveArgs),
    /// The local event-source runner: plays the stack's mappings in the embedded emulator.
    #[command(subcommand)]
    Local(LocalCommand),
    /// Print a completion script for a shell on stdout, e.g. `counterctl completions bash >
    /// ~/.local/share/bash-completion/completions/counterctl`.
    Completions(CompletionsArgs),
    /// Print counterctl's man page (roff) on stdout; `make man` writes target/man/counterctl.1.
    Man,
    /// Print an IAM policy generated from the stack model; sends nothing.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Check that a deployed stack counts correctly, in scopes of its own: creates, deletes, a re-create,
    /// a refusal at a limit override, the stream counting everything, with --failure-path one batch
    /// through DLQ1 and the reprocessor, an audit; then removes what it wrote. Safe on a production
    /// stack. Exit 0 only when every check passed.
    Verify(VerifyArgs),
}

#[derive(Debug, Clone, Subcommand)]
pub enum PolicyCommand {
    /// The least-privilege policy of the operator or CI role running counterctl against this stack
    /// (JSON on stdout): every AWS call counterctl makes, on the stack's own resources. With
    /// --service-role-arn also iam:PassRole on that role (to CloudFormation only), which is then all it
    /// needs besides: deploy with `deploy --role-arn`. Without, it does not cover what CloudFormation
    /// creates with the caller's credentials.
    Operator(OperatorPolicyArgs),
    /// The identity policy of an API caller: lambda:InvokeFunctionUrl and lambda:InvokeFunction on the
    /// api function, the second only through the function URL (lambda:InvokedViaFunctionUrl).
    Caller(OperatorPolicyArgs),
    /// The read-only policy of a CI job that runs `limits plan` (or `limits export`) on each pull
    /// request: cloudformation:DescribeStacks on the stack, dynamodb:Scan and dynamodb:Query on the
    /// counters table. Nothing it grants writes; `limits apply` needs `policy operator`.
    LimitsPlan(OperatorPolicyArgs),
    /// The permissions policy of a CloudFormation service role for this stack (`deploy --role-arn`):
    /// what CloudFormation's handlers call for each resource type of the template, on the stack's
    /// names, creating roles only with the boundary hck-boundary-<stack>. With --trust, the role's
    /// trust policy instead; with --boundary, the boundary policy.
    ServiceRole(ServiceRolePolicyArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ServiceRolePolicyArgs {
    #[command(flatten)]
    pub scope: OperatorPolicyArgs,
    /// Print the trust policy (CloudFormation may assume the role) instead.
    #[arg(long, conflicts_with = "boundary")]
    pub trust: bool,
    /// Print the permissions boundary instead: the policy an administrator creates once as
    /// hck-boundary-<stack>, which the service role must set on every role it creates.
    #[arg(long)]
    pub boundary: bool,
}

#[derive(Debug, Clone, Args)]
pub struct OperatorPolicyArgs {
    /// The AWS account id (12 digits) the stack lives in.
    #[arg(long)]
    pub account: String,
    /// The AWS partition.
    #[arg(long, default_value = "aws")]
    pub partition: String,
    /// The stack's NamePrefix parameter [default: the stack name].
    #[arg(long)]
    pub name_prefix: Option<String>,
    /// The artifacts bucket deploy uploads to [default: <stack-name>-artifacts-<account>-<region>].
    #[arg(long)]
    pub artifacts_bucket: Option<String>,
    /// `policy operator` only: the CloudFormation service role deploy passes (`deploy --role-arn`).
    #[arg(long)]
    pub service_role_arn: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// Scopes of its own to write in (verify-<run>-0 .. N-1).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub scopes: u32,
    /// Items created in each scope (a quarter of them deleted again).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(2..=1000))]
    pub operations: u64,
    /// Seconds to wait for the stream pipeline to count everything (and, at the end, to remove it).
    #[arg(long, default_value_t = 120, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// Show what would be written, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also prove the failure path: take the stream's count of a few items of a scope of its own back
    /// (as if their batch had failed), send the on-failure record of their stream range to DLQ1, and
    /// wait for the reprocessor to count them again.
    #[arg(long)]
    pub failure_path: bool,
}

#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Audit only this scope (one strongly consistent Query) instead of scanning the table.
    #[arg(long)]
    pub scope: Option<String>,
    /// Write the repairs.
    #[arg(long, conflicts_with = "dry_run")]
    pub repair: bool,
    /// Show the repairs that --repair would write, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Parallel Scan segments.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub segments: u32,
    /// Tries per scope before a scope under continuous writes is reported as not repaired.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub attempts: u32,
    /// Seconds after a scope's last write before --repair may move its best-effort counter the way a
    /// request still in flight could push past the invariant (raise it in best-effort admission, lower
    /// it in strict admission). Must exceed twice the API's timeout plus the clock skew between the API
    /// and this machine: a slow request's late write can stamp the counter with a time up to one
    /// timeout older than a newer request's.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub grace: u32,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Also compare the limit overrides with this limits file: an override changed outside it, or a scope
    /// under a prefix entry without its override yet, is an attention item.
    #[arg(long, value_name = "FILE")]
    pub limits: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ScopeArgs {
    /// The scope (account, tenant).
    pub scope: String,
}

#[derive(Debug, Clone, Subcommand)]
pub enum LimitCommand {
    /// The scope's limit and where it comes from.
    Get(ScopeArgs),
    /// Override the scope's limit (0 to 1000000000, the DefaultLimit parameter's maximum, as in a limits file).
    Set {
        scope: String,
        #[arg(value_parser = clap::value_parser!(u64).range(..=stack::params::MAX_LIMIT))]
        limit: u64,
    },
    /// Remove the override: the stack's default limit applies again.
    Clear(ScopeArgs),
}

#[derive(Debug, Clone, Subcommand)]
pub enum LimitsCommand {
    /// Show how the counters table's overrides differ from FILE (added, changed old -> new, removed), with
    /// each changed scope's usage; exit 0 no changes, 1 changes, 2 invalid file.
    Plan {
        /// The limits file (YAML, docs/limits.schema.json).
        file: PathBuf,
        /// Also write the plan (JSON, with the version each override was read at) for `limits apply --plan`.
        #[arg(long, value_name = "PLAN.json")]
        out: Option<PathBuf>,
    },
    /// Write the plan of FILE (or the saved --plan): each override only if unchanged since it was planned;
    /// a scope changed meanwhile is refused and reported (exit 1).
    Apply {
        /// The limits file to plan and apply.
        #[arg(required_unless_present = "plan")]
        file: Option<PathBuf>,
        /// Apply a plan written by `limits plan --out` instead.
        #[arg(long, value_name = "PLAN.json", conflicts_with = "file")]
        plan: Option<PathBuf>,
        /// Also apply changes that set a scope's limit below its current usage (without: nothing is written).
        #[arg(long)]
        allow_below_usage: bool,
    },
    /// Print today's overrides and the deployed default limit as a limits file.
    Export {
        /// Write the file here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum SeqCommand {
    /// The last number claimed in the scope (0 when none was); claims nothing.
    Get(ScopeArgs),
    /// Claim the scope's next number and print it. Retries conflicts within a bounded budget; exit 1 when
    /// the sequence stayed contended and no number was claimed.
    Next {
        /// The scope (account, tenant).
        scope: String,
        /// What the number is for, recorded on its item (e.g. an id).
        #[arg(long)]
        owner: Option<String>,
    },
}

#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Number of scopes (named <prefix>-0 .. <prefix>-N-1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub scopes: u32,
    #[arg(long, default_value = "load")]
    pub scope_prefix: String,
    /// Concurrent workers.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub workers: u32,
    /// Total operations [default: 1000 unless --duration is given].
    #[arg(long, conflicts_with = "duration")]
    pub operations: Option<u64>,
    /// Run for this many seconds instead of a number of operations.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<u64>,
    /// Share of operations that delete an item created earlier, 0 to 1.
    #[arg(long, default_value_t = 0.2)]
    pub delete_ratio: f64,
    /// Limit override written to every load scope before the run.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Seconds to wait for the stream consumer to drain before the audit; 0 skips both.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    pub drain_timeout: u64,
    /// Seed of the workers' random choices; also names the ids they create
    /// (`s<seed>-w<worker>-<n>`), so runs with different seeds never collide.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What goes into the stack: parameter overrides and the handler zips.
#[derive(Debug, Clone, Args)]
pub struct StackArgs {
    /// Template parameter override, e.g. --param StreamBatchSize=50 (repeatable). On an existing stack,
    /// parameters not given keep their deployed values; a new stack starts from the template defaults.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,

    /// Stack tag, e.g. --tag team=payments (repeatable); CloudFormation puts it on every resource that
    /// takes tags. On an existing stack, tags not given keep their deployed values.
    #[arg(long = "tag", value_name = "KEY=VALUE")]
    pub tags: Vec<String>,

    /// Directory holding <package>/bootstrap.zip for each handler [default: <workspace>/target/lambda,
    /// built by `make build`].
    #[arg(long, value_name = "DIR")]
    pub artifacts_dir: Option<PathBuf>,

    /// S3 bucket for the zips and large templates [default: <stack-name>-artifacts-<account>-<region>],
    /// created if absent.
    #[arg(long, value_name = "BUCKET")]
    pub artifacts_bucket: Option<String>,

    /// A CloudFormation service role of the stack's account (arn:aws:iam::<account>:role/<name>):
    /// CloudFormation creates, updates and deletes the stack's resources with it, so the caller needs only
    /// `counterctl policy operator --service-role-arn` (its policy: `counterctl policy service-role`). The
    /// stack keeps it for later operations; without the flag a later deploy uses the stack's.
    #[arg(long, value_name = "ARN")]
    pub role_arn: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct DeployArgs {
    #[command(flatten)]
    pub stack: StackArgs,

    /// Seconds to wait for the stack to reach a final status.
    #[arg(long, default_value_t = 1800, value_name = "SECONDS")]
    pub timeout: u64,

    /// Update the stack even though its tables have global-table replicas, on which the kit cannot count
    /// (docs/multi-region.md); prints a warning. Without it such a deploy is refused (exit 2).
    #[arg(long)]
    pub allow_replicas: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DestroyArgs {
    /// Also delete the resources and counters tables (kept by default: DeletionPolicy Retain).
    #[arg(long)]
    pub delete_data: bool,

    /// Do not ask for confirmation before deleting data (required with --delete-data when not in a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,

    /// Seconds to wait for the stack deletion.
    #[arg(long, default_value_t = 1800, value_name = "SECONDS")]
    pub timeout: u64,
}

/// `counterctl redrive` flags.
#[derive(Debug, Clone, Args)]
pub struct RedriveArgs {
    /// Replay each DLQ2 message here with the counter library (read its range back from the stream, apply it,
    /// then delete the message) instead of moving it to DLQ1: for when the reprocessor itself is broken.
    #[arg(long)]
    pub replay: bool,

    /// Count and show what would be moved or replayed; send, replay and delete nothing (messages are peeked and
    /// made visible again).
    #[arg(long)]
    pub dry_run: bool,

    /// Handle at most N messages.
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,

    /// At most N messages per second, 1-500 (the limit of SQS's message move task); "50" or "50/s".
    #[arg(long, value_name = "N/s")]
    pub rate: Option<String>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum LocalCommand {
    /// Play the stack's event source mappings (stream -> stream counter, DLQ1 -> reprocessor) in the embedded
    /// emulator with the real handler binaries (as `cargo build --bins` left them), until Ctrl-C or SIGTERM.
    Run(LocalRunArgs),
}

#[derive(Debug, Clone, Args)]
pub struct LocalRunArgs {
    /// Milliseconds between polls of a source that had nothing new (Lambda polls a stream shard four times
    /// a second).
    #[arg(long, default_value_t = 250, value_name = "MS")]
    pub poll_interval: u64,

    /// Drain what the stream and DLQ1 hold now, then exit, instead of running until stopped.
    #[arg(long)]
    pub until_idle: bool,

    /// With --until-idle: give up after this many seconds (exit 5), e.g. when a batch retries forever.
    #[arg(long, default_value_t = 600, value_name = "SECONDS", requires = "until_idle")]
    pub idle_timeout: u64,

    /// With --until-idle: also wait for DLQ1 messages in flight (hidden for the queue's visibility timeout
    /// after a failed attempt) to be retried or moved to DLQ2.
    #[arg(long, requires = "until_idle")]
    pub wait_for_in_flight: bool,

    /// Invoke through a `cargo lambda watch` already running with its invoke API at HOST:PORT instead of
    /// starting the handler binaries; it must have the functions' environment (tables, endpoint) itself.
    #[arg(long, value_name = "HOST:PORT")]
    pub attach: Option<String>,

    /// Run the release builds of the handlers (target/release; build them with `cargo build --release --bins`).
    #[arg(long)]
    pub release: bool,

    /// Serve the stack's api function, with function URL semantics, at http://127.0.0.1:PORT/ (0: any free
    /// port) while running; IAM auth is off there. Not with --until-idle.
    #[arg(long, default_value_t = DEFAULT_API_PORT, value_name = "PORT", conflicts_with = "until_idle")]
    pub api_port: u16,
}

/// Where `local run` serves the api function unless `--api-port` says
/// otherwise (the runner's `DEFAULT_FUNCTION_URL_PORT`; a test checks they
/// agree, this crate parses `local run` also without the runner).
pub const DEFAULT_API_PORT: u16 = 9001;

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("counterctl").chain(args.iter().copied()))
    }

    #[test]
    fn command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_are_localstack_text_and_the_kit_stack_name() {
        let cli = parse(&["status"]).unwrap();
        assert_eq!(cli.global.target, Target::Localstack);
        assert_eq!(cli.global.output, OutputFormat::Text);
        assert_eq!(cli.global.stack_name, "hybrid-counter");
        assert!(matches!(cli.command, Command::Status(_)));
    }

    #[test]
    fn global_flags_are_accepted_after_the_subcommand() {
        let cli = parse(&[
            "deploy",
            "--target",
            "aws",
            "--output",
            "json",
            "--param",
            "StreamBatchSize=5",
        ])
        .unwrap();
        assert_eq!(cli.global.target, Target::Aws);
        assert_eq!(cli.global.output, OutputFormat::Json);
        let Command::Deploy(deploy) = cli.command else {
            panic!("deploy expected")
        };
        assert_eq!(deploy.stack.params, ["StreamBatchSize=5"]);
    }

    #[test]
    fn a_bad_target_names_the_valid_ones() {
        let err = parse(&["--target", "gcp", "status"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidValue);
        let message = err.to_string();
        assert!(message.contains("gcp"), "{message}");
        assert!(message.contains("local, localstack, aws"), "{message}");
        assert_eq!(err.exit_code(), i32::from(crate::exit::USAGE));
    }

    #[test]
    fn a_bad_output_names_the_valid_ones() {
        let err = parse(&["--output", "yaml", "status"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidValue);
        assert!(err.to_string().contains("text, json"), "{err}");
    }

    #[test]
    fn a_missing_command_is_a_usage_error() {
        let err = parse(&[]).unwrap_err();
        assert_eq!(err.exit_code(), i32::from(crate::exit::USAGE));
    }

    #[test]
    fn quiet_is_global_and_off_by_default() {
        assert!(!parse(&["status"]).unwrap().global.quiet);
        assert!(parse(&["status", "--quiet"]).unwrap().global.quiet);
        assert!(parse(&["-q", "redrive", "--dry-run"]).unwrap().global.quiet);
    }

    #[test]
    fn completions_take_a_known_shell() {
        let cli = parse(&["completions", "zsh"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Completions(CompletionsArgs {
                shell: clap_complete::Shell::Zsh
            })
        ));
        let err = parse(&["completions", "tcsh"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidValue);
        assert!(err.to_string().contains("bash, elvish, fish, powershell, zsh"), "{err}");
    }

    #[test]
    fn long_help_documents_exit_codes_and_targets() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("Exit codes:"), "{help}");
        assert!(help.contains("LOCALSTACK_AUTH_TOKEN"), "{help}");
        assert!(help.contains("  3  the stack does not exist"), "{help}");
    }
}
