//! Raw arguments turned into a validated [`Config`], with no I/O: the stack
//! name, the region, the endpoint choice, the `--param` overrides (checked
//! against the template's own parameter list and constraints) and what each
//! command needs. Everything here is decided from the command line and the
//! environment variables passed in, so it is tested without a network.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use stack::expr::Literal;
use stack::template::{ParameterType, Template};

use crate::cli::{Cli, Command, OutputFormat, StackArgs, Target};
use crate::error::{Error, Result};

/// CloudFormation's limit on stack names.
pub const STACK_NAME_MAX: usize = 128;
/// Region of the emulators when none is given.
pub const EMULATOR_REGION: &str = "us-east-1";
/// LocalStack's edge port.
pub const LOCALSTACK_ENDPOINT: &str = "http://localhost:4566";
/// The variable LocalStack reads its auth token from.
pub const LOCALSTACK_AUTH_TOKEN: &str = "LOCALSTACK_AUTH_TOKEN";

/// Template parameters counterctl fills in itself from the packaged zips.
pub const MANAGED_PARAMS: [&str; 4] = [
    stack::params::ARTIFACTS_BUCKET,
    stack::params::STREAM_COUNTER_CODE_KEY,
    stack::params::DLQ_REPROCESSOR_CODE_KEY,
    stack::params::API_CODE_KEY,
];

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
    },
    Destroy {
        delete_data: bool,
        yes: bool,
        timeout: Duration,
    },
    Status,
    Audit(crate::commands::audit::AuditOptions),
    Usage(hybrid_counter::Scope),
    Limit {
        scope: hybrid_counter::Scope,
        action: crate::commands::scope::LimitAction,
    },
    Load(crate::commands::load::LoadOptions),
    Redrive(crate::commands::redrive::RedriveOptions),
    LocalRun(crate::commands::local::LocalRunOptions),
}

impl CommandConfig {
    pub fn name(&self) -> &'static str {
        match self {
            CommandConfig::Plan(_) => "plan",
            CommandConfig::Deploy { .. } => "deploy",
            CommandConfig::Destroy { .. } => "destroy",
            CommandConfig::Status => "status",
            CommandConfig::Audit(_) => "audit",
            CommandConfig::Usage(_) => "usage",
            CommandConfig::Limit { .. } => "limit",
            CommandConfig::Load(_) => "load",
            CommandConfig::Redrive(_) => "redrive",
            CommandConfig::LocalRun(_) => "local run",
        }
    }
}

/// What a plan or deploy puts into the stack.
#[derive(Debug, Clone, Default)]
pub struct StackInputs {
    /// Validated `--param` overrides.
    pub overrides: BTreeMap<String, String>,
    pub artifacts_dir: Option<PathBuf>,
    pub artifacts_bucket: Option<String>,
}

/// Environment variables read by counterctl itself (the SDK reads its own).
#[derive(Debug, Clone, Default)]
pub struct EnvSnapshot {
    pub cargo_target_dir: Option<PathBuf>,
    pub fakecloud_bin: Option<String>,
}

/// A scope given on the command line, validated like the API validates it.
fn scope_arg(raw: &str) -> Result<hybrid_counter::Scope> {
    hybrid_counter::Scope::new(raw).map_err(|e| Error::InvalidArgument(e.to_string()))
}

