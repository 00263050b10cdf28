//! What the schedules measured ([`Stats`]): totals over schedules for the
//! report, and the figures the entry point asserts so that every kind of
//! fault and operator action is known to have run.

use std::collections::BTreeMap;

/// Totals over schedules, for the report.
#[derive(Debug, Default, Clone)]
pub(crate) struct Stats {
    pub(crate) schedules: u64,
    pub(crate) store_faults: BTreeMap<String, u64>,
    pub(crate) lock_conflicts: u64,
    pub(crate) creates_ok: u64,
    pub(crate) deletes_ok: u64,
    pub(crate) limit_exceeded: u64,
    pub(crate) unavailable: u64,
    pub(crate) over_limit_creates: u64,
    pub(crate) strict_schedules: u64,
    pub(crate) best_effort_schedules: u64,
    pub(crate) per_record_schedules: u64,
    pub(crate) sharded_schedules: u64,
    pub(crate) best_effort_sharded_schedules: u64,
    pub(crate) resharded_schedules: u64,
    /// Schedules whose scopes are spread over several keys (N x M > 1),
    /// and of those with several resources keys per counters key (M > 1).
    pub(crate) scope_key_schedules: u64,
    pub(crate) two_level_schedules: u64,
    /// Creates that left a scope above its limit: in strict admission
    /// (only within a configuration change's window), in best-effort.
    pub(crate) strict_creates_above_limit_in_a_window: u64,
    /// Strict creates above the scope's limit outside any window, while a
    /// counters key left above its share drains (exception (4)).
    pub(crate) strict_creates_above_limit_keys_draining: u64,
    pub(crate) best_effort_overshoots: u64,
    /// Operator actions under load: limit overrides set or cleared, shard
    /// count changes that met creates in flight.
    pub(crate) limit_changes: u64,
    /// `limit set`s that failed every attempt (injected read faults, or
    /// shares left below the limit).
    pub(crate) limit_sets_unlanded: u64,
    /// Limit transactions over several keys, as their caller saw them
    /// end: a first one refused (another `limit set` since its read:
    /// planned again) or unknown (a fault: the operator runs it again), a
    /// later one refused (superseded) or unknown.
    pub(crate) limit_first_refused: u64,
    pub(crate) limit_first_unknown: u64,
    pub(crate) limit_later_refused: u64,
    pub(crate) limit_later_unknown: u64,
    pub(crate) reshards_with_creates_in_flight: u64,
    /// Schedules switching `AdmissionMode` from best-effort to strict, and
    /// the longest rollout of a change.
    pub(crate) switched_schedules: u64,
    pub(crate) longest_rollout_ms: u64,
    /// Strict admission's configuration-change windows per kind
    /// ([`CHANGES`]; best-effort schedules open none).
    pub(crate) windows: [WindowStats; 3],
    /// Wide schedules (4 to 16 clients near a limit of 10 to 100).
    pub(crate) wide_schedules: u64,
    /// Pauses of a client longer than the grace period, during the load.
    pub(crate) quiet_moments: u64,
    /// Stream transactions cancelled with `TransactionConflict` beside a
    /// `ConditionalCheckFailed` (the mixed reasons), and schedules whose
    /// counter Queries were torn (read item by item with pauses).
    pub(crate) mixed_cancellations: u64,
    pub(crate) torn_read_schedules: u64,
    /// Schedules whose mapping ran 2 to 10 lanes per shard, stream shard
    /// splits, and the most stream batches in flight at once (lanes of
    /// every readable shard).
    pub(crate) parallel_schedules: u64,
    pub(crate) stream_splits: u64,
    /// Scheduled drift check runs during the load, and what they reported:
    /// scopes drifted (never a defect: no defect exists at any instant, so
    /// one reported is an unconfirmed finding), held back (in motion or
    /// not yet repairable).
    pub(crate) drift_runs: u64,
    pub(crate) drift_scopes_drifted: u64,
    pub(crate) drift_scopes_held_back: u64,
    /// Numbered creates (`?sequence=true`): numbered, created without a
    /// number (503 `CreatedWithoutSequence`), the longest one in
    /// simulated milliseconds (the claim runs after the create's writes;
    /// the API timeout bounds the unnumbered requests), and the API's
    /// answers checked for the store's words.
    pub(crate) numbered_creates: u64,
    pub(crate) created_without_sequence: u64,
    pub(crate) longest_numbered_request_ms: u64,
    pub(crate) answers_checked: u64,
    /// Schedules whose actors' clocks disagree, and the widest difference.
    pub(crate) skewed_schedules: u64,
    pub(crate) widest_skew_ms: u64,
    pub(crate) most_batches_in_flight: u64,
    /// Strict schedules whose BE was over-reserved after the drain.
    pub(crate) strict_over_reserved_at_rest: u64,
    /// Repairs after the drain that had to wait out the grace period (a
    /// request-path write younger than it).
    pub(crate) final_repairs_held_back: u64,
    pub(crate) invocations: u64,
    pub(crate) handler_crashes: u64,
    pub(crate) duplicate_deliveries: u64,
    pub(crate) partial_failures: u64,
    pub(crate) bisects: u64,
    pub(crate) batches_to_dlq1: u64,
    pub(crate) dlq1_replays_ok: u64,
    pub(crate) moved_to_dlq2: u64,
    pub(crate) redriven: u64,
    pub(crate) records_expired: u64,
    pub(crate) lost_under_mapping: u64,
    /// Schedules where the kit's audit repair alone left `EC != live`.
    pub(crate) repair_left_ec_off: u64,
    pub(crate) first_repair_gap_seed: Option<u64>,
    pub(crate) swept_items: u64,
    /// `audit --repair` runs (per scope) while clients and stream were busy.
    pub(crate) audits_during_load: u64,
    /// Of those: repairs written, repairs (or parts) held back, audits that
    /// failed on a store error (reported, nothing written).
    pub(crate) repairs_during_load: u64,
    pub(crate) repairs_held_back_during_load: u64,
    pub(crate) audit_errors_during_load: u64,
    /// Pending items the audits during the load swept.
    pub(crate) swept_during_load: u64,
    /// Rounds of `audit --repair` over every scope during the load (for one
    /// schedule); over many, the fewest any schedule had.
    pub(crate) audit_rounds: u64,
    /// Schedules with at least three rounds during their load.
    pub(crate) schedules_with_three_audit_rounds: u64,
    /// The longest request of any client, in simulated milliseconds (must
    /// stay below the audit's grace period).
    pub(crate) longest_request_ms: u64,
}

