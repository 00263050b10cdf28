//! The README's five-minute tour, run: its steps are parsed from README.md
//! itself (the `counterctl limit set` it starts with, every `$ curl` with
//! the answer printed under it, and the operator commands of its `sh`
//! block), played on the default target as `make deploy` leaves it
//! (ministack, the host-built handlers, the local runner playing the
//! mappings and serving the api function), and each answer is compared with
//! what the README prints: the status code, the `location` header, and every
//! field of the JSON body (the random `incarnation` by presence only; the
//! `eventual` counter, which the README says lags, before its "shortly
//! after" step as any count up to `best_effort`, and at that step as
//! printed), and exit code 0 for the operator commands, `status` printing
//! every line of the README's excerpt of it (`…` elides; `<url-id>` stands
//! for the emulator's random URL id).
//! Changing an answer in the README without changing the kit fails here.

use std::time::{Duration, Instant};

use e2e::counterctl::{Counterctl, Zips};
use e2e::ministack::Ministack;
use serde_json::Value;
use stack::outputs;

/// The README's address of the local API, replaced by the served one.
const README_API: &str = "http://127.0.0.1:9001/";

/// One `$ curl` of the tour and the answer the README prints under it.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    method: String,
    path: String,
    body: Option<String>,
    status: Option<u16>,
    location: Option<String>,
    answer: Option<Value>,
    /// "shortly after": the stream counter may still have to run.
    eventually: bool,
}

/// The tour: from its heading to the next `## ` heading.
fn tour(readme: &str) -> &str {
    let start = readme.find("## A five-minute tour").expect("the README has its tour");
    let rest = &readme[start + 3..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The fenced blocks of `text` whose info string is `info` ("" for none).
fn blocks<'a>(text: &'a str, info: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let line_end = after.find('\n').unwrap_or(after.len());
        let body = &after[line_end + 1..];
        let close = body.find("```").expect("a closed block");
        if after[..line_end].trim() == info {
            found.push(&body[..close]);
        }
        rest = &body[close + 3..];
    }
    found
}

/// The single-quoted or bare word after `flag` in a curl command line.
fn flag_value(line: &str, flag: &str) -> Option<String> {
    let after = line.split_once(&format!(" {flag} "))?.1.trim_start();
    Some(match after.strip_prefix('\'') {
        Some(quoted) => quoted.split_once('\'')?.0.to_owned(),
        None => after.split_whitespace().next()?.to_owned(),
    })
}

/// Every `$ curl` of the tour's first plain block, with the answer under it.
fn calls(tour: &str) -> Vec<Call> {
    let block = blocks(tour, "")
        .into_iter()
        .find(|b| b.contains("$ curl"))
        .expect("the tour's curl block");
    let mut calls = Vec::new();
    for step in block.split("$ ").filter(|s| s.starts_with("curl ")) {
        let mut lines = step.lines();
        let command = lines.next().expect("a command line");
        let (command, comment) = command.split_once(" #").unwrap_or((command, ""));
        let url = command
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("a URL");
        let body = flag_value(command, "-d");
        let method = flag_value(command, "-X").unwrap_or_else(|| if body.is_some() { "POST" } else { "GET" }.into());
        let mut call = Call {
            method,
            path: format!("/{}", url.strip_prefix(README_API).expect("the README's API address")),
            body,
            status: None,
            location: None,
            answer: None,
            eventually: comment.contains("shortly after"),
        };
        for line in lines.map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(status) = line.strip_prefix("HTTP/1.1 ") {
                call.status = status.split_whitespace().next().and_then(|s| s.parse().ok());
            } else if let Some(location) = line.strip_prefix("location: ") {
                call.location = Some(location.to_owned());
            } else if line.starts_with('{') {
                call.answer = Some(serde_json::from_str(line).expect("the README's answer is JSON"));
            }
        }
        calls.push(call);
    }
    calls
}

