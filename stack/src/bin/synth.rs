//! `synth`: writes the kit's CloudFormation template, to stdout or to
//! `--out PATH`. `make templates` runs it to refresh the committed copy.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str =
    "usage: synth [--out PATH]\n\nWrites the hybrid counter CloudFormation template (YAML) to PATH, or to stdout.";

/// Exit code for a bad command line, as with most Unix tools.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let out = match parse(std::env::args().skip(1)) {
        Ok(Some(out)) => out,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let yaml = stack::to_yaml(&stack::template());
    match out {
        Output::Stdout => print!("{yaml}"),
        Output::File(path) => {
            if let Err(err) = write(&path, &yaml) {
                eprintln!("error: cannot write {}: {err}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

enum Output {
    Stdout,
    File(PathBuf),
}

/// The output, or `None` for `--help`.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Output>, String> {
    let mut out = Output::Stdout;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "-o" | "--out" => {
                let path = args.next().ok_or("--out needs a path")?;
                out = Output::File(PathBuf::from(path));
            }
            other => match other.strip_prefix("--out=") {
                Some(path) => out = Output::File(PathBuf::from(path)),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        }
    }
    Ok(Some(out))
}

/// Writes through a temporary file in the same directory, so an interrupted
/// run never leaves a half-written template behind.
fn write(path: &Path, contents: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}
