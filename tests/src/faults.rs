//! A fault-injecting HTTP proxy between SDK clients (or `counterctl`) and a
//! test's emulator: a seeded [`FaultPlan`] picks a [`Fault`] per AWS
//! operation (from `X-Amz-Target`; requests without it are forwarded), so
//! `HCK_FAULT_SEED=<seed>` replays a failure; [`FaultProxy::limit_capacity`]
//! puts the capacity model in front ([`crate::capacity`]).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue, TRANSFER_ENCODING};
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};

use crate::capacity::{CapacityModel, CapacityUsage, Refusal, Ticket, Verdict};

/// The environment variable that pins the seed of [`FaultPlan::from_env`].
pub const SEED_VAR: &str = "HCK_FAULT_SEED";

/// The request header naming the change (a number) a request belongs to.
/// Requests that carry it draw their faults from a copy of the plan seeded
/// for that change, in the change's own order of calls: change `n` meets
/// the same faults whatever the interleaving of concurrent callers
/// (`make compare` gives every approach the same schedule per change).
pub const CHANGE_HEADER: &str = "x-hck-change";

/// A service the proxy recognises by its `X-Amz-Target` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    DynamoDb,
    DynamoDbStreams,
    Sqs,
}

impl Service {
    const ALL: [Service; 3] = [Service::DynamoDb, Service::DynamoDbStreams, Service::Sqs];

    /// The `X-Amz-Target` prefix of the service's JSON protocol (the SQS
    /// SDK in the lock file speaks JSON, not the query protocol).
    fn target_prefix(self) -> &'static str {
        match self {
            Service::DynamoDb => "DynamoDB_20120810",
            Service::DynamoDbStreams => "DynamoDBStreams_20120810",
            Service::Sqs => "AmazonSQS",
        }
    }

    fn short_name(self) -> &'static str {
        match self {
            Service::DynamoDb => "dynamodb",
            Service::DynamoDbStreams => "streams",
            Service::Sqs => "sqs",
        }
    }
}

/// One AWS operation, e.g. DynamoDB's `PutItem`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Operation {
    pub service: Service,
    pub name: String,
}

impl Operation {
    pub fn new(service: Service, name: &str) -> Self {
        Self {
            service,
            name: name.to_owned(),
        }
    }

    pub fn dynamodb(name: &str) -> Self {
        Self::new(Service::DynamoDb, name)
    }

    pub fn streams(name: &str) -> Self {
        Self::new(Service::DynamoDbStreams, name)
    }

    pub fn sqs(name: &str) -> Self {
        Self::new(Service::Sqs, name)
    }

    /// The operation an `X-Amz-Target` header names, if it is one of [`Service`]'s.
    pub fn from_target(target: &str) -> Option<Self> {
        let (prefix, name) = target.split_once('.')?;
        let service = Service::ALL.into_iter().find(|s| s.target_prefix() == prefix)?;
        (!name.is_empty()).then(|| Self::new(service, name))
    }

    fn is_transact_write_items(&self) -> bool {
        self.service == Service::DynamoDb && self.name == "TransactWriteItems"
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.service.short_name(), self.name)
    }
}

/// Which actions of a transaction a [`Fault::TransactionConflict`] blames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflicting {
    /// One action, picked by the plan's generator; `None` for the others.
    One,
    /// Every action.
    All,
}

/// What the proxy does to one request instead of plainly forwarding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// HTTP 500 without forwarding: nothing was applied.
    FailBefore,
    /// Forwarded and applied, then answered with HTTP 500 all the same.
    ApplyThenFail,
    /// HTTP 400 with the service's throttling error, not forwarded.
    Throttle,
    /// `TransactWriteItems` only: `TransactionCanceledException`, not forwarded.
    TransactionConflict(Conflicting),
    /// Forwarded after this pause.
    Delay(Duration),
    /// DynamoDB Streams: HTTP 400 `TrimmedDataAccessException`, not
    /// forwarded: the records asked for have left the stream's retention.
    Trimmed,
}

impl Fault {
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::FailBefore => FaultKind::FailBefore,
            Fault::ApplyThenFail => FaultKind::ApplyThenFail,
            Fault::Throttle => FaultKind::Throttle,
            Fault::TransactionConflict(_) => FaultKind::TransactionConflict,
            Fault::Delay(_) => FaultKind::Delay,
            Fault::Trimmed => FaultKind::Trimmed,
        }
    }
}

/// A [`Fault`] without its parameters, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    FailBefore,
    ApplyThenFail,
    Throttle,
    TransactionConflict,
    Delay,
    Trimmed,
}

