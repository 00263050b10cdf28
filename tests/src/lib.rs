//! Harness for the end-to-end tests: starts a private fakecloud on a free
//! loopback port with IAM enforced ([`iam`]; up once the AWS layer's health
//! probe says so, stopped when dropped, failing the test if it denied
//! anything), creates the kit's tables in it, and plays the stream through
//! the real handler function the way the event source mapping would.
//!
//! The emulator is required: when its binary is missing the harness panics
//! with the install command. Tests are never skipped.

pub mod capacity;
pub mod counterctl;
pub mod faults;
pub mod history;
pub mod iam;
pub mod mapping;
pub mod ministack;
pub mod process;
pub mod sdk;
pub mod spread;

pub use process::{free_port, spawn_on_free_port};
pub use sdk::sdk_config_for;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_config::{Region, SdkConfig};
use aws_lambda_events::event::dynamodb::EventRecord as Record;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, StreamSpecification,
    StreamViewType,
};
use dlq_reprocessor::PermanentFailures;
use hybrid_counter::audit::ScopeCounts;
use hybrid_counter::stream::Processor;
use hybrid_counter::stream::record::sequence_number;
use hybrid_counter::{Counter, CounterConfig, RequestStore, Scope};
use hybrid_counter_aws::streams::{Position, ShardReader};
use hybrid_counter_aws::{DynamoStore, probe};
use stream_counter::{RawStreamEvent, handle_stream_event};

/// A fakecloud process owned by one test, enforcing IAM, behind a proxy
/// that stands for TLS termination ([`faults::FaultProxy`] without faults):
/// the emulator serves plain HTTP, and would read every caller's
/// `aws:SecureTransport` as false, which no call to AWS is.
pub struct Emulator {
    /// fakecloud's process; `None` when [`ministack::Ministack`] stands in.
    child: Option<Child>,
    /// ministack standing in for fakecloud (`HCK_E2E_EMULATOR=ministack`).
    stand_in: Option<ministack::Ministack>,
    /// The proxy's: give it to SDK clients or `--endpoint-url`.
    pub endpoint: String,
    _tls: faults::FaultProxy,
    log: PathBuf,
    /// Denials a test provoked on purpose and has taken ([`Self::take_denials`]).
    taken_denials: std::sync::Mutex<usize>,
}

fn fakecloud_bin() -> PathBuf {
    std::env::var_os("FAKECLOUD_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("fakecloud"))
}

impl Emulator {
    /// Starts fakecloud on a free port and waits until it answers.
    ///
    /// With `HCK_E2E_EMULATOR=ministack` it starts ministack instead, to
    /// measure how much of the suite the second emulator passes (never in
    /// `make test`: ministack enforces no IAM, and `--target local`
    /// commands expect fakecloud).
    pub fn start() -> Self {
        if std::env::var("HCK_E2E_EMULATOR").is_ok_and(|v| v == "ministack") {
            let stand_in = ministack::Ministack::start();
            let tls = faults::FaultProxy::start(&stand_in.endpoint, faults::FaultPlan::new(0));
            return Self {
                child: None,
                endpoint: tls.endpoint.clone(),
                _tls: tls,
                log: stand_in.log.clone(),
                stand_in: Some(stand_in),
                taken_denials: Default::default(),
            };
        }
        let bin = fakecloud_bin();
        let (child, endpoint, log) = spawn_on_free_port(
            "fakecloud",
            Duration::from_secs(30),
            |port, log| {
                Command::new(&bin)
                    .args(["--addr", &format!("127.0.0.1:{port}"), "--log-level", "warn"])
                    .args(["--iam", iam::IAM_MODE])
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().expect("log handle"))
                    .stderr(log)
                    .spawn()
                    .unwrap_or_else(|e| {
                        panic!(
                            "cannot start the emulator {}: {e}. Install it with `make tools` \
                             (localstack/fakecloud.sh install) or set FAKECLOUD_BIN",
                            bin.display()
                        )
                    })
            },
            probe::healthy,
        );
        let tls = faults::FaultProxy::start(&endpoint, faults::FaultPlan::new(0));
        Self {
            child: Some(child),
            stand_in: None,
            endpoint: tls.endpoint.clone(),
            _tls: tls,
            log,
            taken_denials: Default::default(),
        }
    }

    /// SDK configuration pointing at this emulator with dummy credentials.
    pub async fn sdk_config(&self) -> SdkConfig {
        hybrid_counter_aws::sdk::defaults()
            .endpoint_url(&self.endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "e2e",
            ))
            .load()
            .await
    }
}

