//! Invoking the real handler binaries through `cargo lambda watch` (cargo-lambda
//! 1.9.2), which emulates the Lambda control plane and runs each binary
//! against its own Lambda runtime API, so local runs execute the same code
//! as AWS.
//!
//! One watch process per deployed function, each with exactly that
//! function's environment (from its deployed configuration) plus
//! `AWS_ENDPOINT_URL` pointing at the emulator and the temporary
//! credentials of the function's own execution role ([`crate::role`]), so
//! under IAM enforcement a function can do what its role grants and
//! nothing else. The
//! flags used, checked against `cargo lambda watch --help` of 1.9.2:
//! `--invoke-address`/`--invoke-port` (where invoke requests are served),
//! `--env-var KEY=VALUE` (repeatable; values are split at commas, so a value
//! holding one is passed through the process environment instead, which the
//! function inherits), `--ignore-changes` (no reload while the runner uses
//! it), `--bin` (this function's binary only, which makes it the default
//! function, answering function URL requests at `/`), `--disable-cors`,
//! `--manifest-path`, `--release`. The invoke route is
//! `POST /2015-03-31/functions/{function_name}/invocations`, where the
//! function name is the binary's name
//! (`crates/cargo-lambda-watch/src/trigger_router.rs` at tag v1.9.2). A
//! function error comes back as HTTP 500 with the runtime's error document
//! (`runtime/functions_router.rs`, `next_invocation_error`); the real Lambda
//! API signals it with `X-Amz-Function-Error`, so both are read.
//!
//! A redeploy is followed as Lambda follows it, on the next invocation:
//! before invoking a function (and, for a served function URL, whose
//! requests do not pass through the runner, on every poll of the runner)
//! its deployed configuration is read back (`GetFunctionConfiguration`,
//! at most once per [`CONFIGURATION_CHECK_INTERVAL`] per function) and
//! compared with the one its process was started with (environment and
//! `CodeSha256`). When it changed, the process is stopped and started again
//! with the new environment (and the handler rebuilt from the workspace);
//! a served function keeps its port.
//!
//! Deployed names map to binaries by the handler packages under
//! `handlers/`: `<prefix>-stream-counter` runs the `stream-counter` binary.
//! The binaries are built with `cargo build` before the watch starts, so a
//! compile error is reported at once and the first invocation does not wait
//! for a compile.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::{Error, sdk_message};
use crate::invoke::{FunctionTarget, Invocation, Invoke};
use crate::role::FunctionRoles;

/// How often, at most, a function's deployed configuration is read back
/// to see whether a redeploy changed it.
pub const CONFIGURATION_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What a function's process was started with, from its deployed
/// configuration: a difference means a redeploy changed the function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployedFunction {
    pub environment: BTreeMap<String, String>,
    pub code_sha256: Option<String>,
}

impl DeployedFunction {
    fn of(
        configuration: &aws_sdk_lambda::operation::get_function_configuration::GetFunctionConfigurationOutput,
    ) -> Self {
        Self {
            environment: crate::discover::environment_variables(configuration.environment()),
            code_sha256: configuration.code_sha256().map(str::to_owned),
        }
    }

    /// What changed from `self` to `now`, for the log.
    fn changes(&self, now: &Self) -> String {
        let keys: std::collections::BTreeSet<&String> = self.environment.keys().chain(now.environment.keys()).collect();
        let mut changed: Vec<String> = keys
            .into_iter()
            .filter(|key| self.environment.get(*key) != now.environment.get(*key))
            .map(|key| format!("${key}"))
            .collect();
        if self.code_sha256 != now.code_sha256 {
            changed.push("code".to_owned());
        }
        changed.join(", ")
    }
}