impl FaultKind {
    /// The faults any service can answer ([`FaultKind::Trimmed`] is the
    /// Streams-only answer of a range that has left the stream).
    pub const ALL: [FaultKind; 5] = [
        FaultKind::FailBefore,
        FaultKind::ApplyThenFail,
        FaultKind::Throttle,
        FaultKind::TransactionConflict,
        FaultKind::Delay,
    ];
}

/// When a rule fires.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Trigger {
    /// Each call with `probability`; a firing faults `burst` consecutive
    /// calls of the operation, this one included.
    Random { probability: f64, burst: u32 },
    /// The next `remaining` calls.
    Next { remaining: u32 },
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    operation: Operation,
    fault: Fault,
    trigger: Trigger,
    /// Calls still to fault in the burst under way.
    streak: u32,
}

/// Per-operation fault rules and the seed of their generator.
///
/// For each call of an operation, in this order: the first "next N calls"
/// rule with calls left fires; else a burst under way continues; else each
/// random rule of the operation is rolled in the order added and the first
/// that fires wins.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    seed: u64,
    rules: Vec<Rule>,
    /// Rules of one change's copy only ([`CHANGE_HEADER`]), before the others.
    changes: BTreeMap<u64, Vec<Rule>>,
}

impl FaultPlan {
    /// An empty plan (everything forwarded) with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            rules: Vec::new(),
            changes: BTreeMap::new(),
        }
    }

    /// An empty plan seeded from [`SEED_VAR`] when set, else at random;
    /// prints the seed so a failing run can be replayed.
    pub fn from_env(test: &str) -> Self {
        let seed = std::env::var(SEED_VAR)
            .ok()
            .map(|raw| {
                raw.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{SEED_VAR}={raw:?} is not a u64"))
            })
            .unwrap_or_else(|| fastrand::u64(..));
        eprintln!("{test}: fault plan seed {seed} (replay with {SEED_VAR}={seed})");
        Self::new(seed)
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Each call of `operation` gets `fault` with `probability`.
    pub fn random(self, operation: Operation, fault: Fault, probability: f64) -> Self {
        self.bursts(operation, fault, probability, 1)
    }

    /// With `probability` a call of `operation` starts a run of `length`
    /// consecutive calls that all get `fault` (long enough runs get past
    /// the SDK's retries and surface to the caller).
    pub fn bursts(self, operation: Operation, fault: Fault, probability: f64, length: u32) -> Self {
        assert!(
            (0.0..=1.0).contains(&probability),
            "probability {probability} of {fault:?} on {operation}"
        );
        self.rule(
            operation,
            fault,
            Trigger::Random {
                probability,
                burst: length.max(1),
            },
        )
    }

    /// The next `calls` calls of `operation` get `fault`.
    pub fn next(self, operation: Operation, fault: Fault, calls: u32) -> Self {
        self.rule(operation, fault, Trigger::Next { remaining: calls })
    }

    /// The first `calls` calls of `operation` that change `change` sends
    /// ([`CHANGE_HEADER`]) get `fault`, before any other rule; requests of
    /// other changes, or of none, never meet it.
    pub fn next_in_change(mut self, change: u64, operation: Operation, fault: Fault, calls: u32) -> Self {
        let rule = Self::checked(operation, fault, Trigger::Next { remaining: calls });
        self.changes.entry(change).or_default().push(rule);
        self
    }

    fn rule(mut self, operation: Operation, fault: Fault, trigger: Trigger) -> Self {
        self.rules.push(Self::checked(operation, fault, trigger));
        self
    }

    fn checked(operation: Operation, fault: Fault, trigger: Trigger) -> Rule {
        assert!(
            !matches!(fault, Fault::TransactionConflict(_)) || operation.is_transact_write_items(),
            "a transaction conflict only exists for dynamodb.TransactWriteItems, not {operation}"
        );
        Rule {
            operation,
            fault,
            trigger,
            streak: 0,
        }
    }

    /// Change `n`'s copy of the plan: its own rules first, then the plan's.
    fn for_change(&self, n: u64) -> Self {
        let mut rules = self.changes.get(&n).cloned().unwrap_or_default();
        rules.extend(self.rules.iter().cloned());
        Self {
            seed: self.seed,
            rules,
            changes: BTreeMap::new(),
        }
    }

    /// The fault for the next call of `operation`, if any; advances the
    /// rules' state.
    fn decide(&mut self, operation: &Operation, rng: &mut fastrand::Rng) -> Option<Fault> {
        let mut random = Vec::new();
        for rule in self.rules.iter_mut().filter(|r| &r.operation == operation) {
            match &mut rule.trigger {
                Trigger::Next { remaining } if *remaining > 0 => {
                    *remaining -= 1;
                    return Some(rule.fault);
                }
                Trigger::Next { .. } => {}
                Trigger::Random { .. } => random.push(rule),
            }
        }
        if let Some(rule) = random.iter_mut().find(|r| r.streak > 0) {
            rule.streak -= 1;
            return Some(rule.fault);
        }
        for rule in random {
            let Trigger::Random { probability, burst } = rule.trigger else {
                unreachable!()
            };
            if rng.f64() < probability {
                rule.streak = burst - 1;
                return Some(rule.fault);
            }
        }
        None
    }
}

