//! The scheduled drift check ([`hybrid_counter::audit::drift::DriftCheck`])
//! under load: no defect exists at any instant, so one it reports is an
//! unconfirmed finding and fails the schedule; at rest after the repair it
//! must report nothing.

use crate::rng::Rng;
use crate::world::{EPOCH_MS, Sim};

impl Sim {
    /// One run of the kit's drift check (`handlers/drift-check`) over every
    /// scope, report-only, dated by the operator's clock.
    pub(crate) async fn drift_check(&self) -> Result<hybrid_counter::audit::drift::DriftRun, String> {
        let config = self.config();
        let (start, skew) = (self.start, self.p.skew.audit);
        let clock = hybrid_counter::Clock::new(move || {
            EPOCH_MS + i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX) + skew
        });
        let check = hybrid_counter::audit::drift::DriftCheck {
            grace: self.grace(),
            ..hybrid_counter::audit::drift::DriftCheck::new(hybrid_counter::audit::drift::DEFAULT_BUDGET)
        };
        let outcome = check
            .run(self.store.as_ref(), config, &clock)
            .await
            .map_err(|e| format!("the drift check failed: {e}"))?;
        Ok(outcome.run)
    }

    /// The drift check on its schedule while the clients run: no defect
    /// exists at any instant (the checker sees to it), so a defect it
    /// reports is an unconfirmed finding reported as drift.
    pub(crate) async fn drift_checks(&self) {
        let mut r = Rng::new(self.seed, 900);
        while !self.done() {
            tokio::time::sleep(r.millis(100, 800)).await;
            let switching = self.switching();
            let Ok(run) = self.drift_check().await else { continue };
            let switching = switching || self.switching();
            self.log(|| format!("drift check: {run:?}"));
            self.bump(|s| {
                s.drift_runs += 1;
                s.drift_scopes_drifted += run.drifted;
                s.drift_scopes_held_back += run.held_back;
            });
            if run.defects > 0 && !switching && self.drift_violation.borrow().is_none() {
                *self.drift_violation.borrow_mut() = Some(format!(
                    "the drift check reported a defect under load where there is none (an unconfirmed finding \
                     reported as drift): {:?}",
                    run.drifted_scopes
                ));
            }
        }
    }
}
