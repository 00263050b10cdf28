//! End-to-end tests against the embedded emulator, in one test binary. Each
//! test owns a private fakecloud (see the `e2e` harness), so tests run in
//! parallel without sharing state.

mod api;
mod audit;
mod caller_access;
mod conformance;
mod cost;
mod deploy;
mod drift_check;
mod faults;
mod history;
mod iam;
mod limits;
mod local_api;
mod localstack_path;
mod missing_stack;
mod operations;
mod pipeline;
mod readme_tour;
mod reprocessor;
mod request_path;
mod runner;
mod runner_health;
mod sequence;
mod sharded;
mod stages;
mod stream;
mod strict;
mod verify;

use hybrid_counter::{ResourceId, Scope};

pub fn scope(s: &str) -> Scope {
    Scope::new(s).unwrap()
}

pub fn id(s: &str) -> ResourceId {
    ResourceId::new(s).unwrap()
}

pub const NOW: i64 = 1_790_000_000_000;

pub use e2e::counterctl::deployed;