/// What the proxy did, per operation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Requests sent on to the emulator (plain, delayed, and those applied
    /// then failed); `None`: requests without a recognised `X-Amz-Target`.
    pub forwarded: BTreeMap<Option<Operation>, u64>,
    /// Faults injected.
    pub injected: BTreeMap<(Operation, FaultKind), u64>,
}

impl FaultStats {
    /// Faults of `kind` injected into `operation`.
    pub fn injected(&self, operation: &Operation, kind: FaultKind) -> u64 {
        self.injected
            .get(&(operation.clone(), kind))
            .copied()
            .unwrap_or_default()
    }

    /// Faults of `kind` injected into any operation.
    pub fn of_kind(&self, kind: FaultKind) -> u64 {
        self.injected
            .iter()
            .filter(|((_, k), _)| *k == kind)
            .map(|(_, n)| n)
            .sum()
    }

    /// Faults of any kind injected into `operation`.
    pub fn into_operation(&self, operation: &Operation) -> u64 {
        self.injected
            .iter()
            .filter(|((op, _), _)| op == operation)
            .map(|(_, n)| n)
            .sum()
    }

    pub fn total_injected(&self) -> u64 {
        self.injected.values().sum()
    }

    pub fn total_forwarded(&self) -> u64 {
        self.forwarded.values().sum()
    }

    /// Panics unless a fault of every kind in `kinds` was injected.
    pub fn assert_injected(&self, kinds: &[FaultKind]) {
        for kind in kinds {
            assert!(
                self.of_kind(*kind) > 0,
                "no {kind:?} fault was injected, the test proved nothing about it:\n{self}"
            );
        }
    }
}

impl fmt::Display for FaultStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut operations: Vec<Option<&Operation>> = self.forwarded.keys().map(Option::as_ref).collect();
        operations.extend(self.injected.keys().map(|(op, _)| Some(op)));
        operations.sort();
        operations.dedup();
        writeln!(
            f,
            "{:<32} {:>9} {:>6} {:>6} {:>8} {:>8} {:>6}",
            "operation", "forwarded", "fail", "apply", "throttle", "conflict", "delay"
        )?;
        for operation in operations {
            let label = operation.map_or_else(|| "(other)".to_owned(), Operation::to_string);
            let forwarded = self.forwarded.get(&operation.cloned()).copied().unwrap_or_default();
            write!(f, "{label:<32} {forwarded:>9}")?;
            for (kind, width) in FaultKind::ALL.into_iter().zip([6, 6, 8, 8, 6]) {
                let n = operation.map_or(0, |op| self.injected(op, kind));
                write!(f, " {n:>width$}")?;
            }
            writeln!(f)?;
        }
        write!(f, "{:<32} {:>9}", "total", self.total_forwarded())?;
        for (kind, width) in FaultKind::ALL.into_iter().zip([6, 6, 8, 8, 6]) {
            write!(f, " {:>width$}", self.of_kind(kind))?;
        }
        Ok(())
    }
}

struct State {
    plan: FaultPlan,
    rng: fastrand::Rng,
    enabled: bool,
    stats: FaultStats,
    /// Per change ([`CHANGE_HEADER`]): its copy of the plan and its draws.
    changes: HashMap<u64, (FaultPlan, fastrand::Rng)>,
    capacity: Option<CapacityModel>,
}

