//! `counterctl audit`: counts every scope's items by state (a parallel
//! segmented Scan, or one Query with `--scope`), compares them with the
//! counters, and with `--repair` heals what it finds. A scope the Scan shows
//! as off is confirmed with the exact per-scope audit (counters read before
//! and after the count, unchanged in between) before it is reported or
//! repaired, so a write racing the Scan is not reported as drift.
//!
//! `--repair` also sweeps pending items: every item not yet counted, or
//! soft-deleted and not yet removed, is run through the stream processor as
//! its record would have been. That is what heals a scope whose records
//! left the stream (a DLQ range older than 24 hours): its counters match its
//! flags, but the flags never reached their end state. The sweep is
//! idempotent, so it is safe while the stream consumer runs.
//!
//! BE is read by the stack's `AdmissionMode`: in best-effort admission a BE
//! above the live count is the defect and one below it the expected drift;
//! in strict admission BE counts reservations, so it is the other way
//! round, and `--repair` lowers an over-reserved BE only once it was last
//! written more than a grace period ago (a reservation may be in flight
//! until then); such a scope is reported as not repaired yet, with the
//! reason.

use std::fmt;

use hybrid_counter::Admission;
use hybrid_counter::DynamoStore;
use hybrid_counter::audit::{Auditor, Finding, RepairMode, ScopeAudit, ScopeCounts, findings_for};
use serde::Serialize;

use super::deployed::counter_config;
use super::{Context, Location};
use crate::config::AuditOptions;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    #[serde(flatten)]
    pub location: Location,
    pub scopes_checked: usize,
    pub items_scanned: u64,
    /// Scopes with findings (clean ones are only counted).
    pub scopes: Vec<ScopeAudit>,
    pub totals: ScopeCounts,
    /// Pending items processed by the sweep (`--repair`) or that it would
    /// process (`--dry-run`).
    pub swept: u64,
    /// Sweeps that stopped on an item, with the reason.
    pub sweep_failures: Vec<String>,
    /// Per scope, the items without an incarnation: not the kit's, never
    /// counted, never swept, and never a reason to move a counter.
    pub foreign_items: Vec<(String, u64)>,
    /// Whether any counter differed from the truth (exit 1).
    pub drift: bool,
    /// Whether a difference was a defect of the kit (EC != processed; BE >
    /// live in best-effort admission, BE < live in strict admission).
    pub defect: bool,
    pub mode: &'static str,
    /// The stack's admission mode, which BE was read by.
    pub admission: Admission,
}

impl AuditReport {
    pub fn healthy(&self) -> bool {
        !self.drift && self.sweep_failures.is_empty()
    }
}

fn mode_name(mode: RepairMode) -> &'static str {
    match mode {
        RepairMode::None => "report",
        RepairMode::DryRun => "dry-run",
        RepairMode::Apply => "repair",
    }
}

