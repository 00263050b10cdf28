//! `make e2e`: the emulator tests. The handler binaries that the local
//! runner starts are built first, on their own and timed (the runner never
//! compiles, localstack/runner/src/process.rs); then the e2e test binary,
//! with `--workspace` so that it shares the unit tests' build (Makefile).

use std::path::Path;
use std::time::Instant;

use crate::proc::{self, Failure};

const FAKECLOUD: &str = "localstack/fakecloud.sh";
const MINISTACK: &str = "localstack/ministack.sh";

pub fn run(root: &Path) -> Result<(), Failure> {
    let fakecloud_name = proc::env_nonempty("FAKECLOUD_BIN").unwrap_or_else(|| "fakecloud".to_owned());
    let fakecloud = proc::find_program(&fakecloud_name, std::env::var_os("PATH").as_deref()).ok_or_else(|| {
        Failure::error(format!(
            "fakecloud not found; run 'make tools' (or {FAKECLOUD} install)"
        ))
    })?;
    let ministack = proc::env_nonempty("MINISTACK_BIN")
        .map(Into::into)
        .unwrap_or_else(|| root.join(".venv-ministack/bin/ministack"));
    if !proc::is_executable(&ministack) {
        return Err(Failure::error(format!(
            "ministack not found ({}); run 'make tools' (or {MINISTACK} install)",
            ministack.display()
        )));
    }

    println!("+ cargo build --locked --bins");
    let t0 = Instant::now();
    proc::run_status(
        proc::command("cargo")
            .args(["build", "--locked", "--bins"])
            .current_dir(root),
    )?;
    println!("   the binaries built in {}s", t0.elapsed().as_secs());

    let test_args = [
        "test",
        "--workspace",
        "--locked",
        "--test",
        "e2e",
        "--",
        "--test-threads=4",
    ];
    println!(
        "+ HCK_REQUIRE_EMULATOR=1 FAKECLOUD_BIN={} MINISTACK_BIN={} cargo {}",
        fakecloud.display(),
        ministack.display(),
        test_args.join(" ")
    );
    proc::run_status(
        proc::command("cargo")
            .args(test_args)
            .env("HCK_REQUIRE_EMULATOR", "1")
            .env("FAKECLOUD_BIN", &fakecloud)
            .env("MINISTACK_BIN", &ministack)
            .current_dir(root),
    )
}
