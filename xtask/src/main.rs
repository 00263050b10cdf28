//! xtask: `make test`'s phase loop, the one piece of the Makefile that is
//! more than a shell line. The Makefile builds it and runs the binary.

mod phases;

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "make test's phase loop; run it through `make test`")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// `make PHASE` for each phase in order, each timed, then a summary of
    /// the times; stops at the first failure and exits with its code.
    Test {
        /// The make to run (the Makefile passes $(MAKE)).
        #[arg(long, default_value = "make")]
        make: String,
        /// The make targets to run, in order (the Makefile passes $(TEST_PHASES)).
        #[arg(required = true)]
        phases: Vec<String>,
    },
}

fn main() -> ExitCode {
    let Command::Test { make, phases } = Cli::parse().command;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ lies inside the workspace");
    match phases::run(root, &make, &phases) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: cannot run {make}: {e}");
            ExitCode::FAILURE
        }
    }
}
