//! End-to-end tests against the embedded emulator, in one test binary. Each
//! test owns a private fakecloud (see the `e2e` harness), so tests run in
//! parallel without sharing state.

mod api;
mod audit;
mod cost;
mod deploy;
mod faults;
mod missing_stack;
mod operations;
mod pipeline;
mod reprocessor;
mod request_path;
mod runner;
mod sharded;
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

/// A stack deployed with its defaults on a private emulator, and its tables'
/// configuration.
pub async fn deployed() -> (
    e2e::Emulator,
    e2e::counterctl::Counterctl,
    hybrid_counter::CounterConfig,
) {
    let emulator = e2e::Emulator::start();
    let ctl = e2e::counterctl::Counterctl::new(&emulator);
    let report = ctl.deploy(&[]).await;
    let outputs = report.outputs;
    let config = hybrid_counter::CounterConfig {
        resources_table: outputs[stack::outputs::RESOURCES_TABLE].clone(),
        counters_table: outputs[stack::outputs::COUNTERS_TABLE].clone(),
        default_limit: Some(100),
        eventual_shards: 1,
        best_effort_shards: 1,
        admission: Default::default(),
    };
    (emulator, ctl, config)
}
