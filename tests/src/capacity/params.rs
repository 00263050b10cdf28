//! The capacity model's parameters: DynamoDB's documented figures, the one
//! scale applied to every rate, and the times AWS gives in minutes that a
//! bench may compress (and then says so).

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// Write units a second one partition serves on DynamoDB.
pub const PARTITION_WRITE_UNITS: f64 = 1000.0;
/// Read units a second one partition serves on DynamoDB.
pub const PARTITION_READ_UNITS: f64 = 3000.0;
/// Write and read request units a second a new on-demand table serves at
/// once ("Initial throughput for on-demand capacity mode").
pub const NEW_TABLE_WRITE_UNITS: f64 = 4000.0;
pub const NEW_TABLE_READ_UNITS: f64 = 12_000.0;
/// The default per-table quota of an on-demand table, read and write
/// request units a second ("Throughput default quotas").
pub const TABLE_QUOTA_UNITS: f64 = 40_000.0;
/// How long a traffic peak must lie behind before an on-demand table takes
/// twice it at once: AWS advises spreading growth past twice the previous
/// peak over at least 30 minutes.
pub const PEAK_ADOPTED_AFTER: Duration = Duration::from_secs(30 * 60);
/// Sustained heat before a partition splits. AWS publishes no figure; its
/// own tests show split for heat taking effect over minutes of sustained
/// load, and this default is ten of them.
pub const SPLIT_AFTER: Duration = Duration::from_secs(10 * 60);
/// How long a `TransactWriteItems` holds its items on DynamoDB (the
/// model's assumption: two passes, prepare and commit, each within the
/// single-digit milliseconds DynamoDB answers in).
pub const TRANSACTION_LATENCY: Duration = Duration::from_millis(10);

/// Which error family a throttled request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CapacityMode {
    /// `ThrottlingException`; a throttled transaction item `ThrottlingError`.
    OnDemand,
    /// `ProvisionedThroughputExceededException`; a throttled transaction
    /// item `ProvisionedThroughputExceeded`.
    Provisioned,
}

/// The table-level limits of an on-demand table, in DynamoDB's units.
#[derive(Debug, Clone, Serialize)]
pub struct TableLimits {
    /// What the table serves at once before it has a traffic history
    /// (write units, or three read units each, in any combination).
    pub initial_write_units: f64,
    pub initial_read_units: f64,
    /// The account's per-table quota, reads and writes apart.
    pub quota_write_units: f64,
    pub quota_read_units: f64,
    /// The table's configured maximum (`OnDemandThroughput`), if any.
    pub max_write_units: Option<f64>,
    pub max_read_units: Option<f64>,
    /// How long a peak must lie behind before the table takes twice it.
    pub peak_adopted_after: Duration,
}

impl Default for TableLimits {
    fn default() -> Self {
        Self {
            initial_write_units: NEW_TABLE_WRITE_UNITS,
            initial_read_units: NEW_TABLE_READ_UNITS,
            quota_write_units: TABLE_QUOTA_UNITS,
            quota_read_units: TABLE_QUOTA_UNITS,
            max_write_units: None,
            max_read_units: None,
            peak_adopted_after: PEAK_ADOPTED_AFTER,
        }
    }
}

impl TableLimits {
    /// The partitions a new table starts with: enough for its initial
    /// throughput at one partition's rates.
    pub fn initial_partitions(&self) -> usize {
        (self.initial_write_units / PARTITION_WRITE_UNITS)
            .max(self.initial_read_units / PARTITION_READ_UNITS)
            .ceil()
            .max(1.0) as usize
    }
}

/// The model's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityParams {
    /// The factor applied to every rate, partitions' and tables' (1.0: DynamoDB's).
    pub scale: f64,
    /// The period a budget is counted over: a partition serves its rate's
    /// worth of units in each, never more, and keeps nothing unused.
    pub window: Duration,
    /// The wall time of one second of the model: 1 s (time not dilated),
    /// or 1 s divided by the scale ([`CapacityParams::dilated`]), when a
    /// window of that length serves DynamoDB's units of a second. Every
    /// duration given in DynamoDB time (the table's peak adoption, split
    /// for heat, a transaction's hold) is this many wall seconds a second.
    pub second: Duration,
    /// Reads and writes from one budget per partition (1 write unit = 3
    /// read units), harsher than AWS's current "Key range throughput
    /// exceeded (hot partitions)" page; `false`: a budget each, the
    /// documented behaviour (partition-level throttling "operates
    /// independently for reads and writes").
    pub combined: bool,
    /// Whether partitions split for heat, and after how long a heat.
    pub split_for_heat: bool,
    pub split_after: Duration,
    /// Every item a partition of its own from the start: the best case
    /// split for heat can reach, where the limit left is the single item's.
    pub isolate_items: bool,
    /// Table-level limits (`None`: none).
    pub table: Option<TableLimits>,
    /// How long a transaction holds its items, in DynamoDB time: the proxy
    /// answers no sooner than this divided by the scale after it began.
    pub transaction_latency: Duration,
    pub mode: CapacityMode,
}

