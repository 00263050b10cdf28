//! After the load: the drain (faults off, everything worked off), the
//! checks at rest (DLQ1 empty, every DLQ2 message describes records that
//! left the stream, every item counted unless its record left the stream,
//! every sequence gapless), and the repair that restores `EC == live`
//! exactly where records expired.

use std::time::Duration;

use hybrid_counter::audit::{Finding, RepairMode, pending_changes};
use hybrid_counter::store::ResourceKey;
use hybrid_counter::stream::Change;
use hybrid_counter::{Admission, ResourceId, Scope};
use hybrid_counter_aws::replay::OnFailureRecord;

use crate::counts::key_counts;
use crate::rng::Rng;
use crate::world::Sim;

impl Sim {
    /// Faults off; the mapping reads to the end, DLQ1 is worked off, DLQ2
    /// redriven once; repeated until nothing moves.
    pub(crate) async fn drain(&self) -> Result<(), String> {
        self.store.calm();
        self.stormy.set(false);
        let mut r = Rng::new(self.seed, 500);
        let mut redriven = false;
        for _ in 0..10_000 {
            // Retention keeps running: a range waiting in DLQ1 can expire.
            self.expire();
            let mut progressed = false;
            while self.poll_all(&mut r).await {
                progressed = true;
            }
            if self.reprocessor_step(&mut r).await > 0 {
                progressed = true;
            }
            if !self.dlq1.borrow().is_empty() {
                // Wait for the failed messages' visibility timeout.
                tokio::time::sleep(Duration::from_secs(31)).await;
                continue;
            }
            if !redriven && !self.dlq2.borrow().is_empty() {
                redriven = true;
                self.redrive();
                continue;
            }
            if !progressed {
                return Ok(());
            }
        }
        Err("the pipeline did not drain in 10,000 rounds".into())
    }

    pub(crate) fn final_checks(&self) -> Result<(), String> {
        if let Some(v) = self.store.violation() {
            return Err(format!("invariant broken {v}"));
        }
        if let Some(v) = self.order_violation.borrow().clone() {
            return Err(v);
        }
        if let Some(v) = self.drift_violation.borrow().clone() {
            return Err(v);
        }
        self.check_sequences()?;
        if !self.dlq1.borrow().is_empty() {
            return Err("DLQ1 is not empty after the drain".into());
        }
        // Every DLQ2 message must be unreplayable because its records left
        // the stream; anything else should have succeeded on redrive.
        for m in self.dlq2.borrow().iter() {
            let record = OnFailureRecord::from_body(&m.body).map_err(|e| e.to_string())?;
            let info = &record.batch_info;
            if self
                .store
                .stream_range(&info.shard_id, &info.start_sequence_number, &info.end_sequence_number)
                .is_ok()
            {
                return Err(format!(
                    "DLQ2 holds {}..{} although its records are still in the stream",
                    info.start_sequence_number, info.end_sequence_number
                ));
            }
        }
        // Nothing lost: every item still pending has lost its record.
        let tables = self.store.tables();
        let retained: Vec<Change> = self
            .store
            .stream_changes()
            .into_iter()
            .filter_map(|d| d.ok().map(|c| c.change))
            .collect();
        let mut pending = Vec::new();
        for ((scope, id), res) in tables.resources.iter().filter(|(_, r)| r.is_kits()) {
            let key = ResourceKey {
                scope: Scope::new(scope.clone()).unwrap(),
                id: ResourceId::new(id.clone()).unwrap(),
            };
            let incarnation = res.state.incarnation.clone();
            let wanted = if res.state.deleted {
                Change::SoftDelete { key, incarnation }
            } else if !res.state.counter_processed {
                Change::Insert { key, incarnation }
            } else {
                continue;
            };
            if retained.contains(&wanted) {
                return Err(format!(
                    "{scope}/{id} is still pending ({wanted:?}) although its record is in the stream and was processed or dead-lettered"
                ));
            }
            pending.push(wanted);
        }
        let units = key_counts(&tables, self.p.scope_keys);
        for n in 0..self.p.scopes {
            let scope = self.scope(n);
            let mut over_reserved = false;
            for unit in units.iter().filter(|u| u.scope == scope.as_str()) {
                let (be, ec, live, name) = (unit.be, unit.ec, unit.counts.live as i64, unit.name());
                if pending.is_empty() && ec != live {
                    return Err(format!("after the drain EC {ec} != live {live} in {name}"));
                }
                match self.p.admission {
                    Admission::BestEffort if be > live => {
                        return Err(format!("BE {be} above live {live} in {name}"));
                    }
                    Admission::Strict if be < live => {
                        return Err(format!("strict: BE {be} below live {live} in {name}"));
                    }
                    Admission::Strict => over_reserved |= be > live,
                    _ => {}
                }
            }
            self.bump(|s| s.strict_over_reserved_at_rest += u64::from(over_reserved));
        }
        Ok(())
    }

