//! The API's request path (DESIGN §3): create, delete and usage, with no
//! transactions, so no transaction conflict can reach the caller, and no
//! best-effort write sent twice for one decision. How each [`Admission`]
//! mode admits a create, the invariant it keeps and how to switch modes:
//! `docs/admission-and-sharding.md`, "Admission modes".

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_dynamo::Item;
use tracing::warn;

use crate::best_effort::Layout;
use crate::config::Admission;
use crate::error::{Error, StoreError};
use crate::ids::{ResourceId, Scope};
use crate::items::{CounterSnapshot, ResourceItem};
use crate::keys;
use crate::retry::{Backoff, Retry};
use crate::scope_keys::ScopeKeys;
use crate::store::{IntoShared, NewResource, RequestStore, ResourceKey, SequenceStore};
use crate::time::EpochMillis;

/// Reads of the counters a strict create makes at most when each is torn
/// across a raise ([`Layout::fences`]) before it answers 503.
const FENCED_READS: u32 = 3;

/// Usage of one scope as the request path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Sum over the best-effort counter's items (`best_effort`,
    /// `best_effort#n`).
    pub best_effort: i64,
    pub eventual: i64,
    /// `max(best_effort, eventual)`: what admission compares with the limit.
    pub effective: i64,
    pub limit: u64,
}

impl Usage {
    fn new(snapshot: &CounterSnapshot, default_limit: u64) -> Self {
        Self {
            best_effort: snapshot.best_effort,
            eventual: snapshot.eventual,
            effective: snapshot.best_effort.max(snapshot.eventual),
            limit: snapshot.limit_override.unwrap_or(default_limit),
        }
    }

    /// Whether one more item is admitted.
    pub fn admits_one_more(&self) -> bool {
        self.effective < 0 || (self.effective as u64) < self.limit
    }
}

/// What a successful create returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Created {
    pub scope: Scope,
    pub id: ResourceId,
    pub incarnation: String,
    /// Whether the best-effort counter was incremented (false: it now
    /// undercounts by one until repaired; the eventual counter is
    /// unaffected). Always true in strict admission: the slot was reserved
    /// before the item was put.
    pub best_effort_counted: bool,
}

/// The request path over a [`RequestStore`], held in an [`Arc`] so that a
/// stream consumer or an audit in the same process can share it.
#[derive(Debug)]
pub struct Counter<S> {
    store: Arc<S>,
    default_limit: u64,
    admission: Admission,
    /// The best-effort shards creates count on.
    layout: Layout,
    /// The partition keys each scope is spread over.
    scope_keys: ScopeKeys,
    /// Retries of the request path's own writes when the item is
    /// momentarily busy (throttled, or held by a transaction): one round
    /// over the shards per attempt.
    busy_backoff: Backoff,
    seed: Option<u64>,
    /// Draws of shard choices so far (each request seeds its own generator
    /// from it when a seed is set).
    draws: Arc<AtomicU64>,
    /// Best-effort writes given up on: not applied after every retry, or
    /// with an unknown outcome. Each leaves BE off by one in the safe
    /// direction until the repair.
    swallowed: Arc<AtomicU64>,
    /// Whether a best-effort `+1`/`-1` refused for heat goes on to the
    /// other shards (true, the default) or is retried on its own shard only.
    retry_on_other_shards: bool,
}

impl<S> Clone for Counter<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            draws: Arc::clone(&self.draws),
            swallowed: Arc::clone(&self.swallowed),
            ..*self
        }
    }
}

