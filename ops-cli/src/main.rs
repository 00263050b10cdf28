//! `counterctl`: parse, validate, run, print. Results go to stdout, progress
//! and errors to stderr (progress as `--quiet`, `NO_COLOR` and a terminal
//! allow: `ops_cli::progress`); the exit codes are listed in `counterctl
//! --help` (see `ops_cli::exit`).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use ops_cli::cli::Cli;
use ops_cli::progress::{Progress, Ui};
use ops_cli::{Config, Error, exit};

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            exit::code(err.exit_code())
        }
    }
}

fn run() -> Result<ExitCode, Error> {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // Help and version print to stdout and exit 0; usage errors exit 2.
            let _ = err.print();
            return Ok(ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(exit::USAGE)));
        }
    };
    // `local run` logs what the runner plays (unless --quiet); other
    // commands only errors.
    let default_filter = match cli.command {
        #[cfg(feature = "local")]
        ops_cli::cli::Command::Local(_) if !cli.global.quiet => ops_cli::commands::local::LOG_FILTER,
        _ => "error",
    };
    let env = |name: &str| std::env::var(name).ok();
    let stderr_is_terminal = std::io::stderr().is_terminal();
    init_tracing(default_filter, stderr_is_terminal && !ops_cli::config::no_color(&env));
    let config = Config::from_cli(cli, &env)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let ui = Ui::new(Progress::choose(config.quiet, stderr_is_terminal, config.no_color));
    let report = runtime.block_on(ops_cli::execute(&config, &ui));
    ui.finish();
    let report = report?;
    print!("{}", report.render(config.output)?);
    Ok(exit::code(report.exit_code()))
}

/// SDK and CLI logs on stderr, filtered by RUST_LOG, else by
/// `default_filter`; coloured only when `ansi` (a terminal, no NO_COLOR).
fn init_tracing(default_filter: &str, ansi: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // No colour codes in a log file (`make local-run` writes one).
        .with_ansi(ansi)
        .try_init();
}
