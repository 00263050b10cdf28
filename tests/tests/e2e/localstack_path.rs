//! The LocalStack path without a token, on ministack (the second emulator,
//! `localstack/ministack.sh`): the stack deploys through ministack's
//! CloudFormation with the handlers built for this host (ministack runs a
//! function's `bootstrap` itself), the runner plays the mappings with
//! ministack's own copies disabled (`Host::LocalStack`, reading the
//! mappings through the mended Lambda client), `verify` and `verify
//! --failure-path` pass, the api function answers the README's requests
//! through ministack's function URL, a poison message in DLQ1 ends in DLQ2,
//! and `destroy --delete-data` leaves nothing of the stack behind.

use std::time::{Duration, Instant};

use e2e::counterctl::{Counterctl, Zips};
use e2e::ministack::Ministack;
use ops_cli::{Report, exit};
use serde_json::json;
use stack::outputs;

/// What the emulator holds of the kit: functions, mappings, queues, tables,
/// stacks, and buckets besides the two a destroy keeps by design (the
/// artifacts bucket, the retained failed-batch bucket).
async fn leftovers(sdk: &aws_config::SdkConfig) -> Vec<String> {
    let mut left = Vec::new();
    let lambda = aws_sdk_lambda::Client::new(sdk);
    let functions = lambda.list_functions().send().await.unwrap();
    left.extend(
        functions
            .functions()
            .iter()
            .filter_map(|f| f.function_name().map(str::to_owned)),
    );
    let mappings = lambda.list_event_source_mappings().send().await.unwrap();
    left.extend(
        mappings
            .event_source_mappings()
            .iter()
            .filter_map(|m| m.uuid().map(str::to_owned)),
    );
    let queues = aws_sdk_sqs::Client::new(sdk).list_queues().send().await.unwrap();
    left.extend(queues.queue_urls().iter().cloned());
    let tables = aws_sdk_dynamodb::Client::new(sdk).list_tables().send().await.unwrap();
    left.extend(tables.table_names().iter().cloned());
    let buckets = hybrid_counter_aws::s3::client(sdk).list_buckets().send().await.unwrap();
    left.extend(
        buckets
            .buckets()
            .iter()
            .filter_map(|b| b.name())
            .filter(|name| !name.contains("-artifacts-") && !name.contains("-failed-batch-"))
            .map(str::to_owned),
    );
    let stacks = aws_sdk_cloudformation::Client::new(sdk).describe_stacks().send().await;
    if let Ok(stacks) = stacks {
        left.extend(
            stacks
                .stacks()
                .iter()
                .filter(|s| s.stack_status().is_some_and(|st| st.as_str() != "DELETE_COMPLETE"))
                .filter_map(|s| s.stack_name().map(str::to_owned)),
        );
    }
    left
}

