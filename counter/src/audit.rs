//! Counting a scope's items by state, the ground truth the counters are
//! checked against: `EC == processed` always, `BE <= live` always, and after
//! the stream is drained `EC == live`.

use serde::Serialize;

/// Items of one scope by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScopeCounts {
    /// Not soft-deleted.
    pub live: u64,
    /// `counter_processed = true` (soft-deleted or not): must equal EC.
    pub processed: u64,
    /// Live and not yet counted: their INSERT is still in the stream path.
    pub pending_create: u64,
    /// Soft-deleted and not yet hard-deleted.
    pub pending_delete: u64,
}

impl ScopeCounts {
    /// Adds another tally (of the same scope) to this one.
    pub fn merge(&mut self, other: &ScopeCounts) {
        self.live += other.live;
        self.processed += other.processed;
        self.pending_create += other.pending_create;
        self.pending_delete += other.pending_delete;
    }

    /// Adds one item given its two flags.
    pub fn add(&mut self, counter_processed: bool, deleted: bool) {
        if !deleted {
            self.live += 1;
        }
        if counter_processed {
            self.processed += 1;
        }
        if !deleted && !counter_processed {
            self.pending_create += 1;
        }
        if deleted {
            self.pending_delete += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_each_state() {
        let mut c = ScopeCounts::default();
        c.add(false, false); // pending create
        c.add(true, false); // counted, live
        c.add(true, true); // counted, pending delete
        c.add(false, true); // never counted, pending delete
        assert_eq!(
            c,
            ScopeCounts {
                live: 2,
                processed: 2,
                pending_create: 1,
                pending_delete: 2
            }
        );
    }
}

/// What an audit of one scope found: every finding is drift (a counter that
/// differs from the truth, repairable). `EC != processed` and `BE > live`
/// are also defects of the kit; `BE < live` is the expected undercount of a
/// best-effort counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// The transactional invariant is broken: a real defect.
    EventualMismatch { eventual: i64, processed: u64 },
    /// BE counts items that do not exist: a real defect.
    BestEffortAboveLive { best_effort: i64, live: u64 },
    /// BE lost updates (swallowed failures): expected, repairable.
    BestEffortBelowLive { best_effort: i64, live: u64 },
}

impl Finding {
    /// Whether this finding is a defect of the kit, not an expected state.
    pub fn is_defect(&self) -> bool {
        !matches!(self, Finding::BestEffortBelowLive { .. })
    }
}

/// The counter values a repair writes: EC to the processed count, BE to
/// the live count (raised when it undercounts, lowered when it overcounts,
/// never set above live).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Repair {
    pub eventual: Option<i64>,
    pub best_effort: Option<i64>,
}

impl Repair {
    pub fn is_empty(&self) -> bool {
        self.eventual.is_none() && self.best_effort.is_none()
    }
}

/// Compares the counters of one scope with its items.
pub fn findings(counts: &ScopeCounts, best_effort: i64, eventual: i64) -> Vec<Finding> {
    let live = i64::try_from(counts.live).unwrap_or(i64::MAX);
    let processed = i64::try_from(counts.processed).unwrap_or(i64::MAX);
    let mut out = Vec::new();
    if eventual != processed {
        out.push(Finding::EventualMismatch {
            eventual,
            processed: counts.processed,
        });
    }
    if best_effort > live {
        out.push(Finding::BestEffortAboveLive {
            best_effort,
            live: counts.live,
        });
    } else if best_effort < live {
        out.push(Finding::BestEffortBelowLive {
            best_effort,
            live: counts.live,
        });
    }
    out
}

/// The repair that resolves `findings`.
pub fn plan_repair(counts: &ScopeCounts, findings: &[Finding]) -> Repair {
    let mut repair = Repair::default();
    for finding in findings {
        match finding {
            Finding::EventualMismatch { .. } => repair.eventual = i64::try_from(counts.processed).ok(),
            Finding::BestEffortAboveLive { .. } | Finding::BestEffortBelowLive { .. } => {
                repair.best_effort = i64::try_from(counts.live).ok()
            }
        }
    }
    repair
}

#[cfg(test)]
mod audit_tests {
    use super::*;

    fn counts(live: u64, processed: u64) -> ScopeCounts {
        ScopeCounts {
            live,
            processed,
            ..ScopeCounts::default()
        }
    }

    #[test]
    fn consistent_counters_have_no_findings() {
        assert!(findings(&counts(5, 5), 5, 5).is_empty());
    }

    #[test]
    fn eventual_mismatch_and_best_effort_overcount_are_defects_undercount_is_not() {
        let f = findings(&counts(5, 4), 6, 3);
        assert_eq!(
            f,
            vec![
                Finding::EventualMismatch {
                    eventual: 3,
                    processed: 4
                },
                Finding::BestEffortAboveLive {
                    best_effort: 6,
                    live: 5
                }
            ]
        );
        assert!(f.iter().all(Finding::is_defect));
        let under = findings(&counts(5, 5), 2, 5);
        assert_eq!(under.len(), 1);
        assert!(!under[0].is_defect());
    }

    #[test]
    fn repair_sets_eventual_to_processed_and_best_effort_to_live() {
        let c = counts(7, 6);
        let repair = plan_repair(&c, &findings(&c, 2, 9));
        assert_eq!(
            repair,
            Repair {
                eventual: Some(6),
                best_effort: Some(7)
            }
        );
        assert!(plan_repair(&c, &[]).is_empty());
    }
}