struct Shared {
    /// `host:port` of the emulator.
    upstream: String,
    state: Mutex<State>,
    /// Idle connections to the emulator.
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

/// A running proxy; stops (with every connection it serves) when dropped.
///
/// It runs on a thread and runtime of its own, so a client that blocks its
/// thread (`counterctl` probes the endpoint's health with a blocking
/// socket) cannot stall it.
pub struct FaultProxy {
    /// `http://127.0.0.1:<port>`: give it to SDK clients or `--endpoint-url`.
    pub endpoint: String,
    shared: Arc<Shared>,
    accept: AbortHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `upstream`
    /// (`http://host:port`, e.g. [`crate::Emulator::endpoint`]).
    pub fn start(upstream: &str, plan: FaultPlan) -> Self {
        let authority = upstream
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("the proxy forwards to plain-http endpoints, not {upstream}"))
            .trim_end_matches('/')
            .to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let endpoint = format!("http://{}", listener.local_addr().expect("proxy address"));
        let shared = Arc::new(Shared {
            upstream: authority,
            state: Mutex::new(State {
                rng: fastrand::Rng::with_seed(plan.seed),
                plan,
                enabled: true,
                stats: FaultStats::default(),
                changes: HashMap::new(),
                capacity: None,
            }),
            idle: Mutex::new(Vec::new()),
        });
        let (started, accept) = std::sync::mpsc::channel();
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the fault proxy's runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("the proxy's listener");
                    let accept = tokio::spawn(accept_loop(listener, serving));
                    let _ = started.send(accept.abort_handle());
                    // Until aborted; the connections' tasks go with the runtime.
                    let _ = accept.await;
                });
            })
            .expect("start the fault proxy's thread");
        Self {
            endpoint,
            shared,
            accept: accept.recv().expect("the fault proxy started"),
            thread: Some(thread),
        }
    }

    pub fn seed(&self) -> u64 {
        self.shared.state().plan.seed
    }

    /// What was injected and forwarded so far.
    pub fn stats(&self) -> FaultStats {
        self.shared.state().stats.clone()
    }

    /// Turns fault injection and the capacity model off (`false`:
    /// everything is forwarded) or on again.
    pub fn set_enabled(&self, enabled: bool) {
        self.shared.state().enabled = enabled;
    }

    /// Puts `model` (DynamoDB's partition throughput) in front of the
    /// emulator, replacing any earlier one; `None` lifts it. A request a
    /// fault of the plan takes is not seen by the model.
    pub fn limit_capacity(&self, model: Option<CapacityModel>) {
        self.shared.state().capacity = model;
    }

    /// What the capacity model charged and refused so far (`None`: no model).
    pub fn capacity_usage(&self) -> Option<CapacityUsage> {
        self.shared.state().capacity.as_ref().map(CapacityModel::usage)
    }

    /// Runs `inspect` on the capacity model, if any (e.g. its partition counts).
    pub fn with_capacity<T>(&self, inspect: impl FnOnce(&CapacityModel) -> T) -> Option<T> {
        self.shared.state().capacity.as_ref().map(inspect)
    }

    /// Replaces the plan's rules (the generator and the counts go on).
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut state = self.shared.state();
        state.plan.rules = plan.rules;
        state.plan.changes = plan.changes;
    }

    /// Replaces the plan and restarts its random draws from its seed, so
    /// runs that restart the same plan draw the same faults in the same
    /// order of calls (the `make compare` runs of each approach).
    pub fn restart_plan(&self, plan: FaultPlan) {
        let mut state = self.shared.state();
        state.rng = fastrand::Rng::with_seed(plan.seed);
        state.plan = plan;
        state.changes.clear();
    }

    /// The next `calls` calls of `operation` get `fault`: after the calls of
    /// earlier "next" rules of the operation, before any random rule.
    pub fn inject_next(&self, operation: Operation, fault: Fault, calls: u32) {
        let mut state = self.shared.state();
        let plan = std::mem::replace(&mut state.plan, FaultPlan::new(0));
        state.plan = plan.next(operation, fault, calls);
    }

    /// SDK configuration for clients that talk through this proxy: the
    /// harness' credentials and region, and the SDK's standard retry mode
    /// (3 attempts) with backoffs of milliseconds instead of seconds, so
    /// many absorbed faults keep a test short.
    pub async fn sdk_config(&self) -> SdkConfig {
        crate::sdk::sdk_config_for(&self.endpoint)
            .await
            .into_builder()
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(3)
                    .with_initial_backoff(Duration::from_millis(5))
                    .with_max_backoff(Duration::from_millis(50)),
            )
            .build()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The plan's fault for one call of `operation` (counted), if any:
    /// drawn from `change`'s own copy of the plan when the request names
    /// one ([`CHANGE_HEADER`]), else from the proxy's.
    fn decide(&self, operation: &Operation, change: Option<u64>) -> Option<Fault> {
        let mut state = self.state();
        if !state.enabled {
            return None;
        }
        let State { plan, rng, changes, .. } = &mut *state;
        let (plan, rng) = match change {
            Some(n) => {
                let (plan, rng) = changes.entry(n).or_insert_with(|| {
                    let seed = plan.seed ^ n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    (plan.for_change(n), fastrand::Rng::with_seed(seed))
                });
                (plan, rng)
            }
            None => (plan, rng),
        };
        let fault = plan.decide(operation, rng)?;
        *state
            .stats
            .injected
            .entry((operation.clone(), fault.kind()))
            .or_default() += 1;
        Some(fault)
    }

    /// The capacity model's verdict on a DynamoDB request no fault took:
    /// `Err`: its answer (counted); `Ok`: forward, and finish the ticket
    /// with its answer when `Some`.
    fn admit(&self, operation: &Operation, body: &[u8]) -> Result<Option<Ticket>, Box<Response<Full<Bytes>>>> {
        let mut state = self.state();
        if !state.enabled || operation.service != Service::DynamoDb {
            return Ok(None);
        }
        let Some(model) = state.capacity.as_mut() else {
            return Ok(None);
        };
        match model.admit(&operation.name, body, Instant::now()) {
            Verdict::Forward(ticket) => Ok(ticket),
            Verdict::Refuse(answer) => {
                let kind = match answer.refusal {
                    Refusal::Throttle { .. } => FaultKind::Throttle,
                    Refusal::Conflict | Refusal::InProgress => FaultKind::TransactionConflict,
                };
                *state.stats.injected.entry((operation.clone(), kind)).or_default() += 1;
                Err(Box::new(json_error(
                    operation,
                    StatusCode::BAD_REQUEST,
                    answer.code,
                    "Sender",
                    answer.body,
                )))
            }
        }
    }

    fn finish(&self, ticket: Ticket, status: StatusCode, answer: &[u8]) {
        if let Some(model) = self.state().capacity.as_mut() {
            model.finish(ticket, status.as_u16(), answer, Instant::now());
        }
    }

    /// The action the generator blames for a one-action conflict.
    fn pick(&self, actions: usize) -> usize {
        self.state().rng.usize(..actions.max(1))
    }

    fn pick_bool(&self) -> bool {
        self.state().rng.bool()
    }

    /// Sends `request` to the emulator over an idle or a new connection.
    async fn forward(
        &self,
        operation: Option<&Operation>,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Full<Bytes>>, String> {
        *self.state().stats.forwarded.entry(operation.cloned()).or_default() += 1;
        let mut sender = self.sender().await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("forwarding to {}: {e}", self.upstream))?;
        let (mut parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("reading the answer of {}: {e}", self.upstream))?
            .to_bytes();
        if !sender.is_closed() {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(sender);
        }
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, Full::new(body)))
    }

    async fn sender(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        loop {
            let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let Some(mut sender) = idle else { break };
            if sender.ready().await.is_ok() {
                return Ok(sender);
            }
        }
        let stream = TcpStream::connect(&self.upstream)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.upstream))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake with {}: {e}", self.upstream))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Owned here so that aborting this task drops (and aborts) every connection.
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| handle(shared.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let operation = request
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(Operation::from_target);
    let (mut parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Ok(plain(StatusCode::BAD_REQUEST, &format!("reading the request: {e}"))),
    };
    let change = parts
        .headers
        .get(CHANGE_HEADER)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let fault = operation.as_ref().and_then(|op| shared.decide(op, change));
    if let (Some(op), Some(fault)) = (&operation, fault) {
        match fault {
            Fault::FailBefore => return Ok(internal_error(op)),
            Fault::Throttle => return Ok(throttled(op, shared.pick_bool())),
            Fault::TransactionConflict(which) => {
                let actions = transact_actions(&body);
                let blamed = match which {
                    Conflicting::One => Some(shared.pick(actions)),
                    Conflicting::All => None,
                };
                return Ok(transaction_conflict(actions, blamed));
            }
            Fault::Delay(pause) => tokio::time::sleep(pause).await,
            Fault::Trimmed => {
                return Ok(json_error(
                    op,
                    StatusCode::BAD_REQUEST,
                    "TrimmedDataAccessException",
                    "Sender",
                    message(&format!("injected: the records asked for by {op} have left the stream")),
                ));
            }
            Fault::ApplyThenFail => {}
        }
    }
    let ticket = match (&operation, fault) {
        (Some(op), None) => match shared.admit(op, &body) {
            Ok(ticket) => ticket,
            Err(refused) => return Ok(*refused),
        },
        _ => None,
    };
    // Released if this handler is dropped before the answer (from here on).
    let ticket = ticket.map(|ticket| Held::new(&shared, ticket));
    strip_hop_by_hop(&mut parts.headers);
    // What a TLS-terminating proxy tells the emulator: every call to AWS is
    // over TLS, so `aws:SecureTransport` holds there, and a TLS-only bucket
    // policy must not deny the kit's own calls here.
    parts
        .headers
        .insert(X_FORWARDED_PROTO, HeaderValue::from_static("https"));
    parts.version = Version::HTTP_11;
    let forwarded = shared
        .forward(operation.as_ref(), Request::from_parts(parts, Full::new(body)))
        .await;
    let forwarded = match (forwarded, ticket) {
        (forwarded, Some(held)) => settle(held, forwarded).await,
        (forwarded, None) => forwarded,
    };
    Ok(match (forwarded, &operation, fault) {
        // Whatever the emulator answered (it applied the request, or refused
        // it): the caller sees an internal error.
        (_, Some(op), Some(Fault::ApplyThenFail)) => internal_error(op),
        (Ok(response), _, _) => response,
        (Err(why), _, _) => {
            eprintln!("fault proxy: {why}");
            plain(StatusCode::BAD_GATEWAY, &why)
        }
    })
}

