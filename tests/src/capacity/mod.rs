//! DynamoDB's throughput limits and transaction conflicts, modelled in
//! front of an emulator that has neither: the fault proxy asks the
//! [`CapacityModel`] about each request and answers a refusal as DynamoDB
//! would. The rules, their AWS sources and what is still kinder than
//! DynamoDB: `docs/capacity-model.md`.

mod answer;
mod budget;
mod inflight;
mod params;
mod split;
mod table;
mod units;
mod usage;

#[cfg(test)]
mod model_tests;

use std::collections::HashMap;
use std::time::Instant;

use serde_json::Value;

pub use answer::{Answer, Limit, Refusal};
pub use params::{
    CapacityMode, CapacityParams, NEW_TABLE_READ_UNITS, NEW_TABLE_WRITE_UNITS, PARTITION_READ_UNITS,
    PARTITION_WRITE_UNITS, SPLIT_AFTER, TABLE_QUOTA_UNITS, TRANSACTION_LATENCY, TableLimits,
};
pub use units::{Access, TableKeys, item_size};
pub use usage::{CapacityUsage, Conflicts, ReadWrite, TableUsage, Throttles};

use inflight::InFlight;
use table::{Slot, Table};
use units::{ItemId, Kind, Sizes, Touch};

/// What the proxy does with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Forward it; when `Some`, hand its answer to [`CapacityModel::finish`].
    Forward(Option<Ticket>),
    /// Answer it with this, without forwarding.
    Refuse(Answer),
}

/// An admitted request the model waits to hear the answer of.
#[derive(Debug, Clone, PartialEq)]
pub struct Ticket {
    operation: String,
    /// Reads, charged on the answer.
    reads: Vec<Touch>,
    /// Items held while in flight, and whether by a transaction.
    held: Vec<ItemId>,
    transactional: bool,
    token: Option<String>,
    /// A transaction's writes: given back when it is cancelled.
    writes: Vec<Touch>,
    answer_after: Option<Instant>,
}

impl Ticket {
    /// When the proxy may answer at the earliest (a transaction's hold).
    pub fn answer_after(&self) -> Option<Instant> {
        self.answer_after
    }
}

/// The model: per table, its partitions and limits; what is in flight.
#[derive(Debug, Clone)]
pub struct CapacityModel {
    params: CapacityParams,
    keys: HashMap<String, TableKeys>,
    tables: HashMap<String, Table>,
    sizes: Sizes,
    inflight: InFlight,
    usage: CapacityUsage,
}

impl CapacityModel {
    pub fn new(params: CapacityParams, tables: &[TableKeys]) -> Self {
        assert!(params.scale > 0.0, "a capacity scale of {}", params.scale);
        let now = Instant::now();
        Self {
            keys: tables.iter().map(|t| (t.name.clone(), t.clone())).collect(),
            tables: tables
                .iter()
                .map(|t| (t.name.clone(), Table::new(&params, now)))
                .collect(),
            sizes: Sizes::default(),
            inflight: InFlight::default(),
            usage: CapacityUsage {
                tables: tables.iter().map(|t| (t.name.clone(), TableUsage::default())).collect(),
            },
            params,
        }
    }

    pub fn params(&self) -> &CapacityParams {
        &self.params
    }

    pub fn usage(&self) -> CapacityUsage {
        self.usage.clone()
    }

    /// The partitions holding `partition_key`'s items in `table`.
    pub fn partition_count(&self, table: &str, partition_key: &str) -> usize {
        self.tables.get(table).map_or(1, |t| t.partition_count(partition_key))
    }

    fn usage_of(&mut self, table: &str) -> &mut TableUsage {
        self.usage.tables.entry(table.to_owned()).or_default()
    }

    fn slots(&mut self, touch: &Touch, now: Instant) -> Vec<Slot> {
        let params = &self.params;
        self.tables.get_mut(&touch.table).map_or_else(Vec::new, |t| {
            t.slots(&touch.partition_key, touch.sort_key.as_deref(), params, now)
        })
    }

