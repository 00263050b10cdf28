//! `counterctl`: parse, validate, run, print. Results go to stdout, progress
//! and errors to stderr; the exit codes are listed in `counterctl --help`
//! (see `ops_cli::exit`).

use std::process::ExitCode;

use clap::Parser;
use ops_cli::cli::Cli;
use ops_cli::progress::Ui;
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
    // `local run` logs what the runner plays; other commands only errors.
    let default_filter = match cli.command {
        #[cfg(feature = "local")]
        ops_cli::cli::Command::Local(_) => ops_cli::commands::local::LOG_FILTER,
        _ => "error",
    };
    init_tracing(default_filter);
    let config = Config::from_cli(cli, &|name| std::env::var(name).ok())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let ui = Ui::stderr();
    let report = runtime.block_on(ops_cli::execute(&config, &ui));
    ui.finish();
    let report = report?;
    print!("{}", report.render(config.output)?);
    Ok(exit::code(report.exit_code()))
}

/// SDK and CLI logs on stderr, filtered by RUST_LOG, else by `default_filter`.
fn init_tracing(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // No colour codes in a log file (`make local-run` writes one).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