impl Emulator {
    /// Every request the emulator denied so far, as it logged it (the
    /// principal, the action and the resource).
    pub fn denials(&self) -> Vec<String> {
        denials_in(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// The denials since the last call, which the test provoked on purpose:
    /// they no longer fail it when the emulator stops.
    pub fn take_denials(&self) -> Vec<String> {
        let all = self.denials();
        let mut taken = self.taken_denials.lock().expect("denials lock");
        let new = all[(*taken).min(all.len())..].to_vec();
        *taken = all.len();
        new
    }
}

/// The denial lines of a fakecloud log: its IAM audit target's warnings,
/// without terminal colours.
fn denials_in(log: &str) -> Vec<String> {
    log.lines()
        .map(strip_ansi)
        .filter(|line| line.contains("fakecloud::iam::audit"))
        .collect()
}

/// One line per distinct denial: how often, who, which action, on what
/// (fakecloud's audit fields `principal`, `action`, `resource`); a line
/// without them as it is.
fn summarize_denials(lines: &[String]) -> Vec<String> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for line in lines {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
        };
        let summary = match (field("principal"), field("action"), field("resource")) {
            (Some(principal), Some(action), Some(resource)) => {
                format!("{principal} was denied {action} on {resource}")
            }
            _ => line.clone(),
        };
        match seen.iter_mut().find(|(known, _)| *known == summary) {
            Some((_, count)) => *count += 1,
            None => seen.push((summary, 1)),
        }
    }
    seen.into_iter()
        .map(|(summary, count)| format!("  {count}x {summary}"))
        .collect()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for Emulator {
    /// Stops the emulator; a request it denied that the test did not take
    /// fails the test, with what was denied to whom (and when the test
    /// failed already, probably because of it, is printed beside it).
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        drop(self.stand_in.take());
        let taken = *self.taken_denials.lock().unwrap_or_else(|p| p.into_inner());
        let denials = self.denials();
        if denials.len() <= taken {
            return;
        }
        let message = format!(
            "the emulator denied {} request(s) under IAM enforcement (log {}):\n{}",
            denials.len() - taken,
            self.log.display(),
            summarize_denials(&denials[taken..]).join("\n")
        );
        if std::thread::panicking() {
            eprintln!("{message}");
        } else {
            panic!("{message}");
        }
    }
}

/// The kit wired to a fresh pair of tables in a private emulator.
pub struct Kit {
    pub emulator: Emulator,
    pub config: CounterConfig,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub store: DynamoStore,
    pub counter: Counter<DynamoStore>,
    pub processor: Processor<DynamoStore>,
    pub reader: ShardReader,
    /// Last sequence number handed to the processor, per shard.
    cursors: std::collections::HashMap<String, String>,
}

impl Kit {
    /// Starts an emulator and creates the tables; `default_limit` applies to
    /// scopes without an override.
    pub async fn start(default_limit: u64) -> Self {
        let emulator = Emulator::start();
        let sdk = emulator.sdk_config().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let config = CounterConfig {
            resources_table: "hck-resources".into(),
            counters_table: "hck-counters".into(),
            default_limit: Some(default_limit),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Default::default(),
            scope_keys: Default::default(),
        };
        let stream_arn = create_tables(&dynamodb, &config).await;
        let store = DynamoStore::new(dynamodb.clone(), &config);
        let reader = ShardReader::new(aws_sdk_dynamodbstreams::Client::new(&sdk), stream_arn);
        Self {
            counter: Counter::new(store.clone(), default_limit),
            processor: Processor::new(store.clone()),
            store,
            reader,
            dynamodb,
            config,
            emulator,
            cursors: Default::default(),
        }
    }

