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
//! With `ScopeKeyShards` N > 1 each of a scope's counters keys `s#k` is
//! a scope of its own to the counters: `--scope s` audits every one of
//! them, and the whole-table audit reports each key under its own name,
//! saying whose key it is. With `ResourceKeySpread` M > 1 a counters key's
//! items are those of its M resources keys.
//!
//! This file runs the engine over the scopes; `report` is the report and
//! its rendering.

mod report;

use std::collections::BTreeMap;

use hybrid_counter::audit::{Auditor, RepairMode, ScopeTally};
use hybrid_counter::{AuditStore, CounterConfig, Scope, StreamStore};
use hybrid_counter_aws::DynamoStore;

pub use report::AuditReport;

use super::deployed::counter_config;
use super::{Context, Location};
use crate::config::AuditOptions;
use crate::error::{Error, Result, during, invalid};

pub async fn run(ctx: &Context<'_>, options: &AuditOptions) -> Result<AuditReport> {
    let config = counter_config(ctx).await?;
    let store = DynamoStore::new(ctx.clients.dynamodb.clone(), &config);
    let mut report = AuditReport::new(Location::of(ctx), options.mode, &config);
    let mut pending: Vec<(String, u64)> = Vec::new();
    let suspects: Vec<String> = match &options.scope {
        Some(scope) => count_keys(&store, &config, scope, &mut report, &mut pending).await?,
        None => {
            ctx.ui.step("scanning the resources table");
            let auditor = Auditor::configured(&store, &config);
            let scanned = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let seen = scanned.clone();
            let ui_counts = store
                .scan_scope_counts(options.segments, move |n| {
                    seen.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                })
                .await
                .map_err(during("Scan of the resources table"))?;
            report.items_scanned = scanned.load(std::sync::atomic::Ordering::Relaxed);
            // Pending items are swept per resources key; tallies are judged
            // per counters key, the sum of its resources keys'.
            for (key, tally) in &ui_counts {
                let counts = &tally.counts;
                pending.push((key.clone(), counts.pending_create + counts.pending_delete));
                if counts.foreign > 0 {
                    report.foreign_items.push((key.clone(), counts.foreign));
                }
            }
            let ui_counts = by_counters_key(&config, ui_counts);
            ctx.ui
                .step(format!("scanned {} items; reading the counters", report.items_scanned));
            let counters = store
                .scan_counters()
                .await
                .map_err(during("Scan of the counters table"))?;
            let mut scopes: std::collections::BTreeSet<&String> = ui_counts.keys().collect();
            scopes.extend(counters.keys());
            report.scopes_checked = scopes.len();
            let mut suspects = Vec::new();
            for scope in scopes {
                let tally = ui_counts.get(scope).cloned().unwrap_or_default();
                let counts = tally.counts;
                let snapshot = counters.get(scope).cloned().unwrap_or_default();
                report.totals.merge(&counts);
                if !auditor.findings(&tally, &snapshot).is_empty() {
                    suspects.push(scope.clone());
                }
            }
            suspects
        }
    };
    sweep_and_audit(
        &std::sync::Arc::new(store),
        &config,
        options,
        pending,
        &suspects,
        &mut report,
        ctx.ui,
    )
    .await?;
    Ok(report)
}

/// The whole-table Scan's tallies, per resources key, summed per counters
/// key (the same map when `ResourceKeySpread` is 1).
fn by_counters_key(config: &CounterConfig, tallies: BTreeMap<String, ScopeTally>) -> BTreeMap<String, ScopeTally> {
    if config.scope_keys.spread() == 1 {
        return tallies;
    }
    let mut merged: BTreeMap<String, ScopeTally> = BTreeMap::new();
    for (key, tally) in tallies {
        let counters_key = match Scope::new(key.clone()) {
            Ok(valid) => config.scope_keys.counters_key_of(&valid).to_string(),
            Err(_) => key,
        };
        merged.entry(counters_key).or_default().merge(&tally);
    }
    merged
}

