//! What the model charged, refused and split, per table: the figures a
//! bench reads, taken before and after a step ([`CapacityUsage::since`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::answer::Limit;
use super::units::Access;

/// Requests refused, reads and writes apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ReadWrite {
    pub reads: u64,
    pub writes: u64,
}

impl ReadWrite {
    fn add(&mut self, access: Access) {
        match access {
            Access::Read => self.reads += 1,
            Access::Write => self.writes += 1,
        }
    }

    pub fn total(self) -> u64 {
        self.reads + self.writes
    }

    fn since(self, before: Self) -> Self {
        Self {
            reads: self.reads - before.reads,
            writes: self.writes - before.writes,
        }
    }
}

/// Requests refused per limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Throttles {
    pub key_range: ReadWrite,
    pub warm_throughput: ReadWrite,
    pub account_limit: ReadWrite,
    pub max_on_demand: ReadWrite,
}

impl Throttles {
    pub(crate) fn add(&mut self, limit: Limit, access: Access) {
        match limit {
            Limit::KeyRange => self.key_range.add(access),
            Limit::WarmThroughput => self.warm_throughput.add(access),
            Limit::AccountLimit => self.account_limit.add(access),
            Limit::MaxOnDemand => self.max_on_demand.add(access),
        }
    }

    /// Refused by a table-level limit.
    pub fn table_level(&self) -> u64 {
        self.warm_throughput.total() + self.account_limit.total() + self.max_on_demand.total()
    }

    pub fn total(&self) -> u64 {
        self.key_range.total() + self.table_level()
    }

    fn since(&self, before: &Self) -> Self {
        Self {
            key_range: self.key_range.since(before.key_range),
            warm_throughput: self.warm_throughput.since(before.warm_throughput),
            account_limit: self.account_limit.since(before.account_limit),
            max_on_demand: self.max_on_demand.since(before.max_on_demand),
        }
    }
}

/// Requests refused because of another one in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Conflicts {
    /// `TransactWriteItems` cancelled with `TransactionConflict`.
    pub transactions: u64,
    /// Plain writes answered `TransactionConflictException`.
    pub writes: u64,
    /// `TransactGetItems` cancelled with `TransactionConflict`.
    pub reads: u64,
    /// Transactions answered `TransactionInProgressException`.
    pub in_progress: u64,
}

impl Conflicts {
    pub fn total(&self) -> u64 {
        self.transactions + self.writes + self.reads + self.in_progress
    }

    fn since(&self, before: &Self) -> Self {
        Self {
            transactions: self.transactions - before.transactions,
            writes: self.writes - before.writes,
            reads: self.reads - before.reads,
            in_progress: self.in_progress - before.in_progress,
        }
    }
}

/// What the model saw and did, per table.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TableUsage {
    /// Units charged (admitted requests; a cancelled transaction's are given back).
    pub write_units: f64,
    pub read_units: f64,
    /// Requests admitted.
    pub requests: u64,
    pub throttles: Throttles,
    pub conflicts: Conflicts,
    /// Splits for heat done, and refused: new items' keys sequential, or one item.
    pub splits: u64,
    pub splits_refused_sequential: u64,
    pub splits_refused_one_item: u64,
    /// The most partitions one partition-key value has.
    pub max_partitions: usize,
}

impl TableUsage {
    fn since(&self, before: &Self) -> Self {
        Self {
            write_units: self.write_units - before.write_units,
            read_units: self.read_units - before.read_units,
            requests: self.requests - before.requests,
            throttles: self.throttles.since(&before.throttles),
            conflicts: self.conflicts.since(&before.conflicts),
            splits: self.splits - before.splits,
            splits_refused_sequential: self.splits_refused_sequential - before.splits_refused_sequential,
            splits_refused_one_item: self.splits_refused_one_item - before.splits_refused_one_item,
            max_partitions: self.max_partitions,
        }
    }

    pub fn throttled(&self) -> u64 {
        self.throttles.total()
    }

    /// Requests the model saw: admitted, throttled or refused for a conflict.
    pub fn seen(&self) -> u64 {
        self.requests + self.throttled() + self.conflicts.total()
    }
}

/// [`TableUsage`] of every table the model limits, by table name.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CapacityUsage {
    pub tables: BTreeMap<String, TableUsage>,
}

impl CapacityUsage {
    pub fn table(&self, name: &str) -> TableUsage {
        self.tables.get(name).cloned().unwrap_or_default()
    }

    /// What happened after `before`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            tables: self
                .tables
                .iter()
                .map(|(name, now)| (name.clone(), now.since(&before.table(name))))
                .collect(),
        }
    }

    pub fn throttled(&self) -> u64 {
        self.tables.values().map(TableUsage::throttled).sum()
    }

    pub fn table_level_throttles(&self) -> u64 {
        self.tables.values().map(|t| t.throttles.table_level()).sum()
    }

    pub fn conflicts(&self) -> u64 {
        self.tables.values().map(|t| t.conflicts.total()).sum()
    }

    /// Requests admitted (a request touching two tables counts in each).
    pub fn requests(&self) -> u64 {
        self.tables.values().map(|t| t.requests).sum()
    }

    pub fn seen(&self) -> u64 {
        self.tables.values().map(TableUsage::seen).sum()
    }

    pub fn splits(&self) -> u64 {
        self.tables.values().map(|t| t.splits).sum()
    }
}