    /// What the reprocessor needs besides the processor: this kit's stream,
    /// and a DLQ2 queue (`hck-dlq2`, created on first use) for the messages
    /// that can never be replayed.
    pub async fn permanent_failures(&self) -> PermanentFailures {
        let sqs = aws_sdk_sqs::Client::new(&self.emulator.sdk_config().await);
        let dlq2_url = sqs
            .create_queue()
            .queue_name("hck-dlq2")
            .send()
            .await
            .expect("create DLQ2")
            .queue_url
            .expect("DLQ2's URL");
        PermanentFailures {
            sqs,
            dlq2_url,
            stream_arn: self.reader.stream_arn().to_owned(),
        }
    }

    /// Every record of every shard from the trim horizon, in shard order.
    pub async fn all_records(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for shard in self.reader.shards().await.expect("describe stream") {
            records.extend(
                self.reader
                    .read(&shard.shard_id, &Position::TrimHorizon, usize::MAX)
                    .await
                    .expect("read shard"),
            );
        }
        records
    }

    /// Records not yet handed to the processor by [`Self::drain`].
    pub async fn new_records(&mut self) -> Vec<Record> {
        read_new_records(&self.reader, &mut self.cursors).await
    }

    /// Hands `records` to the stream handler as one Lambda batch and returns
    /// its partial batch response's failed sequence numbers.
    pub async fn deliver(&self, records: &[Record]) -> Vec<String> {
        deliver_with(&self.processor, records).await
    }

    /// Reads and delivers new records until the stream has none left,
    /// returning how many records were delivered. Panics on a failure.
    pub async fn drain(&mut self) -> usize {
        let mut delivered = 0;
        loop {
            let records = self.new_records().await;
            if records.is_empty() {
                return delivered;
            }
            delivered += records.len();
            for batch in records.chunks(100) {
                let failed = self.deliver(batch).await;
                assert!(failed.is_empty(), "stream batch reported failures: {failed:?}");
            }
        }
    }

    pub async fn counts(&self, scope: &Scope) -> ScopeCounts {
        hybrid_counter::audit::count_scope(&self.store, scope)
            .await
            .expect("count scope")
    }

    /// The invariants that hold at every instant (see [`assert_invariants`]).
    pub async fn assert_invariants(&self, scope: &Scope) -> (ScopeCounts, hybrid_counter::items::CounterSnapshot) {
        assert_invariants(&self.store, scope).await
    }

    /// After a drain: EC equals the live count and nothing is pending.
    pub async fn assert_converged(&self, scope: &Scope) {
        let (counts, snapshot) = self.assert_invariants(scope).await;
        assert_eq!(
            snapshot.eventual, counts.live as i64,
            "EC must equal live after drain: {counts:?}"
        );
        assert_eq!(counts.pending_create, 0, "{counts:?}");
        assert_eq!(counts.pending_delete, 0, "{counts:?}");
    }
}

/// An operator's clock once every write so far (the tests' own at
/// [`hybrid_counter::now_millis`] or at a fixed time before it) is older than
/// the audit's grace period: when a repair held back for requests that may
/// be in flight is written.
pub fn after_grace() -> hybrid_counter::EpochMillis {
    hybrid_counter::now_millis() + hybrid_counter::audit::REQUEST_GRACE_MS + 1_000
}

