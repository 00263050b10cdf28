//! `counterctl verify` against a stack deployed on the emulator, with the
//! local runner playing its mappings: it passes and leaves nothing behind;
//! with the stream mapping disabled it fails with a clear reason and exit
//! 1, never passes; `--dry-run` writes nothing. `--failure-path` pushes a
//! batch through DLQ1 and the reprocessor, and fails with a clear reason
//! when the reprocessor's queue mapping is disabled.

use hybrid_counter::AuditStore as _;
use hybrid_counter_aws::DynamoStore;
use ops_cli::commands::verify::VerifyReport;
use ops_cli::{Report, exit};

use crate::deployed;

/// `counterctl verify <args>` while the in-process runner plays the
/// deployed mappings.
async fn verify_beside_the_runner(
    ctl: &e2e::counterctl::Counterctl,
    config: &hybrid_counter::CounterConfig,
    args: &[&str],
) -> (Report, VerifyReport) {
    let mut argv = vec!["verify"];
    argv.extend_from_slice(args);
    let (report, _) = ctl.beside_the_runner(config, esm_runner::Host::Fakecloud, &argv).await;
    let Report::Verify(verify) = &report else {
        panic!("verify report expected: {report:?}")
    };
    let verify = verify.clone();
    (report, verify)
}

/// Nothing of `scopes` is left in either table.
async fn nothing_left(store: &DynamoStore, scopes: &[String]) {
    for scope in scopes {
        let scope = hybrid_counter::Scope::new(scope.clone()).unwrap();
        assert!(
            store.scope_items(&scope).await.unwrap().is_empty(),
            "{scope}: items left"
        );
        assert!(
            store.counter_items(&scope).await.unwrap().is_empty(),
            "{scope}: counters left"
        );
    }
}

#[tokio::test]
async fn verify_passes_on_a_working_stack_and_removes_what_it_wrote() {
    let (emulator, ctl, config) = deployed().await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);

    let (dry, plan) = verify_beside_the_runner(&ctl, &config, &["--dry-run"]).await;
    assert_eq!(dry.exit_code(), exit::SUCCESS, "{dry}");
    assert!(plan.checks.is_empty() && !plan.writes.is_empty(), "{dry}");
    assert!(dry.to_string().contains("Dry run: nothing written"), "{dry}");
    nothing_left(&store, &plan.scopes).await;

    let started = std::time::Instant::now();
    let (report, verify) = verify_beside_the_runner(
        &ctl,
        &config,
        &["--scopes", "2", "--operations", "8", "--timeout", "60"],
    )
    .await;
    eprintln!(
        "verify on the emulator: {:.1} s\n{report}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(report.exit_code(), exit::SUCCESS, "{report}");
    let names: Vec<&str> = verify.checks.iter().map(|c| c.name).collect();
    assert_eq!(names, ["writes", "limit", "re-create", "stream", "audit", "cleanup"]);
    assert!(verify.checks.iter().all(|c| c.passed), "{report}");
    assert_eq!(verify.scopes.len(), 2);
    assert!(
        verify
            .scopes
            .iter()
            .all(|s| s.starts_with(&format!("verify-{}-", verify.run)))
    );
    nothing_left(&store, &verify.scopes).await;
    let json = report.render(ops_cli::cli::OutputFormat::Json).unwrap();
    assert!(
        json.contains("\"checks\"") && json.contains("\"passed\": true"),
        "{json}"
    );
}

/// Switches the deployed mapping whose source ARN contains `source` off as
/// an operator would on the embedded emulator, so that neither the
/// emulator nor the local runner plays it.
async fn disable_mapping(emulator: &e2e::Emulator, source: &str) {
    let lambda = aws_sdk_lambda::Client::new(&emulator.sdk_config().await);
    let mappings = lambda.list_event_source_mappings().send().await.unwrap();
    let mapping = mappings
        .event_source_mappings()
        .iter()
        .find(|m| m.event_source_arn().is_some_and(|arn| arn.contains(source)))
        .unwrap_or_else(|| panic!("a mapping of {source}"));
    let uuid = mapping.uuid().unwrap();
    lambda
        .update_event_source_mapping()
        .uuid(uuid)
        .enabled(false)
        .send()
        .await
        .unwrap();
    // On the embedded emulator `deploy` already disabled the SQS mapping
    // for the local runner and tagged its function: a mapping is off there
    // once it is disabled and untagged.
    lambda
        .untag_resource()
        .resource(mapping.function_arn().unwrap())
        .tag_keys(hybrid_counter_aws::esm::takeover_tag(uuid))
        .send()
        .await
        .unwrap();
}

fn check(verify: &VerifyReport, name: &str) -> ops_cli::commands::verify::Check {
    verify
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}"))
        .clone()
}

