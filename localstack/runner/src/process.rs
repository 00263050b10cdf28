//! Invoking the real handler binaries that the build step produced
//! (`make deploy`'s `make host-build`, or `make test`'s `cargo build --bins`): one process per
//! deployed function, started from `<target dir>/debug/<binary>`
//! ([`crate::binaries`]) with the Lambda runtime's variables and
//! `AWS_LAMBDA_RUNTIME_API` pointing at a runtime API the runner serves
//! for it ([`crate::runtime_api`]), so local runs execute the same code as
//! AWS and the runner never starts a compiler: no `cargo`, no `cargo
//! lambda watch` (whose start alone runs `cargo metadata`, and which builds
//! the binary itself). A binary that is missing is an error that says how
//! to build it.
//!
//! Each process gets exactly its function's environment (from its deployed
//! configuration, nothing inherited from the runner's), plus
//! `AWS_ENDPOINT_URL` pointing at the emulator and the temporary
//! credentials of the function's own execution role ([`crate::role`]), so
//! under IAM enforcement a function can do what its role grants and
//! nothing else. One process handles one event at a time, as one execution
//! environment does. A process that exits during an invocation is a
//! function error (`Runtime.ExitError`) and one that does not answer within
//! the function's deployed `Timeout` ([`DeployedFunction::timeout`], which
//! also sets `Lambda-Runtime-Deadline-Ms`) is killed and the invocation is
//! a function error (`Sandbox.Timedout`), so the mapping's retry policy
//! applies; the next invocation starts the function again. Each process logs to
//! `.run/esm-runner/<function>.log`.
//!
//! A function URL is served on loopback by the runner too: each HTTP request
//! becomes the function URL event ([`crate::url_event`]) and is invoked
//! like any other event, so a redeploy is followed on the next request and
//! the port never closes.
//!
//! A redeploy is followed as Lambda follows it, on the next invocation:
//! before invoking a function its deployed configuration is read back
//! (`GetFunctionConfiguration`, at most once per
//! [`CONFIGURATION_CHECK_INTERVAL`] per function) and compared with the one
//! its process was started with (environment, memory, timeout and
//! `CodeSha256`).
//! When it changed, the process is replaced by one started with the new
//! configuration (and the binary as the build left it).
//!
//! `--attach` sends the invocations to the invoke API of a `cargo lambda
//! watch` the user started instead
//! (`POST /2015-03-31/functions/{binary}/invocations`, cargo-lambda 1.9.2,
//! `crates/cargo-lambda-watch/src/trigger_router.rs`): a function error
//! comes back as HTTP 500 with the error document there, and with
//! `X-Amz-Function-Error` from the real Lambda API, so both are read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::binaries::{binary_for, binary_path, handler_binaries, target_dir};
pub use crate::deployed::DeployedFunction;
use crate::error::{Error, sdk_message};
use crate::invoke::{Invocation, Invoke};
use crate::role::FunctionRoles;
use crate::runtime_api::{Outcome, RuntimeApi, serve_http1};
use crate::url_event::{self, UrlRequest};

/// How often, at most, a function's deployed configuration is read back
/// to see whether a redeploy changed it.
pub const CONFIGURATION_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How to reach the handlers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessConfig {
    /// The workspace root: `Cargo.toml`, `handlers/`, `.run/`.
    pub workspace: PathBuf,
    /// Cargo's target directory holding the built binaries; default
    /// `$CARGO_TARGET_DIR`, else `<workspace>/target`.
    pub target_dir: Option<PathBuf>,
    /// Invoke API address (`127.0.0.1:9000`) of a `cargo lambda watch` the
    /// user started; then no process is started and the user is
    /// responsible for its environment.
    pub attach: Option<String>,
    /// Run the release binaries (`<target dir>/release`).
    pub release: bool,
    /// How long a started process may take to ask for its first event.
    pub startup_timeout: Duration,
    /// How long one invocation may take before it counts as a function
    /// error (timed out), like a Lambda timeout, when the function's
    /// deployed configuration has no `Timeout` (which applies otherwise,
    /// [`DeployedFunction::timeout`]) and with `attach`.
    pub invoke_timeout: Duration,
}