    /// Every scope's sequence is gapless (its numbers are exactly
    /// `1..=last`), and each number the API answered with is recorded for
    /// the item it answered it for.
    fn check_sequences(&self) -> Result<(), String> {
        let tables = self.store.tables();
        for (scope, last) in &tables.sequences {
            let numbers: Vec<u64> = tables
                .sequence_items
                .keys()
                .filter(|(s, _)| s == scope)
                .map(|(_, n)| *n)
                .collect();
            if numbers != (1..=*last).collect::<Vec<_>>() {
                return Err(format!(
                    "the sequence of {scope} is not gapless: last {last}, numbers {numbers:?}"
                ));
            }
        }
        for ((scope, number), id) in self.numbered.borrow().iter() {
            let owner = tables
                .sequence_items
                .get(&(scope.clone(), *number))
                .and_then(|e| e.owner.clone());
            if owner.as_deref() != Some(id.as_str()) {
                return Err(format!(
                    "{scope}'s number {number} was answered for {id}, but its item records {owner:?}"
                ));
            }
        }
        Ok(())
    }

    /// `audit --repair` after the drain, for the expired ranges: the kit's
    /// engine sets EC to the processed count and BE to the live count;
    /// items whose records expired stay pending, so EC can still differ
    /// from live (a soft delete lost with its record keeps EC one above
    /// live, and audit sees no drift). The sweep runs each pending item
    /// through the processor as if its record had arrived and closes that
    /// gap. A repair held back (a request-path write younger than the grace
    /// period) is written by the operator's next run, after the grace.
    pub(crate) async fn repair(&self) -> Result<(), String> {
        let mut gap = false;
        for scope in (0..self.p.scopes).flat_map(|n| self.counters_keys(n)) {
            let mut audit = self
                .auditor()
                .audit_scope(&scope, RepairMode::Apply, self.now_audit())
                .await
                .map_err(|e| format!("audit of {scope} failed after the drain: {e}"))?;
            if audit.held_back() {
                self.log(|| format!("repair of {scope} held back: {:?}", audit.not_repaired));
                self.bump(|s| s.final_repairs_held_back += 1);
                // The next run: after the grace by the operator's clock,
                // which may be behind the clock that stamped the last write.
                tokio::time::sleep(Duration::from_millis((self.grace() + self.p.skew.span()) as u64)).await;
                audit = self
                    .auditor()
                    .audit_scope(&scope, RepairMode::Apply, self.now_audit())
                    .await
                    .map_err(|e| format!("audit of {scope} failed after the drain: {e}"))?;
                if audit.held_back() {
                    return Err(format!(
                        "the repair of {scope} is still not written after the grace period: {:?}",
                        audit.not_repaired
                    ));
                }
            }
            if let Some(Finding::EventualMismatch { eventual, processed }) = audit
                .findings
                .iter()
                .find(|f| matches!(f, Finding::EventualMismatch { .. }))
            {
                return Err(format!(
                    "audit found EC {eventual} != processed {processed} in {scope}: the invariant broke"
                ));
            }
            let unit = key_counts(&self.store.tables(), self.p.scope_keys)
                .into_iter()
                .find(|u| u.key == scope.as_str())
                .unwrap_or_default();
            let (be, ec) = (unit.be, unit.ec);
            if be != audit.counts.live as i64 {
                return Err(format!("after repair BE {be} != live {} in {scope}", audit.counts.live));
            }
            gap |= ec != audit.counts.live as i64;
        }
        if gap {
            self.bump(|s| {
                s.repair_left_ec_off += 1;
                s.first_repair_gap_seed.get_or_insert(self.seed);
            });
        }
        // The sweep, of every resources key.
        for scope in (0..self.p.scopes).flat_map(|n| self.resource_keys(n)) {
            let sweep = pending_changes(&*self.store, &scope)
                .await
                .map_err(|e| format!("reading the pending items of {scope}: {e}"))?;
            let swept = sweep.len() as u64;
            let report = self.sweeper.process(sweep.into_iter().map(Ok), self.now_audit()).await;
            if let Some(reason) = report.failure_reason {
                return Err(format!("the repair sweep failed: {reason}"));
            }
            self.bump(|s| s.swept_items += swept);
        }
        for unit in key_counts(&self.store.tables(), self.p.scope_keys) {
            let (be, ec, counts) = (unit.be, unit.ec, &unit.counts);
            if (be, ec) != (counts.live as i64, counts.live as i64) || counts.pending_delete + counts.pending_create > 0
            {
                return Err(format!(
                    "after repair and sweep BE {be}, EC {ec}, counts {counts:?} in {}: not exact",
                    unit.name()
                ));
            }
        }
        if let Some(v) = self.store.violation() {
            return Err(format!("invariant broken {v}"));
        }
        // Exact and at rest: the drift check finds nothing.
        let run = self.drift_check().await?;
        if run.drifted + run.held_back + run.failed > 0 {
            return Err(format!("the drift check at rest, with no drift, reported {run:?}"));
        }
        Ok(())
    }
}
