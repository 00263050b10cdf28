//! What each build links, read from the dependency trees cargo resolves
//! (nothing is built):
//! - the local event-source runner is ops-cli's opt-in feature `local`: the
//!   default build of counterctl, the one for AWS, does not link it (nor
//!   hyper's server side, which serves the handlers the runtime API);
//! - the SDK's HTTPS client (`hybrid_counter_aws::sdk`) runs rustls on
//!   `ring` in the workspace's builds, so a first `make deploy` compiles no
//!   `aws-lc-sys`, and on `aws-lc-rs` in the Lambda release build (feature
//!   `hybrid-counter-aws/aws-lc`, which `make build` turns on).

use std::process::Command;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// `name vX.Y.Z [features]` of every dependency cargo resolves for `args`.
fn tree(args: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--locked",
            "--manifest-path",
            &format!("{WORKSPACE}/Cargo.toml"),
        ])
        .args(["--prefix", "none", "--format", "{p} [{f}]"])
        .args(args)
        .output()
        .expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn find<'a>(tree: &'a [String], package: &str) -> Option<&'a str> {
    let prefix = format!("{package} v");
    tree.iter().map(String::as_str).find(|line| line.starts_with(&prefix))
}

/// ops-cli's normal dependencies with `features`.
fn ops_cli(features: &str) -> Vec<String> {
    let mut args = vec!["-p", "ops-cli", "-e", "normal"];
    if !features.is_empty() {
        args.extend(["--features", features]);
    }
    tree(&args)
}

#[test]
fn the_default_build_does_not_link_the_local_runner() {
    let tree = ops_cli("");
    assert_eq!(find(&tree, "esm-runner"), None, "{tree:#?}");
    let hyper = find(&tree, "hyper").expect("hyper, under the AWS SDK's HTTPS client");
    assert!(!hyper.contains("server"), "only the SDK's client side: {hyper}");
}

#[test]
fn the_local_feature_links_the_local_runner() {
    let tree = ops_cli("local");
    assert!(find(&tree, "esm-runner").is_some(), "{tree:#?}");
    let hyper = find(&tree, "hyper").expect("hyper");
    assert!(hyper.contains("server"), "{hyper}");
}

#[test]
fn the_workspace_build_compiles_no_aws_lc() {
    let tree = tree(&["--workspace", "-e", "normal,build"]);
    assert_eq!(find(&tree, "aws-lc-sys"), None, "{tree:#?}");
    let rustls = find(&tree, "rustls").expect("rustls, under the SDK's HTTPS client");
    assert!(rustls.contains("ring") && !rustls.contains("aws_lc_rs"), "{rustls}");
}

#[test]
fn the_lambda_release_build_keeps_aws_lc_with_post_quantum_key_exchange() {
    let handlers = ["api", "stream-counter", "dlq-reprocessor", "drift-check"];
    let mut args = vec!["-e", "normal,build", "--features", "hybrid-counter-aws/aws-lc"];
    args.extend(handlers.iter().flat_map(|h| ["-p", *h]));
    let tree = tree(&args);
    assert!(find(&tree, "aws-lc-sys").is_some(), "{tree:#?}");
    let rustls = find(&tree, "rustls").expect("rustls");
    assert!(
        rustls.contains("aws_lc_rs") && rustls.contains("prefer-post-quantum"),
        "{rustls}"
    );

    let makefile = std::fs::read_to_string(format!("{WORKSPACE}/Makefile")).expect("Makefile");
    let build = makefile
        .lines()
        .find(|line| line.trim_start().starts_with("cargo lambda build"))
        .expect("make build's cargo lambda build");
    assert!(build.contains("--features hybrid-counter-aws/aws-lc"), "{build}");
}
