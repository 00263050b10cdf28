//! The local event-source runner is an opt-in feature of ops-cli, `local`:
//! the default build of counterctl, the one for AWS, does not link it (nor
//! the runtime API it serves the handlers), `--features local` does. Read from the
//! dependency tree cargo resolves for each feature set, so nothing is built.
//!
//! hyper is in both builds: the AWS SDK's HTTPS client is built on it. The
//! runner adds itself and hyper's server side (the `server` feature).

use std::process::Command;

/// `name vX.Y.Z [features]` of every normal dependency of ops-cli built
/// with `features`.
fn dependencies(features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut tree = Command::new(cargo);
    tree.args([
        "tree",
        "--locked",
        "--manifest-path",
        concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
    ])
    .args([
        "-p",
        "ops-cli",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--format",
        "{p} [{f}]",
    ]);
    if !features.is_empty() {
        tree.args(["--features", &features.join(",")]);
    }
    let output = tree.output().expect("run cargo tree");
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

#[test]
fn the_default_build_does_not_link_the_local_runner() {
    let tree = dependencies(&[]);
    assert_eq!(find(&tree, "esm-runner"), None, "{tree:#?}");
    let hyper = find(&tree, "hyper").expect("hyper, under the AWS SDK's HTTPS client");
    assert!(!hyper.contains("server"), "only the SDK's client side: {hyper}");
}

#[test]
fn the_local_feature_links_the_local_runner() {
    let tree = dependencies(&["local"]);
    assert!(find(&tree, "esm-runner").is_some(), "{tree:#?}");
    let hyper = find(&tree, "hyper").expect("hyper");
    assert!(hyper.contains("server"), "{hyper}");
}
