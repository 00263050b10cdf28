//! `make recipe-check`: `make deploy` is too slow for `make test` to run,
//! yet a quote or a comma that breaks one of its recipe lines (a comma ends
//! a `$(if ...)` branch) would show only on a user's machine. So what
//! `make -n deploy` prints for each TARGET must parse as shell (`bash -n`).

use std::path::Path;
use std::process::Command;

/// The commands of `make -n`'s output: a line ending in a backslash goes on
/// with the next, as the shell reads it.
fn commands(printed: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut lines = printed.lines().peekable();
    while let Some(line) = lines.next() {
        match line.strip_suffix('\\').filter(|_| lines.peek().is_some()) {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// `None` when `command` parses as shell, else bash's complaint.
fn parse_error(command: &str) -> Result<Option<String>, String> {
    let output = Command::new("bash")
        .args(["-n", "-c", command])
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    Ok((!output.status.success()).then(|| String::from_utf8_lossy(&output.stderr).trim().to_owned()))
}

/// `make -n deploy TARGET=<t>` for each target; the first line that does
/// not parse is the error.
pub fn check(root: &Path, make: &str, targets: &[String]) -> Result<(), String> {
    for target in targets {
        let output = Command::new(make)
            .args(["--no-print-directory", "-n", "deploy", &format!("TARGET={target}")])
            .current_dir(root)
            .output()
            .map_err(|e| format!("cannot run {make}: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "make -n deploy TARGET={target} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let commands = commands(&String::from_utf8_lossy(&output.stdout));
        if commands.is_empty() {
            return Err(format!("make -n deploy TARGET={target} printed no command"));
        }
        for command in commands {
            if let Some(complaint) = parse_error(&command)? {
                return Err(format!(
                    "make deploy TARGET={target}: this recipe line does not parse ({complaint}): {command}"
                ));
            }
        }
    }
    println!("make deploy: every recipe line parses ({})", targets.join(" "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continued_lines_are_one_command() {
        let printed = "echo a \\\n  b\ncargo build\nfalse \\\n";
        assert_eq!(commands(printed), ["echo a   b", "cargo build", "false \\"]);
    }

    #[test]
    fn a_broken_quote_does_not_parse() {
        assert_eq!(parse_error("echo 'fine' && ls").unwrap(), None);
        assert!(parse_error("echo \"  curl -i http://x").unwrap().is_some());
        assert!(parse_error("if true; then echo").unwrap().is_some());
    }
}
