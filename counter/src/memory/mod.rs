//! A deterministic in-memory store (every role of [`crate::store`]): a test double, not a database. It
//! implements the semantics the kit relies on (conditional writes,
//! all-or-nothing transactions with cancellation reasons in request order,
//! conflicts between transactions in flight, the resources table's stream)
//! and lets a test inject faults, the ambiguous kind among them: applied,
//! and the caller still sees an error. The emulator tests remain the check
//! against the real API. This module owns the handle ([`MemoryStore`]), its
//! state and a test's setup and inspection calls; each concern has a file.

mod calls;
mod chaos;
mod drift;
mod layout;
mod limits;
mod locks;
mod reads;
mod store;
mod stream;
mod tables;
mod tokens;
mod transactions;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::dynamodb::EventRecord as Record;
use serde_dynamo::{AttributeValue, Item};

use self::chaos::Faults;
pub use self::chaos::{Chaos, Fault, LimitOutcomes, Op};
use self::locks::Locks;
use self::stream::{Event, Stream};
pub use self::stream::{STREAM_ARN, STREAM_SHARD_ID, StreamShard, sequence_number};
pub use self::tables::{MemResource, Tables};
pub use self::tokens::CLIENT_REQUEST_TOKEN_WINDOW_MS;
use self::tokens::Tokens;
use crate::error::StoreError;
use crate::ids::Scope;
use crate::items::ResourceState;
use crate::keys;
use crate::store::{NewResource, RequestStore};
use crate::stream::process::Decoded;
use crate::time::EpochMillis;

type Hook = Box<dyn FnOnce(&mut Tables) + Send>;
type Checker = Box<dyn Fn(&Tables) -> Result<(), String> + Send>;
/// The current time for the stream's records.
pub type Clock = Arc<dyn Fn() -> EpochMillis + Send + Sync>;

/// Everything the store holds, behind one mutex.
#[derive(Default)]
struct Inner {
    tables: Tables,
    stream: Stream,
    faults: Faults,
    /// Runs right after the next successful call of its operation.
    hooks: VecDeque<(Op, Hook)>,
    calls: Vec<Op>,
    locks: Locks,
    clock: Option<Clock>,
    checker: Option<Checker>,
    violation: Option<String>,
    tokens: Tokens,
    /// The operation whose last call drew [`Fault::AppliedThenResent`]
    /// (see [`MemoryStore::resendable`]).
    resend_pending: Option<Op>,
    limit_outcomes: LimitOutcomes,
}

impl Inner {
    fn stamp(&mut self) {
        self.stream.now = self.clock.as_ref().map_or(0, |clock| clock());
    }

    /// Runs the invariant checker after a write; keeps the first violation.
    fn check(&mut self, op: Op) {
        if self.violation.is_some() {
            return;
        }
        if let Some(incarnation) = self.tables.resurrected.first() {
            self.violation = Some(format!(
                "after call #{} ({op:?}): incarnation {incarnation} was put again after its delete",
                self.calls.len()
            ));
            return;
        }
        if let Some(checker) = &self.checker
            && let Err(why) = checker(&self.tables)
        {
            self.violation = Some(format!("after call #{} ({op:?}): {why}", self.calls.len()));
        }
    }

    fn run_hook(&mut self, op: Op) {
        if let Some(at) = self.hooks.iter().position(|(o, _)| *o == op)
            && let Some((_, hook)) = self.hooks.remove(at)
        {
            hook(&mut self.tables);
        }
    }
}