/// What reads no store: the callers that only report (the api's metrics)
/// need no role.
impl<S> Counter<S> {
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Best-effort writes this counter gave up on so far (see
    /// [`Created::best_effort_counted`]): how far BE may lag under heat.
    pub fn swallowed_best_effort_writes(&self) -> u64 {
        self.swallowed.load(Ordering::Relaxed)
    }
}

impl<S: RequestStore> Counter<S> {
    /// The request path over `store`: a store of its own, or an [`Arc`]
    /// shared with other users.
    pub fn new(store: impl IntoShared<S>, default_limit: u64) -> Self {
        Self {
            store: store.into_shared(),
            default_limit,
            admission: Admission::default(),
            layout: Layout::default(),
            scope_keys: ScopeKeys::default(),
            busy_backoff: Backoff {
                max_attempts: 4,
                ..Backoff::default()
            },
            seed: None,
            draws: Arc::default(),
            swallowed: Arc::default(),
            retry_on_other_shards: true,
        }
    }

    /// The request path as a deployed stack configures it: `config`'s
    /// admission mode, best-effort shards and scope keys.
    pub fn configured(store: impl IntoShared<S>, default_limit: u64, config: &crate::config::CounterConfig) -> Self {
        Self::new(store, default_limit)
            .with_admission(config.admission)
            .with_best_effort_shards(config.best_effort_shards)
            .with_scope_keys(config.scope_keys)
    }

    /// Spreads each scope over `keys` partition keys ([`crate::scope_keys`];
    /// default one, the scope itself). Each key admits up to its share of
    /// the scope's limit, reading only its own counters.
    pub fn with_scope_keys(mut self, keys: ScopeKeys) -> Self {
        self.scope_keys = keys;
        self
    }

    /// Makes the jitter of the busy retries and the choice of shards
    /// reproducible (simulation and tests).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Admits creates in `admission` mode (default: best-effort).
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// Spreads the best-effort counter over `shards` items (1, the default:
    /// the single `best_effort` item).
    pub fn with_best_effort_shards(mut self, shards: u32) -> Self {
        self.layout = Layout::new(shards);
        self
    }

    /// Whether a best-effort increment or decrement refused for heat
    /// (throttled, or held by a transaction) is sent on to the other
    /// shards (true, the default) or retried on its own shard only, after
    /// a backoff (false: the behaviour before the counter was sharded, kept
    /// so `make bench` can measure what the rotation buys). Strict
    /// admission's reservations try every shard either way: that is how
    /// the quotas are used.
    pub fn with_retry_on_other_shards(mut self, enabled: bool) -> Self {
        self.retry_on_other_shards = enabled;
        self
    }

    /// Retries of the request path's own writes when the item is busy
    /// (default: 4 attempts, full jitter from 20 ms). The capacity bench
    /// stretches it with its dilated time.
    pub fn with_busy_backoff(mut self, backoff: Backoff) -> Self {
        self.busy_backoff = backoff;
        self
    }

