//! Which prebuilt handler binary runs which deployed function: the handler
//! packages under `handlers/` (each package's default binary has the
//! package's name), matched by name suffix, and where the build step left
//! them (`<target dir>/debug/<binary>`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// Handler packages under `<workspace>/handlers`: package name → binary
/// name. Each directory there holding a `Cargo.toml` is a package named as
/// the directory, whose binary has the package's name: the Makefile's rule
/// (a wrong name fails its build), which the test below checks against
/// `cargo metadata`. Read from the directory names, so the runner neither
/// parses a manifest nor starts a cargo.
pub fn handler_binaries(workspace: &Path) -> Result<BTreeMap<String, String>, Error> {
    let mut binaries = BTreeMap::new();
    for entry in std::fs::read_dir(workspace.join("handlers"))? {
        let dir = entry?.path();
        if let Some(name) = dir.file_name().and_then(|n| n.to_str())
            && dir.join("Cargo.toml").is_file()
        {
            binaries.insert(name.to_owned(), name.to_owned());
        }
    }
    Ok(binaries)
}

/// The binary a deployed function runs: the handler package whose name the
/// function name equals or ends with (`-<package>`), the longest such.
pub fn binary_for(function_name: &str, binaries: &BTreeMap<String, String>) -> Option<String> {
    binaries
        .iter()
        .filter(|(package, _)| function_name == *package || function_name.ends_with(&format!("-{package}")))
        .max_by_key(|(package, _)| package.len())
        .map(|(_, binary)| binary.clone())
}

/// Cargo's target directory for `workspace`: `explicit`, else
/// `$CARGO_TARGET_DIR` (relative to the workspace when relative), else
/// `<workspace>/target`. The Makefile exports `CARGO_TARGET_DIR` as cargo
/// resolves it (`localstack/lib/target-dir.sh`, which also reads a
/// `.cargo/config.toml`), so under make this is where cargo builds.
pub fn target_dir(workspace: &Path, explicit: Option<&Path>) -> PathBuf {
    let dir = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target"));
    if dir.is_absolute() { dir } else { workspace.join(dir) }
}

/// Where the build step leaves `binary`: `<target dir>/debug/<binary>`
/// (`release/` for a release build).
pub fn binary_path(target_dir: &Path, release: bool, binary: &str) -> PathBuf {
    target_dir.join(if release { "release" } else { "debug" }).join(binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployed_names_map_to_the_longest_matching_handler_package() {
        let binaries: BTreeMap<String, String> = ["api", "stream-counter", "dlq-reprocessor", "counter"]
            .iter()
            .map(|n| ((*n).to_owned(), (*n).to_owned()))
            .collect();
        assert_eq!(
            binary_for("hybrid-counter-stream-counter", &binaries).as_deref(),
            Some("stream-counter")
        );
        assert_eq!(
            binary_for("hck-dlq-reprocessor", &binaries).as_deref(),
            Some("dlq-reprocessor")
        );
        assert_eq!(binary_for("api", &binaries).as_deref(), Some("api"));
        assert_eq!(binary_for("hck-unknown", &binaries), None);
        assert_eq!(binary_for("hckapi", &binaries), None, "a suffix must follow a hyphen");
    }

    /// The rule [`handler_binaries`] reads the packages by, against cargo's
    /// own account of the workspace: every handler directory is a package of
    /// its name with one binary target of that name, and no other package
    /// lives under `handlers/`.
    #[test]
    fn each_handler_directory_is_the_package_and_the_binary_of_its_name() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .unwrap();
        let output = std::process::Command::new(env!("CARGO"))
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .current_dir(&workspace)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let handlers = workspace.join("handlers");
        let mut from_cargo = BTreeMap::new();
        for package in metadata["packages"].as_array().unwrap() {
            let manifest = Path::new(package["manifest_path"].as_str().unwrap());
            if manifest.parent().and_then(Path::parent) != Some(handlers.as_path()) {
                continue;
            }
            let bins: Vec<&str> = package["targets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
                .map(|t| t["name"].as_str().unwrap())
                .collect();
            let name = package["name"].as_str().unwrap();
            let dir = manifest.parent().unwrap().file_name().unwrap().to_str().unwrap();
            assert_eq!(name, dir, "handlers/{dir} holds package {name}");
            assert_eq!(bins, [name], "package {name}'s binaries");
            from_cargo.insert(name.to_owned(), name.to_owned());
        }
        assert!(from_cargo.contains_key("stream-counter"), "{from_cargo:?}");
        assert_eq!(handler_binaries(&workspace).unwrap(), from_cargo);
    }

    #[test]
    fn the_binaries_are_where_the_build_left_them() {
        let kit = Path::new("/kit");
        assert_eq!(target_dir(kit, Some(Path::new("/t"))), PathBuf::from("/t"));
        assert_eq!(target_dir(kit, Some(Path::new("out"))), PathBuf::from("/kit/out"));
        assert_eq!(
            binary_path(Path::new("/t"), false, "api"),
            PathBuf::from("/t/debug/api")
        );
        assert_eq!(
            binary_path(Path::new("/t"), true, "api"),
            PathBuf::from("/t/release/api")
        );
    }
}
