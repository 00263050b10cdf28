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
    for line in printed.lines() {
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn parses(command: &str) -> Result<bool, String> {
    let status = Command::new("bash")
        .args(["-n", "-c", command])
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    Ok(status.success())
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
        for command in commands(&String::from_utf8_lossy(&output.stdout)) {
            if !parses(&command)? {
                return Err(format!(
                    "make deploy TARGET={target}: this recipe line does not parse: {command}"
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
        assert_eq!(commands(printed), ["echo a   b", "cargo build", "false "]);
    }

    #[test]
    fn a_broken_quote_does_not_parse() {
        assert!(parses("echo 'fine' && ls").unwrap());
        assert!(!parses("echo \"  curl -i http://x").unwrap());
        assert!(!parses("if true; then echo").unwrap());
    }
}
