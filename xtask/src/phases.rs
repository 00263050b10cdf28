//! `make test`: its phases as make targets, in order, each timed (as it
//! ends and again in a summary, so a slow phase shows in every CI log);
//! the first failure stops the run and gives its exit code.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Instant;

/// One phase's line: `== phase <name>: <secs>s` as it ends, and its row of
/// the summary.
struct Timed {
    phase: String,
    secs: u64,
    /// The phase's exit code when it failed.
    failed: Option<u8>,
}

impl Timed {
    fn mark(&self) -> String {
        self.failed
            .map(|rc| format!("  FAILED (exit {rc})"))
            .unwrap_or_default()
    }

    fn end_line(&self) -> String {
        format!("== phase {}: {}s{}", self.phase, self.secs, self.mark())
    }
}

/// `== phase times`, a row per phase run, then the total (as the
/// Makefile's `printf '%-12s %5ds'` printed them).
fn summary(timed: &[Timed], total_secs: u64) -> String {
    let mut out = String::from("== phase times\n");
    for t in timed {
        out.push_str(&format!("   {:<12} {:>5}s{}\n", t.phase, t.secs, t.mark()));
    }
    out.push_str(&format!("   total        {total_secs}s"));
    out
}

/// The exit code a shell would give: the child's, or 128 + the signal
/// that ended it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

/// Runs `make --no-print-directory <phase>` in `root` for each phase;
/// the exit code is the failed phase's, 0 when all passed.
pub fn run(root: &Path, make: &str, phases: &[String]) -> std::io::Result<u8> {
    let started = Instant::now();
    let mut timed = Vec::new();
    for phase in phases {
        println!("== phase {phase}");
        let t0 = Instant::now();
        let status = Command::new(make)
            .args(["--no-print-directory", phase])
            .current_dir(root)
            .status()?;
        let t = Timed {
            phase: phase.clone(),
            secs: t0.elapsed().as_secs(),
            failed: (!status.success()).then(|| exit_code(status)),
        };
        println!("{}", t.end_line());
        let failed = t.failed.is_some();
        timed.push(t);
        if failed {
            break;
        }
    }
    println!("{}", summary(&timed, started.elapsed().as_secs()));
    Ok(timed.last().and_then(|t| t.failed).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(phase: &str, secs: u64, failed: Option<u8>) -> Timed {
        Timed {
            phase: phase.to_owned(),
            secs,
            failed,
        }
    }

    #[test]
    fn the_summary_keeps_the_makefiles_columns() {
        let rows = [
            timed("tools", 3, None),
            timed("fmt-check", 1, None),
            timed("lint", 245, Some(2)),
        ];
        assert_eq!(
            summary(&rows, 250),
            "== phase times\n\
             \x20  tools            3s\n\
             \x20  fmt-check        1s\n\
             \x20  lint           245s  FAILED (exit 2)\n\
             \x20  total        250s"
        );
        assert_eq!(rows[2].end_line(), "== phase lint: 245s  FAILED (exit 2)");
        assert_eq!(rows[0].end_line(), "== phase tools: 3s");
    }

    #[test]
    fn exit_codes_are_the_shells() {
        let status = Command::new("sh").args(["-c", "exit 3"]).status().unwrap();
        assert_eq!(exit_code(status), 3);
        let status = Command::new("sh").args(["-c", "kill -TERM $$"]).status().unwrap();
        assert_eq!(exit_code(status), 128 + 15);
    }

    /// The phase loop against a stand-in for make: a phase named `lint`
    /// fails with 7, so `unit` never runs and the code is lint's.
    #[test]
    fn the_first_failure_stops_the_run_with_its_code() {
        let dir = std::env::temp_dir().join(format!("xtask-phases-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake_make = dir.join("make");
        let log = dir.join("log");
        let script = format!(
            "#!/bin/sh\necho \"$2\" >> '{}'\n[ \"$2\" = lint ] && exit 7\nexit 0\n",
            log.display()
        );
        std::fs::write(&fake_make, script).unwrap();
        std::fs::set_permissions(&fake_make, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let phases: Vec<String> = ["tools", "lint", "unit"].map(String::from).to_vec();
        assert_eq!(run(&dir, fake_make.to_str().unwrap(), &phases).unwrap(), 7);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "tools\nlint\n");
        assert_eq!(run(&dir, fake_make.to_str().unwrap(), &phases[..1]).unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