/// `counterctl --target localstack verify <args>` while the in-process
/// runner plays the mappings as on LocalStack, then hands ministack's
/// copies back as `local run` does when it stops.
async fn verify(ctl: &Counterctl, config: &hybrid_counter::CounterConfig, args: &[&str]) -> Report {
    let mut argv = vec!["--target", "localstack", "verify"];
    argv.extend_from_slice(args);
    let (report, runner) = ctl.beside_the_runner(config, esm_runner::Host::LocalStack, &argv).await;
    let handed = runner.hand_back().await.expect("hand the mappings back");
    assert_eq!(handed.len(), 2, "the stream's and DLQ1's mappings: {handed:?}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_localstack_path_deploys_plays_verifies_and_destroys_on_ministack() {
    let started = Instant::now();
    let ministack = Ministack::start();
    let sdk = ministack.sdk_config().await;
    let mut ctl = Counterctl::at(&ministack.endpoint);
    ctl.zips = Zips::for_host();

    let deployed = ctl.deploy_with(&["--target", "localstack", "deploy"]).await;
    let deploy_took = started.elapsed();
    let out = |key: &str| deployed.outputs[key].clone();
    let config = hybrid_counter::CounterConfig {
        resources_table: out(outputs::RESOURCES_TABLE),
        counters_table: out(outputs::COUNTERS_TABLE),
        default_limit: Some(100),
        eventual_shards: 1,
        best_effort_shards: 1,
        admission: Default::default(),
        scope_keys: Default::default(),
    };

    let report = verify(
        &ctl,
        &config,
        &[
            "--failure-path",
            "--scopes",
            "2",
            "--operations",
            "8",
            "--timeout",
            "90",
        ],
    )
    .await;
    assert_eq!(report.exit_code(), exit::SUCCESS, "{report}");
    let Report::Verify(checks) = &report else {
        panic!("a verify report: {report:?}")
    };
    let names: Vec<&str> = checks.checks.iter().map(|c| c.name).collect();
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
    // The runner handed both mappings back to ministack when it stopped.
    let lambda = aws_sdk_lambda::Client::from_conf(
        hybrid_counter_aws::emulator::string_numbers::mended(aws_sdk_lambda::config::Builder::from(&sdk)).build(),
    );
    for uuid in [out(outputs::STREAM_MAPPING_ID), out(outputs::DLQ1_MAPPING_ID)] {
        let mapping = hybrid_counter_aws::esm::get_mapping(&lambda, &uuid).await.unwrap();
        assert_eq!(mapping.state.as_deref(), Some("Enabled"), "{mapping:?}");
    }
    // The known difference the mending is for: without it the SDK cannot
    // read the stream mapping (its numbers come as strings). When ministack
    // answers numbers, this fails and the mending can go.
    let plain = aws_sdk_lambda::Client::new(&sdk);
    let unread = hybrid_counter_aws::esm::get_mapping(&plain, &out(outputs::STREAM_MAPPING_ID)).await;
    assert!(unread.is_err(), "ministack now answers numbers: {unread:?}");

    // The README's requests, answered by the real api binary that ministack
    // runs behind the function URL (path-style: /_aws/lambda-url/<id>/...).
    ctl.run(&["--target", "localstack", "limit", "set", "acct-7", "2"])
        .await
        .expect("limit set");
    let url_id = out(outputs::API_FUNCTION_URL)
        .trim_start_matches("https://")
        .split('.')
        .next()
        .expect("the URL's id")
        .to_owned();
    let base = format!("{}/", ministack.endpoint);
    let path = |rest: &str| format!("/_aws/lambda-url/{url_id}{rest}");
    // The URL's auth type is AWS_IAM; ministack only checks that a request
    // carries SigV4 material (a known difference: localstack/README.md).
    let headers = [
        ("content-type", "application/json"),
        (
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20261125/us-east-1/lambda/aws4_request, \
             SignedHeaders=host, Signature=0",
        ),
    ];
    let call = |method: &'static str, rest: &str, body: &'static str| {
        let (base, path) = (base.clone(), path(rest));
        async move { e2e::http_call_with(&base, method, &path, &headers, body).await }
    };
    assert_eq!(
        e2e::http_call(&base, "GET", &path("/scopes/acct-7/usage"), "application/json", "")
            .await
            .0,
        403,
        "an unsigned request is refused"
    );
    let (status, location, body) = call("POST", "/scopes/acct-7/items/widget-1", r#"{"color":"blue"}"#).await;
    assert_eq!(
        (status, location.as_deref()),
        (201, Some("/scopes/acct-7/items/widget-1")),
        "{body}"
    );
    assert_eq!(body["best_effort_counted"], json!(true), "{body}");
    assert_eq!(call("POST", "/scopes/acct-7/items/widget-2", "").await.0, 201);
    let (status, _, usage) = call("GET", "/scopes/acct-7/usage", "").await;
    assert_eq!(status, 200);
    assert_eq!(
        (&usage["best_effort"], &usage["limit"]),
        (&json!(2), &json!(2)),
        "{usage}"
    );
    let (status, _, refused) = call("POST", "/scopes/acct-7/items/widget-3", "").await;
    assert_eq!((status, &refused["error"]), (409, &json!("LimitExceeded")), "{refused}");
    assert_eq!(call("DELETE", "/scopes/acct-7/items/widget-1", "").await.0, 204);
    let (status, _, bad) = call("POST", "/scopes/acct-7/items/bad%00id", "").await;
    assert_eq!((status, &bad["error"]), (400, &json!("InvalidInput")), "{bad}");

    // A poison message in DLQ1 (not an on-failure record) is in DLQ2 after
    // one play of the reprocessor's mapping, with its reason.
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    sqs.send_message()
        .queue_url(out(outputs::DLQ1_URL))
        .message_body("poison: not an on-failure record")
        .send()
        .await
        .unwrap();
    let runner = e2e::in_process_runner_on(&ctl.endpoint, &config, esm_runner::Host::LocalStack).await;
    runner.run_until_idle().await.expect("the runner drains DLQ1");
    let parked = e2e::receive_all(&sqs, &out(outputs::DLQ2_URL)).await;
    let bodies: Vec<&str> = parked.iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["poison: not an on-failure record"]);
    assert!(
        parked[0].message_attributes().is_some_and(|a| a.values().any(|v| v
            .string_value()
            .is_some_and(|r| r.starts_with("not an on-failure record")))),
        "{parked:?}"
    );

    let destroyed = match ctl
        .run(&["--target", "localstack", "destroy", "--delete-data", "--yes"])
        .await
    {
        Ok(Report::Destroy(destroyed)) => destroyed,
        other => panic!("destroy: {other:?}"),
    };
    assert!(destroyed.deleted, "{destroyed}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = leftovers(&sdk).await;
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "destroy left {left:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "ministack: deployed in {:.1} s, the whole path in {:.1} s",
        deploy_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
