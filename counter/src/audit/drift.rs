//! Drift watched continuously: the scheduled drift check
//! (`handlers/drift-check`) audits the scopes a little at a time, within a
//! read budget per run, and resumes where the last run stopped.
//!
//! Each run reads its state (cursor, last run, last full pass) from the
//! counters table's reserved partition ([`keys::KIT_STATE_SCOPE`]), scans
//! the counters table's keys from the cursor (a scope is a partition of the
//! counters table; its items come one after another in a Scan), and audits
//! each scope it meets with the audit engine ([`Auditor::audit_scope`]) in
//! [`RepairMode::DryRun`], through [`ReadOnly`], which refuses every write:
//! the check reports, it never repairs. A scope counts as
//!
//! * **drifted** when the engine trusted its count and plans a repair that
//!   may be written now (the same judgement `counterctl audit --repair`
//!   acts on);
//! * **held back** when the engine could not judge it yet: its counters
//!   moved while its items were counted on every try, or the only repair is
//!   a best-effort move an in-flight request could still make
//!   ([`super::plan_repair_at`]); the next pass looks again;
//! * **failed** when reading it failed (a throttled Query, a malformed
//!   item): the run goes on with the next scope and says so.
//!
//! The budget counts items read: the counters-table items the Scan returns
//! and, per scope audited, its counter items (read twice per try) and its
//! resource items. A run starts no scope once it has read its budget, and
//! always audits at least one, so a scope bigger than the whole budget is
//! still checked (alone in its run). At the end of the table the pass is
//! complete: the run records when, the cursor goes back to the start, and
//! the next run begins a new pass.
//!
//! The state is written conditioned on the version the run read, so two
//! runs that overlap (a slow run and the next tick) cannot both advance
//! the cursor: the later writer's record is refused and reported.

use std::future::Future;

use serde::{Deserialize, Serialize};

use super::engine::{Auditor, RepairMode, ScopeAudit};
use crate::config::CounterConfig;
use crate::error::StoreError;
use crate::ids::Scope;
use crate::items::{CounterItem, ItemRow};
use crate::keys;
use crate::store::{AuditStore, StoreBase};
use crate::time::{Clock, EpochMillis};

/// Items a run reads when no budget is configured: about a thousand quiet
/// scopes of a few items each, or one scope of ten thousand.
pub const DEFAULT_BUDGET: u64 = 10_000;

/// Most counters-table items one Scan page of the drift check reads.
pub const SCAN_PAGE_ITEMS: u32 = 100;

/// What a run that has checked no scope yet may read (or its budget, when
/// larger) skipping the rest of the last run's scope before it stops:
/// enough to pass a scope's counter items, so that even a budget below one
/// scope checks one scope per run, and a bound when a scope's partition
/// holds many gapless sequence numbers, which the keys-only Scan returns.
pub const MIN_SKIP_READS: u64 = SCAN_PAGE_ITEMS as u64;

/// Most scope names a run's record lists per kind (drifted, held back,
/// failed); the counts are always complete.
pub const MAX_LISTED_SCOPES: usize = 100;

/// The key of one counters-table item: where a Scan stopped.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CounterKey {
    pub scope: String,
    pub name: String,
}

/// One page of a Scan of the counters table's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanPage {
    /// In the order the Scan returns them; a scope's items are consecutive.
    pub keys: Vec<CounterKey>,
    /// Where the next page starts (`LastEvaluatedKey`); `None` at the end
    /// of the table.
    pub next: Option<CounterKey>,
}

/// What the drift check reads and writes beyond [`AuditStore`]: the counters
/// table's keys, page by page, its limit overrides, and its own state item.
pub trait DriftStore: AuditStore {
    /// Up to `limit` counters-table keys after `after` (from the start when
    /// `None`), without the kit's own state partition.
    fn scan_counter_keys(
        &self,
        after: Option<&CounterKey>,
        limit: u32,
    ) -> impl Future<Output = Result<ScanPage, StoreError>> + Send;

    /// Every limit override of the counters table, and the scopes under
    /// `prefixes` (what a limits file's prefix entries cover): the table's
    /// side of the limits file's comparison ([`crate::limits`]).
    fn limit_overrides(
        &self,
        prefixes: &[String],
    ) -> impl Future<Output = Result<crate::limits::LimitTable, StoreError>> + Send;

    /// The drift check's state, `None` before its first run.
    fn drift_state(&self) -> impl Future<Output = Result<Option<DriftCheckState>, StoreError>> + Send;

