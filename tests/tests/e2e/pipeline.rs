//! The failure pipeline end to end (issue 4, DESIGN §4): the stack is
//! deployed with `counterctl` into a private emulator with small retry
//! settings (`MaximumRetryAttempts=1`, `Dlq1MaxReceiveCount=2`), and the
//! local event-source runner plays its two mappings with an in-process
//! invoker that calls the real handler functions of the library
//! (`handle_stream_event`, `handle_dlq_event`) behind a fault switch:
//!
//! * the stream fault fails every stream batch holding a "poison" item
//!   (an id starting with `poison`) with a function error, so the mapping
//!   retries and bisects until each poison record alone is given up on and
//!   described to DLQ1;
//! * the reprocessor fault fails every DLQ1 batch, so its messages reach
//!   DLQ2 through the queue's redrive policy.
//!
//! Then `counterctl redrive` (moving to DLQ1, or `--replay` applying the
//! ranges directly) brings them back, and the eventual counter becomes
//! exact. DLQ1's visibility timeout is lowered to 1 s after the deploy: the
//! stack's 720 s (six reprocessor timeouts) would make every failed receive
//! wait twelve minutes.
//!
//! These tests deploy `FailedBatchRecords=pointer` (ranges in DLQ1), except
//! the two that compare both modes on a stream whose ranges are gone.
//!
//! The last test runs `counterctl local run --until-idle` itself, with the
//! real, prebuilt handler binaries.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use e2e::Emulator;
use e2e::counterctl::Counterctl;
use e2e::faults::{Fault, FaultKind, FaultPlan, FaultProxy, Operation};
use e2e::{RunReportExt, item_ids, records};
use esm_runner::{FnInvoker, Invocation, Invoke, RunReport, Runner, RunnerConfig};
use hybrid_counter::audit::ScopeCounts;
use hybrid_counter::{Counter, CounterConfig, Scope};
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::failed_batch::{Dlq1Message, ObjectRef};
use hybrid_counter_aws::replay::{OnFailureRecord, REASON_ATTRIBUTE};
use ops_cli::commands::redrive::RedriveReport;
use ops_cli::{Report, exit};
use serde_dynamo::Item;
use serde_json::Value;
use stack::outputs;

use crate::{NOW, id, scope};

/// Created in this order; `w1` is deleted afterwards. Seven stay live.
const ITEMS: [&str; 8] = ["w0", "w1", "poison-a", "w2", "w3", "w4", "poison-b", "w5"];
const LIVE: i64 = 7;
const GARBAGE: &str = "{\"not\": \"an on-failure record\"}";

/// The test-only fault switches of the in-process functions.
#[derive(Default)]
struct Faults {
    /// Stream batches holding a poison item fail with a function error.
    stream: AtomicBool,
    /// Every reprocessor batch fails with a function error.
    reprocessor: AtomicBool,
}

/// Event payloads the in-process functions received, in order.
#[derive(Default)]
struct Seen {
    stream: Mutex<Vec<Value>>,
    reprocessor: Mutex<Vec<Value>>,
}

/// A deployed stack in a private emulator, and what the tests drive it with.
struct Pipeline {
    emulator: Emulator,
    ctl: Counterctl,
    outputs: BTreeMap<String, String>,
    sqs: aws_sdk_sqs::Client,
    config: CounterConfig,
    store: DynamoStore,
    /// The request path, as the api function (its role).
    counter: Counter<DynamoStore>,
    functions: e2e::KitFunctions,
    /// Receipt handles of the messages the test itself received.
    received_handles: Mutex<Vec<String>>,
    faults: Arc<Faults>,
    seen: Arc<Seen>,
}

impl Pipeline {
    /// The stack with `FailedBatchRecords=pointer`: the tests of ranges.
    async fn deploy() -> Self {
        Self::deploy_with("pointer").await
    }

