//! The local event-source runner (`esm-runner`) against a private emulator:
//! mappings are created through the emulator's Lambda API, the runner reads
//! them back and plays them. Each test pins one mapping semantic; the
//! functions are in-process closures (most run the real handler functions
//! of the library), except the last test, which runs the real
//! `stream-counter` binary under `cargo lambda watch`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_lambda::operation::create_event_source_mapping::builders::CreateEventSourceMappingFluentBuilder;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{
    DestinationConfig, Environment, EventSourcePosition, Filter, FilterCriteria, FunctionCode, FunctionResponseType,
    OnFailure, Runtime,
};
use aws_sdk_sqs::types::QueueAttributeName;
use e2e::Kit;
use e2e::{RunReportExt, item_ids, records};
use esm_runner::{FnInvoker, Invocation, Invoke, Runner, RunnerConfig};
use hybrid_counter::Scope;
use hybrid_counter::config::{ENV_COUNTERS_TABLE, ENV_RESOURCES_TABLE};
use hybrid_counter::metrics::MappingMetric;
use hybrid_counter::stream::Processor;
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::replay::OnFailureRecord;
use serde_dynamo::Item;
use serde_json::{Value, json};

use crate::{NOW, id, scope};

/// An empty zip: the emulator stores the code, it never runs it.
const EMPTY_ZIP: &[u8] = &[
    0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];
/// The role of the functions these tests create: the runner runs each
/// function with its role's credentials, as Lambda does. These tests are
/// about the runner's semantics, on the harness' own tables; the kit's
/// least-privilege roles are tested on the deployed stack.
const ROLE_NAME: &str = "hck-local";
const ROLE: &str = "arn:aws:iam::123456789012:role/hck-local";

/// A kit in a private emulator plus the Lambda and SQS clients to deploy
/// mappings into it.
struct Local {
    kit: Kit,
    lambda: aws_sdk_lambda::Client,
    sqs: aws_sdk_sqs::Client,
}

impl Local {
    async fn start() -> Self {
        let kit = Kit::start(1_000).await;
        let sdk = kit.emulator.sdk_config().await;
        Self::create_role(&sdk, &kit.config).await;
        Self {
            lambda: aws_sdk_lambda::Client::new(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            kit,
        }
    }

    /// [`ROLE`]: assumable by Lambda and by the account (the local runner),
    /// allowed to read and write the harness' tables and their stream.
    async fn create_role(sdk: &aws_config::SdkConfig, config: &hybrid_counter::CounterConfig) {
        let iam = aws_sdk_iam::Client::new(sdk);
        let trust = json!({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com", "AWS": "arn:aws:iam::123456789012:root"},
            "Action": "sts:AssumeRole",
        }]});
        iam.create_role()
            .role_name(ROLE_NAME)
            .assume_role_policy_document(trust.to_string())
            .send()
            .await
            .expect("create the functions' role");
        let tables: Vec<String> = [&config.resources_table, &config.counters_table]
            .iter()
            .flat_map(|t| {
                let table = format!("arn:aws:dynamodb:us-east-1:123456789012:table/{t}");
                [format!("{table}/stream/*"), table]
            })
            .collect();
        let policy = json!({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow",
            "Action": "dynamodb:*",
            "Resource": tables,
        }]});
        iam.put_role_policy()
            .role_name(ROLE_NAME)
            .policy_name("harness-tables")
            .policy_document(policy.to_string())
            .send()
            .await
            .expect("put the functions' policy");
    }

    fn stream_arn(&self) -> String {
        self.kit.reader.stream_arn().to_owned()
    }

    /// Creates a function with the stack's environment; returns its ARN.
    async fn function(&self, name: &str) -> String {
        let keys = self.kit.config.scope_keys;
        let env = Environment::builder()
            .variables(ENV_RESOURCES_TABLE, &self.kit.config.resources_table)
            .variables(ENV_COUNTERS_TABLE, &self.kit.config.counters_table)
            .variables(hybrid_counter::config::ENV_SCOPE_KEYS, keys.count().to_string())
            .variables(
                hybrid_counter::config::ENV_RESOURCE_KEY_SPREAD,
                keys.spread().to_string(),
            )
            .build();
        self.lambda
            .create_function()
            .function_name(name)
            .runtime(Runtime::Providedal2023)
            .handler("bootstrap")
            .role(ROLE)
            .code(FunctionCode::builder().zip_file(Blob::new(EMPTY_ZIP)).build())
            .environment(env)
            .send()
            .await
            .expect("create function")
            .function_arn
            .expect("function arn")
    }

    /// Creates a queue; returns its URL and ARN.
    async fn queue(&self, name: &str, visibility_timeout: u32, redrive: Option<(&str, u32)>) -> (String, String) {
        let mut create = self
            .sqs
            .create_queue()
            .queue_name(name)
            .attributes(QueueAttributeName::VisibilityTimeout, visibility_timeout.to_string());
        if let Some((dlq_arn, max_receive_count)) = redrive {
            create = create.attributes(
                QueueAttributeName::RedrivePolicy,
                json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}).to_string(),
            );
        }
        let url = create.send().await.expect("create queue").queue_url.expect("queue url");
        let arn = self
            .sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("queue attributes")
            .attributes
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .expect("queue arn");
        (url, arn)
    }

    /// A mapping from `source_arn` to `function`, configured by `settings`.
    async fn mapping(
        &self,
        source_arn: &str,
        function: &str,
        settings: impl FnOnce(CreateEventSourceMappingFluentBuilder) -> CreateEventSourceMappingFluentBuilder,
    ) -> String {
        settings(
            self.lambda
                .create_event_source_mapping()
                .event_source_arn(source_arn)
                .function_name(function),
        )
        .send()
        .await
        .expect("create event source mapping")
        .uuid
        .expect("mapping uuid")
    }

    /// The stream mapping of the stack: kit filter, partial batch
    /// responses, from the trim horizon.
    async fn stream_mapping(
        &self,
        function: &str,
        settings: impl FnOnce(CreateEventSourceMappingFluentBuilder) -> CreateEventSourceMappingFluentBuilder,
    ) -> String {
        let filters = hybrid_counter::stream::filter::patterns()
            .iter()
            .fold(FilterCriteria::builder(), |c, p| {
                c.filters(Filter::builder().pattern(p.to_string()).build())
            })
            .build();
        self.mapping(&self.stream_arn(), function, |m| {
            settings(
                m.starting_position(EventSourcePosition::TrimHorizon)
                    .filter_criteria(filters)
                    .function_response_types(FunctionResponseType::ReportBatchItemFailures),
            )
        })
        .await
    }

    fn config(&self) -> RunnerConfig {
        let mut config = RunnerConfig::new(&self.kit.emulator.endpoint, workspace());
        config.retry_delay = Duration::from_millis(10);
        config.poll_interval = Duration::from_millis(100);
        config.idle_timeout = Duration::from_secs(60);
        config
    }

    async fn runner<I: Invoke>(&self, invoker: I) -> Runner<I> {
        Runner::connect(self.config(), invoker)
            .await
            .expect("connect the runner")
    }

    async fn create(&self, s: &Scope, ids: impl IntoIterator<Item = String>) {
        for n in ids {
            self.kit.counter.create(s, &id(&n), Item::default(), NOW).await.unwrap();
        }
    }

    /// Bodies of every message in a queue (they are received, not deleted).
    async fn bodies(&self, url: &str) -> Vec<String> {
        let mut bodies = Vec::new();
        loop {
            let out = self
                .sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .visibility_timeout(60)
                .send()
                .await
                .expect("receive");
            let page = out.messages.unwrap_or_default();
            if page.is_empty() {
                return bodies;
            }
            bodies.extend(page.into_iter().filter_map(|m| m.body));
        }
    }

    async fn queue_depth(&self, url: &str) -> (u64, u64) {
        e2e::queue_depth(&self.sqs, url).await
    }
}

fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Runs the library's stream handler function on an event, as the
/// stream-counter binary does.
async fn stream_handler(processor: Processor<DynamoStore>, payload: Value) -> Invocation {
    e2e::invoke_stream_counter(&processor, payload).await
}

fn sequence_numbers(payload: &Value) -> Vec<String> {
    records(payload)
        .iter()
        .map(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn event_names(payload: &Value) -> Vec<String> {
    records(payload)
        .iter()
        .map(|r| r["eventName"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Payloads a test invoker saw, in order.
type Seen = Arc<Mutex<Vec<Value>>>;

/// Logs one invocation's payload; whether it was the first.
fn log_call(log: &Seen, payload: &Value) -> bool {
    let mut log = log.lock().unwrap();
    log.push(payload.clone());
    log.len() == 1
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test]
async fn stream_batches_never_exceed_the_mappings_batch_size() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 7)).await;
    let function = local.function("hck-stream-counter").await;
    local.stream_mapping(&function, |m| m.batch_size(3)).await;
    let seen: Seen = Seen::default();
    let (processor, log) = (local.kit.processor.clone(), seen.clone());
    let runner = local
        .runner(FnInvoker::new(move |_, payload: Value| {
            log.lock().unwrap().push(payload.clone());
            let processor = processor.clone();
            async move { Ok(stream_handler(processor, payload).await) }
        }))
        .await;
    let report = runner.run_until_idle().await.expect("drained");
    let sizes: Vec<usize> = seen.lock().unwrap().iter().map(|p| records(p).len()).collect();
    assert_eq!(sizes, [3, 3, 1], "seven INSERTs in batches of at most three");
    assert_eq!(report.for_function("hck-stream-counter").records_delivered, 7);
    local.kit.assert_converged(&s).await;
}

#[tokio::test]
async fn the_filter_drops_the_handlers_own_writes_without_an_invocation() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 5)).await;
    local.kit.counter.delete(&s, &id("w1"), NOW).await.unwrap();
    let function = local.function("hck-stream-counter").await;
    local.stream_mapping(&function, |m| m.batch_size(100)).await;
    let seen: Seen = Seen::default();
    let (processor, log) = (local.kit.processor.clone(), seen.clone());
    let runner = local
        .runner(FnInvoker::new(move |_, payload: Value| {
            log.lock().unwrap().push(payload.clone());
            let processor = processor.clone();
            async move { Ok(stream_handler(processor, payload).await) }
        }))
        .await;
    let report = runner
        .run_until_idle()
        .await
        .expect("drained")
        .for_function("hck-stream-counter");
    let delivered: Vec<String> = seen.lock().unwrap().iter().flat_map(event_names).collect();
    assert_eq!(
        delivered,
        ["INSERT", "INSERT", "INSERT", "INSERT", "INSERT", "MODIFY"],
        "only uncounted INSERTs and the soft delete reach the function"
    );
    // The handler's writes: five flag flips (MODIFY) and the hard delete
    // (REMOVE) of the soft-deleted item, all dropped by the filter.
    assert_eq!(report.records_filtered, 6, "{report:?}");
    assert_eq!(report.invocations, 1, "{report:?}");
    // Lambda's PolledEventCount: every record read once, delivered or filtered.
    assert_eq!(report.records_polled, 12, "{report:?}");
    assert_eq!(report.records_failed_invoke, 0, "{report:?}");
    local.kit.assert_converged(&s).await;
    assert_eq!(local.kit.counter.usage(&s).await.unwrap().eventual, 4);
}