fn load_options(args: crate::cli::LoadArgs) -> Result<crate::commands::load::LoadOptions> {
    use crate::commands::load::{LoadOptions, Stop};
    if !(0.0..=1.0).contains(&args.delete_ratio) {
        return Err(Error::InvalidArgument(format!(
            "--delete-ratio must be between 0 and 1, got {}",
            args.delete_ratio
        )));
    }
    // The scopes are <prefix>-<n>: check the longest one up front.
    scope_arg(&format!("{}-{}", args.scope_prefix, args.scopes.saturating_sub(1)))?;
    let stop = match (args.operations, args.duration) {
        (_, Some(0)) | (Some(0), _) => {
            return Err(Error::InvalidArgument(
                "--operations and --duration must be positive".into(),
            ));
        }
        (_, Some(seconds)) => Stop::Duration(Duration::from_secs(seconds)),
        (operations, None) => Stop::Operations(operations.unwrap_or(1000)),
    };
    Ok(LoadOptions {
        scopes: args.scopes,
        scope_prefix: args.scope_prefix,
        workers: args.workers,
        stop,
        delete_ratio: args.delete_ratio,
        limit: args.limit,
        drain_timeout: Duration::from_secs(args.drain_timeout),
        seed: args.seed,
    })
}

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
                if non_empty(env(LOCALSTACK_AUTH_TOKEN)).is_none() {
                    return Err(Error::LocalstackToken);
                }
                let endpoint = explicit.map_or(Endpoint::Fixed(LOCALSTACK_ENDPOINT.to_owned()), Endpoint::Explicit);
                (Some(region.unwrap_or_else(|| EMULATOR_REGION.to_owned())), endpoint)
            }
            Target::Aws => (region, explicit.map_or(Endpoint::Aws, Endpoint::Explicit)),
        };

        let template = stack::template();
        let command = match cli.command {
            Command::Plan(args) => CommandConfig::Plan(stack_inputs(&template, args)?),
            Command::Deploy(args) => CommandConfig::Deploy {
                inputs: stack_inputs(&template, args.stack)?,
                timeout: Duration::from_secs(args.timeout.max(1)),
            },
            Command::Destroy(args) => CommandConfig::Destroy {
                delete_data: args.delete_data,
                yes: args.yes,
                timeout: Duration::from_secs(args.timeout.max(1)),
            },
            Command::Status => CommandConfig::Status,
            Command::Audit(args) => CommandConfig::Audit(crate::commands::audit::AuditOptions {
                scope: args.scope.as_deref().map(scope_arg).transpose()?,
                mode: if args.repair {
                    hybrid_counter::audit::RepairMode::Apply
                } else if args.dry_run {
                    hybrid_counter::audit::RepairMode::DryRun
                } else {
                    hybrid_counter::audit::RepairMode::None
                },
                segments: args.segments,
                attempts: args.attempts,
                grace_ms: i64::from(args.grace) * 1000,
            }),
            Command::Usage(args) => CommandConfig::Usage(scope_arg(&args.scope)?),
            Command::Limit(limit) => {
                use crate::cli::LimitCommand;
                use crate::commands::scope::LimitAction;
                let (scope, action) = match limit {
                    LimitCommand::Get(args) => (args.scope, LimitAction::Get),
                    LimitCommand::Set { scope, limit } => (scope, LimitAction::Set(Some(limit))),
                    LimitCommand::Clear(args) => (args.scope, LimitAction::Set(None)),
                };
                CommandConfig::Limit {
                    scope: scope_arg(&scope)?,
                    action,
                }
            }
            Command::Load(args) => CommandConfig::Load(load_options(args)?),
            Command::Redrive(args) => {
                CommandConfig::Redrive(crate::commands::redrive::RedriveOptions::from_args(&args)?)
            }
            Command::Local(command) => CommandConfig::LocalRun(crate::commands::local::LocalRunOptions::from_args(
                &command,
                global.target,
            )?),
        };

        Ok(Self {
            target: global.target,
            stack_name,
            region,
            profile,
            endpoint,
            output: global.output,
            command,
            env: EnvSnapshot {
                cargo_target_dir: non_empty(env("CARGO_TARGET_DIR")).map(PathBuf::from),
                fakecloud_bin: non_empty(env("FAKECLOUD_BIN")),
            },
        })
    }

    /// Whether the target is an emulator (dummy credentials, path-style S3).
    pub fn is_emulator(&self) -> bool {
        self.target != Target::Aws
    }
}

