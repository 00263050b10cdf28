//! A local runner that cannot run says so (issue 36): one started without
//! the handler binaries built writes that reason into its heartbeat, so
//! `counterctl status` lists it as an attention item (exit 1) and `verify`
//! fails with it as soon as it waits for the stream, not at its timeout; a
//! runner stopped cleanly, or never started, while the stack's mappings are
//! taken over for it, makes status exit 1 with that reason.

use std::time::{Duration, Instant};

use e2e::counterctl::deployed;
use esm_runner::{HandlerProcesses, Runner, RunnerConfig};
use ops_cli::report::Report;
use stack::outputs;

/// A runner over `config` playing in the background until `stop` is sent;
/// `running` ends with the runner's result.
async fn start_runner(
    config: RunnerConfig,
) -> (
    std::sync::Arc<Runner<HandlerProcesses>>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<esm_runner::RunReport, esm_runner::Error>>,
) {
    let invoker = HandlerProcesses::new(config.processes.clone(), &config.endpoint, &config.region).unwrap();
    let runner = std::sync::Arc::new(Runner::connect(config, invoker).await.expect("runner"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let runner = runner.clone();
        tokio::spawn(async move {
            runner
                .run(async {
                    let _ = stopped.await;
                })
                .await
        })
    };
    (runner, stop, running)
}

#[tokio::test]
async fn a_runner_that_cannot_invoke_the_handlers_is_an_attention_item_and_fails_verify_at_once() {
    let (_emulator, ctl, _config) = deployed().await;
    let before = ctl.status().await.expect("status");
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut config = RunnerConfig::new(&ctl.endpoint, workspace);
    config.functions = Some(vec![before.outputs[outputs::STREAM_COUNTER_FUNCTION].clone()]);
    // Nothing built there: the binaries are missing.
    config.processes.target_dir = Some(std::env::temp_dir().join(format!("hck-no-binaries-{}", std::process::id())));
    let (_runner, stop, running) = start_runner(config).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let status = ctl.status().await.expect("status");
        if status
            .attention
            .iter()
            .any(|a| a.contains("cannot invoke the handlers"))
        {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "status never named the runner's problem:\n{status}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(!status.healthy());
    let item = status.attention.iter().find(|a| a.contains("cannot invoke")).unwrap();
    assert!(
        item.starts_with("mapping stream -> stream counter: ") && item.contains("stream-counter is not built"),
        "{item}"
    );

    verify_stream_fails_at_once(&ctl, "cannot invoke the handlers").await;

    let _ = stop.send(());
    running.await.unwrap().expect("the runner stops cleanly");
    // A clean stop removes the heartbeat; the stack's DLQ1 mapping is still
    // taken over for the runner, so nothing plays it: status exits 1.
    let after = ctl.run(&["status"]).await.expect("status runs");
    assert_eq!(after.exit_code(), 1, "{after}");
    let Report::Status(after) = &after else {
        panic!("a status report: {after:?}")
    };
    assert!(e2e::counterctl::healthy_but_for_the_stopped_runner(after), "{after}");
    assert!(
        after.attention.iter().any(|a| a.starts_with(
            "mapping stream -> stream counter: the local runner is not running: start it with `make local-run`"
        )),
        "{after}"
    );
}

/// Issue 36 item 5: `status` exits 1 with the reason, and `verify` fails
/// its stream check with the same reason at once, not at its timeout.
#[tokio::test]
async fn a_runner_never_started_fails_status_and_verify_with_the_reason() {
    const NOT_RUNNING: &str = "the local runner is not running: start it with `make local-run`";
    let (_emulator, ctl, _config) = deployed().await;
    let report = ctl.run(&["status"]).await.expect("status runs");
    assert_eq!(report.exit_code(), 1, "{report}");
    assert!(report.to_string().contains(NOT_RUNNING), "{report}");

    verify_stream_fails_at_once(&ctl, NOT_RUNNING).await;
}

/// `verify --timeout 120` exits 1, its stream check failed with `reason`,
/// well before the timeout.
async fn verify_stream_fails_at_once(ctl: &e2e::counterctl::Counterctl, reason: &str) {
    let started = Instant::now();
    let report = ctl.run(&["verify", "--timeout", "120"]).await.expect("verify runs");
    let Report::Verify(verify) = &report else {
        panic!("a verify report: {report:?}")
    };
    assert_eq!(report.exit_code(), 1, "{report}");
    let stream = verify
        .checks
        .iter()
        .find(|c| c.name == "stream")
        .expect("the stream check");
    assert!(!stream.passed && stream.detail.contains(reason), "{report}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "verify waited {:?}",
        started.elapsed()
    );
}

/// Issue 36 review: a handler that fails at init is, as on AWS, a function
/// error of the batch it was started for (the mapping's retry policy
/// applies), not an infrastructure error retried forever; and the broken
/// function keeps neither the discovery nor the other mappings from
/// playing.
#[tokio::test]
async fn a_handler_that_fails_at_init_fails_its_batches_as_function_errors_and_the_others_play() {
    let (emulator, ctl, config) = deployed().await;
    let status = ctl.status().await.expect("status");
    let stream_counter = status.outputs[outputs::STREAM_COUNTER_FUNCTION].clone();
    let sdk = emulator.sdk_config().await;
    // No table names: its `processor_from_env` fails and the process exits at init.
    aws_sdk_lambda::Client::new(&sdk)
        .update_function_configuration()
        .function_name(&stream_counter)
        .environment(
            aws_sdk_lambda::types::Environment::builder()
                .variables("BROKEN", "no table names")
                .build(),
        )
        .send()
        .await
        .expect("break the stream counter");
    let counter = hybrid_counter::Counter::new(
        hybrid_counter_aws::DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config),
        100,
    );
    counter
        .create(
            &crate::scope("init"),
            &crate::id("a"),
            serde_dynamo::Item::default(),
            crate::NOW,
        )
        .await
        .unwrap();

    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let config = RunnerConfig::new(&ctl.endpoint, workspace);
    let (runner, stop, running) = start_runner(config).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let report = loop {
        let report = runner.report();
        let stream = report.mappings.values().find(|m| m.kind == "stream");
        if stream.is_some_and(|m| m.function_errors > 0) {
            break report;
        }
        assert!(!running.is_finished(), "the runner stopped");
        assert!(
            Instant::now() < deadline,
            "no function error from the broken handler: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // The other mappings were discovered beside the broken one.
    assert!(report.mappings.values().any(|m| m.kind == "sqs"), "{report:?}");
    let _ = stop.send(());
    running.await.unwrap().expect("the runner stops cleanly");
}