impl ProcessConfig {
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            target_dir: None,
            attach: None,
            release: false,
            startup_timeout: Duration::from_secs(30),
            invoke_timeout: Duration::from_secs(300),
        }
    }

    /// The prebuilt binary the runner starts for `binary`.
    pub fn binary_path(&self, binary: &str) -> PathBuf {
        binary_path(
            &target_dir(&self.workspace, self.target_dir.as_deref()),
            self.release,
            binary,
        )
    }
}

/// The command that starts a handler: the prebuilt `binary` itself, with
/// `environment` only (nothing inherited), in the binary's directory (the
/// task root). Never a cargo: the build step is over.
pub fn handler_command(binary: &Path, environment: &BTreeMap<String, String>) -> std::process::Command {
    let mut command = std::process::Command::new(binary);
    command.env_clear().envs(environment);
    if let Some(dir) = binary.parent() {
        command.current_dir(dir);
    }
    command
}

/// A started handler process and the runtime API it polls; the process
/// is killed when this is dropped.
struct HandlerProcess {
    child: Child,
    runtime: RuntimeApi,
    log: PathBuf,
}

struct Target {
    binary: String,
    /// A served function URL: restarted after a redeploy without waiting
    /// for a request.
    served: AtomicBool,
    /// What the process is started with; `None` when attached to the
    /// user's watch (not ours to start).
    deployed: Option<DeployedFunction>,
    /// The running process, locked for the length of an invocation: one
    /// event at a time. `None` until started, and after a crash or a timeout.
    process: tokio::sync::Mutex<Option<HandlerProcess>>,
}

/// The invoker that runs the prebuilt handler binaries.
pub struct HandlerProcesses {
    inner: Arc<Inner>,
    /// The function URL servers, stopped with the invoker.
    servers: std::sync::Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Drop for HandlerProcesses {
    fn drop(&mut self) {
        for server in self.servers.lock().expect("servers lock").drain(..) {
            server.abort();
        }
    }
}

struct Inner {
    config: ProcessConfig,
    endpoint: String,
    region: String,
    binaries: BTreeMap<String, String>,
    targets: tokio::sync::Mutex<BTreeMap<String, Arc<Target>>>,
    /// The emulator's Lambda API, for the deployed configurations, and
    /// where each started function's credentials come from; connected on
    /// first use.
    clients: tokio::sync::OnceCell<(aws_sdk_lambda::Client, FunctionRoles)>,
    /// When each function's configuration was last read back.
    checked: std::sync::Mutex<BTreeMap<String, Instant>>,
}

impl HandlerProcesses {
    /// Reads the handler packages; starts nothing until [`Invoke::prepare`].
    pub fn new(config: ProcessConfig, endpoint: &str, region: &str) -> Result<Self, Error> {
        let binaries = handler_binaries(&config.workspace)?;
        let inner = Inner {
            config,
            endpoint: endpoint.to_owned(),
            region: region.to_owned(),
            binaries,
            targets: tokio::sync::Mutex::default(),
            clients: tokio::sync::OnceCell::new(),
            checked: std::sync::Mutex::default(),
        };
        Ok(Self {
            inner: Arc::new(inner),
            servers: std::sync::Mutex::default(),
        })
    }
}

impl Inner {
    /// The emulator's Lambda API and the functions' roles, on one SDK configuration.
    async fn clients(&self) -> &(aws_sdk_lambda::Client, FunctionRoles) {
        self.clients
            .get_or_init(|| async {
                let sdk = crate::role::emulator_sdk_config(&self.endpoint, &self.region).await;
                (aws_sdk_lambda::Client::new(&sdk), FunctionRoles::new(&sdk))
            })
            .await
    }

