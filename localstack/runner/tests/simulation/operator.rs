//! The operator under load: limit overrides set and cleared,
//! `BeShardCount` and `AdmissionMode` changed and rolled out over up to 6
//! API timeouts (old and new configuration side by side per request, as on
//! Lambda), and `counterctl audit --repair` run again and again, so repairs
//! land in the middle of the load.

use std::time::Duration;

use hybrid_counter::Scope;
use hybrid_counter::audit::{Auditor, RepairMode, pending_changes};
use hybrid_counter::memory::MemoryStore;

use crate::lanes::{Task, join_all};
use crate::params::{ConfigChange, SIM_API_TIMEOUT_MS};
use crate::rng::Rng;
use crate::world::Sim;

/// `limit set` run again after an error, at most (an operator re-runs it).
const LIMIT_SET_ATTEMPTS: usize = 20;

impl Sim {
    /// `counterctl deploy --param BeShardCount=n` (or `AdmissionMode=strict`)
    /// while the clients run, whatever is in flight, rolled out over
    /// [`Params::rollout`]. In strict admission creates that read under the
    /// old split and reserve beside creates under the new one may pass the
    /// limit (the window, [`Windows`], measured). After a switch to strict
    /// the operator waits out the API timeout (no best-effort request is
    /// left) and runs `audit --repair`: strict from when its raise landed.
    pub(crate) async fn change_config(&self) {
        let Some((kind, at)) = self.p.change() else { return };
        tokio::time::sleep(at).await;
        let in_flight = {
            let mut windows = self.windows.lock().unwrap();
            windows.open(kind, None, &self.store.tables());
            windows.in_flight.len()
        };
        self.changed.set(Some(tokio::time::Instant::now()));
        let reshard = kind == ConfigChange::Reshard;
        self.bump(|s| s.reshards_with_creates_in_flight += u64::from(reshard && in_flight > 0));
        self.log(|| {
            let (old, new) = (self.counters[0].layout().shards(), self.counters[1].layout().shards());
            format!(
                "{kind:?}: BeShardCount {old} -> {new}, {:?} -> {:?}, {in_flight} creates in flight, rollout {:?}",
                self.counters[0].admission(),
                self.counters[1].admission(),
                self.p.rollout
            )
        });
        tokio::time::sleep(self.p.rollout).await;
        self.windows
            .lock()
            .unwrap()
            .rolled_out(kind, None, || self.store.tables());
        self.log(|| format!("{kind:?} rolled out"));
        if kind != ConfigChange::Switch {
            return;
        }
        tokio::time::sleep(Duration::from_millis(SIM_API_TIMEOUT_MS as u64)).await;
        while self.best_effort_audits.get() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for scope in (0..self.p.scopes).flat_map(|n| self.counters_keys(n)) {
            loop {
                let outcome = self
                    .auditor()
                    .audit_scope(&scope, RepairMode::Apply, self.now_audit())
                    .await;
                self.log(|| format!("audit --repair {scope} after the switch: {outcome:?}"));
                match outcome {
                    Ok(audit) if audit.repaired || !audit.has_defect() => break,
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
        self.windows.lock().unwrap().switched(self.store.tables());
    }

    /// `counterctl limit set` while the clients run, each change at its
    /// time whether or not the one before returned (two of one scope may
    /// be under way at once): written in rounds (`shares::assign`), each
    /// attempt a window of its own (creates of the scope in flight during
    /// it may read an older share).
    pub(crate) async fn limit_operator(&self) {
        let started = tokio::time::Instant::now();
        let changes: Vec<Task<'_>> = self
            .p
            .limit_changes
            .iter()
            .map(|&(at, n, limit)| -> Task<'_> { Box::pin(self.limit_set(started + at, n, limit)) })
            .collect();
        join_all(changes).await;
    }

    /// One `limit set` of scope `n` at `at`, run again (as its error says)
    /// while an injected fault fails its reads or its transactions, another
    /// `limit set` refuses it, or its shares stay below the limit; a few
    /// times.
    async fn limit_set(&self, at: tokio::time::Instant, n: u64, limit: Option<u64>) {
        tokio::time::sleep_until(at).await;
        let scope = self.scope(n);
        let mut landed = false;
        for _ in 0..LIMIT_SET_ATTEMPTS {
            let (window, in_flight) = {
                let mut windows = self.windows.lock().unwrap();
                let window = windows.open(ConfigChange::Limit, Some(scope.as_str()), &self.store.tables());
                let in_flight = windows.in_flight.values().filter(|s| **s == scope.as_str()).count();
                (window, in_flight)
            };
            let outcome = self
                .store
                .set_scope_limit(self.p.scope_keys, &scope, limit, self.p.limit)
                .await;
            // The attempt returned: the creates that start from now on
            // read its last shares (or a later write's); its window closes
            // with those before.
            {
                let mut windows = self.windows.lock().unwrap();
                windows.finished(window, || self.store.tables());
                windows.limit_changed(scope.as_str(), &self.store.tables());
            }
            match outcome {
                Ok(()) => {
                    landed = true;
                    self.log(|| format!("limit of {scope} -> {limit:?} with {in_flight} creates in flight"));
                    break;
                }
                Err(e) => self.log(|| format!("limit set {scope} -> {limit:?}: {e}")),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if landed {
            self.bump(|s| s.limit_changes += 1);
        } else {
            self.bump(|s| s.limit_sets_unlanded += 1);
        }
    }

    pub(crate) fn auditor(&self) -> Auditor<'_, MemoryStore> {
        Auditor::configured(&*self.store, self.config()).with_grace(self.grace())
    }

    /// A switch to strict admission has begun and its repair not landed:
    /// BE undercounts by design, a defect the audit and drift check report.
    pub(crate) fn switching(&self) -> bool {
        self.windows.lock().unwrap().mode.is_none()
    }

    /// `counterctl audit --repair` over every scope, again and again while
    /// the clients run: the real engine, each counters key of a scope in
    /// turn, then the sweep of each of its resources keys where the
    /// schedule says so.
    pub(crate) async fn operator_audits(&self) {
        let mut r = Rng::new(self.seed, 600);
        let (lo, hi) = self.p.audit_every;
        while !self.done() {
            self.bump(|s| s.audit_rounds += 1);
            for n in 0..self.p.scopes {
                for key in self.counters_keys(n) {
                    self.audit_under_load(&key).await;
                }
                if self.p.sweep_during_load {
                    for key in self.resource_keys(n) {
                        self.sweep_under_load(&key).await;
                    }
                }
            }
            tokio::time::sleep(r.millis(lo, hi)).await;
        }
    }

    /// One `audit --repair` of counters key `key` under load.
    async fn audit_under_load(&self, key: &Scope) {
        let auditor = self.auditor();
        let best_effort = u32::from(!auditor.admission().is_strict());
        self.best_effort_audits.set(self.best_effort_audits.get() + best_effort);
        let switching = self.switching();
        let outcome = auditor.audit_scope(key, RepairMode::Apply, self.now_audit()).await;
        self.best_effort_audits.set(self.best_effort_audits.get() - best_effort);
        self.log(|| format!("audit --repair {key}: {outcome:?}"));
        match outcome {
            Ok(audit) => {
                // No defect exists at any instant: one reported is an
                // unconfirmed finding (its drift exit code would page an
                // operator for nothing). During a switch to strict BE
                // undercounts, a real defect.
                let switching = switching || self.switching();
                if audit.has_defect() && !switching && self.drift_violation.borrow().is_none() {
                    *self.drift_violation.borrow_mut() = Some(format!(
                        "audit --repair of {key} under load reported a defect where there is none: {:?}",
                        audit.findings
                    ));
                }
                self.bump(|s| {
                    s.audits_during_load += 1;
                    s.repairs_during_load += u64::from(audit.repaired);
                    s.repairs_held_back_during_load += u64::from(audit.held_back());
                })
            }
            Err(_) => self.bump(|s| s.audit_errors_during_load += 1),
        }
    }

    /// The sweep of resources key `key`'s pending items under load.
    async fn sweep_under_load(&self, key: &Scope) {
        if let Ok(changes) = pending_changes(&*self.store, key).await {
            let swept = changes.len() as u64;
            let report = self
                .sweeper
                .process(changes.into_iter().map(Ok), self.now_audit())
                .await;
            self.log(|| format!("sweep {key}: {swept} pending -> {:?}", report.failure_reason));
            self.bump(|s| s.swept_during_load += swept);
        }
    }
}