    /// Writes `state` if the stored state still has version `read_version`
    /// (absent for `None`), with its version bumped. `Ok(false)`: another
    /// run wrote it in between; nothing was written.
    fn put_drift_state(
        &self,
        state: &DriftCheckState,
        read_version: Option<i64>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// The drift check's durable state, one item.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftCheckState {
    /// Bumped by every write (the condition of the next one).
    #[serde(default)]
    pub version: i64,
    /// The last counters-table key the check consumed; the next run scans
    /// after it, skipping the rest of its scope. `None`: a new pass starts.
    #[serde(default)]
    pub cursor: Option<CounterKey>,
    /// When the pass under way started.
    #[serde(default)]
    pub pass_started_at: Option<EpochMillis>,
    /// The last pass that reached the end of the table.
    #[serde(default)]
    pub last_full_pass: Option<FullPass>,
    /// The last run.
    #[serde(default)]
    pub last_run: Option<DriftRun>,
}

/// A pass over every scope, from its first run's start to its last run's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FullPass {
    pub started_at: EpochMillis,
    pub completed_at: EpochMillis,
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftRun {
    pub started_at: EpochMillis,
    pub finished_at: EpochMillis,
    /// Items the run could read ([`DriftCheck::budget`]).
    pub budget: u64,
    /// Items it read: Scan items plus the audits' reads.
    pub items_read: u64,
    pub scopes_checked: u64,
    /// Scopes with drift the engine trusts (see the module's header).
    pub drifted: u64,
    /// Of the drifted scopes, those whose drift is a defect of the kit
    /// ([`super::Finding::is_defect`]).
    pub defects: u64,
    pub held_back: u64,
    pub failed: u64,
    /// The first [`MAX_LISTED_SCOPES`] of each kind.
    #[serde(default)]
    pub drifted_scopes: Vec<String>,
    #[serde(default)]
    pub held_back_scopes: Vec<String>,
    /// `scope: reason`.
    #[serde(default)]
    pub failed_scopes: Vec<String>,
    /// Whether this run reached the end of the table.
    pub completed_pass: bool,
}

/// What a run returns: its record, the state it left, and whether that
/// state was written (false: an overlapping run wrote first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftOutcome {
    pub run: DriftRun,
    pub state: DriftCheckState,
    pub recorded: bool,
}

/// How a scope came out of its audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Clean,
    Drifted { defect: bool },
    HeldBack,
}

/// Judges a report-only ([`RepairMode::DryRun`]) audit: drift when the
/// engine planned a repair it may write now, held back when it could not
/// trust the count or may only repair later.
pub fn verdict(audit: &ScopeAudit) -> Verdict {
    if audit.repair.is_some_and(|r| !r.is_empty()) {
        Verdict::Drifted {
            defect: audit.has_defect(),
        }
    } else if audit.held_back() {
        Verdict::HeldBack
    } else if audit.has_drift() {
        // A finding with nothing to plan and nothing held back: reported,
        // never hidden.
        Verdict::Drifted {
            defect: audit.has_defect(),
        }
    } else {
        Verdict::Clean
    }
}

/// One scheduled run's settings.
#[derive(Debug, Clone)]
pub struct DriftCheck {
    /// Items a run may read before it starts no further scope.
    pub budget: u64,
    /// Tries per scope before a scope under continuous writes is held back.
    pub attempts: u32,
    /// The audit's request grace ([`super::REQUEST_GRACE_MS`] by default).
    pub grace: EpochMillis,
}

impl DriftCheck {
    pub fn new(budget: u64) -> Self {
        Self {
            budget: budget.max(1),
            attempts: 3,
            grace: super::REQUEST_GRACE_MS,
        }
    }

