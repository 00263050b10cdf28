//! Which prebuilt handler binary runs which deployed function: the handler
//! packages under `handlers/` (each package's default binary has the
//! package's name), matched by name suffix, and where the build step left
//! them (`<target dir>/debug/<binary>`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// Handler packages under `<workspace>/handlers`: package name → binary name
/// (the package's default binary has the package's name).
pub fn handler_binaries(workspace: &Path) -> Result<BTreeMap<String, String>, Error> {
    let mut binaries = BTreeMap::new();
    let dir = workspace.join("handlers");
    for entry in std::fs::read_dir(&dir)? {
        let manifest = entry?.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        if let Some(name) = package_name(&text) {
            binaries.insert(name.clone(), name);
        }
    }
    Ok(binaries)
}

/// The `name` of the `[package]` table of a Cargo manifest.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some(value) = line.strip_prefix("name").map(str::trim_start)
            && let Some(value) = value.strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
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
/// `<workspace>/target`.
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

    #[test]
    fn the_handler_packages_of_this_workspace_are_found() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let binaries = handler_binaries(&workspace).unwrap();
        for expected in ["stream-counter", "dlq-reprocessor"] {
            assert!(binaries.contains_key(expected), "{binaries:?}");
        }
    }

    #[test]
    fn package_names_are_read_from_the_package_table_only() {
        let manifest =
            "[workspace]\nname = \"no\"\n[package]\nversion = \"1\"\nname = \"yes\"\n[dependencies]\nname = \"x\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("yes"));
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