/// The kit's audit engine on one scope of `store`, read by the store's
/// admission mode, with `attempts` tries.
pub async fn audit(
    store: &DynamoStore,
    scope: &Scope,
    mode: hybrid_counter::audit::RepairMode,
    attempts: u32,
    now: hybrid_counter::EpochMillis,
) -> Result<hybrid_counter::audit::ScopeAudit, hybrid_counter::error::StoreError> {
    hybrid_counter::audit::Auditor::new(store, store.admission())
        .with_attempts(attempts)
        .audit_scope(scope, mode, now)
        .await
}

/// The invariants that hold at every instant: EC equals the number of
/// processed items, BE never exceeds the live count. Returns the counts.
pub async fn assert_invariants(
    store: &DynamoStore,
    scope: &Scope,
) -> (ScopeCounts, hybrid_counter::items::CounterSnapshot) {
    let counts = hybrid_counter::audit::count_scope(store, scope)
        .await
        .expect("count scope");
    let snapshot = store.read_counters(scope).await.expect("read counters");
    assert_eq!(
        snapshot.eventual, counts.processed as i64,
        "EC must equal the processed count in {scope}: {snapshot:?} vs {counts:?}"
    );
    assert!(
        snapshot.best_effort <= counts.live as i64,
        "BE must never exceed the live count in {scope}: {snapshot:?} vs {counts:?}"
    );
    (counts, snapshot)
}

/// The kit's handler functions in process, as the binaries run them: the
/// DLQ reprocessor for a function name ending in `-dlq-reprocessor`, the
/// drift check for one ending in `-drift-check`, else the stream counter.
/// Each runs as the deployed function runs on Lambda: with the credentials
/// of its own execution role ([`iam::function_sdk_config`]) and its
/// deployed environment, both read from the emulator's Lambda API on its
/// first invocation (what the runner hands the real binary). The
/// stream counter and the reprocessor work on `config`'s tables.
#[derive(Clone)]
pub struct KitFunctions {
    config: CounterConfig,
    sdk: SdkConfig,
    deployed: std::sync::Arc<tokio::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<DeployedFunction>>>>,
}

/// One deployed function, in process.
struct DeployedFunction {
    /// Its deployed environment variables.
    environment: std::collections::HashMap<String, String>,
    /// The emulator, with its role's credentials.
    sdk: SdkConfig,
    /// The stream processing of `config`'s tables, as the function.
    processor: Processor<DynamoStore>,
}

impl KitFunctions {
    /// `sdk` reaches the emulator (directly or through a fault proxy) as
    /// the test's admin identity, which reads the functions' configuration
    /// and obtains their roles' credentials.
    pub fn new(config: &CounterConfig, sdk: &SdkConfig) -> Self {
        Self {
            config: config.clone(),
            sdk: sdk.clone(),
            deployed: Default::default(),
        }
    }