    /// The stack with `FailedBatchRecords=<failed_batch_records>`.
    async fn deploy_with(failed_batch_records: &str) -> Self {
        let emulator = Emulator::start();
        let ctl = Counterctl::new(&emulator);
        let mode = format!("FailedBatchRecords={failed_batch_records}");
        let deployed = ctl
            .deploy(&[
                "MaximumRetryAttempts=1",
                "Dlq1MaxReceiveCount=2",
                "StreamBatchSize=10",
                &mode,
            ])
            .await;
        assert!(deployed.succeeded(), "{deployed}");
        let outputs = deployed.outputs;
        let sdk = emulator.sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        sqs.set_queue_attributes()
            .queue_url(&outputs[outputs::DLQ1_URL])
            .attributes(QueueAttributeName::VisibilityTimeout, "1")
            .send()
            .await
            .expect("shorten DLQ1's visibility timeout");
        let config = CounterConfig {
            resources_table: outputs[outputs::RESOURCES_TABLE].clone(),
            counters_table: outputs[outputs::COUNTERS_TABLE].clone(),
            default_limit: Some(1_000),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Default::default(),
            scope_keys: Default::default(),
        };
        let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config);
        let api = e2e::iam::function_sdk_config(&sdk, &outputs[outputs::API_FUNCTION]).await;
        Self {
            counter: Counter::new(DynamoStore::new(aws_sdk_dynamodb::Client::new(&api), &config), 1_000),
            functions: e2e::KitFunctions::new(&config, &sdk),
            config,
            store,
            sqs,
            outputs,
            ctl,
            emulator,
            received_handles: Mutex::default(),
            faults: Arc::default(),
            seen: Arc::default(),
        }
    }

    /// From now on the in-process reprocessor reaches the emulator through a
    /// fault proxy that answers every stream read with
    /// `TrimmedDataAccessException`: every range has left the stream, as
    /// after its 24 hours. The stream mapping itself (played by the runner)
    /// still reads the stream.
    async fn trim_the_stream_for_the_reprocessor(&mut self) -> FaultProxy {
        let plan = FaultPlan::new(16)
            .random(Operation::streams("GetShardIterator"), Fault::Trimmed, 1.0)
            .random(Operation::streams("GetRecords"), Fault::Trimmed, 1.0);
        let proxy = FaultProxy::start(&self.emulator.endpoint, plan);
        self.functions = e2e::KitFunctions::new(&self.config, &proxy.sdk_config().await);
        proxy
    }

    fn output(&self, key: &str) -> &str {
        &self.outputs[key]
    }

    fn stream_function(&self) -> &str {
        self.output(outputs::STREAM_COUNTER_FUNCTION)
    }

    fn reprocessor_function(&self) -> &str {
        self.output(outputs::DLQ_REPROCESSOR_FUNCTION)
    }

    /// Creates [`ITEMS`] in `s`, then deletes `w1`.
    async fn write_items(&self, s: &Scope) {
        for n in ITEMS {
            self.counter.create(s, &id(n), Item::default(), NOW).await.unwrap();
        }
        self.counter.delete(s, &id("w1"), NOW).await.unwrap();
    }

    /// A runner playing the mappings of `functions` with the in-process
    /// handler functions behind the fault switches.
    async fn runner(&self, functions: &[&str]) -> Runner<impl Invoke + use<>> {
        let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .to_path_buf();
        let mut config = RunnerConfig::new(&self.emulator.endpoint, workspace);
        config.poll_interval = Duration::from_millis(100);
        config.retry_delay = Duration::from_millis(10);
        config.idle_timeout = Duration::from_secs(120);
        config.functions = Some(functions.iter().map(|f| (*f).to_owned()).collect());
        // Wait for failed DLQ1 messages to come back, and to move to DLQ2.
        config.wait_for_in_flight = true;
        Runner::connect(config, self.invoker())
            .await
            .expect("connect the runner")
    }

    async fn full_runner(&self) -> Runner<impl Invoke + use<>> {
        self.runner(&[self.stream_function(), self.reprocessor_function()])
            .await
    }

    fn invoker(&self) -> impl Invoke + use<> {
        let stream_function = self.stream_function().to_owned();
        let (functions, faults, seen) = (self.functions.clone(), self.faults.clone(), self.seen.clone());
        FnInvoker::new(move |function: String, payload: Value| {
            let (functions, faults, seen) = (functions.clone(), faults.clone(), seen.clone());
            let is_stream = function == stream_function;
            async move {
                if is_stream {
                    seen.stream.lock().unwrap().push(payload.clone());
                    if faults.stream.load(Ordering::SeqCst)
                        && item_ids(&payload).iter().any(|i| i.starts_with("poison"))
                    {
                        return Ok(Invocation::error("InjectedFault", "a poison record in the batch"));
                    }
                } else {
                    seen.reprocessor.lock().unwrap().push(payload.clone());
                    if faults.reprocessor.load(Ordering::SeqCst) {
                        return Ok(Invocation::error("InjectedFault", "the reprocessor is broken"));
                    }
                }
                Ok(functions.invoke(&function, payload).await)
            }
        })
    }

    /// `(visible, in flight)` of a queue output.
    async fn depth(&self, url_output: &str) -> (u64, u64) {
        e2e::queue_depth(&self.sqs, self.output(url_output)).await
    }

    /// Bodies of every message of a queue output; they are received (and
    /// hidden for a minute: see [`Self::release`]).
    async fn bodies(&self, url_output: &str) -> Vec<String> {
        self.received(url_output)
            .await
            .into_iter()
            .map(|(body, _)| body)
            .collect()
    }

    /// Body and permanent-failure reason (the reprocessor's message
    /// attribute) of every message of a queue output, received as
    /// [`Self::bodies`] does.
    async fn received(&self, url_output: &str) -> Vec<(String, Option<String>)> {
        let page = e2e::receive_all(&self.sqs, self.output(url_output)).await;
        self.received_handles
            .lock()
            .unwrap()
            .extend(page.iter().filter_map(|m| m.receipt_handle.clone()));
        page.iter()
            .map(|m| {
                let reason = hybrid_counter_aws::sqs::string_attribute(m, REASON_ATTRIBUTE).map(str::to_owned);
                (m.body.clone().unwrap_or_default(), reason)
            })
            .collect()
    }

    /// Makes the messages [`Self::received`] hid in a queue output visible again.
    async fn release(&self, url_output: &str) {
        let handles: Vec<String> = self.received_handles.lock().unwrap().drain(..).collect();
        for handle in handles {
            self.sqs
                .change_message_visibility()
                .queue_url(self.output(url_output))
                .receipt_handle(handle)
                .visibility_timeout(0)
                .send()
                .await
                .expect("make visible again");
        }
    }

    /// Sends `body` to the queue; returns its message id.
    async fn send(&self, url_output: &str, body: &str) -> String {
        self.sqs
            .send_message()
            .queue_url(self.output(url_output))
            .message_body(body)
            .send()
            .await
            .expect("send")
            .message_id
            .expect("a message id")
    }

    /// `counterctl redrive <args>` and its report; also returns the exit code.
    async fn redrive(&self, args: &[&str]) -> (RedriveReport, u8) {
        let mut argv = vec!["redrive"];
        argv.extend_from_slice(args);
        match self.ctl.run(&argv).await {
            Ok(report @ Report::Redrive(_)) => {
                let code = report.exit_code();
                let Report::Redrive(redrive) = report else {
                    unreachable!()
                };
                (redrive, code)
            }
            other => panic!("redrive {args:?}: {other:?}"),
        }
    }

    /// EC equals the processed count and BE never exceeds the live count.
    async fn assert_invariants(&self, s: &Scope) -> (ScopeCounts, i64) {
        let (counts, snapshot) = e2e::assert_invariants(&self.store, s).await;
        (counts, snapshot.eventual)
    }

    /// After a drain: EC equals the live count and nothing is pending.
    async fn assert_converged(&self, s: &Scope) {
        let (counts, eventual) = self.assert_invariants(s).await;
        assert_eq!(eventual, LIVE, "EC must be exact after the drain: {counts:?}");
        assert_eq!(counts.live as i64, LIVE, "{counts:?}");
        assert_eq!((counts.pending_create, counts.pending_delete), (0, 0), "{counts:?}");
    }
}