#[tokio::test]
async fn a_partial_batch_response_checkpoints_before_the_lowest_failure_and_retries_from_it() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 6)).await;
    let function = local.function("hck-stream-counter").await;
    let uuid = local.stream_mapping(&function, |m| m.batch_size(10)).await;
    let seen: Seen = Seen::default();
    let (processor, log) = (local.kit.processor.clone(), seen.clone());
    let runner = local
        .runner(FnInvoker::new(move |_, payload: Value| {
            let first = log_call(&log, &payload);
            let processor = processor.clone();
            async move {
                if !first {
                    return Ok(stream_handler(processor, payload).await);
                }
                // The first attempt processes w0 and w1, then reports w4
                // and w2 (out of order) as failed.
                let mut head = payload.clone();
                head["Records"] = Value::Array(records(&payload)[..2].to_vec());
                stream_handler(processor, head).await;
                let seqs = sequence_numbers(&payload);
                Ok(Invocation::Response(json!({"batchItemFailures": [
                    {"itemIdentifier": seqs[4]}, {"itemIdentifier": seqs[2]}
                ]})))
            }
        }))
        .await;
    let report = runner.run_until_idle().await.expect("drained").mapping(&uuid);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(item_ids(&seen[0]), ids("w", 6));
    assert_eq!(
        item_ids(&seen[1]),
        ["w2", "w3", "w4", "w5"],
        "the retry starts at the lowest failed sequence number"
    );
    assert_eq!(seen.len(), 2);
    assert_eq!((report.partial_failures, report.retries), (1, 1), "{report:?}");
    // As the mapping's metrics: w2..w5 failed in the first invocation and
    // were invoked again; the six inserts and their six flag flips were read.
    let counts = report.event_counts();
    let count = |metric: MappingMetric| counts.iter().find(|(m, _)| *m == metric).map(|(_, n)| *n);
    assert_eq!(count(MappingMetric::FailedInvoke), Some(4), "{report:?}");
    assert_eq!(count(MappingMetric::Invoked), Some(10), "{report:?}");
    assert_eq!(count(MappingMetric::Polled), Some(12), "{report:?}");
    assert_eq!(count(MappingMetric::Dropped), Some(0), "{report:?}");
    local.kit.assert_converged(&s).await;
    assert_eq!(local.kit.counter.usage(&s).await.unwrap().eventual, 6);
}

#[tokio::test]
async fn an_unusable_item_identifier_fails_and_retries_the_whole_batch() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 3)).await;
    let function = local.function("hck-stream-counter").await;
    let uuid = local.stream_mapping(&function, |m| m.batch_size(10)).await;
    let seen: Seen = Seen::default();
    let (processor, log) = (local.kit.processor.clone(), seen.clone());
    let runner = local
        .runner(FnInvoker::new(move |_, payload: Value| {
            let first = log_call(&log, &payload);
            let processor = processor.clone();
            async move {
                if first {
                    return Ok(Invocation::Response(
                        json!({"batchItemFailures": [{"itemIdentifier": ""}]}),
                    ));
                }
                Ok(stream_handler(processor, payload).await)
            }
        }))
        .await;
    let report = runner.run_until_idle().await.expect("drained").mapping(&uuid);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(item_ids(&seen[1]), ids("w", 3), "the whole batch is delivered again");
    assert_eq!(report.retries, 1);
    local.kit.assert_converged(&s).await;
}

