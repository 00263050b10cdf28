//! The audit engine: one scope's exact audit and repair, over any
//! [`Store`]. `counterctl audit`, the simulation and the emulator tests all
//! run this code; the decisions it takes are the pure functions of the
//! parent module ([`findings_for`], [`plan_repair_at`]), with the clock
//! passed in.
//!
//! A scope's items are counted with a paginated Query, which DynamoDB reads
//! item by item (read-committed), not as a snapshot. So the counters are
//! read before and after the count, and the count is trusted only if no
//! counter moved in between: every stream transaction that changes which
//! items are processed bumps its counter item's `version`. A repair is
//! written conditioned on the versions it was computed from, so a
//! concurrent writer makes it retry rather than clobber.

use serde::Serialize;

use super::{Finding, Repair, ScopeCounts, findings_for, plan_repair_at};
use crate::EpochMillis;
use crate::config::Admission;
use crate::error::StoreError;
use crate::ids::{ResourceId, Scope};
use crate::items::{CounterItem, CounterSnapshot};
use crate::keys;
use crate::store::{ResourceKey, Store};
use crate::stream::{Change, ChangeRecord};

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
    /// the part that was held back, see [`plan_repair_at`]).
    pub not_repaired: Option<String>,
}

impl ScopeAudit {
    /// Whether a counter differs from the truth (any finding).
    pub fn has_drift(&self) -> bool {
        !self.findings.is_empty()
    }

    /// Whether a finding is a defect of the kit (EC != processed; BE > live
    /// in best-effort admission, BE < live in strict admission).
    pub fn has_defect(&self) -> bool {
        self.findings.iter().any(Finding::is_defect)
    }

    /// Whether part of a needed repair was held back (not a failure: a
    /// later run writes it).
    pub fn held_back(&self) -> bool {
        self.not_repaired.is_some()
    }
}

/// Counts the items of `scope` by state, with one read of every item
/// ([`Store::scope_items`]: read-committed, not a snapshot).
pub async fn count_scope<S: Store>(store: &S, scope: &Scope) -> Result<ScopeCounts, StoreError> {
    let mut counts = ScopeCounts::default();
    for row in store.scope_items(scope).await? {
        counts.add_row(&row);
    }
    Ok(counts)
}

/// The kit's items of `scope` the stream consumer has not finished with
/// (not counted yet, or soft-deleted), as the changes that finish them:
/// what their stream records would have said. Running them through the
/// stream processor (idempotent, so safe while the consumer runs) heals a
/// scope whose records left the stream.
pub async fn pending_changes<S: Store>(store: &S, scope: &Scope) -> Result<Vec<ChangeRecord>, StoreError> {
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
}

impl<'a, S: Store> Auditor<'a, S> {
    /// Three tries per scope and a grace period of
    /// [`super::REQUEST_GRACE_MS`] by default.
    pub fn new(store: &'a S, admission: Admission) -> Self {
        Self {
            store,
            admission,
            attempts: 3,
            grace: super::REQUEST_GRACE_MS,
        }
    }

    /// How long after the request path's last write of a scope a repair
    /// may move BE the way an in-flight request could push past the
    /// invariant: longer than the API's timeout plus clock skew.
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

    /// Audits one scope exactly: its counters are read before and after the
    /// item count, and the count is trusted only if no counter changed in
    /// between. A repair is written with the versions it was computed from
    /// as conditions; after the tries run out a scope under continuous
    /// writes is reported as not repaired, with the reason. What may not be
    /// written yet ([`plan_repair_at`]) is held back and said.
    pub async fn audit_scope(
        &self,
        scope: &Scope,
        mode: RepairMode,
        now: EpochMillis,
    ) -> Result<ScopeAudit, StoreError> {
        let mut last = None;
        for _ in 0..self.attempts {
            let before = self.store.counter_items(scope).await?;
            let counts = count_scope(self.store, scope).await?;
            let after = self.store.counter_items(scope).await?;
            let snapshot = CounterSnapshot::from_items(after.iter().cloned());
            let findings = findings_for(self.admission, &counts, snapshot.best_effort, snapshot.eventual);
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
            let scope_written = after
                .iter()
                .filter(|i| i.name != keys::LIMIT_NAME)
                .map(|i| i.updated_at)
                .max()
                .unwrap_or(0);
            let plan = plan_repair_at(&audit.counts, &audit.findings, scope_written, now, self.grace);
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
            match self
                .store
                .set_counters(scope, &after, &repair_targets(&after, &plan.repair), now)
                .await
            {
                Ok(true) => {
                    audit.repaired = true;
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
        audit.not_repaired = Some(format!(
            "the scope is under continuous writes; {} after {} attempts",
            audit.not_repaired.take().unwrap_or_default(),
            self.attempts
        ));
        Ok(audit)
    }
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
/// `eventual#n` zeroed, BE onto `best_effort`.
fn repair_targets(items: &[CounterItem], repair: &Repair) -> Vec<(String, i64)> {
    let mut targets = Vec::new();
    if let Some(eventual) = repair.eventual {
        targets.push((keys::EVENTUAL_NAME.to_owned(), eventual));
        for item in items
            .iter()
            .filter(|i| keys::is_eventual_name(&i.name) && i.name != keys::EVENTUAL_NAME)
        {
            targets.push((item.name.clone(), 0));
        }
    }
    if let Some(best_effort) = repair.best_effort {
        targets.push((keys::BEST_EFFORT_NAME.to_owned(), best_effort));
    }
    targets
}