fn bodies_of(payload: &Value) -> Vec<String> {
    records(payload)
        .iter()
        .map(|r| r["body"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Runs until the stream, DLQ1 and DLQ1's messages in flight are drained.
async fn drain(runner: &Runner<impl Invoke>) -> RunReport {
    runner.run_until_idle().await.expect("the mappings drain")
}

#[tokio::test]
async fn poison_records_retry_and_bisect_into_dlq1_and_the_reprocessor_makes_the_eventual_counter_exact() {
    let p = Pipeline::deploy().await;
    let s = scope("acct");
    p.faults.stream.store(true, Ordering::SeqCst);
    p.write_items(&s).await;
    let runner = p.full_runner().await;
    let report = drain(&runner).await;

    let stream = report.for_function(p.stream_function());
    assert!(stream.bisects >= 2, "failed batches were split: {report}");
    assert_eq!(
        stream.retries, 2,
        "each poison record alone: one attempt and MaximumRetryAttempts=1 retry: {report}"
    );
    for poison in ["poison-a", "poison-b"] {
        let alone = p
            .seen
            .stream
            .lock()
            .unwrap()
            .iter()
            .filter(|payload| item_ids(payload) == [poison])
            .count();
        assert_eq!(alone, 2, "{poison} was invoked alone twice");
    }
    assert_eq!(
        (stream.batches_to_on_failure, stream.records_to_on_failure),
        (2, 2),
        "one on-failure record per poison record: {report}"
    );
    let reprocessor = report.for_function(p.reprocessor_function());
    assert_eq!(
        reprocessor.messages_deleted, 2,
        "the reprocessor replayed both ranges: {report}"
    );
    assert_eq!(reprocessor.function_errors, 0, "{report}");
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (0, 0));
    assert_eq!(p.depth(outputs::DLQ2_URL).await, (0, 0));
    p.assert_converged(&s).await;
    // The runner disabled fakecloud's copy of the DLQ1 mapping to play it:
    // status says so and, the runner stopped, that nothing plays it now.
    let status = p.ctl.status().await.expect("status");
    assert!(status.mappings.iter().any(|m| m.played_by_local_runner), "{status}");
    assert!(e2e::counterctl::healthy_but_for_the_stopped_runner(&status), "{status}");
}

/// DESIGN §5b, `FailedBatchRecords=payload` (the default): each poison
/// record the mapping gives up on is kept in the failed-batch bucket with
/// its record, in Lambda's format, and the bucket's own notification (the
/// emulator's) announces it to DLQ1. The reprocessor replays the records
/// from the object, so with every range gone from the stream the eventual
/// counter is still exact, and it never needed the stream.
#[tokio::test]
async fn under_payload_a_failed_batch_whose_range_left_the_stream_is_still_counted_exactly() {
    let mut p = Pipeline::deploy_with("payload").await;
    let bucket = p.output(outputs::FAILED_BATCH_BUCKET).to_owned();
    let proxy = p.trim_the_stream_for_the_reprocessor().await;
    let s = scope("acct");
    p.faults.stream.store(true, Ordering::SeqCst);
    p.write_items(&s).await;
    let runner = p.full_runner().await;
    let mut report = drain(&runner).await;
    // S3 delivers its notification after the PUT: drain again if it came late.
    for _ in 0..3 {
        if p.depth(outputs::DLQ1_URL).await == (0, 0) {
            break;
        }
        report = drain(&runner).await;
    }
    let stream = report.for_function(p.stream_function());
    assert_eq!(
        (stream.batches_to_on_failure, stream.records_to_on_failure),
        (2, 2),
        "one kept batch per poison record: {report}"
    );
    let s3 = hybrid_counter_aws::s3::client(&p.emulator.sdk_config().await);
    let listed = s3
        .list_objects_v2()
        .bucket(&bucket)
        .prefix("aws/lambda/")
        .send()
        .await
        .expect("list the failed-batch bucket");
    let mut kept = Vec::new();
    for object in listed.contents() {
        let at = ObjectRef {
            bucket: bucket.clone(),
            key: object.key().unwrap_or_default().to_owned(),
        };
        // Where Lambda writes it: the stack's bucket, under its stream mapping.
        let expected = hybrid_counter_aws::failed_batch::Expected::Stack {
            bucket: &bucket,
            mapping_uuid: p.output(outputs::STREAM_MAPPING_ID),
        };
        let batch = hybrid_counter_aws::s3::fetch_failed_batch(
            &s3,
            &at,
            expected,
            p.output(outputs::RESOURCES_TABLE_STREAM_ARN),
        )
        .await
        .expect("a failed batch of our stream in Lambda's format, under the stack's mapping");
        kept.extend(batch.payload.records.iter().map(|r| {
            r.change.keys.get("id").and_then(|v| match v {
                serde_dynamo::AttributeValue::S(id) => Some(id.clone()),
                _ => None,
            })
        }));
    }
    kept.sort();
    assert_eq!(kept, [Some("poison-a".to_owned()), Some("poison-b".to_owned())]);
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (0, 0), "{report}");
    let in_dlq2 = p.received(outputs::DLQ2_URL).await;
    assert!(in_dlq2.is_empty(), "nothing for the operator: {in_dlq2:?}\n{report}");
    p.assert_converged(&s).await;
    let stats = proxy.stats();
    assert_eq!(
        stats.injected(&Operation::streams("GetShardIterator"), FaultKind::Trimmed)
            + stats.injected(&Operation::streams("GetRecords"), FaultKind::Trimmed),
        0,
        "a kept batch is replayed without reading the stream"
    );
}

/// The same trimmed stream under `FailedBatchRecords=pointer`: the pointers
/// in DLQ1 name ranges the reprocessor can no longer read, so after
/// `Dlq1MaxReceiveCount` receives they wait in DLQ2 for an operator (who
/// runs `audit --repair`), and the poison records stay uncounted, the
/// invariant intact.
#[tokio::test]
async fn under_pointer_a_failed_batch_whose_range_left_the_stream_ends_in_dlq2_for_the_operator() {
    let mut p = Pipeline::deploy_with("pointer").await;
    let proxy = p.trim_the_stream_for_the_reprocessor().await;
    let s = scope("acct");
    p.faults.stream.store(true, Ordering::SeqCst);
    p.write_items(&s).await;
    let runner = p.full_runner().await;
    let report = drain(&runner).await;
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (0, 0), "{report}");
    let in_dlq2 = p.bodies(outputs::DLQ2_URL).await;
    assert_eq!(in_dlq2.len(), 2, "{in_dlq2:?}");
    for body in &in_dlq2 {
        assert!(
            matches!(Dlq1Message::parse(body), Ok(Dlq1Message::Pointer(_))),
            "{body}"
        );
    }
    let (counts, eventual) = p.assert_invariants(&s).await;
    assert_eq!(eventual, LIVE - 2, "the two poison records are not counted: {counts:?}");
    assert!(
        proxy
            .stats()
            .injected(&Operation::streams("GetShardIterator"), FaultKind::Trimmed)
            > 0,
        "the reprocessor tried to read the ranges"
    );
}