    pub fn admission(&self) -> Admission {
        self.admission
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn scope_keys(&self) -> ScopeKeys {
        self.scope_keys
    }

    /// Reads BE, EC and the limit of `scope` (strongly consistent): over
    /// a scope's keys, one read each, BE and EC summed, `effective` the sum
    /// of each key's `max(BE, EC)` (what the keys' admissions compare
    /// together), and the limit read on the first key.
    pub async fn usage(&self, scope: &Scope) -> Result<Usage, Error> {
        let keys = self.scope_keys.keys(scope)?;
        let reads = futures_util::future::try_join_all(keys.iter().map(|key| self.store.read_counters(key)))
            .await
            .map_err(store_error)?;
        let mut usage = Usage::new(&reads[0], self.default_limit);
        usage.best_effort = reads.iter().map(|r| r.best_effort).sum();
        usage.eventual = reads.iter().map(|r| r.eventual).sum();
        usage.effective = reads.iter().map(|r| r.best_effort.max(r.eventual)).sum();
        Ok(usage)
    }

    /// What admission compares on key `index` of a scope: that key's
    /// counters against its share of the scope's limit (the whole limit
    /// when the scope has one key): the share `limit set` assigned it from
    /// what the keys held ([`crate::shares`]), else the even split.
    fn key_usage(&self, snapshot: &CounterSnapshot, index: u32) -> Usage {
        Usage {
            limit: crate::shares::key_share(snapshot, self.scope_keys, index, self.default_limit),
            ..Usage::new(snapshot, self.default_limit)
        }
    }

    /// The refusal of a create on key `index` whose read is `snapshot`:
    /// the scope's `LimitExceeded` when it has one key, otherwise the key's
    /// share reached (the other keys may have room; none is read).
    fn refused(&self, snapshot: &CounterSnapshot, index: u32) -> Error {
        let usage = self.key_usage(snapshot, index);
        let keys = self.scope_keys.count();
        if keys == 1 {
            return limit_reached(&usage);
        }
        Error::ShareExceeded {
            usage: usage.effective.max(i64::try_from(usage.limit).unwrap_or(i64::MAX)),
            share: usage.limit,
            limit: Usage::new(snapshot, self.default_limit).limit,
            key: index,
            keys,
        }
    }

    /// Creates `id` in `scope` if the scope is under its limit.
    ///
    /// `payload` holds the owner's attributes; it may not use the kit's
    /// attribute names.
    pub async fn create(
        &self,
        scope: &Scope,
        id: &ResourceId,
        payload: Item,
        now: EpochMillis,
    ) -> Result<Created, Error> {
        if let Some(name) = keys::RESERVED_RESOURCE_ATTRIBUTES
            .iter()
            .find(|name| payload.contains_key(**name))
        {
            return Err(Error::InvalidInput(format!(
                "payload attribute {name:?} is reserved by the counter kit"
            )));
        }
        let user_scope = scope;
        let index = self.scope_keys.index(id);
        let key = self.scope_keys.key(scope, index)?;
        let resource_key = self.scope_keys.resource_key_of(scope, id)?;
        let scope = &key;
        let snapshot = self.store.read_counters(scope).await.map_err(store_error)?;
        if !self.key_usage(&snapshot, index).admits_one_more() {
            return Err(self.refused(&snapshot, index));
        }
        let mut rng = self.rng();
        let strict = self.admission.is_strict();
        let be_shard = if strict {
            self.reserve(scope, index, &snapshot, now, &mut rng).await?
        } else {
            self.layout.pick(&mut rng)
        };
        let incarnation = uuid::Uuid::new_v4().simple().to_string();
        let resource = NewResource {
            item: ResourceItem {
                scope: resource_key,
                id: id.clone(),
                counter_processed: false,
                deleted: false,
                incarnation: incarnation.clone(),
                created_at: now,
                be_shard,
            },
            payload,
        };
        if let Err(failure) = self.put(&resource).await {
            if strict {
                if failure.definitive {
                    self.give_back(scope, id, be_shard, now, &mut rng).await;
                } else {
                    warn!(%scope, %id, error = %failure.error, "the put's outcome is unknown; its reserved slot is kept (best-effort over-reserved until repaired)");
                }
            }
            return Err(failure.error);
        }
        let best_effort_counted = strict
            || match self.add_best_effort(scope, be_shard, 1, now, &mut rng).await {
                Ok(_) => true,
                Err(err) => {
                    self.swallow(
                        scope,
                        id,
                        &err,
                        "best-effort increment given up; the eventual counter will count this item",
                    );
                    false
                }
            };
        Ok(Created {
            scope: user_scope.clone(),
            id: id.clone(),
            incarnation,
            best_effort_counted,
        })
    }

    /// Strict admission: reserves one slot of `scope` under the limit in
    /// force (the override or the default), on a shard with room under its
    /// quota ([`Layout::quotas`]), trying the others when one is full or
    /// busy. Every reservation is fenced by the read's epoch
    /// ([`Layout::fences`]): a read torn across a raise is read again, and
    /// when every shard refused the scope is read again: full (no shard with room, the epochs as
    /// before) is `LimitExceeded`, otherwise the quotas are computed again
    /// from that read (at most [`FENCED_READS`] reads to reserve from, and
    /// one more to tell a full scope from one still moving, which is
    /// `Unavailable`). Refused: every shard is at its quota and nothing was
    /// written. A throttled or conflicting reservation was not applied and
    /// goes to another shard (and again after a backoff); an ambiguous
    /// failure is not retried and may leave the slot reserved (the safe
    /// direction). Returns the shard reserved on.
    async fn reserve(
        &self,
        scope: &Scope,
        index: u32,
        snapshot: &CounterSnapshot,
        now: EpochMillis,
        rng: &mut fastrand::Rng,
    ) -> Result<Option<u32>, Error> {
        let mut read = std::borrow::Cow::Borrowed(snapshot);
        let mut reads = 1;
        loop {
            let usage = self.key_usage(&read, index);
            if !usage.admits_one_more() {
                return Err(self.refused(&read, index));
            }
            let Some(fences) = self.layout.fences(&read) else {
                // Torn across a raise (a short transaction): the next read is whole.
                if reads == FENCED_READS {
                    return Err(Error::Unavailable(
                        "a repair was raising the scope's best-effort shards during every read; try again".into(),
                    ));
                }
                read = std::borrow::Cow::Owned(self.store.read_counters(scope).await.map_err(store_error)?);
                reads += 1;
                continue;
            };
            let quotas = self.layout.quotas(&read.best_effort_items, usage.limit);
            let order: Vec<Option<u32>> = Layout::reservation_order(&quotas, rng)
                .into_iter()
                .filter(|&i| fences.contains_key(&quotas[i].name))
                .map(|i| quotas[i].shard)
                .collect();
            let quota_of = |shard: Option<u32>| quotas.iter().find(|q| q.shard == shard).expect("an active shard");
            let reserved = self
                .on_shards(&order, |shard| {
                    let quota = quota_of(shard);
                    let reservation = quota.reservation(fences[&quota.name]);
                    async move {
                        self.store
                            .reserve_best_effort(scope, &quota.name, reservation, now)
                            .await
                    }
                })
                .await;
            match reserved {
                Ok(shard) => return Ok(shard),
                // Full, fenced out by a raise since the read, or the
                // read's quotas are stale: only a new read tells which.
                Err(StoreError::ConditionFailed) => {
                    let again = self.store.read_counters(scope).await.map_err(store_error)?;
                    let usage = self.key_usage(&again, index);
                    // Room only on a shard this read may reserve on (after
                    // a raise and a grown shard count, only the absent).
                    let room = usage.admits_one_more()
                        && (self.layout.fences(&again).as_ref() != Some(&fences)
                            || self
                                .layout
                                .quotas(&again.best_effort_items, usage.limit)
                                .iter()
                                .any(|q| fences.contains_key(&q.name) && q.has_room()));
                    if !room {
                        // Below the limit, with only absent shards to reserve
                        // on and no quota left on them: not the limit, a
                        // scope the audit must fence (`ShardsAbsent`).
                        if usage.admits_one_more() && self.layout.absent_since_a_raise(&again) {
                            return Err(Error::Unavailable(
                                "the scope's new best-effort shards are not fenced yet (BeShardCount grew since \
                                 its last raise): run `counterctl audit --scope <scope> --repair`; try again"
                                    .into(),
                            ));
                        }
                        return Err(self.refused(&again, index));
                    }
                    if reads == FENCED_READS {
                        return Err(Error::Unavailable(
                            "strict admission was refused on every shard on every read while the scope had room \
                             (a repair or concurrent creates kept moving its shards); try again"
                                .into(),
                        ));
                    }
                    reads += 1;
                    read = std::borrow::Cow::Owned(again);
                }
                Err(err) => return Err(store_error(err)),
            }
        }
    }

    /// Strict admission: gives back a slot whose put definitively did not
    /// happen, once. A failed give-back leaves BE over-reserved (the safe
    /// direction) until `audit --repair` lowers it.
    async fn give_back(
        &self,
        scope: &Scope,
        id: &ResourceId,
        shard: Option<u32>,
        now: EpochMillis,
        rng: &mut fastrand::Rng,
    ) {
        if let Err(err) = self.add_best_effort(scope, shard, -1, now, rng).await {
            self.swallow(
                scope,
                id,
                &err,
                "giving back a reserved slot failed; best-effort stays over-reserved by one until repaired",
            );
        }
    }

    /// Puts a new item; a failure says whether the item definitively was
    /// not written (what strict admission needs to give its slot back).
    ///
    /// Every attempt is sent once ([`crate::store::sends::PUT_RESOURCE`]):
    /// an attempt refused for heat was not applied and is sent again; an
    /// attempt whose outcome is unknown (a 500, a timeout) never is,
    /// because once its item is deleted and hard-deleted by the stream the
    /// condition `attribute_not_exists` holds again and a re-send would
    /// bring the item back after an acknowledged delete (and, in strict
    /// admission, leave a live item no reservation covers). It is read back
    /// once instead: our incarnation there means the create happened.
    async fn put(&self, resource: &NewResource) -> Result<(), PutFailure> {
        let unknown = |error| PutFailure {
            error,
            definitive: false,
        };
        match self.retry_busy(|| self.store.put_resource(resource)).await {
            Ok(()) => Ok(()),
            // The only attempt that reached the item was refused by its
            // condition: another item holds the id, ours was not written.
            Err(StoreError::ConditionFailed) => Err(PutFailure {
                error: Error::AlreadyExists,
                definitive: true,
            }),
            // Refused before it was applied: the request itself, or heat
            // after every retry.
            Err(err @ (StoreError::Rejected(_) | StoreError::Transient(_))) => Err(PutFailure {
                error: store_error(err),
                definitive: true,
            }),
            Err(err) => {
                let key = ResourceKey {
                    scope: resource.item.scope.clone(),
                    id: resource.item.id.clone(),
                };
                match self.store.get_resource(&key).await {
                    // Applied (and maybe already deleted by someone who
                    // read it): the create happened.
                    Ok(found)
                        if read_back_created(
                            found.as_ref().map(|s| s.incarnation.as_str()),
                            &resource.item.incarnation,
                        ) =>
                    {
                        Ok(())
                    }
                    // Absent or another item: ours may still land late, or
                    // may have been applied and deleted since. Unknown.
                    Ok(_) => Err(unknown(store_error(err))),
                    Err(read) => Err(unknown(store_error(read))),
                }
            }
        }
    }

    /// Soft-deletes `id`; the stream consumer hard-deletes it and adjusts EC.
    ///
    /// A missing or already deleted item is `NotFound` and leaves BE
    /// untouched (repeated deletes must not drain BE). The decrement goes
    /// to the shard the item's create counted on (another one when that
    /// one is busy).
    ///
    /// Best-effort admission: BE is decremented before the soft delete, so
    /// any failure can only make it undercount: a failed decrement stops the
    /// delete, a failed soft delete leaves a live item with BE one lower.
    ///
    /// Strict admission: the soft delete first, then the decrement, so any
    /// failure can only leave BE over-reserved: a failed soft delete stops
    /// before the decrement, a failed decrement is logged and the delete
    /// still succeeds.
    pub async fn delete(&self, scope: &Scope, id: &ResourceId, now: EpochMillis) -> Result<(), Error> {
        let counters_key = self.scope_keys.key_of(scope, id)?;
        let key = ResourceKey {
            scope: self.scope_keys.resource_key_of(scope, id)?,
            id: id.clone(),
        };
        let scope = &counters_key;
        let (incarnation, shard) = match self.store.get_resource(&key).await.map_err(store_error)? {
            Some(state) if !state.deleted => (state.incarnation, state.be_shard),
            _ => return Err(Error::NotFound),
        };
        let mut rng = self.rng();
        if self.admission.is_strict() {
            match self
                .retry_busy(|| self.store.mark_deleted(&key, &incarnation, now))
                .await
            {
                Ok(()) => {}
                // A concurrent delete won the race (and gives the slot back),
                // or our own soft delete was applied and retried by the SDK:
                // either way no decrement, BE stays over-reserved at worst.
                Err(StoreError::ConditionFailed) => return Err(Error::NotFound),
                Err(err) => return Err(store_error(err)),
            }
            if let Err(err) = self.add_best_effort(scope, shard, -1, now, &mut rng).await {
                self.swallow(scope, id, &err, "best-effort decrement after the delete failed; best-effort stays over-reserved by one until repaired");
            }
            return Ok(());
        }
        // If the decrement fails the item stays: deleting it anyway would
        // leave BE above the live count. (Had the failed decrement been
        // applied after all, BE now undercounts by one: the safe direction.)
        if let Err(err) = self.add_best_effort(scope, shard, -1, now, &mut rng).await {
            warn!(%scope, %id, error = %err, "best-effort decrement failed; the item is not deleted");
            return Err(store_error(err));
        }
        match self
            .retry_busy(|| self.store.mark_deleted(&key, &incarnation, now))
            .await
        {
            Ok(()) => Ok(()),
            // A concurrent delete won the race, or the id was deleted and
            // created again since our read (a newer incarnation is never
            // ours to delete); BE paid one, in the safe direction.
            Err(StoreError::ConditionFailed) => Err(Error::NotFound),
            Err(err) => Err(store_error(err)),
        }
    }

    /// One `BE += delta` on the item's shard `shard`. A write refused by
    /// throttling or by a transaction holding the item (the stream
    /// consumer's, or an operator's repair) was not applied, so it is sent
    /// again, to the next shard ([`Layout::rotation`]): the sum is what
    /// every reader uses (only to its own shard, after a backoff, without
    /// [`Self::with_retry_on_other_shards`]). An error whose outcome is
    /// unknown (a 500, a timeout) is returned, never retried. Returns the
    /// shard written.
    async fn add_best_effort(
        &self,
        scope: &Scope,
        shard: Option<u32>,
        delta: i64,
        now: EpochMillis,
        rng: &mut fastrand::Rng,
    ) -> Result<Option<u32>, StoreError> {
        // Strict admission never moves a decrement off the item's shard: a
        // -1 landing elsewhere would leave a shard below the live items
        // recorded on it (below 0 once they are gone), which the quotas
        // cannot lend out again and no audit of the sum sees. Given up, it
        // over-reserves, the safe side, until the audit lowers it.
        let rotate = self.retry_on_other_shards && !(self.admission.is_strict() && delta < 0);
        let order = if rotate {
            self.layout.rotation(shard, rng)
        } else {
            vec![shard]
        };
        self.on_shards(&order, |shard| {
            let name = keys::best_effort_name(shard);
            async move { self.store.add_best_effort(scope, &name, delta, now).await }
        })
        .await
    }

    /// Sends one best-effort write to the shards of `order` in turn until
    /// one takes it. A shard that refuses for its condition
    /// (`ConditionFailed`: at its quota) is dropped; one that refuses for
    /// heat (throttled, or held by a transaction: nothing was written) is
    /// tried again in the next round, after a full-jitter backoff, within
    /// [`Self::busy_backoff`]'s attempts. Any other error (its outcome may
    /// be unknown) ends the attempt at once. When no shard took it: the
    /// last refusal, `ConditionFailed` when every shard was full.
    async fn on_shards<F, Fut>(&self, order: &[Option<u32>], mut write: F) -> Result<Option<u32>, StoreError>
    where
        F: FnMut(Option<u32>) -> Fut,
        Fut: std::future::Future<Output = Result<(), StoreError>>,
    {
        let mut retry = Retry::new(self.busy_backoff, self.seed);
        let mut round: VecDeque<Option<u32>> = order.iter().copied().collect();
        let mut busy = Vec::new();
        let mut last = StoreError::ConditionFailed;
        loop {
            while let Some(shard) = round.pop_front() {
                match write(shard).await {
                    Ok(()) => return Ok(shard),
                    Err(StoreError::ConditionFailed) => {}
                    Err(err) if err.is_transient() => {
                        busy.push(shard);
                        last = err;
                    }
                    Err(err) => return Err(err),
                }
            }
            if busy.is_empty() || !retry.pause().await {
                return Err(if busy.is_empty() {
                    StoreError::ConditionFailed
                } else {
                    last
                });
            }
            round.extend(busy.drain(..));
        }
    }

    /// Retries a write while the store reports the item busy (throttled, or
    /// held by a transaction): such a refusal means nothing was written, so
    /// the retry cannot apply it twice (conditional writes are also guarded
    /// by their condition).
    async fn retry_busy<F, Fut>(&self, mut op: F) -> Result<(), StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), StoreError>>,
    {
        Retry::new(self.busy_backoff, self.seed)
            .run(&mut op, StoreError::is_transient)
            .await
    }