#[tokio::test]
async fn bisect_on_function_error_isolates_a_poison_record() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 8)).await;
    let (dlq1_url, dlq1_arn) = local.queue("hck-dlq1", 30, None).await;
    let function = local.function("hck-stream-counter").await;
    let uuid = local
        .stream_mapping(&function, |m| {
            m.batch_size(8)
                .bisect_batch_on_function_error(true)
                .maximum_retry_attempts(2)
                .destination_config(
                    DestinationConfig::builder()
                        .on_failure(OnFailure::builder().destination(&dlq1_arn).build())
                        .build(),
                )
        })
        .await;
    let seen: Seen = Seen::default();
    let (processor, log) = (local.kit.processor.clone(), seen.clone());
    let runner = local
        .runner(FnInvoker::new(move |_, payload: Value| {
            log.lock().unwrap().push(payload.clone());
            let processor = processor.clone();
            async move {
                if item_ids(&payload).iter().any(|i| i == "w5") {
                    return Ok(Invocation::error("Poison", "w5 cannot be processed"));
                }
                Ok(stream_handler(processor, payload).await)
            }
        }))
        .await;
    let report = runner.run_until_idle().await.expect("drained").mapping(&uuid);
    let batches: Vec<Vec<String>> = seen.lock().unwrap().iter().map(item_ids).collect();
    assert_eq!(batches[0].len(), 8);
    assert_eq!(report.bisects, 3, "8 -> 4 -> 2 -> 1: {batches:?}");
    assert_eq!(
        report.retries, 2,
        "bisecting used no retries; the poison record alone used both"
    );
    let poison_attempts = batches.iter().filter(|b| b.as_slice() == ["w5"]).count();
    assert_eq!(poison_attempts, 3, "one attempt and two retries: {batches:?}");
    let bodies = local.bodies(&dlq1_url).await;
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let failure = OnFailureRecord::from_body(&bodies[0]).expect("AWS's on-failure format");
    assert_eq!(failure.batch_info.batch_size, 1);
    assert_eq!(
        failure.batch_info.start_sequence_number,
        failure.batch_info.end_sequence_number
    );
    // The seven other records were counted; the poison one waits in DLQ1.
    local.kit.assert_invariants(&s).await;
    assert_eq!(local.kit.counter.usage(&s).await.unwrap().eventual, 7);
    assert_eq!(local.kit.counts(&s).await.pending_create, 1);
}

#[tokio::test]
async fn exhausted_retries_send_the_on_failure_record_to_dlq1_in_aws_format() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 3)).await;
    let (dlq1_url, dlq1_arn) = local.queue("hck-dlq1", 30, None).await;
    let function = local.function("hck-stream-counter").await;
    let uuid = local
        .stream_mapping(&function, |m| {
            m.batch_size(10).maximum_retry_attempts(1).destination_config(
                DestinationConfig::builder()
                    .on_failure(OnFailure::builder().destination(&dlq1_arn).build())
                    .build(),
            )
        })
        .await;
    let seen: Seen = Seen::default();
    let log = seen.clone();
    let runner = local
        .runner(FnInvoker::new(move |_, payload: Value| {
            log.lock().unwrap().push(payload);
            async { Ok(Invocation::error("Boom", "always fails")) }
        }))
        .await;
    let report = runner.run_until_idle().await.expect("drained").mapping(&uuid);
    assert_eq!(report.invocations, 2, "the first attempt and one retry");
    assert_eq!((report.batches_to_on_failure, report.records_to_on_failure), (1, 3));
    let delivered = seen.lock().unwrap()[0].clone();
    let seqs = sequence_numbers(&delivered);
    let bodies = local.bodies(&dlq1_url).await;
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let failure = OnFailureRecord::from_body(&bodies[0]).expect("AWS's on-failure format");
    assert_eq!(failure.request_context.condition, "RetryAttemptsExhausted");
    assert_eq!(failure.request_context.function_arn, function);
    assert_eq!(failure.request_context.approximate_invoke_count, 2);
    assert_eq!(failure.batch_info.stream_arn, local.stream_arn());
    assert_eq!(failure.batch_info.batch_size, 3);
    assert_eq!(failure.batch_info.start_sequence_number, seqs[0]);
    assert_eq!(failure.batch_info.end_sequence_number, seqs[2]);
    let shard = local.kit.reader.shards().await.unwrap().remove(0).shard_id;
    assert_eq!(failure.batch_info.shard_id, shard);
    assert!(!failure.batch_info.approximate_arrival_of_first_record.is_empty());
    // The documented shape: no records, only where they are.
    let raw: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert!(
        raw.get("Records").is_none() && raw["DDBStreamBatchInfo"].is_object(),
        "{raw}"
    );
    // The mapping moved on: the checkpoint is past the batch.
    assert_eq!(runner.checkpoint(&uuid, &shard).as_deref(), Some(seqs[2].as_str()));
    local.kit.assert_invariants(&s).await;
}

#[tokio::test]
async fn records_older_than_the_maximum_record_age_go_to_dlq1_instead_of_being_retried() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 2)).await;
    let (dlq1_url, dlq1_arn) = local.queue("hck-dlq1", 30, None).await;
    let function = local.function("hck-stream-counter").await;
    let uuid = local
        .stream_mapping(&function, |m| {
            m.maximum_retry_attempts(-1)
                .maximum_record_age_in_seconds(60)
                .destination_config(
                    DestinationConfig::builder()
                        .on_failure(OnFailure::builder().destination(&dlq1_arn).build())
                        .build(),
                )
        })
        .await;
    // Every failed attempt takes 40 s of the test's clock.
    let elapsed = Arc::new(AtomicU64::new(0));
    let tick = elapsed.clone();
    let runner = local
        .runner(FnInvoker::new(move |_, _payload: Value| {
            tick.fetch_add(40, Ordering::SeqCst);
            async { Ok(Invocation::error("Boom", "always fails")) }
        }))
        .await
        .with_clock(move || SystemTime::now() + Duration::from_secs(elapsed.load(Ordering::SeqCst)));
    let report = runner.run_until_idle().await.expect("drained").mapping(&uuid);
    assert_eq!(
        report.invocations, 2,
        "retried forever by count, but at 80 s the records are too old: {report:?}"
    );
    let bodies = local.bodies(&dlq1_url).await;
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let failure = OnFailureRecord::from_body(&bodies[0]).expect("AWS's on-failure format");
    assert_eq!(failure.request_context.condition, "RecordAgeExceeded");
    assert_eq!(failure.batch_info.batch_size, 2);
}