/// How to reach the handlers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchConfig {
    /// The workspace root: `Cargo.toml`, `handlers/`, `.venv/`.
    pub workspace: PathBuf,
    /// The `cargo-lambda` executable; default `.venv/bin/cargo-lambda` in the
    /// workspace, else `cargo-lambda` on `PATH`.
    pub cargo_lambda: Option<PathBuf>,
    /// Invoke API address (`127.0.0.1:9000`) of a `cargo lambda watch` the
    /// user started; then no process is started and the user is
    /// responsible for its environment.
    pub attach: Option<String>,
    /// Build and run the handlers with `--release`.
    pub release: bool,
    /// How long a started watch process may take to accept connections.
    pub startup_timeout: Duration,
    /// How long one invocation may take before it counts as a function
    /// error (timed out), like a Lambda timeout.
    pub invoke_timeout: Duration,
}

impl WatchConfig {
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            cargo_lambda: None,
            attach: None,
            release: false,
            startup_timeout: Duration::from_secs(60),
            invoke_timeout: Duration::from_secs(300),
        }
    }
}

/// Handler packages under `<workspace>/handlers`: package name → binary name
/// (the package's default binary has the package's name).
pub fn handler_binaries(workspace: &Path) -> Result<BTreeMap<String, String>, Error> {
    let mut binaries = BTreeMap::new();
    let dir = workspace.join("handlers");
    for entry in std::fs::read_dir(&dir)? {
        let manifest = entry?.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        if let Some(name) = package_name(&text) {
            binaries.insert(name.clone(), name);
        }
    }
    Ok(binaries)
}

/// The `name` of the `[package]` table of a Cargo manifest.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some(value) = line.strip_prefix("name").map(str::trim_start)
            && let Some(value) = value.strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// The binary a deployed function runs: the handler package whose name the
/// function name equals or ends with (`-<package>`), the longest such.
pub fn binary_for(function_name: &str, binaries: &BTreeMap<String, String>) -> Option<String> {
    binaries
        .iter()
        .filter(|(package, _)| function_name == *package || function_name.ends_with(&format!("-{package}")))
        .max_by_key(|(package, _)| package.len())
        .map(|(_, binary)| binary.clone())
}

/// A started `cargo lambda watch`, stopped (with its whole process group:
/// cargo and the handler binary) when dropped.
struct WatchProcess {
    child: Child,
    log: PathBuf,
}

impl Drop for WatchProcess {
    fn drop(&mut self) {
        let Some(pid) = self.child.id() else {
            return;
        };
        // The watch runs in its own process group (pgid = its pid).
        let group = format!("-{pid}");
        let signal = |name: &str| {
            let _ = std::process::Command::new("kill")
                .args([name, "--", &group])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        signal("-TERM");
        for _ in 0..60 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Whatever of the group is still there (cargo, the handler).
        signal("-KILL");
        let _ = self.child.start_kill();
    }
}

struct Target {
    binary: String,
    address: String,
    /// A served function URL, which must come back on the same port.
    served: bool,
    /// What the process was started with; `None` when attached to the
    /// user's watch (not ours to restart).
    deployed: Option<DeployedFunction>,
    process: std::sync::Mutex<Option<WatchProcess>>,
}

impl Target {
    fn port(&self) -> u16 {
        self.address
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or(0)
    }

    /// Stops the process (its whole group) now, freeing its port.
    fn stop(&self) {
        drop(self.process.lock().expect("process lock").take());
    }
}

/// The `cargo lambda watch` invoker.
pub struct CargoLambdaWatch {
    config: WatchConfig,
    /// Variables every function gets: the emulator endpoint and region.
    base_env: BTreeMap<String, String>,
    endpoint: String,
    region: String,
    /// Where each started function's credentials come from, connected on
    /// the first start.
    roles: tokio::sync::OnceCell<FunctionRoles>,
    binaries: BTreeMap<String, String>,
    targets: tokio::sync::Mutex<BTreeMap<String, Arc<Target>>>,
    /// The emulator's Lambda API, for the deployed configurations.
    lambda: tokio::sync::OnceCell<aws_sdk_lambda::Client>,
    /// When each function's configuration was last read back.
    checked: std::sync::Mutex<BTreeMap<String, Instant>>,
}

impl CargoLambdaWatch {
    /// Reads the handler packages; starts nothing until [`Invoke::prepare`].
    pub fn new(config: WatchConfig, endpoint: &str, region: &str) -> Result<Self, Error> {
        let binaries = handler_binaries(&config.workspace)?;
        let base_env = BTreeMap::from([
            ("AWS_ENDPOINT_URL".to_owned(), endpoint.to_owned()),
            ("AWS_REGION".to_owned(), region.to_owned()),
            ("AWS_DEFAULT_REGION".to_owned(), region.to_owned()),
        ]);
        Ok(Self {
            config,
            base_env,
            endpoint: endpoint.to_owned(),
            region: region.to_owned(),
            roles: tokio::sync::OnceCell::new(),
            binaries,
            targets: tokio::sync::Mutex::default(),
            lambda: tokio::sync::OnceCell::new(),
            checked: std::sync::Mutex::default(),
        })
    }