/// See the module documentation.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `fault` for the next call of `op` (faults of one op fire in order).
    pub fn inject(&self, op: Op, fault: Fault) {
        self.inner.lock().unwrap().faults.inject(op, fault);
    }

    /// Draws faults and transaction latency from `chaos` from now on.
    pub fn set_chaos(&self, chaos: Chaos) {
        self.inner.lock().unwrap().faults.set_chaos(chaos);
    }

    /// Stops drawing faults (queued ones still fire); transactions keep
    /// their latency, so concurrent ones still conflict.
    pub fn calm(&self) {
        self.inner.lock().unwrap().faults.calm();
    }

    /// Timestamps stream records with `clock` (default: always 0).
    pub fn set_clock(&self, clock: Clock) {
        self.inner.lock().unwrap().clock = Some(clock);
    }

    /// Runs `checker` on the tables after every write of counted items
    /// (resources, counters, limits); the first error is kept, with the
    /// call that caused it ([`Self::violation`]).
    pub fn set_checker(&self, checker: impl Fn(&Tables) -> Result<(), String> + Send + 'static) {
        self.inner.lock().unwrap().checker = Some(Box::new(checker));
    }

    /// The first invariant violation the checker saw.
    pub fn violation(&self) -> Option<String> {
        self.inner.lock().unwrap().violation.clone()
    }

    /// Faults injected so far (queued and drawn), by operation and kind.
    pub fn injected_faults(&self) -> BTreeMap<(Op, Fault), u64> {
        self.inner.lock().unwrap().faults.injected().clone()
    }

    /// Calls refused because an item was held by an in-flight transaction.
    pub fn lock_conflicts(&self) -> u64 {
        self.inner.lock().unwrap().locks.conflicts
    }

    /// Transactions cancelled with mixed reasons: `TransactionConflict`
    /// beside `ConditionalCheckFailed`.
    pub fn mixed_cancellations(&self) -> u64 {
        self.inner.lock().unwrap().locks.mixed_cancellations
    }

    /// Requests answered from a `ClientRequestToken`'s first success.
    pub fn token_replays(&self) -> u64 {
        self.inner.lock().unwrap().tokens.replays
    }

    /// Runs `hook` on the tables right after the next successful `op`, as a
    /// concurrent writer would.
    pub fn after_next(&self, op: Op, hook: impl FnOnce(&mut Tables) + Send + 'static) {
        self.inner.lock().unwrap().hooks.push_back((op, Box::new(hook)));
    }

    /// A copy of the tables.
    pub fn tables(&self) -> Tables {
        self.inner.lock().unwrap().tables.clone()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Op> {
        self.inner.lock().unwrap().calls.clone()
    }

    pub fn counter(&self, scope: &str, name: &str) -> i64 {
        let inner = self.inner.lock().unwrap();
        inner
            .tables
            .counters
            .get(&(scope.to_owned(), name.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// The best-effort counter of `scope`: the sum over its items
    /// (`best_effort`, `best_effort#n`), as every reader sees it.
    pub fn best_effort(&self, scope: &str) -> i64 {
        let inner = self.inner.lock().unwrap();
        inner
            .tables
            .counters
            .iter()
            .filter(|((s, name), _)| s == scope && keys::is_best_effort_name(name))
            .map(|(_, count)| count)
            .sum()
    }

    /// Sets a counters-table item, as an operator's repair does; its
    /// `updated_at` is the store's clock.
    pub fn set_counter(&self, scope: &str, name: &str, count: i64) {
        let mut inner = self.inner.lock().unwrap();
        inner.stamp();
        let now = inner.stream.now;
        inner.tables.set_counter(scope, name, count, now);
        inner.check(Op::AddBestEffort);
    }

    /// Puts a kit item of `scope` in the given state through
    /// [`RequestStore::put_resource`] (its INSERT record is appended), as a test
    /// sets a table up.
    pub async fn put_item(&self, scope: &str, id: &str, incarnation: &str, counted: bool, deleted: bool) {
        let item = crate::items::ResourceItem {
            scope: Scope::new(scope).expect("a valid scope"),
            id: crate::ids::ResourceId::new(id).expect("a valid id"),
            counter_processed: counted,
            deleted,
            incarnation: incarnation.to_owned(),
            created_at: 0,
            be_shard: None,
        };
        self.put_resource(&NewResource {
            item,
            payload: Item::default(),
        })
        .await
        .expect("the item is put");
    }

    /// Puts an item the kit did not write (no incarnation, no flags), as
    /// another writer of the table would; its INSERT record is appended.
    pub fn put_foreign(&self, scope: &str, id: &str, payload: Item) {
        let mut inner = self.inner.lock().unwrap();
        inner.stamp();
        let mut image = payload;
        image.insert(keys::SCOPE.to_owned(), AttributeValue::S(scope.to_owned()));
        image.insert(keys::ID.to_owned(), AttributeValue::S(id.to_owned()));
        let inner = &mut *inner;
        inner.stream.append(Event::Insert, None, Some(&image));
        inner.tables.resources.insert(
            (scope.to_owned(), id.to_owned()),
            MemResource {
                state: ResourceState {
                    counter_processed: false,
                    deleted: false,
                    incarnation: String::new(),
                    be_shard: None,
                },
                image,
            },
        );
    }

    /// A counter's `updated_at` (0 when it was never written).
    pub fn counter_updated_at(&self, scope: &str, name: &str) -> EpochMillis {
        let inner = self.inner.lock().unwrap();
        inner
            .tables
            .counters_updated_at
            .get(&(scope.to_owned(), name.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// The retained records of shard `shard_id` after `after` (from the
    /// trim horizon when `None`), at most `max`: `GetRecords` from
    /// `AFTER_SEQUENCE_NUMBER`. [`StoreError::Gone`] when records of the
    /// shard after `after` were trimmed.
    pub fn stream_read(&self, shard_id: &str, after: Option<&str>, max: usize) -> Result<Vec<Record>, StoreError> {
        self.inner.lock().unwrap().stream.read(shard_id, after, max)
    }

    /// The records of shard `shard_id` from `start` through `end`, both
    /// inclusive: `AT_SEQUENCE_NUMBER` then reading on.
    /// [`StoreError::Gone`] when `start` was trimmed.
    /// With [`Fault::ShortRead`] drawn for [`Op::StreamRange`], only a
    /// first part of the range is returned, as a reader that stops early
    /// does.
    pub fn stream_range(&self, shard_id: &str, start: &str, end: &str) -> Result<Vec<Record>, StoreError> {
        let mut inner = self.inner.lock().unwrap();
        let mut records = inner.stream.range(shard_id, start, end)?;
        if records.len() > 1 && inner.faults.next(Op::StreamRange) == Some(Fault::ShortRead) {
            let keep = match inner.faults.chaos.as_mut() {
                Some((_, rng)) => rng.usize(1..records.len()),
                None => records.len() - 1,
            };
            records.truncate(keep);
        }
        Ok(records)
    }

    /// The stream's shards, parents before children (the lineage a reader
    /// follows): every open shard, and every closed one that still holds a
    /// record (or never held any).
    pub fn stream_shards(&self) -> Vec<StreamShard> {
        self.inner.lock().unwrap().stream.listed_shards()
    }

    /// Splits open shard `shard_id`: it is closed and two children open;
    /// returns their ids. `None` when the shard is unknown or closed.
    ///
    /// As when a DynamoDB partition splits, an item's records go on in one
    /// child (its lineage), while the items of one scope may spread over
    /// both (split for heat), so a reader must finish a parent before it
    /// reads its children. Sequence numbers increase across the stream, so
    /// the records of one item are in order along its lineage.
    pub fn split_stream_shard(&self, shard_id: &str) -> Option<[String; 2]> {
        self.inner.lock().unwrap().stream.split(shard_id)
    }

    /// Every retained record, decoded with the production decoder.
    pub fn stream_changes(&self) -> Vec<Decoded> {
        self.inner.lock().unwrap().stream.changes()
    }

    /// Expires the records written before `cutoff`, as the stream's 24-hour
    /// retention does; returns how many. Reading a trimmed position fails
    /// with [`StoreError::Gone`], and a closed shard whose records all
    /// expired is no longer listed.
    pub fn trim_stream(&self, cutoff: EpochMillis) -> usize {
        self.inner.lock().unwrap().stream.trim(cutoff)
    }
}

/// The fixtures the tests of every file of the store share, and the
/// checker's test.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ResourceId;
    use crate::items::ResourceItem;
    use crate::store::{ResourceKey, StreamStore, Transaction};

    pub(super) fn key(id: &str) -> ResourceKey {
        ResourceKey {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new(id).unwrap(),
        }
    }

    pub(super) fn resource(id: &str, incarnation: &str) -> NewResource {
        let mut payload = Item::default();
        payload.insert("color".into(), AttributeValue::S("blue".into()));
        NewResource {
            item: ResourceItem {
                scope: Scope::new("acct").unwrap(),
                id: ResourceId::new(id).unwrap(),
                counter_processed: false,
                deleted: false,
                incarnation: incarnation.into(),
                created_at: 7,
                be_shard: None,
            },
            payload,
        }
    }

    pub(super) fn count_insert(id: &str, incarnation: &str) -> Transaction {
        crate::stream::plan::count_insert(&key(id), incarnation, crate::stream::plan::ShardChoice::SINGLE, 0)
    }

    #[tokio::test]
    async fn the_checker_reports_the_first_write_that_breaks_an_invariant() {
        let store = MemoryStore::new();
        store.set_checker(|t| {
            let ec = t
                .counters
                .get(&("acct".into(), "eventual".into()))
                .copied()
                .unwrap_or(0);
            let processed = t.resources.values().filter(|r| r.state.counter_processed).count() as i64;
            if ec == processed {
                Ok(())
            } else {
                Err(format!("EC {ec} != processed {processed}"))
            }
        });
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.transact(&count_insert("a", "i1")).await.unwrap();
        assert_eq!(store.violation(), None);
        store.set_counter("acct", "eventual", 5);
        assert!(store.violation().unwrap().contains("EC 5 != processed 1"));
    }
}