    /// Runs once over `store`, audited by `config`'s admission mode and
    /// shards; `clock` dates each scope's audit and the record.
    pub async fn run<S: DriftStore>(
        &self,
        store: &S,
        config: &CounterConfig,
        clock: &Clock,
    ) -> Result<DriftOutcome, StoreError> {
        let stored = store.drift_state().await?;
        let read_version = stored.as_ref().map(|s| s.version);
        let mut state = stored.unwrap_or_default();
        let started_at = clock.now();
        let mut run = DriftRun {
            started_at,
            budget: self.budget,
            ..DriftRun::default()
        };
        if state.cursor.is_none() {
            state.pass_started_at = Some(started_at);
        }
        let reader = ReadOnly::new(store);
        let auditor = Auditor::configured(&reader, config)
            .with_attempts(self.attempts)
            .with_grace(self.grace);
        // The scope audited last: the rest of its items are skipped.
        let mut last_scope = state.cursor.as_ref().map(|c| c.scope.clone());
        'pages: loop {
            let remaining = self.budget.saturating_sub(reader.items_read());
            let limit = u32::try_from(remaining).unwrap_or(u32::MAX).clamp(1, SCAN_PAGE_ITEMS);
            let page = store.scan_counter_keys(state.cursor.as_ref(), limit).await?;
            reader.add_read(page.keys.len());
            for key in page.keys {
                if keys::is_kit_state_scope(&key.scope) {
                    continue;
                }
                if last_scope.as_deref() == Some(key.scope.as_str()) {
                    state.cursor = Some(key);
                    continue;
                }
                if run.scopes_checked > 0 && reader.items_read() >= self.budget {
                    break 'pages;
                }
                self.check_scope(&auditor, &key.scope, clock, &mut run).await;
                last_scope = Some(key.scope.clone());
                state.cursor = Some(key);
            }
            // The whole page was consumed: the next starts after its last
            // evaluated key (also when the page held only skipped keys).
            if let Some(next) = page.next {
                state.cursor = Some(next);
            } else {
                run.completed_pass = true;
                state.cursor = None;
                state.last_full_pass = Some(FullPass {
                    started_at: state.pass_started_at.unwrap_or(started_at),
                    completed_at: clock.now(),
                });
                state.pass_started_at = None;
                break;
            }
            // A run that checked no scope yet goes on to reach one, but not
            // forever: one that spent its reads skipping the rest of the last
            // run's scope (a scope with many sequence numbers has that many
            // keys) stops here, and its saved cursor is the progress.
            let cap = if run.scopes_checked > 0 {
                self.budget
            } else {
                self.budget.max(MIN_SKIP_READS)
            };
            if reader.items_read() >= cap {
                break;
            }
        }
        run.items_read = reader.items_read();
        run.finished_at = clock.now();
        state.last_run = Some(run.clone());
        let recorded = store.put_drift_state(&state, read_version).await?;
        if recorded {
            state.version = read_version.map_or(1, |v| v + 1);
        }
        Ok(DriftOutcome { run, state, recorded })
    }

    async fn check_scope<S: AuditStore>(
        &self,
        auditor: &Auditor<'_, S>,
        scope: &str,
        clock: &Clock,
        run: &mut DriftRun,
    ) {
        fn list(names: &mut Vec<String>, name: String) {
            if names.len() < MAX_LISTED_SCOPES {
                names.push(name);
            }
        }
        run.scopes_checked += 1;
        let audit = match Scope::new(scope) {
            Ok(valid) => auditor.audit_scope(&valid, RepairMode::DryRun, clock.now()).await,
            Err(e) => Err(StoreError::Malformed(format!(
                "the counters table holds an invalid scope: {e}"
            ))),
        };
        match audit.map(|a| verdict(&a)) {
            Ok(Verdict::Clean) => {}
            Ok(Verdict::Drifted { defect }) => {
                run.drifted += 1;
                run.defects += u64::from(defect);
                list(&mut run.drifted_scopes, scope.to_owned());
            }
            Ok(Verdict::HeldBack) => {
                run.held_back += 1;
                list(&mut run.held_back_scopes, scope.to_owned());
            }
            Err(e) => {
                run.failed += 1;
                list(&mut run.failed_scopes, format!("{scope:?}: {e}"));
            }
        }
    }
}

/// An [`AuditStore`] that passes reads through, counting the items they return,
/// and refuses every write: what makes the drift check report-only whatever
/// mode an audit is run in.
#[derive(Debug)]
pub struct ReadOnly<'a, S> {
    inner: &'a S,
    items_read: std::sync::atomic::AtomicU64,
}

