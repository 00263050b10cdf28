//! Child processes, their exit codes, PATH lookups and the workspace root.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

/// Why xtask stops: its exit code and, unless the failing child said it
/// already, a message for stderr.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: Option<String>,
}

impl Failure {
    /// Exit code 1 with a message, as the Makefile's `echo error: ... >&2; exit 1`.
    pub fn error(message: impl Into<String>) -> Self {
        Failure {
            code: 1,
            message: Some(message.into()),
        }
    }

    pub fn usage(message: impl std::fmt::Display) -> Self {
        Failure {
            code: 2,
            message: Some(format!("{message} (cargo xtask help)")),
        }
    }

    /// A child that failed: its own code, it has printed its own error.
    pub fn child(status: ExitStatus) -> Self {
        Failure {
            code: exit_code(status),
            message: None,
        }
    }
}

/// The exit code a shell would give: the child's, or 128 + the signal
/// that ended it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

/// The variables `cargo run` sets for the xtask binary. Its children
/// (make, cargo) must not see them, so that they build as when run from a
/// shell: a crate that reads one at compile time would otherwise rebuild.
const CARGO_RUN_VARS: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
];

/// A command whose environment is the one make gave `cargo xtask`: without
/// the package's variables and the library path that `cargo run` adds.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        if name_str.starts_with("CARGO_PKG_") || CARGO_RUN_VARS.contains(&name_str.as_ref()) {
            cmd.env_remove(&name);
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf));
        // `$CARGO` is <toolchain>/bin/cargo.
        let toolchain = std::env::var_os("CARGO")
            .map(PathBuf::from)
            .and_then(|cargo| cargo.parent()?.parent().map(Path::to_path_buf));
        let kept = without_cargo_run_paths(&paths, exe_dir.as_deref(), toolchain.as_deref());
        match kept {
            Some(kept) => cmd.env("LD_LIBRARY_PATH", kept),
            None => cmd.env_remove("LD_LIBRARY_PATH"),
        };
    }
    cmd
}

/// `paths` without the directories `cargo run` prepends: the binary's own
/// (and its `deps`) and the toolchain's; `None` when nothing is left.
fn without_cargo_run_paths(
    paths: &OsStr,
    exe_dir: Option<&Path>,
    toolchain: Option<&Path>,
) -> Option<std::ffi::OsString> {
    let kept: Vec<PathBuf> = std::env::split_paths(paths)
        .filter(|p| exe_dir.is_none_or(|d| p != d && !p.starts_with(d.join("deps"))))
        .filter(|p| toolchain.is_none_or(|t| !p.starts_with(t)))
        .collect();
    if kept.is_empty() {
        None
    } else {
        std::env::join_paths(kept).ok()
    }
}

/// Runs `cmd` with inherited stdio; a failure to start it or a non-zero
/// exit is a `Failure`.
pub fn run_status(cmd: &mut Command) -> Result<(), Failure> {
    let status = cmd
        .status()
        .map_err(|e| Failure::error(format!("cannot run {:?}: {e}", cmd.get_program())))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::child(status))
    }
}

/// Runs `cmd` and returns its stdout (stderr inherited).
pub fn run_output(cmd: &mut Command) -> Result<String, Failure> {
    let output = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Failure::error(format!("cannot run {:?}: {e}", cmd.get_program())))?;
    if !output.status.success() {
        return Err(Failure::child(output.status));
    }
    String::from_utf8(output.stdout)
        .map_err(|_| Failure::error(format!("{:?} printed something that is not UTF-8", cmd.get_program())))
}

/// The workspace root: the parent of xtask's manifest directory (`cargo
/// run` gives it at run time; the compile-time one otherwise).
pub fn workspace_root() -> Result<PathBuf, Failure> {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| Failure::error(format!("{} has no parent directory", manifest_dir.display())))
}

/// What `command -v NAME` prints for a program: NAME itself when it holds
/// a slash (if it is an executable file), else the first `DIR/NAME` on PATH.
pub fn find_program(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if name.is_empty() {
        return None;
    }
    if name.contains('/') {
        let candidate = PathBuf::from(name);
        return is_executable(&candidate).then_some(candidate);
    }
    std::env::split_paths(path?).find_map(|dir| {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(name);
        is_executable(&candidate).then_some(candidate)
    })
}

/// `test -x` for a file (symbolic links followed).
pub fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A variable's value, unless it is unset or empty (`${NAME:-default}`).
pub fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_the_shells() {
        let status = Command::new("sh").args(["-c", "exit 3"]).status().unwrap();
        assert_eq!(exit_code(status), 3);
        let status = Command::new("sh").args(["-c", "kill -TERM $$"]).status().unwrap();
        assert_eq!(exit_code(status), 128 + 15);
    }

    #[test]
    fn the_library_path_loses_what_cargo_run_added() {
        let exe_dir = Path::new("/t/debug");
        let toolchain = Path::new("/r/toolchains/stable");
        let added = "/t/debug:/t/debug/deps:/r/toolchains/stable/lib/rustlib/x/lib:/r/toolchains/stable/lib";
        let clean = |paths: &str| without_cargo_run_paths(OsStr::new(paths), Some(exe_dir), Some(toolchain));
        assert_eq!(clean(added), None);
        assert_eq!(
            clean(&format!("{added}:/opt/lib:/usr/lib")).unwrap(),
            "/opt/lib:/usr/lib"
        );
        assert_eq!(clean("/t/debug2:/opt/lib").unwrap(), "/t/debug2:/opt/lib");
    }

    #[test]
    fn programs_are_found_as_command_v_finds_them() {
        let dir = std::env::temp_dir().join(format!("xtask-find-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = dir.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = std::env::join_paths([Path::new("/nonexistent"), &dir]).unwrap();
        assert_eq!(find_program("tool", Some(&path)), None, "not executable");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_program("tool", Some(&path)), Some(tool.clone()));
        assert_eq!(find_program(tool.to_str().unwrap(), None), Some(tool.clone()));
        assert_eq!(find_program("missing", Some(&path)), None);
        assert_eq!(find_program("", Some(&path)), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