/// DESIGN §5b: a message that can never be replayed does not wait out
/// `maxReceiveCount` × the visibility timeout (an hour on the stack's
/// defaults): the reprocessor sends it to DLQ2 in the poll that received
/// it, with its reason, and the ranges of the same batch are replayed.
#[tokio::test]
async fn garbage_in_dlq1_is_in_dlq2_with_its_reason_within_one_reprocessor_poll() {
    let p = Pipeline::deploy().await;
    let s = scope("acct");
    p.faults.stream.store(true, Ordering::SeqCst);
    p.write_items(&s).await;
    // Take DLQ1's mapping over from the emulator's own poller first, then
    // let only the stream mapping run: both ranges wait in DLQ1.
    let runner = p.runner(&[p.reprocessor_function()]).await;
    runner.discover().await.expect("discover");
    let stream_only = p.runner(&[p.stream_function()]).await;
    drain(&stream_only).await;
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (2, 0));
    let ranges = p.bodies(outputs::DLQ1_URL).await;
    // Hidden by that look for a minute: back at once.
    p.release(outputs::DLQ1_URL).await;
    // A range of another table's stream: replaying it could only write
    // someone else's records into this stack's tables.
    let mut foreign = OnFailureRecord::from_body(&ranges[0]).unwrap();
    foreign.batch_info.stream_arn = "arn:aws:dynamodb:us-east-1:000000000000:table/other/stream/x".to_owned();
    let foreign = serde_json::to_string(&foreign).unwrap();
    let garbage_in_dlq1 = p.send(outputs::DLQ1_URL, GARBAGE).await;
    p.send(outputs::DLQ1_URL, &foreign).await;

    let report = drain(&runner).await;
    let seen = p.seen.reprocessor.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one poll, one invocation: {seen:?}");
    assert_eq!(
        bodies_of(&seen[0]).len(),
        4,
        "two ranges, the garbage, the foreign range"
    );
    let reprocessor = report.for_function(p.reprocessor_function());
    assert_eq!(
        (
            reprocessor.messages_deleted,
            reprocessor.messages_returned,
            reprocessor.partial_failures
        ),
        (4, 0, 0),
        "every message was handled in that poll: {report}"
    );
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (0, 0));
    p.assert_converged(&s).await;

    let mut parked = p.received(outputs::DLQ2_URL).await;
    parked.sort();
    let [(first, first_reason), (second, second_reason)] = &parked[..] else {
        panic!("DLQ2 holds {parked:?}")
    };
    let (garbage, foreign_reason) = if first == GARBAGE {
        assert_eq!(second, &foreign, "the body is unchanged");
        (first_reason, second_reason)
    } else {
        assert_eq!(
            (first, second.as_str()),
            (&foreign, GARBAGE),
            "the bodies are unchanged"
        );
        (second_reason, first_reason)
    };
    let garbage = garbage.as_deref().expect("a reason attribute");
    assert!(garbage.starts_with("not an on-failure record"), "{garbage}");
    let foreign_reason = foreign_reason.as_deref().expect("a reason attribute");
    assert!(
        foreign_reason.contains("table/other/stream/x")
            && foreign_reason.contains(p.output(outputs::RESOURCES_TABLE_STREAM_ARN)),
        "{foreign_reason}"
    );

    // The operator's view: `redrive --dry-run` shows each reason.
    p.release(outputs::DLQ2_URL).await;
    let (dry, code) = p.redrive(&["--dry-run"]).await;
    assert_eq!(code, exit::SUCCESS, "{dry}");
    let mut reasons: Vec<&str> = dry.preview.iter().filter_map(|p| p.reason.as_deref()).collect();
    reasons.sort_unstable();
    let mut expected = vec![garbage, foreign_reason];
    expected.sort_unstable();
    assert_eq!(reasons, expected, "{dry}");
    let text = dry.to_string();
    assert!(text.contains(&format!("sent to dlq2 at once: {garbage}")), "{text}");
    assert!(
        text.contains("the reprocessor will send it straight back to dlq2"),
        "{text}"
    );
    // ... and the id the garbage had in DLQ1 (the reprocessor's log names
    // it), beside its new one, with its body.
    let shown = dry
        .preview
        .iter()
        .find(|p| p.body_excerpt == GARBAGE)
        .unwrap_or_else(|| panic!("no preview of the garbage: {dry}"));
    assert_eq!(shown.original_message_id, garbage_in_dlq1, "{dry}");
    assert_ne!(shown.message_id, garbage_in_dlq1, "re-sent as a new message");
    assert!(
        text.contains(&format!("original message id {garbage_in_dlq1}")),
        "{text}"
    );
    assert_eq!(p.depth(outputs::DLQ2_URL).await, (2, 0), "the dry run moved nothing");
}

