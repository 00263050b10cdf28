//! The kit's HTTPS client (module `sdk`) runs rustls on `ring` in the debug
//! builds of this machine, so a first `make deploy` compiles no `aws-lc-sys`
//! (over a minute of a core), and on `aws-lc-rs` in the Lambda release build
//! (feature `aws-lc`, which `make build` turns on). Read from the dependency
//! trees cargo resolves, so nothing is built.

use std::process::Command;

/// `name vX.Y.Z [features]` of every normal and build dependency cargo
/// resolves for `args` in this workspace.
fn tree(args: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--locked",
            "--manifest-path",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"),
        ])
        .args(["-e", "normal,build", "--prefix", "none", "--format", "{p} [{f}]"])
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

const HANDLERS: [&str; 8] = [
    "-p",
    "api",
    "-p",
    "stream-counter",
    "-p",
    "dlq-reprocessor",
    "-p",
    "drift-check",
];

#[test]
fn the_workspace_build_compiles_no_aws_lc() {
    let tree = tree(&["--workspace"]);
    assert_eq!(find(&tree, "aws-lc-sys"), None, "{tree:#?}");
    let rustls = find(&tree, "rustls").expect("rustls, under the SDK's HTTPS client");
    assert!(rustls.contains("ring") && !rustls.contains("aws_lc_rs"), "{rustls}");
}

#[test]
fn the_lambda_release_build_keeps_aws_lc_with_post_quantum_key_exchange() {
    let mut args = HANDLERS.to_vec();
    args.extend(["--features", "hybrid-counter-aws/aws-lc"]);
    let tree = tree(&args);
    assert!(find(&tree, "aws-lc-sys").is_some(), "{tree:#?}");
    let rustls = find(&tree, "rustls").expect("rustls");
    assert!(
        rustls.contains("aws_lc_rs") && rustls.contains("prefer-post-quantum"),
        "{rustls}"
    );

    let makefile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Makefile")).expect("Makefile");
    let build = makefile
        .lines()
        .find(|line| line.trim_start().starts_with("cargo lambda build"))
        .expect("make build's cargo lambda build");
    assert!(build.contains("--features hybrid-counter-aws/aws-lc"), "{build}");
}