    /// Counts and logs a best-effort write given up on.
    fn swallow(&self, scope: &Scope, id: &ResourceId, err: &StoreError, what: &str) {
        let swallowed_total = self.swallowed.fetch_add(1, Ordering::Relaxed) + 1;
        warn!(%scope, %id, error = %err, swallowed_total, "{what}");
    }

    /// A generator for one request's shard choices: seeded from the
    /// counter's seed and the draws so far when a seed is set.
    fn rng(&self) -> fastrand::Rng {
        let draw = self.draws.fetch_add(1, Ordering::Relaxed);
        match self.seed {
            Some(seed) => fastrand::Rng::with_seed(seed ^ draw.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            None => fastrand::Rng::new(),
        }
    }
}

/// The sequence numbers a create may ask for: the request path over a store
/// that also holds the scopes' sequences.
impl<S: RequestStore + SequenceStore> Counter<S> {
    /// Claims the next gapless sequence number of `scope` for `owner`
    /// ([`crate::sequence`], with its default retry budget): what a create
    /// that asks for a number does after the create.
    pub async fn next_number(
        &self,
        scope: &Scope,
        owner: Option<&str>,
        now: EpochMillis,
    ) -> Result<crate::sequence::Claimed, Error> {
        let seed = self.seed.map(|_| self.rng().u64(..));
        let retry = Retry::new(crate::sequence::DEFAULT_BACKOFF, seed);
        crate::sequence::next_number(&*self.store, retry, scope, owner, now).await
    }
}

/// Whether a put whose outcome is unknown created its item, from reading
/// the item back once (`found`: the incarnation there, live or deleted):
/// ours there means the create happened (and maybe a delete since);
/// absent or another incarnation is unknown (ours may have been applied
/// and hard-deleted since, or still land late). The put is sent once
/// ([`crate::store::sends::PUT_RESOURCE`]): nothing re-sends it after the
/// read. The admission model's stream model (the integration test
/// `counter/tests/admission_model/`) calls this.
pub fn read_back_created(found: Option<&str>, ours: &str) -> bool {
    found == Some(ours)
}

/// Strict admission's refusal once every shard is at its quota.
fn limit_reached(usage: &Usage) -> Error {
    Error::LimitExceeded {
        usage: usage.effective.max(i64::try_from(usage.limit).unwrap_or(i64::MAX)),
        limit: usage.limit,
    }
}

/// Why a put failed, and whether the item definitively was not written.
struct PutFailure {
    error: Error,
    definitive: bool,
}

/// A store error as the request path reports it: a request the service
/// refused is the caller's input, anything else is unavailability.
fn store_error(err: StoreError) -> Error {
    match err {
        StoreError::Rejected(reason) => Error::InvalidInput(reason),
        other => Error::Unavailable(other.to_string()),
    }
}

#[cfg(test)]
mod tests;