#[tokio::test]
async fn verify_fails_with_a_clear_reason_when_the_stream_mapping_is_disabled() {
    let (emulator, ctl, config) = deployed().await;
    disable_mapping(&emulator, "/stream/").await;

    let (report, verify) = verify_beside_the_runner(&ctl, &config, &["--timeout", "3"]).await;
    assert_eq!(report.exit_code(), exit::FAILED, "{report}");
    let check = |name: &str| check(&verify, name);
    assert!(check("writes").passed && check("limit").passed, "{report}");
    let stream = check("stream");
    assert!(!stream.passed, "{report}");
    assert!(
        stream.detail.contains("is the stream mapping enabled"),
        "{}",
        stream.detail
    );
    assert!(!check("re-create").passed && !check("cleanup").passed, "{report}");
    assert!(report.to_string().contains("Result: FAILED"), "{report}");
}

#[tokio::test]
async fn verify_failure_path_is_counted_by_the_reprocessor_and_removed_after() {
    let (emulator, ctl, config) = deployed().await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);

    let (dry, plan) = verify_beside_the_runner(&ctl, &config, &["--failure-path", "--dry-run"]).await;
    assert_eq!(dry.exit_code(), exit::SUCCESS, "{dry}");
    let text = dry.to_string();
    assert!(text.contains("-dlq") && text.contains("on-failure record"), "{text}");
    nothing_left(&store, &plan.scopes).await;

    let started = std::time::Instant::now();
    let (report, verify) = verify_beside_the_runner(
        &ctl,
        &config,
        &[
            "--failure-path",
            "--scopes",
            "2",
            "--operations",
            "8",
            "--timeout",
            "60",
        ],
    )
    .await;
    eprintln!(
        "verify --failure-path on the emulator: {:.1} s\n{report}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(report.exit_code(), exit::SUCCESS, "{report}");
    let names: Vec<&str> = verify.checks.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "writes",
            "limit",
            "re-create",
            "stream",
            "failure-path",
            "audit",
            "cleanup"
        ]
    );
    let failure = check(&verify, "failure-path");
    assert!(failure.detail.contains("counted again by the reprocessor"), "{report}");
    assert_eq!(verify.scopes.len(), 3);
    assert!(verify.scopes[2].ends_with("-dlq"), "{:?}", verify.scopes);
    nothing_left(&store, &verify.scopes).await;
    let json = report.render(ops_cli::cli::OutputFormat::Json).unwrap();
    assert!(json.contains("\"failure-path\""), "{json}");
}

#[tokio::test]
async fn verify_failure_path_fails_with_a_clear_reason_when_the_reprocessors_queue_mapping_is_disabled() {
    let (emulator, ctl, config) = deployed().await;
    disable_mapping(&emulator, ":sqs:").await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);

    let (report, verify) = verify_beside_the_runner(&ctl, &config, &["--failure-path", "--timeout", "4"]).await;
    assert_eq!(report.exit_code(), exit::FAILED, "{report}");
    for passed in ["writes", "limit", "re-create", "stream", "cleanup"] {
        assert!(check(&verify, passed).passed, "{passed}: {report}");
    }
    let failure = check(&verify, "failure-path");
    assert!(!failure.passed, "{report}");
    assert!(
        failure.detail.contains("had not counted")
            && failure.detail.contains("Is the reprocessor's DLQ1 mapping enabled"),
        "{}",
        failure.detail
    );
    // The items taken back from the count are removed uncounted: nothing left.
    nothing_left(&store, &verify.scopes).await;
}

/// `verify --failure-path` on a stack whose scopes are spread over four
/// partition keys (`ScopeKeyShards=4`): every check covers every key, the
/// limit check's create is refused at its key's share, the failure path
/// takes each key's count back and the reprocessor counts them again, and
/// nothing is left under any key.
#[tokio::test]
async fn verify_with_its_failure_path_passes_on_a_stack_of_four_keys_per_scope() {
    verify_with_its_failure_path_over(4, 1).await;
}

/// The same over two levels (`ScopeKeyShards=2`, `ResourceKeySpread=4`):
/// items under eight resources keys, counted on two counters keys; the
/// failure path takes each resources key's items back from its counters
/// key, and the reprocessor counts them there again.
#[tokio::test]
async fn verify_with_its_failure_path_passes_on_a_stack_of_two_counters_keys_of_four_resources_keys() {
    verify_with_its_failure_path_over(2, 4).await;
}

async fn verify_with_its_failure_path_over(count: u32, spread: u32) {
    let (emulator, ctl, config) = e2e::counterctl::deployed_over_keys(count, spread).await;
    let keys = config.scope_keys;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let (report, verify) = verify_beside_the_runner(
        &ctl,
        &config,
        &[
            "--failure-path",
            "--scopes",
            "2",
            "--operations",
            "8",
            "--timeout",
            "60",
        ],
    )
    .await;
    eprintln!("verify --failure-path over {count} x {spread} keys:\n{report}");
    assert_eq!(report.exit_code(), exit::SUCCESS, "{report}");
    assert!(verify.checks.iter().all(|c| c.passed), "{report}");
    assert!(check(&verify, "limit").detail.contains("key's share"), "{report}");
    let mut every_key = verify.scopes.clone();
    for scope in &verify.scopes {
        let scope = hybrid_counter::Scope::new(scope.clone()).unwrap();
        every_key.extend(keys.resource_keys(&scope).unwrap().iter().map(ToString::to_string));
    }
    nothing_left(&store, &every_key).await;
}
