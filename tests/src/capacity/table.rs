//! One table as DynamoDB lays it out: physical partitions over the key
//! order (the partition key's hash, then the sort key), so partition-key
//! values share partitions by hash and one value's items may span several
//! after splits for heat ("Partitions and data distribution"); a new
//! on-demand table starts with enough partitions for its initial
//! throughput. Beside the partitions, the table-level limits of an
//! on-demand table: what it serves at once (its initial throughput, then
//! twice its previous peak once that peak is old enough: "Initial
//! throughput and scaling properties"), the account's per-table quota and
//! the table's configured maximum ("Throughput default quotas",
//! "DynamoDB maximum throughput for on-demand tables").

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::answer::Limit;
use super::budget::Budget;
use super::params::{CapacityParams, TableLimits};
use super::split::{Heat, Key, Split};
use super::units::Access;
use super::usage::TableUsage;

/// Where a partition is: a key range, or an isolated item.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    Range(usize),
    Item(String, String),
}

/// A stable hash of a partition-key value (FNV-1a, then a 64-bit mix).
pub(crate) fn hash_key(partition_key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in partition_key.bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[derive(Debug, Clone)]
pub(crate) struct Partition {
    pub low: Key,
    /// Writes, or reads and writes when the budget is combined.
    budget: Budget,
    /// Reads apart, when it is not.
    reads: Option<Budget>,
    pub heat: Heat,
}

impl Partition {
    fn new(low: Key, params: &CapacityParams, now: Instant) -> Self {
        Self {
            low,
            budget: Budget::new(params.write_units_per_second(), params.window, now),
            reads: (!params.combined).then(|| Budget::new(params.read_units_per_second(), params.window, now)),
            heat: Heat::default(),
        }
    }

    fn budget(&mut self, access: Access) -> &mut Budget {
        match (access, &mut self.reads) {
            (Access::Read, Some(reads)) => reads,
            _ => &mut self.budget,
        }
    }

    /// What `units` of `access` cost in its budget (a read unit is a third
    /// of a write unit in a combined one).
    fn cost(&self, access: Access, units: f64) -> f64 {
        match (access, &self.reads) {
            (Access::Read, None) => units / 3.0,
            _ => units,
        }
    }

    fn roll(&mut self, now: Instant) {
        for budget in std::iter::once(&mut self.budget).chain(self.reads.as_mut()) {
            if let Some(finished) = budget.roll(now) {
                let cap = budget.cap();
                self.heat.observe(&finished, cap);
            }
        }
    }

    pub fn admits(&self, access: Access, cost: f64) -> bool {
        match (access, &self.reads) {
            (Access::Read, Some(reads)) => reads.admits(cost),
            _ => self.budget.admits(cost),
        }
    }
}

/// The table-level budgets of an on-demand table.
#[derive(Debug, Clone)]
struct Limits {
    limits: TableLimits,
    scale: f64,
    /// What it serves at once, in write units (a read unit a third).
    warm: Budget,
    quota_write: Budget,
    quota_read: Budget,
    max_write: Option<Budget>,
    max_read: Option<Budget>,
    /// Windows' use (units a second) not yet old enough to count as a peak.
    recent: VecDeque<(Instant, f64)>,
    peak: f64,
}

impl Limits {
    fn new(limits: &TableLimits, params: &CapacityParams, now: Instant) -> Self {
        let s = params.scale;
        let budget = |rate: f64| Budget::new(rate * s, params.window, now);
        Self {
            warm: budget(limits.initial_write_units.max(limits.initial_read_units / 3.0)),
            quota_write: budget(limits.quota_write_units),
            quota_read: budget(limits.quota_read_units),
            max_write: limits.max_write_units.map(budget),
            max_read: limits.max_read_units.map(budget),
            limits: limits.clone(),
            scale: s,
            recent: VecDeque::new(),
            peak: 0.0,
        }
    }

    fn roll(&mut self, now: Instant, window: Duration, adopted_after: Duration) {
        if let Some(finished) = self.warm.roll(now) {
            self.recent
                .push_back((finished.end, finished.used / window.as_secs_f64()));
        }
        while let Some((end, rate)) = self.recent.front().copied() {
            if now.saturating_duration_since(end) < adopted_after {
                break;
            }
            self.peak = self.peak.max(rate);
            self.recent.pop_front();
        }
        let initial = self
            .limits
            .initial_write_units
            .max(self.limits.initial_read_units / 3.0)
            * self.scale;
        self.warm.set_rate(initial.max(2.0 * self.peak));
        for budget in [&mut self.quota_write, &mut self.quota_read]
            .into_iter()
            .chain(self.max_write.as_mut())
            .chain(self.max_read.as_mut())
        {
            budget.roll(now);
        }
    }

    /// The budgets `access` draws on, with their limits.
    fn budgets(&mut self, access: Access) -> Vec<(Limit, &mut Budget, f64)> {
        let factor = if access == Access::Read { 1.0 / 3.0 } else { 1.0 };
        let (quota, max) = match access {
            Access::Read => (&mut self.quota_read, self.max_read.as_mut()),
            Access::Write => (&mut self.quota_write, self.max_write.as_mut()),
        };
        let mut out = vec![(Limit::WarmThroughput, &mut self.warm, factor)];
        out.extend(max.map(|b| (Limit::MaxOnDemand, b, 1.0)));
        out.push((Limit::AccountLimit, quota, 1.0));
        out
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Table {
    /// Sorted by their low key; the first starts at the lowest.
    partitions: Vec<Partition>,
    isolated: HashMap<(String, String), Partition>,
    limits: Option<Limits>,
}

impl Table {
    pub fn new(params: &CapacityParams, now: Instant) -> Self {
        let count = params.table.as_ref().map_or(1, TableLimits::initial_partitions) as u64;
        let partitions = (0..count)
            .map(|n| Partition::new(((u64::MAX / count) * n, String::new()), params, now))
            .collect();
        Self {
            partitions,
            isolated: HashMap::new(),
            limits: params.table.as_ref().map(|t| Limits::new(t, params, now)),
        }
    }

    fn index(&self, key: &Key) -> usize {
        self.partitions.partition_point(|p| &p.low <= key).saturating_sub(1)
    }

    /// The partitions a request on `partition_key` (and `sort_key`, or every
    /// sort key for `None`) reaches.
    pub fn slots(
        &mut self,
        partition_key: &str,
        sort_key: Option<&str>,
        params: &CapacityParams,
        now: Instant,
    ) -> Vec<Slot> {
        if params.isolate_items {
            return match sort_key {
                Some(sort) => {
                    self.isolated
                        .entry((partition_key.to_owned(), sort.to_owned()))
                        .or_insert_with(|| Partition::new((0, String::new()), params, now));
                    vec![Slot::Item(partition_key.to_owned(), sort.to_owned())]
                }
                // A Query reaches no isolated item before its answer names them.
                None => Vec::new(),
            };
        }
        let hash = hash_key(partition_key);
        match sort_key {
            Some(sort) => vec![Slot::Range(self.index(&(hash, sort.to_owned())))],
            None => {
                let first = self.index(&(hash, String::new()));
                let last = self.partitions.partition_point(|p| p.low.0 <= hash).saturating_sub(1);
                (first..=last.max(first)).map(Slot::Range).collect()
            }
        }
    }

    pub fn partition(&mut self, slot: &Slot) -> &mut Partition {
        match slot {
            Slot::Range(at) => &mut self.partitions[*at],
            Slot::Item(pk, sk) => self
                .isolated
                .get_mut(&(pk.clone(), sk.clone()))
                .expect("an isolated item"),
        }
    }

    /// The key of an item in the table's order.
    pub fn key(partition_key: &str, sort_key: &str) -> Key {
        (hash_key(partition_key), sort_key.to_owned())
    }

    /// Moves the partitions at `slots` and the table-level budgets to the
    /// window holding `now`, splitting those hot for long enough.
    pub fn maintain(&mut self, slots: &[Slot], params: &CapacityParams, now: Instant, usage: &mut TableUsage) {
        if let Some(limits) = &mut self.limits {
            limits.roll(now, params.window, params.wall(limits.limits.peak_adopted_after));
        }
        for slot in slots {
            self.partition(slot).roll(now);
        }
        if !params.split_for_heat || params.isolate_items {
            return;
        }
        let mut due: Vec<usize> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Range(at) => Some(*at),
                Slot::Item(..) => None,
            })
            .filter(|at| self.partitions[*at].heat.due(now, params.wall(params.split_after)))
            .collect();
        due.sort_unstable();
        due.dedup();
        // From the highest, so a split does not move the ones before it.
        for at in due.into_iter().rev() {
            let partition = &mut self.partitions[at];
            match partition.heat.split_point(&partition.low) {
                Split::At(key) => {
                    let mut upper = Partition::new(key.clone(), params, now);
                    upper.heat = partition.heat.divide(&key);
                    // The new half serves from the next window: a split
                    // copies no budget.
                    upper.budget.exhaust();
                    if let Some(reads) = &mut upper.reads {
                        reads.exhaust();
                    }
                    self.partitions.insert(at + 1, upper);
                    usage.splits += 1;
                }
                Split::Sequential => {
                    partition.heat.restart(now);
                    usage.splits_refused_sequential += 1;
                }
                Split::OneItem => {
                    partition.heat.restart(now);
                    usage.splits_refused_one_item += 1;
                }
            }
        }
    }

    /// The first limit that refuses `costs` (a partition's, then the
    /// table's): per slot, its access and the units charged now.
    pub fn refusal(&mut self, costs: &[(Slot, Access, f64)]) -> Option<(Limit, Access, Option<Slot>)> {
        let mut per_slot: Vec<(Slot, Access, f64)> = Vec::new();
        for (slot, access, units) in costs {
            let cost = self.partition(slot).cost(*access, *units);
            match per_slot
                .iter_mut()
                .find(|(s, a, _)| s == slot && (*a == *access || self.reads_combined()))
            {
                Some(entry) => entry.2 += cost,
                None => per_slot.push((slot.clone(), *access, cost)),
            }
        }
        for (slot, access, cost) in &per_slot {
            if !self.partition(slot).admits(*access, *cost) {
                return Some((Limit::KeyRange, *access, Some(slot.clone())));
            }
        }
        let limits = self.limits.as_mut()?;
        for access in [Access::Write, Access::Read] {
            let units: f64 = costs.iter().filter(|(_, a, _)| *a == access).map(|(_, _, u)| u).sum();
            if !costs.iter().any(|(_, a, _)| *a == access) {
                continue;
            }
            for (limit, budget, factor) in limits.budgets(access) {
                if !budget.admits(units * factor) {
                    budget.throttle();
                    return Some((limit, access, None));
                }
            }
        }
        None
    }

    fn reads_combined(&self) -> bool {
        self.partitions.first().is_some_and(|p| p.reads.is_none())
    }

    /// Charges `units` of `access` at `slot` and at the table's limits
    /// (negative: a refund).
    pub fn charge(&mut self, slot: &Slot, access: Access, units: f64) {
        let partition = self.partition(slot);
        let cost = partition.cost(access, units);
        if units >= 0.0 {
            partition.budget(access).charge(cost);
        } else {
            partition.budget(access).refund(-cost);
        }
        if let Some(limits) = &mut self.limits {
            for (_, budget, factor) in limits.budgets(access) {
                if units >= 0.0 {
                    budget.charge(units * factor);
                } else {
                    budget.refund(-units * factor);
                }
            }
        }
    }

    pub fn mark_throttled(&mut self, slot: &Slot, access: Access) {
        self.partition(slot).budget(access).throttle();
    }

    /// The partitions holding `partition_key`'s items.
    pub fn partition_count(&self, partition_key: &str) -> usize {
        let hash = hash_key(partition_key);
        let first = self.index(&(hash, String::new()));
        let last = self.partitions.partition_point(|p| p.low.0 <= hash).saturating_sub(1);
        last.max(first) - first + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> CapacityParams {
        CapacityParams::dynamodb(0.01)
    }

    #[test]
    fn partition_key_values_share_partitions_by_hash() {
        let now = Instant::now();
        let mut table = Table::new(&params(), now);
        assert_eq!(table.partitions.len(), 4, "a new on-demand table's");
        // Of 40 scopes, some share a partition (4 partitions), so a hot
        // scope's partition is also its neighbours'.
        let mut per_partition = [0; 4];
        for n in 0..40 {
            let slots = table.slots(&format!("scope-{n}"), Some("x"), &params(), now);
            let Slot::Range(at) = slots[0] else { panic!() };
            per_partition[at] += 1;
        }
        assert!(per_partition.iter().all(|n| *n > 0), "{per_partition:?}");
        assert_eq!(per_partition.iter().sum::<usize>(), 40);
    }

    #[test]
    fn reads_and_writes_draw_on_one_budget_at_three_read_units_a_write_unit() {
        let now = Instant::now();
        let mut table = Table::new(&params(), now);
        let slot = table.slots("hot", Some("a"), &params(), now).remove(0);
        // 10 WU a second at scale 0.01: 7 WU written, 9 RU read (3 WU).
        table.charge(&slot, Access::Write, 7.0);
        table.charge(&slot, Access::Read, 9.0);
        assert!(
            table.refusal(&[(slot.clone(), Access::Write, 1.0)]).is_some(),
            "10 of 10 spent"
        );
        let separate = CapacityParams {
            combined: false,
            ..params()
        };
        let mut table = Table::new(&separate, now);
        let slot = table.slots("hot", Some("a"), &separate, now).remove(0);
        table.charge(&slot, Access::Write, 7.0);
        table.charge(&slot, Access::Read, 9.0);
        assert!(table.refusal(&[(slot, Access::Write, 1.0)]).is_none(), "budgets apart");
    }

    impl Table {
        /// `count` partitions of equal hash ranges (more than the table
        /// starts with, as after splits).
        fn spread_over(&mut self, count: u64, params: &CapacityParams, now: Instant) {
            self.partitions = (0..count)
                .map(|n| Partition::new(((u64::MAX / count) * n, String::new()), params, now))
                .collect();
        }
    }

    #[test]
    fn a_new_table_serves_its_initial_throughput_then_twice_an_old_enough_peak() {
        // Initial 4,000 WU/s at scale 0.01: 40 WU a second over the table,
        // though each of its 4 partitions would take 10.
        let limits = TableLimits {
            peak_adopted_after: Duration::from_secs(60),
            ..TableLimits::default()
        };
        let p = CapacityParams {
            table: Some(limits),
            ..params()
        };
        let start = Instant::now();
        let mut table = Table::new(&p, start);
        table.spread_over(8, &p, start);
        let mut usage = TableUsage::default();
        let mut second = |table: &mut Table, at: Instant, scopes: usize| -> (u32, Option<Limit>) {
            let mut passed = 0;
            let mut refused = None;
            for n in 0..scopes {
                for item in 0..9 {
                    let slots = table.slots(&format!("s{n}"), Some(&format!("i{item}")), &p, at);
                    table.maintain(&slots, &p, at, &mut usage);
                    match table.refusal(&[(slots[0].clone(), Access::Write, 1.0)]) {
                        None => {
                            table.charge(&slots[0], Access::Write, 1.0);
                            passed += 1;
                        }
                        Some((limit, ..)) => refused = refused.or(Some(limit)),
                    }
                }
            }
            (passed, refused)
        };
        // 90 scopes x 9 writes over 8 partitions of 10: the table's 40 bind.
        let (passed, refused) = second(&mut table, start, 90);
        assert_eq!((passed, refused), (40, Some(Limit::WarmThroughput)));
        // Until the peak is a minute old, still 40 a second.
        for after in [2, 30, 59] {
            let (passed, refused) = second(&mut table, start + Duration::from_secs(after), 90);
            assert_eq!((passed, refused), (40, Some(Limit::WarmThroughput)), "at {after} s");
        }
        // A minute later the peak of 40 is old enough: twice it, 80.
        let later = start + Duration::from_secs(62);
        let (passed, _) = second(&mut table, later, 90);
        assert!(passed > 40 && passed <= 80, "{passed}");
    }

    #[test]
    fn the_quota_and_a_configured_maximum_bind_with_their_own_reasons() {
        let p = CapacityParams {
            table: Some(TableLimits {
                quota_write_units: 1500.0,
                max_read_units: Some(600.0),
                ..TableLimits::default()
            }),
            ..params()
        };
        let now = Instant::now();
        let mut table = Table::new(&p, now);
        let a = table.slots("a", Some("x"), &p, now).remove(0);
        let b = (0..)
            .map(|n| table.slots(&format!("b{n}"), Some("x"), &p, now).remove(0))
            .find(|b| *b != a)
            .unwrap();
        // 15 WU a second of quota at scale 0.01 over partitions of 10 each;
        // 6 RU of maximum.
        table.charge(&a, Access::Write, 10.0);
        let (limit, access, slot) = table.refusal(&[(b.clone(), Access::Write, 6.0)]).unwrap();
        assert_eq!((limit, access, slot), (Limit::AccountLimit, Access::Write, None));
        table.charge(&b, Access::Read, 6.0);
        let (limit, access, _) = table.refusal(&[(b, Access::Read, 0.0)]).unwrap();
        assert_eq!((limit, access), (Limit::MaxOnDemand, Access::Read));
    }
}