    /// The function's deployed configuration (`GetFunctionConfiguration`).
    async fn deployed(&self, function_name: &str) -> Result<DeployedFunction, Error> {
        let (lambda, _) = self.clients().await;
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

    /// The handler binary a deployed function runs.
    fn binary(&self, function_name: &str) -> Result<String, Error> {
        binary_for(function_name, &self.binaries).ok_or_else(|| Error::UnknownFunction {
            function: function_name.to_owned(),
            handlers_dir: self.config.workspace.join("handlers"),
            known: self.binaries.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// A target for `function_name` as deployed now, its process started
    /// (so a binary that is missing is reported here). A handler that
    /// fails at init still gives the target, without a process, beside
    /// the error: its invocations start it again, and an init failure is
    /// then their function error, as on Lambda.
    async fn new_target(&self, function_name: &str, served: bool) -> Result<(Arc<Target>, Option<Error>), Error> {
        let binary = self.binary(function_name)?;
        let (deployed, process, init_error) = if self.config.attach.is_some() {
            (None, None, None)
        } else {
            let deployed = self.deployed(function_name).await?;
            match self.spawn(function_name, &binary, &deployed).await {
                Ok(process) => (Some(deployed), Some(process), None),
                Err(err @ Error::HandlerNotReady { .. }) => {
                    warn!(function = %function_name, error = %err, "the handler failed at init; its invocations fail until it starts");
                    (Some(deployed), None, Some(err))
                }
                Err(err) => return Err(err),
            }
        };
        let target = Target {
            binary,
            served: AtomicBool::new(served),
            deployed,
            process: tokio::sync::Mutex::new(process),
        };
        Ok((Arc::new(target), init_error))
    }

    /// The target that runs `function_name` as deployed now: the started
    /// one, or, when a redeploy changed the function's configuration since
    /// it started, a new one. A failed read of the configuration keeps the
    /// running process.
    async fn current(&self, function_name: &str) -> Result<Arc<Target>, Error> {
        let prepared = self.targets.lock().await.get(function_name).cloned();
        let Some(running) = prepared else {
            // Its preparation failed (a binary missing): try again, so the
            // invocation fails with the reason and other functions play on.
            let mut targets = self.targets.lock().await;
            if let Some(target) = targets.get(function_name) {
                return Ok(target.clone());
            }
            let (target, _) = self.new_target(function_name, false).await?;
            targets.insert(function_name.to_owned(), target.clone());
            return Ok(target);
        };
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
        let (target, _) = self
            .new_target(function_name, running.served.load(Ordering::Relaxed))
            .await?;
        targets.insert(function_name.to_owned(), target.clone());
        Ok(target)
    }

    /// Every variable the process of `function_name` gets.
    async fn environment(
        &self,
        function_name: &str,
        deployed: &DeployedFunction,
        runtime_api: &str,
    ) -> Result<BTreeMap<String, String>, Error> {
        let (_, roles) = self.clients().await;
        let credentials = crate::role::environment(&roles.credentials(function_name).await?);
        let runtime = [
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_REGION", self.region.clone()),
            ("AWS_DEFAULT_REGION", self.region.clone()),
            ("AWS_LAMBDA_RUNTIME_API", runtime_api.to_owned()),
            ("AWS_LAMBDA_FUNCTION_NAME", function_name.to_owned()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", deployed.memory_size.to_string()),
            ("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{function_name}")),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "local".to_owned()),
        ]
        .map(|(key, value)| (key.to_owned(), value));
        // Later entries win: the deployed environment never overrides the
        // role's credentials, the logging settings or the runtime's own.
        Ok(deployed
            .environment
            .clone()
            .into_iter()
            .chain(credentials)
            .chain(deployed.logging.clone())
            .chain(runtime)
            .collect())
    }

    /// Starts the prebuilt `binary` for `function_name` and waits until it
    /// asks for its first event.
    async fn spawn(
        &self,
        function_name: &str,
        binary: &str,
        deployed: &DeployedFunction,
    ) -> Result<HandlerProcess, Error> {
        let path = self.config.binary_path(binary);
        if !path.is_file() {
            return Err(Error::BinaryMissing {
                binary: binary.to_owned(),
                path,
            });
        }
        let runtime = RuntimeApi::start().await?;
        let environment = self.environment(function_name, deployed, &runtime.address()).await?;
        let dir = self.config.workspace.join(".run/esm-runner");
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{function_name}.log"));
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
        let mut command = Command::from(handler_command(&path, &environment));
        command
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true);
        info!(function = %function_name, binary = %path.display(), log = %log.display(), "starting the handler");
        let child = command.spawn()?;
        let mut process = HandlerProcess { child, runtime, log };
        let ready = tokio::time::timeout(self.config.startup_timeout, async {
            loop {
                tokio::select! {
                    () = process.runtime.polled() => return Ok(()),
                    () = tokio::time::sleep(Duration::from_millis(50)) => {
                        if let Ok(Some(status)) = process.child.try_wait() {
                            return Err(format!("it exited ({status})"));
                        }
                    }
                }
            }
        })
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "it did not ask for an event within {:?}",
                self.config.startup_timeout
            ))
        });
        ready.map_err(|reason| Error::HandlerNotReady {
            function: function_name.to_owned(),
            reason,
            tail: tail(&std::fs::read_to_string(&process.log).unwrap_or_default(), 20),
            log: process.log.clone(),
        })?;
        Ok(process)
    }

    /// One event through the process of `target`, started again first if
    /// it crashed or timed out before.
    async fn call(&self, function_name: &str, target: &Target, payload: Bytes) -> Result<Invocation, Error> {
        let deployed = target
            .deployed
            .as_ref()
            .expect("a started target has its configuration");
        let mut slot = target.process.lock().await;
        let exited = match slot.as_mut() {
            Some(process) => matches!(process.child.try_wait(), Ok(Some(_))),
            None => true,
        };
        if exited {
            match self.spawn(function_name, &target.binary, deployed).await {
                Ok(process) => *slot = Some(process),
                // An init failure is the invocation's function error (the
                // mapping's retry policy applies), as on Lambda.
                Err(err @ Error::HandlerNotReady { .. }) => {
                    return Ok(Invocation::error("Runtime.ExitError", &err.to_string()));
                }
                Err(err) => return Err(err),
            }
        }
        let process = slot.as_mut().expect("started above");
        let timeout = deployed.invoke_timeout(self.config.invoke_timeout);
        let mut outcome = process.runtime.submit(payload, &deployed.function_arn, timeout);
        let deadline = Instant::now() + timeout;
        let failed = loop {
            tokio::select! {
                answer = &mut outcome => match answer {
                    Ok(Outcome::Response(body)) => return Ok(Invocation::Response(document(&body))),
                    Ok(Outcome::Error { error_type, body }) => {
                        return Ok(Invocation::FunctionError { error_type, body: document(&body) });
                    }
                    Err(_) => break Invocation::error("Runtime.ExitError", "the runtime API stopped"),
                },
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    if let Ok(Some(status)) = process.child.try_wait() {
                        let log = tail(&std::fs::read_to_string(&process.log).unwrap_or_default(), 5);
                        break Invocation::error("Runtime.ExitError", &format!("the handler process exited ({status}) during the invocation: {log}"));
                    }
                    if Instant::now() >= deadline {
                        warn!(function = %function_name, ?timeout, "invocation timed out; stopping the process");
                        break Invocation::error("Sandbox.Timedout", &format!("no response within {timeout:?}"));
                    }
                }
            }
        };
        // Killed on drop; the next invocation starts a fresh process.
        *slot = None;
        Ok(failed)
    }

    async fn invoke(&self, function_name: &str, payload: Value) -> Result<Invocation, Error> {
        let target = self.current(function_name).await?;
        let Some(address) = &self.config.attach else {
            return self
                .call(function_name, &target, Bytes::from(payload.to_string()))
                .await;
        };
        let posted = tokio::time::timeout(self.config.invoke_timeout, post(address, &target.binary, &payload)).await;
        let (status, function_error, body) = match posted {
            Err(_) => {
                let timeout = self.config.invoke_timeout;
                return Ok(Invocation::error(
                    "Sandbox.Timedout",
                    &format!("no response within {timeout:?}"),
                ));
            }
            Ok(Err(message)) => {
                return Err(Error::Invoke {
                    function: function_name.to_owned(),
                    message: format!("{message} (invoke API at {address})"),
                });
            }
            Ok(Ok(response)) => response,
        };
        let document = document(&body);
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

    /// One request to a served function URL, through the function.
    async fn serve_request(
        &self,
        function_name: &str,
        source_ip: String,
        request: hyper::Request<hyper::body::Incoming>,
    ) -> hyper::Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let headers: Vec<(String, String)> = parts
            .headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
            .collect();
        let domain = parts
            .headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("127.0.0.1")
            .to_owned();
        let url_request = UrlRequest {
            method: parts.method.to_string(),
            path_and_query: parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
            headers,
            body,
            source_ip,
        };
        let event = url_event::event(&url_request, &uuid::Uuid::new_v4().to_string(), &domain);
        let answer = match self.invoke(function_name, event).await {
            Ok(Invocation::Response(document)) => url_event::response(&document),
            // Lambda answers a function error on a URL with 502.
            Ok(Invocation::FunctionError { body, .. }) => bad_gateway(body.to_string()),
            Err(err) => bad_gateway(serde_json::json!({"message": err.to_string()}).to_string()),
        };
        answer.map(Full::new)
    }
}

