//! What each build links, read from the dependency trees cargo resolves
//! (nothing is built):
//! - the local event-source runner is ops-cli's opt-in feature `local`;
//!   a build without it does not link it (nor hyper's server side, which
//!   serves the handlers the runtime API);
//! - the SDK's HTTPS client (`aws/src/sdk.rs`) runs rustls on `ring` in the
//!   workspace's builds, so a first `make deploy` compiles no `aws-lc-sys`,
//!   and on `aws-lc-rs` in the arm64 Lambda release build (`make build`'s
//!   `LAMBDA_FEATURES`).

use std::collections::BTreeSet;
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
        .map(|line| line.trim_end_matches(" (*)").to_owned())
        .collect()
}

/// The features of every version of `package` in `tree`, one set each.
fn versions(tree: &[String], package: &str) -> Vec<BTreeSet<String>> {
    let prefix = format!("{package} v");
    let found: BTreeSet<&str> = tree
        .iter()
        .map(String::as_str)
        .filter(|l| l.starts_with(&prefix))
        .collect();
    found
        .into_iter()
        .map(|line| {
            let features = line.rsplit_once('[').map_or("", |(_, f)| f.trim_end_matches(']'));
            features
                .split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// ops-cli's normal dependencies with `features`.
fn ops_cli(features: &str) -> Vec<String> {
    let mut args = vec!["-p", "ops-cli", "-e", "normal"];
    if !features.is_empty() {
        args.extend(["--features", features]);
    }
    tree(&args)
}

/// The one version of `package` in `tree`, with its features.
fn only(tree: &[String], package: &str) -> BTreeSet<String> {
    let mut found = versions(tree, package);
    assert_eq!(found.len(), 1, "one {package}: {found:?}");
    found.remove(0)
}

#[test]
fn the_default_build_does_not_link_the_local_runner() {
    let tree = ops_cli("");
    assert!(versions(&tree, "esm-runner").is_empty(), "{tree:#?}");
    let hyper = only(&tree, "hyper");
    assert!(!hyper.contains("server"), "only the SDK's client side: {hyper:?}");
}

#[test]
fn the_local_feature_links_the_local_runner() {
    let tree = ops_cli("local");
    assert_eq!(versions(&tree, "esm-runner").len(), 1, "{tree:#?}");
    assert!(only(&tree, "hyper").contains("server"));
}

#[test]
fn the_workspace_build_compiles_no_aws_lc() {
    let tree = tree(&["--workspace", "-e", "normal,build"]);
    assert!(versions(&tree, "aws-lc-sys").is_empty(), "{tree:#?}");
    let rustls = only(&tree, "rustls");
    assert!(rustls.contains("ring") && !rustls.contains("aws_lc_rs"), "{rustls:?}");
}

#[test]
fn the_lambda_release_build_keeps_aws_lc_with_post_quantum_key_exchange() {
    let makefile = std::fs::read_to_string(format!("{WORKSPACE}/Makefile")).expect("Makefile");
    let features = makefile
        .lines()
        .find_map(|line| line.strip_prefix("LAMBDA_FEATURES := "))
        .expect("make build's LAMBDA_FEATURES");
    let handlers: Vec<String> = std::fs::read_dir(format!("{WORKSPACE}/handlers"))
        .expect("handlers/")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut args = vec![
        "-e",
        "normal,build",
        "--target",
        "aarch64-unknown-linux-gnu",
        "--features",
        features,
    ];
    args.extend(handlers.iter().flat_map(|h| ["-p", h.as_str()]));
    let tree = tree(&args);
    assert_eq!(versions(&tree, "aws-lc-sys").len(), 1, "{tree:#?}");
    let rustls = only(&tree, "rustls");
    assert!(
        rustls.contains("aws_lc_rs") && rustls.contains("prefer-post-quantum"),
        "{rustls:?}"
    );
}
