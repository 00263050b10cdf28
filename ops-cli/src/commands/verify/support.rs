//! What the checks of `verify` share: the run's handles ([`Verify`]) and
//! the conversions of their errors. A leaf module, so that the failure
//! path (`failure.rs`) and the other checks both use it.

use hybrid_counter::audit::count_over;
use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter::{AuditStore, Counter, RequestStore, ResourceId, Scope};
use hybrid_counter_aws::DynamoStore;

use crate::commands::Context;
use crate::config::VerifyOptions;
use crate::error::{Result, invalid};

pub(super) fn id(name: String) -> Result<ResourceId> {
    ResourceId::new(name).map_err(invalid)
}

pub(super) use crate::error::during;

/// Room for `creates` creates in one scope whatever keys they land on:
/// each key's share of it is at least `creates` (the scope's own limit
/// under one key).
pub(super) fn room_for(keys: ScopeKeys, creates: u64) -> u64 {
    creates * u64::from(keys.count())
}

/// One run's handles; each check is a method (`Ok(Err(detail))` is a
/// failed check, an `Err` a call that could not be made).
pub(super) struct Verify<'a> {
    pub(super) ctx: &'a Context<'a>,
    pub(super) config: &'a hybrid_counter::CounterConfig,
    pub(super) store: &'a DynamoStore,
    pub(super) counter: &'a Counter<DynamoStore>,
    pub(super) scopes: &'a [Scope],
    pub(super) options: &'a VerifyOptions,
    /// The stack's outputs, by which a wait for the stream reads the local
    /// runner's heartbeat (an emulator's runner that cannot run, or none
    /// where one is expected, fails it).
    pub(super) outputs: &'a std::collections::BTreeMap<String, String>,
}

pub(super) type Outcome = Result<std::result::Result<String, String>>;

/// One scope's live items and counts, as `verify` waits on them (summed
/// over the scope's keys).
#[derive(Default)]
pub(super) struct ScopeCount {
    pub(super) live: u64,
    pub(super) pending: u64,
    pub(super) eventual: i64,
}

impl ScopeCount {
    /// The stream pipeline counted everything: `EC == live`, nothing pending.
    pub(super) fn settled(&self) -> bool {
        self.pending == 0 && self.eventual == self.live as i64
    }
}

impl Verify<'_> {
    /// What `status` says is wrong with the stream counter's local runner,
    /// read once the wait is a second old: a runner that died, stopped,
    /// never started or cannot invoke the handlers fails the wait with its
    /// reason at once, not at the timeout.
    pub(super) async fn runner_problem(&self, waited: std::time::Duration) -> Option<String> {
        if waited < std::time::Duration::from_secs(1) {
            return None;
        }
        crate::commands::status::stream_runner_problem(self.ctx, self.outputs).await
    }

    /// Reads `scope`'s items (by state) and its eventual counter, summed
    /// over its partition keys.
    pub(super) async fn scope_count(&self, scope: &Scope) -> Result<ScopeCount> {
        count_keys(self.store, self.config.scope_keys, scope).await
    }

    /// The partition keys of `scope` (itself under one key).
    pub(super) fn keys(&self, scope: &Scope) -> Result<Vec<Scope>> {
        self.config.scope_keys.keys(scope).map_err(invalid)
    }

    /// Every resources key of `scope` (its counters keys when each has one).
    pub(super) fn resource_keys(&self, scope: &Scope) -> Result<Vec<Scope>> {
        self.config.scope_keys.resource_keys(scope).map_err(invalid)
    }
}

/// [`Verify::scope_count`] over any store: each key counted and read.
pub(super) async fn count_keys<S: AuditStore + RequestStore>(
    store: &S,
    keys: ScopeKeys,
    scope: &Scope,
) -> Result<ScopeCount> {
    let mut total = ScopeCount::default();
    for key in keys.keys(scope).map_err(invalid)? {
        let counts = count_over(store, keys, &key)
            .await
            .map_err(during("counting a scope"))?;
        let eventual = store
            .read_counters(&key)
            .await
            .map_err(during("reading the counters"))?
            .eventual;
        total.live += counts.live;
        total.pending += counts.pending_create + counts.pending_delete;
        total.eventual += eventual;
    }
    Ok(total)
}
