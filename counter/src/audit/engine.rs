//! The audit engine: one scope's exact audit and repair, over any
//! [`AuditStore`]. `counterctl audit`, the simulation and the emulator tests all
//! run this code; the decisions it takes are the pure functions of the
//! parent module ([`findings_for`], [`strict_shard_findings`],
//! [`plan_repair_at`](super::findings::plan_repair_at)), with the clock passed in.
//!
//! A scope's items are counted with a paginated Query per resources key
//! (one, or `ResourceKeySpread` of them, concurrently), which DynamoDB reads
//! item by item (read-committed), not as a snapshot. So the counters are
//! read before and after the count, and the count is trusted only if no
//! counter moved in between: every stream transaction that changes which
//! items are processed bumps its counter item's `version`. A repair is
//! written conditioned on the versions it was computed from, so a
//! concurrent writer makes it retry rather than clobber.

use std::collections::BTreeMap;

use serde::Serialize;

use super::findings::{
    Decision, Finding, LastWrites, LiveByShard, Repair, ScopeCounts, ScopeTally, decide, findings_for,
    strict_shard_findings,
};
use crate::best_effort::Layout;
use crate::config::Admission;
use crate::error::StoreError;
use crate::ids::{ResourceId, Scope};
use crate::items::{CounterItem, CounterSnapshot};
use crate::keys;
use crate::scope_keys::ScopeKeys;
use crate::store::{AuditStore, ResourceKey};
use crate::stream::{Change, ChangeRecord};
use crate::time::EpochMillis;

/// How [`Auditor::audit_scope`] treats what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairMode {
    /// Report only.
    None,
    /// Report the repair that would be written.
    DryRun,
    /// Write the repair.
    Apply,
}

/// The result of auditing one scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScopeAudit {
    pub scope: String,
    /// The admission mode BE was read by.
    pub admission: Admission,
    pub counts: ScopeCounts,
    pub best_effort: i64,
    pub eventual: i64,
    pub findings: Vec<Finding>,
    /// The repair planned (dry run) or attempted.
    pub repair: Option<Repair>,
    /// Whether `repair` was written.
    pub repaired: bool,
    /// Why a needed repair, or part of it, was not applied (with `repaired`:
    /// the part that was held back, see [`plan_repair_at`](super::findings::plan_repair_at)).
    pub not_repaired: Option<String>,
}

impl ScopeAudit {
    /// Whether a counter differs from the truth (any finding).
    pub fn has_drift(&self) -> bool {
        !self.findings.is_empty()
    }

    /// Whether a finding is a defect of the kit ([`Finding::is_defect`]).
    pub fn has_defect(&self) -> bool {
        self.findings.iter().any(Finding::is_defect)
    }

    /// Whether a needed repair, or part of it, was not written: held back
    /// while a request may be in flight, or beaten by concurrent writes on
    /// every try (`not_repaired` says which). A later run writes it.
    pub fn held_back(&self) -> bool {
        self.not_repaired.is_some()
    }
}

/// Counts the items of `scope` by state, with one read of every item
/// ([`AuditStore::scope_items`]: read-committed, not a snapshot).
pub async fn count_scope<S: AuditStore>(store: &S, scope: &Scope) -> Result<ScopeCounts, StoreError> {
    Ok(tally_scope(store, scope).await?.counts)
}

/// Counts the items a counters key of layout `keys` counts: those under
/// each of its resources keys ([`ScopeKeys::resource_keys_of`]).
pub async fn count_over<S: AuditStore>(
    store: &S,
    keys: ScopeKeys,
    counters_key: &Scope,
) -> Result<ScopeCounts, StoreError> {
    Ok(tally_keys(store, &keys.resource_keys_of(counters_key)).await?.counts)
}

async fn tally_scope<S: AuditStore>(store: &S, scope: &Scope) -> Result<ScopeTally, StoreError> {
    tally_keys(store, std::slice::from_ref(scope)).await
}

/// Resources keys an audit reads at once: the window between its two reads
/// of the counters lasts about M / this many round trips, not M.
const CONCURRENT_QUERIES: usize = 16;

/// The tally of the items under every resources key of `keys` (one Query
/// each, [`CONCURRENT_QUERIES`] at a time, read-committed, not a snapshot).
async fn tally_keys<S: AuditStore>(store: &S, keys: &[Scope]) -> Result<ScopeTally, StoreError> {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    let queries: Vec<_> = keys.iter().map(|key| store.scope_items(key)).collect();
    let mut rows = futures_util::stream::iter(queries).buffer_unordered(CONCURRENT_QUERIES);
    let mut tally = ScopeTally::default();
    while let Some(page) = rows.try_next().await? {
        for row in page {
            tally.add_row(&row);
        }
    }
    Ok(tally)
}