pub async fn run(ctx: &Context<'_>, options: &AuditOptions) -> Result<AuditReport> {
    let config = counter_config(ctx).await?;
    let store = DynamoStore::new(ctx.clients.dynamodb.clone(), &config);
    let auditor = Auditor::new(&store, config.admission)
        .with_attempts(options.attempts)
        .with_grace(options.grace_ms)
        .with_eventual_shards(config.eventual_shards);
    let store_error = |action: &'static str| {
        move |e: hybrid_counter::error::StoreError| Error::Aws {
            action,
            message: e.to_string(),
        }
    };
    let mut report = AuditReport {
        location: Location::of(ctx),
        scopes_checked: 0,
        items_scanned: 0,
        scopes: Vec::new(),
        totals: ScopeCounts::default(),
        swept: 0,
        sweep_failures: Vec::new(),
        foreign_items: Vec::new(),
        drift: false,
        defect: false,
        mode: mode_name(options.mode),
        admission: config.admission,
    };
    let mut pending: Vec<(String, u64)> = Vec::new();
    let suspects: Vec<String> = match &options.scope {
        Some(scope) => {
            let counts = hybrid_counter::audit::count_scope(&store, scope)
                .await
                .map_err(store_error("counting a scope"))?;
            pending.push((scope.to_string(), counts.pending_create + counts.pending_delete));
            if counts.foreign > 0 {
                report.foreign_items.push((scope.to_string(), counts.foreign));
            }
            vec![scope.to_string()]
        }
        None => {
            ctx.ui.step("scanning the resources table");
            let scanned = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let seen = scanned.clone();
            let ui_counts = store
                .scan_scope_counts(options.segments, move |n| {
                    seen.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                })
                .await
                .map_err(store_error("Scan of the resources table"))?;
            report.items_scanned = scanned.load(std::sync::atomic::Ordering::Relaxed);
            ctx.ui
                .step(format!("scanned {} items; reading the counters", report.items_scanned));
            let counters = store
                .scan_counters()
                .await
                .map_err(store_error("Scan of the counters table"))?;
            let mut scopes: std::collections::BTreeSet<&String> = ui_counts.keys().collect();
            scopes.extend(counters.keys());
            report.scopes_checked = scopes.len();
            let mut suspects = Vec::new();
            for scope in scopes {
                let counts = ui_counts.get(scope).copied().unwrap_or_default();
                let snapshot = counters.get(scope).copied().unwrap_or_default();
                report.totals.merge(&counts);
                pending.push((scope.clone(), counts.pending_create + counts.pending_delete));
                if counts.foreign > 0 {
                    report.foreign_items.push((scope.clone(), counts.foreign));
                }
                if !findings_for(config.admission, &counts, snapshot.best_effort, snapshot.eventual).is_empty() {
                    suspects.push(scope.clone());
                }
            }
            suspects
        }
    };
    pending.retain(|(_, n)| *n > 0);
    match options.mode {
        RepairMode::None => {}
        RepairMode::DryRun => report.swept = pending.iter().map(|(_, n)| n).sum(),
        RepairMode::Apply => {
            let processor = hybrid_counter::stream::Processor::new(store.clone())
                .with_eventual_shards(config.eventual_shards)
                .with_clock(hybrid_counter::Clock::system());
            for (scope, _) in &pending {
                ctx.ui.step(format!("sweeping pending items of scope {scope}"));
                let Ok(scope) = hybrid_counter::Scope::new(scope.clone()) else {
                    continue;
                };
                let changes = hybrid_counter::audit::pending_changes(&store, &scope)
                    .await
                    .map_err(store_error("reading pending items"))?;
                let done = processor
                    .process(changes.into_iter().map(Ok), hybrid_counter::now_millis())
                    .await;
                report.swept +=
                    u64::from(done.counted + done.deleted_counted + done.deleted_uncounted + done.already_done);
                if let Some(reason) = done.failure_reason {
                    report.sweep_failures.push(format!("{scope}: {reason}"));
                }
            }
        }
    }
    for (n, scope) in suspects.iter().enumerate() {
        ctx.ui
            .step(format!("auditing scope {scope} ({}/{})", n + 1, suspects.len()));
        let scope = hybrid_counter::Scope::new(scope.clone()).map_err(|e| Error::Aws {
            action: "reading a scope",
            message: format!("the table holds an invalid scope {scope:?}: {e}"),
        })?;
        // The time of this scope's audit, not of the run's start: a long run
        // must not judge (or stamp) a scope by a clock minutes old.
        let audit = auditor
            .audit_scope(&scope, options.mode, hybrid_counter::now_millis())
            .await
            .map_err(store_error("auditing a scope"))?;
        if options.scope.is_some() {
            report.scopes_checked = 1;
            report.items_scanned = audit.counts.live + audit.counts.pending_delete;
            report.totals = audit.counts;
        }
        report.drift |= audit.has_drift();
        report.defect |= audit.has_defect();
        if !audit.findings.is_empty() || audit.not_repaired.is_some() {
            report.scopes.push(audit);
        }
    }
    Ok(report)
}