fn stack_inputs(template: &Template, args: StackArgs) -> Result<StackInputs> {
    let artifacts_bucket = args
        .artifacts_bucket
        .map(|b| crate::package::validate_bucket_name(&b).map(|()| b))
        .transpose()?;
    Ok(StackInputs {
        overrides: parse_overrides(template, &args.params)?,
        artifacts_dir: args.artifacts_dir,
        artifacts_bucket,
    })
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
        Err(Error::StackName { name: name.to_owned() })
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

/// Parses and checks `--param Key=Value` overrides against `template`:
/// the key must be one of its parameters and not one counterctl manages, and
/// the value must meet the parameter's type, bounds and allowed values
/// (CloudFormation checks patterns itself, before it changes anything).
pub fn parse_overrides(template: &Template, raw: &[String]) -> Result<BTreeMap<String, String>> {
    let mut overrides = BTreeMap::new();
    for entry in raw {
        let Some((key, value)) = entry.split_once('=') else {
            return Err(Error::ParamSyntax { raw: entry.clone() });
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(Error::ParamSyntax { raw: entry.clone() });
        }
        let Some(parameter) = template.parameters.get(key) else {
            let known: Vec<&str> = stack::params::ALL
                .iter()
                .copied()
                .filter(|p| !MANAGED_PARAMS.contains(p))
                .collect();
            return Err(Error::UnknownParam {
                key: key.to_owned(),
                known: known.join(", "),
            });
        };
        if MANAGED_PARAMS.contains(&key) {
            return Err(Error::ManagedParam { key: key.to_owned() });
        }
        let bad = |reason: String| Error::ParamValue {
            key: key.to_owned(),
            value: value.to_owned(),
            reason,
        };
        if parameter.kind == ParameterType::Number {
            let number: i64 = value
                .trim()
                .parse()
                .map_err(|_| bad("expected an integer".to_owned()))?;
            if let Some(min) = parameter.min_value.filter(|min| number < *min) {
                return Err(bad(format!("must be at least {min}")));
            }
            if let Some(max) = parameter.max_value.filter(|max| number > *max) {
                return Err(bad(format!("must be at most {max}")));
            }
        } else {
            let length = value.chars().count();
            if let Some(min) = parameter.min_length.filter(|min| length < *min as usize) {
                return Err(bad(format!("must be at least {min} characters")));
            }
            if let Some(max) = parameter.max_length.filter(|max| length > *max as usize) {
                return Err(bad(format!("must be at most {max} characters")));
            }
        }
        if !parameter.allowed_values.is_empty() && !parameter.allowed_values.iter().any(|v| v == value) {
            return Err(bad(format!("allowed values: {}", parameter.allowed_values.join(", "))));
        }
        if overrides.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(Error::DuplicateParam { key: key.to_owned() });
        }
    }
    Ok(overrides)
}

/// A template parameter's default as the string CloudFormation stores.
pub fn default_value(template: &Template, key: &str) -> Option<String> {
    template
        .parameters
        .get(key)
        .and_then(|p| p.default.as_ref())
        .map(|literal| match literal {
            Literal::String(s) => s.clone(),
            Literal::Integer(i) => i.to_string(),
            Literal::Boolean(b) => b.to_string(),
        })
}