/// The kit's items of `scope` the stream consumer has not finished with
/// (not counted yet, or soft-deleted), as the changes that finish them:
/// what their stream records would have said. Running them through the
/// stream processor (idempotent, so safe while the consumer runs) heals a
/// scope whose records left the stream.
pub async fn pending_changes<S: AuditStore>(store: &S, scope: &Scope) -> Result<Vec<ChangeRecord>, StoreError> {
    let mut changes = Vec::new();
    for row in store.scope_items(scope).await? {
        let Some(incarnation) = row.incarnation else { continue };
        if row.counter_processed && !row.deleted {
            continue;
        }
        let key = ResourceKey {
            scope: scope.clone(),
            id: ResourceId::new(row.id.clone())
                .map_err(|e| StoreError::Malformed(format!("resource {scope}/{}: {e}", row.id)))?,
        };
        let change = if row.deleted {
            Change::SoftDelete { key, incarnation }
        } else {
            Change::Insert { key, incarnation }
        };
        changes.push(ChangeRecord {
            sequence_number: format!("sweep:{}", row.id),
            change,
        });
    }
    Ok(changes)
}

/// Audits scopes of one store, read by one admission mode.
#[derive(Debug, Clone)]
pub struct Auditor<'a, S> {
    store: &'a S,
    admission: Admission,
    attempts: u32,
    grace: EpochMillis,
    eventual_shards: u32,
    best_effort: Layout,
    scope_keys: ScopeKeys,
}

impl<'a, S: AuditStore> Auditor<'a, S> {
    /// Three tries per scope and a grace period of
    /// [`super::findings::REQUEST_GRACE_MS`] by default.
    pub fn new(store: &'a S, admission: Admission) -> Self {
        Self {
            store,
            admission,
            attempts: 3,
            grace: super::findings::REQUEST_GRACE_MS,
            eventual_shards: 1,
            best_effort: Layout::default(),
            scope_keys: ScopeKeys::ONE,
        }
    }

    /// The audit of a deployed stack: `config`'s admission mode and both
    /// counters' shards.
    pub fn configured(store: &'a S, config: &crate::config::CounterConfig) -> Self {
        Self::new(store, config.admission)
            .with_eventual_shards(config.eventual_shards)
            .with_best_effort_shards(config.best_effort_shards)
            .with_scope_keys(config.scope_keys)
    }

    /// The stack's scope keys: a counters key's items are those under each
    /// of its resources keys ([`ScopeKeys::resource_keys_of`]).
    pub fn with_scope_keys(mut self, keys: ScopeKeys) -> Self {
        self.scope_keys = keys;
        self
    }

    /// The best-effort counter's configured shards: a raise of BE is
    /// spread over them ([`Layout::correction`]).
    pub fn with_best_effort_shards(mut self, shards: u32) -> Self {
        self.best_effort = Layout::new(shards);
        self
    }

    /// The eventual counter's configured shards (`eventual#0..n-1`): an EC
    /// repair covers every one of them, also those not written yet, so a
    /// stream transaction still being applied to a new shard conflicts with
    /// the repair (or fails its `attribute_not_exists` condition) instead of
    /// landing on top of it.
    pub fn with_eventual_shards(mut self, shards: u32) -> Self {
        self.eventual_shards = shards.max(1);
        self
    }

    /// How long after the request path's last write of a scope a repair
    /// may move BE the way an in-flight request could push past the
    /// invariant: longer than twice the API's timeout plus clock skew
    /// ([`super::findings::REQUEST_GRACE_MS`]).
    pub fn with_grace(mut self, grace: EpochMillis) -> Self {
        self.grace = grace.max(0);
        self
    }