    /// The deployed `function`, with its role and environment.
    async fn deployed(&self, function: &str) -> std::sync::Arc<DeployedFunction> {
        let mut known = self.deployed.lock().await;
        if let Some(deployed) = known.get(function) {
            return deployed.clone();
        }
        let configuration = aws_sdk_lambda::Client::new(&self.sdk)
            .get_function_configuration()
            .function_name(function)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "read the deployed configuration of {function}: {}",
                    aws_sdk_lambda::error::DisplayErrorContext(e)
                )
            });
        let environment = configuration
            .environment()
            .and_then(|e| e.variables())
            .cloned()
            .unwrap_or_default();
        let sdk = iam::function_sdk_config(&self.sdk, function).await;
        let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &self.config);
        let processor = self.config.processor(store);
        let deployed = std::sync::Arc::new(DeployedFunction {
            environment,
            sdk,
            processor,
        });
        known.insert(function.to_owned(), deployed.clone());
        deployed
    }

    /// The drift check's handler over the tables and settings of its
    /// deployed environment, as its binary reads them.
    async fn drift_check(deployed: &DeployedFunction, payload: serde_json::Value) -> Result<serde_json::Value, String> {
        let lookup = |name: &str| deployed.environment.get(name).cloned();
        let config = CounterConfig::from_lookup(lookup).map_err(|e| e.to_string())?;
        let settings = drift_check::Settings::from_lookup(lookup).map_err(|e| e.to_string())?;
        let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&deployed.sdk), &config);
        let event = lambda_runtime::LambdaEvent::new(payload, lambda_runtime::Context::default());
        let outcome = drift_check::handle_drift_check(
            &store,
            &hybrid_counter_aws::s3::client(&deployed.sdk),
            &config,
            &settings,
            &hybrid_counter::Clock::system(),
            event,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(serde_json::to_value(outcome).unwrap_or_default())
    }

    /// The reprocessor's handler, with the stream and DLQ2 of its deployed
    /// environment.
    async fn reprocess(deployed: &DeployedFunction, payload: serde_json::Value) -> Result<serde_json::Value, String> {
        let sqs = aws_sdk_sqs::Client::new(&deployed.sdk);
        let permanent = PermanentFailures::from_lookup(sqs, |name| deployed.environment.get(name).cloned())
            .map_err(|e| e.to_string())?;
        let sources = dlq_reprocessor::Sources {
            streams: aws_sdk_dynamodbstreams::Client::new(&deployed.sdk),
            s3: hybrid_counter_aws::s3::client(&deployed.sdk),
        };
        let event = serde_json::from_value(payload).map_err(|e| e.to_string())?;
        dlq_reprocessor::handle_dlq_event(
            &deployed.processor,
            &sources,
            &permanent,
            lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()),
        )
        .await
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .map_err(|e| e.to_string())
    }

    /// Invokes the handler of `function` with a Lambda `payload`.
    pub async fn invoke(&self, function: &str, payload: serde_json::Value) -> esm_runner::Invocation {
        // Boxed: the SDK calls' futures would make every invocation's larger.
        let deployed = Box::pin(self.deployed(function)).await;
        let result = if function.ends_with("-drift-check") {
            Self::drift_check(&deployed, payload).await
        } else if function.ends_with("-dlq-reprocessor") {
            Self::reprocess(&deployed, payload).await
        } else {
            return invoke_stream_counter(&deployed.processor, payload).await;
        };
        match result {
            Ok(response) => esm_runner::Invocation::Response(response),
            Err(message) => esm_runner::Invocation::error("Handler", &message),
        }
    }
}

/// Invokes the stream counter's handler function in process.
pub async fn invoke_stream_counter(
    processor: &Processor<DynamoStore>,
    payload: serde_json::Value,
) -> esm_runner::Invocation {
    let result = match serde_json::from_value(payload) {
        Ok(event) => handle_stream_event(
            processor,
            lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()),
        )
        .await
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(response) => esm_runner::Invocation::Response(response),
        Err(message) => esm_runner::Invocation::error("Handler", &message),
    }
}

/// Delivers `records` to the real stream handler function as one Lambda
/// event from `stream_arn`; returns the failed item identifiers.
pub async fn deliver_with(processor: &Processor<DynamoStore>, records: &[Record]) -> Vec<String> {
    let event = RawStreamEvent {
        records: records
            .iter()
            .map(|r| serde_json::to_value(r).expect("a stream record"))
            .collect(),
    };
    let response = handle_stream_event(
        processor,
        lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()),
    )
    .await
    .expect("stream handler invocation");
    response
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier.unwrap_or_default())
        .collect()
}

/// Creates the resources table (with a NEW_AND_OLD_IMAGES stream) and the
/// counters table; returns the stream ARN.
pub async fn create_tables(client: &aws_sdk_dynamodb::Client, config: &CounterConfig) -> String {
    let key = |name: &str, kind: KeyType| KeySchemaElement::builder().attribute_name(name).key_type(kind).build();
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
    };
    let resources = client
        .create_table()
        .table_name(&config.resources_table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("scope", KeyType::Hash).unwrap())
        .key_schema(key("id", KeyType::Range).unwrap())
        .attribute_definitions(attr("scope").unwrap())
        .attribute_definitions(attr("id").unwrap())
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create resources table");
    client
        .create_table()
        .table_name(&config.counters_table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("scope", KeyType::Hash).unwrap())
        .key_schema(key("name", KeyType::Range).unwrap())
        .attribute_definitions(attr("scope").unwrap())
        .attribute_definitions(attr("name").unwrap())
        .send()
        .await
        .expect("create counters table");
    resources
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .expect("resources table has a stream")
        .to_owned()
}

