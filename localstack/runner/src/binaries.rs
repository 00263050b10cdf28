//! Which prebuilt handler binary runs which deployed function: the handler
//! packages under `handlers/` and their binaries, and the target dir the
//! build step left them in, as `cargo metadata` reports them (no compile).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cargo_metadata::MetadataCommand;

use crate::error::Error;

/// The workspace as cargo sees it: each handler package's binary, and the
/// target directory (`CARGO_TARGET_DIR` and cargo's configuration honoured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handlers {
    /// Package name → the name of its binary (the one named like the
    /// package, else its first).
    pub binaries: BTreeMap<String, String>,
    pub target_dir: PathBuf,
}

impl Handlers {
    /// Reads `workspace` with `cargo metadata --no-deps`.
    pub fn read(workspace: &Path) -> Result<Self, Error> {
        let metadata = MetadataCommand::new()
            .manifest_path(workspace.join("Cargo.toml"))
            .no_deps()
            .exec()
            .map_err(|source| Error::Metadata {
                workspace: workspace.to_path_buf(),
                source,
            })?;
        let handlers = metadata.workspace_root.join("handlers");
        let binaries = metadata
            .packages
            .iter()
            .filter(|p| p.manifest_path.starts_with(&handlers))
            .filter_map(|p| {
                let bins: Vec<&str> = p
                    .targets
                    .iter()
                    .filter(|t| t.is_bin())
                    .map(|t| t.name.as_str())
                    .collect();
                let binary = bins.iter().find(|b| **b == p.name.as_str()).or(bins.first())?;
                Some((p.name.to_string(), (*binary).to_owned()))
            })
            .collect();
        Ok(Self {
            binaries,
            target_dir: metadata.target_directory.into_std_path_buf(),
        })
    }
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
    fn the_handler_packages_of_this_workspace_and_its_target_dir_are_read_from_cargo() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let handlers = Handlers::read(&workspace).unwrap();
        for expected in ["api", "stream-counter", "dlq-reprocessor", "drift-check"] {
            assert_eq!(
                handlers.binaries.get(expected).map(String::as_str),
                Some(expected),
                "{handlers:?}"
            );
        }
        assert!(
            !handlers.binaries.contains_key("esm-runner"),
            "only packages under handlers/"
        );
        // This test's own binary lives in the target dir cargo reports.
        let this = std::env::current_exe().unwrap();
        assert!(this.starts_with(&handlers.target_dir), "{this:?} {handlers:?}");
    }

    #[test]
    fn a_workspace_cargo_cannot_read_is_an_error_naming_it() {
        let err = Handlers::read(Path::new("/no/such/workspace")).unwrap_err();
        assert!(err.to_string().contains("/no/such/workspace"), "{err}");
    }

    #[test]
    fn the_binaries_are_where_the_build_left_them() {
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