impl CapacityParams {
    /// DynamoDB's documented figures at `scale`, on-demand: no burst, one
    /// budget per partition, a new table's limits, split after minutes.
    pub fn dynamodb(scale: f64) -> Self {
        Self {
            scale,
            window: Duration::from_secs(1),
            second: Duration::from_secs(1),
            combined: true,
            split_for_heat: true,
            split_after: SPLIT_AFTER,
            isolate_items: false,
            table: Some(TableLimits::default()),
            transaction_latency: TRANSACTION_LATENCY,
            mode: CapacityMode::OnDemand,
        }
    }

    /// Each item capped at `writes_per_second` units a second (the scale
    /// that gives it), counted over a tenth of a second: items isolated,
    /// no split, no table-level limit, on demand.
    pub fn per_item(writes_per_second: f64) -> Self {
        Self {
            window: Duration::from_millis(100),
            split_for_heat: false,
            isolate_items: true,
            table: None,
            ..Self::dynamodb(writes_per_second / PARTITION_WRITE_UNITS)
        }
    }

    /// Time dilated by the scale: a window (and a second of the model) is
    /// 1 s divided by the scale, so each serves a DynamoDB partition's
    /// units of a second, and a request, a transaction's hold and a
    /// consumer's poll take the share of it they take on DynamoDB.
    pub fn dilated(self) -> Self {
        let second = Duration::from_secs(1).div_f64(self.scale);
        Self {
            window: second,
            second,
            ..self
        }
    }

    /// The wall time of `model`, a duration in DynamoDB (model) time.
    pub fn wall(&self, model: Duration) -> Duration {
        self.second.mul_f64(model.as_secs_f64())
    }

    pub fn write_units_per_second(&self) -> f64 {
        PARTITION_WRITE_UNITS * self.scale
    }

    pub fn read_units_per_second(&self) -> f64 {
        PARTITION_READ_UNITS * self.scale
    }

    /// How long the proxy holds a transaction's answer (and its items).
    pub fn transaction_hold(&self) -> Duration {
        self.transaction_latency.div_f64(self.scale)
    }
}

impl fmt::Display for CapacityParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scale {} ({:.1} WU/s and {:.1} RU/s per {}, {}, counted per {:.1} s, no burst; a model second is {:.1} s of wall time)",
            self.scale,
            self.write_units_per_second(),
            self.read_units_per_second(),
            if self.isolate_items { "item" } else { "partition" },
            if self.combined {
                "one budget for both, 1 WU = 3 RU"
            } else {
                "a budget each"
            },
            self.window.as_secs_f64(),
            self.second.as_secs_f64(),
        )?;
        match &self.table {
            Some(t) => write!(
                f,
                "; per table {:.0} WU/s (or 3 RU each) at once, twice a peak {:.0} min (wall time) old, at most {:.0} WU/s and {:.0} RU/s",
                t.initial_write_units * self.scale,
                self.wall(t.peak_adopted_after).as_secs_f64() / 60.0,
                t.max_write_units
                    .unwrap_or(t.quota_write_units)
                    .min(t.quota_write_units)
                    * self.scale,
                t.max_read_units.unwrap_or(t.quota_read_units).min(t.quota_read_units) * self.scale,
            )?,
            None => f.write_str("; no table-level limit")?,
        }
        write!(
            f,
            "; a transaction holds its items {:.0} ms ({:.0} ms at DynamoDB's rate); split for heat {} (wall time)",
            self.transaction_hold().as_secs_f64() * 1000.0,
            self.transaction_latency.as_secs_f64() * 1000.0,
            if self.split_for_heat {
                format!("after {:.0} s of heat", self.wall(self.split_after).as_secs_f64())
            } else {
                "off".into()
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_on_demand_table_starts_with_four_partitions() {
        // 4,000 WU/s at 1,000 each, or 12,000 RU/s at 3,000 each.
        assert_eq!(TableLimits::default().initial_partitions(), 4);
        let small = TableLimits {
            initial_write_units: 500.0,
            initial_read_units: 900.0,
            ..TableLimits::default()
        };
        assert_eq!(small.initial_partitions(), 1);
    }

    #[test]
    fn dynamodb_defaults_split_after_minutes_and_hold_transactions_scaled() {
        let p = CapacityParams::dynamodb(0.1);
        assert!(p.split_after >= Duration::from_secs(60), "minutes, not seconds");
        assert_eq!(p.window, Duration::from_secs(1));
        assert!(p.combined);
        assert_eq!(
            p.transaction_hold(),
            Duration::from_millis(100),
            "10 ms at a tenth of the rate"
        );
        assert!(p.to_string().contains("no burst"), "{p}");
    }

    #[test]
    fn dilated_time_makes_a_window_serve_a_dynamodb_second() {
        let p = CapacityParams::dynamodb(0.25).dilated();
        assert_eq!(p.window, Duration::from_secs(4));
        assert_eq!(p.wall(Duration::from_secs(60)), Duration::from_secs(240));
        assert_eq!(p.transaction_hold(), Duration::from_millis(40), "10 model ms");
        let undilated = CapacityParams::dynamodb(0.25);
        assert_eq!(undilated.wall(Duration::from_secs(60)), Duration::from_secs(60));
    }
}
