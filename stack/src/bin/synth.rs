//! `synth`: writes the kit's CloudFormation template, to stdout or to
//! `--out PATH`, and with `--docs PATH` the configuration reference
//! rendered from the same model. `make templates` (and `make docs`) run it
//! to refresh the committed copies.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "usage: synth [--out PATH] [--docs PATH]\n\n\
     Writes the hybrid counter CloudFormation template (YAML) to PATH, or to stdout;\n\
     with --docs, also the configuration reference (Markdown) to that PATH.";

/// Exit code for a bad command line, as with most Unix tools.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
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

/// Where to write: the template (`None`: stdout) and the reference.
struct Args {
    out: Option<PathBuf>,
    docs: Option<PathBuf>,
}

/// The arguments, or `None` for `--help`.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args { out: None, docs: None };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
            _ => (arg.clone(), None),
        };
        let slot = match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "-o" | "--out" => &mut parsed.out,
            "--docs" => &mut parsed.docs,
            other => return Err(format!("unexpected argument {other:?}")),
        };
        let value = match inline {
            Some(value) => value,
            None => args.next().ok_or_else(|| format!("{flag} needs a path"))?,
        };
        *slot = Some(PathBuf::from(value));
    }
    Ok(Some(parsed))
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
