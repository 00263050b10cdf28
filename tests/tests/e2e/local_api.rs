//! The api function served locally (`counterctl local run`, `make deploy`):
//! plain HTTP requests, unsigned, to the loopback URL the local runner
//! serves, through the runner's function URL emulation and the real,
//! prebuilt `api` binary with the function's deployed environment, against the
//! deployed stack's tables; `counterctl status` shows the URL while it is
//! served and not after the runner stopped.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use e2e::{http_call as call, try_http_call as try_call};
use serde_json::{Value, json};
use stack::outputs;

use e2e::counterctl::Counterctl;

use crate::deployed;

/// The api function served by a local runner, as `counterctl local run` does.
struct LocalApi {
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    runner: tokio::task::JoinHandle<Result<esm_runner::RunReport, esm_runner::Error>>,
}

/// What `counterctl local run` runs, on a free port (tests run in
/// parallel), for the api function alone (no mapping to play); returns
/// once `counterctl status` says the URL answers.
async fn serve_api(ctl: &Counterctl, function: &str) -> LocalApi {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let mut runner_config = esm_runner::RunnerConfig::new(&ctl.endpoint, workspace);
    runner_config.functions = Some(vec![function.to_owned()]);
    runner_config.function_url_port = 0;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn(esm_runner::run(runner_config, async {
        let _ = stopped.await;
    }));

    // The runner tags the function once the URL answers (the binary is prebuilt).
    let deadline = Instant::now() + Duration::from_secs(60);
    let url = loop {
        assert!(!runner.is_finished(), "the runner stopped: {:?}", runner.await);
        let api = ctl.status().await.expect("status").api.expect("api status");
        if let (Some(url), Some(true)) = (api.local_url, api.local_answering) {
            assert_eq!(api.local_iam_auth, Some(false));
            break url;
        }
        assert!(Instant::now() < deadline, "the api function was not served in time");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    LocalApi { url, stop, runner }
}

/// The resource item `scope`/`id` as the deployed table holds it.
async fn resource_item(
    dynamodb: &aws_sdk_dynamodb::Client,
    config: &hybrid_counter::CounterConfig,
    scope: &str,
    id: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    dynamodb
        .get_item()
        .table_name(&config.resources_table)
        .key("scope", AttributeValue::S(scope.to_owned()))
        .key("id", AttributeValue::S(id.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item")
        .item
        .expect("the item is in the deployed table")
}

/// The names of the scope's best-effort counter items, with their counts.
async fn best_effort_items(
    dynamodb: &aws_sdk_dynamodb::Client,
    config: &hybrid_counter::CounterConfig,
    scope: &str,
) -> std::collections::BTreeMap<String, String> {
    let items = dynamodb
        .query()
        .table_name(&config.counters_table)
        .key_condition_expression("#s = :s")
        .expression_attribute_names("#s", "scope")
        .expression_attribute_values(":s", AttributeValue::S(scope.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("query the counters")
        .items
        .unwrap_or_default();
    items
        .iter()
        .filter_map(|item| {
            let name = item.get("name")?.as_s().ok()?;
            let count = item.get("count")?.as_n().ok()?;
            name.starts_with("best_effort").then(|| (name.clone(), count.clone()))
        })
        .collect()
}

/// On AWS a configuration change applies to the next invocation: the
/// runner restarts the served function when its deployed configuration
/// changes, on the same port.
#[tokio::test]
async fn the_local_api_follows_a_redeploy_of_admission_mode_and_best_effort_shards() {
    let (_emulator, ctl, config) = deployed().await;
    let status = ctl.status().await.expect("status");
    let LocalApi { url, stop, runner } = serve_api(&ctl, &status.outputs[outputs::API_FUNCTION]).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&e2e::sdk_config_for(&ctl.endpoint).await);
    let json_type = "application/json";
    assert_eq!(
        call(&url, "POST", "/scopes/acct/items/before", json_type, "").await.0,
        201
    );
    let items = best_effort_items(&dynamodb, &config, "acct").await;
    assert_eq!(
        items.keys().collect::<Vec<_>>(),
        ["best_effort"],
        "one best-effort item before the redeploy"
    );

    let report = ctl.deploy(&["AdmissionMode=strict", "BeShardCount=4"]).await;
    assert!(report.succeeded(), "{report}");
    let redeployed = Instant::now();
    // The next creates go to the restarted function (a poll of at most a
    // second, then a restart of the already built binary), on the same URL.
    // While the process restarts nothing listens on the port: a refused
    // or cut connection is retried, and counted.
    // One create a second, so the default limit of 100 is never reached.
    let deadline = redeployed + Duration::from_secs(45);
    let (mut n, mut refused) = (0, 0);
    let sharded = loop {
        assert!(
            Instant::now() < deadline,
            "{n} create(s) after the redeploy ({refused} refused) still wrote only the single best-effort item: {:?}",
            best_effort_items(&dynamodb, &config, "acct").await
        );
        n += 1;
        let path = format!("/scopes/acct/items/after-{n}");
        let (status, _, body) = match try_call(&url, "POST", &path, json_type, "").await {
            Ok(answer) => answer,
            Err(error) => {
                eprintln!("local API redeploy: POST {path}: {error}");
                refused += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        assert_eq!(status, 201, "{body}");
        let items = best_effort_items(&dynamodb, &config, "acct").await;
        if items.keys().any(|name| name.starts_with("best_effort#")) {
            break items;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let item = resource_item(&dynamodb, &config, "acct", &format!("after-{n}")).await;
    assert!(
        item.contains_key("be_shard"),
        "a sharded create records its shard: {item:?}"
    );
    eprintln!(
        "local API redeploy: followed after {:.1}s and {n} attempt(s), {refused} refused while restarting: {sharded:?}",
        redeployed.elapsed().as_secs_f64()
    );

    stop.send(()).expect("the runner is running");
    runner.await.expect("runner task").expect("the runner stopped cleanly");
}

#[tokio::test]
async fn the_local_runner_serves_the_api_function_url_over_http_without_iam_until_stopped() {
    let started = Instant::now();
    let (_emulator, ctl, config) = deployed().await;
    let deployed_in = started.elapsed();
    let before = ctl.status().await.expect("status");
    let api = before.api.clone().expect("the stack has an api function");
    assert_eq!(api.auth_type.as_deref(), Some("AWS_IAM"), "{api:?}");
    assert_eq!(api.local_url, None, "nothing serves it yet");
    ctl.run(&["limit", "set", "acct", "2"]).await.expect("limit set");

    let LocalApi { url, stop, runner } = serve_api(&ctl, &before.outputs[outputs::API_FUNCTION]).await;
    let served_at = Instant::now();
    let serving_took = served_at.duration_since(started) - deployed_in;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    // curl's default content type: the function URL hands the body over
    // base64-encoded, the function decodes it.
    let form = "application/x-www-form-urlencoded";
    let (status, location, body) = call(&url, "POST", "/scopes/acct/items/w1", form, r#"{"color":"blue"}"#).await;
    assert_eq!(
        (status, location.as_deref()),
        (201, Some("/scopes/acct/items/w1")),
        "{body}"
    );
    assert_eq!((&body["scope"], &body["id"]), (&json!("acct"), &json!("w1")), "{body}");
    let dynamodb = aws_sdk_dynamodb::Client::new(&e2e::sdk_config_for(&ctl.endpoint).await);
    let item = resource_item(&dynamodb, &config, "acct", "w1").await;
    assert_eq!(item["color"].as_s().ok().map(String::as_str), Some("blue"));

    let json_type = "application/json";
    assert_eq!(call(&url, "POST", "/scopes/acct/items/w2", json_type, "").await.0, 201);
    let (status, _, body) = call(&url, "POST", "/scopes/acct/items/w3", json_type, "").await;
    assert_eq!(
        (status, body),
        (
            409,
            json!({
                "error": "LimitExceeded",
                "message": "limit exceeded: the scope uses 2 of 2",
                "usage": 2,
                "limit": 2,
            })
        )
    );
    let (status, _, usage) = call(&url, "GET", "/scopes/acct/usage", json_type, "").await;
    assert_eq!(
        (status, &usage["best_effort"], &usage["limit"]),
        (200, &json!(2), &json!(2)),
        "{usage}"
    );
    assert_eq!(
        call(&url, "DELETE", "/scopes/acct/items/w1", json_type, "").await,
        (204, None, Value::Null)
    );
    let (status, _, body) = call(&url, "POST", "/scopes/acct/items/a%00b", json_type, "").await;
    assert_eq!((status, &body["error"]), (400, &json!("InvalidInput")), "{body}");
    assert_eq!(
        body["message"], "resource id contains a control character at byte 1; use printable characters only",
        "{body}"
    );
    let (_, _, usage) = call(&url, "GET", "/scopes/acct/usage", json_type, "").await;
    assert_eq!(
        usage["best_effort"], 1,
        "the delete counted, the refusals did not: {usage}"
    );
    let requests = served_at.elapsed();

    let stopping = Instant::now();
    stop.send(()).expect("the runner is running");
    let report = runner.await.expect("runner task").expect("the runner stopped cleanly");
    let stop_took = stopping.elapsed();
    assert_eq!(report.function_urls.len(), 1, "{report}");
    assert_eq!(report.function_urls[0].local_url, url);
    assert!(
        tokio::net::TcpStream::connect(url.trim_start_matches("http://").trim_end_matches('/'))
            .await
            .is_err(),
        "nothing listens at {url} after the stop"
    );
    let after = ctl.status().await.expect("status").api.expect("api status");
    assert_eq!(after.local_url, None, "the stop removed the URL tag");
    eprintln!(
        "local API test: {:.1}s in all: deploy {:.1}s, build and serve {:.1}s, 8 requests {:.2}s, stop {:.1}s",
        started.elapsed().as_secs_f64(),
        deployed_in.as_secs_f64(),
        serving_took.as_secs_f64(),
        requests.as_secs_f64(),
        stop_took.as_secs_f64()
    );
}