    /// The function's deployed environment and code (`GetFunctionConfiguration`).
    async fn deployed(&self, function_name: &str) -> Result<DeployedFunction, Error> {
        let lambda = self
            .lambda
            .get_or_init(|| async {
                aws_sdk_lambda::Client::new(&crate::role::emulator_sdk_config(&self.endpoint, &self.region).await)
            })
            .await;
        let configuration = lambda
            .get_function_configuration()
            .function_name(function_name)
            .send()
            .await
            .map_err(|e| Error::emulator("Lambda", "GetFunctionConfiguration")(sdk_message(e)))?;
        self.checked
            .lock()
            .expect("checked lock")
            .insert(function_name.to_owned(), Instant::now());
        Ok(DeployedFunction::of(&configuration))
    }

    /// Whether `function_name`'s configuration is due to be read back.
    fn check_due(&self, function_name: &str) -> bool {
        self.checked
            .lock()
            .expect("checked lock")
            .get(function_name)
            .is_none_or(|at| at.elapsed() >= CONFIGURATION_CHECK_INTERVAL)
    }

    /// The target that runs `function_name` as deployed now: the started
    /// one, or, when a redeploy changed the function's configuration since
    /// it started, a new one (a served one on the same port). A failed read
    /// of the configuration keeps the running process.
    async fn current(&self, function_name: &str) -> Result<Arc<Target>, Error> {
        let running = self
            .targets
            .lock()
            .await
            .get(function_name)
            .cloned()
            .ok_or_else(|| Error::Invoke {
                function: function_name.to_owned(),
                message: "no cargo lambda watch was started for it".to_owned(),
            })?;
        let Some(started_with) = &running.deployed else {
            return Ok(running);
        };
        if !self.check_due(function_name) {
            return Ok(running);
        }
        let deployed = match self.deployed(function_name).await {
            Ok(deployed) => deployed,
            Err(err) => {
                warn!(function = %function_name, error = %err, "could not read the deployed configuration; keeping the running process");
                return Ok(running);
            }
        };
        if &deployed == started_with {
            return Ok(running);
        }
        let mut targets = self.targets.lock().await;
        match targets.get(function_name) {
            // Another caller restarted it meanwhile.
            Some(target) if !Arc::ptr_eq(target, &running) => return Ok(target.clone()),
            _ => {}
        }
        info!(
            function = %function_name,
            changed = %started_with.changes(&deployed),
            "the deployed configuration changed; restarting the function"
        );
        running.stop();
        let port = if running.served { running.port() } else { 0 };
        self.build(std::slice::from_ref(&running.binary)).await?;
        let target = self
            .start(function_name, &running.binary, deployed, port, running.served)
            .await?;
        if target.served {
            self.warm_up(function_name, &target).await?;
        }
        let target = Arc::new(target);
        targets.insert(function_name.to_owned(), target.clone());
        Ok(target)
    }

