//! `make recipe-check`: `make deploy` is too slow for `make test`, yet a
//! quote or a comma that breaks one of its recipe lines would show only on
//! a user's machine; so each line `make -n deploy` prints, for each TARGET,
//! must parse as shell (`bash -n`).

use std::path::Path;
use std::process::Stdio;

use crate::proc::{self, Failure};

/// The printed recipe's lines, a line ending in a backslash joined with the
/// next (backslash and newline removed, as the shell reads them).
pub fn join_lines(printed: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current: Option<String> = None;
    for line in printed.lines() {
        let mut joined = current.take().unwrap_or_default();
        joined.push_str(line);
        if joined.ends_with('\\') {
            joined.pop();
            current = Some(joined);
        } else {
            lines.push(joined);
        }
    }
    // A last line that ends in a backslash keeps it (sed's `N` finds no next line).
    lines.extend(current.map(|mut line| {
        line.push('\\');
        line
    }));
    lines
}

/// Does bash parse `line` (without running it)?
pub fn parses(line: &str) -> Result<bool, Failure> {
    let status = proc::command("bash")
        .args(["-n", "-c", line])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| Failure::error(format!("cannot run bash: {e}")))?;
    Ok(status.success())
}

/// The first line that does not parse, if any.
pub fn first_broken(lines: &[String]) -> Result<Option<&String>, Failure> {
    for line in lines {
        if !parses(line)? {
            return Ok(Some(line));
        }
    }
    Ok(None)
}

pub fn run(root: &Path, make: &str, targets: &[String]) -> Result<(), Failure> {
    for target in targets {
        let printed = proc::run_output(
            proc::command(make)
                .args(["--no-print-directory", "-n", "deploy"])
                .arg(format!("TARGET={target}"))
                .current_dir(root),
        )
        .map_err(|f| Failure { code: 1, ..f })?;
        if let Some(line) = first_broken(&join_lines(&printed))? {
            return Err(Failure::error(format!(
                "make deploy TARGET={target}: this recipe line does not parse: {line}"
            )));
        }
    }
    println!("make deploy: every recipe line parses ({})", targets.join(" "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continued_lines_are_joined_as_the_shell_reads_them() {
        let printed = "cargo build \\\n  --bin api \\\n  --bin counterctl\necho done\n\nlast \\";
        assert_eq!(
            join_lines(printed),
            ["cargo build   --bin api   --bin counterctl", "echo done", "", "last \\"]
        );
        assert_eq!(join_lines(""), Vec::<String>::new());
    }

    #[test]
    fn a_broken_recipe_line_is_found() {
        let good = join_lines("echo \"Next:\"\nif true; then \\\n  echo ok; fi\n");
        assert_eq!(first_broken(&good).unwrap(), None);

        // What a comma inside $(if ...) leaves: the branch cut at the comma.
        let broken = join_lines("echo \"Next:\"\necho \"  curl -i http://127.0.0.1:9001/scopes/acct-1/usage\n");
        assert_eq!(
            first_broken(&broken).unwrap().map(String::as_str),
            Some("echo \"  curl -i http://127.0.0.1:9001/scopes/acct-1/usage")
        );
        // A continuation is checked as one line: its halves alone do not parse.
        let split = join_lines("if true; then \\\necho ok; fi\n");
        assert_eq!(split.len(), 1);
        assert!(!parses("if true; then").unwrap());
        assert!(parses(&split[0]).unwrap());
    }
}