/// An admitted request's ticket until its answer reaches the model: if the
/// handler is dropped first (hyper drops it when the client disconnects,
/// e.g. the SDK's timeout during a transaction's hold), the drop releases
/// what the ticket holds, as a failed answer, so its items and its token do
/// not stay in flight for ever.
struct Held {
    shared: Arc<Shared>,
    ticket: Option<Ticket>,
}

impl Held {
    fn new(shared: &Arc<Shared>, ticket: Ticket) -> Self {
        Self {
            shared: shared.clone(),
            ticket: Some(ticket),
        }
    }

    fn finish(mut self, status: StatusCode, answer: &[u8]) {
        if let Some(ticket) = self.ticket.take() {
            self.shared.finish(ticket, status, answer);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.shared.finish(ticket, StatusCode::BAD_GATEWAY, b"");
        }
    }
}

/// Holds the answer until the ticket allows it (a transaction's hold), then
/// tells the model the answer.
async fn settle(held: Held, forwarded: Result<Response<Full<Bytes>>, String>) -> Result<Response<Full<Bytes>>, String> {
    if let Some(at) = held.ticket.as_ref().and_then(Ticket::answer_after) {
        tokio::time::sleep_until(at.into()).await;
    }
    match forwarded {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            held.finish(parts.status, &body);
            Ok(Response::from_parts(parts, Full::new(body)))
        }
        Err(why) => {
            held.finish(StatusCode::BAD_GATEWAY, b"");
            Err(why)
        }
    }
}