    /// The handler binary a deployed function runs.
    fn binary(&self, function_name: &str) -> Result<String, Error> {
        binary_for(function_name, &self.binaries).ok_or_else(|| Error::UnknownFunction {
            function: function_name.to_owned(),
            handlers_dir: self.config.workspace.join("handlers"),
            known: self.binaries.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// The variables carrying the credentials of `function_name`'s own role.
    async fn role_env(&self, function_name: &str) -> Result<[(String, String); 3], Error> {
        let roles = self
            .roles
            .get_or_init(|| async {
                FunctionRoles::new(&crate::role::emulator_sdk_config(&self.endpoint, &self.region).await)
            })
            .await;
        Ok(crate::role::environment(&roles.credentials(function_name).await?))
    }

    fn cargo_lambda(&self) -> Result<PathBuf, Error> {
        if let Some(path) = &self.config.cargo_lambda {
            return Ok(path.clone());
        }
        let venv = self.config.workspace.join(".venv/bin/cargo-lambda");
        if venv.is_file() {
            return Ok(venv);
        }
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("cargo-lambda"))
                .find(|p| p.is_file())
        });
        on_path.ok_or_else(|| Error::CargoLambdaMissing {
            looked_in: format!("{} and PATH", venv.display()),
        })
    }

    fn log_dir(&self) -> Result<PathBuf, Error> {
        let dir = self.config.workspace.join(".run/esm-runner");
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// `cargo build` of the binaries, so the watch only runs them.
    async fn build(&self, binaries: &[String]) -> Result<(), Error> {
        let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        command
            .arg("build")
            .arg("--manifest-path")
            .arg(self.config.workspace.join("Cargo.toml"));
        if self.config.release {
            command.arg("--release");
        }
        for binary in binaries {
            command.args(["--bin", binary]);
        }
        without_package_env(command.as_std_mut());
        let rendered = format!("{command:?}");
        info!(command = %rendered, "building the handler binaries");
        let out = command.stdin(Stdio::null()).output().await.map_err(|e| Error::Build {
            command: rendered.clone(),
            message: e.to_string(),
        })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(Error::Build {
                command: rendered,
                message: tail(&String::from_utf8_lossy(&out.stderr), 40),
            })
        }
    }

    /// Starts a watch of `binary` alone (so it is also the default
    /// function, served at `/`) on loopback `port`, 0 for a free one, with
    /// the function's `deployed` environment.
    async fn start(
        &self,
        function_name: &str,
        binary: &str,
        deployed: DeployedFunction,
        port: u16,
        served: bool,
    ) -> Result<Target, Error> {
        // A taken port would make the readiness check below talk to
        // whoever holds it: refuse it here, with the port in the message.
        let port = TcpListener::bind(("127.0.0.1", port))
            .and_then(|listener| listener.local_addr())
            .map_err(|e| Error::PortUnavailable {
                port,
                message: e.to_string(),
            })?
            .port();
        let address = format!("127.0.0.1:{port}");
        let log = self.log_dir()?.join(format!("watch-{function_name}-{port}.log"));
        let log_file = std::fs::File::create(&log)?;
        let mut command = Command::new(self.cargo_lambda()?);
        command
            .args(["lambda", "watch", "--ignore-changes", "--invoke-address", "127.0.0.1"])
            .args(["--invoke-port", &port.to_string()])
            .args(["--bin", binary])
            // A function URL answers CORS only as configured; the kit's has none.
            .arg("--disable-cors")
            .arg("--manifest-path")
            .arg(self.config.workspace.join("Cargo.toml"));
        if self.config.release {
            command.arg("--release");
        }
        let credentials = self.role_env(function_name).await?;
        let credentials = credentials.iter().map(|(k, v)| (k, v));
        for (key, value) in deployed
            .environment
            .iter()
            .chain(self.base_env.iter())
            .chain(credentials)
        {
            if value.contains(',') {
                command.env(key, value);
            } else {
                command.arg("--env-var").arg(format!("{key}={value}"));
            }
        }
        without_package_env(command.as_std_mut());
        command
            .current_dir(&self.config.workspace)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .process_group(0)
            .kill_on_drop(true);
        info!(function = %function_name, %binary, %address, log = %log.display(), "starting cargo lambda watch");
        let child = command.spawn()?;
        let mut process = WatchProcess { child, log };
        let deadline = tokio::time::Instant::now() + self.config.startup_timeout;
        loop {
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                break;
            }
            let exited = matches!(process.child.try_wait(), Ok(Some(_)));
            if exited || tokio::time::Instant::now() >= deadline {
                return Err(Error::WatchNotReady {
                    address,
                    timeout: self.config.startup_timeout,
                    tail: format!(
                        ":\n{}",
                        tail(&std::fs::read_to_string(&process.log).unwrap_or_default(), 20)
                    ),
                    log: std::mem::take(&mut process.log),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Target {
            binary: binary.to_owned(),
            address,
            served,
            deployed: Some(deployed),
            process: std::sync::Mutex::new(Some(process)),
        })
    }

    async fn post(&self, target: &Target, payload: &Value) -> Result<(u16, Option<String>, Bytes), String> {
        let request = hyper::Request::post(format!("/2015-03-31/functions/{}/invocations", target.binary))
            .header(HOST, &target.address)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(payload.to_string())))
            .map_err(|e| e.to_string())?;
        let response = send(&target.address, request).await?;
        let status = response.status().as_u16();
        let function_error = response
            .headers()
            .get("X-Amz-Function-Error")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok((status, function_error, response.into_body()))
    }

