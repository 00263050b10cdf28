//! xtask: the Makefile's two loops, `make test`'s phases and `make
//! recipe-check`. The Makefile builds it and runs the binary.

mod phases;
mod recipes;

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "The Makefile's helpers; run them through make (make test, make recipe-check)")]
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
    /// Each recipe line `make -n deploy` prints for each TARGET parses as shell.
    RecipeCheck {
        /// The make to run (the Makefile passes $(MAKE)).
        #[arg(long, default_value = "make")]
        make: String,
        /// The deploy targets (the Makefile passes $(DEPLOY_TARGETS)).
        #[arg(required = true)]
        targets: Vec<String>,
    },
}

fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ lies inside the workspace");
    let done = match Cli::parse().command {
        Command::Test { make, phases } => phases::run(root, &make, &phases)
            .map(ExitCode::from)
            .map_err(|e| format!("cannot run {make}: {e}")),
        Command::RecipeCheck { make, targets } => recipes::check(root, &make, &targets).map(|()| ExitCode::SUCCESS),
    };
    done.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}
