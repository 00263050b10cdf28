//! Cost accounting of the requests a `DynamoStore` (crate `hybrid-counter-aws`) sends:
//! requests per operation, items written (plain and transactional), writes
//! to counters-table items, transactions committed and cancelled (by
//! reason), and the capacity units DynamoDB reports (`ReturnConsumedCapacity
//! = TOTAL`, which costs nothing). One [`Meter`] can be shared by several
//! stores (clones share the counts); [`Meter::snapshot`] reads them and
//! [`MeterSnapshot::since`] gives the cost of one invocation or one run.
//!
//! Counted per request the kit sends, as the kit sees it: the SDK's own
//! retries of one request are not visible here, and DynamoDB reports no
//! consumed capacity for a cancelled transaction, so `write_units` is a
//! lower bound when transactions were cancelled (each cancelled one is
//! counted in `transactions_cancelled`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::throttle::ThrottleReason;

/// Operations the kit sends to DynamoDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Query,
    GetItem,
    BatchGetItem,
    PutItem,
    UpdateItem,
    TransactWriteItems,
}

impl Operation {
    /// How many there are (the discriminants index the request counts).
    const COUNT: usize = Operation::TransactWriteItems as usize + 1;
}

/// What a committed write touched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Resource items written (put, updated or deleted).
    pub resource_items: u64,
    /// Counters-table items written.
    pub counter_items: u64,
}

impl Written {
    /// One resource item.
    pub const RESOURCE: Written = Written {
        resource_items: 1,
        counter_items: 0,
    };
    /// One counters-table item.
    pub const COUNTER: Written = Written {
        resource_items: 0,
        counter_items: 1,
    };
}

/// Shared, lock-free counts. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct Meter(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    requests: [AtomicU64; Operation::COUNT],
    failed_requests: AtomicU64,
    plain_resource_writes: AtomicU64,
    plain_counter_writes: AtomicU64,
    transactions_committed: AtomicU64,
    transactional_resource_writes: AtomicU64,
    transactional_counter_writes: AtomicU64,
    version_only_counter_writes: AtomicU64,
    cancelled_conflict: AtomicU64,
    cancelled_condition: AtomicU64,
    cancelled_other: AtomicU64,
    /// Capacity units in thousandths (DynamoDB reports fractions for reads).
    write_milliunits: AtomicU64,
    read_milliunits: AtomicU64,
    /// Throttled requests, per reason ([`ThrottleReason::index`]).
    throttles: [AtomicU64; ThrottleReason::COUNT],
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn milli(units: f64) -> u64 {
    (units.max(0.0) * 1000.0).round() as u64
}

impl Meter {
    pub fn new() -> Self {
        Self::default()
    }

    /// A request is about to be sent.
    pub fn request(&self, op: Operation) {
        add(&self.0.requests[op as usize], 1);
    }

    /// A request failed (any error, cancellations included).
    pub fn failed(&self) {
        add(&self.0.failed_requests, 1);
    }

    /// A plain (non-transactional) write succeeded.
    pub fn plain_write(&self, written: Written) {
        add(&self.0.plain_resource_writes, written.resource_items);
        add(&self.0.plain_counter_writes, written.counter_items);
    }

    /// A transaction committed.
    pub fn transaction(&self, written: Written) {
        add(&self.0.transactions_committed, 1);
        add(&self.0.transactional_resource_writes, written.resource_items);
        add(&self.0.transactional_counter_writes, written.counter_items);
    }

    /// A committed transaction wrote its counter item with a net delta of
    /// zero, only to bump its version (counted in [`Self::transaction`] too).
    pub fn version_only_counter_write(&self) {
        add(&self.0.version_only_counter_writes, 1);
    }

    /// A transaction was cancelled: by a conflict with another write, by a
    /// failed condition (and no conflict), or for another reason.
    pub fn cancelled(&self, conflict: bool, condition: bool) {
        let counter = if conflict {
            &self.0.cancelled_conflict
        } else if condition {
            &self.0.cancelled_condition
        } else {
            &self.0.cancelled_other
        };
        add(counter, 1);
    }

    /// Capacity DynamoDB reported for one response (`None`: not reported).
    pub fn consumed(&self, write_units: Option<f64>, read_units: Option<f64>) {
        add(&self.0.write_milliunits, write_units.map_or(0, milli));
        add(&self.0.read_milliunits, read_units.map_or(0, milli));
    }

