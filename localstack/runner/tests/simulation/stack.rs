//! The stack's configuration as its functions read it: the environment a
//! deployed stack sets (`SCOPE_KEY_SHARDS`, `RESOURCE_KEY_SPREAD`, the
//! shards, the admission mode) from the schedule's knobs, parsed by the
//! kit's own [`CounterConfig::from_lookup`], so the request path, the
//! stream's processor, the audits and the drift check are built from it
//! as the API, stream, reprocessor and drift-check functions build theirs,
//! after `counterctl deploy` recorded the layout they each check at start.

use std::collections::BTreeMap;

use hybrid_counter::config::{
    ENV_ADMISSION_MODE, ENV_BE_SHARDS, ENV_COUNTERS_TABLE, ENV_DEFAULT_LIMIT, ENV_EC_SHARDS, ENV_RESOURCE_KEY_SPREAD,
    ENV_RESOURCES_TABLE, ENV_SCOPE_KEYS,
};
use hybrid_counter::layout::{self, Checked};
use hybrid_counter::memory::MemoryStore;
use hybrid_counter::{Admission, CounterConfig};

use crate::params::Params;
use crate::world::EPOCH_MS;

/// The configuration of the stack in admission mode `admission` with
/// `best_effort_shards` (before or after the schedule's change); the scope
/// keys are the schedule's, the same on both sides of any change.
pub(crate) fn stack_config(p: &Params, admission: Admission, best_effort_shards: u32) -> CounterConfig {
    let environment: BTreeMap<&str, String> = [
        (ENV_RESOURCES_TABLE, "resources".to_owned()),
        (ENV_COUNTERS_TABLE, "counters".to_owned()),
        (ENV_DEFAULT_LIMIT, p.limit.to_string()),
        (ENV_EC_SHARDS, p.eventual_shards.to_string()),
        (ENV_BE_SHARDS, best_effort_shards.to_string()),
        (ENV_SCOPE_KEYS, p.scope_keys.count().to_string()),
        (ENV_RESOURCE_KEY_SPREAD, p.scope_keys.spread().to_string()),
        (ENV_ADMISSION_MODE, admission.to_string()),
    ]
    .into();
    let config = CounterConfig::from_lookup(|name| environment.get(name).cloned())
        .unwrap_or_else(|e| panic!("the stack's environment {environment:?} is refused: {e}"));
    assert_eq!(
        config.scope_keys, p.scope_keys,
        "the functions read the schedule's scope keys from SCOPE_KEY_SHARDS and RESOURCE_KEY_SPREAD"
    );
    config
}

/// `counterctl deploy`: records the layout of `configs` (one: a schedule's
/// change never moves it, as the kit refuses that), and each function's
/// start check finds it recorded under either configuration.
pub(crate) async fn deploy(store: &MemoryStore, configs: &[CounterConfig]) {
    layout::record(store, configs[0].scope_keys, EPOCH_MS)
        .await
        .expect("a layout recorded on an empty stack");
    for config in configs {
        let checked = layout::check(store, config.scope_keys).await;
        assert!(
            matches!(checked, Ok(Checked::Matches)),
            "a function of the stack starts under the recorded layout: {checked:?}"
        );
    }
}
