//! Raw arguments turned into a validated [`Config`], with no I/O: the stack
//! name, the region, the endpoint choice, and each command's options, in a
//! file per group of commands: `lifecycle` for `plan`, `deploy` and
//! `destroy` (the `--param` overrides, checked against the template's own
//! parameter list and constraints), `data` for `audit`, `usage`, `limit`
//! and `load`, `redrive` and `local`. Everything here is decided from
//! the command line and the environment variables passed in, so it is
//! tested without a network. The commands read these options; nothing here
//! knows the commands.

mod data;
mod lifecycle;
mod local;
mod redrive;

use std::path::PathBuf;
use std::time::Duration;

pub use data::{
    ApplySource, AuditOptions, CallObserver, LimitAction, LimitsAction, LimitsOptions, LoadOptions, LoadStop, Observer,
    SeqAction, VerifyOptions,
};
pub use lifecycle::{
    DestroyOptions, MANAGED_PARAMS, StackInputs, default_value, parse_overrides, validate_bucket_name,
    validate_role_arn,
};
pub use local::{LOCALSTACK_HEALTH_PATH, LocalRunOptions, localstack_answered};
pub use redrive::{MAX_RATE, RedriveMethod, RedriveMode, RedriveOptions, parse_rate, redrive_method};

use crate::cli::{Cli, Command, OutputFormat, Target};
use crate::error::{Error, Result};

/// CloudFormation's limit on stack names.
pub const STACK_NAME_MAX: usize = 128;
/// Region of the emulators when none is given.
pub const EMULATOR_REGION: &str = "us-east-1";
/// LocalStack's edge port.
pub const LOCALSTACK_ENDPOINT: &str = "http://localhost:4566";
/// The variable LocalStack reads its auth token from.
pub const LOCALSTACK_AUTH_TOKEN: &str = "LOCALSTACK_AUTH_TOKEN";

/// Where the service endpoint comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `--endpoint-url` or `AWS_ENDPOINT_URL`: used as is, never started.
    Explicit(String),
    /// The embedded emulator: the one running from `.run/`, else this port;
    /// started when it does not answer.
    LocalEmulator { default_port: u16 },
    /// A fixed URL (LocalStack's default).
    Fixed(String),
    /// `--target localstack` without `LOCALSTACK_AUTH_TOKEN`: what answers
    /// LocalStack's health path at the port `localstack/ministack.sh`
    /// runs ministack on (else this one), started when nothing does.
    Ministack { default_port: u16 },
    /// The real AWS endpoints.
    Aws,
}

/// A validated command line.
#[derive(Debug, Clone)]
pub struct Config {
    pub target: Target,
    pub stack_name: String,
    /// Always set for the emulator targets; for `aws` it may come from the
    /// profile, resolved when the SDK configuration loads.
    pub region: Option<String>,
    pub profile: Option<String>,
    pub endpoint: Endpoint,
    pub output: OutputFormat,
    /// `--quiet`: only results, no progress or informational lines.
    pub quiet: bool,
    /// `NO_COLOR` is set and not empty (<https://no-color.org>): no colour,
    /// and no spinner (its redraws are escape sequences too).
    pub no_color: bool,
    pub command: CommandConfig,
    /// The variables the later I/O phase needs (working directory lookups,
    /// `CARGO_TARGET_DIR`, `FAKECLOUD_BIN`), captured once.
    pub env: EnvSnapshot,
}

#[derive(Debug, Clone)]
pub enum CommandConfig {
    Plan(StackInputs),
    Deploy {
        inputs: StackInputs,
        timeout: Duration,
        /// Update a stack whose tables have replicas (`--allow-replicas`).
        allow_replicas: bool,
    },
    Destroy(DestroyOptions),
    Status {
        /// `--limits FILE`: also compare the overrides with it.
        limits: Option<PathBuf>,
    },
    Audit(AuditOptions),
    Usage(hybrid_counter::Scope),
    Limit {
        scope: hybrid_counter::Scope,
        action: LimitAction,
    },
    Seq {
        scope: hybrid_counter::Scope,
        action: SeqAction,
    },
    Limits(LimitsOptions),
    Load(LoadOptions),
    Redrive(RedriveOptions),
    LocalRun(LocalRunOptions),
    /// `completions <shell>`: nothing is read or sent.
    Completions(clap_complete::Shell),
    /// `man`: nothing is read or sent.
    Man,
    /// `policy operator|caller|service-role`: nothing is read or sent.
    OperatorPolicy(OperatorPolicyOptions),
    Verify(VerifyOptions),
}

