//! `completions` and `man`: counterctl describing itself from its own clap
//! definition, a shell completion script (clap_complete) or a man page
//! (clap_mangen). Nothing is read or sent. The text is printed as is, also
//! with `--output json`: it is a file for a shell or `man`, not a report.

use clap::CommandFactory;
use clap_complete::Shell;
use serde::Serialize;

use crate::cli::Cli;
use crate::error::{Error, Result};

/// The binary's name, as completions and the man page call it.
const BIN: &str = "counterctl";

/// A generated file.
#[derive(Debug, Clone, Serialize)]
pub struct Generated {
    /// `completions <shell>` or `man`.
    pub what: String,
    pub text: String,
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Generated {
    let mut text = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN, &mut text);
    Generated {
        what: format!("completions {shell}"),
        text: String::from_utf8_lossy(&text).into_owned(),
    }
}

/// The man page (section 1, roff), with the exit codes of `--help`.
pub fn man() -> Result<Generated> {
    let mut text = Vec::new();
    clap_mangen::Man::new(Cli::command().name(BIN))
        .render(&mut text)
        .map_err(Error::ManPage)?;
    Ok(Generated {
        what: "man".to_owned(),
        text: String::from_utf8_lossy(&text).into_owned(),
    })
}
