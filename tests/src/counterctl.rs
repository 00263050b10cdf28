//! Drives `counterctl` as a library (the same `ops_cli::execute` the binary
//! calls) against one emulator, for the deploy, pipeline and operations
//! tests. The operator's commands run as an operator role with the
//! operator's least-privilege policy ([`crate::iam::operator_policy`]);
//! `plan`, `deploy` and `destroy` run as the emulator's admin identity (a
//! deployer creates roles and everything else the stack holds, which is not
//! the operator's business), and so does `local run`, which stands in for
//! Lambda's service.
//!
//! Handler zips: the real cargo-lambda ones under `target/lambda` when
//! `make build` has produced all three, otherwise small placeholder zips
//! (a `bootstrap` file each) in a temporary directory, passed with
//! `--artifacts-dir`. The emulator stores function code but never runs it,
//! so the placeholders exercise the same packaging path.

use std::path::{Path, PathBuf};

use aws_sdk_dynamodb::config::Credentials;
use clap::Parser;
use ops_cli::cli::{Cli, Command};
use ops_cli::commands::deploy::DeployReport;
use ops_cli::commands::deploy::destroy::DestroyReport;
use ops_cli::commands::deploy::plan::PlanReport;
use ops_cli::commands::load::LoadReport;
use ops_cli::commands::status::StatusReport;
use ops_cli::progress::Ui;
use ops_cli::{Config, Report};

use crate::Emulator;

/// A stack deployed with its defaults on a private emulator, and its tables'
/// configuration as the functions read it.
pub async fn deployed() -> (Emulator, Counterctl, hybrid_counter::CounterConfig) {
    deployed_over_keys(1, 1).await
}

/// The same with each scope spread over `keys` partition keys
/// (`ScopeKeyShards`; 1 deploys the defaults).
pub async fn deployed_over_keys(keys: u32, spread: u32) -> (Emulator, Counterctl, hybrid_counter::CounterConfig) {
    let emulator = Emulator::start();
    let ctl = Counterctl::new(&emulator);
    let (count, spread_param) = (format!("ScopeKeyShards={keys}"), format!("ResourceKeySpread={spread}"));
    let params: Vec<&str> = [(keys, count.as_str()), (spread, spread_param.as_str())]
        .into_iter()
        .filter(|(n, _)| *n > 1)
        .map(|(_, p)| p)
        .collect();
    let outputs = ctl.deploy(&params).await.outputs;
    let config = hybrid_counter::CounterConfig {
        resources_table: outputs[stack::outputs::RESOURCES_TABLE].clone(),
        counters_table: outputs[stack::outputs::COUNTERS_TABLE].clone(),
        default_limit: Some(100),
        eventual_shards: 1,
        best_effort_shards: 1,
        admission: Default::default(),
        scope_keys: hybrid_counter::scope_keys::ScopeKeys::new(keys)
            .and_then(|k| k.with_spread(spread))
            .expect("a key count and spread"),
    };
    (emulator, ctl, config)
}

/// Whether `status` needs nothing but the local runner, which the test
/// does not run (or stopped): a deploy on fakecloud takes the DLQ1 mapping
/// over for it, so status expects it (one item per mapping).
pub fn healthy_but_for_the_stopped_runner(status: &StatusReport) -> bool {
    let not_running = ops_cli::commands::status::RUNNER_NOT_RUNNING;
    !status.attention.is_empty() && status.attention.iter().all(|a| a.ends_with(not_running))
}

/// Runs counterctl commands against one emulator.
pub struct Counterctl {
    pub endpoint: String,
    pub zips: Zips,
    /// The operator role's credentials, per stack name.
    operators: tokio::sync::Mutex<std::collections::HashMap<String, Credentials>>,
}

impl Counterctl {
    pub fn new(emulator: &Emulator) -> Self {
        Self::at(&emulator.endpoint)
    }