impl Stats {
    pub(crate) fn add(&mut self, other: &Stats) {
        self.schedules += other.schedules;
        for (k, v) in &other.store_faults {
            *self.store_faults.entry(k.clone()).or_default() += v;
        }
        macro_rules! sum {
            ($($f:ident),*) => { $(self.$f += other.$f;)* };
        }
        sum!(
            lock_conflicts,
            creates_ok,
            deletes_ok,
            limit_exceeded,
            unavailable,
            over_limit_creates,
            strict_schedules,
            best_effort_schedules,
            per_record_schedules,
            sharded_schedules,
            best_effort_sharded_schedules,
            resharded_schedules,
            scope_key_schedules,
            two_level_schedules,
            strict_creates_above_limit_in_a_window,
            strict_creates_above_limit_keys_draining,
            best_effort_overshoots,
            limit_changes,
            limit_sets_unlanded,
            limit_first_refused,
            limit_first_unknown,
            limit_later_refused,
            limit_later_unknown,
            reshards_with_creates_in_flight,
            switched_schedules,
            wide_schedules,
            quiet_moments,
            mixed_cancellations,
            torn_read_schedules,
            parallel_schedules,
            stream_splits,
            skewed_schedules,
            numbered_creates,
            created_without_sequence,
            answers_checked,
            drift_runs,
            drift_scopes_drifted,
            drift_scopes_held_back,
            strict_over_reserved_at_rest,
            final_repairs_held_back,
            invocations,
            handler_crashes,
            duplicate_deliveries,
            partial_failures,
            bisects,
            batches_to_dlq1,
            dlq1_replays_ok,
            moved_to_dlq2,
            redriven,
            records_expired,
            lost_under_mapping,
            repair_left_ec_off,
            swept_items,
            audits_during_load,
            repairs_during_load,
            repairs_held_back_during_load,
            audit_errors_during_load,
            swept_during_load
        );
        self.longest_request_ms = self.longest_request_ms.max(other.longest_request_ms);
        self.longest_rollout_ms = self.longest_rollout_ms.max(other.longest_rollout_ms);
        for (mine, theirs) in self.windows.iter_mut().zip(&other.windows) {
            mine.add(theirs);
        }
        self.most_batches_in_flight = self.most_batches_in_flight.max(other.most_batches_in_flight);
        self.widest_skew_ms = self.widest_skew_ms.max(other.widest_skew_ms);
        self.longest_numbered_request_ms = self.longest_numbered_request_ms.max(other.longest_numbered_request_ms);
        self.audit_rounds = if self.schedules == other.schedules {
            other.audit_rounds
        } else {
            self.audit_rounds.min(other.audit_rounds)
        };
        // One schedule's stats, or a total of many (one thread's).
        self.schedules_with_three_audit_rounds += if other.schedules == 1 {
            u64::from(other.audit_rounds >= 3)
        } else {
            other.schedules_with_three_audit_rounds
        };
        self.first_repair_gap_seed = match (self.first_repair_gap_seed, other.first_repair_gap_seed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// What the windows of one kind of change measured.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WindowStats {
    pub(crate) opened: u64,
    /// Windows opened while another of the same kind and scope was still
    /// rolling (two `limit set`s of one scope under way at once).
    pub(crate) overlapping: u64,
    /// The most creates in flight at a change, and at any instant of a
    /// window.
    pub(crate) most_at_change: u64,
    pub(crate) most_in_flight: u64,
    /// The most live items above what the scope allowed before the change.
    pub(crate) max_excess: u64,
}

impl WindowStats {
    pub(crate) fn add(&mut self, other: &WindowStats) {
        self.opened += other.opened;
        self.overlapping += other.overlapping;
        self.most_at_change = self.most_at_change.max(other.most_at_change);
        self.most_in_flight = self.most_in_flight.max(other.most_in_flight);
        self.max_excess = self.max_excess.max(other.max_excess);
    }
}