    /// A request was throttled, for `reasons` (DynamoDB's
    /// `ThrottlingReasons`): each distinct reason counts once;
    /// none named counts as [`ThrottleReason::UNSPECIFIED`].
    pub fn throttled(&self, reasons: &[ThrottleReason]) {
        let mut seen = [false; ThrottleReason::COUNT];
        for reason in reasons {
            seen[reason.index()] = true;
        }
        if reasons.is_empty() {
            seen[ThrottleReason::UNSPECIFIED.index()] = true;
        }
        for (counter, _) in self.0.throttles.iter().zip(seen).filter(|(_, s)| *s) {
            add(counter, 1);
        }
    }

    pub fn snapshot(&self) -> MeterSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let c = &self.0;
        MeterSnapshot {
            requests: RequestCounts {
                query: get(&c.requests[Operation::Query as usize]),
                get_item: get(&c.requests[Operation::GetItem as usize]),
                batch_get_item: get(&c.requests[Operation::BatchGetItem as usize]),
                put_item: get(&c.requests[Operation::PutItem as usize]),
                update_item: get(&c.requests[Operation::UpdateItem as usize]),
                transact_write_items: get(&c.requests[Operation::TransactWriteItems as usize]),
            },
            failed_requests: get(&c.failed_requests),
            plain_resource_writes: get(&c.plain_resource_writes),
            plain_counter_writes: get(&c.plain_counter_writes),
            transactions_committed: get(&c.transactions_committed),
            transactional_resource_writes: get(&c.transactional_resource_writes),
            transactional_counter_writes: get(&c.transactional_counter_writes),
            version_only_counter_writes: get(&c.version_only_counter_writes),
            transactions_cancelled: Cancellations {
                conflict: get(&c.cancelled_conflict),
                condition: get(&c.cancelled_condition),
                other: get(&c.cancelled_other),
            },
            write_units: get(&c.write_milliunits) as f64 / 1000.0,
            read_units: get(&c.read_milliunits) as f64 / 1000.0,
            throttles: ThrottleCounts(std::array::from_fn(|i| get(&c.throttles[i]))),
        }
    }
}

/// Throttled requests per [`ThrottleReason`]; serialized as a map of the
/// reasons that occurred.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThrottleCounts([u64; ThrottleReason::COUNT]);

impl ThrottleCounts {
    /// The count of `reason`.
    pub fn get(&self, reason: ThrottleReason) -> u64 {
        self.0[reason.index()]
    }

    /// Reasons with a count above zero, in [`ThrottleReason::all`] order.
    pub fn nonzero(&self) -> impl Iterator<Item = (ThrottleReason, u64)> + '_ {
        ThrottleReason::all().map(|r| (r, self.get(r))).filter(|(_, n)| *n > 0)
    }

    /// Throttled requests of every reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    fn since(&self, earlier: &ThrottleCounts) -> ThrottleCounts {
        ThrottleCounts(std::array::from_fn(|i| self.0[i].saturating_sub(earlier.0[i])))
    }
}

impl Serialize for ThrottleCounts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (reason, n) in self.nonzero() {
            map.serialize_entry(reason.name(), &n)?;
        }
        map.end()
    }
}

/// Requests sent, per operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RequestCounts {
    pub query: u64,
    pub get_item: u64,
    pub batch_get_item: u64,
    pub put_item: u64,
    pub update_item: u64,
    pub transact_write_items: u64,
}

impl RequestCounts {
    pub fn total(&self) -> u64 {
        self.query + self.get_item + self.batch_get_item + self.put_item + self.update_item + self.transact_write_items
    }
}

/// Cancelled transactions by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Cancellations {
    /// At least one `TransactionConflict`: another write held an item.
    pub conflict: u64,
    /// A condition failed (an item already processed, or changed).
    pub condition: u64,
    pub other: u64,
}

/// Counts at one moment; subtract two with [`MeterSnapshot::since`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MeterSnapshot {
    pub requests: RequestCounts,
    pub failed_requests: u64,
    pub plain_resource_writes: u64,
    pub plain_counter_writes: u64,
    pub transactions_committed: u64,
    pub transactional_resource_writes: u64,
    pub transactional_counter_writes: u64,
    /// Of those, counter writes with a zero delta: they only bump the
    /// counter's version, so an audit sees that the processed items changed.
    pub version_only_counter_writes: u64,
    pub transactions_cancelled: Cancellations,
    /// Write capacity units DynamoDB reported for successful writes
    /// (a transactional write costs twice a plain one).
    pub write_units: f64,
    pub read_units: f64,
    /// Requests DynamoDB throttled, per reason (as the kit saw them: a
    /// throttle the SDK's own retry recovered is not seen).
    pub throttles: ThrottleCounts,
}

