//! `make rust-tools`: the Lambda target and the rustfmt and clippy
//! components, added through rustup when missing.

use crate::proc::{self, Failure};

const COMPONENTS: &[&str] = &["rustfmt", "clippy"];

/// The components of `COMPONENTS` that `installed` (`rustup component list
/// --installed`: `clippy-x86_64-unknown-linux-gnu`, ...) lacks.
pub fn missing_components(installed: &str) -> Vec<&'static str> {
    COMPONENTS
        .iter()
        .copied()
        .filter(|c| !installed.lines().any(|line| line.starts_with(c)))
        .collect()
}

pub fn run(target: &str) -> Result<(), Failure> {
    if proc::find_program("rustup", std::env::var_os("PATH").as_deref()).is_none() {
        return Err(Failure::error("rustup not found; install Rust with rustup"));
    }
    let targets = proc::run_output(proc::command("rustup").args(["target", "list", "--installed"]))?;
    if !targets.lines().any(|t| t == target) {
        proc::run_status(proc::command("rustup").args(["target", "add", target]))?;
    }
    let installed = proc::run_output(proc::command("rustup").args(["component", "list", "--installed"]))?;
    let missing = missing_components(&installed);
    if !missing.is_empty() {
        proc::run_status(proc::command("rustup").args(["component", "add"]).args(&missing))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_matched_by_prefix() {
        let installed =
            "cargo-x86_64-unknown-linux-gnu\nclippy-x86_64-unknown-linux-gnu\nrust-std-x86_64-unknown-linux-gnu\n";
        assert_eq!(missing_components(installed), ["rustfmt"]);
        assert_eq!(missing_components(""), ["rustfmt", "clippy"]);
        assert!(missing_components("rustfmt-x86_64-unknown-linux-gnu\nclippy-x86_64-unknown-linux-gnu").is_empty());
    }
}