#[tokio::test]
async fn one_batch_is_in_flight_per_shard_and_records_arrive_in_shard_order() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 12)).await;
    // A second table and stream: shards of different streams run in parallel.
    let other = hybrid_counter::CounterConfig {
        resources_table: "hck-other-resources".into(),
        counters_table: "hck-other-counters".into(),
        default_limit: Some(1_000),
        eventual_shards: 1,
        best_effort_shards: 1,
        admission: Default::default(),
        scope_keys: Default::default(),
    };
    let other_stream = e2e::create_tables(&local.kit.dynamodb, &other).await;
    let other_counter = hybrid_counter::Counter::new(DynamoStore::new(local.kit.dynamodb.clone(), &other), 1_000);
    for n in ids("o", 6) {
        other_counter.create(&s, &id(&n), Item::default(), NOW).await.unwrap();
    }
    let function = local.function("hck-stream-counter").await;
    local.stream_mapping(&function, |m| m.batch_size(3)).await;
    let observer = local.function("hck-observer").await;
    local
        .mapping(&other_stream, &observer, |m| {
            m.batch_size(2).starting_position(EventSourcePosition::TrimHorizon)
        })
        .await;

    let in_flight: Arc<Mutex<std::collections::HashMap<String, usize>>> = Arc::default();
    let max_per_shard = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let max_overall = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let failed_once = Arc::new(AtomicUsize::new(0));
    let processor = local.kit.processor.clone();
    let (in_flight_c, max_per_shard_c, running_c, max_overall_c, seen_c) = (
        in_flight.clone(),
        max_per_shard.clone(),
        running.clone(),
        max_overall.clone(),
        seen.clone(),
    );
    let runner = local
        .runner(FnInvoker::new(move |function: String, payload: Value| {
            let source = records(&payload)[0]["eventSourceARN"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let (in_flight, max_per_shard, running, max_overall, seen, failed_once, processor) = (
                in_flight_c.clone(),
                max_per_shard_c.clone(),
                running_c.clone(),
                max_overall_c.clone(),
                seen_c.clone(),
                failed_once.clone(),
                processor.clone(),
            );
            async move {
                {
                    let mut shards = in_flight.lock().unwrap();
                    let n = shards.entry(source.clone()).or_default();
                    *n += 1;
                    max_per_shard.fetch_max(*n, Ordering::SeqCst);
                }
                max_overall.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                seen.lock().unwrap().push((source.clone(), payload.clone()));
                // Work that takes a while, so overlapping deliveries would show.
                tokio::time::sleep(Duration::from_millis(30)).await;
                let result = if function == "hck-observer" {
                    Invocation::Response(json!({}))
                } else if item_ids(&payload).contains(&"w4".to_owned())
                    && failed_once.fetch_add(1, Ordering::SeqCst) == 0
                {
                    Invocation::error("Transient", "fails once")
                } else {
                    stream_handler(processor, payload).await
                };
                running.fetch_sub(1, Ordering::SeqCst);
                *in_flight.lock().unwrap().get_mut(&source).unwrap() -= 1;
                Ok(result)
            }
        }))
        .await;
    runner.run_until_idle().await.expect("drained");
    assert_eq!(
        max_per_shard.load(Ordering::SeqCst),
        1,
        "never two batches of one shard at once"
    );
    assert_eq!(
        max_overall.load(Ordering::SeqCst),
        2,
        "the two streams' shards run in parallel"
    );
    let seen = seen.lock().unwrap().clone();
    let ours: Vec<Vec<String>> = seen
        .iter()
        .filter(|(source, _)| *source == local.stream_arn())
        .map(|(_, p)| item_ids(p))
        .collect();
    assert_eq!(
        ours,
        [
            vec!["w0", "w1", "w2"],
            vec!["w3", "w4", "w5"],
            vec!["w3", "w4", "w5"],
            vec!["w6", "w7", "w8"],
            vec!["w9", "w10", "w11"],
        ],
        "a failed batch is retried before anything after it in the shard"
    );
    let theirs: Vec<String> = seen
        .iter()
        .filter(|(source, _)| *source == other_stream)
        .flat_map(|(_, p)| sequence_numbers(p))
        .collect();
    let mut sorted = theirs.clone();
    sorted.sort_by(|a, b| hybrid_counter::stream::record::sequence_cmp(a, b));
    assert_eq!(theirs, sorted, "shard order");
    assert_eq!(theirs.len(), 6);
    local.kit.assert_converged(&s).await;
}