#[tokio::test]
async fn with_the_reprocessor_failing_ranges_reach_dlq2_and_redrive_after_the_fix_makes_the_eventual_counter_exact() {
    let p = Pipeline::deploy().await;
    let s = scope("acct");
    p.faults.stream.store(true, Ordering::SeqCst);
    p.faults.reprocessor.store(true, Ordering::SeqCst);
    p.write_items(&s).await;
    let runner = p.full_runner().await;
    let report = drain(&runner).await;
    let reprocessor = report.for_function(p.reprocessor_function());
    assert_eq!(reprocessor.messages_deleted, 0, "{report}");
    assert!(reprocessor.function_errors >= 2, "{report}");
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (0, 0));
    assert_eq!(
        p.depth(outputs::DLQ2_URL).await,
        (2, 0),
        "both ranges reached DLQ2 after two receives each"
    );
    let (counts, eventual) = p.assert_invariants(&s).await;
    assert_eq!((eventual, counts.pending_create), (LIVE - 2, 2), "{counts:?}");

    // A dry run shows both ranges and moves nothing.
    let (dry, code) = p.redrive(&["--dry-run"]).await;
    assert_eq!(code, exit::SUCCESS, "{dry}");
    assert!(dry.dry_run && dry.moved == 0, "{dry}");
    assert_eq!(dry.preview.len(), 2, "{dry}");
    for preview in &dry.preview {
        assert_eq!(preview.action, "move");
        let range = preview.range.as_ref().expect("an on-failure record");
        assert_eq!(
            (range.condition.as_str(), range.batch_size),
            ("RetryAttemptsExhausted", 1)
        );
        assert_eq!(range.start_sequence_number, range.end_sequence_number);
    }
    assert!(dry.to_string().contains("would move 2"), "{dry}");
    assert_eq!(
        p.depth(outputs::DLQ2_URL).await,
        (2, 0),
        "still there and visible again"
    );
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (0, 0));

    // The fix, then the redrive: one message first (--max), then the rest.
    p.faults.stream.store(false, Ordering::SeqCst);
    p.faults.reprocessor.store(false, Ordering::SeqCst);
    let (one, code) = p.redrive(&["--max", "1", "--rate", "5/s"]).await;
    assert_eq!((one.moved, code), (1, exit::SUCCESS), "{one}");
    assert_eq!(p.depth(outputs::DLQ2_URL).await, (1, 0));
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (1, 0));
    let (rest, code) = p.redrive(&[]).await;
    assert_eq!((rest.moved, code), (1, exit::SUCCESS), "{rest}");
    assert!(rest.failed.is_empty() && rest.skipped.is_empty(), "{rest}");
    assert_eq!(p.depth(outputs::DLQ2_URL).await, (0, 0));
    p.assert_invariants(&s).await;

    // The same runner (its checkpoint is past the poison records, so only
    // the redriven ranges can count them) plays DLQ1 again.
    let report = drain(&runner).await;
    assert_eq!(
        report.for_function(p.reprocessor_function()).messages_deleted,
        2,
        "{report}"
    );
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (0, 0));
    p.assert_converged(&s).await;
}