    /// Tries per scope before a scope under continuous writes is reported
    /// as not repaired (at least one).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    pub fn admission(&self) -> Admission {
        self.admission
    }

    /// What a scope's tally and counters show: [`findings_for`], and in
    /// strict admission [`strict_shard_findings`]. A whole-table audit picks
    /// the scopes to audit by this, so a scope whose sums agree is not
    /// passed over.
    pub fn findings(&self, tally: &ScopeTally, snapshot: &CounterSnapshot) -> Vec<Finding> {
        let mut out = findings_for(self.admission, &tally.counts, snapshot.best_effort, snapshot.eventual);
        if self.admission.is_strict() {
            out.extend(strict_shard_findings(self.best_effort, tally, snapshot));
        }
        out
    }

    /// Audits one scope exactly: its counters are read before and after the
    /// item count, and the count is trusted only if no counter changed in
    /// between. A repair is written with the versions it was computed from
    /// as conditions; after the tries run out a scope under continuous
    /// writes is reported as not repaired, with the reason, and a count
    /// that was never confirmed yields no findings: the scope is reported
    /// in motion (held back), not drifted. What may not be written yet
    /// ([`plan_repair_at`](super::findings::plan_repair_at)) is held back and said.
    pub async fn audit_scope(
        &self,
        scope: &Scope,
        mode: RepairMode,
        now: EpochMillis,
    ) -> Result<ScopeAudit, StoreError> {
        let mut last = None;
        for _ in 0..self.attempts {
            let before = self.store.counter_items(scope).await?;
            let tally = tally_keys(self.store, &self.scope_keys.resource_keys_of(scope)).await?;
            let after = self.store.counter_items(scope).await?;
            let snapshot = CounterSnapshot::from_items(after.iter().cloned());
            let Decision {
                findings,
                plan,
                raise: raises,
            } = decide(
                self.admission,
                self.best_effort,
                &tally,
                &snapshot,
                LastWrites::of(&after),
                now,
                self.grace,
            );
            let ScopeTally {
                counts,
                live_by_shard: live,
            } = tally;
            let mut audit = ScopeAudit {
                scope: scope.to_string(),
                admission: self.admission,
                counts,
                best_effort: snapshot.best_effort,
                eventual: snapshot.eventual,
                findings,
                repair: None,
                repaired: false,
                not_repaired: None,
            };
            if !same_counters(&before, &after) {
                audit.not_repaired = Some("the scope's counters changed while its items were counted".into());
                last = Some(audit);
                continue;
            }
            // The plan ([`decide`]): [`plan_repair_at`](super::findings::plan_repair_at)'s, with strict
            // admission's fence of mixed epochs and raise of short shards.
            if mode == RepairMode::None || (plan.repair.is_empty() && plan.held_back.is_none()) {
                return Ok(audit);
            }
            audit.not_repaired = plan.held_back;
            if plan.repair.is_empty() {
                return Ok(audit);
            }
            audit.repair = Some(plan.repair);
            if mode == RepairMode::DryRun {
                return Ok(audit);
            }
            // Strict admission raises under a fence, at once, busy scope or
            // not ([`Layout::raise`]); everything else is set under the
            // versions read.
            let mut rest = plan.repair;
            let mut raised = false;
            if let Some(target) = plan.repair.best_effort.filter(|_| raises) {
                rest.best_effort = None;
                let raise = self.best_effort.raise(&snapshot, &live, target - snapshot.best_effort);
                let stamp = after
                    .iter()
                    .filter(|i| raise.adds.contains_key(&i.name))
                    .map(|i| i.updated_at)
                    .fold(now, EpochMillis::max);
                match self.store.raise_best_effort(scope, &raise, stamp).await {
                    // The shards were created first; the raise itself is
                    // the next try's.
                    Ok(true) if raise.fences_only() && target > snapshot.best_effort => {
                        audit.not_repaired = Some("the configured shards were created first".into());
                        last = Some(audit);
                        continue;
                    }
                    Ok(true) if rest.is_empty() => {
                        audit.repaired = true;
                        audit.not_repaired = in_flight_note(&audit.counts, &after, now, self.grace);
                        return Ok(audit);
                    }
                    Ok(true) => raised = true,
                    Ok(false) => {
                        audit.not_repaired = Some("another raise, or a transaction holding a shard, came first".into());
                        last = Some(audit);
                        continue;
                    }
                    // The epoch condition makes a second apply impossible:
                    // the next try reads the scope anew.
                    Err(err) => {
                        audit.not_repaired = Some(format!("the raise's write failed: {err}"));
                        last = Some(audit);
                        continue;
                    }
                }
            }
            let targets = repair_targets(&after, &live, &rest, self.eventual_shards, self.best_effort);
            // A repair never moves a counter's `updated_at` back (an audit
            // run's `now` can be older than a write it read): later audits
            // read it as the time of the scope's last write.
            let stamp = after
                .iter()
                .filter(|i| targets.iter().any(|(name, _)| *name == i.name))
                .map(|i| i.updated_at)
                .fold(now, EpochMillis::max);
            match self.store.set_counters(scope, &after, &targets, stamp).await {
                Ok(true) => {
                    audit.repaired = true;
                    if raised {
                        audit.not_repaired = in_flight_note(&audit.counts, &after, now, self.grace);
                    }
                    return Ok(audit);
                }
                Ok(false) => {
                    audit.not_repaired = Some("a concurrent write changed a counter before the repair landed".into());
                }
                // The repair sets absolute values under version conditions:
                // whether or not an ambiguous attempt landed, the next try
                // reads the scope anew.
                Err(err) => audit.not_repaired = Some(format!("the repair's write failed: {err}")),
            }
            last = Some(audit);
        }
        let mut audit = last.expect("at least one attempt");
        let why = audit.not_repaired.take().unwrap_or_default();
        audit.not_repaired = Some(if audit.repair.is_none() && !audit.findings.is_empty() {
            // The last try's count mixed item states from before and after
            // writes that moved the counters: its findings are unconfirmed,
            // the scope is in motion, not drifted.
            let unconfirmed = std::mem::take(&mut audit.findings);
            format!(
                "the scope is in motion, under continuous writes: {why} on each of {} attempts; what the last \
                 attempt saw is not confirmed and not reported as drift: {unconfirmed:?}",
                self.attempts
            )
        } else {
            format!(
                "the scope is under continuous writes; {why} after {} attempts",
                self.attempts
            )
        });
        Ok(audit)
    }
}