#[tokio::test]
async fn the_sqs_mapping_deletes_only_successful_messages_and_failed_ones_reach_dlq2() {
    let local = Local::start().await;
    let (dlq2_url, dlq2_arn) = local.queue("hck-dlq2", 30, None).await;
    let (dlq1_url, dlq1_arn) = local.queue("hck-dlq1", 1, Some((&dlq2_arn, 2))).await;
    let function = local.function("hck-dlq-reprocessor").await;
    let uuid = local
        .mapping(&dlq1_arn, &function, |m| {
            m.batch_size(10)
                .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        })
        .await;
    let seen: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
    let log = seen.clone();
    let mut config = local.config();
    config.wait_for_in_flight = true;
    let runner = Runner::connect(
        config,
        FnInvoker::new(move |_, payload: Value| {
            log.lock().unwrap().push((Instant::now(), payload.clone()));
            let failures: Vec<Value> = records(&payload)
                .iter()
                .filter(|r| r["body"] == "bad")
                .map(|r| json!({ "itemIdentifier": r["messageId"] }))
                .collect();
            async move { Ok(Invocation::Response(json!({ "batchItemFailures": failures }))) }
        }),
    )
    .await
    .unwrap();
    // Sent once the runner has taken the mapping over (discover disables
    // the emulator's copy): before, the emulator's own poller may take and
    // delete them.
    runner.discover().await.unwrap();
    for body in ["good-1", "bad", "good-2"] {
        local
            .sqs
            .send_message()
            .queue_url(&dlq1_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let report = runner.run_until_idle().await.expect("drained").mapping(&uuid);
    let seen = seen.lock().unwrap().clone();
    let deliveries: Vec<(Instant, String, String)> = seen
        .iter()
        .flat_map(|(at, p)| {
            records(p).into_iter().map(move |r| {
                (
                    *at,
                    r["body"].as_str().unwrap_or_default().to_owned(),
                    r["attributes"]["ApproximateReceiveCount"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
        })
        .collect();
    let bad: Vec<&(Instant, String, String)> = deliveries.iter().filter(|d| d.1 == "bad").collect();
    let good = deliveries.iter().filter(|d| d.1 != "bad").count();
    assert_eq!(
        good, 2,
        "successful messages are deleted, never redelivered: {deliveries:?}"
    );
    assert_eq!(
        bad.iter().map(|d| d.2.as_str()).collect::<Vec<_>>(),
        ["1", "2"],
        "the failed message came back once: {deliveries:?}"
    );
    assert!(
        bad[1].0 - bad[0].0 >= Duration::from_millis(900),
        "it reappeared only after the 1 s visibility timeout"
    );
    assert_eq!(
        (report.messages_deleted, report.messages_returned),
        (2, 2),
        "{report:?}"
    );
    assert_eq!(local.queue_depth(&dlq1_url).await, (0, 0));
    assert_eq!(
        local.bodies(&dlq2_url).await,
        ["bad"],
        "after maxReceiveCount receives the queue's redrive policy moved it"
    );
}

#[tokio::test]
async fn an_sqs_function_error_deletes_no_message_of_the_batch() {
    let local = Local::start().await;
    let (dlq1_url, dlq1_arn) = local.queue("hck-dlq1", 1, None).await;
    let function = local.function("hck-dlq-reprocessor").await;
    let uuid = local
        .mapping(&dlq1_arn, &function, |m| {
            m.batch_size(10)
                .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        })
        .await;
    let calls = Arc::new(AtomicUsize::new(0));
    let count = calls.clone();
    let mut config = local.config();
    config.wait_for_in_flight = true;
    let runner = Runner::connect(
        config,
        FnInvoker::new(move |_, _payload: Value| {
            let first = count.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                Ok(if first {
                    Invocation::error("Boom", "the whole batch fails")
                } else {
                    Invocation::Response(json!({"batchItemFailures": []}))
                })
            }
        }),
    )
    .await
    .unwrap();
    // After the takeover, as above.
    runner.discover().await.unwrap();
    for body in ["a", "b"] {
        local
            .sqs
            .send_message()
            .queue_url(&dlq1_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let report = runner.run_until_idle().await.expect("drained").mapping(&uuid);
    assert_eq!(report.invocations, 2);
    assert_eq!(report.messages_received, 4, "both messages came back: {report:?}");
    assert_eq!(
        (report.messages_returned, report.messages_deleted),
        (2, 2),
        "{report:?}"
    );
    assert_eq!(local.queue_depth(&dlq1_url).await, (0, 0));
}

/// Why the runner takes SQS mappings over: without a container engine,
/// fakecloud 0.51's own SQS poller counts the invocation it cannot make as
/// a success and deletes the messages. If this starts failing, the emulator
/// stopped doing that and the takeover can go.
#[tokio::test]
async fn without_the_takeover_the_emulators_poller_deletes_mapped_messages_unprocessed() {
    let local = Local::start().await;
    let (url, arn) = local.queue("hck-dlq1", 30, None).await;
    let function = local.function("hck-dlq-reprocessor").await;
    local.mapping(&arn, &function, |m| m.batch_size(10)).await;
    local
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("lost")
        .send()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while local.queue_depth(&url).await != (0, 0) {
        assert!(
            Instant::now() < deadline,
            "the emulator's poller left the message alone"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_emulators_own_poller_is_kept_off_the_queues_the_runner_plays() {
    let local = Local::start().await;
    let (_, dlq1_arn) = local.queue("hck-dlq1", 30, None).await;
    let function = local.function("hck-dlq-reprocessor").await;
    let uuid = local.mapping(&dlq1_arn, &function, |m| m.batch_size(10)).await;
    let runner = local
        .runner(FnInvoker::new(|_, _| async { Ok(Invocation::Response(Value::Null)) }))
        .await;
    runner.discover().await.unwrap();
    let state = local
        .lambda
        .get_event_source_mapping()
        .uuid(&uuid)
        .send()
        .await
        .unwrap()
        .state;
    assert_eq!(state.as_deref(), Some("Disabled"), "the emulator's copy is disabled");
    // A later runner still plays the mapping it took over.
    let again = local
        .runner(FnInvoker::new(|_, _| async { Ok(Invocation::Response(Value::Null)) }))
        .await;
    let mappings = again.discover().await.unwrap();
    assert_eq!(
        mappings.iter().map(|m| m.uuid.as_str()).collect::<Vec<_>>(),
        [uuid.as_str()]
    );
}

/// `local run --target localstack`, with the emulator standing in for
/// LocalStack (no Docker here): the runner disables the emulator's copies
/// of both the stream and the SQS mapping before it plays them, counts
/// through the stream mapping while the emulator's copy is off, and
/// [`Runner::hand_back`] enables both copies again and removes the tags.
#[tokio::test]
async fn on_localstack_the_runner_disables_both_mappings_while_it_plays_and_enables_them_again_on_stop() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 4)).await;
    let stream_function = local.function("hck-stream-counter").await;
    let stream_uuid = local.stream_mapping(&stream_function, |m| m.batch_size(10)).await;
    let (_, dlq1_arn) = local.queue("hck-dlq1", 30, None).await;
    let dlq_function = local.function("hck-dlq-reprocessor").await;
    let queue_uuid = local.mapping(&dlq1_arn, &dlq_function, |m| m.batch_size(10)).await;
    let state = |uuid: String| {
        let lambda = local.lambda.clone();
        async move {
            lambda
                .get_event_source_mapping()
                .uuid(uuid)
                .send()
                .await
                .unwrap()
                .state
                .unwrap_or_default()
        }
    };
    let tags = |function: String| {
        let lambda = local.lambda.clone();
        async move {
            let arn = lambda
                .get_function()
                .function_name(&function)
                .send()
                .await
                .unwrap()
                .configuration
                .and_then(|c| c.function_arn)
                .unwrap();
            lambda
                .list_tags()
                .resource(arn)
                .send()
                .await
                .unwrap()
                .tags
                .unwrap_or_default()
                .into_keys()
                .filter(|k| k.starts_with("esm-runner:plays:"))
                .collect::<Vec<_>>()
        }
    };

    let mut config = local.config();
    config.host = esm_runner::Host::LocalStack;
    let processor = local.kit.processor.clone();
    let runner = Runner::connect(
        config,
        FnInvoker::new(move |_, payload: Value| {
            let processor = processor.clone();
            async move { Ok(stream_handler(processor, payload).await) }
        }),
    )
    .await
    .unwrap();
    let report = runner.run_until_idle().await.expect("drained");
    assert_eq!(
        state(stream_uuid.clone()).await,
        "Disabled",
        "LocalStack's stream mapping is off while the runner plays"
    );
    assert_eq!(
        state(queue_uuid.clone()).await,
        "Disabled",
        "LocalStack's DLQ1 mapping is off while the runner plays"
    );
    assert_eq!(tags(stream_function.clone()).await.len(), 1);
    assert_eq!(report.for_function("hck-stream-counter").records_delivered, 4);
    local.kit.assert_converged(&s).await;

    let mut handed = runner.hand_back().await.unwrap();
    handed.sort();
    let mut expected = vec![stream_uuid.clone(), queue_uuid.clone()];
    expected.sort();
    assert_eq!(handed, expected);
    assert_eq!(state(stream_uuid).await, "Enabled");
    assert_eq!(state(queue_uuid).await, "Enabled");
    assert!(tags(stream_function).await.is_empty() && tags(dlq_function).await.is_empty());
    assert!(runner.hand_back().await.unwrap().is_empty(), "handed back once");
}

#[tokio::test]
async fn run_keeps_polling_new_records_until_shutdown() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("early", 3)).await;
    let function = local.function("hck-stream-counter").await;
    local.stream_mapping(&function, |m| m.batch_size(10)).await;
    let processor = local.kit.processor.clone();
    let runner = local
        .runner(FnInvoker::new(move |_, payload: Value| {
            let processor = processor.clone();
            async move { Ok(stream_handler(processor, payload).await) }
        }))
        .await;
    let driver = async {
        // Records written while the runner is already polling.
        local.create(&s, ids("late", 4)).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while local.kit.counter.usage(&s).await.unwrap().eventual != 7 {
            assert!(
                Instant::now() < deadline,
                "the running runner did not count the new items"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let ((), report) = e2e::run_beside(&runner, driver).await;
    let report = report.expect("stopped cleanly").for_function("hck-stream-counter");
    assert_eq!(report.records_delivered, 7, "{report:?}");
    local.kit.assert_converged(&s).await;
}

#[tokio::test]
async fn run_until_idle_gives_up_after_its_timeout_when_a_batch_retries_forever() {
    let local = Local::start().await;
    local.create(&scope("acct"), ids("w", 1)).await;
    let function = local.function("hck-stream-counter").await;
    local.stream_mapping(&function, |m| m.maximum_retry_attempts(-1)).await;
    let mut config = local.config();
    config.idle_timeout = Duration::from_secs(1);
    let runner = Runner::connect(
        config,
        FnInvoker::new(|_, _| async { Ok(Invocation::error("Boom", "always fails")) }),
    )
    .await
    .unwrap();
    match runner.run_until_idle().await {
        Err(esm_runner::Error::NotIdle { report, .. }) => {
            assert!(report.for_function("hck-stream-counter").retries > 1, "{report}");
        }
        other => panic!("expected NotIdle, got {other:?}"),
    }
}

/// The names (`comm`) of this process's children now: what the runner
/// started, as the kernel lists it (`/proc/<pid>/stat`, field 4 the parent).
fn child_processes() -> Vec<String> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("stat")).ok())
        .filter_map(|stat| {
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            (rest.split_whitespace().nth(1)? == me).then(|| name.to_owned())
        })
        .collect()
}

/// The real `stream-counter` binary, as the build step left it, started by
/// the runner against the runtime API it serves: no cargo and no
/// cargo-lambda is started while the runner plays the mapping.
#[tokio::test]
async fn the_runner_runs_the_prebuilt_stream_counter_and_starts_no_cargo() {
    let local = Local::start().await;
    let s = scope("acct");
    local.create(&s, ids("w", 9)).await;
    for n in ["w2", "w7"] {
        local.kit.counter.delete(&s, &id(n), NOW).await.unwrap();
    }
    let function = local.function("hck-stream-counter").await;
    local.stream_mapping(&function, |m| m.batch_size(4)).await;
    let mut config = local.config();
    config.idle_timeout = Duration::from_secs(120);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let watching = {
        let seen = seen.clone();
        tokio::spawn(async move {
            loop {
                seen.lock().unwrap().extend(child_processes());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let report = esm_runner::run_until_idle(config)
        .await
        .expect("drained through the prebuilt binary");
    watching.abort();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().any(|name| name.starts_with("stream-counter")), "{seen:?}");
    assert!(
        !seen.iter().any(|name| name.starts_with("cargo")),
        "the runner started a cargo: {seen:?}"
    );
    let played = report.for_function("hck-stream-counter");
    assert!(played.invocations >= 3, "{report}");
    assert_eq!(played.function_errors, 0, "{report}");
    local.kit.assert_converged(&s).await;
    assert_eq!(local.kit.counter.usage(&s).await.unwrap().eventual, 7);
}

/// The real `stream-counter` binary over two levels of scope keys
/// (`SCOPE_KEY_SHARDS=2`, `RESOURCE_KEY_SPREAD=4` in its environment, as the
/// stack passes them): it counts each item of eight resources keys on its
/// counters key, what `aws/src/lambda.rs` builds from the environment.
#[tokio::test]
async fn the_prebuilt_stream_counter_counts_two_levels_of_keys_on_their_counters_keys() {
    let mut local = Local::start().await;
    local.kit.config.scope_keys = hybrid_counter::scope_keys::ScopeKeys::new(2)
        .and_then(|k| k.with_spread(4))
        .unwrap();
    local.kit.counter = hybrid_counter::Counter::configured(local.kit.store.clone(), 1000, &local.kit.config);
    let s = scope("acct");
    local.create(&s, ids("w", 24)).await;
    for n in ["w2", "w7", "w11"] {
        local.kit.counter.delete(&s, &id(n), NOW).await.unwrap();
    }
    let function = local.function("hck-stream-counter").await;
    local.stream_mapping(&function, |m| m.batch_size(10)).await;
    let mut config = local.config();
    config.idle_timeout = Duration::from_secs(120);
    let report = esm_runner::run_until_idle(config)
        .await
        .expect("drained through the prebuilt binary");
    assert_eq!(report.for_function("hck-stream-counter").function_errors, 0, "{report}");
    let keys = local.kit.config.scope_keys;
    let store = &local.kit.store;
    for counters_key in keys.keys(&s).unwrap() {
        let counts = hybrid_counter::audit::count_over(store, keys, &counters_key)
            .await
            .unwrap();
        let counters = hybrid_counter::RequestStore::read_counters(store, &counters_key)
            .await
            .unwrap();
        assert_eq!(counters.eventual, counts.live as i64, "{counters_key}");
        assert_eq!(counts.processed, counts.live, "{counters_key}: every live item counted");
    }
    assert_eq!(local.kit.counter.usage(&s).await.unwrap().eventual, 21);
}
