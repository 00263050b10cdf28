//! The `counterctl` binary as a process: exit codes, and which stream
//! carries what. Nothing here reaches a network: every case fails (or
//! succeeds) before the first request.

use std::process::{Command, Output};

fn counterctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_counterctl"))
        .args(args)
        // The developer's AWS settings must not change the outcome.
        .env_remove("AWS_REGION")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("LOCALSTACK_AUTH_TOKEN")
        .output()
        .expect("run counterctl")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn help_goes_to_stdout_with_the_exit_codes_and_exits_0() {
    let output = counterctl(&["--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("Exit codes:"), "{help}");
    assert!(help.contains("plan") && help.contains("deploy") && help.contains("destroy") && help.contains("status"));
}

#[test]
fn a_bad_target_exits_2_and_names_the_valid_ones() {
    let output = counterctl(&["--target", "gcp", "status"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(
        stderr(&output).contains("[possible values: local, localstack, aws]"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_unknown_param_exits_2_before_any_request() {
    let output = counterctl(&["plan", "--param", "BatchSize=5"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.starts_with("error: unknown parameter \"BatchSize\""),
        "{message}"
    );
}

#[test]
fn an_emulator_endpoint_that_does_not_answer_exits_4() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let endpoint = format!("http://127.0.0.1:{port}");
    let output = counterctl(&[
        "--target",
        "local",
        "--endpoint-url",
        &endpoint,
        "--output",
        "json",
        "status",
    ]);
    assert_eq!(output.status.code(), Some(4));
    assert!(output.stdout.is_empty(), "no report on stdout for an error");
    assert!(
        stderr(&output).contains(&format!("nothing answers at {endpoint}")),
        "{}",
        stderr(&output)
    );
}

#[test]
fn missing_handler_zips_exit_2_before_the_emulator_is_touched() {
    // The endpoint does not answer: reaching it would exit 4, so exit 2 proves nothing was sent.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let endpoint = format!("http://127.0.0.1:{port}");
    let output = counterctl(&[
        "--endpoint-url",
        &endpoint,
        "deploy",
        "--artifacts-dir",
        "/nonexistent/lambda",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("/nonexistent/lambda/stream-counter/bootstrap.zip"),
        "{message}"
    );
    assert!(message.contains("run `make build` first"), "{message}");
}

#[cfg(not(feature = "local"))]
#[test]
fn local_run_without_the_runner_exits_2_and_says_how_to_build_it() {
    let output = counterctl(&["local", "run"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert_eq!(
        stderr(&output),
        "error: this counterctl was built without the local runner: cargo build --bin counterctl --features ops-cli/local\n"
    );
}