/// What a strict raise that landed at once on a busy scope leaves open: a
/// create that had reserved but not yet put (or a delete between its soft
/// delete and its `-1`) was counted against its own slot, so the raise may
/// fall short by the requests in flight; the next audit after the grace
/// finds any rest. `None` when the scope was quiet.
fn in_flight_note(counts: &ScopeCounts, items: &[CounterItem], now: EpochMillis, grace: EpochMillis) -> Option<String> {
    let last = items
        .iter()
        .filter(|i| keys::is_best_effort_name(&i.name))
        .map(|i| i.updated_at)
        .fold(counts.last_item_write, EpochMillis::max);
    (now.saturating_sub(last) < grace).then(|| {
        format!(
            "raised at once on a scope written {}s ago: requests in flight then may leave it short by their \
             number; run the audit again {}s after the scope's last write",
            now.saturating_sub(last).max(0) / 1000,
            grace / 1000
        )
    })
}

/// Whether two reads of a scope's counter items saw the same writes (the
/// same items at the same versions).
fn same_counters(before: &[CounterItem], after: &[CounterItem]) -> bool {
    let versions = |items: &[CounterItem]| {
        let mut v: Vec<(String, i64, i64)> = items.iter().map(|i| (i.name.clone(), i.version, i.count)).collect();
        v.sort();
        v
    };
    versions(before) == versions(after)
}