fn finding_text(finding: &Finding) -> String {
    match finding {
        Finding::EventualMismatch { eventual, processed } => {
            format!("DRIFT eventual {eventual} != processed {processed} (transactional invariant broken)")
        }
        Finding::BestEffortAboveLive { best_effort, live } => {
            format!("DRIFT best-effort {best_effort} > live {live} (overcount)")
        }
        Finding::BestEffortBelowLive { best_effort, live } => {
            format!("best-effort {best_effort} < live {live} (undercount, expected)")
        }
        Finding::OverReserved { best_effort, live } => {
            format!("best-effort {best_effort} > live {live} (over-reserved, expected in strict admission)")
        }
        Finding::UnderReserved { best_effort, live } => {
            format!("DRIFT best-effort {best_effort} < live {live} (under-reserved: strict admission can overshoot)")
        }
    }
}

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Audit of stack {} ({}): {} scope(s), {} item(s) scanned, mode {}, {} admission",
            self.location.stack_name,
            self.location.target,
            self.scopes_checked,
            self.items_scanned,
            self.mode,
            self.admission
        )?;
        writeln!(
            f,
            "  totals: live {}, processed {}, pending create {}, pending delete {}, not the kit's {}",
            self.totals.live,
            self.totals.processed,
            self.totals.pending_create,
            self.totals.pending_delete,
            self.totals.foreign
        )?;
        match self.mode {
            "repair" if self.swept > 0 => writeln!(f, "  swept {} pending item(s) through the processor", self.swept)?,
            "dry-run" if self.swept > 0 => writeln!(f, "  would sweep {} pending item(s)", self.swept)?,
            _ => {}
        }
        for failure in &self.sweep_failures {
            writeln!(f, "  SWEEP STOPPED: {failure}")?;
        }
        if !self.foreign_items.is_empty() {
            let list: Vec<String> = self.foreign_items.iter().map(|(s, n)| format!("{s}: {n}")).collect();
            writeln!(
                f,
                "  items without an incarnation (not the kit's; never counted): {}",
                list.join(", ")
            )?;
        }
        if self.scopes.is_empty() {
            return writeln!(f, "  every scope is consistent");
        }
        writeln!(
            f,
            "  {:<24} {:>7} {:>9} {:>8} {:>8} {:>11} {:>9}",
            "SCOPE", "LIVE", "PROCESSED", "PENDING+", "PENDING-", "BEST_EFFORT", "EVENTUAL"
        )?;
        for s in &self.scopes {
            writeln!(
                f,
                "  {:<24} {:>7} {:>9} {:>8} {:>8} {:>11} {:>9}",
                s.scope,
                s.counts.live,
                s.counts.processed,
                s.counts.pending_create,
                s.counts.pending_delete,
                s.best_effort,
                s.eventual
            )?;
            for finding in &s.findings {
                writeln!(f, "      {}", finding_text(finding))?;
            }
            match (&s.repair, s.repaired, &s.not_repaired) {
                (Some(r), true, held_back) => {
                    writeln!(f, "      repaired: {}", repair_text(r))?;
                    if let Some(why) = held_back {
                        writeln!(f, "      NOT repaired yet: {why}")?;
                    }
                }
                (Some(r), false, None) => writeln!(f, "      would repair: {}", repair_text(r))?,
                (Some(r), false, Some(why)) if self.mode == "dry-run" => {
                    writeln!(f, "      would repair: {}", repair_text(r))?;
                    writeln!(f, "      NOT repaired yet: {why}")?;
                }
                (_, _, Some(why)) => writeln!(f, "      NOT repaired: {why}")?,
                _ => {}
            }
        }
        if self.defect {
            writeln!(f, "DRIFT FOUND, including a defect of the kit (exit 1)")?;
        } else if self.drift {
            writeln!(f, "DRIFT FOUND (exit 1)")?;
        }
        Ok(())
    }
}

fn repair_text(repair: &hybrid_counter::audit::Repair) -> String {
    let mut parts = Vec::new();
    if let Some(ec) = repair.eventual {
        parts.push(format!("eventual := {ec}"));
    }
    if let Some(be) = repair.best_effort {
        parts.push(format!("best_effort := {be}"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use hybrid_counter::audit::Repair;

    use super::*;

    fn report(mode: &'static str, scope: ScopeAudit) -> AuditReport {
        AuditReport {
            location: Location {
                stack_name: "hybrid-counter".into(),
                target: "local".into(),
                region: "us-east-1".into(),
                endpoint: None,
            },
            scopes_checked: 1,
            items_scanned: 3,
            totals: scope.counts,
            drift: scope.has_drift(),
            defect: scope.has_defect(),
            scopes: vec![scope],
            swept: 0,
            sweep_failures: Vec::new(),
            foreign_items: vec![("acct".into(), 2)],
            mode,
            admission: Admission::Strict,
        }
    }

    fn strict_scope(best_effort: i64, live: u64) -> ScopeAudit {
        let counts = ScopeCounts {
            live,
            processed: live,
            ..ScopeCounts::default()
        };
        ScopeAudit {
            scope: "acct".into(),
            admission: Admission::Strict,
            findings: findings_for(Admission::Strict, &counts, best_effort, live as i64),
            counts,
            best_effort,
            eventual: live as i64,
            repair: None,
            repaired: false,
            not_repaired: None,
        }
    }

    #[test]
    fn strict_findings_name_their_side_and_a_held_back_repair_says_why() {
        let mut over = strict_scope(5, 3);
        over.not_repaired = Some("a reservation may still be in flight".into());
        let text = report("repair", over).to_string();
        assert!(text.contains("strict admission"), "{text}");
        assert!(
            text.contains("items without an incarnation (not the kit's; never counted): acct: 2"),
            "{text}"
        );
        assert!(text.contains("over-reserved, expected in strict admission"), "{text}");
        assert!(
            text.contains("NOT repaired: a reservation may still be in flight"),
            "{text}"
        );
        assert!(
            text.contains("DRIFT FOUND (exit 1)") && !text.contains("defect"),
            "{text}"
        );

        // EC repaired, the BE part held back: both are said.
        let mut partial = strict_scope(5, 3);
        partial.repair = Some(Repair {
            eventual: Some(3),
            best_effort: None,
        });
        partial.repaired = true;
        partial.not_repaired = Some("wait".into());
        let text = report("repair", partial).to_string();
        assert!(
            text.contains("repaired: eventual := 3") && text.contains("NOT repaired yet: wait"),
            "{text}"
        );

        let under = report("report", strict_scope(2, 3));
        assert!(under.defect);
        let text = under.to_string();
        assert!(text.contains("DRIFT best-effort 2 < live 3 (under-reserved"), "{text}");
        assert!(text.contains("including a defect"), "{text}");
    }
}