/// Runs every event source mapping deployed in the emulator at `endpoint`
/// until idle (see [`in_process_runner`]).
pub async fn drain_deployed(endpoint: &str, config: &CounterConfig) -> esm_runner::RunReport {
    in_process_runner(endpoint, config)
        .await
        .run_until_idle()
        .await
        .expect("the deployed mappings drain")
}

/// A local runner for the mappings deployed in the emulator at `endpoint`
/// that invokes the kit's handler functions in process, each with its own
/// role ([`KitFunctions`]), against `config`'s tables: what `counterctl
/// local run` does with the real binaries, minus the binaries' processes.
pub async fn in_process_runner(endpoint: &str, config: &CounterConfig) -> esm_runner::Runner<impl esm_runner::Invoke> {
    in_process_runner_on(endpoint, config, esm_runner::Host::Fakecloud).await
}

/// [`in_process_runner`] for an emulator of the kind `host` (on
/// `Host::LocalStack` it disables the emulator's own copies of the mappings
/// while it plays them, as `local run --target localstack` does).
pub async fn in_process_runner_on(
    endpoint: &str,
    config: &CounterConfig,
    host: esm_runner::Host,
) -> esm_runner::Runner<impl esm_runner::Invoke> {
    use esm_runner::{FnInvoker, Runner, RunnerConfig};
    let functions = KitFunctions::new(config, &sdk_config_for(endpoint).await);
    let invoker = FnInvoker::new(move |function: String, payload: serde_json::Value| {
        let functions = functions.clone();
        async move { Ok(functions.invoke(&function, payload).await) }
    });
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf();
    let mut runner_config = RunnerConfig::new(endpoint, workspace);
    runner_config.host = host;
    runner_config.poll_interval = Duration::from_millis(100);
    runner_config.retry_delay = Duration::from_millis(10);
    runner_config.idle_timeout = Duration::from_secs(120);
    Runner::connect(runner_config, invoker)
        .await
        .expect("connect the local runner")
}

/// Plays `runner`'s mappings while `work` runs, and stops it once `work` is
/// done: what an operator's command meets on a live stack, with the stream
/// counter busy beside it. Returns `work`'s output and the run's report.
pub async fn run_beside<T>(
    runner: &esm_runner::Runner<impl esm_runner::Invoke>,
    work: impl std::future::Future<Output = T>,
) -> (T, Result<esm_runner::RunReport, esm_runner::Error>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let work = async {
        let output = work.await;
        let _ = stop.send(());
        output
    };
    tokio::join!(
        work,
        runner.run(async {
            let _ = stopped.await;
        })
    )
}

/// What the tests read from a runner's report.
pub trait RunReportExt {
    /// The report of the (first) mapping targeting `function_name`.
    fn for_function(&self, function_name: &str) -> esm_runner::MappingReport;
}

impl RunReportExt for esm_runner::RunReport {
    fn for_function(&self, function_name: &str) -> esm_runner::MappingReport {
        self.mappings
            .values()
            .find(|m| m.function_name == function_name)
            .cloned()
            .unwrap_or_default()
    }
}

/// One HTTP/1.1 request to `url` (`http://HOST:PORT/`) + `path`; returns
/// the status, the `Location` header and the JSON body (`null` when empty).
pub async fn http_call(
    url: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, Option<String>, serde_json::Value) {
    http_call_with(url, method, path, &[("content-type", content_type)], body).await
}

