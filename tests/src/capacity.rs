//! DynamoDB's partition throughput, modelled in front of an emulator that
//! has none: the fault proxy ([`crate::faults::FaultProxy::limit_capacity`])
//! asks a [`CapacityModel`] about every DynamoDB request it forwards and
//! answers a request past its partition's capacity with the throttling
//! error DynamoDB returns, without forwarding it.
//!
//! What is modelled, and the AWS pages it follows:
//!
//! * **Partitions.** Per table and partition-key value, the items form
//!   partitions by sort-key range, one at first. Each partition serves at
//!   most 1,000 write units and 3,000 read units a second
//!   ([`PARTITION_WRITE_UNITS`], [`PARTITION_READ_UNITS`]), whatever the
//!   table's mode: "Partitions and data distribution" and "Best practices
//!   for designing and using partition keys"
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.Partitions.html>,
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html>).
//!   Table-level provisioned or maximum throughput is not modelled: the
//!   bench's hot scope meets its partition long before.
//! * **One scale.** Both rates are multiplied by [`CapacityParams::scale`]
//!   (e.g. 1/25) so the emulator on a 2-core machine can offer more than a
//!   partition takes; every figure measured under the model is divided by
//!   the same factor to return to DynamoDB units, and printed with it.
//! * **Unit rules** ("Read/write capacity mode", "Item sizes",
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>):
//!   a write costs 1 WU per KB of the item (rounded up; for an update or a
//!   put over an existing item, the larger of the item before and after),
//!   2 inside `TransactWriteItems`; a write whose condition fails still
//!   costs its units (the proxy charges before forwarding). A consistent
//!   read costs 1 RU per 4 KB, an eventually consistent one half, a
//!   transactional one 2; a `Query` is charged on the total size of the
//!   items it read, rounded up once, not per item. A throttled request
//!   costs nothing. Reads are charged when their answer is back (their
//!   size is known only then): a partition may run into debt, and refuses
//!   reads until it has refilled, which is how a read's cost bounds the
//!   rate however small the estimate before it.
//! * **Burst capacity** ("Burst and adaptive capacity",
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/burst-adaptive-capacity.html>):
//!   DynamoDB retains up to 300 seconds of unused capacity
//!   ([`BURST_RETENTION_SECONDS`]). Each partition's two buckets hold
//!   [`CapacityParams::burst_seconds`] of its rate; AWS says burst is best
//!   effort, not guaranteed, and cannot relieve a partition past its own
//!   limits, so a bench that measures sustained rates sets it short (and
//!   says so) while [`CapacityParams::dynamodb`] keeps the documented 300 s.
//! * **Split for heat** (same page, "Isolate frequently accessed items",
//!   and "Key range throughput exceeded",
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/throttling-key-range-limit-exceeded-mitigation.html>):
//!   a partition that has throttled for [`CapacityParams::split_after`] is
//!   split in two at the median of the sort keys it recently served, so
//!   each half takes about half the traffic and has the full rate. Never
//!   below one item, and never when the new items' sort keys arrive
//!   monotonically increasing (ids `item-000001, item-000002, ...`): AWS
//!   documents that split for heat does not help such a key, every new item
//!   lands in the last range.
//! * **Throttling answers** ("ThrottlingReason",
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_ThrottlingReason.html>):
//!   HTTP 400 `ThrottlingException` for an on-demand table,
//!   `ProvisionedThroughputExceededException` for a provisioned one, with
//!   the reason `TableWriteKeyRangeThroughputExceeded` or
//!   `TableReadKeyRangeThroughputExceeded` and the table's ARN.
//!   (`ThrottlingException` carries them as `throttlingReasons`,
//!   `ProvisionedThroughputExceededException` as `ThrottlingReasons`: the
//!   member names of the service model that the SDK parses.)
//!
//! `BatchWriteItem` is throttled as a whole when any of its items' partitions
//! is out of capacity (DynamoDB would return the rest as `UnprocessedItems`);
//! the kit does not send it on its hot paths.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value};

/// Write units a second one partition serves on DynamoDB.
pub const PARTITION_WRITE_UNITS: f64 = 1000.0;
/// Read units a second one partition serves on DynamoDB.
pub const PARTITION_READ_UNITS: f64 = 3000.0;
/// Seconds of unused capacity DynamoDB retains for bursts.
pub const BURST_RETENTION_SECONDS: f64 = 300.0;
/// Bytes per write unit, and per read unit.
const WRITE_UNIT_BYTES: usize = 1024;
const READ_UNIT_BYTES: usize = 4096;
/// Sort keys a partition remembers for its split decision.
const RECENT_KEYS: usize = 256;
/// Share of consecutive new items whose sort keys must increase for the
/// traffic to count as sequential (a few concurrent writers reorder some).
const SEQUENTIAL_SHARE: f64 = 0.8;
/// A partition that has not throttled for this long is no longer hot.
const COOL_DOWN: Duration = Duration::from_secs(1);

/// Which throttling error a throttled request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CapacityMode {
    /// `ThrottlingException`.
    OnDemand,
    /// `ProvisionedThroughputExceededException`.
    Provisioned,
}

/// The model's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityParams {
    /// The factor applied to every partition rate (1.0: DynamoDB's).
    pub scale: f64,
    /// Bucket depth, in seconds of the partition's rate.
    pub burst_seconds: f64,
    /// Continuous throttling before a partition splits for heat.
    pub split_after: Duration,
    /// Whether partitions split for heat at all.
    pub split_for_heat: bool,
    /// Every item a partition of its own from the start: the best case
    /// split for heat can reach (adaptive capacity isolating busy items),
    /// where the limit left is the single item's.
    pub isolate_items: bool,
    pub mode: CapacityMode,
}

impl CapacityParams {
    /// DynamoDB's documented figures at `scale`: 300 s of burst, on-demand.
    pub fn dynamodb(scale: f64) -> Self {
        Self {
            scale,
            burst_seconds: BURST_RETENTION_SECONDS,
            split_after: Duration::from_secs(10),
            split_for_heat: true,
            isolate_items: false,
            mode: CapacityMode::OnDemand,
        }
    }

    /// Each item capped at `writes_per_second` units a second (the scale
    /// that gives it), holding a tenth of a second's: items isolated, no
    /// split, on demand.
    pub fn per_item(writes_per_second: f64) -> Self {
        Self {
            burst_seconds: 0.1,
            split_for_heat: false,
            isolate_items: true,
            ..Self::dynamodb(writes_per_second / PARTITION_WRITE_UNITS)
        }
    }

    pub fn write_units_per_second(&self) -> f64 {
        PARTITION_WRITE_UNITS * self.scale
    }

    pub fn read_units_per_second(&self) -> f64 {
        PARTITION_READ_UNITS * self.scale
    }
}