    /// Sends `GET /` to a served function URL until it answers (the first
    /// request starts the binary), so the URL answers at once once
    /// reported. Any HTTP answer will do: `/` is no route of the API.
    async fn warm_up(&self, function_name: &str, target: &Target) -> Result<(), Error> {
        let request = || {
            hyper::Request::get("/")
                .header(HOST, &target.address)
                .body(Full::new(Bytes::new()))
                .map_err(|e| e.to_string())
        };
        let response = tokio::time::timeout(self.config.startup_timeout, async {
            send(&target.address, request()?).await
        })
        .await
        .map_err(|_| format!("no answer within {:?}", self.config.startup_timeout))
        .and_then(|answer| answer);
        match response {
            Ok(response) => {
                info!(function = %function_name, status = response.status().as_u16(), "function URL answers");
                Ok(())
            }
            Err(message) => Err(Error::Invoke {
                function: function_name.to_owned(),
                message: format!(
                    "its function URL at {} did not answer `GET /`: {message}",
                    target.address
                ),
            }),
        }
    }
}

/// One HTTP/1.1 request to `address`; the whole response body read.
async fn send(address: &str, request: hyper::Request<Full<Bytes>>) -> Result<hyper::Response<Bytes>, String> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(hyper::Response::from_parts(parts, body))
}