/// [`http_call`], with a connection that could not be made or was cut
/// before the answer as an error (a served function restarting).
pub async fn try_http_call(
    url: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Result<(u16, Option<String>, serde_json::Value), String> {
    try_http_call_with(url, method, path, &[("content-type", content_type)], body).await
}

/// [`http_call`] with the request's `headers`.
pub async fn http_call_with(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Option<String>, serde_json::Value) {
    try_http_call_with(url, method, path, headers, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// [`http_call_with`], a failed connection as an error.
async fn try_http_call_with(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, Option<String>, serde_json::Value), String> {
    use http_body_util::BodyExt as _;
    use hyper::header::{HOST, LOCATION};
    let address = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix('/'))
        .expect("http://HOST:PORT/");
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    let mut request = hyper::Request::builder().method(method).uri(path).header(HOST, address);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(body.to_owned())))
        .expect("request");
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("response: {e}"))?;
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.into_body().collect().await.expect("body").to_bytes();
    let json = if body.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&body)))
    };
    Ok((status, location, json))
}

/// The `Records` of a Lambda event payload.
pub fn records(payload: &serde_json::Value) -> Vec<serde_json::Value> {
    payload["Records"].as_array().cloned().unwrap_or_default()
}

/// The item ids (`Keys.id.S`) of a stream event payload's records.
pub fn item_ids(payload: &serde_json::Value) -> Vec<String> {
    records(payload)
        .iter()
        .map(|r| r["dynamodb"]["Keys"]["id"]["S"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Every message of the queue at `url`, with all its attributes; each is
/// received, so hidden for a minute.
pub async fn receive_all(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    let mut messages = Vec::new();
    loop {
        let page = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .message_attribute_names("All")
            .send()
            .await
            .expect("receive")
            .messages
            .unwrap_or_default();
        if page.is_empty() {
            return messages;
        }
        messages.extend(page);
    }
}

/// `(visible, in flight)` messages of the queue at `url` (SQS's approximate
/// counts, read the way `counterctl redrive` reads them).
pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> (u64, u64) {
    let depth = ops_cli::commands::redrive::queue_depth(sqs, url)
        .await
        .expect("queue attributes");
    (depth.visible, depth.in_flight)
}

/// Every record of every shard after `cursors` (the last sequence number
/// read per shard; from the trim horizon for a shard not in it), in shard
/// order; moves the cursors past what it returns.
pub async fn read_new_records(
    reader: &ShardReader,
    cursors: &mut std::collections::HashMap<String, String>,
) -> Vec<Record> {
    let mut records = Vec::new();
    for shard in reader.shards().await.expect("describe stream") {
        let position = cursors
            .get(&shard.shard_id)
            .map_or(Position::TrimHorizon, |seq| Position::After(seq.clone()));
        let read = reader
            .read(&shard.shard_id, &position, usize::MAX)
            .await
            .expect("read shard");
        if let Some(last) = read.last().map(sequence_number) {
            cursors.insert(shard.shard_id.clone(), last.to_owned());
        }
        records.extend(read);
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_denial_is_reported_once_with_its_principal_action_and_resource() {
        let line = "2026-11-25T12:58:15.426488Z  \u{1b}[33mWARN\u{1b}[0m fakecloud::iam::audit: IAM policy evaluation \
                    denied request service=dynamodb action=dynamodb:BatchGetItem \
                    resource=arn:aws:dynamodb:us-east-1:123456789012:table/t \
                    principal=arn:aws:sts::123456789012:assumed-role/r/f decision=ImplicitDeny mode=strict";
        let log = format!("{line}\nINFO something else\n{line}\n");
        let denials = denials_in(&log);
        assert_eq!(denials.len(), 2);
        assert_eq!(
            summarize_denials(&denials),
            [
                "  2x arn:aws:sts::123456789012:assumed-role/r/f was denied dynamodb:BatchGetItem on \
              arn:aws:dynamodb:us-east-1:123456789012:table/t"
            ]
        );
    }
}
