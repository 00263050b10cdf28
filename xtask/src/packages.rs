//! The Lambda packages: every `handlers/<dir>/Cargo.toml`. The Makefile
//! takes their names from the directories (no shell, no cargo, when it
//! reads itself); `make lint` checks here, with `cargo metadata`, that each
//! is a workspace package named as its directory.

use std::path::Path;

use serde_json::Value;

use crate::proc::{self, Failure};

#[derive(Debug, PartialEq, Eq)]
pub struct Handler {
    /// The directory under handlers/.
    pub dir: String,
    /// The package's `name`.
    pub name: String,
}

/// The workspace packages whose manifest is `handlers/<dir>/Cargo.toml`,
/// by directory, from `cargo metadata --format-version 1 --no-deps`.
pub fn from_metadata(metadata: &Value) -> Result<Vec<Handler>, String> {
    let root = metadata["workspace_root"]
        .as_str()
        .ok_or("cargo metadata: no workspace_root")?;
    let handlers_dir = Path::new(root).join("handlers");
    let packages = metadata["packages"].as_array().ok_or("cargo metadata: no packages")?;
    let mut handlers = Vec::new();
    for package in packages {
        let name = package["name"]
            .as_str()
            .ok_or("cargo metadata: a package without a name")?;
        let manifest = package["manifest_path"]
            .as_str()
            .ok_or("cargo metadata: a package without manifest_path")?;
        let Ok(rest) = Path::new(manifest).strip_prefix(&handlers_dir) else {
            continue;
        };
        let parts: Vec<_> = rest.iter().filter_map(|p| p.to_str()).collect();
        if let [dir, "Cargo.toml"] = parts.as_slice() {
            handlers.push(Handler {
                dir: (*dir).to_owned(),
                name: name.to_owned(),
            });
        }
    }
    handlers.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(handlers)
}

/// What is wrong with `handlers` (the workspace's) against `on_disk` (the
/// directories with a Cargo.toml) and `expected` (the Makefile's list).
pub fn problems(handlers: &[Handler], on_disk: &[String], expected: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for h in handlers.iter().filter(|h| h.dir != h.name) {
        problems.push(format!(
            "handlers/{}/ holds package {}: name it as its directory",
            h.dir, h.name
        ));
    }
    for dir in on_disk.iter().filter(|d| !handlers.iter().any(|h| &h.dir == *d)) {
        problems.push(format!(
            "handlers/{dir}/Cargo.toml is not a workspace member (Cargo.toml, members)"
        ));
    }
    let names: Vec<&str> = handlers.iter().map(|h| h.name.as_str()).collect();
    let mut expected_sorted: Vec<&str> = expected.iter().map(String::as_str).collect();
    expected_sorted.sort_unstable();
    let mut names_sorted = names.clone();
    names_sorted.sort_unstable();
    if names_sorted != expected_sorted {
        problems.push(format!(
            "the Makefile's HANDLER_PACKAGES are '{}', the workspace's handler packages '{}'",
            expected.join(" "),
            names.join(" ")
        ));
    }
    problems
}

fn load(root: &Path) -> Result<Vec<Handler>, Failure> {
    let json = proc::run_output(
        proc::command("cargo")
            .args(["metadata", "--format-version", "1", "--no-deps", "--locked"])
            .current_dir(root),
    )?;
    let metadata: Value =
        serde_json::from_str(&json).map_err(|e| Failure::error(format!("cargo metadata: not JSON: {e}")))?;
    from_metadata(&metadata).map_err(Failure::error)
}

/// The directories under handlers/ that hold a Cargo.toml, sorted.
fn on_disk(root: &Path) -> Result<Vec<String>, Failure> {
    let entries = std::fs::read_dir(root.join("handlers")).map_err(|e| Failure::error(format!("handlers/: {e}")))?;
    let mut dirs: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    dirs.sort();
    Ok(dirs)
}

pub fn print(root: &Path) -> Result<(), Failure> {
    for h in load(root)? {
        println!("{}", h.name);
    }
    Ok(())
}

pub fn check(root: &Path, expected: &[String]) -> Result<(), Failure> {
    let handlers = load(root)?;
    let problems = problems(&handlers, &on_disk(root)?, expected);
    if problems.is_empty() {
        println!("handler packages: {} (each named as its directory)", expected.join(" "));
        return Ok(());
    }
    for p in &problems[..problems.len() - 1] {
        eprintln!("error: {p}");
    }
    Err(Failure::error(problems[problems.len() - 1].clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from `cargo metadata --format-version 1 --no-deps` of this workspace.
    const SAMPLE: &str = r#"{
      "packages": [
        {"name": "hybrid-counter", "manifest_path": "/w/counter/Cargo.toml"},
        {"name": "stream-counter", "manifest_path": "/w/handlers/stream-counter/Cargo.toml"},
        {"name": "api", "manifest_path": "/w/handlers/api/Cargo.toml"},
        {"name": "helper", "manifest_path": "/w/handlers/api/helper/Cargo.toml"},
        {"name": "esm-runner", "manifest_path": "/w/localstack/runner/Cargo.toml"},
        {"name": "drift", "manifest_path": "/w/handlers/drift-check/Cargo.toml"}
      ],
      "workspace_root": "/w",
      "version": 1
    }"#;

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_handlers_are_the_packages_one_level_under_handlers() {
        let metadata: Value = serde_json::from_str(SAMPLE).unwrap();
        let handlers = from_metadata(&metadata).unwrap();
        let found: Vec<(&str, &str)> = handlers.iter().map(|h| (h.dir.as_str(), h.name.as_str())).collect();
        assert_eq!(
            found,
            [
                ("api", "api"),
                ("drift-check", "drift"),
                ("stream-counter", "stream-counter")
            ]
        );
        assert!(from_metadata(&serde_json::json!({"packages": []})).is_err());
    }

    #[test]
    fn a_package_not_named_as_its_directory_or_missing_is_reported() {
        let metadata: Value = serde_json::from_str(SAMPLE).unwrap();
        let handlers = from_metadata(&metadata).unwrap();
        let on_disk = strings(&["api", "drift-check", "stream-counter", "new-one"]);
        let problems = problems(
            &handlers,
            &on_disk,
            &strings(&["api", "drift-check", "new-one", "stream-counter"]),
        );
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("handlers/drift-check/ holds package drift"));
        assert!(problems[1].contains("handlers/new-one/Cargo.toml is not a workspace member"));
        assert!(problems[2].contains("HANDLER_PACKAGES"));

        let good = [
            Handler {
                dir: "api".into(),
                name: "api".into(),
            },
            Handler {
                dir: "b".into(),
                name: "b".into(),
            },
        ];
        assert!(problems_ok(&good, &["b", "api"]));
        assert!(!problems_ok(&good, &["api"]));
    }

    fn problems_ok(handlers: &[Handler], expected: &[&str]) -> bool {
        let dirs: Vec<String> = handlers.iter().map(|h| h.dir.clone()).collect();
        problems(handlers, &dirs, &strings(expected)).is_empty()
    }
}
