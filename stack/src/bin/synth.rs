//! `synth`: writes the kit's CloudFormation template, to stdout or to
//! `--out PATH`, and with `--docs PATH` the configuration reference
//! rendered from the same model. `make templates` (and `make docs`) run it
//! to refresh the committed copies.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

/// Writes the hybrid counter CloudFormation template (YAML) to PATH, or to
/// stdout; with --docs, also the configuration reference (Markdown).
#[derive(Parser)]
#[command(name = "synth")]
struct Args {
    /// Where to write the template (default: stdout).
    #[arg(short, long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Where to write the configuration reference.
    #[arg(long, value_name = "PATH")]
    docs: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let template = stack::template();
    let yaml = stack::to_yaml(&template);
    match &args.out {
        None => print!("{yaml}"),
        Some(path) => {
            if let Err(err) = write(path, &yaml) {
                eprintln!("error: cannot write {}: {err}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(path) = &args.docs {
        let markdown = stack::reference::configuration_markdown(&template);
        if let Err(err) = write(path, &markdown) {
            eprintln!("error: cannot write {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Writes through a temporary file in the same directory, so an interrupted
/// run never leaves a half-written file behind.
fn write(path: &Path, contents: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}