/// The `counterctl ...` commands of the tour: the one in its prose (the
/// limit) first, then each line of its `sh` block, without the comment.
fn commands(tour: &str) -> Vec<Vec<String>> {
    let words = |line: &str| -> Vec<String> {
        let line = line.split(" #").next().unwrap_or(line);
        line.split_whitespace().skip(1).map(str::to_owned).collect()
    };
    let prose = tour
        .split('`')
        .find(|s| s.starts_with("counterctl limit set"))
        .expect("the limit step");
    let mut commands = vec![words(prose)];
    for block in blocks(tour, "sh") {
        commands.extend(block.lines().filter(|l| l.starts_with("counterctl ")).map(words));
    }
    commands
}

/// The lines of the README's excerpt of `status` (the plain block that ends
/// with the verdict), without the elisions.
fn status_lines(tour: &str) -> Vec<&str> {
    let block = blocks(tour, "")
        .into_iter()
        .find(|b| b.contains("All well."))
        .expect("the README's status excerpt");
    block
        .lines()
        .filter(|l| !l.trim().is_empty() && l.trim() != "…")
        .collect()
}

/// Whether `text` has `line`, where `<url-id>` in `line` stands for any word.
fn has_line(text: &str, line: &str) -> bool {
    match line.split_once("<url-id>") {
        None => text.lines().any(|l| l == line),
        Some((before, after)) => text.lines().any(|l| {
            l.strip_prefix(before)
                .and_then(|rest| rest.split_once('.'))
                .is_some_and(|(id, rest)| !id.is_empty() && format!(".{rest}") == after)
        }),
    }
}

/// Whether the body `got` has every field of `want` with its value
/// (`incarnation`, random, only present; `eventual`, when it may still lag,
/// any count up to `best_effort`).
fn matches(want: &Value, got: &Value, may_lag: bool) -> bool {
    let (Value::Object(want), Value::Object(fields)) = (want, got) else {
        return want == got;
    };
    want.iter().all(|(key, value)| {
        fields.get(key).is_some_and(|field| match key.as_str() {
            "incarnation" => true,
            "eventual" if may_lag => field
                .as_u64()
                .zip(fields.get("best_effort").and_then(Value::as_u64))
                .is_some_and(|(eventual, best_effort)| eventual <= best_effort),
            _ => value == field,
        })
    })
}