impl fmt::Display for CapacityParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scale {} ({:.1} WU/s and {:.1} RU/s per {}), burst {} s, split for heat {}",
            self.scale,
            self.write_units_per_second(),
            self.read_units_per_second(),
            if self.isolate_items { "item" } else { "partition" },
            self.burst_seconds,
            if self.split_for_heat {
                format!("after {:.1} s of throttling", self.split_after.as_secs_f64())
            } else {
                "off".into()
            }
        )
    }
}

/// Read or write: a partition's two limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    /// The `ThrottlingReason` DynamoDB gives a partition past this limit.
    pub fn reason(self) -> &'static str {
        match self {
            Access::Read => "TableReadKeyRangeThroughputExceeded",
            Access::Write => "TableWriteKeyRangeThroughputExceeded",
        }
    }
}

/// A table the model limits: its name and key attributes.
#[derive(Debug, Clone)]
pub struct TableKeys {
    pub name: String,
    pub partition_key: String,
    pub sort_key: String,
}

impl TableKeys {
    pub fn new(name: &str, partition_key: &str, sort_key: &str) -> Self {
        Self {
            name: name.to_owned(),
            partition_key: partition_key.to_owned(),
            sort_key: sort_key.to_owned(),
        }
    }
}

#[derive(Debug, Clone)]
struct Bucket {
    rate: f64,
    depth: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: f64, burst_seconds: f64, now: Instant) -> Self {
        let depth = (rate * burst_seconds).max(1.0);
        Self {
            rate,
            depth,
            tokens: depth,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.depth);
        self.at = now.max(self.at);
    }

    /// Whether `units` may be taken now: a request larger than the whole
    /// bucket passes when it is full; a read (charged later) needs a
    /// bucket out of debt.
    fn admits(&self, units: f64) -> bool {
        if units <= 0.0 {
            self.tokens > 0.0
        } else {
            self.tokens >= units.min(self.depth)
        }
    }
}

/// One sort-key range of one partition-key value.
#[derive(Debug, Clone)]
struct Partition {
    /// The lowest sort key it holds (the first partition's is "").
    low: String,
    write: Bucket,
    read: Bucket,
    /// Since when it has throttled without a pause of [`COOL_DOWN`].
    hot_since: Option<Instant>,
    last_throttle: Option<Instant>,
    /// Sort keys of the requests it recently got, in arrival order.
    recent: VecDeque<String>,
    /// Sort keys of the new items it recently got (`PutItem`s), in order.
    recent_new: VecDeque<String>,
}

impl Partition {
    fn new(low: String, params: &CapacityParams, now: Instant) -> Self {
        Self {
            low,
            write: Bucket::new(params.write_units_per_second(), params.burst_seconds, now),
            read: Bucket::new(params.read_units_per_second(), params.burst_seconds, now),
            hot_since: None,
            last_throttle: None,
            recent: VecDeque::new(),
            recent_new: VecDeque::new(),
        }
    }

    fn bucket(&mut self, access: Access) -> &mut Bucket {
        match access {
            Access::Read => &mut self.read,
            Access::Write => &mut self.write,
        }
    }

    fn remember(&mut self, sort_key: &str, new_item: bool) {
        push_bounded(&mut self.recent, sort_key);
        if new_item {
            push_bounded(&mut self.recent_new, sort_key);
        }
    }
}

fn push_bounded(keys: &mut VecDeque<String>, key: &str) {
    if keys.len() == RECENT_KEYS {
        keys.pop_front();
    }
    keys.push_back(key.to_owned());
}

/// Whether `keys`, in arrival order, mostly increase.
fn is_sequential(keys: &VecDeque<String>) -> bool {
    let pairs = keys.len().saturating_sub(1);
    if pairs < 8 {
        return false;
    }
    let rising = keys.iter().zip(keys.iter().skip(1)).filter(|(a, b)| b > a).count();
    rising as f64 >= SEQUENTIAL_SHARE * pairs as f64
}

/// What the model saw and did, per table.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TableUsage {
    /// Units charged (admitted requests only).
    pub write_units: f64,
    pub read_units: f64,
    /// Requests refused, by limit.
    pub throttled_writes: u64,
    pub throttled_reads: u64,
    /// Requests admitted.
    pub requests: u64,
    /// Splits for heat done, and refused because the new items' keys were sequential.
    pub splits: u64,
    pub splits_refused_sequential: u64,
    /// The most partitions one partition-key value has.
    pub max_partitions: usize,
}

impl TableUsage {
    fn since(&self, before: &Self) -> Self {
        Self {
            write_units: self.write_units - before.write_units,
            read_units: self.read_units - before.read_units,
            throttled_writes: self.throttled_writes - before.throttled_writes,
            throttled_reads: self.throttled_reads - before.throttled_reads,
            requests: self.requests - before.requests,
            splits: self.splits - before.splits,
            splits_refused_sequential: self.splits_refused_sequential - before.splits_refused_sequential,
            max_partitions: self.max_partitions,
        }
    }

    pub fn throttled(&self) -> u64 {
        self.throttled_reads + self.throttled_writes
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

    pub fn requests(&self) -> u64 {
        self.tables.values().map(|t| t.requests).sum()
    }
}

/// One item a request touches, and what it costs there.
#[derive(Debug, Clone, PartialEq)]
struct Touch {
    table: String,
    partition_key: String,
    /// `None`: every sort key of the partition-key value (a `Query`).
    sort_key: Option<String>,
    access: Access,
    /// Write units (known before), or the read's factor per 4 KB (charged after).
    units: f64,
    new_item: bool,
    /// A read with a projection: its answer shows part of each item, the
    /// charge is on the whole item (its size as last seen, when larger).
    projected: bool,
}

/// What the proxy does with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Forward it; when `Some`, hand its answer to [`CapacityModel::settle`].
    Forward(Option<Pending>),
    /// Answer it with [`throttle_response_body`]: the table and the limit.
    Throttle { table: String, access: Access },
}

/// A read admitted and not yet charged.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    operation: String,
    touches: Vec<Touch>,
}

/// The model: per table, partition-key value: its partitions by sort key.
#[derive(Debug, Clone)]
pub struct CapacityModel {
    params: CapacityParams,
    tables: HashMap<String, TableKeys>,
    partitions: HashMap<(String, String), Vec<Partition>>,
    /// Item sizes in bytes, from the writes and reads seen.
    sizes: HashMap<(String, String, String), usize>,
    usage: CapacityUsage,
}

impl CapacityModel {
    pub fn new(params: CapacityParams, tables: &[TableKeys]) -> Self {
        assert!(params.scale > 0.0, "a capacity scale of {}", params.scale);
        Self {
            params,
            tables: tables.iter().map(|t| (t.name.clone(), t.clone())).collect(),
            partitions: HashMap::new(),
            sizes: HashMap::new(),
            usage: CapacityUsage {
                tables: tables.iter().map(|t| (t.name.clone(), TableUsage::default())).collect(),
            },
        }
    }

    pub fn params(&self) -> &CapacityParams {
        &self.params
    }

    pub fn usage(&self) -> CapacityUsage {
        self.usage.clone()
    }