/// `--scope`: counts each resources key of each of the scope's counters
/// keys (`s#0..s#N-1` with `ScopeKeyShards` N > 1, the scope itself
/// otherwise; each with its `ResourceKeySpread` resources keys), each
/// counters key a scope of its own to the counters, and returns the
/// counters keys to be audited.
async fn count_keys<S: AuditStore>(
    store: &S,
    config: &CounterConfig,
    scope: &Scope,
    report: &mut AuditReport,
    pending: &mut Vec<(String, u64)>,
) -> Result<Vec<String>> {
    let keys = config.scope_keys.keys(scope).map_err(invalid)?;
    for key in keys.iter().flat_map(|k| config.scope_keys.resource_keys_of(k)) {
        let counts = hybrid_counter::audit::count_scope(store, &key)
            .await
            .map_err(during("counting a scope"))?;
        pending.push((key.to_string(), counts.pending_create + counts.pending_delete));
        if counts.foreign > 0 {
            report.foreign_items.push((key.to_string(), counts.foreign));
        }
    }
    Ok(keys.iter().map(ToString::to_string).collect())
}

/// Sweeps the `pending` items (`--repair`; counted by `--dry-run`), then
/// audits each of the `suspects` exactly, adding what it finds to `report`.
async fn sweep_and_audit<S: AuditStore + StreamStore>(
    store: &std::sync::Arc<S>,
    config: &CounterConfig,
    options: &AuditOptions,
    mut pending: Vec<(String, u64)>,
    suspects: &[String],
    report: &mut AuditReport,
    ui: &crate::progress::Ui,
) -> Result<()> {
    let auditor = Auditor::configured(store.as_ref(), config)
        .with_attempts(options.attempts)
        .with_grace(options.grace_ms);
    pending.retain(|(_, n)| *n > 0);
    match options.mode {
        RepairMode::None => {}
        RepairMode::DryRun => report.swept = pending.iter().map(|(_, n)| n).sum(),
        RepairMode::Apply => {
            let processor = config
                .processor(store.clone())
                .with_clock(hybrid_counter::Clock::system());
            for (scope, _) in &pending {
                ui.step(format!("sweeping pending items of scope {scope}"));
                let Ok(scope) = hybrid_counter::Scope::new(scope.clone()) else {
                    continue;
                };
                let changes = hybrid_counter::audit::pending_changes(store.as_ref(), &scope)
                    .await
                    .map_err(during("reading pending items"))?;
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
    if options.scope.is_some() {
        // One scope: its keys' audits are the counts.
        report.scopes_checked = suspects.len();
    }
    for (n, scope) in suspects.iter().enumerate() {
        ui.step(format!("auditing scope {scope} ({}/{})", n + 1, suspects.len()));
        let scope = hybrid_counter::Scope::new(scope.clone()).map_err(|e| Error::Aws {
            action: "reading a scope",
            message: format!("the table holds an invalid scope {scope:?}: {e}"),
        })?;
        // The time of this scope's audit, not of the run's start: a long run
        // must not judge (or stamp) a scope by a clock minutes old.
        let audit = auditor
            .audit_scope(&scope, options.mode, hybrid_counter::now_millis())
            .await
            .map_err(during("auditing a scope"))?;
        if options.scope.is_some() {
            report.items_scanned += audit.counts.live + audit.counts.pending_delete;
            report.totals.merge(&audit.counts);
        }
        report.drift |= audit.has_drift();
        report.defect |= audit.has_defect();
        if !audit.findings.is_empty() || audit.not_repaired.is_some() {
            report.scopes.push(audit);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hybrid_counter::memory::MemoryStore;
    use hybrid_counter::scope_keys::ScopeKeys;
    use hybrid_counter::{Admission, Counter, ResourceId};

    use super::*;

    fn spread_config(keys: u32) -> CounterConfig {
        CounterConfig {
            resources_table: "r".into(),
            counters_table: "c".into(),
            default_limit: Some(1_000),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Admission::BestEffort,
            scope_keys: ScopeKeys::new(keys).unwrap(),
        }
    }

    fn location() -> Location {
        Location {
            stack_name: "hybrid-counter".into(),
            target: "local".into(),
            region: "us-east-1".into(),
            endpoint: None,
        }
    }

    #[tokio::test]
    async fn a_scope_audit_at_four_keys_covers_every_key_and_names_the_drifted_one() {
        let config = spread_config(4);
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::configured(store.clone(), 1_000, &config);
        let scope = Scope::new("acct").unwrap();
        for n in 0..20 {
            let id = ResourceId::new(format!("r-{n}")).unwrap();
            counter.create(&scope, &id, Default::default(), 1).await.unwrap();
        }
        let broken = config
            .scope_keys
            .key_of(&scope, &ResourceId::new("r-0").unwrap())
            .unwrap();
        store.set_counter(broken.as_str(), "eventual", 99);
        let options = AuditOptions {
            scope: Some(scope.clone()),
            mode: RepairMode::None,
            segments: 1,
            attempts: 3,
            grace_ms: 0,
        };
        let mut report = AuditReport::new(location(), options.mode, &config);
        let mut pending = Vec::new();
        let suspects = count_keys(&*store, &config, &scope, &mut report, &mut pending)
            .await
            .unwrap();
        assert_eq!(suspects, ["acct#0", "acct#1", "acct#2", "acct#3"]);
        sweep_and_audit(
            &store,
            &config,
            &options,
            pending,
            &suspects,
            &mut report,
            &crate::progress::Ui::quiet(),
        )
        .await
        .unwrap();
        assert_eq!(report.scopes_checked, 4);
        assert_eq!(report.totals.live, 20, "every key's items are counted");
        assert!(report.drift && report.defect);
        let drifted: Vec<&str> = report.scopes.iter().map(|s| s.scope.as_str()).collect();
        assert_eq!(drifted, [broken.as_str()]);
        let text = report.to_string();
        let named = format!("{broken} (key {} of 4 of scope acct)", &broken.as_str()[5..]);
        assert!(text.contains(&named), "{text}");
    }

    /// Two levels: `--scope` counts and sweeps every resources key, audits
    /// the counters keys, and `--repair` replays the pending items onto
    /// their counters key; the Scan's tallies merge per counters key.
    #[tokio::test]
    async fn over_two_levels_a_scope_audit_sweeps_each_resources_key_and_audits_each_counters_key() {
        let config = CounterConfig {
            scope_keys: ScopeKeys::new(2).unwrap().with_spread(4).unwrap(),
            ..spread_config(2)
        };
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::configured(store.clone(), 1_000, &config);
        let scope = Scope::new("acct").unwrap();
        for n in 0..30 {
            let id = ResourceId::new(format!("r-{n}")).unwrap();
            counter.create(&scope, &id, Default::default(), 1).await.unwrap();
        }
        let options = AuditOptions {
            scope: Some(scope.clone()),
            mode: RepairMode::Apply,
            segments: 1,
            attempts: 3,
            grace_ms: 0,
        };
        let mut report = AuditReport::new(location(), options.mode, &config);
        let mut pending = Vec::new();
        let suspects = count_keys(&*store, &config, &scope, &mut report, &mut pending)
            .await
            .unwrap();
        assert_eq!(suspects, ["acct#0", "acct#1"]);
        assert_eq!(pending.len(), 8, "one entry per resources key: {pending:?}");
        assert_eq!(pending.iter().map(|(_, n)| n).sum::<u64>(), 30);
        sweep_and_audit(
            &store,
            &config,
            &options,
            pending,
            &suspects,
            &mut report,
            &crate::progress::Ui::quiet(),
        )
        .await
        .unwrap();
        assert_eq!(report.swept, 30);
        assert_eq!(report.totals.live, 30);
        assert!(!report.defect, "{report}");
        for key in ["acct#0", "acct#1"] {
            let live: u64 = config
                .scope_keys
                .resource_keys_of(&Scope::new(key).unwrap())
                .iter()
                .map(|k| store.tables().resources.keys().filter(|(s, _)| s == k.as_str()).count() as u64)
                .sum();
            assert_eq!(store.counter(key, "eventual"), live as i64, "{key}");
        }
        // The Scan's per-partition tallies, summed per counters key.
        let mut tallies = BTreeMap::new();
        for (key, _) in store.tables().resources.keys() {
            let row: hybrid_counter::items::ItemRow =
                serde_json::from_value(serde_json::json!({"id": "x", "counter_processed": true, "incarnation": "i"}))
                    .unwrap();
            tallies
                .entry(key.clone())
                .or_insert_with(ScopeTally::default)
                .add_row(&row);
        }
        let merged = by_counters_key(&config, tallies);
        assert_eq!(merged.keys().collect::<Vec<_>>(), ["acct#0", "acct#1"]);
    }
}