#[tokio::test]
async fn redrive_replay_applies_the_dlq2_ranges_itself_while_the_reprocessor_is_still_broken() {
    let p = Pipeline::deploy().await;
    let s = scope("acct");
    p.faults.stream.store(true, Ordering::SeqCst);
    p.faults.reprocessor.store(true, Ordering::SeqCst);
    p.write_items(&s).await;
    let runner = p.full_runner().await;
    drain(&runner).await;
    assert_eq!(p.depth(outputs::DLQ2_URL).await, (2, 0));
    p.send(outputs::DLQ2_URL, GARBAGE).await;

    let (dry, _) = p.redrive(&["--replay", "--dry-run"]).await;
    let mut actions: Vec<&str> = dry.preview.iter().map(|p| p.action.as_str()).collect();
    actions.sort_unstable();
    assert_eq!(actions, ["replay", "replay", "skip"], "{dry}");
    assert_eq!(p.depth(outputs::DLQ2_URL).await, (3, 0), "the dry run replayed nothing");
    let (counts, _) = p.assert_invariants(&s).await;
    assert_eq!(counts.pending_create, 2);

    let (replayed, code) = p.redrive(&["--replay"]).await;
    assert_eq!(replayed.replayed, 2, "{replayed}");
    assert!(replayed.failed.is_empty(), "{replayed}");
    assert_eq!(replayed.skipped.len(), 1, "{replayed}");
    assert!(
        replayed.skipped[0].reason.contains("not an on-failure record"),
        "{replayed}"
    );
    assert_eq!(code, exit::FAILED, "the garbage still needs an operator");
    assert!(replayed.to_string().contains("replayed 2"), "{replayed}");
    assert_eq!(p.depth(outputs::DLQ2_URL).await, (1, 0), "the garbage stays, visible");
    p.assert_converged(&s).await;
    assert_eq!(p.bodies(outputs::DLQ2_URL).await, [GARBAGE]);
}