    /// The partitions of `partition_key` in `table` (1 until a split).
    pub fn partition_count(&self, table: &str, partition_key: &str) -> usize {
        self.partitions
            .get(&(table.to_owned(), partition_key.to_owned()))
            .map_or(1, Vec::len)
    }

    /// The verdict on DynamoDB `operation` (e.g. `PutItem`) with request
    /// `body` at `now`; an admitted write is charged at once.
    pub fn admit(&mut self, operation: &str, body: &[u8], now: Instant) -> Verdict {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return Verdict::Forward(None);
        };
        let touches = self.touches(operation, &request);
        if touches.is_empty() {
            return Verdict::Forward(None);
        }
        // Every partition touched must have room, or none is charged.
        let mut refused = None;
        for touch in &touches {
            let need = match touch.access {
                Access::Write => touch.units,
                Access::Read => 0.0,
            };
            for partition in self.partitions_of(touch, now) {
                // A Query names no sort key: it tells nothing about where to split.
                if let Some(sort) = &touch.sort_key {
                    partition.remember(sort, touch.new_item);
                }
                let bucket = partition.bucket(touch.access);
                bucket.refill(now);
                if refused.is_none() && !bucket.admits(need) {
                    partition.hot_since.get_or_insert(now);
                    partition.last_throttle = Some(now);
                    refused = Some((touch.table.clone(), touch.partition_key.clone(), touch.access));
                }
            }
        }
        if let Some((table, partition_key, access)) = refused {
            let usage = self.usage.tables.entry(table.clone()).or_default();
            match access {
                Access::Read => usage.throttled_reads += 1,
                Access::Write => usage.throttled_writes += 1,
            }
            self.consider_split(&table, &partition_key, now);
            return Verdict::Throttle { table, access };
        }
        for touch in touches.iter().filter(|t| t.access == Access::Write) {
            self.charge(touch, touch.units, now);
        }
        for table in touches
            .iter()
            .map(|t| t.table.clone())
            .collect::<std::collections::BTreeSet<_>>()
        {
            self.usage.tables.entry(table).or_default().requests += 1;
        }
        self.cool_down(&touches, now);
        let reads: Vec<Touch> = touches.into_iter().filter(|t| t.access == Access::Read).collect();
        Verdict::Forward((!reads.is_empty()).then(|| Pending {
            operation: operation.to_owned(),
            touches: reads,
        }))
    }

    /// Charges an admitted read with its answer `body` (HTTP 200 or not:
    /// a read that failed is charged its minimum).
    pub fn settle(&mut self, pending: Pending, body: &[u8], now: Instant) {
        let answer = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
        let items = returned_items(&pending.operation, &answer);
        for touch in &pending.touches {
            let table = &self.tables[&touch.table];
            let (pk, sk) = (table.partition_key.clone(), table.sort_key.clone());
            // The items of this touch: (sort key, size).
            let mine: Vec<(String, usize)> = items
                .iter()
                .filter(|(t, item)| {
                    t.as_deref().is_none_or(|t| t == touch.table)
                        && key_string(item.get(&pk)) == Some(touch.partition_key.clone())
                        && touch
                            .sort_key
                            .as_ref()
                            .is_none_or(|s| key_string(item.get(&sk)).as_ref() == Some(s))
                })
                .map(|(_, item)| {
                    let sort = key_string(item.get(&sk)).unwrap_or_default();
                    let id = (touch.table.clone(), touch.partition_key.clone(), sort.clone());
                    let size = if touch.projected {
                        item_size(item).max(self.sizes.get(&id).copied().unwrap_or(0))
                    } else {
                        self.sizes.insert(id, item_size(item));
                        item_size(item)
                    };
                    (sort, size)
                })
                .collect();
            let mut total: usize = mine.iter().map(|(_, size)| size).sum();
            // A projection may leave the key out of the answer: an item
            // returned for a point read is charged its whole size.
            if touch.projected
                && !items.is_empty()
                && let Some(sort) = &touch.sort_key
            {
                let id = (touch.table.clone(), touch.partition_key.clone(), sort.clone());
                total = total.max(self.sizes.get(&id).copied().unwrap_or(0));
            }
            let units = read_units(total, touch.units);
            if mine.is_empty() || touch.sort_key.is_some() {
                let at = Touch {
                    sort_key: Some(touch.sort_key.clone().unwrap_or_default()),
                    ..touch.clone()
                };
                self.charge(&at, units, now);
                continue;
            }
            // A Query: its units, charged on the total size, spread over the
            // partitions in proportion to the bytes each served.
            for (sort, size) in &mine {
                let at = Touch {
                    sort_key: Some(sort.clone()),
                    ..touch.clone()
                };
                self.charge(&at, units * *size as f64 / total.max(1) as f64, now);
            }
        }
    }

    /// Where the partitions of `touch` are kept: per partition-key value, or
    /// per item when [`CapacityParams::isolate_items`].
    fn home(&self, touch: &Touch) -> (String, String) {
        let partition_key = match (&touch.sort_key, self.params.isolate_items) {
            (Some(sort), true) => format!("{}\u{0}{sort}", touch.partition_key),
            _ => touch.partition_key.clone(),
        };
        (touch.table.clone(), partition_key)
    }

    fn charge(&mut self, touch: &Touch, units: f64, now: Instant) {
        let sort = touch.sort_key.clone().unwrap_or_default();
        let home = self.home(touch);
        let partitions = self
            .partitions
            .entry(home)
            .or_insert_with(|| vec![Partition::new(String::new(), &self.params, now)]);
        let at = partition_index(partitions, &sort);
        let bucket = partitions[at].bucket(touch.access);
        bucket.refill(now);
        bucket.tokens -= units;
        let usage = self.usage.tables.entry(touch.table.clone()).or_default();
        match touch.access {
            Access::Read => usage.read_units += units,
            Access::Write => usage.write_units += units,
        }
    }

    /// The partitions `touch` reaches (all of its partition-key value for a Query).
    /// With isolated items a Query reaches no bucket before it is answered
    /// (its items' buckets are charged after).
    fn partitions_of(&mut self, touch: &Touch, now: Instant) -> Vec<&mut Partition> {
        if self.params.isolate_items && touch.sort_key.is_none() {
            return Vec::new();
        }
        let home = self.home(touch);
        let partitions = self
            .partitions
            .entry(home)
            .or_insert_with(|| vec![Partition::new(String::new(), &self.params, now)]);
        match &touch.sort_key {
            None => partitions.iter_mut().collect(),
            Some(sort) => {
                let at = partition_index(partitions, sort);
                vec![&mut partitions[at]]
            }
        }
    }

    fn cool_down(&mut self, touches: &[Touch], now: Instant) {
        for touch in touches {
            for partition in self.partitions_of(touch, now) {
                if partition
                    .last_throttle
                    .is_none_or(|at| now.saturating_duration_since(at) >= COOL_DOWN)
                {
                    partition.hot_since = None;
                }
            }
        }
    }

    /// Splits each partition of `partition_key` that has throttled for
    /// long enough, at the median of its recent sort keys, unless its new
    /// items arrive in increasing order or it serves one item.
    fn consider_split(&mut self, table: &str, partition_key: &str, now: Instant) {
        if !self.params.split_for_heat || self.params.isolate_items {
            return;
        }
        let split_after = self.params.split_after;
        let Some(partitions) = self.partitions.get_mut(&(table.to_owned(), partition_key.to_owned())) else {
            return;
        };
        let (mut splits, mut refused) = (0, 0);
        let mut at = 0;
        while at < partitions.len() {
            let due = partitions[at]
                .hot_since
                .is_some_and(|since| now.saturating_duration_since(since) >= split_after);
            if !due {
                at += 1;
                continue;
            }
            let partition = &mut partitions[at];
            if is_sequential(&partition.recent_new) {
                refused += 1;
                partition.hot_since = Some(now);
                at += 1;
                continue;
            }
            let mut keys: Vec<&String> = partition.recent.iter().collect();
            keys.sort();
            // A point with traffic on both sides: never inside one item.
            let median = keys
                .get(keys.len() / 2)
                .filter(|median| keys.first().is_some_and(|first| first < *median))
                .map(|k| (*k).clone());
            match median {
                Some(median) if median > partition.low => {
                    let mut upper = Partition::new(median.clone(), &self.params, now);
                    upper.write.tokens = partition.write.tokens;
                    upper.read.tokens = partition.read.tokens;
                    let (low, high): (VecDeque<String>, VecDeque<String>) =
                        partition.recent.iter().cloned().partition(|k| *k < median);
                    partition.recent = low;
                    upper.recent = high;
                    partition.recent_new.clear();
                    partition.hot_since = None;
                    partitions.insert(at + 1, upper);
                    splits += 1;
                    at += 2;
                }
                // One item, or a key no split can divide: stays hot.
                _ => {
                    partition.hot_since = Some(now);
                    at += 1;
                }
            }
        }
        let count = partitions.len();
        let usage = self.usage.tables.entry(table.to_owned()).or_default();
        usage.splits += splits;
        usage.splits_refused_sequential += refused;
        usage.max_partitions = usage.max_partitions.max(count);
    }

    /// The items `request` of `operation` touches and their units.
    fn touches(&mut self, operation: &str, request: &Value) -> Vec<Touch> {
        let table = request["TableName"].as_str().unwrap_or_default();
        let consistent = request["ConsistentRead"].as_bool() == Some(true);
        let read_factor = if consistent { 1.0 } else { 0.5 };
        match operation {
            "PutItem" => self.write_touch(table, &request["Item"], Some(&request["Item"]), 1.0, true),
            "UpdateItem" => self.write_touch(
                table,
                &request["Key"],
                Some(&request["ExpressionAttributeValues"]),
                1.0,
                false,
            ),
            "DeleteItem" => self.write_touch(table, &request["Key"], None, 1.0, false),
            "GetItem" => self.read_touch(table, &request["Key"], read_factor, is_projected(request)),
            "Query" => self.query_touch(table, request, read_factor),
            "TransactWriteItems" => request["TransactItems"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|action| {
                    let (kind, body) = action.as_object().and_then(|o| o.iter().next()).unzip();
                    let body = body.cloned().unwrap_or(Value::Null);
                    let table = body["TableName"].as_str().unwrap_or_default().to_owned();
                    match kind.map(String::as_str) {
                        Some("Put") => self.write_touch(&table, &body["Item"], Some(&body["Item"]), 2.0, true),
                        Some("Update") => self.write_touch(
                            &table,
                            &body["Key"],
                            Some(&body["ExpressionAttributeValues"]),
                            2.0,
                            false,
                        ),
                        Some("Delete") => self.write_touch(&table, &body["Key"], None, 2.0, false),
                        Some("ConditionCheck") => self.read_touch(&table, &body["Key"], 2.0, true),
                        _ => Vec::new(),
                    }
                })
                .collect(),
            "TransactGetItems" => request["TransactItems"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|action| {
                    let get = &action["Get"];
                    self.read_touch(
                        get["TableName"].as_str().unwrap_or_default(),
                        &get["Key"],
                        2.0,
                        is_projected(get),
                    )
                })
                .collect(),
            "BatchWriteItem" => {
                let mut touches = Vec::new();
                for (table, writes) in request["RequestItems"].as_object().into_iter().flatten() {
                    for write in writes.as_array().into_iter().flatten() {
                        touches.extend(if write["PutRequest"].is_object() {
                            let item = &write["PutRequest"]["Item"];
                            self.write_touch(table, item, Some(item), 1.0, true)
                        } else {
                            self.write_touch(table, &write["DeleteRequest"]["Key"], None, 1.0, false)
                        });
                    }
                }
                touches
            }
            "BatchGetItem" => {
                let mut touches = Vec::new();
                for (table, get) in request["RequestItems"].as_object().into_iter().flatten() {
                    let factor = if get["ConsistentRead"].as_bool() == Some(true) {
                        1.0
                    } else {
                        0.5
                    };
                    for key in get["Keys"].as_array().into_iter().flatten() {
                        touches.extend(self.read_touch(table, key, factor, is_projected(get)));
                    }
                }
                touches
            }
            _ => Vec::new(),
        }
    }

    /// The key of `item` in `table` (a request's `Key` or `Item`), if the
    /// model limits the table.
    fn key_of(&self, table: &str, item: &Value) -> Option<(String, String)> {
        let keys = self.tables.get(table)?;
        let item = item.as_object()?;
        Some((
            key_string(item.get(&keys.partition_key))?,
            key_string(item.get(&keys.sort_key)).unwrap_or_default(),
        ))
    }

    /// A write of the item at `key`: its units are the larger of its size
    /// before (as last seen) and after (`written`: the whole new item of a
    /// put, or the values an update sets, added to the item before).
    fn write_touch(&mut self, table: &str, key: &Value, written: Option<&Value>, factor: f64, put: bool) -> Vec<Touch> {
        let Some((pk, sk)) = self.key_of(table, key) else {
            return Vec::new();
        };
        let id = (table.to_owned(), pk.clone(), sk.clone());
        let before = self.sizes.get(&id).copied();
        let key_size = key.as_object().map_or(0, item_size);
        let after = match (written.and_then(Value::as_object), put) {
            (Some(item), true) => Some(item_size(item)),
            (Some(values), false) => Some(before.unwrap_or(key_size).max(key_size + item_size(values))),
            (None, _) => None,
        };
        let size = before.unwrap_or(0).max(after.unwrap_or(key_size));
        match after {
            Some(after) => self.sizes.insert(id, after),
            None => self.sizes.remove(&id),
        };
        vec![Touch {
            table: table.to_owned(),
            partition_key: pk,
            sort_key: Some(sk),
            access: Access::Write,
            units: factor * size.div_ceil(WRITE_UNIT_BYTES).max(1) as f64,
            new_item: put && before.is_none(),
            projected: false,
        }]
    }

    fn read_touch(&self, table: &str, key: &Value, factor: f64, projected: bool) -> Vec<Touch> {
        let Some((pk, sk)) = self.key_of(table, key) else {
            return Vec::new();
        };
        vec![Touch {
            table: table.to_owned(),
            partition_key: pk,
            sort_key: Some(sk),
            access: Access::Read,
            units: factor,
            new_item: false,
            projected,
        }]
    }

    /// A `Query` on the partition-key value its key condition names.
    fn query_touch(&self, table: &str, request: &Value, factor: f64) -> Vec<Touch> {
        let Some(keys) = self.tables.get(table) else {
            return Vec::new();
        };
        let condition = request["KeyConditionExpression"].as_str().unwrap_or_default();
        let names = &request["ExpressionAttributeNames"];
        let values = &request["ExpressionAttributeValues"];
        let partition_key = condition
            .split(" AND ")
            .chain(condition.split(" and "))
            .find_map(|clause| {
                let (name, placeholder) = clause.split_once('=')?;
                let name = name.trim().trim_start_matches('(');
                let name = names[name].as_str().unwrap_or(name);
                (name == keys.partition_key)
                    .then(|| key_string(values.get(placeholder.trim().trim_end_matches(')'))))?
            });
        let Some(partition_key) = partition_key else {
            return Vec::new();
        };
        vec![Touch {
            table: table.to_owned(),
            partition_key,
            sort_key: None,
            access: Access::Read,
            units: factor,
            new_item: false,
            projected: is_projected(request),
        }]
    }
}