/// The counters a repair sets: EC onto `eventual` with every shard
/// `eventual#n` zeroed (those read, and `eventual#0..shards-1` whether read
/// or not); BE's correction spread over its items so that none goes below
/// the live items recorded on it (`live`, see [`Layout::correction`]), every
/// best-effort item read written, so the repair is conditioned on all of
/// their versions and their sum lands exactly on the target.
fn repair_targets(
    items: &[CounterItem],
    live: &LiveByShard,
    repair: &Repair,
    shards: u32,
    best_effort: Layout,
) -> Vec<(String, i64)> {
    let mut targets = Vec::new();
    if let Some(eventual) = repair.eventual {
        targets.push((keys::EVENTUAL_NAME.to_owned(), eventual));
        let mut names: std::collections::BTreeSet<String> = items
            .iter()
            .filter(|i| keys::is_eventual_name(&i.name) && i.name != keys::EVENTUAL_NAME)
            .map(|i| i.name.clone())
            .collect();
        if shards > 1 {
            names.extend((0..shards).map(|n| format!("{}#{n}", keys::EVENTUAL_NAME)));
        }
        targets.extend(names.into_iter().map(|name| (name, 0)));
    }
    if let Some(target) = repair.best_effort {
        let read: BTreeMap<String, i64> = items
            .iter()
            .filter(|i| keys::is_best_effort_name(&i.name))
            .map(|i| (i.name.clone(), i.count))
            .collect();
        let delta = target - read.values().sum::<i64>();
        targets.extend(best_effort.correction(&read, live, delta));
    }
    targets
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_dynamo::Item;

    use super::*;
    use crate::memory::{Chaos, MemoryStore};
    use crate::request::Counter;
    use crate::store::RequestStore;
    use crate::stream::Processor;

    const NOW: EpochMillis = 1_700_000_000_000;

    fn scope() -> Scope {
        Scope::new("acct").unwrap()
    }

    fn id(id: &str) -> ResourceId {
        ResourceId::new(id).unwrap()
    }

    /// EC equals the number of processed kit items, checked after every write.
    fn check_eventual(store: &MemoryStore) {
        store.set_checker(|t| {
            let ec: i64 = t
                .counters
                .iter()
                .filter(|((_, name), _)| keys::is_eventual_name(name))
                .map(|(_, c)| c)
                .sum();
            let processed = t.resources.values().filter(|r| r.state.counter_processed).count() as i64;
            if ec == processed {
                Ok(())
            } else {
                Err(format!("EC {ec} != processed {processed}"))
            }
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_that_a_zero_net_transaction_cut_through_is_not_trusted() {
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::new(store.clone(), 10);
        let processor = Processor::new(store.clone());
        // "b" counted and soft-deleted, "a" created after it: one batch
        // counts "a" and hard-deletes "b", a net delta of zero.
        counter.create(&scope(), &id("b"), Item::default(), NOW).await.unwrap();
        processor
            .process(
                pending_changes(&*store, &scope()).await.unwrap().into_iter().map(Ok),
                NOW,
            )
            .await;
        counter.delete(&scope(), &id("b"), NOW).await.unwrap();
        counter.create(&scope(), &id("a"), Item::default(), NOW).await.unwrap();
        check_eventual(&store);
        // The audit reads one item per page and pauses between pages; the
        // batch commits in that pause (after "a" was read uncounted, before
        // "b" is read, gone): the count sees 0 processed items, 1 before and
        // after.
        store.set_chaos(Chaos {
            seed: 1,
            page_size: 1,
            page_latency: Duration::from_millis(50),
            ..Chaos::default()
        });
        let batch = pending_changes(&*store, &scope()).await.unwrap();
        assert_eq!(batch.len(), 2);
        let auditor = Auditor::new(&*store, Admission::BestEffort);
        let s = scope();
        let (audit, report) = tokio::join!(auditor.audit_scope(&s, RepairMode::Apply, NOW), async {
            tokio::time::sleep(Duration::from_micros(1)).await;
            processor.process(batch.into_iter().map(Ok), NOW).await
        });
        assert_eq!(report.failure_reason, None);
        let audit = audit.unwrap();
        assert_eq!(
            store.violation(),
            None,
            "the repair wrote EC from a torn count: {audit:?}"
        );
        assert!(audit.findings.is_empty(), "{audit:?}");
        assert_eq!(store.counter("acct", keys::EVENTUAL_NAME), 1);
    }

    #[tokio::test]
    async fn items_the_kit_did_not_write_are_reported_apart_and_never_move_a_counter() {
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::new(store.clone(), 10);
        counter
            .create(&scope(), &id("mine"), Item::default(), NOW)
            .await
            .unwrap();
        store.put_foreign("acct", "theirs", Item::default());
        let auditor = Auditor::new(&*store, Admission::BestEffort);
        let audit = auditor
            .audit_scope(&scope(), RepairMode::Apply, NOW + REQUEST_GRACE)
            .await
            .unwrap();
        assert_eq!((audit.counts.live, audit.counts.foreign), (1, 1), "{audit:?}");
        // BE 1 counts the kit's item only: no finding, nothing written.
        assert!(audit.findings.is_empty() && !audit.repaired, "{audit:?}");
        assert_eq!(store.counter("acct", keys::BEST_EFFORT_NAME), 1);
        assert!(
            pending_changes(&*store, &scope())
                .await
                .unwrap()
                .iter()
                .all(|c| !c.sequence_number.contains("theirs")),
            "the sweep leaves a foreign item alone"
        );
    }

    const REQUEST_GRACE: EpochMillis = super::super::findings::REQUEST_GRACE_MS;

    #[test]
    fn an_eventual_repair_covers_every_configured_shard_and_the_ones_read() {
        let item = |name: &str| CounterItem {
            scope: "acct".into(),
            name: name.into(),
            count: 1,
            version: 1,
            updated_at: 0,
            epoch: None,
            limit: None,
            share: None,
            rev: None,
            share_rev: None,
        };
        let read = [item("eventual#7"), item("best_effort")];
        let repair = Repair {
            eventual: Some(3),
            best_effort: None,
        };
        let names: Vec<String> = repair_targets(&read, &LiveByShard::new(), &repair, 3, Layout::default())
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            ["eventual", "eventual#0", "eventual#1", "eventual#2", "eventual#7"],
            "a shard not written yet is conditioned on its absence, so a transaction still applying to it \
             cannot land on top of the repair"
        );
        assert_eq!(
            repair_targets(&read, &LiveByShard::new(), &repair, 1, Layout::default()).len(),
            2
        );
    }

    #[test]
    fn a_best_effort_repair_is_written_under_every_shards_version() {
        let item = |name: &str, count: i64| CounterItem {
            scope: "acct".into(),
            name: name.into(),
            count,
            version: 1,
            updated_at: 0,
            epoch: None,
            limit: None,
            share: None,
            rev: None,
            share_rev: None,
        };
        let read = [
            item("best_effort", 2),
            item("best_effort#0", 3),
            item("best_effort#1", 1),
            item("eventual", 9),
        ];
        let raise = Repair {
            eventual: None,
            best_effort: Some(10),
        };
        let targets = repair_targets(&read, &LiveByShard::new(), &raise, 1, Layout::new(2));
        assert_eq!(
            targets,
            [("best_effort", 2), ("best_effort#0", 3), ("best_effort#1", 5)].map(|(n, c)| (n.to_owned(), c)),
            "+4 onto the emptiest active shard; the others set to what they hold"
        );
        let lower = Repair {
            eventual: None,
            best_effort: Some(4),
        };
        let targets = repair_targets(&read, &LiveByShard::new(), &lower, 1, Layout::new(2));
        assert_eq!(targets.iter().map(|(_, c)| c).sum::<i64>(), 4);
        assert_eq!(
            targets[1],
            ("best_effort#0".to_owned(), 1),
            "-2 off the item most above its live items"
        );
    }

    #[tokio::test]
    async fn a_strict_lowering_never_takes_a_shard_below_the_live_items_recorded_on_it() {
        // Issue 26's trace: w1 reserved on #1 and is live there; another
        // create reserved on #0 and its put was lost, the slot kept: (1, 1)
        // for one live item. The lowering must come off #0: taken off #1
        // (the fullest, on a tie), w1's delete later drives #1 to -1.
        let store = MemoryStore::new();
        let item = crate::items::ResourceItem {
            scope: scope(),
            id: id("w1"),
            counter_processed: false,
            deleted: false,
            incarnation: "i".into(),
            created_at: NOW,
            be_shard: Some(1),
        };
        store
            .put_resource(&crate::store::NewResource {
                item,
                payload: Item::default(),
            })
            .await
            .unwrap();
        store.set_counter("acct", "best_effort#0", 1);
        store.set_counter("acct", "best_effort#1", 1);
        let audit = Auditor::new(&store, Admission::Strict)
            .with_best_effort_shards(2)
            .audit_scope(&scope(), RepairMode::Apply, NOW + 10 * REQUEST_GRACE)
            .await
            .unwrap();
        assert!(audit.repaired, "{audit:?}");
        assert_eq!(
            (
                store.counter("acct", "best_effort#0"),
                store.counter("acct", "best_effort#1")
            ),
            (0, 1),
            "#1 still covers w1"
        );
    }

    #[tokio::test]
    async fn a_strict_audit_raises_a_shard_short_of_its_items_when_the_sum_is_right() {
        // After best-effort admission (issue 34 D3): w1 recorded on #0, its
        // +1 retried onto #1. The sum equals live; #0 is short by one.
        let store = MemoryStore::new();
        let item = crate::items::ResourceItem {
            scope: scope(),
            id: id("w1"),
            counter_processed: false,
            deleted: false,
            incarnation: "i".into(),
            created_at: NOW,
            be_shard: Some(0),
        };
        store
            .put_resource(&crate::store::NewResource {
                item,
                payload: Item::default(),
            })
            .await
            .unwrap();
        store.set_counter("acct", "best_effort#1", 1);
        let audit = Auditor::new(&store, Admission::Strict)
            .with_best_effort_shards(2)
            .audit_scope(&scope(), RepairMode::Apply, NOW + 10 * REQUEST_GRACE)
            .await
            .unwrap();
        assert!(audit.repaired, "{audit:?}");
        assert_eq!(
            audit.findings,
            vec![Finding::ShardsShort { short: 1 }],
            "the sums agree"
        );
        assert!(audit.has_defect());
        assert_eq!(
            (
                store.counter("acct", "best_effort#0"),
                store.counter("acct", "best_effort#1")
            ),
            (1, 1),
            "#0 covers w1 again; #1's surplus is lowered by a later audit"
        );
    }

    #[tokio::test]
    async fn an_audit_of_a_sharded_scope_finds_nothing_and_repairs_the_sum() {
        for admission in [Admission::BestEffort, Admission::Strict] {
            let store = Arc::new(MemoryStore::new());
            let counter = Counter::new(store.clone(), 100)
                .with_admission(admission)
                .with_best_effort_shards(4)
                .with_seed(5);
            let s = scope();
            for n in 0..12 {
                counter
                    .create(&s, &ResourceId::new(format!("w{n}")).unwrap(), Item::default(), NOW)
                    .await
                    .unwrap();
            }
            for n in 0..3 {
                counter
                    .delete(&s, &ResourceId::new(format!("w{n}")).unwrap(), NOW)
                    .await
                    .unwrap();
            }
            let shards_written = store
                .tables()
                .counters
                .keys()
                .filter(|(_, name)| name.starts_with("best_effort#"))
                .count();
            assert!(shards_written > 1, "{admission:?}: creates spread over the shards");
            assert_eq!(store.best_effort("acct"), 9, "{admission:?}");
            let auditor = Auditor::new(&*store, admission).with_best_effort_shards(4);
            let later = NOW + 10 * REQUEST_GRACE;
            let audit = auditor.audit_scope(&s, RepairMode::Apply, later).await.unwrap();
            assert!(
                audit.findings.iter().all(|f| !matches!(
                    f,
                    Finding::BestEffortAboveLive { .. }
                        | Finding::BestEffortBelowLive { .. }
                        | Finding::OverReserved { .. }
                        | Finding::UnderReserved { .. }
                )),
                "{admission:?}: {audit:?}"
            );
            // Drift on one shard: the repair brings the sum back to live.
            store.set_counter("acct", "best_effort#2", store.counter("acct", "best_effort#2") - 4);
            let audit = auditor.audit_scope(&s, RepairMode::Apply, later).await.unwrap();
            assert!(audit.repaired, "{admission:?}: {audit:?}");
            assert_eq!(store.best_effort("acct"), 9, "{admission:?}");
        }
    }

    #[tokio::test]
    async fn a_count_torn_by_the_stream_on_every_try_is_in_motion_not_drift() {
        // A stream transaction lands during each count: the Query saw the
        // item not yet counted, the counters read after it count it. Every
        // try sees EC one above the processed items, and no try is trusted.
        let store = MemoryStore::new();
        for n in 0..3 {
            store.put_item("acct", &format!("w{n}"), "i", false, false).await;
        }
        store.set_counter("acct", keys::BEST_EFFORT_NAME, 3);
        for n in 0..3 {
            store.after_next(crate::memory::Op::ScopeItems, move |tables| {
                let key = ("acct".to_owned(), format!("w{n}"));
                let item = tables.resources.get_mut(&key).unwrap();
                item.state.counter_processed = true;
                item.image.insert(
                    keys::COUNTER_PROCESSED.to_owned(),
                    serde_dynamo::AttributeValue::Bool(true),
                );
                *tables
                    .counters
                    .entry(("acct".to_owned(), keys::EVENTUAL_NAME.to_owned()))
                    .or_default() += 1;
            });
        }
        let audit = Auditor::new(&store, Admission::BestEffort)
            .audit_scope(&scope(), RepairMode::Apply, NOW)
            .await
            .unwrap();
        assert!(!audit.has_drift() && !audit.has_defect(), "{audit:?}");
        assert!(audit.held_back() && !audit.repaired, "{audit:?}");
        let why = audit.not_repaired.as_deref().unwrap();
        assert!(why.contains("in motion") && why.contains("EventualMismatch"), "{why}");
        // Once the writes stop, the same audit confirms the scope exact.
        let quiet = Auditor::new(&store, Admission::BestEffort)
            .audit_scope(&scope(), RepairMode::Apply, NOW)
            .await
            .unwrap();
        assert!(quiet.findings.is_empty() && !quiet.held_back(), "{quiet:?}");
    }

    #[tokio::test]
    async fn a_repair_never_moves_a_counters_last_write_back() {
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::new(store.clone(), 10);
        counter.create(&scope(), &id("w0"), Item::default(), NOW).await.unwrap();
        store.set_counter("acct", keys::EVENTUAL_NAME, 5);
        // EC drifted and was last written at NOW + 50 s; an audit run whose
        // clock says NOW repairs it without dating the write back.
        store.set_clock(Arc::new(|| NOW + 50_000));
        store.set_counter("acct", keys::EVENTUAL_NAME, 5);
        let audit = Auditor::new(&*store, Admission::BestEffort)
            .audit_scope(&scope(), RepairMode::Apply, NOW)
            .await
            .unwrap();
        assert_eq!(audit.repair.and_then(|r| r.eventual), Some(0), "{audit:?}");
        assert!(audit.repaired, "{audit:?}");
        assert_eq!(store.counter_updated_at("acct", keys::EVENTUAL_NAME), NOW + 50_000);
    }

    #[tokio::test]
    async fn a_best_effort_raise_is_held_back_until_the_scope_is_quiet_then_written() {
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::new(store.clone(), 10);
        counter.create(&scope(), &id("w0"), Item::default(), NOW).await.unwrap();
        // An increment lost to a 500: BE undercounts by one.
        store.inject(crate::memory::Op::AddBestEffort, crate::memory::Fault::Unavailable);
        counter.create(&scope(), &id("w1"), Item::default(), NOW).await.unwrap();
        let auditor = Auditor::new(&*store, Admission::BestEffort);
        let early = auditor
            .audit_scope(&scope(), RepairMode::Apply, NOW + 1_000)
            .await
            .unwrap();
        assert!(!early.repaired && early.held_back(), "{early:?}");
        assert!(
            early.not_repaired.as_deref().unwrap().contains("in flight"),
            "{early:?}"
        );
        assert_eq!(store.counter("acct", keys::BEST_EFFORT_NAME), 1);
        let dry = auditor
            .audit_scope(&scope(), RepairMode::DryRun, NOW + REQUEST_GRACE)
            .await
            .unwrap();
        assert_eq!(dry.repair.and_then(|r| r.best_effort), Some(2));
        assert_eq!(
            store.counter("acct", keys::BEST_EFFORT_NAME),
            1,
            "a dry run writes nothing"
        );
        let late = auditor
            .audit_scope(&scope(), RepairMode::Apply, NOW + REQUEST_GRACE)
            .await
            .unwrap();
        assert!(late.repaired && !late.held_back(), "{late:?}");
        assert_eq!(store.counter("acct", keys::BEST_EFFORT_NAME), 2);
    }

    /// Issue 34 D2, the reported trace: `BeShardCount=4`, just switched
    /// from best-effort to strict with BE two below live (10 live, BE 8,
    /// limit 10), on a scope written a moment ago. The raise lands at once
    /// (it used to be held back until the scope was quiet, so a busy scope
    /// stayed under-reserved and creates reached 12), and no create passes
    /// the limit after it.
    #[tokio::test]
    async fn a_busy_sharded_strict_scope_is_raised_at_once_and_never_overshoots() {
        let store = Arc::new(MemoryStore::new());
        let before = Counter::new(store.clone(), 10).with_best_effort_shards(4).with_seed(3);
        for n in 0..10 {
            if n < 2 {
                store.inject(crate::memory::Op::AddBestEffort, crate::memory::Fault::Unavailable);
            }
            before
                .create(&scope(), &id(&format!("w{n}")), Item::default(), NOW)
                .await
                .unwrap();
        }
        assert_eq!(store.best_effort("acct"), 8);
        let strict = Counter::new(store.clone(), 10)
            .with_admission(Admission::Strict)
            .with_best_effort_shards(4)
            .with_seed(4);
        let audit = Auditor::new(&*store, Admission::Strict)
            .with_best_effort_shards(4)
            .audit_scope(&scope(), RepairMode::Apply, NOW)
            .await
            .unwrap();
        assert!(audit.repaired, "{audit:?}");
        assert!(
            audit
                .not_repaired
                .as_deref()
                .is_some_and(|n| n.contains("run the audit again")),
            "a busy scope is raised at once and said to be worth another look: {audit:?}"
        );
        assert_eq!(store.best_effort("acct"), 10);
        for n in 0..4 {
            let refused = strict
                .create(&scope(), &id(&format!("x{n}")), Item::default(), NOW)
                .await
                .unwrap_err();
            assert!(
                matches!(refused, crate::error::Error::LimitExceeded { .. }),
                "{refused}"
            );
        }
        let live = store.tables().resources.values().filter(|r| !r.state.deleted).count();
        assert_eq!(live, 10);
    }
}