/// `counterctl local run --until-idle`: the stack's functions read from its
/// outputs, the real `stream-counter` and `dlq-reprocessor` binaries as the build
/// left them, run by the runner with the functions' deployed environment.
/// The emulator's own SQS poller cannot run the reprocessor, yet it
/// receives DLQ1's messages (and loses them, or hides and redrives them)
/// as soon as they arrive. `deploy` takes the DLQ1 mapping over before it
/// returns, so a message sent before any runner looked waits in DLQ1,
/// received by nobody. Fails without the take-over in `deploy`: the
/// emulator's poller, every 500 ms, gets there first.
#[tokio::test]
async fn a_message_sent_to_dlq1_right_after_deploy_waits_for_the_runner() {
    let p = Pipeline::deploy().await;
    let status = p.ctl.status().await.expect("status");
    let dlq1 = status
        .mappings
        .iter()
        .find(|m| m.config.uuid == p.output(outputs::DLQ1_MAPPING_ID))
        .expect("the DLQ1 mapping in status");
    assert_eq!(dlq1.config.state.as_deref(), Some("Disabled"), "{status}");
    assert!(dlq1.played_by_local_runner, "{status}");

    p.send(outputs::DLQ1_URL, GARBAGE).await;
    // Several of the emulator's poll cycles (500 ms each).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let received = p
        .sqs
        .receive_message()
        .queue_url(p.output(outputs::DLQ1_URL))
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("receive from DLQ1");
    let messages = received.messages();
    assert_eq!(messages.len(), 1, "the message is still in DLQ1: {messages:?}");
    assert_eq!(messages[0].body(), Some(GARBAGE));
    let receives = messages[0]
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount))
        .map(String::as_str);
    assert_eq!(receives, Some("1"), "nobody received it before this test did");
    assert_eq!(p.depth(outputs::DLQ2_URL).await, (0, 0));
}

