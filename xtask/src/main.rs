//! `cargo xtask`: the Makefile's logic that is more than a command line.
//! `make` stays the entry point (README); its recipes call these commands.
//! `cargo xtask help` lists them.

mod e2e;
mod packages;
mod phases;
mod proc;
mod recipe;
mod rust_tools;
mod zips;

use std::process::ExitCode;

use proc::Failure;

const USAGE: &str = "\
Usage: cargo xtask <command> [arguments]

Commands (the Makefile's targets run them; run through `make` as the README says):
  test [--make PROG] [PHASE...]
        `make PHASE` for each phase in order (default: tools fmt-check lint
        unit e2e), each timed, then a summary of the times; stops at the
        first failure and exits with its code
  e2e   the emulator tests: find fakecloud (FAKECLOUD_BIN, else PATH) and
        ministack (MINISTACK_BIN, else .venv-ministack/bin/ministack), build
        the binaries (timed), then cargo test --workspace --test e2e
  rust-tools TARGET
        rustup: add the target TARGET and the rustfmt and clippy components
        when they are missing
  recipe-check [--make PROG] DEPLOY_TARGET...
        every line `make -n deploy TARGET=<t>` prints parses as shell (bash -n)
  zips DIR
        list DIR/*/bootstrap.zip with their sizes; fails when there is none
  handler-packages [--check NAME...]
        the workspace packages under handlers/ (cargo metadata); with --check,
        fails unless they are NAME..., each named as its directory
  help  this text

--make PROG: the make to run (the Makefile passes $(MAKE)); default make.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Some(message) = &failure.message {
                eprintln!("error: {message}");
            }
            ExitCode::from(failure.code)
        }
    }
}

fn run(args: &[String]) -> Result<(), Failure> {
    let Some((command, rest)) = args.split_first() else {
        return Err(Failure::usage("no command given"));
    };
    let root = proc::workspace_root()?;
    match command.as_str() {
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        "test" => {
            let (make, rest) = take_make(rest)?;
            if is_help(rest) {
                println!("{USAGE}");
                return Ok(());
            }
            let phases = phases::select(rest).map_err(Failure::usage)?;
            phases::run(&root, &make, &phases)
        }
        "e2e" => no_arguments(command, rest).and_then(|()| e2e::run(&root)),
        "rust-tools" => match rest {
            [target] => rust_tools::run(target),
            _ => Err(Failure::usage("rust-tools takes one argument, the Lambda target")),
        },
        "recipe-check" => {
            let (make, targets) = take_make(rest)?;
            if targets.is_empty() {
                return Err(Failure::usage("recipe-check needs the deploy targets"));
            }
            recipe::run(&root, &make, targets)
        }
        "zips" => match rest {
            [dir] => zips::run(dir),
            _ => Err(Failure::usage(
                "zips takes one argument, the directory of the Lambda packages",
            )),
        },
        "handler-packages" => match rest.split_first() {
            None => packages::print(&root),
            Some((flag, expected)) if flag == "--check" => packages::check(&root, expected),
            Some((other, _)) => Err(Failure::usage(format!("handler-packages: unknown argument {other}"))),
        },
        other => Err(Failure::usage(format!("unknown command {other}"))),
    }
}

/// `--make PROG` if it comes first, else `make`.
fn take_make(args: &[String]) -> Result<(String, &[String]), Failure> {
    match args {
        [flag, make, rest @ ..] if flag == "--make" => Ok((make.clone(), rest)),
        [flag] if flag == "--make" => Err(Failure::usage("--make needs a program")),
        _ => Ok(("make".to_owned(), args)),
    }
}

fn is_help(args: &[String]) -> bool {
    args.iter().any(|a| a == "--help" || a == "-h")
}

fn no_arguments(command: &str, rest: &[String]) -> Result<(), Failure> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(Failure::usage(format!("{command} takes no arguments")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn make_defaults_to_make_and_is_taken_only_first() {
        let args = strings(&["--make", "/usr/bin/gmake", "unit"]);
        let (make, rest) = take_make(&args).unwrap();
        assert_eq!(make, "/usr/bin/gmake");
        assert_eq!(rest, ["unit"]);

        let args = strings(&["unit"]);
        let (make, rest) = take_make(&args).unwrap();
        assert_eq!(make, "make");
        assert_eq!(rest, ["unit"]);

        assert_eq!(take_make(&strings(&["--make"])).unwrap_err().code, 2);
    }

    #[test]
    fn unknown_commands_and_arguments_are_usage_errors() {
        for args in [
            vec![],
            vec!["deploy"],
            vec!["e2e", "x"],
            vec!["zips"],
            vec!["test", "-k"],
        ] {
            let failure = run(&strings(&args)).unwrap_err();
            assert_eq!(failure.code, 2, "{args:?}");
        }
    }
}