#[test]
fn the_tour_is_read_from_the_readme() {
    let readme = include_str!("../../../README.md");
    let calls = calls(tour(readme));
    assert_eq!(calls.len(), 6, "{calls:#?}");
    assert_eq!(
        (calls[0].method.as_str(), calls[0].status, calls[0].body.as_deref()),
        ("POST", Some(201), Some(r#"{"color":"blue"}"#))
    );
    assert_eq!(calls[0].location.as_deref(), Some("/scopes/acct-7/items/widget-1"));
    assert!(calls[5].eventually && calls[5].status.is_none() && calls[5].answer.is_some());
    let commands = commands(tour(readme));
    assert_eq!(commands[0], ["limit", "set", "acct-7", "2"]);
    assert_eq!(commands.len(), 5, "{commands:?}");
    let status = status_lines(tour(readme));
    assert_eq!(status.last(), Some(&"All well."));
    let deployed = "  deployed  https://abc.lambda-url.us-east-1.on.aws/  auth AWS_IAM";
    let line = status
        .iter()
        .find(|l| l.contains("<url-id>"))
        .expect("the deployed URL line");
    assert!(has_line(deployed, line), "{line}");
    assert!(!has_line(
        "  deployed  https://.lambda-url.us-east-1.on.aws/  auth AWS_IAM",
        line
    ));
}

#[test]
fn a_lagging_eventual_counter_matches_only_before_the_stream_has_run() {
    let printed = serde_json::json!({"best_effort": 2, "eventual": 0, "limit": 2});
    let caught_up = serde_json::json!({"best_effort": 2, "eventual": 1, "limit": 2});
    assert!(matches(&printed, &caught_up, true));
    assert!(!matches(&printed, &caught_up, false));
    let over = serde_json::json!({"best_effort": 2, "eventual": 3, "limit": 2});
    assert!(!matches(&printed, &over, true));
    let other_limit = serde_json::json!({"best_effort": 2, "eventual": 0, "limit": 3});
    assert!(!matches(&printed, &other_limit, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_tour_answers_as_printed_on_the_default_target() {
    use clap::Parser as _;
    let default = ops_cli::cli::Cli::try_parse_from(["counterctl", "status"]).unwrap();
    assert_eq!(
        default.global.target,
        ops_cli::cli::Target::Localstack,
        "the tour's target"
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let tour = tour(&readme);

    // What `make deploy` does: host-built handlers, deployed to ministack,
    // the runner playing the mappings and serving the api function.
    let ministack = Ministack::start();
    let mut ctl = Counterctl::at(&ministack.endpoint);
    ctl.zips = Zips::for_host();
    let deployed = ctl.deploy_with(&["--target", "localstack", "deploy"]).await;
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut config = esm_runner::RunnerConfig::new(&ctl.endpoint, workspace);
    config.host = esm_runner::Host::LocalStack;
    config.function_url_port = 0;
    config.functions = Some(
        [
            outputs::STREAM_COUNTER_FUNCTION,
            outputs::DLQ_REPROCESSOR_FUNCTION,
            outputs::API_FUNCTION,
        ]
        .iter()
        .map(|key| deployed.outputs[*key].clone())
        .collect(),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn(esm_runner::run(config, async {
        let _ = stopped.await;
    }));
    let run = |args: Vec<String>| {
        let ctl = &ctl;
        async move {
            let mut argv = vec!["--target".to_owned(), "localstack".to_owned()];
            argv.extend(args);
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            ctl.run(&argv).await
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let api = loop {
        assert!(!runner.is_finished(), "the runner stopped: {:?}", runner.await);
        if let Ok(ops_cli::report::Report::Status(status)) = run(vec!["status".into()]).await
            && let Some(url) = status.api.and_then(|api| api.local_url)
        {
            break url;
        }
        assert!(Instant::now() < deadline, "the api function was not served in time");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let commands = commands(tour);
    let limit = run(commands[0].clone()).await.expect("limit set");
    assert_eq!(limit.exit_code(), 0, "{limit}");
    for call in calls(tour) {
        let headers: Vec<(&str, &str)> = match call.body {
            Some(_) => vec![("content-type", "application/x-www-form-urlencoded")],
            None => vec![],
        };
        let body = call.body.clone().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(if call.eventually { 30 } else { 0 });
        loop {
            let (status, location, answer) = e2e::http_call_with(&api, &call.method, &call.path, &headers, &body).await;
            let as_printed = call.status.is_none_or(|s| s == status)
                && (call.location.is_none() || call.location == location)
                && call
                    .answer
                    .as_ref()
                    .is_none_or(|want| matches(want, &answer, !call.eventually));
            if as_printed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} {}: the README prints {:?} {:?} {:?}, the kit answered {status} {location:?} {answer}",
                call.method,
                call.path,
                call.status,
                call.location,
                call.answer
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    for command in &commands[1..] {
        let report = run(command.clone())
            .await
            .unwrap_or_else(|e| panic!("counterctl {command:?}: {e}"));
        assert_eq!(report.exit_code(), 0, "counterctl {command:?}:\n{report}");
        if command[0] == "status" {
            let text = report.to_string().replace(&api, README_API);
            assert!(text.trim_end().ends_with("All well."), "{text}");
            for line in status_lines(tour) {
                assert!(
                    has_line(&text, line),
                    "the README prints {line:?}; status printed:\n{text}"
                );
            }
        }
    }
    let _ = stop.send(());
    runner.await.expect("runner task").expect("the runner stops cleanly");
}