    /// Counterctl against `endpoint` (an emulator, or a fault proxy in front of one).
    pub fn at(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            zips: Zips::find_or_make(),
            operators: Default::default(),
        }
    }

    /// The operator role's credentials for the stack `stack_name`.
    async fn operator(&self, stack_name: &str) -> Credentials {
        let mut operators = self.operators.lock().await;
        if let Some(credentials) = operators.get(stack_name) {
            return credentials.clone();
        }
        let admin = crate::sdk::sdk_config_for(&self.endpoint).await;
        let scope = self.scope(stack_name).await;
        let credentials = crate::iam::operator_credentials(&admin, &scope).await;
        operators.insert(stack_name.to_owned(), credentials.clone());
        credentials
    }

    /// Where the policies of the stack `stack_name` apply (its resources
    /// named by the deployed `NamePrefix`, else by the stack name).
    pub async fn scope(&self, stack_name: &str) -> crate::iam::OperatorScope {
        let admin = crate::sdk::sdk_config_for(&self.endpoint).await;
        let name_prefix = aws_sdk_cloudformation::Client::new(&admin)
            .describe_stacks()
            .stack_name(stack_name)
            .send()
            .await
            .ok()
            .and_then(|out| {
                out.stacks()
                    .first()?
                    .parameters()
                    .iter()
                    .find(|p| p.parameter_key() == Some(stack::params::NAME_PREFIX))?
                    .parameter_value()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| stack_name.to_ascii_lowercase());
        let account = crate::iam::account(&admin).await;
        crate::iam::OperatorScope {
            partition: "aws".to_owned(),
            region: "us-east-1".to_owned(),
            artifacts_bucket: ops_cli::commands::deploy::package::bucket_name(stack_name, &account, "us-east-1")
                .expect("the artifacts bucket's name"),
            account,
            stack_name: stack_name.to_owned(),
            name_prefix,
        }
    }

    /// `counterctl <args>` with the endpoint and region pinned, so the
    /// developer's AWS_* variables do not leak in; an operator's command
    /// runs with the operator role's keys.
    pub async fn run(&self, args: &[&str]) -> Result<Report, ops_cli::Error> {
        self.run_observed(args, None).await
    }

    /// [`Self::run`] with another role's keys than the operator's (e.g. a
    /// CI job's read-only role).
    pub async fn run_as(&self, credentials: &Credentials, args: &[&str]) -> Result<Report, ops_cli::Error> {
        Box::pin(self.execute(args, None, Some(credentials.clone()))).await
    }

    /// [`Self::run`]; a `load` among `args` shows each of its calls to
    /// `observer` (e.g. a [`crate::history::History`]).
    pub async fn run_observed(
        &self,
        args: &[&str],
        observer: Option<std::sync::Arc<dyn ops_cli::commands::load::CallObserver>>,
    ) -> Result<Report, ops_cli::Error> {
        Box::pin(self.execute(args, observer, None)).await
    }

    /// `counterctl <args>`, an operator's command with `credentials`, by
    /// default the operator role's.
    async fn execute(
        &self,
        args: &[&str],
        observer: Option<std::sync::Arc<dyn ops_cli::commands::load::CallObserver>>,
        credentials: Option<Credentials>,
    ) -> Result<Report, ops_cli::Error> {
        let mut argv = vec![
            "counterctl",
            "--endpoint-url",
            &self.endpoint,
            "--region",
            "us-east-1",
            "--profile",
            "",
        ];
        // The harness's emulator is fakecloud unless a test names its target.
        if !args.contains(&"--target") {
            argv.extend(["--target", "local"]);
        }
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("bad test command line {argv:?}: {e}"));
        let deployer = matches!(
            cli.command,
            Command::Plan(_) | Command::Deploy(_) | Command::Destroy(_) | Command::Local(_)
        );
        let keys = if deployer {
            std::collections::BTreeMap::new()
        } else {
            // Boxed, as the command below: the SDK calls' futures are large,
            // and a test polls several commands at once on its stack.
            let credentials = match credentials {
                Some(credentials) => credentials,
                None => Box::pin(self.operator(&cli.global.stack_name)).await,
            };
            std::collections::BTreeMap::from([
                ("AWS_ACCESS_KEY_ID", credentials.access_key_id().to_owned()),
                ("AWS_SECRET_ACCESS_KEY", credentials.secret_access_key().to_owned()),
                (
                    "AWS_SESSION_TOKEN",
                    credentials.session_token().unwrap_or_default().to_owned(),
                ),
            ])
        };
        let mut config = Config::from_cli(cli, &|name| keys.get(name).cloned())?;
        if let ops_cli::config::CommandConfig::Load(options) = &mut config.command {
            options.observer = ops_cli::config::Observer(observer);
        }
        Box::pin(ops_cli::execute(&config, &Ui::quiet())).await
    }

    /// `args` plus the zips' directory, for plan and deploy.
    pub fn with_zips<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut args = args.to_vec();
        args.extend(["--artifacts-dir", self.zips.dir.to_str().expect("utf-8 temp path")]);
        args
    }

    /// `counterctl <argv>` while the in-process runner plays the mappings
    /// deployed at this endpoint as on an emulator of kind `host`
    /// ([`crate::in_process_runner_on`]); the runner stops when the command
    /// has answered, and is returned (e.g. to hand LocalStack's mappings back).
    pub async fn beside_the_runner(
        &self,
        config: &hybrid_counter::CounterConfig,
        host: esm_runner::Host,
        argv: &[&str],
    ) -> (Report, esm_runner::Runner<impl esm_runner::Invoke>) {
        let runner = crate::in_process_runner_on(&self.endpoint, config, host).await;
        let command = async {
            self.run(argv)
                .await
                .unwrap_or_else(|e| panic!("counterctl {argv:?}: {e}"))
        };
        let (report, played) = crate::run_beside(&runner, command).await;
        played.expect("the runner plays the mappings");
        (report, runner)
    }

    pub async fn deploy(&self, params: &[&str]) -> DeployReport {
        let mut args = vec!["deploy"];
        for param in params {
            args.extend(["--param", param]);
        }
        self.deploy_with(&args).await
    }

    /// `counterctl <args>` with the zips, expecting a deploy report (e.g.
    /// `["--stack-name", "hc-dev", "deploy", "--tag", "stage=dev"]`).
    pub async fn deploy_with(&self, args: &[&str]) -> DeployReport {
        match self.run(&self.with_zips(args)).await {
            Ok(Report::Deploy(report)) => report,
            other => panic!("deploy {args:?}: {other:?}"),
        }
    }

    /// `counterctl load` on one scope (`load-0`) by 8 workers, without the
    /// drain and its audit: `operations` creates and deletes
    /// (`delete_ratio`), under a scope limit of `limit`, with ids of the
    /// run's own (`seed`).
    pub async fn load_one_scope(&self, seed: u64, operations: u64, delete_ratio: &str, limit: u64) -> LoadReport {
        let (seed, operations, limit) = (seed.to_string(), operations.to_string(), limit.to_string());
        let args = [
            "load",
            "--scopes",
            "1",
            "--workers",
            "8",
            "--operations",
            &operations,
            "--delete-ratio",
            delete_ratio,
            "--limit",
            &limit,
            "--drain-timeout",
            "0",
            "--seed",
            &seed,
        ];
        match self.run(&args).await {
            Ok(Report::Load(report)) => report,
            other => panic!("load {args:?}: {other:?}"),
        }
    }

    pub async fn plan(&self, params: &[&str]) -> PlanReport {
        let mut args = vec!["plan"];
        for param in params {
            args.extend(["--param", param]);
        }
        match self.run(&self.with_zips(&args)).await {
            Ok(Report::Plan(report)) => report,
            other => panic!("plan {params:?}: {other:?}"),
        }
    }

    pub async fn destroy(&self, args: &[&str]) -> Result<DestroyReport, ops_cli::Error> {
        let mut argv = vec!["destroy"];
        argv.extend_from_slice(args);
        self.run(&argv).await.map(|report| match report {
            Report::Destroy(report) => report,
            other => panic!("destroy: {other:?}"),
        })
    }

    pub async fn status(&self) -> Result<StatusReport, ops_cli::Error> {
        self.run(&["status"]).await.map(|report| match report {
            Report::Status(report) => *report,
            other => panic!("status: {other:?}"),
        })
    }
}

