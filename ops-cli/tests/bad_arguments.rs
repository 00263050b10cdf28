//! Wrong command lines for every kind of command: each exits 2 with an
//! `error:` line on stderr that names what is wrong, prints nothing on
//! stdout, and sends no request. The endpoint given is one where nothing
//! listens, so a command that reached the network would exit 4 instead.

use std::process::Command;

#[test]
fn wrong_arguments_exit_2_with_a_clear_error_before_any_request() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let endpoint = format!("http://127.0.0.1:{port}");
    let long_scope = "a".repeat(hybrid_counter::ids::MAX_ID_BYTES + 1);
    let cases: [(&[&str], &str); 19] = [
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        (&["usage"], "<SCOPE>"),
        (
            &["usage", &long_scope],
            "scope is 257 bytes long; the maximum is 256 bytes",
        ),
        (&["limit", "get", "tenant\u{1}a"], "control character"),
        (
            &["limit", "set", "tenant-a", "lots"],
            "invalid value 'lots' for '<LIMIT>'",
        ),
        (&["limit", "set", "tenant-a", "-1"], "unexpected argument '-1'"),
        // The maximum a limits file accepts, so every override exports.
        (
            &["limit", "set", "tenant-a", "1000000001"],
            "1000000001 is not in 0..=1000000000",
        ),
        (&["seq", "next"], "<SCOPE>"),
        (&["seq", "next", &long_scope], "scope is 257 bytes long"),
        (&["seq", "get", " tenant"], "must not start or end with whitespace"),
        (
            &["seq", "next", "tenant-a", "--owner", " "],
            "--owner must not be empty",
        ),
        (&["audit", "--repair", "--dry-run"], "cannot be used with"),
        (&["audit", "--segments", "0"], "0 is not in 1..=1000"),
        (&["audit", "--repair", "--grace", "0"], "0 is not in 1..=86400"),
        (&["load", "--workers", "0"], "0 is not in 1..=1000"),
        (&["redrive", "--max", "0"], "--max must be at least 1"),
        (&["status", "--output", "yaml"], "[possible values: text, json]"),
        (
            &["deploy", "--param", "StreamBatchSize"],
            "is not of the form Key=Value",
        ),
        (&["deploy", "--param", "StreamBatchSize=0"], "must be at least 1"),
    ];
    for (args, clue) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_counterctl"))
            .args(["--endpoint-url", &endpoint])
            .args(args)
            .env_remove("AWS_REGION")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("LOCALSTACK_AUTH_TOKEN")
            .output()
            .expect("run counterctl");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: a failed command line prints no report"
        );
        assert!(
            stderr.starts_with("error: ") && stderr.contains(clue),
            "{args:?}: {stderr}"
        );
    }
}