/// The header an emulator reads `aws:SecureTransport` from.
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Headers of one connection, not of the message.
fn strip_hop_by_hop(headers: &mut hyper::HeaderMap) {
    for name in [CONNECTION, TRANSFER_ENCODING, HeaderName::from_static("keep-alive")] {
        headers.remove(name);
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response
}

/// An error in the JSON shape of `operation`'s service (all three use
/// `awsJson1_0`; SQS also sends its query-compatible code in a header).
fn json_error(
    operation: &Operation,
    status: StatusCode,
    code: &str,
    query_fault: &str,
    mut body: serde_json::Map<String, serde_json::Value>,
) -> Response<Full<Bytes>> {
    let namespace = match operation.service {
        Service::DynamoDb | Service::DynamoDbStreams => "com.amazonaws.dynamodb.v20120810",
        Service::Sqs => "com.amazonaws.sqs",
    };
    body.insert("__type".into(), format!("{namespace}#{code}").into());
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON error body"));
    let length = bytes.len();
    let mut response = Response::new(Full::new(bytes));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-amz-json-1.0"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(
        HeaderName::from_static("x-amzn-requestid"),
        HeaderValue::from_static("injected-by-the-fault-proxy"),
    );
    if operation.service == Service::Sqs {
        let value = format!("{code};{query_fault}");
        headers.insert(
            HeaderName::from_static("x-amzn-query-error"),
            HeaderValue::from_str(&value).expect("an ASCII header"),
        );
    }
    response
}

fn message(text: &str) -> serde_json::Map<String, serde_json::Value> {
    serde_json::Map::from_iter([("message".to_owned(), text.into())])
}

/// HTTP 500: `InternalServerError` (DynamoDB, Streams), `InternalError` (SQS).
fn internal_error(operation: &Operation) -> Response<Full<Bytes>> {
    let code = match operation.service {
        Service::DynamoDb | Service::DynamoDbStreams => "InternalServerError",
        Service::Sqs => "InternalError",
    };
    json_error(
        operation,
        StatusCode::INTERNAL_SERVER_ERROR,
        code,
        "Receiver",
        message(&format!("injected internal error on {operation}")),
    )
}

/// HTTP 400 with the service's throttling error; for DynamoDB either of
/// its two (`alternative` picks).
fn throttled(operation: &Operation, alternative: bool) -> Response<Full<Bytes>> {
    let code = match operation.service {
        Service::DynamoDb if alternative => "ThrottlingException",
        Service::DynamoDb => "ProvisionedThroughputExceededException",
        Service::DynamoDbStreams => "LimitExceededException",
        Service::Sqs => "RequestThrottled",
    };
    json_error(
        operation,
        StatusCode::BAD_REQUEST,
        code,
        "Sender",
        message(&format!("injected throttling on {operation}")),
    )
}

/// The number of actions of a `TransactWriteItems` request body.
fn transact_actions(body: &[u8]) -> usize {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["TransactItems"].as_array().map(Vec::len))
        .unwrap_or(1)
        .max(1)
}

