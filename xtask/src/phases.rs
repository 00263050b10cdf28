//! `make test`: its phases as make targets, in order, each timed (as it
//! ends and again in a summary, so a slow phase shows in every CI log);
//! the first failure stops the run and gives its exit code.

use std::path::Path;
use std::time::Instant;

use crate::proc::{self, Failure};

/// What `make test` runs, in this order (the Makefile's TEST_PHASES, which
/// it passes; README, docs/tests.md).
pub const PHASES: &[&str] = &["tools", "fmt-check", "lint", "unit", "e2e"];

/// The phases (make targets) named on the command line, in their order, or
/// `PHASES`.
pub fn select(args: &[String]) -> Result<Vec<String>, String> {
    if args.is_empty() {
        return Ok(PHASES.iter().map(|p| (*p).to_owned()).collect());
    }
    match args.iter().find(|a| a.starts_with('-') || a.is_empty()) {
        Some(bad) => Err(format!("'{bad}' is not a phase (a make target)")),
        None => Ok(args.to_vec()),
    }
}

/// One phase's line: `== phase <name>: <secs>s` as it ends, and its row of
/// the summary.
pub struct Timed {
    pub phase: String,
    pub secs: u64,
    /// The phase's exit code when it failed.
    pub failed: Option<u8>,
}

impl Timed {
    fn mark(&self) -> String {
        self.failed
            .map(|rc| format!("  FAILED (exit {rc})"))
            .unwrap_or_default()
    }

    pub fn end_line(&self) -> String {
        format!("== phase {}: {}s{}", self.phase, self.secs, self.mark())
    }
}

/// `== phase times`, a row per phase run, then the total (as the
/// Makefile's `printf '%-12s %5ds'` printed them).
pub fn summary(timed: &[Timed], total_secs: u64) -> String {
    let mut out = String::from("== phase times\n");
    for t in timed {
        out.push_str(&format!("   {:<12} {:>5}s{}\n", t.phase, t.secs, t.mark()));
    }
    out.push_str(&format!("   total        {total_secs}s"));
    out
}

pub fn run(root: &Path, make: &str, phases: &[String]) -> Result<(), Failure> {
    let started = Instant::now();
    let mut timed = Vec::new();
    for phase in phases {
        println!("== phase {phase}");
        let t0 = Instant::now();
        let status = proc::command(make)
            .args(["--no-print-directory", phase])
            .current_dir(root)
            .status()
            .map_err(|e| Failure::error(format!("cannot run {make}: {e}")))?;
        let failed = (!status.success()).then(|| proc::exit_code(status));
        let t = Timed {
            phase: phase.clone(),
            secs: t0.elapsed().as_secs(),
            failed,
        };
        println!("{}", t.end_line());
        timed.push(t);
        if failed.is_some() {
            break;
        }
    }
    println!("{}", summary(&timed, started.elapsed().as_secs()));
    match timed.last().and_then(|t| t.failed) {
        Some(code) => Err(Failure { code, message: None }),
        None => Ok(()),
    }
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
    fn all_phases_by_default_else_the_named_ones_in_their_order() {
        assert_eq!(select(&[]).unwrap(), ["tools", "fmt-check", "lint", "unit", "e2e"]);
        let named = vec!["unit".to_owned(), "fmt-check".to_owned()];
        assert_eq!(select(&named).unwrap(), ["unit", "fmt-check"]);
        let err = select(&["unit".to_owned(), "--keep-going".to_owned()]).unwrap_err();
        assert!(err.contains("'--keep-going' is not a phase"), "{err}");
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
        let phases = select(&[]).unwrap();
        let failure = run(&dir, fake_make.to_str().unwrap(), &phases).unwrap_err();
        assert_eq!(failure.code, 7);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "tools\nfmt-check\nlint\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
