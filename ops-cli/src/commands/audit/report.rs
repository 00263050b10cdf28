//! What `audit` reports: the totals, each scope with findings (and the
//! repair written, held back or that `--repair` would write), the sweep of
//! pending items, the items that are not the kit's; whether a counter
//! differed (exit 1), and whether that was a defect of the kit. Rendered
//! for people by its `Display`, for machines as JSON.

use std::fmt;

use hybrid_counter::Admission;
use hybrid_counter::audit::{Finding, RepairMode, ScopeAudit, ScopeCounts};
use hybrid_counter::scope_keys::ScopeKeys;
use serde::Serialize;

use crate::commands::Location;

#[derive(Debug, Clone, Default, Serialize)]
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
    /// Whether a difference was a defect of the kit
    /// ([`hybrid_counter::audit::Finding::is_defect`]: EC != processed; BE >
    /// live in best-effort admission; in strict admission BE < live, a
    /// shard short of its items, shards at mixed epochs).
    pub defect: bool,
    pub mode: &'static str,
    /// The stack's admission mode, which BE was read by.
    pub admission: Admission,
    /// Partition keys per scope (`ScopeKeyShards`): above 1, each scope
    /// above is one key `s#k` of scope `s`, audited on its own.
    pub scope_keys: u32,
}

impl AuditReport {
    /// An empty report of an audit in `mode` of the stack configured so.
    pub fn new(location: Location, mode: RepairMode, config: &hybrid_counter::CounterConfig) -> Self {
        Self {
            location,
            mode: mode_name(mode),
            admission: config.admission,
            scope_keys: config.scope_keys.count(),
            ..Default::default()
        }
    }

    /// How a scope of the report is named: a key `s#k` of this stack's
    /// layout says whose key it is.
    fn scope_name(&self, scope: &str) -> String {
        let layout = ScopeKeys::new(self.scope_keys).unwrap_or_default();
        match layout.split(scope) {
            Some((owner, key)) => format!("{scope} (key {key} of {} of scope {owner})", self.scope_keys),
            None => scope.to_owned(),
        }
    }

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
        Finding::ShardsShort { short } => format!(
            "DRIFT best-effort shards {short} short of the live items recorded on them (strict admission can \
             overshoot on them)"
        ),
        Finding::MixedEpochs => {
            "DRIFT best-effort shards at mixed epochs (strict creates are refused until a raise fences them)".into()
        }
        Finding::RetiredBelowZero { below } => format!(
            "best-effort items of an earlier shard count {below} below 0 (strict creates may be refused below the \
             limit until a raise fills them)"
        ),
        Finding::ShardsAbsent => "best-effort shards absent since the last raise (BeShardCount grew: strict \
                                  creates may be refused below the limit until a raise creates them)"
            .into(),
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
        if self.scope_keys > 1 {
            writeln!(
                f,
                "  each scope spread over {} partition keys (ScopeKeyShards): a scope s#k below is key k of scope s, \
                 audited on its own against its own counters",
                self.scope_keys
            )?;
        }
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
            let list: Vec<String> = self
                .foreign_items
                .iter()
                .map(|(s, n)| format!("{}: {n}", self.scope_name(s)))
                .collect();
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
            if self.scope_keys > 1 && self.scope_name(&s.scope) != s.scope {
                writeln!(f, "  {}:", self.scope_name(&s.scope))?;
            }
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
    use hybrid_counter::audit::{Repair, findings_for};

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
            scope_keys: 1,
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
