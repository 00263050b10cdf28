//! The api function served locally (`counterctl local run`, `make deploy`):
//! plain HTTP requests, unsigned, to the loopback URL the local runner
//! serves, through `cargo lambda watch`'s function URL emulation and the
//! real `api` binary with the function's deployed environment, against the
//! deployed stack's tables; `counterctl status` shows the URL while it is
//! served and not after the runner stopped.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use e2e::http_call as call;
use serde_json::json;
use stack::outputs;

use crate::deployed;

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

    // What `counterctl local run` runs, on a free port (tests run in
    // parallel), for the api function alone (no mapping to play).
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let mut runner_config = esm_runner::RunnerConfig::new(&ctl.endpoint, workspace);
    runner_config.functions = Some(vec![before.outputs[outputs::API_FUNCTION].clone()]);
    runner_config.function_url_port = 0;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn(esm_runner::run(runner_config, async {
        let _ = stopped.await;
    }));

    // The runner tags the function once the URL answers (after building the binary).
    let deadline = Instant::now() + Duration::from_secs(900);
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
    let sdk = e2e::sdk_config_for(&ctl.endpoint).await;
    let item = aws_sdk_dynamodb::Client::new(&sdk)
        .get_item()
        .table_name(&config.resources_table)
        .key("scope", AttributeValue::S("acct".into()))
        .key("id", AttributeValue::S("w1".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item")
        .item
        .expect("the item is in the deployed table");
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
        (204, None, serde_json::Value::Null)
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