impl MeterSnapshot {
    /// Items written, plain and transactional.
    pub fn items_written(&self) -> u64 {
        self.plain_resource_writes
            + self.plain_counter_writes
            + self.transactional_resource_writes
            + self.transactional_counter_writes
    }

    /// Writes of counters-table items (the hot items of a busy scope).
    pub fn counter_item_writes(&self) -> u64 {
        self.plain_counter_writes + self.transactional_counter_writes
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &MeterSnapshot) -> MeterSnapshot {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let (r, e) = (&self.requests, &earlier.requests);
        MeterSnapshot {
            requests: RequestCounts {
                query: d(r.query, e.query),
                get_item: d(r.get_item, e.get_item),
                batch_get_item: d(r.batch_get_item, e.batch_get_item),
                put_item: d(r.put_item, e.put_item),
                update_item: d(r.update_item, e.update_item),
                transact_write_items: d(r.transact_write_items, e.transact_write_items),
            },
            failed_requests: d(self.failed_requests, earlier.failed_requests),
            plain_resource_writes: d(self.plain_resource_writes, earlier.plain_resource_writes),
            plain_counter_writes: d(self.plain_counter_writes, earlier.plain_counter_writes),
            transactions_committed: d(self.transactions_committed, earlier.transactions_committed),
            transactional_resource_writes: d(
                self.transactional_resource_writes,
                earlier.transactional_resource_writes,
            ),
            transactional_counter_writes: d(self.transactional_counter_writes, earlier.transactional_counter_writes),
            version_only_counter_writes: d(self.version_only_counter_writes, earlier.version_only_counter_writes),
            transactions_cancelled: Cancellations {
                conflict: d(
                    self.transactions_cancelled.conflict,
                    earlier.transactions_cancelled.conflict,
                ),
                condition: d(
                    self.transactions_cancelled.condition,
                    earlier.transactions_cancelled.condition,
                ),
                other: d(self.transactions_cancelled.other, earlier.transactions_cancelled.other),
            },
            write_units: (self.write_units - earlier.write_units).max(0.0),
            read_units: (self.read_units - earlier.read_units).max(0.0),
            throttles: self.throttles.since(&earlier.throttles),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_counts_and_since_subtracts() {
        let meter = Meter::new();
        let shared = meter.clone();
        meter.request(Operation::TransactWriteItems);
        shared.transaction(Written {
            resource_items: 99,
            counter_items: 1,
        });
        shared.consumed(Some(200.0), None);
        let before = meter.snapshot();
        assert_eq!(before.requests.transact_write_items, 1);
        assert_eq!(before.items_written(), 100);
        assert_eq!(before.counter_item_writes(), 1);
        assert_eq!(before.write_units, 200.0);

        meter.request(Operation::UpdateItem);
        meter.plain_write(Written {
            resource_items: 0,
            counter_items: 1,
        });
        meter.consumed(Some(1.0), Some(0.5));
        meter.request(Operation::TransactWriteItems);
        meter.failed();
        meter.cancelled(true, true);
        meter.cancelled(false, true);
        let delta = meter.snapshot().since(&before);
        assert_eq!(delta.requests.total(), 2);
        assert_eq!(delta.requests.update_item, 1);
        assert_eq!(delta.items_written(), 1);
        assert_eq!(delta.counter_item_writes(), 1);
        assert_eq!(delta.transactions_committed, 0);
        assert_eq!(
            delta.transactions_cancelled,
            Cancellations {
                conflict: 1,
                condition: 1,
                other: 0
            }
        );
        assert_eq!((delta.write_units, delta.read_units), (1.0, 0.5));
        assert_eq!(delta.failed_requests, 1);
    }

    #[test]
    fn throttles_count_each_reason_once_per_request_and_none_as_unspecified() {
        let meter = Meter::new();
        let hot = ThrottleReason::parse("TableWriteKeyRangeThroughputExceeded");
        let capped = ThrottleReason::parse("TableWriteMaxOnDemandThroughputExceeded");
        meter.throttled(&[hot, hot, capped]);
        let before = meter.snapshot();
        meter.throttled(&[hot]);
        meter.throttled(&[]);
        let delta = meter.snapshot().since(&before);
        assert_eq!(before.throttles.get(hot), 1, "one request, named twice");
        assert_eq!(before.throttles.get(capped), 1);
        assert_eq!(delta.throttles.get(hot), 1);
        assert_eq!(delta.throttles.get(ThrottleReason::UNSPECIFIED), 1);
        assert_eq!(delta.throttles.total(), 2);
        assert_eq!(
            serde_json::to_value(delta.throttles).unwrap(),
            serde_json::json!({"TableWriteKeyRangeThroughputExceeded": 1, "Unspecified": 1})
        );
    }
}