/// `TransactionCanceledException` with one reason per action in request
/// order: `TransactionConflict` on `blamed` (every action when `None`),
/// `None` elsewhere.
fn transaction_conflict(actions: usize, blamed: Option<usize>) -> Response<Full<Bytes>> {
    let codes: Vec<&str> = (0..actions)
        .map(|n| {
            if blamed.is_none_or(|b| b == n) {
                "TransactionConflict"
            } else {
                "None"
            }
        })
        .collect();
    let reasons: Vec<serde_json::Value> = codes
        .iter()
        .map(|code| match *code {
            "None" => serde_json::json!({ "Code": "None" }),
            code => serde_json::json!({ "Code": code, "Message": "Transaction is ongoing for the item" }),
        })
        .collect();
    let body = serde_json::Map::from_iter([
        (
            "Message".to_owned(),
            format!(
                "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                codes.join(", ")
            )
            .into(),
        ),
        ("CancellationReasons".to_owned(), reasons.into()),
    ]);
    json_error(
        &Operation::dynamodb("TransactWriteItems"),
        StatusCode::BAD_REQUEST,
        "TransactionCanceledException",
        "Sender",
        body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_operation() {
        assert_eq!(
            Operation::from_target("DynamoDB_20120810.PutItem"),
            Some(Operation::dynamodb("PutItem"))
        );
        assert_eq!(
            Operation::from_target("DynamoDBStreams_20120810.GetRecords"),
            Some(Operation::streams("GetRecords"))
        );
        assert_eq!(
            Operation::from_target("AmazonSQS.SendMessageBatch"),
            Some(Operation::sqs("SendMessageBatch"))
        );
        assert_eq!(Operation::from_target("Logs_20140328.PutLogEvents"), None);
        assert_eq!(Operation::from_target("AmazonSQS."), None);
    }

    /// `make compare` restarts one plan for each approach's run: each
    /// restart draws the same faults in the same order of calls, whatever
    /// the earlier runs drew.
    #[test]
    fn a_restarted_plan_draws_the_same_faults_again() {
        let put = Operation::dynamodb("PutItem");
        let plan = || FaultPlan::new(7).random(put.clone(), Fault::ApplyThenFail, 0.3);
        let proxy = FaultProxy::start("http://127.0.0.1:9", plan());
        let draws = || (0..100).map(|_| proxy.shared.decide(&put, None)).collect::<Vec<_>>();
        proxy.restart_plan(plan());
        let first = draws();
        assert!(first.iter().any(Option::is_some) && first.iter().any(Option::is_none));
        let continued = draws();
        proxy.restart_plan(plan());
        assert_eq!(draws(), first);
        assert_ne!(continued, first, "without a restart the draws go on");
    }

    /// Requests naming their change draw that change's own faults, in its
    /// own order of calls, however the changes' calls interleave.
    #[test]
    fn each_change_draws_its_own_faults_whatever_the_interleaving() {
        let put = Operation::dynamodb("PutItem");
        let proxy = FaultProxy::start(
            "http://127.0.0.1:9",
            FaultPlan::new(3).bursts(put.clone(), Fault::ApplyThenFail, 0.2, 2),
        );
        let draw = |change| proxy.shared.decide(&put, Some(change));
        let one_by_one: Vec<_> = (0..40u64).flat_map(|c| (0..5).map(move |_| c)).map(draw).collect();
        proxy.restart_plan(FaultPlan::new(3).bursts(put.clone(), Fault::ApplyThenFail, 0.2, 2));
        let mut interleaved = vec![None; 200];
        for call in 0..5 {
            for c in (0..40u64).rev() {
                interleaved[c as usize * 5 + call] = draw(c);
            }
        }
        assert_eq!(interleaved, one_by_one);
        assert!(one_by_one.iter().any(Option::is_some) && one_by_one.iter().any(Option::is_none));
    }

    /// A change's own rules reach that change's first calls only, before
    /// its random draws; other changes and requests naming none draw as if
    /// the rule were not there.
    #[test]
    fn a_rule_of_one_change_faults_only_that_changes_first_calls() {
        let put = Operation::dynamodb("PutItem");
        let random = || FaultPlan::new(5).random(put.clone(), Fault::Throttle, 0.3);
        let draws = |plan: FaultPlan| {
            let proxy = FaultProxy::start("http://127.0.0.1:9", plan);
            let mut by_change: Vec<Vec<Option<Fault>>> = (0..4u64)
                .map(|c| (0..6).map(|_| proxy.shared.decide(&put, Some(c))).collect())
                .collect();
            by_change.push((0..6).map(|_| proxy.shared.decide(&put, None)).collect());
            by_change
        };
        let plain = draws(random());
        let with_rule = draws(random().next_in_change(2, put.clone(), Fault::ApplyThenFail, 3));
        assert_eq!(&with_rule[2][..3], &[Some(Fault::ApplyThenFail); 3]);
        assert_eq!(with_rule[2][3..], plain[2][..3], "then the change's own draws");
        for other in [0, 1, 3, 4] {
            assert_eq!(with_rule[other], plain[other], "change {other}");
        }
    }

    #[test]
    fn a_plan_replays_with_its_seed() {
        let put = Operation::dynamodb("PutItem");
        let plan = || {
            FaultPlan::new(42)
                .next(put.clone(), Fault::Throttle, 2)
                .bursts(put.clone(), Fault::FailBefore, 0.2, 3)
                .random(put.clone(), Fault::ApplyThenFail, 0.3)
        };
        let run = |mut plan: FaultPlan| {
            let mut rng = fastrand::Rng::with_seed(plan.seed());
            (0..200).map(|_| plan.decide(&put, &mut rng)).collect::<Vec<_>>()
        };
        let first = run(plan());
        assert_eq!(first, run(plan()));
        assert_eq!(first[..2], [Some(Fault::Throttle), Some(Fault::Throttle)]);
        // Every burst of FailBefore is at least three calls long.
        let mut at = 2;
        while at < first.len() {
            if first[at] == Some(Fault::FailBefore) {
                let run = first[at..]
                    .iter()
                    .take_while(|f| **f == Some(Fault::FailBefore))
                    .count();
                assert!(run >= 3 || at + run == first.len(), "{first:?}");
                at += run;
            } else {
                at += 1;
            }
        }
        assert!(first.contains(&Some(Fault::ApplyThenFail)) && first.contains(&None));
        assert!(run(FaultPlan::new(42)).iter().all(Option::is_none), "no rule, no fault");
    }

    #[test]
    fn a_conflict_names_every_action_in_request_order() {
        let body = br#"{"TransactItems":[{"Update":{}},{"Update":{}},{"Delete":{}}]}"#;
        assert_eq!(transact_actions(body), 3);
        let response = transaction_conflict(3, Some(1));
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let json: serde_json::Value = serde_json::from_slice(&collect_body(response.into_body())).unwrap();
        let codes: Vec<&str> = json["CancellationReasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["Code"].as_str().unwrap())
            .collect();
        assert_eq!(codes, ["None", "TransactionConflict", "None"]);
        assert!(
            json["__type"]
                .as_str()
                .unwrap()
                .ends_with("#TransactionCanceledException")
        );
    }

    fn collect_body(body: Full<Bytes>) -> Bytes {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(body.collect())
            .unwrap()
            .to_bytes()
    }

    #[tokio::test]
    async fn a_handler_dropped_during_a_transactions_hold_releases_its_items() {
        use crate::capacity::{CapacityParams, TableKeys};
        let proxy = FaultProxy::start("http://127.0.0.1:9", FaultPlan::new(1));
        proxy.limit_capacity(Some(CapacityModel::new(
            CapacityParams::dynamodb(0.01),
            &[TableKeys::new("t", "pk", "sk")],
        )));
        let item = |k: &str| serde_json::json!({ "pk": { "S": "p" }, "sk": { "S": k } });
        let transaction = serde_json::json!({
            "TransactItems": [{ "Put": { "TableName": "t", "Item": item("a") } }],
            "ClientRequestToken": "tok"
        })
        .to_string();
        let put = serde_json::json!({ "TableName": "t", "Item": item("a") }).to_string();
        let shared = proxy.shared.clone();
        let ticket = shared
            .admit(&Operation::dynamodb("TransactWriteItems"), transaction.as_bytes())
            .expect("admitted")
            .expect("a ticket");
        assert!(ticket.answer_after().is_some(), "a transaction holds its answer");
        let ok = Response::new(Full::new(Bytes::from_static(b"{}")));
        // The client gives up during the hold (1 s at scale 0.01): hyper drops the handler.
        let dropped = tokio::time::timeout(Duration::from_millis(20), settle(Held::new(&shared, ticket), Ok(ok))).await;
        assert!(dropped.is_err(), "dropped during the hold");
        let put = shared
            .admit(&Operation::dynamodb("PutItem"), put.as_bytes())
            .expect("the item is no longer held")
            .expect("a ticket");
        shared.finish(put, StatusCode::OK, b"{}");
        assert!(
            shared
                .admit(&Operation::dynamodb("TransactWriteItems"), transaction.as_bytes())
                .is_ok(),
            "nor the token"
        );
    }

    #[test]
    #[should_panic(expected = "only exists for dynamodb.TransactWriteItems")]
    fn a_conflict_on_another_operation_is_a_test_bug() {
        let _ = FaultPlan::new(1).random(
            Operation::dynamodb("PutItem"),
            Fault::TransactionConflict(Conflicting::All),
            0.5,
        );
    }
}