/// Which policy `policy` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Operator,
    Caller,
    /// The read-only policy of a CI job running `limits plan`.
    LimitsPlan,
    ServiceRole(ServiceRolePart),
}

/// Which of the service role's policies `policy service-role` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceRolePart {
    Permissions,
    Trust,
    /// The permissions boundary of the roles it creates.
    Boundary,
}

/// `policy`'s validated flags: which policy, and where it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorPolicyOptions {
    pub kind: PolicyKind,
    /// The CloudFormation service role the operator passes (`policy operator` only).
    pub service_role_arn: Option<String>,
    pub partition: String,
    pub region: String,
    pub account: String,
    pub name_prefix: String,
    /// `None`: the name deploy derives from the stack, account and region.
    pub artifacts_bucket: Option<String>,
}

impl OperatorPolicyOptions {
    fn from_args(
        kind: PolicyKind,
        args: crate::cli::OperatorPolicyArgs,
        stack_name: &str,
        region: Option<&str>,
    ) -> Result<Self> {
        let account = args.account.trim().to_owned();
        if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
            return Err(Error::Account { account });
        }
        let partition = args.partition.trim().to_owned();
        if !matches!(partition.as_str(), "aws" | "aws-cn" | "aws-us-gov") {
            return Err(Error::Partition { partition });
        }
        let name_prefix = match args.name_prefix {
            Some(prefix) => validate_stack_name(&prefix)?,
            None => stack_name.to_owned(),
        };
        let service_role_arn = match (kind, args.service_role_arn) {
            (_, None) => None,
            (PolicyKind::Operator, Some(arn)) => Some(validate_role_arn(&arn, &account)?),
            (_, Some(_)) => return Err(Error::ServiceRoleArnOnlyForOperator),
        };
        Ok(Self {
            kind,
            service_role_arn,
            partition,
            region: region.ok_or(Error::NoRegion)?.to_owned(),
            account,
            name_prefix,
            artifacts_bucket: args
                .artifacts_bucket
                .map(|bucket| validate_bucket_name(&bucket).map(|()| bucket))
                .transpose()?,
        })
    }
}

/// `--param OperatorPrincipalArn=...` must name a principal of the stack's
/// own account: the failed batches are encrypted with the account's
/// `aws/s3` key, which no other account can use, and the bucket policy's
/// `aws:PrincipalArn` would never match a foreign principal's reads
/// (AWS managed keys: <https://docs.aws.amazon.com/kms/latest/developerguide/concepts.html#aws-managed-key>).
pub fn check_operator_account(overrides: &std::collections::BTreeMap<String, String>, account: &str) -> Result<()> {
    let key = stack::params::OPERATOR_PRINCIPAL_ARN;
    let Some(value) = overrides.get(key).filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let other = value.split(':').nth(4).unwrap_or_default();
    if other == account {
        Ok(())
    } else {
        Err(Error::ForeignOperator {
            key: key.to_owned(),
            value: value.clone(),
            other: other.to_owned(),
            account: account.to_owned(),
        })
    }
}

