//! What one run of `make compare` measured: the JSON the chart reads and
//! the figures COMPARISON.md is written from.

use serde::Serialize;

use super::hot_likes::HotRow;
use super::likes::LikesRow;
use super::shared::Latency;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rates {
    pub fail_before: f64,
    pub apply_then_fail: f64,
    /// The stream pipeline's: chance per call that a run of `burst_length`
    /// consecutive calls of the operation all fail after apply, long
    /// enough to outlast its retries.
    pub apply_then_fail_burst: f64,
    pub burst_length: u32,
    /// The callers': changes per run whose first `resend_burst_calls`
    /// calls of every write operation fail after apply (the SDK's attempts,
    /// so the caller's own resend is what follows).
    pub resend_bursts: usize,
    pub resend_burst_calls: u32,
    pub throttle: f64,
    pub transaction_conflict: f64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Workload {
    pub callers: usize,
    pub increments: u64,
    pub decrements: u64,
    pub threshold: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub strategy: String,
    /// The fault seed of this run.
    pub seed: u64,
    /// The threshold the strategy was given (`None`: it takes none).
    pub threshold: Option<i64>,
    /// What the callers believe the counter holds.
    pub truth: i64,
    /// What the counter holds (the hybrid: live items) at the end.
    pub value: i64,
    /// `value - truth`: > 0 overcount, < 0 undercount.
    pub drift: i64,
    /// +1s that landed beyond those the callers were told were applied
    /// (the value after the +1s minus what the callers believe of them).
    pub extra_increments: i64,
    /// -1s that landed beyond those the callers were told were applied.
    pub extra_decrements: i64,
    /// The value after the +1s, and how far over the threshold it went.
    pub peak: i64,
    pub overshoot: Option<i64>,
    /// Hybrid only: BE increments lost by the end of the +1s (live items
    /// minus BE then).
    pub lost_best_effort: Option<i64>,
    pub applied: u64,
    pub refused: u64,
    /// Errors surfaced to the callers.
    pub errors: u64,
    /// 500s after apply the proxy injected into this strategy's writes.
    pub ambiguous_failures: u64,
    /// Faults of any kind injected into its requests.
    pub faults: u64,
    /// Changes applied beyond what the callers believe (both directions)
    /// per 1,000 ambiguous write failures (500 after apply).
    pub extra_per_1000_ambiguous: f64,
    pub round_trips_per_op: f64,
    pub write_units_per_op: f64,
    pub read_units_per_op: f64,
    /// Write units of writes answered 500 after they were applied, which
    /// DynamoDB charges and the emulator does not report.
    pub unreported_write_units_per_op: f64,
    /// Hybrid only (else 0): the capacity its stream pipeline caused.
    pub pipeline_write_units_per_op: f64,
    pub pipeline_read_units_per_op: f64,
    /// Read units of one read of the value at the end.
    pub read_units_per_read: f64,
    pub latency: Latency,
    pub ops_per_second: f64,
    /// Hybrid only: from the last change until EC equals the live items.
    pub seconds_until_exact: Option<f64>,
    /// Hybrid only: BE and EC when exact.
    pub best_effort: Option<i64>,
    pub eventual: Option<i64>,
    /// Hybrid only: DynamoDB requests of the stream pipeline per change.
    pub pipeline_round_trips_per_op: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// The fault seed of each run.
    pub seeds: Vec<u64>,
    /// The changes of each run that met a resend burst.
    pub bursts: Vec<Vec<u64>>,
    pub workload: Workload,
    pub rates: Rates,
    pub rows: Vec<Row>,
    /// Seed 004's experiment, and its arm on a throttled hot item.
    pub likes: Vec<LikesRow>,
    pub hot_likes: Vec<HotRow>,
    pub fakecloud: String,
    pub cores: usize,
    pub seconds: f64,
}

/// On-demand prices, US East (N. Virginia), dollars per million request
/// units, as listed since the reduction of 1 November 2024.
pub const DOLLARS_PER_MILLION_WRITE_UNITS: f64 = 0.625;
pub const DOLLARS_PER_MILLION_READ_UNITS: f64 = 0.125;

impl Row {
    /// Changes applied beyond what the callers were told, both phases.
    pub fn extra(&self) -> i64 {
        self.extra_increments + self.extra_decrements
    }

    /// Extra changes no error explains: applied twice while the caller was
    /// told once (an extra change reported as failed is at most one error).
    pub fn silent_extra(&self) -> i64 {
        self.extra() - self.errors as i64
    }

    /// Every write unit the change caused: reported, refused conditional
    /// writes (in the approach's meter), unreported applied writes, pipeline.
    pub fn all_write_units_per_op(&self) -> f64 {
        self.write_units_per_op + self.unreported_write_units_per_op + self.pipeline_write_units_per_op
    }

    pub fn all_read_units_per_op(&self) -> f64 {
        self.read_units_per_op + self.pipeline_read_units_per_op
    }

    /// Dollars per million changes at the on-demand prices.
    pub fn dollars_per_million_changes(&self) -> f64 {
        self.all_write_units_per_op() * DOLLARS_PER_MILLION_WRITE_UNITS
            + self.all_read_units_per_op() * DOLLARS_PER_MILLION_READ_UNITS
    }
}