/// Removes what Cargo sets for the package it builds or runs
/// (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, `OUT_DIR`, ...) from a child
/// cargo's environment. Under `cargo test` this process has them, and
/// build scripts that declare them with `rerun-if-env-changed` (ring's do)
/// would otherwise be rerun, and everything above them recompiled, each
/// time the runner and a cargo run from a shell take turns. Every cargo (or
/// script that runs cargo) started from a test goes through it: the e2e
/// harness's `localstack/host-zips.sh` too, whose build left ring built
/// for a `CARGO_MANIFEST_DIR` the runner's next build did not have, so a
/// fresh clone's timed e2e tests waited on a rebuild of ring and what
/// stands on it.
pub fn without_package_env(command: &mut std::process::Command) {
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

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Invoke for CargoLambdaWatch {
    async fn prepare(&self, functions: &[FunctionTarget]) -> Result<(), Error> {
        let mut targets = self.targets.lock().await;
        let mut new: BTreeMap<String, String> = BTreeMap::new();
        for function in functions {
            if targets.contains_key(&function.function_name) || new.contains_key(&function.function_name) {
                continue;
            }
            new.insert(function.function_name.clone(), self.binary(&function.function_name)?);
        }
        if new.is_empty() {
            return Ok(());
        }
        if let Some(address) = &self.config.attach {
            for (function, binary) in new {
                let target = Target {
                    binary,
                    address: address.clone(),
                    served: false,
                    deployed: None,
                    process: std::sync::Mutex::default(),
                };
                targets.insert(function, Arc::new(target));
            }
            return Ok(());
        }
        let mut binaries: Vec<String> = new.values().cloned().collect();
        binaries.sort();
        binaries.dedup();
        self.build(&binaries).await?;
        // The environment as deployed now (the discovery's may be a poll
        // old), with the code it goes with.
        for (function, binary) in new {
            let deployed = self.deployed(&function).await?;
            let target = self.start(&function, &binary, deployed, 0, false).await?;
            targets.insert(function, Arc::new(target));
        }
        Ok(())
    }

    /// Serves the function with its environment as deployed now (read
    /// with its code, to follow later redeploys), not `_environment`.
    async fn serve_url(
        &self,
        function_name: &str,
        _environment: &BTreeMap<String, String>,
        port: u16,
    ) -> Result<Option<String>, Error> {
        let binary = self.binary(function_name)?;
        if let Some(address) = &self.config.attach {
            // The user's watch serves every binary of the workspace: its
            // function URL route names the binary.
            return Ok(Some(format!("http://{address}/lambda-url/{binary}/")));
        }
        let mut targets = self.targets.lock().await;
        if let Some(target) = targets.get(function_name) {
            return Ok(Some(format!("http://{}/", target.address)));
        }
        self.build(std::slice::from_ref(&binary)).await?;
        let deployed = self.deployed(function_name).await?;
        let target = self.start(function_name, &binary, deployed, port, true).await?;
        self.warm_up(function_name, &target).await?;
        let url = format!("http://{}/", target.address);
        targets.insert(function_name.to_owned(), Arc::new(target));
        Ok(Some(url))
    }

    async fn follow_redeploys(&self) {
        let served: Vec<String> = {
            let targets = self.targets.lock().await;
            targets
                .iter()
                .filter(|(_, target)| target.served)
                .map(|(name, _)| name.clone())
                .collect()
        };
        for function_name in served {
            if let Err(err) = self.current(&function_name).await {
                warn!(function = %function_name, error = %err, "could not restart the served function after a redeploy");
            }
        }
    }

    async fn invoke(&self, function_name: &str, payload: Value) -> Result<Invocation, Error> {
        let target = self.current(function_name).await?;
        let (status, function_error, body) =
            match tokio::time::timeout(self.config.invoke_timeout, self.post(&target, &payload)).await {
                Err(_) => {
                    warn!(function = %function_name, timeout = ?self.config.invoke_timeout, "invocation timed out");
                    return Ok(Invocation::error(
                        "Sandbox.Timedout",
                        &format!("no response within {:?}", self.config.invoke_timeout),
                    ));
                }
                Ok(Err(message)) => {
                    return Err(Error::Invoke {
                        function: function_name.to_owned(),
                        message: format!("{message} (invoke API at {})", target.address),
                    });
                }
                Ok(Ok(response)) => response,
            };
        let document: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
        };
        if function_error.is_some() || !(200..300).contains(&status) {
            let error_type = function_error
                .or_else(|| document.get("errorType").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| format!("HTTP {status}"));
            return Ok(Invocation::FunctionError {
                error_type,
                body: document,
            });
        }
        Ok(Invocation::Response(document))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::Mapping;

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

    #[test]
    fn deployed_names_map_to_the_longest_matching_handler_package() {
        let binaries: BTreeMap<String, String> = ["api", "stream-counter", "dlq-reprocessor", "counter"]
            .iter()
            .map(|n| ((*n).to_owned(), (*n).to_owned()))
            .collect();
        assert_eq!(
            binary_for("hybrid-counter-stream-counter", &binaries).as_deref(),
            Some("stream-counter")
        );
        assert_eq!(
            binary_for("hck-dlq-reprocessor", &binaries).as_deref(),
            Some("dlq-reprocessor")
        );
        assert_eq!(binary_for("api", &binaries).as_deref(), Some("api"));
        assert_eq!(binary_for("hck-unknown", &binaries), None);
        assert_eq!(binary_for("hckapi", &binaries), None, "a suffix must follow a hyphen");
    }

    #[test]
    fn the_handler_packages_of_this_workspace_are_found() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let binaries = handler_binaries(&workspace).unwrap();
        for expected in ["stream-counter", "dlq-reprocessor"] {
            assert!(binaries.contains_key(expected), "{binaries:?}");
        }
    }

    /// Serves one canned HTTP response per connection; returns its address.
    async fn stub_invoke_api(response: String) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Headers, then the JSON body (which ends with `}`).
                while let Ok(n) = socket.read(&mut buf).await {
                    request.extend_from_slice(&buf[..n]);
                    if n == 0 || request.ends_with(b"}") {
                        break;
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let reply = if text.starts_with("POST /2015-03-31/functions/stream-counter/invocations ") {
                    response.clone()
                } else {
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
                };
                let _ = socket.write_all(reply.as_bytes()).await;
            }
        });
        address
    }

    async fn invoke_through(response: String) -> Invocation {
        let mut config = WatchConfig::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
        config.attach = Some(stub_invoke_api(response).await);
        let watch = CargoLambdaWatch::new(config, "http://127.0.0.1:1", "us-east-1").unwrap();
        let mapping = Mapping {
            uuid: "u".into(),
            function_arn: "arn:aws:lambda:us-east-1:123456789012:function:hck-stream-counter".into(),
            function_name: "hck-stream-counter".into(),
            source_arn: "arn:stream".into(),
            batch_size: 1,
            filters: vec![],
            report_batch_item_failures: true,
            environment: BTreeMap::new(),
            emulator_enabled: true,
            source: crate::Source::Queue(crate::discover::QueueSettings {
                queue_url: "q".into(),
                visibility_timeout: Duration::from_secs(1),
                redrive: None,
            }),
        };
        watch.prepare(&[mapping.target()]).await.unwrap();
        watch
            .invoke("hck-stream-counter", serde_json::json!({"Records": []}))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_response_is_posted_to_the_binarys_invoke_route_and_parsed() {
        let body = r#"{"batchItemFailures":[]}"#;
        let response = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
        assert_eq!(
            invoke_through(response).await,
            Invocation::Response(serde_json::json!({"batchItemFailures": []}))
        );
    }

    #[tokio::test]
    async fn a_500_from_cargo_lambda_watch_is_a_function_error() {
        let body = r#"{"errorType":"Handler","errorMessage":"boom"}"#;
        let response = format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        match invoke_through(response).await {
            Invocation::FunctionError { error_type, body } => {
                assert_eq!(error_type, "Handler");
                assert_eq!(body["errorMessage"], "boom");
            }
            other => panic!("expected a function error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn the_lambda_function_error_header_marks_a_function_error() {
        let response = "HTTP/1.1 200 OK\r\nx-amz-function-error: Unhandled\r\ncontent-length: 2\r\n\r\n{}".to_owned();
        assert!(matches!(
            invoke_through(response).await,
            Invocation::FunctionError { error_type, .. } if error_type == "Unhandled"
        ));
    }

    #[test]
    fn a_redeploy_is_an_environment_or_code_difference_and_the_log_names_it() {
        let deployed = |mode: &str, sha: &str| DeployedFunction {
            environment: BTreeMap::from([
                ("ADMISSION_MODE".to_owned(), mode.to_owned()),
                ("TABLE".to_owned(), "t".to_owned()),
            ]),
            code_sha256: Some(sha.to_owned()),
        };
        let started = deployed("best-effort", "a");
        assert_eq!(started, deployed("best-effort", "a"), "the same deploy: no restart");
        assert_eq!(started.changes(&deployed("strict", "a")), "$ADMISSION_MODE");
        assert_eq!(started.changes(&deployed("best-effort", "b")), "code");
        let mut added = deployed("strict", "b");
        added.environment.insert("BE_SHARDS".to_owned(), "4".to_owned());
        assert_eq!(started.changes(&added), "$ADMISSION_MODE, $BE_SHARDS, code");
    }

    #[test]
    fn package_names_are_read_from_the_package_table_only() {
        let manifest =
            "[workspace]\nname = \"no\"\n[package]\nversion = \"1\"\nname = \"yes\"\n[dependencies]\nname = \"x\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("yes"));
    }
}