fn bad_gateway(body: String) -> hyper::Response<Bytes> {
    hyper::Response::builder()
        .status(hyper::StatusCode::BAD_GATEWAY)
        .header(CONTENT_TYPE, "application/json")
        .body(Bytes::from(body))
        .expect("a valid response")
}

/// A response body as JSON: `null` when empty, a string when not JSON.
fn document(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// Posts `payload` to the invoke API of an attached `cargo lambda watch`.
async fn post(address: &str, binary: &str, payload: &Value) -> Result<(u16, Option<String>, Bytes), String> {
    let request = hyper::Request::post(format!("/2015-03-31/functions/{binary}/invocations"))
        .header(HOST, address)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(payload.to_string())))
        .map_err(|e| e.to_string())?;
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
    let function_error = parts
        .headers
        .get("X-Amz-Function-Error")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok((parts.status.as_u16(), function_error, body))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Invoke for HandlerProcesses {
    async fn prepare(&self, functions: &[String]) -> Result<(), Error> {
        // Every function is prepared even when one cannot be: the first
        // failure is returned, the others play.
        let mut targets = self.inner.targets.lock().await;
        let mut first_error = None;
        for function in functions {
            if targets.contains_key(function) {
                continue;
            }
            match self.inner.new_target(function, false).await {
                Ok((target, init_error)) => {
                    targets.insert(function.clone(), target);
                    first_error = first_error.or(init_error);
                }
                Err(err) => {
                    warn!(function = %function, error = %err, "could not prepare the function");
                    first_error.get_or_insert(err);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Serves the function as deployed now (its configuration is read
    /// back, to follow later redeploys).
    async fn serve_url(&self, function_name: &str, port: u16) -> Result<Option<String>, Error> {
        let binary = self.inner.binary(function_name)?;
        if let Some(address) = &self.inner.config.attach {
            // The user's watch serves every binary of the workspace: its
            // function URL route names the binary.
            return Ok(Some(format!("http://{address}/lambda-url/{binary}/")));
        }
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .map_err(|e| Error::PortUnavailable {
                port,
                message: e.to_string(),
            })?;
        let address = listener.local_addr()?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        {
            let mut targets = self.inner.targets.lock().await;
            match targets.get(function_name) {
                Some(target) => target.served.store(true, Ordering::Relaxed),
                None => {
                    let (target, _) = self.inner.new_target(function_name, true).await?;
                    targets.insert(function_name.to_owned(), target);
                }
            }
        }
        let inner = self.inner.clone();
        let function = function_name.to_owned();
        let server = tokio::spawn(serve_http1(listener, move |peer, request| {
            let (inner, function) = (inner.clone(), function.clone());
            async move {
                Ok::<_, std::convert::Infallible>(inner.serve_request(&function, peer.ip().to_string(), request).await)
            }
        }));
        self.servers.lock().expect("servers lock").push(server.abort_handle());
        info!(function = %function_name, %address, "serving the function URL");
        Ok(Some(format!("http://{address}/")))
    }

    async fn follow_redeploys(&self) {
        let served: Vec<String> = {
            let targets = self.inner.targets.lock().await;
            targets
                .iter()
                .filter(|(_, target)| target.served.load(Ordering::Relaxed))
                .map(|(name, _)| name.clone())
                .collect()
        };
        for function_name in served {
            if let Err(err) = self.inner.current(&function_name).await {
                warn!(function = %function_name, error = %err, "could not restart the served function after a redeploy");
            }
        }
    }

    async fn invoke(&self, function_name: &str, payload: Value) -> Result<Invocation, Error> {
        self.inner.invoke(function_name, payload).await
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::Mapping;

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
        let mut config = ProcessConfig::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
        config.attach = Some(stub_invoke_api(response).await);
        let watch = HandlerProcesses::new(config, "http://127.0.0.1:1", "us-east-1").unwrap();
        let mapping = Mapping {
            uuid: "u".into(),
            function_arn: "arn:aws:lambda:us-east-1:123456789012:function:hck-stream-counter".into(),
            function_name: "hck-stream-counter".into(),
            source_arn: "arn:stream".into(),
            batch_size: 1,
            filters: vec![],
            report_batch_item_failures: true,
            emulator_enabled: true,
            source: crate::Source::Queue(crate::discover::QueueSettings {
                queue_url: "q".into(),
                visibility_timeout: Duration::from_secs(1),
                redrive: None,
            }),
        };
        watch
            .prepare(std::slice::from_ref(&mapping.function_name))
            .await
            .unwrap();
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

    /// The runner's one way to start a handler: the binary the build left,
    /// never a cargo or a cargo-lambda (which would compile, or run `cargo
    /// metadata`, after the build step), with only the given environment.
    #[test]
    fn a_handler_is_started_from_its_prebuilt_binary_with_only_its_environment() {
        let config = ProcessConfig {
            target_dir: Some(PathBuf::from("/t")),
            ..ProcessConfig::new("/kit")
        };
        let binary = config.binary_path("stream-counter");
        let environment = BTreeMap::from([("TABLE".to_owned(), "t".to_owned())]);
        let command = handler_command(&binary, &environment);
        assert_eq!(command.get_program(), "/t/debug/stream-counter");
        assert_eq!(command.get_args().count(), 0);
        assert_eq!(command.get_current_dir(), Some(Path::new("/t/debug")));
        let set: Vec<_> = command.get_envs().filter(|(_, v)| v.is_some()).collect();
        assert_eq!(set.len(), 1, "{set:?}");
        let program = command.get_program().to_string_lossy();
        assert!(!program.contains("cargo"), "{program}");
    }

    #[tokio::test]
    async fn a_missing_binary_is_an_error_that_says_how_to_build_it() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let config = ProcessConfig {
            target_dir: Some(std::env::temp_dir().join("no-such-target-dir")),
            ..ProcessConfig::new(&workspace)
        };
        let processes = HandlerProcesses::new(config, "http://127.0.0.1:1", "us-east-1").unwrap();
        let deployed = DeployedFunction {
            function_arn: "arn:fn".to_owned(),
            environment: BTreeMap::new(),
            memory_size: 128,
            code_sha256: None,
            timeout: None,
            logging: BTreeMap::new(),
        };
        let err = processes
            .inner
            .spawn("hck-stream-counter", "stream-counter", &deployed)
            .await
            .err()
            .expect("no binary there");
        assert!(matches!(err, Error::BinaryMissing { .. }), "{err}");
        assert!(err.to_string().contains("cargo build"), "{err}");
    }
}