/// The handler zips: real ones, or placeholders in a temp dir that
/// is removed on drop.
pub struct Zips {
    pub dir: PathBuf,
    temporary: bool,
}

impl Zips {
    pub fn find_or_make() -> Self {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
        let built = esm_runner::binaries::target_dir(workspace, None).join("lambda");
        let packages = ops_cli::commands::deploy::package::HANDLERS.map(|(package, _)| package);
        if packages
            .iter()
            .all(|p| ops_cli::commands::deploy::package::zip_path(&built, p).is_file())
        {
            return Self {
                dir: built,
                temporary: false,
            };
        }
        let dir = std::env::temp_dir().join(format!("hck-e2e-zips-{}-{}", std::process::id(), fastrand::u64(..)));
        for package in packages {
            let path = ops_cli::commands::deploy::package::zip_path(&dir, package);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let script = format!("#!/bin/sh\necho placeholder for {package}\n");
            std::fs::write(&path, stored_zip("bootstrap", script.as_bytes())).unwrap();
        }
        Self { dir, temporary: true }
    }
}

impl Zips {
    /// The handlers built for this host by `localstack/host-zips.sh` (what
    /// `make deploy TARGET=localstack` deploys to ministack, which runs
    /// them), in a temporary directory.
    pub fn for_host() -> Self {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
        let dir = std::env::temp_dir().join(format!(
            "hck-e2e-host-zips-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let mut command = std::process::Command::new(workspace.join("localstack/host-zips.sh"));
        // Its cargo build must see the environment the runner's builds see,
        // not this test's package variables (else ring is rebuilt twice).
        without_package_env(&mut command);
        let status = command
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run localstack/host-zips.sh");
        assert!(status.success(), "localstack/host-zips.sh failed ({status})");
        Self { dir, temporary: true }
    }
}

impl Drop for Zips {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Removes what Cargo sets for the package it builds or runs
/// (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, `OUT_DIR`, ...) from a child
/// cargo's environment. Under `cargo test` this process has them, and
/// build scripts that declare them with `rerun-if-env-changed` (ring's do)
/// would otherwise be rerun, and everything above them recompiled, each
/// time a cargo started from a test and one run from a shell take turns:
/// `localstack/host-zips.sh`'s builds go through it.
fn without_package_env(command: &mut std::process::Command) {
    const EXACT: [&str; 8] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "OUT_DIR",
    ];
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if EXACT.contains(&key) || key.starts_with("CARGO_PKG_") || key.starts_with("CARGO_BIN_EXE_") {
            command.env_remove(key);
        }
    }
}

/// A zip archive holding one uncompressed, executable file.
pub fn stored_zip(name: &str, data: &[u8]) -> Vec<u8> {
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for byte in data {
            crc ^= u32::from(*byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    let (crc, size, name_len) = (crc32(data), data.len() as u32, name.len() as u16);
    let mut zip = Vec::new();
    // Local file header, then the data.
    zip.extend(0x0403_4b50u32.to_le_bytes());
    zip.extend([20u16, 0, 0, 0, 0x21].iter().flat_map(|v| v.to_le_bytes()));
    zip.extend([crc, size, size].iter().flat_map(|v| v.to_le_bytes()));
    zip.extend([name_len, 0].iter().flat_map(|v| v.to_le_bytes()));
    zip.extend(name.as_bytes());
    zip.extend(data);
    // Central directory entry (made by Unix, mode 0755).
    let central = zip.len() as u32;
    zip.extend(0x0201_4b50u32.to_le_bytes());
    zip.extend([0x031Eu16, 20, 0, 0, 0, 0x21].iter().flat_map(|v| v.to_le_bytes()));
    zip.extend([crc, size, size].iter().flat_map(|v| v.to_le_bytes()));
    zip.extend([name_len, 0, 0, 0, 0].iter().flat_map(|v| v.to_le_bytes()));
    zip.extend((0o100_755u32 << 16).to_le_bytes());
    zip.extend(0u32.to_le_bytes());
    zip.extend(name.as_bytes());
    let central_size = zip.len() as u32 - central;
    // End of central directory.
    zip.extend(0x0605_4b50u32.to_le_bytes());
    zip.extend([0u16, 0, 1, 1].iter().flat_map(|v| v.to_le_bytes()));
    zip.extend([central_size, central].iter().flat_map(|v| v.to_le_bytes()));
    zip.extend(0u16.to_le_bytes());
    zip
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under `cargo test` this process carries Cargo's package variables
    /// (ring's build script reruns when they differ): a child cargo gets
    /// none of them, and keeps everything else.
    #[test]
    fn a_child_cargo_gets_none_of_the_test_packages_variables() {
        let inherited: Vec<String> = std::env::vars()
            .map(|(key, _)| key)
            .filter(|key| key == "CARGO_MANIFEST_DIR" || key.starts_with("CARGO_PKG_"))
            .collect();
        assert!(
            inherited.iter().any(|key| key == "CARGO_MANIFEST_DIR") && inherited.len() > 1,
            "cargo test sets the package's variables: {inherited:?}"
        );
        let mut command = std::process::Command::new("cargo");
        without_package_env(&mut command);
        let removed: Vec<String> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(key, _)| key.to_string_lossy().into_owned())
            .collect();
        for key in &inherited {
            assert!(removed.contains(key), "{key} is passed on to the child cargo");
        }
        assert!(
            !removed.iter().any(|key| key == "PATH" || key == "CARGO_HOME"),
            "only the package's variables go: {removed:?}"
        );
    }
}