/// Whether a read request (or a `BatchGetItem` table's part) returns only
/// some attributes.
fn is_projected(request: &Value) -> bool {
    request["ProjectionExpression"].is_string() || request["AttributesToGet"].is_array()
}

/// The partition of `partitions` (sorted by `low`) holding `sort_key`.
fn partition_index(partitions: &[Partition], sort_key: &str) -> usize {
    partitions
        .partition_point(|p| p.low.as_str() <= sort_key)
        .saturating_sub(1)
}

/// Read units for `bytes` read at `factor` per 4 KB (at least one unit's worth).
fn read_units(bytes: usize, factor: f64) -> f64 {
    factor * bytes.div_ceil(READ_UNIT_BYTES).max(1) as f64
}

/// A key attribute's value as a string (`S` or `N`).
fn key_string(value: Option<&Value>) -> Option<String> {
    let value = value?;
    value["S"].as_str().or_else(|| value["N"].as_str()).map(str::to_owned)
}

/// The items an answer of `operation` returned, with their table when the
/// answer names it.
fn returned_items<'a>(operation: &str, answer: &'a Value) -> Vec<(Option<String>, &'a Map<String, Value>)> {
    match operation {
        "GetItem" => answer["Item"].as_object().map(|i| (None, i)).into_iter().collect(),
        "Query" => answer["Items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .map(|i| (None, i))
            .collect(),
        "TransactGetItems" => answer["Responses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["Item"].as_object())
            .map(|i| (None, i))
            .collect(),
        "BatchGetItem" => answer["Responses"]
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(table, items)| {
                items
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_object)
                    .map(move |i| (Some(table.clone()), i))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An item's size as DynamoDB counts it ("Item sizes and formats"): each
/// attribute's name plus its value; a string its UTF-8 bytes, a number
/// about one byte per two significant digits plus one, a binary its bytes,
/// a Boolean or null one byte, a list or map 3 bytes plus one per element
/// plus its elements (a map's names included).
pub fn item_size(item: &Map<String, Value>) -> usize {
    item.iter().map(|(name, value)| name.len() + value_size(value)).sum()
}

fn value_size(value: &Value) -> usize {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    let number = |n: &Value| {
        let digits = n.as_str().unwrap_or("").chars().filter(char::is_ascii_digit).count();
        digits.div_ceil(2) + 1
    };
    let binary = |b: &Value| b.as_str().map_or(0, |s| s.len() * 3 / 4);
    let strings = |v: &Value, size: &dyn Fn(&Value) -> usize| v.as_array().map_or(0, |a| a.iter().map(size).sum());
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, str::len),
        "N" => number(inner),
        "B" => binary(inner),
        "BOOL" | "NULL" => 1,
        "SS" => strings(inner, &|s| s.as_str().map_or(0, str::len)),
        "NS" => strings(inner, &number),
        "BS" => strings(inner, &binary),
        "L" => {
            3 + inner
                .as_array()
                .map_or(0, |a| a.iter().map(|v| value_size(v) + 1).sum())
        }
        "M" => {
            3 + inner
                .as_object()
                .map_or(0, |m| m.iter().map(|(k, v)| k.len() + value_size(v) + 1).sum())
        }
        _ => 0,
    }
}

/// The throttling error's code and JSON body for a request `refused` on
/// `table` (`resource` is its ARN), as DynamoDB answers it in `mode`.
pub fn throttle_response_body(mode: CapacityMode, table: &str, access: Access) -> (&'static str, Map<String, Value>) {
    let resource = format!("arn:aws:dynamodb:us-east-1:000000000000:table/{table}");
    let reasons = serde_json::json!([{ "reason": access.reason(), "resource": resource }]);
    let (code, member) = match mode {
        CapacityMode::OnDemand => ("ThrottlingException", "throttlingReasons"),
        CapacityMode::Provisioned => ("ProvisionedThroughputExceededException", "ThrottlingReasons"),
    };
    let message = format!(
        "Throughput exceeds the current capacity of your table or index: {} (capacity model of the fault proxy)",
        access.reason()
    );
    (
        code,
        Map::from_iter([("message".to_owned(), message.into()), (member.to_owned(), reasons)]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RESOURCES: &str = "resources";
    const COUNTERS: &str = "counters";

    fn model(params: CapacityParams) -> CapacityModel {
        CapacityModel::new(
            params,
            &[
                TableKeys::new(RESOURCES, "scope", "id"),
                TableKeys::new(COUNTERS, "scope", "name"),
            ],
        )
    }

    /// 10 WU/s and 30 RU/s per partition, a second's burst, split after a
    /// second of throttling.
    fn tight_params() -> CapacityParams {
        CapacityParams {
            burst_seconds: 1.0,
            split_after: Duration::from_secs(1),
            ..CapacityParams::dynamodb(0.01)
        }
    }

    fn tight() -> CapacityModel {
        model(tight_params())
    }

    /// Plenty of capacity, no burst question: for unit arithmetic.
    fn roomy() -> CapacityModel {
        model(CapacityParams::dynamodb(1.0))
    }

    fn s(v: &str) -> Value {
        json!({ "S": v })
    }

    fn put(scope: &str, id: &str, payload_bytes: usize) -> Vec<u8> {
        json!({ "TableName": RESOURCES, "Item": { "scope": s(scope), "id": s(id), "payload": s(&"x".repeat(payload_bytes)) } })
            .to_string()
            .into_bytes()
    }

    fn key(table: &str, scope: &str, sort: &str) -> Value {
        let sort_name = if table == RESOURCES { "id" } else { "name" };
        json!({ "scope": s(scope), sort_name: s(sort) })
    }

    fn admitted(model: &mut CapacityModel, operation: &str, body: &[u8], now: Instant) -> Option<Pending> {
        match model.admit(operation, body, now) {
            Verdict::Forward(pending) => pending,
            other => panic!("{operation} refused: {other:?}"),
        }
    }

    fn units(model: &CapacityModel, table: &str) -> (f64, f64) {
        let usage = model.usage().table(table);
        (usage.write_units, usage.read_units)
    }

    #[test]
    fn writes_cost_one_unit_per_kilobyte_and_two_in_a_transaction() {
        let mut m = roomy();
        let now = Instant::now();
        admitted(&mut m, "PutItem", &put("a", "small", 100), now);
        assert_eq!(units(&m, RESOURCES).0, 1.0, "0.1 KB: 1 WU");
        admitted(&mut m, "PutItem", &put("a", "big", 1500), now);
        assert_eq!(units(&m, RESOURCES).0, 3.0, "1.5 KB rounds up to 2 WU");
        // The stream's flag flip inside a transaction writes the whole 1.5 KB item.
        let flip = json!({ "TransactItems": [
            { "Update": { "TableName": COUNTERS, "Key": key(COUNTERS, "a", "eventual"),
                          "ExpressionAttributeValues": { ":d": { "N": "1" } } } },
            { "Update": { "TableName": RESOURCES, "Key": key(RESOURCES, "a", "big"),
                          "ExpressionAttributeValues": { ":t": { "BOOL": true } } } },
        ] });
        admitted(&mut m, "TransactWriteItems", flip.to_string().as_bytes(), now);
        assert_eq!(units(&m, RESOURCES).0, 3.0 + 4.0, "2 x 2 KB transactional");
        assert_eq!(
            units(&m, COUNTERS).0,
            2.0,
            "a small counter item: 2 WU in a transaction"
        );
        // Deleting costs the item's size; a put over an existing item the larger of both.
        let delete = json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "a", "big") });
        admitted(&mut m, "DeleteItem", delete.to_string().as_bytes(), now);
        assert_eq!(units(&m, RESOURCES).0, 9.0);
        admitted(&mut m, "PutItem", &put("a", "small", 3000), now);
        assert_eq!(units(&m, RESOURCES).0, 12.0, "3 KB over 0.1 KB: 3 WU");
    }

    #[test]
    fn a_write_is_charged_whatever_its_condition_does() {
        // The model charges at admission, before the emulator evaluates the
        // condition: a PutItem answered ConditionalCheckFailed has paid.
        let mut m = roomy();
        let now = Instant::now();
        let body = put("a", "x", 10);
        admitted(&mut m, "PutItem", &body, now);
        admitted(&mut m, "PutItem", &body, now);
        assert_eq!(units(&m, RESOURCES).0, 2.0);
    }

    #[test]
    fn reads_cost_by_four_kilobytes_consistency_and_a_query_by_its_total() {
        let mut m = roomy();
        let now = Instant::now();
        let item = |id: &str, bytes: usize| json!({ "scope": s("a"), "id": s(id), "p": s(&"y".repeat(bytes)) });
        let get = |consistent: bool| {
            json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "a", "i"), "ConsistentRead": consistent }).to_string()
        };
        let answer = json!({ "Item": item("i", 5000) }).to_string();
        let pending = admitted(&mut m, "GetItem", get(true).as_bytes(), now).expect("a read to settle");
        m.settle(pending, answer.as_bytes(), now);
        assert_eq!(units(&m, RESOURCES).1, 2.0, "5 KB consistent: 2 RU");
        let pending = admitted(&mut m, "GetItem", get(false).as_bytes(), now).unwrap();
        m.settle(pending, answer.as_bytes(), now);
        assert_eq!(units(&m, RESOURCES).1, 3.0, "eventually consistent: half");
        let pending = admitted(&mut m, "GetItem", get(true).as_bytes(), now).unwrap();
        m.settle(pending, b"{}", now);
        assert_eq!(units(&m, RESOURCES).1, 4.0, "an item not found still costs a unit");

        // Ten items of about 1 KB: 3 RU for the Query, not 10.
        let query = json!({ "TableName": RESOURCES, "KeyConditionExpression": "#s = :s",
            "ExpressionAttributeNames": { "#s": "scope" }, "ExpressionAttributeValues": { ":s": s("a") },
            "ConsistentRead": true });
        let items: Vec<Value> = (0..10).map(|n| item(&format!("q{n}"), 1000)).collect();
        let pending = admitted(&mut m, "Query", query.to_string().as_bytes(), now).unwrap();
        m.settle(pending, json!({ "Items": items }).to_string().as_bytes(), now);
        assert!(
            (units(&m, RESOURCES).1 - 7.0).abs() < 1e-9,
            "{:?}",
            units(&m, RESOURCES)
        );

        // A projected read of the 5 KB item is charged on the whole item.
        let projected = json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "a", "i"), "ConsistentRead": true,
            "ProjectionExpression": "id" });
        let pending = admitted(&mut m, "GetItem", projected.to_string().as_bytes(), now).unwrap();
        m.settle(pending, json!({ "Item": { "id": s("i") } }).to_string().as_bytes(), now);
        assert!(
            (units(&m, RESOURCES).1 - 9.0).abs() < 1e-9,
            "{:?}",
            units(&m, RESOURCES)
        );

        let transact =
            json!({ "TransactItems": [{ "Get": { "TableName": RESOURCES, "Key": key(RESOURCES, "a", "i") } }] });
        let pending = admitted(&mut m, "TransactGetItems", transact.to_string().as_bytes(), now).unwrap();
        m.settle(
            pending,
            json!({ "Responses": [{ "Item": item("i", 100) }] })
                .to_string()
                .as_bytes(),
            now,
        );
        assert!(
            (units(&m, RESOURCES).1 - 11.0).abs() < 1e-9,
            "transactional read: 2 RU per 4 KB"
        );
    }

    #[test]
    fn batches_are_charged_per_item_and_a_query_finds_its_partition_key() {
        let mut m = roomy();
        let now = Instant::now();
        let batch = json!({ "RequestItems": { RESOURCES: [
            { "PutRequest": { "Item": { "scope": s("a"), "id": s("b1"), "p": s(&"x".repeat(1500)) } } },
            { "DeleteRequest": { "Key": key(RESOURCES, "a", "missing") } },
        ] } });
        admitted(&mut m, "BatchWriteItem", batch.to_string().as_bytes(), now);
        assert_eq!(units(&m, RESOURCES).0, 2.0 + 1.0, "each item by its own size");
        let get = json!({ "RequestItems": { RESOURCES: { "Keys": [key(RESOURCES, "a", "b1"), key(RESOURCES, "a", "b2")],
            "ConsistentRead": true } } });
        let pending = admitted(&mut m, "BatchGetItem", get.to_string().as_bytes(), now).unwrap();
        let answer =
            json!({ "Responses": { RESOURCES: [{ "scope": s("a"), "id": s("b1"), "p": s(&"x".repeat(1500)) }] } });
        m.settle(pending, answer.to_string().as_bytes(), now);
        assert!(
            (units(&m, RESOURCES).1 - 2.0).abs() < 1e-9,
            "one unit per key, found or not"
        );
        // The partition key is read from the key condition, whatever else it says.
        let query = json!({ "TableName": RESOURCES, "KeyConditionExpression": "#s = :s AND begins_with(#i, :p)",
            "ExpressionAttributeNames": { "#s": "scope", "#i": "id" },
            "ExpressionAttributeValues": { ":s": s("other"), ":p": s("b") } });
        let pending = admitted(&mut m, "Query", query.to_string().as_bytes(), now).expect("a Query to settle");
        assert_eq!(pending.touches[0].partition_key, "other");
        assert_eq!(pending.touches[0].units, 0.5, "eventually consistent");
    }

    #[test]
    fn item_sizes_follow_the_documented_rules() {
        let item = json!({
            "id": { "S": "abc" },            // 2 + 3
            "n": { "N": "12345" },           // 1 + 3 + 1
            "ok": { "BOOL": true },          // 2 + 1
            "l": { "L": [{ "S": "ab" }] },   // 1 + 3 + (2 + 1)
        });
        assert_eq!(item_size(item.as_object().unwrap()), 5 + 5 + 3 + 7);
    }

    #[test]
    fn a_bucket_holds_the_burst_and_refills_at_the_rate() {
        // 10 WU/s with 300 s of burst: 3,000 writes at once, then the rate.
        let mut m = model(CapacityParams::dynamodb(0.01));
        let start = Instant::now();
        let mut passed = 0;
        while matches!(
            m.admit("PutItem", &put("a", &format!("i{passed}"), 10), start),
            Verdict::Forward(_)
        ) {
            passed += 1;
        }
        assert_eq!(passed, 3000, "the burst bucket holds 300 s of 10 WU/s");
        let later = start + Duration::from_millis(500);
        let refilled = (0..10)
            .filter(|n| {
                matches!(
                    m.admit("PutItem", &put("a", &format!("r{n}"), 10), later),
                    Verdict::Forward(_)
                )
            })
            .count();
        assert_eq!(refilled, 5, "half a second refills 5 WU");
        // An hour idle fills the bucket to its depth, no further.
        let idle = later + Duration::from_secs(3600);
        let after_idle = (0..4000)
            .filter(|n| {
                matches!(
                    m.admit("PutItem", &put("a", &format!("h{n}"), 10), idle),
                    Verdict::Forward(_)
                )
            })
            .count();
        assert_eq!(after_idle, 3000);
    }

    #[test]
    fn a_throttled_request_costs_nothing_and_names_its_limit() {
        let mut m = tight();
        let now = Instant::now();
        for n in 0..10 {
            admitted(&mut m, "PutItem", &put("a", &format!("i{n}"), 10), now);
        }
        assert_eq!(
            m.admit("PutItem", &put("a", "one-too-many", 10), now),
            Verdict::Throttle {
                table: RESOURCES.into(),
                access: Access::Write
            }
        );
        let usage = m.usage().table(RESOURCES);
        assert_eq!((usage.write_units, usage.throttled_writes), (10.0, 1));
    }

    #[test]
    fn partitions_are_per_partition_key_value_and_per_table() {
        let mut m = tight();
        let now = Instant::now();
        for n in 0..10 {
            admitted(&mut m, "PutItem", &put("hot", &format!("i{n}"), 10), now);
        }
        assert!(matches!(
            m.admit("PutItem", &put("hot", "x", 10), now),
            Verdict::Throttle { .. }
        ));
        admitted(&mut m, "PutItem", &put("cold", "x", 10), now);
        let counter = json!({ "TableName": COUNTERS, "Key": key(COUNTERS, "hot", "best_effort"),
            "ExpressionAttributeValues": { ":d": { "N": "1" } } });
        admitted(&mut m, "UpdateItem", counter.to_string().as_bytes(), now);
        // Reads have a bucket of their own: the hot partition still reads.
        let get = json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "hot", "i1"), "ConsistentRead": true });
        assert!(admitted(&mut m, "GetItem", get.to_string().as_bytes(), now).is_some());
        // A table the model does not know is never throttled.
        let other = json!({ "TableName": "other", "Item": { "scope": s("hot"), "id": s("x") } });
        assert_eq!(
            m.admit("PutItem", other.to_string().as_bytes(), now),
            Verdict::Forward(None)
        );
    }

    /// Offers 40 writes/s of new items for 6 s to one partition of 10 WU/s
    /// that splits after 1 s of throttling; ids from `id`.
    fn heat(mut id: impl FnMut(u64) -> String) -> CapacityModel {
        let mut m = tight();
        let start = Instant::now();
        for n in 0..240 {
            let _ = m.admit(
                "PutItem",
                &put("hot", &id(n), 10),
                start + Duration::from_millis(n * 25),
            );
        }
        m
    }

    #[test]
    fn a_partition_hot_with_random_keys_splits_for_heat() {
        let mut rng = fastrand::Rng::with_seed(7);
        let m = heat(|_| format!("{:016x}", rng.u64(..)));
        let usage = m.usage().table(RESOURCES);
        assert!(m.partition_count(RESOURCES, "hot") >= 2, "{usage:?}");
        assert!(usage.splits >= 1 && usage.splits_refused_sequential == 0, "{usage:?}");
    }

    #[test]
    fn a_partition_hot_with_sequential_keys_never_splits() {
        let m = heat(|n| format!("item-{n:06}"));
        let usage = m.usage().table(RESOURCES);
        assert_eq!(m.partition_count(RESOURCES, "hot"), 1, "{usage:?}");
        assert_eq!(usage.splits, 0);
        assert!(
            usage.splits_refused_sequential >= 1,
            "the split was considered: {usage:?}"
        );
    }

    #[test]
    fn a_split_halves_the_load_each_side_takes() {
        let mut rng = fastrand::Rng::with_seed(11);
        let random = heat(|_| format!("{:016x}", rng.u64(..))).usage().table(RESOURCES);
        let sequential = heat(|n| format!("item-{n:06}")).usage().table(RESOURCES);
        assert!(
            random.write_units > sequential.write_units,
            "after the split more writes pass: random {random:?}, sequential {sequential:?}"
        );
    }

    #[test]
    fn isolated_items_each_have_their_own_rate() {
        // 20 writes/s per item, a tenth of a second's held: two at once.
        let mut m = model(CapacityParams::per_item(20.0));
        let update = |table: &str, name: &str| {
            json!({ "TableName": table, "Key": { "scope": s("s"), "name": s(name) },
                    "ExpressionAttributeValues": { ":d": { "N": "1" } } })
            .to_string()
            .into_bytes()
        };
        let start = Instant::now();
        let hot = update(COUNTERS, "best_effort");
        let passed = |m: &mut CapacityModel, body: &[u8], at: Instant| {
            matches!(m.admit("UpdateItem", body, at), Verdict::Forward(_))
        };
        let outcomes: Vec<bool> = (0..4).map(|_| passed(&mut m, &hot, start)).collect();
        assert_eq!(
            outcomes,
            [true, true, false, false],
            "a tenth of a second's writes, then throttled"
        );
        assert!(
            passed(&mut m, &update(COUNTERS, "best_effort#1"), start),
            "another item of the scope"
        );
        assert!(passed(&mut m, &put("s", "x", 10), start), "another table");
        assert!(
            passed(&mut m, &hot, start + Duration::from_millis(50)),
            "50 ms refill one write"
        );
        assert!(!passed(&mut m, &hot, start + Duration::from_millis(50)));
        let query = json!({ "TableName": COUNTERS, "KeyConditionExpression": "#s = :s",
            "ExpressionAttributeNames": { "#s": "scope" }, "ExpressionAttributeValues": { ":s": s("s") } });
        assert!(
            passed(&mut m, query.to_string().as_bytes(), start),
            "a Query reaches no bucket before its answer"
        );
    }

    #[test]
    fn queries_do_not_move_the_split_point() {
        // Writes spread over sort keys "k-00".."k-99", each preceded by a
        // Query of the whole partition-key value: the split still divides
        // the written keys, not "" (a Query names no sort key).
        let mut m = tight();
        let start = Instant::now();
        let query = json!({ "TableName": RESOURCES, "KeyConditionExpression": "#s = :s",
            "ExpressionAttributeNames": { "#s": "scope" }, "ExpressionAttributeValues": { ":s": s("hot") } })
        .to_string();
        let mut rng = fastrand::Rng::with_seed(3);
        // 2.2 s: one split (throttled from about 0.3 s, split at 1.3 s).
        for n in 0..88 {
            let at = start + Duration::from_millis(n * 25);
            if let Verdict::Forward(Some(pending)) = m.admit("Query", query.as_bytes(), at) {
                m.settle(pending, b"{}", at);
            }
            let _ = m.admit("PutItem", &put("hot", &format!("k-{:02}", rng.u32(..100)), 10), at);
        }
        let lows: Vec<String> = m.partitions[&(RESOURCES.to_owned(), "hot".to_owned())]
            .iter()
            .map(|p| p.low.clone())
            .collect();
        assert_eq!(lows.len(), 2, "{lows:?}");
        assert!(
            lows[1].as_str() > "k-25" && lows[1].as_str() < "k-75",
            "the split divides the writes: {lows:?}"
        );
    }

    #[test]
    fn one_hot_item_is_never_split() {
        let mut m = tight();
        let start = Instant::now();
        let counter = json!({ "TableName": COUNTERS, "Key": key(COUNTERS, "hot", "best_effort"),
            "ExpressionAttributeValues": { ":d": { "N": "1" } } })
        .to_string();
        for n in 0..240 {
            let _ = m.admit("UpdateItem", counter.as_bytes(), start + Duration::from_millis(n * 25));
        }
        assert_eq!(m.partition_count(COUNTERS, "hot"), 1);
        assert!(m.usage().table(COUNTERS).throttled_writes > 100);
    }

    /// The real SDK, through the proxy, gets the model's throttle as the
    /// modelled error with its reason (the upstream is never reached: the
    /// partitions are drained before the model is installed).
    #[test]
    fn the_sdk_reads_a_modelled_throttle_with_its_reason() {
        use aws_sdk_dynamodb::operation::put_item::PutItemError;
        use aws_sdk_dynamodb::operation::query::QueryError;

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            for mode in [CapacityMode::Provisioned, CapacityMode::OnDemand] {
                let mut m = model(CapacityParams { mode, ..tight_params() });
                let now = Instant::now();
                // A 390 KB item: 381 WU into a bucket of 10, 38 s of debt.
                admitted(&mut m, "PutItem", &put("hot", "i1", 390_000), now);
                // A read that cost more than the bucket holds: reads refused until repaid.
                let get = json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "hot", "i1"), "ConsistentRead": true });
                let pending = admitted(&mut m, "GetItem", get.to_string().as_bytes(), now).unwrap();
                let huge = json!({ "Item": { "scope": s("hot"), "id": s("i1"), "p": s(&"z".repeat(400_000)) } });
                m.settle(pending, huge.to_string().as_bytes(), now);

                let proxy = crate::faults::FaultProxy::start("http://127.0.0.1:9", crate::faults::FaultPlan::new(0));
                proxy.limit_capacity(Some(m));
                let config = aws_sdk_dynamodb::config::Builder::from(&proxy.sdk_config().await)
                    .retry_config(aws_config::retry::RetryConfig::disabled())
                    .build();
                let client = aws_sdk_dynamodb::Client::from_conf(config);
                let error = client
                    .put_item()
                    .table_name(RESOURCES)
                    .item("scope", aws_sdk_dynamodb::types::AttributeValue::S("hot".into()))
                    .item("id", aws_sdk_dynamodb::types::AttributeValue::S("new".into()))
                    .send()
                    .await
                    .expect_err("throttled")
                    .into_service_error();
                let reasons = match (&error, mode) {
                    (PutItemError::ProvisionedThroughputExceededException(e), CapacityMode::Provisioned) => {
                        e.throttling_reasons().to_vec()
                    }
                    (PutItemError::ThrottlingException(e), CapacityMode::OnDemand) => e.throttling_reasons().to_vec(),
                    _ => panic!("{mode:?}: {error:?}"),
                };
                assert_eq!(reasons.len(), 1, "{error:?}");
                assert_eq!(reasons[0].reason(), Some("TableWriteKeyRangeThroughputExceeded"));
                assert_eq!(
                    reasons[0].resource(),
                    Some("arn:aws:dynamodb:us-east-1:000000000000:table/resources")
                );
                let error = client
                    .query()
                    .table_name(RESOURCES)
                    .key_condition_expression("#s = :s")
                    .expression_attribute_names("#s", "scope")
                    .expression_attribute_values(":s", aws_sdk_dynamodb::types::AttributeValue::S("hot".into()))
                    .consistent_read(true)
                    .send()
                    .await
                    .expect_err("reads throttled while in debt")
                    .into_service_error();
                let reason = match &error {
                    QueryError::ProvisionedThroughputExceededException(e) => e.throttling_reasons()[0].reason(),
                    QueryError::ThrottlingException(e) => e.throttling_reasons()[0].reason(),
                    _ => panic!("{error:?}"),
                };
                assert_eq!(reason, Some("TableReadKeyRangeThroughputExceeded"));
                assert!(
                    hybrid_counter_aws::dynamo::is_throttle(aws_sdk_dynamodb::error::ProvideErrorMetadata::code(
                        &error
                    )),
                    "the kit retries it as a throttle"
                );
                assert_eq!(proxy.stats().of_kind(crate::faults::FaultKind::Throttle), 2);
            }
        });
    }
}