#[cfg(test)]
mod tests {
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
        argv.extend(args);
        let cli = Cli::try_parse_from(argv).unwrap();
        let vars: BTreeMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Config::from_cli(cli, &|k| vars.get(k).cloned())
    }

    fn overrides(raw: &[&str]) -> Result<BTreeMap<String, String>> {
        let raw: Vec<String> = raw.iter().map(|s| (*s).to_owned()).collect();
        parse_overrides(&stack::template(), &raw)
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
        assert_eq!(load.stop, crate::commands::load::Stop::Duration(Duration::from_secs(5)));
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
    fn localstack_requires_its_auth_token_and_says_why() {
        let err = config(&["--target", "localstack", "status"], &[]).unwrap_err();
        assert!(matches!(err, Error::LocalstackToken));
        assert!(err.to_string().contains("LOCALSTACK_AUTH_TOKEN is not set"), "{err}");
        let ok = config(&["--target", "localstack", "status"], &[("LOCALSTACK_AUTH_TOKEN", "t")]).unwrap();
        assert_eq!(ok.endpoint, Endpoint::Fixed("http://localhost:4566".into()));
        assert_eq!(ok.region.as_deref(), Some("us-east-1"));
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
        }
        assert!(validate_stack_name(&"a".repeat(129)).is_err());
        assert!(validate_stack_name("hybrid-counter-2").is_ok());
    }

    #[test]
    fn a_bad_region_is_rejected() {
        let err = config(&["--region", "US East", "status"], &[]).unwrap_err();
        assert!(matches!(err, Error::Region { .. }), "{err}");
    }

    #[test]
    fn overrides_parse_and_validate_against_the_template() {
        let parsed = overrides(&["StreamBatchSize=50", "LambdaArchitecture=x86_64"]).unwrap();
        assert_eq!(parsed["StreamBatchSize"], "50");
        assert_eq!(parsed["LambdaArchitecture"], "x86_64");
    }

    #[test]
    fn an_unknown_param_key_lists_the_known_ones() {
        let err = overrides(&["BatchSize=5"]).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("unknown parameter \"BatchSize\""), "{message}");
        assert!(message.contains("StreamBatchSize"), "{message}");
        assert!(
            !message.contains("ArtifactsBucket"),
            "managed parameters are not offered: {message}"
        );
        assert_eq!(err.exit_code(), crate::exit::USAGE);
    }

    #[test]
    fn param_syntax_errors_are_clear() {
        for raw in ["StreamBatchSize", "=5"] {
            let err = overrides(&[raw]).unwrap_err();
            assert!(matches!(err, Error::ParamSyntax { .. }), "{raw}: {err}");
            assert!(err.to_string().contains("Key=Value"), "{err}");
        }
    }

    #[test]
    fn managed_and_duplicate_params_are_refused() {
        let err = overrides(&["ApiCodeKey=x.zip"]).unwrap_err();
        assert!(matches!(err, Error::ManagedParam { .. }), "{err}");
        let err = overrides(&["StreamBatchSize=5", "StreamBatchSize=6"]).unwrap_err();
        assert!(matches!(err, Error::DuplicateParam { .. }), "{err}");
    }

    #[test]
    fn param_values_are_checked_against_type_bounds_and_allowed_values() {
        let cases = [
            ("StreamBatchSize=many", "expected an integer"),
            ("StreamBatchSize=0", "must be at least 1"),
            ("StreamBatchSize=10001", "must be at most 10000"),
            ("LambdaArchitecture=sparc", "allowed values: arm64, x86_64"),
            ("NamePrefix=", "must be at least 1 characters"),
        ];
        for (raw, expected) in cases {
            let err = overrides(&[raw]).unwrap_err();
            assert!(matches!(err, Error::ParamValue { .. }), "{raw}: {err}");
            assert!(err.to_string().contains(expected), "{raw}: {err}");
        }
    }

    #[test]
    fn bad_params_fail_the_whole_command_line() {
        let err = config(&["plan", "--param", "Nope=1"], &[]).unwrap_err();
        assert!(matches!(err, Error::UnknownParam { .. }));
        let ok = config(&["deploy", "--param", "StreamBatchSize=7", "--timeout", "60"], &[]).unwrap();
        let CommandConfig::Deploy { inputs, timeout } = ok.command else {
            panic!("deploy expected");
        };
        assert_eq!(inputs.overrides["StreamBatchSize"], "7");
        assert_eq!(timeout, Duration::from_secs(60));
    }

    #[test]
    fn defaults_render_as_cloudformation_strings() {
        let template = stack::template();
        assert_eq!(default_value(&template, "StreamBatchSize").as_deref(), Some("100"));
        assert_eq!(default_value(&template, "LambdaArchitecture").as_deref(), Some("arm64"));
        assert_eq!(default_value(&template, "ArtifactsBucket"), None);
    }
}
