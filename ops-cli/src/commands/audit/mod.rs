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
//!
//! This file runs the engine over the scopes; `report` is the report and
//! its rendering.

mod report;

use hybrid_counter::audit::{Auditor, RepairMode, ScopeCounts};
use hybrid_counter_aws::DynamoStore;

pub use report::AuditReport;
use report::mode_name;

use super::deployed::counter_config;
use super::{Context, Location};
use crate::config::AuditOptions;
use crate::error::{Error, Result};

pub async fn run(ctx: &Context<'_>, options: &AuditOptions) -> Result<AuditReport> {
    let config = counter_config(ctx).await?;
    let store = DynamoStore::new(ctx.clients.dynamodb.clone(), &config);
    let auditor = Auditor::configured(&store, &config)
        .with_attempts(options.attempts)
        .with_grace(options.grace_ms);
    use crate::error::store_error;
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
                let tally = ui_counts.get(scope).cloned().unwrap_or_default();
                let counts = tally.counts;
                let snapshot = counters.get(scope).cloned().unwrap_or_default();
                report.totals.merge(&counts);
                pending.push((scope.clone(), counts.pending_create + counts.pending_delete));
                if counts.foreign > 0 {
                    report.foreign_items.push((scope.clone(), counts.foreign));
                }
                if !auditor.findings(&tally, &snapshot).is_empty() {
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