#[tokio::test]
async fn local_run_until_idle_plays_the_deployed_stack_with_the_real_handler_binaries() {
    let p = Pipeline::deploy().await;
    let s = scope("acct");
    p.write_items(&s).await;
    // The real reprocessor, with the stack's DLQ2_URL and STREAM_ARN, sends
    // this to DLQ2 at once.
    p.send(outputs::DLQ1_URL, GARBAGE).await;
    let report = p
        .ctl
        .run(&[
            "local",
            "run",
            "--until-idle",
            "--idle-timeout",
            "900",
            "--poll-interval",
            "100",
        ])
        .await
        .expect("local run");
    assert_eq!(report.exit_code(), exit::SUCCESS, "{report}");
    let Report::Local(local) = report else {
        panic!("local run report expected")
    };
    assert_eq!(local.mode, "until-idle");
    assert!(local.functions.iter().any(|f| f == p.stream_function()), "{local}");
    let played = local.runner.for_function(p.stream_function());
    assert_eq!(
        played.records_delivered, 9,
        "eight INSERTs and one soft delete: {local}"
    );
    assert_eq!(played.function_errors, 0, "{local}");
    assert!(
        local
            .runner
            .mappings
            .values()
            .any(|m| m.function_name == p.reprocessor_function()),
        "the DLQ1 mapping is played too: {local}"
    );
    let reprocessor = local.runner.for_function(p.reprocessor_function());
    assert_eq!(
        (reprocessor.messages_deleted, reprocessor.function_errors),
        (1, 0),
        "{local}"
    );
    assert_eq!(p.depth(outputs::DLQ1_URL).await, (0, 0));
    let parked = p.received(outputs::DLQ2_URL).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].0, GARBAGE);
    assert!(
        parked[0]
            .1
            .as_deref()
            .is_some_and(|r| r.starts_with("not an on-failure record")),
        "{parked:?}"
    );
    p.assert_converged(&s).await;
}