impl<'a, S> ReadOnly<'a, S> {
    pub fn new(inner: &'a S) -> Self {
        Self {
            inner,
            items_read: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Items returned by the reads so far (plus those added).
    pub fn items_read(&self) -> u64 {
        self.items_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn add_read(&self, items: usize) {
        self.items_read
            .fetch_add(items as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

fn refused<T>() -> Result<T, StoreError> {
    Err(StoreError::Rejected(
        "the drift check is report-only: it writes no counter or item".into(),
    ))
}

impl<S: StoreBase> StoreBase for ReadOnly<'_, S> {
    fn cost_meter(&self) -> Option<&crate::store::meter::Meter> {
        self.inner.cost_meter()
    }
}

impl<S: AuditStore> AuditStore for ReadOnly<'_, S> {
    async fn counter_items(&self, scope: &Scope) -> Result<Vec<CounterItem>, StoreError> {
        let items = self.inner.counter_items(scope).await?;
        self.add_read(items.len().max(1));
        Ok(items)
    }

    async fn scope_items(&self, scope: &Scope) -> Result<Vec<ItemRow>, StoreError> {
        let rows = self.inner.scope_items(scope).await?;
        self.add_read(rows.len().max(1));
        Ok(rows)
    }

    async fn set_counters(
        &self,
        _: &Scope,
        _: &[CounterItem],
        _: &[(String, i64)],
        _: EpochMillis,
    ) -> Result<bool, StoreError> {
        refused()
    }

    async fn raise_best_effort(
        &self,
        _: &Scope,
        _: &crate::best_effort::Raise,
        _: EpochMillis,
    ) -> Result<bool, StoreError> {
        refused()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;
    use std::time::Duration;

    use serde_dynamo::Item;

    use super::*;
    use crate::config::Admission;
    use crate::ids::ResourceId;
    use crate::memory::{Chaos, MemoryStore, Op};
    use crate::request::Counter;
    use crate::stream::Processor;

    const NOW: EpochMillis = 1_700_000_000_000;
    /// Long after every write of the setup: nothing is within the grace.
    const LATER: EpochMillis = NOW + 10 * super::super::REQUEST_GRACE_MS;
    /// What auditing one quiet scope of [`populated`] reads: its two
    /// counter items twice and its two resource items.
    const SCOPE_READS: u64 = 6;

    fn config() -> CounterConfig {
        CounterConfig {
            resources_table: "resources".into(),
            counters_table: "counters".into(),
            default_limit: Some(100),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Admission::BestEffort,
            scope_keys: Default::default(),
        }
    }

    fn at(now: EpochMillis) -> Clock {
        Clock::new(move || now)
    }

    /// `scopes` scopes `s0..`, two counted items each, counters exact.
    async fn populated(scopes: usize) -> Arc<MemoryStore> {
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::new(store.clone(), 100);
        let processor = Processor::new(store.clone());
        for n in 0..scopes {
            let scope = Scope::new(format!("s{n}")).unwrap();
            for id in ["a", "b"] {
                counter
                    .create(&scope, &ResourceId::new(id).unwrap(), Item::default(), NOW)
                    .await
                    .unwrap();
            }
            let pending = super::super::pending_changes(&*store, &scope).await.unwrap();
            processor.process(pending.into_iter().map(Ok), NOW).await;
        }
        store
    }

    /// Runs until a pass completes; the runs' records in order.
    async fn one_pass(store: &MemoryStore, check: &DriftCheck) -> Vec<DriftRun> {
        let mut runs = Vec::new();
        loop {
            let outcome = check.run(store, &config(), &at(LATER)).await.unwrap();
            assert!(outcome.recorded, "{outcome:?}");
            runs.push(outcome.run);
            if runs.last().unwrap().completed_pass {
                return runs;
            }
            assert!(runs.len() < 100, "no pass completed: {runs:?}");
        }
    }

    #[tokio::test]
    async fn drift_is_found_across_runs_each_within_its_budget_and_nothing_is_written() {
        let store = populated(8).await;
        // An eventual counter off (a defect) and a best-effort counter above
        // the live count (a defect in best-effort admission).
        store.set_counter("s2", keys::EVENTUAL_NAME, 7);
        store.set_counter("s6", keys::BEST_EFFORT_NAME, 5);
        let before = store.tables();
        let check = DriftCheck::new(12);
        let runs = one_pass(&store, &check).await;
        assert!(
            runs.len() > 2,
            "a small budget spreads the pass over several runs: {runs:?}"
        );
        let drifted: BTreeSet<&str> = runs
            .iter()
            .flat_map(|r| r.drifted_scopes.iter().map(String::as_str))
            .collect();
        assert_eq!(drifted, BTreeSet::from(["s2", "s6"]));
        assert_eq!(runs.iter().map(|r| r.defects).sum::<u64>(), 2);
        assert_eq!(
            runs.iter().map(|r| r.scopes_checked).sum::<u64>(),
            8,
            "each scope once per pass: {runs:?}"
        );
        for run in &runs {
            assert!(
                run.items_read <= run.budget + SCOPE_READS,
                "a run starts no scope once its budget is read: {run:?}"
            );
        }
        let after = store.tables();
        assert_eq!(
            (after.counters, after.counters_version),
            (before.counters, before.counters_version),
            "report-only: no counter written"
        );
        assert_eq!(after.resources, before.resources, "report-only: no item written");
    }

    #[tokio::test]
    async fn each_run_resumes_after_the_last_scope_and_the_pass_wraps_around() {
        let store = populated(5).await;
        // The limit override is one more item of s1's partition, after its
        // counters: a resumed Scan must not audit s1 twice for it.
        store.set_limit("s1", Some(3));
        let check = DriftCheck::new(1);
        let mut cursors = Vec::new();
        let mut checked = Vec::new();
        let outcome = loop {
            let o = check.run(&*store, &config(), &at(LATER)).await.unwrap();
            checked.push(o.run.scopes_checked);
            if o.run.completed_pass {
                break o;
            }
            cursors.push(o.state.cursor.clone().unwrap().scope);
            assert!(cursors.len() < 10, "no pass completed: {cursors:?}");
        };
        assert_eq!(
            cursors,
            ["s0", "s1", "s2", "s3", "s4"],
            "one scope per run, in order, none twice"
        );
        assert_eq!(
            checked,
            [1, 1, 1, 1, 1, 0],
            "a budget below one scope still checks one; the run that meets the end of the table completes the pass"
        );
        assert!(outcome.state.cursor.is_none(), "{outcome:?}");
        let pass = outcome.state.last_full_pass.unwrap();
        assert_eq!((pass.started_at, pass.completed_at), (LATER, LATER));
        // The next run starts a new pass at the first scope.
        let next = check.run(&*store, &config(), &at(LATER + 1)).await.unwrap();
        assert_eq!(next.state.cursor.as_ref().map(|c| c.scope.as_str()), Some("s0"));
        assert_eq!(next.state.pass_started_at, Some(LATER + 1));
        assert_eq!(next.state.last_full_pass, Some(pass), "the last full pass is kept");
        assert_eq!(next.state.version, 7);
    }

    /// A scope's gapless sequence numbers are keys of its partition, which
    /// the keys-only Scan returns and a resumed run skips: a run that spends
    /// its budget skipping them stops at the page boundary, and the pass
    /// still reaches every scope. Without the page-boundary stop such a run
    /// went on reading one key per Scan page, far past its budget (on AWS
    /// until the function timed out, before it saved its cursor).
    #[tokio::test]
    async fn a_run_that_spends_its_budget_skipping_a_scopes_sequence_numbers_stops_and_the_pass_goes_on() {
        let store = populated(3).await;
        let sequence = crate::sequence::Sequence::new(store.clone());
        let s1 = Scope::new("s1").unwrap();
        for _ in 0..400 {
            sequence.next(&s1, None, NOW).await.unwrap();
        }
        store.set_counter("s2", keys::EVENTUAL_NAME, 9);
        let check = DriftCheck::new(60);
        let runs = one_pass(&store, &check).await;
        for run in &runs {
            assert!(
                run.items_read <= run.budget.max(MIN_SKIP_READS) + SCOPE_READS,
                "a run stops once its budget is read, also while skipping: {run:?}"
            );
        }
        assert_eq!(
            runs.iter().map(|r| r.scopes_checked).sum::<u64>(),
            3,
            "each scope once per pass: {runs:?}"
        );
        assert!(
            runs.iter().any(|r| r.scopes_checked == 0),
            "some run only skipped s1's numbers: {runs:?}"
        );
        let drifted: Vec<&str> = runs
            .iter()
            .flat_map(|r| r.drifted_scopes.iter().map(String::as_str))
            .collect();
        assert_eq!(drifted, ["s2"], "the scope after the long one is still checked");
    }

    #[tokio::test]
    async fn a_large_budget_checks_every_scope_in_one_run_then_starts_over() {
        let store = populated(3).await;
        store.set_counter("s0", keys::EVENTUAL_NAME, 9);
        let check = DriftCheck::new(10_000);
        for n in 0..2 {
            let o = check.run(&*store, &config(), &at(LATER + n)).await.unwrap();
            assert!(o.run.completed_pass, "{o:?}");
            assert_eq!((o.run.scopes_checked, o.run.drifted), (3, 1), "run {n}: {o:?}");
            assert_eq!(o.run.drifted_scopes, ["s0"]);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_scope_whose_counters_move_while_it_is_counted_is_held_back_not_drifted() {
        let store = populated(1).await;
        let counter = Counter::new(store.clone(), 1_000);
        let processor = Processor::new(store.clone());
        // Each Query page of the count takes up to 50 ms; a writer creates
        // and counts an item every 5 ms until the run is over.
        store.set_chaos(Chaos {
            seed: 3,
            page_size: 1,
            page_latency: Duration::from_millis(50),
            ..Chaos::default()
        });
        let done = std::sync::atomic::AtomicBool::new(false);
        let writer = async {
            let scope = Scope::new("s0").unwrap();
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let id = ResourceId::new(format!("w{n}")).unwrap();
                counter.create(&scope, &id, Item::default(), NOW).await.unwrap();
                let pending = super::super::pending_changes(&*store, &scope).await.unwrap();
                processor.process(pending.into_iter().map(Ok), NOW).await;
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let check = DriftCheck::new(10_000);
        let run = async {
            let o = check.run(&*store, &config(), &at(LATER)).await.unwrap();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            o
        };
        let (outcome, ()) = tokio::join!(run, writer);
        assert_eq!(outcome.run.held_back_scopes, ["s0"], "{outcome:?}");
        assert_eq!(
            outcome.run.drifted, 0,
            "a moving count is never reported as drift: {outcome:?}"
        );
    }

    #[tokio::test]
    async fn a_best_effort_undercount_within_the_request_grace_is_held_back_then_reported() {
        let store = populated(1).await;
        // BE one below live, last written just now: an increment may be in
        // flight, so the engine holds its judgement back.
        store.set_clock(Arc::new(|| LATER));
        store.set_counter("s0", keys::BEST_EFFORT_NAME, 1);
        let check = DriftCheck::new(10_000);
        let early = check.run(&*store, &config(), &at(LATER + 1_000)).await.unwrap();
        assert_eq!((early.run.held_back, early.run.drifted), (1, 0), "{early:?}");
        let late = check
            .run(&*store, &config(), &at(LATER + super::super::REQUEST_GRACE_MS + 1))
            .await
            .unwrap();
        assert_eq!(
            (late.run.held_back, late.run.drifted, late.run.defects),
            (0, 1, 0),
            "{late:?}"
        );
    }

    #[tokio::test]
    async fn an_overlapping_run_that_records_second_does_not_move_the_cursor() {
        let store = populated(4).await;
        let check = DriftCheck::new(1);
        check.run(&*store, &config(), &at(LATER)).await.unwrap();
        let stored = store.tables().drift_state.unwrap();
        // Right after this run reads the state, another run records its own.
        store.after_next(Op::DriftState, |t| {
            let state = t.drift_state.as_mut().unwrap();
            state.version += 1;
        });
        let outcome = check.run(&*store, &config(), &at(LATER)).await.unwrap();
        assert!(!outcome.recorded, "{outcome:?}");
        let now_stored = store.tables().drift_state.unwrap();
        assert_eq!(
            now_stored.cursor, stored.cursor,
            "the refused record left the cursor alone"
        );
    }

    #[tokio::test]
    async fn a_scope_that_cannot_be_read_is_reported_failed_and_the_pass_goes_on() {
        let store = populated(3).await;
        store.inject(Op::ScopeItems, crate::memory::Fault::Rejected);
        let outcome = DriftCheck::new(10_000)
            .run(&*store, &config(), &at(LATER))
            .await
            .unwrap();
        assert_eq!((outcome.run.scopes_checked, outcome.run.failed), (3, 1), "{outcome:?}");
        assert!(outcome.run.failed_scopes[0].starts_with("\"s0\""), "{outcome:?}");
        assert!(outcome.run.completed_pass);
    }

    #[tokio::test]
    async fn the_read_only_store_refuses_every_write() {
        let store = MemoryStore::new();
        let reader = ReadOnly::new(&store);
        let scope = Scope::new("s0").unwrap();
        // The request path's, stream's and sequences' writes are not in
        // `AuditStore`: the type refuses them. The audit's two writes:
        let raise = crate::best_effort::Raise {
            adds: [(keys::BEST_EFFORT_NAME.to_owned(), 1)].into(),
            from: 0,
        };
        assert!(matches!(
            reader.raise_best_effort(&scope, &raise, NOW).await,
            Err(StoreError::Rejected(_))
        ));
        assert!(matches!(
            reader.set_counters(&scope, &[], &[("eventual".into(), 1)], NOW).await,
            Err(StoreError::Rejected(_))
        ));
        assert!(store.calls().is_empty(), "nothing reached the store");
    }
}