/// Environment variables read by counterctl itself (the SDK reads its own).
#[derive(Debug, Clone, Default)]
pub struct EnvSnapshot {
    pub cargo_target_dir: Option<PathBuf>,
    pub fakecloud_bin: Option<String>,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`:
    /// an emulator's caller (the standard chain reads them on AWS).
    pub aws_keys: std::collections::BTreeMap<String, String>,
}

/// The variables of an emulator caller's static credentials.
pub const AWS_KEY_VARIABLES: [&str; 3] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"];

impl Config {
    /// Validates `cli`; `env` looks up environment variables (normally
    /// `std::env::var`), so tests pass their own.
    pub fn from_cli(cli: Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let global = cli.global;
        let stack_name = validate_stack_name(&global.stack_name)?;
        let non_empty = |v: Option<String>| v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        let region = non_empty(global.region).map(validate_region).transpose()?;
        let profile = non_empty(global.profile);
        let explicit = non_empty(global.endpoint_url).map(validate_endpoint).transpose()?;

        let (region, endpoint) = match global.target {
            Target::Local => {
                let port = env("FAKECLOUD_PORT")
                    .and_then(|p| p.trim().parse().ok())
                    .unwrap_or(4566);
                let endpoint = explicit.map_or(Endpoint::LocalEmulator { default_port: port }, Endpoint::Explicit);
                (Some(region.unwrap_or_else(|| EMULATOR_REGION.to_owned())), endpoint)
            }
            Target::Localstack => {
                // Without a token no LocalStack starts: the kit's token-free
                // LocalStack-compatible emulator stands in (localstack/README.md).
                let endpoint = match (explicit, non_empty(env(LOCALSTACK_AUTH_TOKEN))) {
                    (Some(url), _) => Endpoint::Explicit(url),
                    (None, Some(_)) => Endpoint::Fixed(LOCALSTACK_ENDPOINT.to_owned()),
                    (None, None) => Endpoint::Ministack {
                        default_port: env("MINISTACK_PORT")
                            .and_then(|p| p.trim().parse().ok())
                            .unwrap_or(4566),
                    },
                };
                (Some(region.unwrap_or_else(|| EMULATOR_REGION.to_owned())), endpoint)
            }
            Target::Aws => (region, explicit.map_or(Endpoint::Aws, Endpoint::Explicit)),
        };

        let template = stack::template();
        let command = match cli.command {
            Command::Plan(args) => CommandConfig::Plan(lifecycle::stack_inputs(&template, args, &stack_name)?),
            Command::Deploy(args) => CommandConfig::Deploy {
                inputs: lifecycle::stack_inputs(&template, args.stack, &stack_name)?,
                timeout: Duration::from_secs(args.timeout.max(1)),
                allow_replicas: args.allow_replicas,
            },
            Command::Destroy(args) => CommandConfig::Destroy(DestroyOptions {
                delete_data: args.delete_data,
                yes: args.yes,
                timeout: Duration::from_secs(args.timeout.max(1)),
            }),
            Command::Status(args) => CommandConfig::Status { limits: args.limits },
            Command::Audit(args) => CommandConfig::Audit(data::audit_options(args)?),
            Command::Usage(args) => CommandConfig::Usage(data::scope_arg(&args.scope)?),
            Command::Limit(command) => {
                let (scope, action) = data::limit(command)?;
                CommandConfig::Limit { scope, action }
            }
            Command::Seq(command) => {
                let (scope, action) = data::seq(command)?;
                CommandConfig::Seq { scope, action }
            }
            Command::Limits(command) => CommandConfig::Limits(command.into()),
            Command::Load(args) => CommandConfig::Load(data::load_options(args)?),
            Command::Redrive(args) => CommandConfig::Redrive(RedriveOptions::from_args(&args)?),
            Command::Local(command) => {
                // A build without the runner still parses `local run`, and says how to get one.
                if !cfg!(feature = "local") {
                    return Err(Error::NoLocalRunner);
                }
                CommandConfig::LocalRun(LocalRunOptions::from_args(&command, global.target)?)
            }
            Command::Completions(args) => CommandConfig::Completions(args.shell),
            Command::Man => CommandConfig::Man,
            Command::Policy(command) => {
                let (kind, args) = match command {
                    crate::cli::PolicyCommand::Operator(args) => (PolicyKind::Operator, args),
                    crate::cli::PolicyCommand::Caller(args) => (PolicyKind::Caller, args),
                    crate::cli::PolicyCommand::LimitsPlan(args) => (PolicyKind::LimitsPlan, args),
                    crate::cli::PolicyCommand::ServiceRole(args) => {
                        let part = match (args.trust, args.boundary) {
                            (true, _) => ServiceRolePart::Trust,
                            (false, true) => ServiceRolePart::Boundary,
                            (false, false) => ServiceRolePart::Permissions,
                        };
                        lifecycle::fits_service_role(&stack_name)?;
                        (PolicyKind::ServiceRole(part), args.scope)
                    }
                };
                CommandConfig::OperatorPolicy(OperatorPolicyOptions::from_args(
                    kind,
                    args,
                    &stack_name,
                    region.as_deref(),
                )?)
            }
            Command::Verify(args) => CommandConfig::Verify(args.into()),
        };

        Ok(Self {
            target: global.target,
            stack_name,
            region,
            profile,
            endpoint,
            output: global.output,
            quiet: global.quiet,
            no_color: no_color(env),
            command,
            env: EnvSnapshot {
                cargo_target_dir: non_empty(env("CARGO_TARGET_DIR")).map(PathBuf::from),
                fakecloud_bin: non_empty(env("FAKECLOUD_BIN")),
                aws_keys: AWS_KEY_VARIABLES
                    .iter()
                    .filter_map(|name| non_empty(env(name)).map(|value| ((*name).to_owned(), value)))
                    .collect(),
            },
        })
    }

    /// Whether the target is an emulator (dummy credentials, path-style S3).
    pub fn is_emulator(&self) -> bool {
        self.target != Target::Aws
    }
}

/// Whether `NO_COLOR` asks for no colour: set and not empty
/// (<https://no-color.org>).
pub fn no_color(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// `[a-zA-Z][-a-zA-Z0-9]*`, at most 128 characters: CloudFormation's rule.
pub fn validate_stack_name(name: &str) -> Result<String> {
    let valid = !name.is_empty()
        && name.len() <= STACK_NAME_MAX
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if valid {
        Ok(name.to_owned())
    } else {
        Err(Error::StackName {
            name: name.to_owned(),
            max: STACK_NAME_MAX,
        })
    }
}

fn validate_region(region: String) -> Result<String> {
    let valid = region.len() <= 32
        && region.contains('-')
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(region)
    } else {
        Err(Error::Region { region })
    }
}

fn validate_endpoint(url: String) -> Result<String> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(url.trim_end_matches('/').to_owned()),
        _ => Err(Error::EndpointUrl { url }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::Parser;

    use super::*;

    /// Parses `args`; the flags clap also reads from the environment
    /// (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL) are pinned to empty unless
    /// given, so the developer's shell does not leak into the tests.
    fn config(args: &[&str], vars: &[(&str, &str)]) -> Result<Config> {
        let mut argv = vec!["counterctl"];
        for flag in ["--region", "--profile", "--endpoint-url"] {
            if !args.contains(&flag) {
                argv.extend([flag, ""]);
            }
        }
        // These tests were written for the embedded emulator; the default
        // target (localstack) is tested by naming it.
        if !args.contains(&"--target") {
            argv.extend(["--target", "local"]);
        }
        argv.extend(args);
        let cli = Cli::try_parse_from(argv).unwrap();
        let vars: BTreeMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Config::from_cli(cli, &|k| vars.get(k).cloned())
    }

    #[test]
    fn no_color_counts_only_when_set_and_not_empty_and_quiet_comes_from_the_flag() {
        let plain = config(&["status"], &[]).unwrap();
        assert!(!plain.no_color && !plain.quiet);
        assert!(config(&["status"], &[("NO_COLOR", "1")]).unwrap().no_color);
        assert!(!config(&["status"], &[("NO_COLOR", "")]).unwrap().no_color);
        assert!(config(&["--quiet", "status"], &[]).unwrap().quiet);
    }

    #[test]
    fn operator_commands_validate_scopes_and_load_settings_before_any_io() {
        for (args, needle) in [
            (&["usage", ""][..], "scope must not be empty"),
            (&["limit", "set", "a\tb", "5"][..], "control character"),
            (&["audit", "--scope", " x"][..], "whitespace"),
            (&["load", "--delete-ratio", "1.5"][..], "--delete-ratio"),
            (&["load", "--operations", "0"][..], "positive"),
            (&["load", "--scope-prefix", "a\u{1}"][..], "control character"),
        ] {
            let err = config(args, &[]).unwrap_err();
            assert_eq!(err.exit_code(), crate::exit::USAGE, "{args:?}");
            assert!(err.to_string().contains(needle), "{args:?}: {err}");
        }
        let ok = config(&["audit", "--repair", "--scope", "acct"], &[]).unwrap();
        let CommandConfig::Audit(audit) = ok.command else {
            panic!()
        };
        assert_eq!(audit.mode, hybrid_counter::audit::RepairMode::Apply);
        let load = config(&["load", "--duration", "5"], &[]).unwrap();
        let CommandConfig::Load(load) = load.command else {
            panic!()
        };
        assert_eq!(load.stop, LoadStop::Duration(Duration::from_secs(5)));
    }

    #[test]
    fn local_defaults_to_the_emulator_in_us_east_1() {
        let config = config(&["status"], &[]).unwrap();
        assert_eq!(config.target, Target::Local);
        assert_eq!(config.region.as_deref(), Some("us-east-1"));
        assert_eq!(config.endpoint, Endpoint::LocalEmulator { default_port: 4566 });
        assert!(config.is_emulator());
    }

    #[test]
    fn an_explicit_endpoint_wins_and_loses_its_trailing_slash() {
        let config = config(&["--endpoint-url", "http://127.0.0.1:9999/", "status"], &[]).unwrap();
        assert_eq!(config.endpoint, Endpoint::Explicit("http://127.0.0.1:9999".into()));
    }

    #[test]
    fn fakecloud_port_moves_the_default_emulator_endpoint() {
        let config = config(&["status"], &[("FAKECLOUD_PORT", "4600")]).unwrap();
        assert_eq!(config.endpoint, Endpoint::LocalEmulator { default_port: 4600 });
    }

    #[test]
    fn a_bad_endpoint_is_a_usage_error() {
        let err = config(&["--endpoint-url", "localhost:4566", "status"], &[]).unwrap_err();
        assert!(matches!(err, Error::EndpointUrl { .. }), "{err}");
        assert_eq!(err.exit_code(), crate::exit::USAGE);
    }

    #[test]
    fn localstack_with_a_token_is_localstack_and_without_one_ministack() {
        let ok = config(&["--target", "localstack", "status"], &[("LOCALSTACK_AUTH_TOKEN", "t")]).unwrap();
        assert_eq!(ok.endpoint, Endpoint::Fixed("http://localhost:4566".into()));
        assert_eq!(ok.region.as_deref(), Some("us-east-1"));
        for token in [None, Some(" ")] {
            let vars: Vec<(&str, &str)> = token.map(|t| ("LOCALSTACK_AUTH_TOKEN", t)).into_iter().collect();
            let free = config(&["--target", "localstack", "status"], &vars).unwrap();
            assert_eq!(free.endpoint, Endpoint::Ministack { default_port: 4566 }, "{token:?}");
        }
        let moved = config(&["--target", "localstack", "status"], &[("MINISTACK_PORT", "4610")]).unwrap();
        assert_eq!(moved.endpoint, Endpoint::Ministack { default_port: 4610 });
        let explicit = config(
            &[
                "--target",
                "localstack",
                "--endpoint-url",
                "http://127.0.0.1:4999",
                "status",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(explicit.endpoint, Endpoint::Explicit("http://127.0.0.1:4999".into()));
    }

    #[test]
    fn local_run_on_localstack_plays_it_with_the_runner_with_or_without_a_token() {
        let argv = ["--target", "localstack", "local", "run", "--until-idle"];
        for (vars, endpoint) in [
            (
                &[("LOCALSTACK_AUTH_TOKEN", "t")][..],
                Endpoint::Fixed("http://localhost:4566".into()),
            ),
            (&[][..], Endpoint::Ministack { default_port: 4566 }),
        ] {
            match config(&argv, vars) {
                Ok(ok) => {
                    let CommandConfig::LocalRun(options) = ok.command else {
                        panic!("local run expected")
                    };
                    assert!(options.localstack && options.until_idle);
                    assert_eq!(ok.endpoint, endpoint);
                }
                // A build without the runner refuses `local run` whatever the target.
                Err(err) => assert!(!cfg!(feature = "local") && matches!(err, Error::NoLocalRunner), "{err}"),
            }
        }
    }

    #[test]
    fn aws_leaves_region_and_endpoint_to_the_sdk() {
        let config = config(&["--target", "aws", "status"], &[]).unwrap();
        assert_eq!(config.endpoint, Endpoint::Aws);
        assert_eq!(config.region, None);
        assert!(!config.is_emulator());
    }

    #[test]
    fn a_bad_stack_name_is_rejected_before_any_io() {
        for name in ["1stack", "my_stack", "", "a b"] {
            let err = config(&["--stack-name", name, "status"], &[]).unwrap_err();
            assert!(matches!(err, Error::StackName { .. }), "{name}: {err}");
            assert!(err.to_string().contains("use 1-128 characters"), "{err}");
        }
        assert!(validate_stack_name(&"a".repeat(129)).is_err());
        assert!(validate_stack_name("hybrid-counter-2").is_ok());
    }

    #[test]
    fn a_bad_region_is_rejected() {
        let err = config(&["--region", "US East", "status"], &[]).unwrap_err();
        assert!(matches!(err, Error::Region { .. }), "{err}");
    }

    #[cfg(not(feature = "local"))]
    #[test]
    fn without_the_runner_local_run_is_a_usage_error_that_says_how_to_get_it() {
        let err = config(&["local", "run", "--until-idle"], &[]).unwrap_err();
        assert!(matches!(err, Error::NoLocalRunner), "{err}");
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        assert_eq!(
            err.to_string(),
            "this counterctl was built without the local runner: cargo build --bin counterctl --features ops-cli/local"
        );
    }

    #[cfg(feature = "local")]
    #[test]
    fn with_the_runner_local_run_is_checked_like_any_command() {
        let ok = config(&["local", "run", "--until-idle"], &[]).unwrap();
        let CommandConfig::LocalRun(options) = ok.command else {
            panic!("local run expected");
        };
        assert!(options.until_idle);
        let err = config(&["--target", "aws", "local", "run"], &[]).unwrap_err();
        assert!(err.to_string().contains("--target local"), "{err}");
    }

    #[test]
    fn bad_params_fail_the_whole_command_line() {
        let err = config(&["plan", "--param", "Nope=1"], &[]).unwrap_err();
        assert!(matches!(err, Error::UnknownParam { .. }));
        let ok = config(&["deploy", "--param", "StreamBatchSize=7", "--timeout", "60"], &[]).unwrap();
        let CommandConfig::Deploy {
            inputs,
            timeout,
            allow_replicas,
        } = ok.command
        else {
            panic!("deploy expected");
        };
        assert_eq!(inputs.overrides["StreamBatchSize"], "7");
        assert_eq!(timeout, Duration::from_secs(60));
        assert!(!allow_replicas, "refused unless asked for");
        let allowed = config(&["deploy", "--allow-replicas"], &[]).unwrap();
        assert!(matches!(
            allowed.command,
            CommandConfig::Deploy {
                allow_replicas: true,
                ..
            }
        ));
    }

    #[test]
    fn a_service_role_must_be_a_role_of_the_stacks_account() {
        let account = "123456789012";
        for ok in [
            "arn:aws:iam::123456789012:role/hc-cfn",
            "arn:aws:iam::123456789012:role/path/hc-cfn",
        ] {
            assert_eq!(validate_role_arn(ok, account).unwrap(), ok);
        }
        for refused in [
            "arn:aws:iam::999999999999:role/hc-cfn",
            "arn:aws:iam::123456789012:user/alice",
            "arn:aws:iam::123456789012:role/",
            "arn:aws:iam::123456789012:root",
            "*",
        ] {
            let err = validate_role_arn(refused, account).unwrap_err();
            assert_eq!(err.exit_code(), crate::exit::USAGE, "{refused}: {err}");
        }
    }

    fn deploy_with_role(stack: &str, extra: &[&str]) -> Result<Config> {
        let mut args = vec![
            "--target",
            "aws",
            "--region",
            "eu-west-1",
            "--stack-name",
            stack,
            "deploy",
            "--role-arn",
            "arn:aws:iam::123456789012:role/hck-cfn-service-orders",
        ];
        args.extend_from_slice(extra);
        config(&args, &[])
    }

    #[test]
    fn deploy_with_a_role_arn_fills_in_the_boundary_and_refuses_none() {
        let parsed = deploy_with_role("orders", &[]).unwrap();
        let CommandConfig::Deploy { inputs, .. } = &parsed.command else {
            panic!("{:?}", parsed.command)
        };
        assert_eq!(
            inputs.overrides[stack::params::ROLE_PERMISSIONS_BOUNDARY_ARN],
            "arn:aws:iam::123456789012:policy/hck-boundary-orders"
        );
        let own = "arn:aws:iam::123456789012:policy/team/boundary";
        let parsed = deploy_with_role("orders", &["--param", &format!("RolePermissionsBoundaryArn={own}")]).unwrap();
        let CommandConfig::Deploy { inputs, .. } = &parsed.command else {
            panic!("{:?}", parsed.command)
        };
        assert_eq!(inputs.overrides[stack::params::ROLE_PERMISSIONS_BOUNDARY_ARN], own);
        let err = deploy_with_role("orders", &["--param", "RolePermissionsBoundaryArn="]).unwrap_err();
        assert!(matches!(err, Error::NoBoundaryWithRoleArn { .. }), "{err}");
        assert!(err.to_string().contains("hck-boundary-orders"), "{err}");
        assert_eq!(err.exit_code(), crate::exit::USAGE);
    }

    /// CloudFormation shortens the role names of a longer stack, which the
    /// service role's grants (`<stack>-<logical id>-*`) then miss.
    #[test]
    fn deploy_with_a_role_arn_refuses_a_stack_name_too_long_for_its_grants() {
        let max = stack::service_role::max_stack_name_with_service_role();
        assert!(deploy_with_role(&"a".repeat(max), &[]).is_ok());
        let err = deploy_with_role(&"a".repeat(max + 1), &[]).unwrap_err();
        assert!(matches!(err, Error::StackNameTooLongForServiceRole { .. }), "{err}");
        assert!(err.to_string().contains("at most 31"), "{err}");
        // Without a service role the name is CloudFormation's business.
        assert!(
            config(
                &[
                    "--target",
                    "aws",
                    "--region",
                    "eu-west-1",
                    "--stack-name",
                    &"a".repeat(40),
                    "deploy"
                ],
                &[]
            )
            .is_ok()
        );
    }

    #[test]
    fn deploy_takes_a_role_arn_and_refuses_a_malformed_one() {
        let parsed = config(
            &[
                "--target",
                "aws",
                "--region",
                "eu-west-1",
                "deploy",
                "--role-arn",
                "arn:aws:iam::123456789012:role/hc-cfn",
            ],
            &[],
        )
        .unwrap();
        let CommandConfig::Deploy { inputs, .. } = &parsed.command else {
            panic!("{:?}", parsed.command)
        };
        assert_eq!(
            inputs.role_arn.as_deref(),
            Some("arn:aws:iam::123456789012:role/hc-cfn")
        );
        let err = config(
            &[
                "--target",
                "aws",
                "--region",
                "eu-west-1",
                "deploy",
                "--role-arn",
                "cfn",
            ],
            &[],
        )
        .unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::USAGE, "{err}");
    }

    #[test]
    fn an_operator_principal_of_another_account_is_refused() {
        let mut overrides = BTreeMap::new();
        assert!(check_operator_account(&overrides, "123456789012").is_ok());
        overrides.insert(
            stack::params::OPERATOR_PRINCIPAL_ARN.to_owned(),
            "arn:aws:iam::123456789012:role/ops".to_owned(),
        );
        assert!(check_operator_account(&overrides, "123456789012").is_ok());
        overrides.insert(
            stack::params::OPERATOR_PRINCIPAL_ARN.to_owned(),
            "arn:aws:iam::999999999999:role/ops".to_owned(),
        );
        let err = check_operator_account(&overrides, "123456789012").unwrap_err();
        assert!(err.to_string().contains("999999999999"), "{err}");
    }
}