    /// The verdict on DynamoDB `operation` (e.g. `PutItem`) with request
    /// `body` at `now`; an admitted write is charged at once.
    pub fn admit(&mut self, operation: &str, body: &[u8], now: Instant) -> Verdict {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return Verdict::Forward(None);
        };
        let request = units::parse(operation, &request, &self.keys, &self.sizes);
        let Some(first_table) = request.touches.first().map(|t| t.table.clone()) else {
            return Verdict::Forward(None);
        };
        let token = request.token.clone().filter(|_| request.kind == Kind::TransactWrite);
        if let Some(token) = &token
            && self.inflight.token_in_flight(token)
        {
            self.usage_of(&first_table).conflicts.in_progress += 1;
            return Verdict::Refuse(answer::in_progress());
        }
        self.maintain(&request.touches, now);
        let slots: Vec<Vec<Slot>> = request.touches.iter().map(|t| self.slots(t, now)).collect();
        if let Some(answer) = self.capacity_refusal(&request, &slots) {
            return Verdict::Refuse(answer);
        }
        if let Some(answer) = self.conflict(&request, &first_table) {
            return Verdict::Refuse(answer);
        }
        for (id, size) in request.sizes {
            self.sizes.set(id, size);
        }
        for (touch, slots) in request.touches.iter().zip(&slots) {
            let table = self.tables.get_mut(&touch.table).expect("a limited table");
            for slot in slots {
                if let (Slot::Range(_), Some(sort)) = (slot, &touch.sort_key) {
                    let key = Table::key(&touch.partition_key, sort);
                    table.partition(slot).heat.remember(&key, touch.new_item);
                }
            }
            if touch.access == Access::Write {
                table.charge(&slots[0], Access::Write, touch.units);
                self.usage_of(&touch.table).write_units += touch.units;
            }
        }
        let mut tables: Vec<&String> = request.touches.iter().map(|t| &t.table).collect();
        tables.sort();
        tables.dedup();
        for table in tables {
            self.usage.tables.entry(table.clone()).or_default().requests += 1;
        }
        let transactional = request.kind == Kind::TransactWrite;
        let held: Vec<ItemId> = match request.kind {
            Kind::TransactWrite | Kind::Write => request.touches.iter().filter_map(Touch::item).collect(),
            Kind::TransactGet | Kind::Other => Vec::new(),
        };
        self.inflight.hold(&held, transactional, token.as_deref());
        let (reads, writes): (Vec<Touch>, Vec<Touch>) =
            request.touches.into_iter().partition(|t| t.access == Access::Read);
        Verdict::Forward(Some(Ticket {
            operation: operation.to_owned(),
            reads,
            held,
            transactional,
            token,
            writes: if transactional { writes } else { Vec::new() },
            answer_after: transactional.then(|| now + self.params.transaction_hold()),
        }))
    }

    /// Rolls the budgets the touches reach to `now`, splitting partitions
    /// hot for long enough.
    fn maintain(&mut self, touches: &[Touch], now: Instant) {
        for touch in touches {
            let slots = self.slots(touch, now);
            let params = &self.params;
            let usage = self.usage.tables.entry(touch.table.clone()).or_default();
            if let Some(table) = self.tables.get_mut(&touch.table) {
                table.maintain(&slots, params, now, usage);
                usage.max_partitions = usage.max_partitions.max(table.partition_count(&touch.partition_key));
            }
        }
    }

    /// The throttling answer when a partition or table cannot take the
    /// request as a whole.
    fn capacity_refusal(&mut self, request: &units::Request, slots: &[Vec<Slot>]) -> Option<Answer> {
        let mut names: Vec<&String> = request.touches.iter().map(|t| &t.table).collect();
        names.dedup();
        for name in names {
            let costs: Vec<(Slot, Access, f64)> = request
                .touches
                .iter()
                .zip(slots)
                .filter(|(t, _)| &t.table == name)
                .flat_map(|(t, slots)| {
                    let units = if t.access == Access::Write { t.units } else { 0.0 };
                    slots.iter().map(move |s| (s.clone(), t.access, units))
                })
                .collect();
            let table = self.tables.get_mut(name)?;
            let Some((limit, access, slot)) = table.refusal(&costs) else {
                continue;
            };
            if let Some(slot) = &slot {
                table.mark_throttled(slot, access);
            }
            let name = name.clone();
            self.usage_of(&name).throttles.add(limit, access);
            let refusal = Refusal::Throttle {
                table: name.clone(),
                access,
                limit,
            };
            return Some(match request.kind {
                Kind::TransactWrite | Kind::TransactGet => {
                    let throttled = answer::throttled_code(self.params.mode);
                    let codes: Vec<&str> = (0..request.actions)
                        .map(|at| {
                            let hit = request.touches.iter().zip(slots).any(|(t, s)| {
                                t.action == Some(at)
                                    && t.table == name
                                    && slot.as_ref().is_none_or(|slot| s.contains(slot))
                            });
                            if hit { throttled } else { "None" }
                        })
                        .collect();
                    answer::cancelled(&codes, refusal)
                }
                Kind::Write | Kind::Other => answer::throttle(self.params.mode, &name, access, limit),
            });
        }
        None
    }

    /// The answer when another request in flight holds one of the items.
    fn conflict(&mut self, request: &units::Request, first_table: &str) -> Option<Answer> {
        let items: Vec<(usize, ItemId)> = request
            .touches
            .iter()
            .filter_map(|t| Some((t.action.unwrap_or(0), t.item()?)))
            .collect();
        let ids: Vec<ItemId> = items.iter().map(|(_, i)| i.clone()).collect();
        let hits = match request.kind {
            Kind::TransactWrite => self.inflight.transaction_conflicts(&ids),
            Kind::TransactGet => self.inflight.read_conflicts(&ids),
            Kind::Write => {
                if ids.iter().any(|i| self.inflight.write_conflicts(i)) {
                    self.usage_of(first_table).conflicts.writes += 1;
                    return Some(answer::conflict());
                }
                return None;
            }
            Kind::Other => return None,
        };
        if !hits.contains(&true) {
            return None;
        }
        let codes: Vec<&str> = (0..request.actions)
            .map(|at| {
                let conflicting = items.iter().zip(&hits).any(|((a, _), hit)| *a == at && *hit);
                if conflicting { "TransactionConflict" } else { "None" }
            })
            .collect();
        if request.kind == Kind::TransactWrite {
            self.usage_of(first_table).conflicts.transactions += 1;
        } else {
            self.usage_of(first_table).conflicts.reads += 1;
        }
        Some(answer::cancelled(&codes, Refusal::Conflict))
    }

    /// Takes the answer of an admitted request (`status`, `body`): releases
    /// what it held, charges its reads by the sizes the answer shows (a
    /// failed read its minimum), and gives a cancelled transaction's writes
    /// back.
    pub fn finish(&mut self, ticket: Ticket, status: u16, body: &[u8], now: Instant) {
        self.inflight
            .release(&ticket.held, ticket.transactional, ticket.token.as_deref());
        let answer = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
        let cancelled = status != 200
            && answer["__type"]
                .as_str()
                .is_some_and(|t| t.ends_with("TransactionCanceledException"));
        if cancelled {
            for touch in &ticket.writes {
                let slots = self.slots(touch, now);
                if let (Some(slot), Some(table)) = (slots.first(), self.tables.get_mut(&touch.table)) {
                    table.charge(slot, Access::Write, -touch.units);
                }
                self.usage_of(&touch.table).write_units -= touch.units;
            }
        }
        let items = if status == 200 {
            units::returned_items(&ticket.operation, &answer)
        } else {
            Vec::new()
        };
        for touch in &ticket.reads {
            self.settle_read(touch, &items, now);
        }
    }

    /// Charges one read touch with the items the answer returned.
    fn settle_read(
        &mut self,
        touch: &Touch,
        items: &[(Option<String>, &serde_json::Map<String, Value>)],
        now: Instant,
    ) {
        let keys = self.keys[&touch.table].clone();
        let (pk, sk) = (keys.partition_key, keys.sort_key);
        let mine: Vec<(String, usize)> = items
            .iter()
            .filter(|(t, item)| {
                t.as_deref().is_none_or(|t| t == touch.table)
                    && units::key_string(item.get(&pk)).as_deref() == Some(touch.partition_key.as_str())
                    && touch
                        .sort_key
                        .as_ref()
                        .is_none_or(|s| units::key_string(item.get(&sk)).as_ref() == Some(s))
            })
            .map(|(_, item)| {
                let sort = units::key_string(item.get(&sk)).unwrap_or_default();
                let id = (touch.table.clone(), touch.partition_key.clone(), sort.clone());
                let size = if touch.projected {
                    item_size(item).max(self.sizes.get(&id).unwrap_or(0))
                } else {
                    self.sizes.set(id, Some(item_size(item)));
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
            && let Some(item) = touch.item()
        {
            total = total.max(self.sizes.get(&item).unwrap_or(0));
        }
        let read = units::read_units(total, touch.units);
        if mine.is_empty() || touch.sort_key.is_some() {
            self.charge_read(touch, touch.sort_key.as_deref().unwrap_or_default(), read, now);
            return;
        }
        // A Query: its units, charged on the total size, spread over the
        // partitions in proportion to the bytes each served.
        for (sort, size) in &mine {
            self.charge_read(touch, sort, read * *size as f64 / total.max(1) as f64, now);
        }
    }

    fn charge_read(&mut self, touch: &Touch, sort: &str, units: f64, now: Instant) {
        let params = &self.params;
        if let Some(table) = self.tables.get_mut(&touch.table)
            && let Some(slot) = table.slots(&touch.partition_key, Some(sort), params, now).first()
        {
            table.charge(slot, Access::Read, units);
        }
        self.usage_of(&touch.table).read_units += units;
    }
}
