//! A deterministic in-memory [`Store`]: a test double, not a database. It
//! implements exactly the semantics the kit relies on — conditional puts and
//! updates, all-or-nothing transactions with cancellation reasons in request
//! order, conflicts between concurrent transactions, and a
//! `NEW_AND_OLD_IMAGES` stream of the resources table — and lets a test
//! inject faults per operation, including the ambiguous kind where the write
//! is applied and the caller still sees an error. The emulator tests remain
//! the check against the real API.
//!
//! Every applied write of a resource item appends an `INSERT`, `MODIFY` or
//! `REMOVE` record (old and new images shaped like the real table's items)
//! as the Lambda event's [`Record`], the form the AWS layer turns a Streams
//! API record into, so readers decode it with the production path
//! ([`crate::stream::ChangeRecord::from_lambda`]). The stream starts with
//! one shard ([`STREAM_SHARD_ID`]); [`MemoryStore::split_stream_shard`]
//! closes an open shard and opens two children, as DynamoDB does when a
//! partition splits: an item's records go on in one child (its lineage),
//! while the items of one scope may spread over both (split for heat), so
//! a reader must finish a parent before it reads its children
//! ([`MemoryStore::stream_shards`] gives the lineage). Sequence numbers
//! increase across the stream, so the records of one item are in order
//! along its lineage. [`MemoryStore::trim_stream`] expires old records as
//! the 24-hour retention does; reading a trimmed position fails with
//! [`StoreError::Gone`], and a closed shard whose records all expired is
//! no longer listed.
//!
//! With [`Chaos`], faults are drawn per call from a seeded generator and a
//! transaction holds its items between prepare and commit for a seeded
//! (tokio) time: a write or transaction touching a held item meets
//! `TransactionConflict`, as on DynamoDB, with every other action's own
//! reason (`ConditionalCheckFailed` or `None`) beside it. An operator's
//! repair ([`Store::set_counters`]) is such a transaction too: it holds
//! every counter it sets, so writers of those items meet
//! `TransactionConflict` while it is in flight. The Queries of a scope's
//! items are read-committed item by item, never a snapshot
//! ([`Chaos::counter_read_latency`], [`Chaos::page_latency`]): a reader can
//! see a multi-item repair or transaction half applied, as on DynamoDB
//! ("Isolation levels for DynamoDB transactions",
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-isolation>:
//! `GetItem` is serializable against transactions, `Query` and `Scan` are
//! read-committed, item by item). A transaction may carry a
//! `ClientRequestToken` ([`MemoryStore::transact_write`]): a repeat within
//! 10 minutes is answered without a second apply, another request under
//! the same token is refused; [`Store::transact`] uses a fresh token per
//! call, as the SDK does per `send()`. Without
//! it, every call completes without awaiting, which keeps unit tests free
//! of a clock.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::dynamodb::{EventRecord as Record, StreamRecord, StreamViewType};
use serde_dynamo::{AttributeValue, Item};

use crate::error::{CancelReason, StoreError};
use crate::ids::Scope;
use crate::items::{CounterItem, CounterSnapshot, ItemRow, ResourceState};
use crate::keys;
use crate::store::{ItemWrite, NewResource, ResourceKey, SequenceClaim, SequenceEntry, Store, Transaction};
use crate::stream::process::Decoded;
use crate::stream::record::ChangeRecord;
use crate::time::EpochMillis;

/// The operations of [`Store`], to aim faults at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    ReadCounters,
    PutResource,
    AddBestEffort,
    /// Strict admission's conditional BE increment.
    ReserveBestEffort,
    GetResource,
    MarkDeleted,
    Transact,
    /// The consistent Query of a scope's counter items.
    CounterItems,
    /// One page of the paginated Query of a scope's resource items.
    ScopeItems,
    /// An operator's conditional write of counters (a repair).
    SetCounters,
    /// A strict raise of the best-effort shards (a repair that fences).
    RaiseBestEffort,
    /// Reading a sequence-number range back from the stream (a replay).
    StreamRange,
    /// The consistent read of a gapless sequence's last number.
    LastSequence,
    /// The transaction that claims a sequence number (same faults as
    /// [`Op::Transact`]; see [`Store::claim_sequence`]).
    ClaimSequence,
    /// The consistent read of one numbered sequence item.
    SequenceEntry,
    /// One page of the drift check's Scan of the counters table's keys.
    ScanCounterKeys,
    /// Reading or writing the drift check's state item.
    DriftState,
    /// The Scan of every limit override (the drift check's limits file).
    ScanLimits,
}

/// What an injected fault does to the next call of its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// A 500 before anything was written.
    Unavailable,
    /// Throttled before anything was written.
    Throttled,
    /// For transactions: cancelled with `TransactionConflict`; otherwise
    /// like [`Fault::Throttled`].
    Conflict,
    /// For transactions: the counter item is held by another transaction,
    /// and every resource item's own condition is evaluated: cancelled with
    /// `TransactionConflict` on the counter and `ConditionalCheckFailed` or
    /// `None` on each item, the mixed reasons DynamoDB sends. Nothing is
    /// written. Elsewhere like [`Fault::Conflict`].
    ConflictOnCounter,
    /// The service refuses the request itself (`ValidationException`).
    Rejected,
    /// The write is applied, then the caller gets a 500 (an ambiguous error).
    AppliedThenUnavailable,
    /// The write is applied, the answer is lost, and the SDK's own retry
    /// fails the write's condition: the caller sees `ConditionFailed`.
    AppliedThenConditionFailed,
    /// The write is applied and its answer lost. For a write the production
    /// store lets the SDK re-send ([`crate::store::Resend::BySdk`]) the
    /// next successful-call hook runs (other actors), the re-send waits up to
    /// [`Chaos::resend_delay`], then is applied again if its condition holds
    /// and the caller gets its answer. For a write sent once
    /// ([`crate::store::Resend::Never`]) the hook runs and the caller gets a
    /// 500. Aimed at [`Op::PutResource`] and [`Op::MarkDeleted`].
    AppliedThenResent,
    /// For [`Op::StreamRange`]: the read stops early and returns only the
    /// first part of the range, as a reader that gives up after empty
    /// `GetRecords` pages, or at a shard it takes for closed, does.
    ShortRead,
}

/// Seeded faults and transaction latency for simulations.
#[derive(Debug, Clone, Default)]
pub struct Chaos {
    pub seed: u64,
    /// `(op, fault, per_mille)`: each call of `op` draws `fault` with this
    /// chance, tried in order (the first fault drawn wins).
    pub faults: Vec<(Op, Fault, u32)>,
    /// A transaction holds its items for up to this long (uniform) between
    /// prepare and commit; zero commits at once.
    pub transaction_latency: Duration,
    /// A paginated Query of a scope's items waits up to this long (uniform)
    /// between two pages, so other writers land in the middle of one read.
    pub page_latency: Duration,
    /// A write answered [`Fault::AppliedThenResent`] is sent again after up
    /// to this long (uniform; zero: after one yield).
    pub resend_delay: Duration,
    /// Items per page of that Query (at least 1).
    pub page_size: usize,
    /// The Query of a scope's counter items ([`Store::read_counters`],
    /// [`Store::counter_items`]) waits up to this long (uniform) after each
    /// item it reads: DynamoDB's Query is read-committed item by item, not
    /// a snapshot, so a request or an audit can see a multi-item repair or
    /// a stream transaction half applied. Zero reads all items at once.
    pub counter_read_latency: Duration,
}

/// A resource item: its kit attributes, and its full image (kit attributes
/// plus the owner's payload) as the table holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemResource {
    pub state: ResourceState,
    pub image: Item,
}

/// The two tables.
#[derive(Debug, Default, Clone)]
pub struct Tables {
    pub resources: BTreeMap<(String, String), MemResource>,
    /// `(scope, name)` → count.
    pub counters: BTreeMap<(String, String), i64>,
    /// `(scope, name)` → the counter's `updated_at`: the `now` of its last
    /// write (the store's clock for [`MemoryStore::set_counter`]).
    pub counters_updated_at: BTreeMap<(String, String), EpochMillis>,
    /// `(scope, name)` → the counter's `version`, bumped by every write.
    pub counters_version: BTreeMap<(String, String), i64>,
    /// `(scope, name)` → a best-effort item's fence epoch, where it has one
    /// ([`crate::best_effort::Fence`]).
    pub counters_epoch: BTreeMap<(String, String), u64>,
    pub limits: BTreeMap<String, u64>,
    /// scope → the last number of its gapless sequence (the `sequence`
    /// item's `last_id`).
    pub sequences: BTreeMap<String, u64>,
    /// `(scope, n)` → the numbered sequence item `sequence#<n>`.
    pub sequence_items: BTreeMap<(String, u64), SequenceEntry>,
    /// The drift check's state item ([`crate::keys::KIT_STATE_SCOPE`]).
    pub drift_state: Option<crate::audit::drift::DriftCheckState>,
    /// Every incarnation a soft delete applied to: one of them put again
    /// is an item back after its delete, which the store reports as a
    /// violation ([`MemoryStore::violation`]) whatever the checker says.
    pub deleted_incarnations: std::collections::BTreeSet<String>,
    /// The incarnations put again after their delete, in order.
    pub resurrected: Vec<String>,
}

impl Tables {
    /// Adds `delta` to a counter, bumps its version and stamps its `updated_at`.
    fn add_counter(&mut self, scope: &str, name: &str, delta: i64, now: EpochMillis) {
        let key = (scope.to_owned(), name.to_owned());
        *self.counters.entry(key.clone()).or_default() += delta;
        *self.counters_version.entry(key.clone()).or_default() += 1;
        self.counters_updated_at.insert(key, now);
    }

    /// Sets a counter, bumps its version and stamps its `updated_at`.
    fn set_counter(&mut self, scope: &str, name: &str, count: i64, now: EpochMillis) {
        let key = (scope.to_owned(), name.to_owned());
        self.counters.insert(key.clone(), count);
        *self.counters_version.entry(key.clone()).or_default() += 1;
        self.counters_updated_at.insert(key, now);
    }
}

impl MemResource {
    /// Whether the kit wrote this item (it carries an incarnation).
    pub fn is_kits(&self) -> bool {
        self.image.contains_key(keys::INCARNATION)
    }
}

/// The id of the in-memory stream's first shard (the root of every split).
pub const STREAM_SHARD_ID: &str = "shardId-00000000000000000001-memory";

/// The id of shard number `index` (0 is [`STREAM_SHARD_ID`]).
fn shard_id(index: usize) -> String {
    format!("shardId-{:020}-memory", index + 1)
}

/// One shard of the in-memory stream, as `DescribeStream` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamShard {
    pub shard_id: String,
    pub parent_shard_id: Option<String>,
    /// Closed: it gets no more records (it was split).
    pub closed: bool,
}

/// Sequence numbers start here so they have the width of real ones.
const FIRST_SEQUENCE: u64 = 100_000_000_000_000_000;

/// The text form of sequence number `n` (0-based).
pub fn sequence_number(n: u64) -> String {
    (FIRST_SEQUENCE + n).to_string()
}

fn parse_sequence(text: &str) -> Option<u64> {
    text.parse::<u64>().ok()?.checked_sub(FIRST_SEQUENCE)
}

/// The ARN the in-memory stream's records carry.
pub const STREAM_ARN: &str = "arn:aws:dynamodb:us-east-1:000000000000:table/memory/stream/memory";

/// The event name of a stream record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Insert,
    Modify,
    Remove,
}

impl Event {
    fn as_str(self) -> &'static str {
        match self {
            Event::Insert => "INSERT",
            Event::Modify => "MODIFY",
            Event::Remove => "REMOVE",
        }
    }
}

/// One retained stream record.
#[derive(Debug, Clone)]
struct StreamEntry {
    n: u64,
    /// Index of its shard in [`Stream::shards`].
    shard: usize,
    at: EpochMillis,
    record: Record,
}

/// A shard of the stream: its parent and, once split, its two children.
#[derive(Debug, Clone, Default)]
struct ShardState {
    parent: Option<usize>,
    children: Option<[usize; 2]>,
    /// Every record of this shard numbered below this one has been trimmed.
    trimmed_below: u64,
    /// Records appended to it, ever.
    appended: u64,
    /// Of those, trimmed.
    trimmed: u64,
}

#[derive(Debug)]
struct Stream {
    records: VecDeque<StreamEntry>,
    next: u64,
    shards: Vec<ShardState>,
    /// Timestamp of the records appended by the current call.
    now: EpochMillis,
}

impl Default for Stream {
    fn default() -> Self {
        Self {
            records: VecDeque::new(),
            next: 0,
            shards: vec![ShardState::default()],
            now: 0,
        }
    }
}

impl Stream {
    /// The open shard an item's next record goes to: down its lineage from
    /// the first shard, each split sending it to the child its key hashes to.
    fn shard_of(&self, keys: &Item) -> usize {
        let text = |k: &str| match keys.get(k) {
            Some(AttributeValue::S(s)) => s.clone(),
            _ => String::new(),
        };
        let key = format!("{}\u{0}{}", text(keys::SCOPE), text(keys::ID));
        let mut at = 0;
        let mut depth = 0u64;
        while let Some(children) = self.shards[at].children {
            let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325 ^ depth, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
            at = children[usize::from(hash % 2 == 1)];
            depth += 1;
        }
        at
    }

    /// Index of the shard named `shard_id`.
    fn shard_index(&self, shard_id: &str) -> Result<usize, StoreError> {
        (0..self.shards.len())
            .find(|&i| self::shard_id(i) == shard_id)
            .ok_or_else(|| StoreError::Rejected(format!("ResourceNotFoundException: no shard {shard_id}")))
    }

    fn append(&mut self, event: Event, old: Option<&Item>, new: Option<&Item>) {
        let n = self.next;
        self.next += 1;
        let any = new.or(old).expect("a record has an image");
        let keys: Item = [keys::SCOPE, keys::ID]
            .iter()
            .filter_map(|k| any.get(*k).map(|v| ((*k).to_owned(), v.clone())))
            .collect::<std::collections::HashMap<_, _>>()
            .into();
        let size = [Some(&keys), old, new]
            .into_iter()
            .flatten()
            .map(item_size)
            .sum::<usize>();
        let mut data = StreamRecord::default();
        data.approximate_creation_date_time = chrono::DateTime::from_timestamp_millis(self.now).unwrap_or_default();
        data.keys = keys;
        data.new_image = new.cloned().unwrap_or_default();
        data.old_image = old.cloned().unwrap_or_default();
        data.sequence_number = Some(sequence_number(n));
        data.size_bytes = i64::try_from(size).unwrap_or(i64::MAX);
        data.stream_view_type = Some(StreamViewType::NewAndOldImages);
        let mut record = Record::default();
        record.event_id = format!("{n:032x}");
        record.event_name = event.as_str().to_owned();
        record.event_version = Some("1.1".to_owned());
        record.event_source = Some("aws:dynamodb".to_owned());
        record.aws_region = "us-east-1".to_owned();
        record.event_source_arn = Some(STREAM_ARN.to_owned());
        record.change = data;
        let shard = self.shard_of(&record.change.keys);
        self.shards[shard].appended += 1;
        self.records.push_back(StreamEntry {
            n,
            shard,
            at: self.now,
            record,
        });
    }
}

fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + format!("{v:?}").len()).sum()
}

/// An item a transaction holds between prepare and commit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum LockKey {
    Resource(String, String),
    Counter(String, String),
}

type Hook = Box<dyn FnOnce(&mut Tables) + Send>;
type Checker = Box<dyn Fn(&Tables) -> Result<(), String> + Send>;
/// The current time for the stream's records.
pub type Clock = Arc<dyn Fn() -> EpochMillis + Send + Sync>;

#[derive(Default)]
struct Inner {
    tables: Tables,
    stream: Stream,
    faults: VecDeque<(Op, Fault)>,
    /// Runs right after the next successful call of its operation.
    hooks: VecDeque<(Op, Hook)>,
    calls: Vec<Op>,
    chaos: Option<(Chaos, fastrand::Rng)>,
    locks: BTreeMap<LockKey, u64>,
    next_transaction: u64,
    injected: BTreeMap<(Op, Fault), u64>,
    lock_conflicts: u64,
    mixed_cancellations: u64,
    clock: Option<Clock>,
    checker: Option<Checker>,
    violation: Option<String>,
    /// `ClientRequestToken`s of applied transactions, while their window lasts.
    tokens: BTreeMap<String, TokenUse>,
    tokens_in_flight: std::collections::BTreeSet<String>,
    next_token: u64,
    token_replays: u64,
    /// The operation whose last call drew [`Fault::AppliedThenResent`]
    /// (see [`MemoryStore::resendable`]).
    resend_pending: Option<Op>,
}

/// How long a `ClientRequestToken` makes a transaction idempotent: "valid
/// for 10 minutes after the first request that uses it is completed"
/// ([`MemoryStore::transact_write`]).
pub const CLIENT_REQUEST_TOKEN_WINDOW_MS: EpochMillis = 10 * 60 * 1_000;

/// An applied transaction's token: what it asked, and when it completed.
#[derive(Debug, Clone)]
struct TokenUse {
    request: Transaction,
    completed_at: EpochMillis,
}

impl Inner {
    /// The fault for this call of `op`: a queued one first, else a drawn one.
    fn next_fault(&mut self, op: Op) -> Option<Fault> {
        let queued = self
            .faults
            .iter()
            .position(|(o, _)| *o == op)
            .and_then(|at| self.faults.remove(at))
            .map(|(_, f)| f);
        let fault = queued.or_else(|| {
            let (chaos, rng) = self.chaos.as_mut()?;
            chaos
                .faults
                .iter()
                .find(|(o, _, per_mille)| *o == op && rng.u32(0..1000) < *per_mille)
                .map(|(_, f, _)| *f)
        });
        if let Some(f) = fault {
            *self.injected.entry((op, f)).or_default() += 1;
        }
        fault
    }

    /// Counts a cancellation with `TransactionConflict` beside
    /// `ConditionalCheckFailed`.
    fn note_cancellation(&mut self, reasons: &[CancelReason]) {
        if reasons.contains(&CancelReason::TransactionConflict)
            && reasons.contains(&CancelReason::ConditionalCheckFailed)
        {
            self.mixed_cancellations += 1;
        }
    }

    fn stamp(&mut self) {
        self.stream.now = self.clock.as_ref().map_or(0, |clock| clock());
    }

    fn held(&self, keys: &[LockKey]) -> bool {
        keys.iter().any(|k| self.locks.contains_key(k))
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

fn key_of(key: &ResourceKey) -> (String, String) {
    (key.scope.to_string(), key.id.to_string())
}

fn resource_lock(key: &ResourceKey) -> LockKey {
    LockKey::Resource(key.scope.to_string(), key.id.to_string())
}

fn conflict(what: &str) -> StoreError {
    StoreError::Transient(format!("TransactionConflict: {what} is being changed by a transaction"))
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `fault` for the next call of `op` (faults of one op fire in order).
    pub fn inject(&self, op: Op, fault: Fault) {
        self.inner.lock().unwrap().faults.push_back((op, fault));
    }

    /// Draws faults and transaction latency from `chaos` from now on.
    pub fn set_chaos(&self, chaos: Chaos) {
        let rng = fastrand::Rng::with_seed(chaos.seed);
        self.inner.lock().unwrap().chaos = Some((chaos, rng));
    }

    /// Stops drawing faults (queued ones still fire); transactions keep
    /// their latency, so concurrent ones still conflict.
    pub fn calm(&self) {
        if let Some((chaos, _)) = self.inner.lock().unwrap().chaos.as_mut() {
            chaos.faults.clear();
        }
    }

    /// Timestamps stream records with `clock` (default: always 0).
    pub fn set_clock(&self, clock: Clock) {
        self.inner.lock().unwrap().clock = Some(clock);
    }

    /// Runs `checker` on the tables after every applied write; the first
    /// error is kept, with the call that caused it ([`Self::violation`]).
    pub fn set_checker(&self, checker: impl Fn(&Tables) -> Result<(), String> + Send + 'static) {
        self.inner.lock().unwrap().checker = Some(Box::new(checker));
    }

    /// The first invariant violation the checker saw.
    pub fn violation(&self) -> Option<String> {
        self.inner.lock().unwrap().violation.clone()
    }

    /// Faults injected so far (queued and drawn), by operation and kind.
    pub fn injected_faults(&self) -> BTreeMap<(Op, Fault), u64> {
        self.inner.lock().unwrap().injected.clone()
    }

    /// Calls refused because an item was held by an in-flight transaction.
    pub fn lock_conflicts(&self) -> u64 {
        self.inner.lock().unwrap().lock_conflicts
    }

    /// Transactions cancelled with mixed reasons: `TransactionConflict`
    /// beside `ConditionalCheckFailed`.
    pub fn mixed_cancellations(&self) -> u64 {
        self.inner.lock().unwrap().mixed_cancellations
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
    /// [`Store::put_resource`] (its INSERT record is appended), as a test
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

    /// Sets the per-scope limit override, as `counterctl limit set` does
    /// (`None` clears it).
    pub fn set_limit(&self, scope: &str, limit: Option<u64>) {
        let mut inner = self.inner.lock().unwrap();
        match limit {
            Some(limit) => inner.tables.limits.insert(scope.to_owned(), limit),
            None => inner.tables.limits.remove(scope),
        };
    }

    /// The retained records of shard `shard_id` after `after` (from the
    /// trim horizon when `None`), at most `max`: `GetRecords` from
    /// `AFTER_SEQUENCE_NUMBER`. [`StoreError::Gone`] when records of the
    /// shard after `after` were trimmed.
    pub fn stream_read(&self, shard_id: &str, after: Option<&str>, max: usize) -> Result<Vec<Record>, StoreError> {
        let inner = self.inner.lock().unwrap();
        let shard = inner.stream.shard_index(shard_id)?;
        let from = match after {
            None => 0,
            Some(seq) => parse_sequence(seq).ok_or_else(|| bad_sequence(seq))? + 1,
        };
        if from < inner.stream.shards[shard].trimmed_below && after.is_some() {
            return Err(StoreError::Gone(format!(
                "TrimmedDataAccessException: records after {} were trimmed",
                after.unwrap_or_default()
            )));
        }
        Ok(inner
            .stream
            .records
            .iter()
            .filter(|e| e.shard == shard && e.n >= from)
            .take(max)
            .map(|e| e.record.clone())
            .collect())
    }

    /// The records of shard `shard_id` from `start` through `end`, both
    /// inclusive: `AT_SEQUENCE_NUMBER` then reading on.
    /// [`StoreError::Gone`] when `start` was trimmed.
    /// With [`Fault::ShortRead`] drawn for [`Op::StreamRange`], only a
    /// first part of the range is returned, as a reader that stops early
    /// does.
    pub fn stream_range(&self, shard_id: &str, start: &str, end: &str) -> Result<Vec<Record>, StoreError> {
        let mut inner = self.inner.lock().unwrap();
        let shard = inner.stream.shard_index(shard_id)?;
        let first = parse_sequence(start).ok_or_else(|| bad_sequence(start))?;
        let last = parse_sequence(end).ok_or_else(|| bad_sequence(end))?;
        if first < inner.stream.shards[shard].trimmed_below {
            return Err(StoreError::Gone(format!(
                "TrimmedDataAccessException: {start} is beyond the trim horizon"
            )));
        }
        let mut records: Vec<Record> = inner
            .stream
            .records
            .iter()
            .filter(|e| e.shard == shard && (first..=last).contains(&e.n))
            .map(|e| e.record.clone())
            .collect();
        if records.len() > 1 && inner.next_fault(Op::StreamRange) == Some(Fault::ShortRead) {
            let keep = match inner.chaos.as_mut() {
                Some((_, rng)) => rng.usize(1..records.len()),
                None => records.len() - 1,
            };
            records.truncate(keep);
        }
        Ok(records)
    }

    /// The stream's shards, parents before children: every open shard,
    /// and every closed one that still holds a record (or never held any).
    pub fn stream_shards(&self) -> Vec<StreamShard> {
        let inner = self.inner.lock().unwrap();
        inner
            .stream
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.children.is_none() || s.appended == 0 || s.trimmed < s.appended)
            .map(|(i, s)| StreamShard {
                shard_id: shard_id(i),
                parent_shard_id: s.parent.map(shard_id),
                closed: s.children.is_some(),
            })
            .collect()
    }

    /// Splits open shard `shard_id`: it is closed and two children open;
    /// returns their ids. `None` when the shard is unknown or closed.
    pub fn split_stream_shard(&self, shard_id: &str) -> Option<[String; 2]> {
        let mut inner = self.inner.lock().unwrap();
        let stream = &mut inner.stream;
        let at = stream.shard_index(shard_id).ok()?;
        if stream.shards[at].children.is_some() {
            return None;
        }
        let children = [stream.shards.len(), stream.shards.len() + 1];
        for _ in children {
            stream.shards.push(ShardState {
                parent: Some(at),
                ..ShardState::default()
            });
        }
        stream.shards[at].children = Some(children);
        Some(children.map(self::shard_id))
    }

    /// Every retained record, decoded with the production decoder.
    pub fn stream_changes(&self) -> Vec<Decoded> {
        let inner = self.inner.lock().unwrap();
        inner
            .stream
            .records
            .iter()
            .map(|e| ChangeRecord::from_lambda(&e.record))
            .collect()
    }

    /// Expires the records written before `cutoff`; returns how many.
    pub fn trim_stream(&self, cutoff: EpochMillis) -> usize {
        let mut inner = self.inner.lock().unwrap();
        let stream = &mut inner.stream;
        let mut trimmed = 0;
        while stream.records.front().is_some_and(|e| e.at < cutoff) {
            let entry = stream.records.pop_front().expect("checked");
            let shard = &mut stream.shards[entry.shard];
            shard.trimmed_below = entry.n + 1;
            shard.trimmed += 1;
            trimmed += 1;
        }
        trimmed
    }

    /// The sequence number of the newest record, if any was written.
    pub fn stream_latest(&self) -> Option<String> {
        let inner = self.inner.lock().unwrap();
        inner.stream.next.checked_sub(1).map(sequence_number)
    }

    /// Runs one plain call: consumes a fault aimed at `op`, refuses it if
    /// it touches an item held by a transaction, applies `write` unless the
    /// fault prevents it, checks the invariants, then runs a hook aimed at `op`.
    fn call<T>(
        &self,
        op: Op,
        touches: &[LockKey],
        write: impl FnOnce(&mut Tables, &mut Stream) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.call_with(op, touches, true, write)
    }

    /// A write sent as `resend` says ([`crate::store::sends`]): a call that
    /// draws [`Fault::AppliedThenResent`] is applied, then (for
    /// [`Resend::BySdk`](crate::store::Resend::BySdk)) sent again after
    /// [`Chaos::resend_delay`] without a fault of its own, and the caller
    /// gets the re-send's answer; a write sent once gets a 500.
    async fn resendable(
        &self,
        op: Op,
        resend: crate::store::Resend,
        touches: &[LockKey],
        write: impl Fn(&mut Tables, &mut Stream) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let first = self.call(op, touches, &write);
        let delay = {
            let mut inner = self.inner.lock().unwrap();
            if inner.resend_pending.take() != Some(op) || resend == crate::store::Resend::Never {
                return first;
            }
            match inner.chaos.as_mut() {
                Some((chaos, rng)) if !chaos.resend_delay.is_zero() => {
                    let max = u64::try_from(chaos.resend_delay.as_micros()).unwrap_or(u64::MAX);
                    Duration::from_micros(rng.u64(0..=max))
                }
                _ => Duration::ZERO,
            }
        };
        if delay.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(delay).await;
        }
        self.call_with(op, touches, false, &write)
    }

    fn call_with<T>(
        &self,
        op: Op,
        touches: &[LockKey],
        faults: bool,
        write: impl FnOnce(&mut Tables, &mut Stream) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut inner = self.inner.lock().unwrap();
        inner.calls.push(op);
        inner.stamp();
        let fault = if faults { inner.next_fault(op) } else { None };
        if matches!(
            fault,
            None | Some(Fault::AppliedThenUnavailable | Fault::AppliedThenConditionFailed | Fault::AppliedThenResent)
        ) && inner.held(touches)
        {
            inner.lock_conflicts += 1;
            return Err(conflict("the item"));
        }
        let inner = &mut *inner;
        let result = match fault {
            Some(Fault::Unavailable) => return Err(StoreError::Unavailable("injected 500".into())),
            Some(Fault::Throttled) => return Err(StoreError::Transient("injected throttle".into())),
            Some(Fault::Rejected) => return Err(StoreError::Rejected("injected validation error".into())),
            Some(Fault::Conflict | Fault::ConflictOnCounter) if op == Op::Transact => {
                return Err(StoreError::Cancelled {
                    reasons: vec![CancelReason::TransactionConflict],
                });
            }
            Some(Fault::Conflict | Fault::ConflictOnCounter) => {
                return Err(StoreError::Transient("injected conflict".into()));
            }
            Some(Fault::AppliedThenUnavailable) => {
                let _ = write(&mut inner.tables, &mut inner.stream);
                Err(StoreError::Unavailable(
                    "injected 500 after the write was applied".into(),
                ))
            }
            Some(Fault::AppliedThenConditionFailed) => {
                let _ = write(&mut inner.tables, &mut inner.stream);
                Err(StoreError::ConditionFailed)
            }
            Some(Fault::AppliedThenResent) => {
                let applied = write(&mut inner.tables, &mut inner.stream);
                if applied.is_ok() {
                    inner.check(op);
                    inner.run_hook(op);
                }
                inner.resend_pending = Some(op);
                return Err(StoreError::Unavailable(
                    "injected 500 after the write was applied (the answer was lost)".into(),
                ));
            }
            // Only reads of the stream are cut short.
            Some(Fault::ShortRead) | None => write(&mut inner.tables, &mut inner.stream),
        };
        if !touches.is_empty() {
            inner.check(op);
        }
        if result.is_ok() {
            inner.run_hook(op);
        }
        result
    }

    /// The Query of `scope`'s counter items (the `limit` override among
    /// them), read-committed item by item in key order: after each item it
    /// waits up to [`Chaos::counter_read_latency`], so writes land between
    /// the items of one read; an item written behind the cursor is missed,
    /// one ahead of it is seen. A fault aimed at `op` fails the whole read.
    async fn query_counters(&self, op: Op, scope: &Scope) -> Result<Vec<CounterItem>, StoreError> {
        let next_after = |t: &Tables, cursor: Option<&str>| -> Option<CounterItem> {
            let mut names: Vec<&str> = t
                .counters
                .keys()
                .filter(|(s, _)| s == scope.as_str())
                .map(|(_, name)| name.as_str())
                .collect();
            if t.limits.contains_key(scope.as_str()) {
                names.push(keys::LIMIT_NAME);
            }
            let name = names
                .into_iter()
                .filter(|name| cursor.is_none_or(|c| *name > c))
                .min()?;
            if name == keys::LIMIT_NAME {
                return Some(CounterItem {
                    scope: scope.to_string(),
                    name: name.to_owned(),
                    count: 0,
                    version: 0,
                    updated_at: 0,
                    epoch: None,
                    limit: t.limits.get(scope.as_str()).copied(),
                });
            }
            let key = (scope.to_string(), name.to_owned());
            Some(CounterItem {
                scope: key.0.clone(),
                name: key.1.clone(),
                count: t.counters.get(&key).copied().unwrap_or(0),
                version: t.counters_version.get(&key).copied().unwrap_or(0),
                updated_at: t.counters_updated_at.get(&key).copied().unwrap_or(0),
                epoch: t.counters_epoch.get(&key).copied(),
                limit: None,
            })
        };
        let mut items: Vec<CounterItem> = Vec::new();
        let mut next = self.call(op, &[], |t, _| Ok(next_after(t, None)))?;
        while let Some(item) = next {
            items.push(item);
            let pause = {
                let mut inner = self.inner.lock().unwrap();
                match inner.chaos.as_mut() {
                    Some((chaos, rng)) if !chaos.counter_read_latency.is_zero() => {
                        let max = u64::try_from(chaos.counter_read_latency.as_micros()).unwrap_or(u64::MAX);
                        Duration::from_micros(rng.u64(0..=max))
                    }
                    _ => Duration::ZERO,
                }
            };
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            let cursor = items.last().map(|i| i.name.clone());
            next = next_after(&self.inner.lock().unwrap().tables, cursor.as_deref());
        }
        Ok(items)
    }

    /// Items per page of [`Store::scope_items`] and the pause before the
    /// next page (drawn from the chaos generator; none without chaos).
    fn page_shape(&self) -> (usize, Duration) {
        let mut inner = self.inner.lock().unwrap();
        match inner.chaos.as_mut() {
            Some((chaos, rng)) => {
                let size = chaos.page_size.max(1);
                let max = u64::try_from(chaos.page_latency.as_micros()).unwrap_or(u64::MAX);
                (size, Duration::from_micros(if max == 0 { 0 } else { rng.u64(0..=max) }))
            }
            None => (usize::MAX, Duration::ZERO),
        }
    }

    /// Phase one of a transaction: validation, fault, conflict check, and
    /// holding its items. `Ok` carries the fault to report after commit,
    /// the time to hold the items, and the transaction's id.
    ///
    /// A transaction that meets an item held by another is cancelled with
    /// `TransactionConflict` on that item and, on every other action,
    /// `own_reason` (its condition evaluated, as DynamoDB reports it).
    fn prepare(
        &self,
        op: Op,
        holds: &[LockKey],
        own_reason: &dyn Fn(&Tables, usize) -> CancelReason,
    ) -> Result<(Option<Fault>, Duration, u64), StoreError> {
        let mut inner = self.inner.lock().unwrap();
        inner.calls.push(op);
        let distinct: std::collections::BTreeSet<&LockKey> = holds.iter().collect();
        if distinct.len() != holds.len() || holds.len() > 100 {
            return Err(StoreError::Rejected(
                "ValidationException: a transaction has at most 100 actions on distinct items".into(),
            ));
        }
        let fault = inner.next_fault(op);
        match fault {
            Some(Fault::Unavailable) => return Err(StoreError::Unavailable("injected 500".into())),
            Some(Fault::Throttled) => {
                return Err(StoreError::Cancelled {
                    reasons: holds.iter().map(|_| CancelReason::Throttled).collect(),
                });
            }
            Some(Fault::Rejected) => return Err(StoreError::Rejected("injected validation error".into())),
            Some(Fault::Conflict) => {
                return Err(StoreError::Cancelled {
                    reasons: vec![CancelReason::TransactionConflict],
                });
            }
            Some(Fault::ConflictOnCounter) if op != Op::Transact => {
                return Err(StoreError::Cancelled {
                    reasons: vec![CancelReason::TransactionConflict],
                });
            }
            _ => {}
        }
        if inner.held(holds) {
            inner.lock_conflicts += 1;
            let reasons = holds
                .iter()
                .enumerate()
                .map(|(at, k)| {
                    if inner.locks.contains_key(k) {
                        CancelReason::TransactionConflict
                    } else {
                        own_reason(&inner.tables, at)
                    }
                })
                .collect::<Vec<_>>();
            inner.note_cancellation(&reasons);
            return Err(StoreError::Cancelled { reasons });
        }
        let latency = match inner.chaos.as_mut() {
            Some((chaos, rng)) if !chaos.transaction_latency.is_zero() => {
                let max = u64::try_from(chaos.transaction_latency.as_micros()).unwrap_or(u64::MAX);
                Duration::from_micros(rng.u64(1..=max))
            }
            _ => Duration::ZERO,
        };
        inner.next_transaction += 1;
        let id = inner.next_transaction;
        if !latency.is_zero() {
            for key in holds {
                inner.locks.insert(key.clone(), id);
            }
        }
        Ok((fault, latency, id))
    }

    /// Phase two: evaluates the conditions, applies all or nothing, releases
    /// the items. The answer, and whether the transaction was applied.
    fn commit(
        &self,
        tx: &Transaction,
        holds: &[LockKey],
        fault: Option<Fault>,
        id: u64,
    ) -> (Result<(), StoreError>, bool) {
        let mut inner = self.inner.lock().unwrap();
        inner.locks.retain(|k, holder| *holder != id || !holds.contains(k));
        if fault == Some(Fault::ConflictOnCounter) {
            let reasons = tx
                .counter
                .iter()
                .map(|_| CancelReason::TransactionConflict)
                .chain(tx.items.iter().map(|write| {
                    if condition_holds(&inner.tables, write) {
                        CancelReason::None
                    } else {
                        CancelReason::ConditionalCheckFailed
                    }
                }))
                .collect::<Vec<_>>();
            inner.note_cancellation(&reasons);
            return (Err(StoreError::Cancelled { reasons }), false);
        }
        inner.stamp();
        let inner = &mut *inner;
        let result = apply_transaction(&mut inner.tables, &mut inner.stream, tx);
        inner.check(Op::Transact);
        let applied = result.is_ok();
        let answer = match fault {
            Some(Fault::AppliedThenUnavailable) => Err(StoreError::Unavailable(
                "injected 500 after the transaction was applied".into(),
            )),
            // Applied, answer lost, and a retry that is a new request (no
            // ClientRequestToken, or one past its window, or an emulator
            // that does not honour it) fails every item's condition (the
            // counter's update has none). Had the first attempt not been
            // applied, its own reasons are the answer.
            Some(Fault::AppliedThenConditionFailed) if result.is_ok() => Err(StoreError::Cancelled {
                reasons: tx
                    .counter
                    .iter()
                    .map(|_| CancelReason::None)
                    .chain(tx.items.iter().map(|_| CancelReason::ConditionalCheckFailed))
                    .collect(),
            }),
            Some(Fault::AppliedThenConditionFailed) => result,
            _ => {
                if result.is_ok() {
                    inner.run_hook(Op::Transact);
                }
                result
            }
        };
        (answer, applied)
    }

    /// One `TransactWriteItems` request: prepare, hold, commit. The answer,
    /// and whether it was applied.
    async fn transact_once(&self, tx: &Transaction) -> (Result<(), StoreError>, bool) {
        let mut holds: Vec<LockKey> = Vec::with_capacity(tx.actions_len());
        if let Some(c) = &tx.counter {
            holds.push(LockKey::Counter(c.scope.to_string(), c.name.clone()));
        }
        holds.extend(tx.items.iter().map(|w| resource_lock(w.key())));
        let first_item = usize::from(tx.counter.is_some());
        let own_reason = |t: &Tables, at: usize| match at.checked_sub(first_item).map(|i| &tx.items[i]) {
            Some(write) if !condition_holds(t, write) => CancelReason::ConditionalCheckFailed,
            _ => CancelReason::None,
        };
        let (fault, latency, id) = match self.prepare(Op::Transact, &holds, &own_reason) {
            Ok(prepared) => prepared,
            Err(err) => return (Err(err), false),
        };
        if !latency.is_zero() {
            // Held items meet TransactionConflict until the commit. A
            // transaction dropped here would keep them: the simulation never
            // cancels one.
            tokio::time::sleep(latency).await;
        }
        self.commit(tx, &holds, fault, id)
    }

    /// `TransactWriteItems` with an optional `ClientRequestToken`, as
    /// DynamoDB answers it ("TransactWriteItems", Amazon DynamoDB API
    /// Reference,
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>):
    /// the same token with the same request within
    /// [`CLIENT_REQUEST_TOKEN_WINDOW_MS`] of the first one's completion
    /// succeeds again without applying anything; with another request it is
    /// refused with `IdempotentParameterMismatch`; while the first is still
    /// in flight, `TransactionInProgressException`. Only an applied request
    /// keeps its token (the documented case: "if the original
    /// TransactWriteItems call was successful"); past the window the token
    /// is new again. Times are the store's clock ([`MemoryStore::set_clock`]).
    pub async fn transact_write(&self, tx: &Transaction, token: Option<&str>) -> Result<(), StoreError> {
        let Some(token) = token else {
            return self.transact_once(tx).await.0;
        };
        {
            let mut inner = self.inner.lock().unwrap();
            inner.stamp();
            let now = inner.stream.now;
            inner
                .tokens
                .retain(|_, used| now - used.completed_at < CLIENT_REQUEST_TOKEN_WINDOW_MS);
            if let Some(used) = inner.tokens.get(token) {
                if used.request != *tx {
                    return Err(StoreError::Rejected(format!(
                        "IdempotentParameterMismatch: ClientRequestToken {token} was used with another request"
                    )));
                }
                inner.token_replays += 1;
                return Ok(());
            }
            if !inner.tokens_in_flight.insert(token.to_owned()) {
                return Err(StoreError::Transient(format!(
                    "TransactionInProgressException: a request with ClientRequestToken {token} is in progress"
                )));
            }
        }
        let (answer, applied) = self.transact_once(tx).await;
        let mut inner = self.inner.lock().unwrap();
        inner.tokens_in_flight.remove(token);
        if applied {
            inner.stamp();
            let completed_at = inner.stream.now;
            inner.tokens.insert(
                token.to_owned(),
                TokenUse {
                    request: tx.clone(),
                    completed_at,
                },
            );
        }
        answer
    }

    /// Requests answered from a `ClientRequestToken`'s first success.
    pub fn token_replays(&self) -> u64 {
        self.inner.lock().unwrap().token_replays
    }
}

/// Evaluates both conditions of a sequence claim, then writes both items or
/// neither (reasons in the claim's action order: `sequence`, then
/// `sequence#<n>`).
fn apply_claim(t: &mut Tables, claim: &SequenceClaim) -> Result<(), StoreError> {
    let scope = claim.scope.to_string();
    let reason = |holds: bool| {
        if holds {
            CancelReason::None
        } else {
            CancelReason::ConditionalCheckFailed
        }
    };
    let last_holds = t.sequences.get(&scope).copied() == claim.previous();
    let absent = !t.sequence_items.contains_key(&(scope.clone(), claim.number));
    if !(last_holds && absent) {
        return Err(StoreError::Cancelled {
            reasons: vec![reason(last_holds), reason(absent)],
        });
    }
    t.sequences.insert(scope.clone(), claim.number);
    t.sequence_items.insert(
        (scope, claim.number),
        SequenceEntry {
            number: claim.number,
            token: claim.token.clone(),
            owner: claim.owner.clone(),
            claimed_at: claim.now,
        },
    );
    Ok(())
}

fn bad_sequence(seq: &str) -> StoreError {
    StoreError::Rejected(format!(
        "ValidationException: {seq:?} is not a sequence number of this stream"
    ))
}

/// Checks one item write's condition against the tables.
fn condition_holds(tables: &Tables, write: &ItemWrite) -> bool {
    let item = tables.resources.get(&key_of(write.key()));
    match (write, item) {
        (_, None) => false,
        (ItemWrite::MarkCounted { incarnation, .. }, Some(r)) => {
            !r.state.counter_processed && r.state.incarnation == *incarnation
        }
        (ItemWrite::DeleteCounted { incarnation, .. }, Some(r)) => {
            r.state.deleted && r.state.counter_processed && r.state.incarnation == *incarnation
        }
        (ItemWrite::DeleteUncounted { incarnation, .. }, Some(r)) => {
            r.state.deleted && !r.state.counter_processed && r.state.incarnation == *incarnation
        }
    }
}

fn apply_transaction(t: &mut Tables, stream: &mut Stream, tx: &Transaction) -> Result<(), StoreError> {
    let mut reasons = Vec::with_capacity(tx.actions_len());
    if tx.counter.is_some() {
        reasons.push(CancelReason::None);
    }
    for write in &tx.items {
        reasons.push(if condition_holds(t, write) {
            CancelReason::None
        } else {
            CancelReason::ConditionalCheckFailed
        });
    }
    if reasons.iter().any(|r| *r != CancelReason::None) {
        return Err(StoreError::Cancelled { reasons });
    }
    if let Some(delta) = &tx.counter {
        t.add_counter(delta.scope.as_str(), &delta.name, delta.delta, tx.now);
    }
    for write in &tx.items {
        let key = key_of(write.key());
        match write {
            ItemWrite::MarkCounted { .. } => {
                if let Some(r) = t.resources.get_mut(&key) {
                    let old = r.image.clone();
                    r.state.counter_processed = true;
                    r.image
                        .insert(keys::COUNTER_PROCESSED.to_owned(), AttributeValue::Bool(true));
                    stream.append(Event::Modify, Some(&old), Some(&r.image));
                }
            }
            ItemWrite::DeleteCounted { .. } | ItemWrite::DeleteUncounted { .. } => {
                if let Some(r) = t.resources.remove(&key) {
                    stream.append(Event::Remove, Some(&r.image), None);
                }
            }
        }
    }
    Ok(())
}

impl Store for MemoryStore {
    async fn read_counters(&self, scope: &Scope) -> Result<CounterSnapshot, StoreError> {
        let items = self.query_counters(Op::ReadCounters, scope).await?;
        Ok(CounterSnapshot::from_items(items))
    }

    async fn put_resource(&self, resource: &NewResource) -> Result<(), StoreError> {
        let key = (resource.item.scope.to_string(), resource.item.id.to_string());
        let mut image = resource.payload.clone();
        let kit: Item = serde_dynamo::to_item(&resource.item).map_err(|e| StoreError::Malformed(e.to_string()))?;
        image.extend(kit.iter().map(|(k, v)| (k.clone(), v.clone())));
        let lock = LockKey::Resource(key.0.clone(), key.1.clone());
        let put = |t: &mut Tables, stream: &mut Stream| {
            if t.resources.contains_key(&key) {
                return Err(StoreError::ConditionFailed);
            }
            if t.deleted_incarnations.contains(&resource.item.incarnation) {
                t.resurrected.push(resource.item.incarnation.clone());
            }
            stream.append(Event::Insert, None, Some(&image));
            t.resources.insert(
                key.clone(),
                MemResource {
                    state: resource.item.clone().into(),
                    image: image.clone(),
                },
            );
            Ok(())
        };
        self.resendable(Op::PutResource, crate::store::sends::PUT_RESOURCE, &[lock], put)
            .await
    }

    async fn add_best_effort(&self, scope: &Scope, name: &str, delta: i64, now: EpochMillis) -> Result<(), StoreError> {
        crate::store::check_best_effort_name(name)?;
        let lock = LockKey::Counter(scope.to_string(), name.to_owned());
        self.call(Op::AddBestEffort, &[lock], |t, _| {
            t.add_counter(scope.as_str(), name, delta, now);
            Ok(())
        })
    }

    async fn reserve_best_effort(
        &self,
        scope: &Scope,
        name: &str,
        reservation: crate::best_effort::Reservation,
        now: EpochMillis,
    ) -> Result<(), StoreError> {
        use crate::best_effort::Fence;
        crate::store::check_best_effort_name(name)?;
        let lock = LockKey::Counter(scope.to_string(), name.to_owned());
        self.call(Op::ReserveBestEffort, &[lock], |t, _| {
            let key = (scope.to_string(), name.to_owned());
            let count = t.counters.get(&key).copied();
            let epoch = t.counters_epoch.get(&key).copied();
            if !reservation.admits(count, epoch) {
                return Err(StoreError::ConditionFailed);
            }
            if let Fence::Absent(e) = reservation.fence {
                t.counters_epoch.insert(key, e);
            }
            t.add_counter(scope.as_str(), name, 1, now);
            Ok(())
        })
    }

    async fn get_resource(&self, key: &ResourceKey) -> Result<Option<ResourceState>, StoreError> {
        self.call(Op::GetResource, &[], |t, _| {
            Ok(t.resources.get(&key_of(key)).map(|r| r.state.clone()))
        })
    }

    async fn mark_deleted(&self, key: &ResourceKey, incarnation: &str, now: EpochMillis) -> Result<(), StoreError> {
        let soft_delete = |t: &mut Tables, stream: &mut Stream| match t.resources.get_mut(&key_of(key)) {
            Some(r) if !r.state.deleted && r.state.incarnation == incarnation => {
                t.deleted_incarnations.insert(incarnation.to_owned());
                let old = r.image.clone();
                r.state.deleted = true;
                r.image.insert(keys::DELETED.to_owned(), AttributeValue::Bool(true));
                r.image
                    .insert(keys::DELETED_AT.to_owned(), AttributeValue::N(now.to_string()));
                stream.append(Event::Modify, Some(&old), Some(&r.image));
                Ok(())
            }
            _ => Err(StoreError::ConditionFailed),
        };
        self.resendable(
            Op::MarkDeleted,
            crate::store::sends::MARK_DELETED,
            &[resource_lock(key)],
            soft_delete,
        )
        .await
    }

    /// The kit sends no `ClientRequestToken` itself: the SDK fills a fresh
    /// one per `send()` (and keeps it across its own retries of that send),
    /// so every call here is a new token ([`MemoryStore::transact_write`]).
    async fn transact(&self, tx: &Transaction) -> Result<(), StoreError> {
        let token = {
            let mut inner = self.inner.lock().unwrap();
            inner.next_token += 1;
            format!("sdk-{:032x}", inner.next_token)
        };
        self.transact_write(tx, Some(&token)).await
    }

    async fn last_sequence(&self, scope: &Scope) -> Result<u64, StoreError> {
        self.call(Op::LastSequence, &[], |t, _| {
            Ok(t.sequences.get(scope.as_str()).copied().unwrap_or(0))
        })
    }

    /// Read, claim and read-back are separate calls, as on DynamoDB: the
    /// claim is a two-phase transaction like [`Store::transact`], so a
    /// concurrent claim of the same number meets `TransactionConflict` while
    /// it is held, or a failed condition after it committed. With
    /// [`Fault::AppliedThenUnavailable`] the claim is applied and the caller
    /// sees a 500. [`Fault::AppliedThenConditionFailed`] (an SDK retry
    /// after an applied attempt) answers success: `DynamoStore` sends a
    /// claim without SDK retries, and a retry with the same
    /// `ClientRequestToken` is answered as the first success.
    async fn claim_sequence(&self, claim: &SequenceClaim) -> Result<(), StoreError> {
        let scope = claim.scope.to_string();
        let holds = [
            LockKey::Counter(scope.clone(), keys::SEQUENCE_NAME.to_owned()),
            LockKey::Counter(scope, keys::sequence_item_name(claim.number)),
        ];
        let (fault, latency, id) = self.prepare(Op::ClaimSequence, &holds, &|_, _| CancelReason::None)?;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.locks.retain(|k, holder| *holder != id || !holds.contains(k));
        let result = apply_claim(&mut inner.tables, claim);
        match fault {
            Some(Fault::AppliedThenUnavailable) => Err(StoreError::Unavailable(
                "injected 500 after the claim was applied".into(),
            )),
            _ => result,
        }
    }

    async fn sequence_entry(&self, scope: &Scope, number: u64) -> Result<Option<SequenceEntry>, StoreError> {
        self.call(Op::SequenceEntry, &[], |t, _| {
            Ok(t.sequence_items.get(&(scope.to_string(), number)).cloned())
        })
    }

    async fn counter_items(&self, scope: &Scope) -> Result<Vec<CounterItem>, StoreError> {
        self.query_counters(Op::CounterItems, scope).await
    }

    async fn scope_items(&self, scope: &Scope) -> Result<Vec<ItemRow>, StoreError> {
        let mut rows: Vec<ItemRow> = Vec::new();
        loop {
            let (size, pause) = self.page_shape();
            let after = rows.last().map(|r| r.id.clone());
            let (page, more) = self.call(Op::ScopeItems, &[], |t, _| {
                let from = (scope.to_string(), after.clone().unwrap_or_default());
                let mut page = Vec::new();
                let mut more = false;
                for ((s, id), r) in t.resources.range(from..) {
                    if s != scope.as_str() {
                        break;
                    }
                    if after.as_deref() == Some(id.as_str()) {
                        continue;
                    }
                    if page.len() == size {
                        more = true;
                        break;
                    }
                    let row: ItemRow = serde_dynamo::from_item(r.image.clone())
                        .map_err(|e| StoreError::Malformed(format!("resource {s}/{id}: {e}")))?;
                    page.push(row);
                }
                Ok((page, more))
            })?;
            rows.extend(page);
            if !more {
                return Ok(rows);
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// A `TransactWriteItems` of one conditional update per target, run
    /// like [`Store::transact`]: it holds every counter it sets while in
    /// flight (their writers meet `TransactionConflict`; a held one cancels
    /// it), then checks every version and writes all or nothing. A Query
    /// reading the scope's counters item by item meanwhile sees some of
    /// them before and some after it.
    async fn set_counters(
        &self,
        scope: &Scope,
        read: &[CounterItem],
        targets: &[(String, i64)],
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        let names: Vec<&str> = targets.iter().map(|(name, _)| name.as_str()).collect();
        let version_holds = |t: &Tables, name: &str| {
            let expected = read.iter().find(|i| i.name == name).map(|i| i.version);
            expected == t.counters_version.get(&(scope.to_string(), name.to_owned())).copied()
        };
        self.repair_transaction(Op::SetCounters, scope, &names, &version_holds, |t| {
            for (name, count) in targets {
                t.set_counter(scope.as_str(), name, *count, now);
            }
        })
        .await
    }

    async fn raise_best_effort(
        &self,
        scope: &Scope,
        raise: &crate::best_effort::Raise,
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        self.raise(scope, raise, now).await
    }
}

impl MemoryStore {
    /// [`Store::raise_best_effort`]: a repair transaction over every item
    /// of the raise, each conditioned on its epoch.
    async fn raise(
        &self,
        scope: &Scope,
        raise: &crate::best_effort::Raise,
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        let names: Vec<&str> = raise.adds.keys().map(String::as_str).collect();
        let fence_holds = |t: &Tables, name: &str| {
            t.counters_epoch
                .get(&(scope.to_string(), name.to_owned()))
                .copied()
                .unwrap_or(0)
                <= raise.from
        };
        self.repair_transaction(Op::RaiseBestEffort, scope, &names, &fence_holds, |t| {
            for (name, add) in &raise.adds {
                t.add_counter(scope.as_str(), name, *add, now);
                t.counters_epoch.insert((scope.to_string(), name.clone()), raise.to());
            }
        })
        .await
    }

    /// An operator's transaction over the counters `names` of `scope`: each
    /// conditioned by `holds`, the items held for the chaos's transaction
    /// latency (writers meet `TransactionConflict`), then `apply` if every
    /// condition still holds. `Ok(false)`: cancelled or busy, nothing
    /// written.
    async fn repair_transaction(
        &self,
        op: Op,
        scope: &Scope,
        names: &[&str],
        holds: &(dyn Fn(&Tables, &str) -> bool + Sync),
        apply: impl FnOnce(&mut Tables),
    ) -> Result<bool, StoreError> {
        let locks: Vec<LockKey> = names
            .iter()
            .map(|name| LockKey::Counter(scope.to_string(), (*name).to_owned()))
            .collect();
        let own_reason = |t: &Tables, at: usize| {
            if holds(t, names[at]) {
                CancelReason::None
            } else {
                CancelReason::ConditionalCheckFailed
            }
        };
        let (fault, latency, id) = match self.prepare(op, &locks, &own_reason) {
            Ok(prepared) => prepared,
            Err(StoreError::Cancelled { .. }) => return Ok(false),
            Err(err) if err.is_transient() => return Ok(false),
            Err(err) => return Err(err),
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.locks.retain(|k, holder| *holder != id || !locks.contains(k));
        if !names.iter().all(|name| holds(&inner.tables, name)) {
            return Ok(false);
        }
        apply(&mut inner.tables);
        inner.check(op);
        match fault {
            Some(Fault::AppliedThenUnavailable) => Err(StoreError::Unavailable(format!(
                "injected 500 after the {op:?} transaction was applied"
            ))),
            _ => Ok(true),
        }
    }
}

impl crate::audit::drift::DriftStore for MemoryStore {
    /// The counters table's keys in key order (the limit overrides are
    /// items of it too), `next` set when the page is full, as DynamoDB sets
    /// `LastEvaluatedKey` when a Scan stops at its `Limit`.
    async fn scan_counter_keys(
        &self,
        after: Option<&crate::audit::drift::CounterKey>,
        limit: u32,
    ) -> Result<crate::audit::drift::ScanPage, StoreError> {
        use crate::audit::drift::{CounterKey, ScanPage};
        self.call(Op::ScanCounterKeys, &[], |t, _| {
            let mut all: std::collections::BTreeSet<(String, String)> = t.counters.keys().cloned().collect();
            all.extend(t.limits.keys().map(|s| (s.clone(), keys::LIMIT_NAME.to_owned())));
            // A scope's gapless sequence is items of its partition too.
            all.extend(t.sequences.keys().map(|s| (s.clone(), keys::SEQUENCE_NAME.to_owned())));
            all.extend(
                t.sequence_items
                    .keys()
                    .map(|(s, n)| (s.clone(), keys::sequence_item_name(*n))),
            );
            let start = after.map(|k| (k.scope.clone(), k.name.clone()));
            let limit = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
            let keys: Vec<CounterKey> = all
                .into_iter()
                .filter(|k| start.as_ref().is_none_or(|s| k > s))
                .take(limit)
                .map(|(scope, name)| CounterKey { scope, name })
                .collect();
            let next = (keys.len() == limit).then(|| keys.last().cloned()).flatten();
            Ok(ScanPage { keys, next })
        })
    }

    /// Every override, as written by [`MemoryStore::set_limit`] (version 1,
    /// no write token), and the scopes with a counter under `prefixes`.
    async fn limit_overrides(&self, prefixes: &[String]) -> Result<crate::limits::LimitTable, StoreError> {
        use crate::limits::{LimitItem, LimitTable};
        self.call(Op::ScanLimits, &[], |t, _| {
            let under = |scope: &str| prefixes.iter().any(|p| scope.starts_with(p.as_str()));
            Ok(LimitTable {
                overrides: t
                    .limits
                    .iter()
                    .map(|(scope, limit)| {
                        let item = LimitItem {
                            limit: *limit,
                            version: 1,
                            rev: None,
                        };
                        (scope.clone(), item)
                    })
                    .collect(),
                prefixed_scopes: t
                    .counters
                    .keys()
                    .map(|(scope, _)| scope)
                    .chain(t.limits.keys())
                    .filter(|scope| under(scope))
                    .cloned()
                    .collect(),
            })
        })
    }

    async fn drift_state(&self) -> Result<Option<crate::audit::drift::DriftCheckState>, StoreError> {
        self.call(Op::DriftState, &[], |t, _| Ok(t.drift_state.clone()))
    }

    async fn put_drift_state(
        &self,
        state: &crate::audit::drift::DriftCheckState,
        read_version: Option<i64>,
    ) -> Result<bool, StoreError> {
        self.call(Op::DriftState, &[], |t, _| {
            if t.drift_state.as_ref().map(|s| s.version) != read_version {
                return Ok(false);
            }
            let mut stored = state.clone();
            stored.version = read_version.map_or(1, |v| v + 1);
            t.drift_state = Some(stored);
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ResourceId;
    use crate::items::ResourceItem;
    use crate::store::CounterDelta;
    use crate::stream::{Change, record::IgnoreReason};

    fn key(id: &str) -> ResourceKey {
        ResourceKey {
            scope: Scope::new("acct").unwrap(),
            id: ResourceId::new(id).unwrap(),
        }
    }

    fn resource(id: &str, incarnation: &str) -> NewResource {
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

    fn count_insert(id: &str, incarnation: &str) -> Transaction {
        crate::stream::plan::count_insert(&key(id), incarnation, crate::stream::plan::ShardChoice::SINGLE, 0)
    }

    #[tokio::test]
    async fn every_applied_write_appends_a_record_the_production_decoder_reads() {
        let store = MemoryStore::new();
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.transact(&count_insert("a", "i1")).await.unwrap();
        store.mark_deleted(&key("a"), "i1", 9).await.unwrap();
        let delete = crate::stream::plan::resolve_delete(
            &key("a"),
            "i1",
            store.get_resource(&key("a")).await.unwrap().as_ref(),
            crate::stream::plan::ShardChoice::SINGLE,
            0,
        );
        let crate::stream::plan::DeleteDecision::Write(tx) = delete else {
            panic!("expected a write")
        };
        store.transact(&tx).await.unwrap();
        // A refused write appends nothing.
        assert!(store.mark_deleted(&key("a"), "i1", 9).await.is_err());
        let changes: Vec<Change> = store.stream_changes().into_iter().map(|d| d.unwrap().change).collect();
        assert_eq!(
            changes,
            vec![
                Change::Insert {
                    key: key("a"),
                    incarnation: "i1".into()
                },
                Change::Ignore(IgnoreReason::OtherModify),
                Change::SoftDelete {
                    key: key("a"),
                    incarnation: "i1".into()
                },
                Change::Ignore(IgnoreReason::Remove),
            ]
        );
        let records = store.stream_read(STREAM_SHARD_ID, None, 10).unwrap();
        let lambda = serde_json::to_value(&records[2]).unwrap();
        assert!(crate::stream::filter::passes(&lambda));
        assert_eq!(
            lambda["dynamodb"]["NewImage"]["color"],
            serde_json::json!({"S": "blue"})
        );
        assert_eq!(
            lambda["dynamodb"]["OldImage"]["deleted"],
            serde_json::json!({"BOOL": false})
        );
        let seqs: Vec<u64> = records
            .iter()
            .map(|r| parse_sequence(r.change.sequence_number.as_deref().unwrap()).unwrap())
            .collect();
        assert_eq!(seqs, vec![0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn trimmed_records_are_gone_for_readers_behind_the_horizon() {
        let store = MemoryStore::new();
        let now = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let clock = now.clone();
        store.set_clock(Arc::new(move || clock.load(std::sync::atomic::Ordering::SeqCst)));
        store.put_resource(&resource("a", "i1")).await.unwrap();
        now.store(100, std::sync::atomic::Ordering::SeqCst);
        store.put_resource(&resource("b", "i2")).await.unwrap();
        assert_eq!(store.trim_stream(50), 1);
        let first = sequence_number(0);
        assert!(matches!(
            store.stream_range(STREAM_SHARD_ID, &first, &first),
            Err(StoreError::Gone(_))
        ));
        assert!(matches!(
            store.stream_read(STREAM_SHARD_ID, Some("99999"), 1),
            Err(StoreError::Rejected(_))
        ));
        // From the trim horizon, or after the trimmed record, the rest reads.
        assert_eq!(store.stream_read(STREAM_SHARD_ID, None, 10).unwrap().len(), 1);
        assert_eq!(store.stream_read(STREAM_SHARD_ID, Some(&first), 10).unwrap().len(), 1);
        assert_eq!(
            store
                .stream_range(STREAM_SHARD_ID, &sequence_number(1), &sequence_number(1))
                .unwrap()
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn a_split_closes_the_shard_and_each_item_goes_on_in_one_child() {
        let store = MemoryStore::new();
        let now = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let clock = now.clone();
        store.set_clock(Arc::new(move || clock.load(std::sync::atomic::Ordering::SeqCst)));
        for id in ["a", "b", "c", "d", "e", "f"] {
            store.put_resource(&resource(id, "i1")).await.unwrap();
        }
        let [left, right] = store.split_stream_shard(STREAM_SHARD_ID).unwrap();
        assert_eq!(
            store.split_stream_shard(STREAM_SHARD_ID),
            None,
            "a closed shard does not split"
        );
        now.store(100, std::sync::atomic::Ordering::SeqCst);
        for id in ["a", "b", "c", "d", "e", "f"] {
            store.transact(&count_insert(id, "i1")).await.unwrap();
        }
        let shards = store.stream_shards();
        assert_eq!(
            shards,
            vec![
                StreamShard {
                    shard_id: STREAM_SHARD_ID.into(),
                    parent_shard_id: None,
                    closed: true
                },
                StreamShard {
                    shard_id: left.clone(),
                    parent_shard_id: Some(STREAM_SHARD_ID.into()),
                    closed: false
                },
                StreamShard {
                    shard_id: right.clone(),
                    parent_shard_id: Some(STREAM_SHARD_ID.into()),
                    closed: false
                },
            ]
        );
        let ids = |shard: &str| -> Vec<String> {
            store
                .stream_read(shard, None, 100)
                .unwrap()
                .iter()
                .map(|r| match r.change.keys.get(keys::ID) {
                    Some(AttributeValue::S(id)) => id.clone(),
                    other => panic!("no id: {other:?}"),
                })
                .collect()
        };
        assert_eq!(ids(STREAM_SHARD_ID), ["a", "b", "c", "d", "e", "f"]);
        let (l, r) = (ids(&left), ids(&right));
        assert_eq!(l.len() + r.len(), 6);
        assert!(
            !l.is_empty() && !r.is_empty(),
            "one scope spreads over both children: {l:?} {r:?}"
        );
        // Each item goes on in one child whatever it writes next.
        for id in l.iter().chain(&r) {
            store.mark_deleted(&key(id), "i1", 9).await.unwrap();
        }
        assert_eq!(ids(&left), [l.clone(), l.clone()].concat());
        assert_eq!(ids(&right), [r.clone(), r.clone()].concat());
        // A range is read on its own shard only.
        let first = sequence_number(6);
        let on_left = store.stream_range(&left, &first, &sequence_number(11)).unwrap();
        assert_eq!(on_left.len(), l.len());
        assert!(store.stream_range("shardId-nope", &first, &first).is_err());
        // Once the parent's records expired, it is no longer listed.
        store.trim_stream(50);
        let listed: Vec<String> = store.stream_shards().into_iter().map(|s| s.shard_id).collect();
        assert_eq!(listed, [left, right]);
    }

    #[tokio::test]
    async fn a_client_request_token_answers_a_repeat_without_applying_it_again_for_ten_minutes() {
        let store = MemoryStore::new();
        let now = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let clock = now.clone();
        store.set_clock(Arc::new(move || clock.load(std::sync::atomic::Ordering::SeqCst)));
        for id in ["a", "b"] {
            store.put_resource(&resource(id, "i1")).await.unwrap();
        }
        let tx = count_insert("a", "i1");
        store.transact_write(&tx, Some("t1")).await.unwrap();
        let records = store.stream_changes().len();
        // The same request again: success, nothing applied twice.
        now.store(CLIENT_REQUEST_TOKEN_WINDOW_MS - 1, std::sync::atomic::Ordering::SeqCst);
        store.transact_write(&tx, Some("t1")).await.unwrap();
        assert_eq!(store.counter("acct", "eventual"), 1);
        assert_eq!(store.stream_changes().len(), records);
        assert_eq!(store.token_replays(), 1);
        // Another request under the same token is refused.
        let other = count_insert("b", "i1");
        assert!(matches!(
            store.transact_write(&other, Some("t1")).await,
            Err(StoreError::Rejected(why)) if why.starts_with("IdempotentParameterMismatch")
        ));
        assert_eq!(store.counter("acct", "eventual"), 1);
        // Past the window the token is new: the request runs, and its
        // condition fails (already counted).
        now.store(2 * CLIENT_REQUEST_TOKEN_WINDOW_MS, std::sync::atomic::Ordering::SeqCst);
        assert!(matches!(
            store.transact_write(&tx, Some("t1")).await,
            Err(StoreError::Cancelled { .. })
        ));
        // Without a token every request is new; a fresh token applies.
        assert!(store.transact_write(&tx, None).await.is_err());
        store.transact_write(&other, Some("t2")).await.unwrap();
        assert_eq!(store.counter("acct", "eventual"), 2);
    }

    #[tokio::test]
    async fn a_failed_condition_cancels_the_whole_transaction_with_reasons_in_request_order() {
        let store = MemoryStore::new();
        store.put_resource(&resource("a", "i1")).await.unwrap();
        let tx = Transaction {
            counter: Some(CounterDelta {
                scope: Scope::new("acct").unwrap(),
                name: "eventual".into(),
                delta: 2,
            }),
            items: vec![
                ItemWrite::MarkCounted {
                    key: key("a"),
                    incarnation: "i1".into(),
                },
                ItemWrite::MarkCounted {
                    key: key("missing"),
                    incarnation: "i1".into(),
                },
            ],
            now: 0,
        };
        let err = store.transact(&tx).await.unwrap_err();
        assert_eq!(
            err,
            StoreError::Cancelled {
                reasons: vec![
                    CancelReason::None,
                    CancelReason::None,
                    CancelReason::ConditionalCheckFailed
                ]
            }
        );
        assert_eq!(store.counter("acct", "eventual"), 0);
        assert!(
            !store.tables().resources[&("acct".into(), "a".into())]
                .state
                .counter_processed
        );
        let mut twice = tx.clone();
        twice.items[1] = twice.items[0].clone();
        assert!(matches!(store.transact(&twice).await, Err(StoreError::Rejected(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_counter_query_reads_item_by_item_and_can_see_a_repair_half_applied() {
        let store = Arc::new(MemoryStore::new());
        store.set_counter("acct", "best_effort#0", 1);
        store.set_counter("acct", "best_effort#1", 1);
        store.set_chaos(Chaos {
            seed: 1,
            counter_read_latency: Duration::from_millis(10),
            ..Chaos::default()
        });
        let read = store.counter_items(&Scope::new("acct").unwrap()).await.unwrap();
        // A repair moving one reservation from #0 to #1 lands while a Query
        // is between the two items: it reads #0 before and #1 after.
        let query = tokio::spawn({
            let store = store.clone();
            async move { store.counter_items(&Scope::new("acct").unwrap()).await }
        });
        tokio::task::yield_now().await;
        let targets = [("best_effort#0".to_owned(), 0), ("best_effort#1".to_owned(), 2)];
        assert_eq!(
            store
                .set_counters(&Scope::new("acct").unwrap(), &read, &targets, 1)
                .await,
            Ok(true)
        );
        let torn: Vec<i64> = query.await.unwrap().unwrap().iter().map(|i| i.count).collect();
        assert_eq!(torn, [1, 2], "read committed item by item, not a snapshot");
        assert_eq!(store.best_effort("acct"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_repair_in_flight_holds_its_counters_and_conflicts_come_with_each_actions_own_reason() {
        let store = Arc::new(MemoryStore::new());
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.transact(&count_insert("a", "i1")).await.unwrap();
        store.set_chaos(Chaos {
            seed: 3,
            transaction_latency: Duration::from_millis(10),
            ..Chaos::default()
        });
        let scope = Scope::new("acct").unwrap();
        let read = store.counter_items(&scope).await.unwrap();
        let repair = tokio::spawn({
            let (store, read) = (store.clone(), read.clone());
            async move {
                let targets = [("eventual".to_owned(), 1), ("best_effort".to_owned(), 1)];
                store
                    .set_counters(&Scope::new("acct").unwrap(), &read, &targets, 1)
                    .await
            }
        });
        tokio::task::yield_now().await;
        // A BE write meets the repair's hold; a stream transaction on the
        // held counter is cancelled with its item's own reason beside the
        // conflict: "a" is counted already.
        let err = store.add_best_effort(&scope, "best_effort", 1, 0).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        assert_eq!(
            store.transact(&count_insert("a", "i1")).await,
            Err(StoreError::Cancelled {
                reasons: vec![CancelReason::TransactionConflict, CancelReason::ConditionalCheckFailed]
            })
        );
        assert_eq!(store.mixed_cancellations(), 1);
        assert_eq!(repair.await.unwrap(), Ok(true));
        // A repair computed from the same read is refused now: versions moved.
        let targets = [("eventual".to_owned(), 5)];
        assert_eq!(store.set_counters(&scope, &read, &targets, 1).await, Ok(false));
        assert_eq!((store.counter("acct", "eventual"), store.best_effort("acct")), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_transaction_in_flight_makes_concurrent_writers_of_its_items_conflict() {
        let store = Arc::new(MemoryStore::new());
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.put_resource(&resource("b", "i2")).await.unwrap();
        store.set_chaos(Chaos {
            seed: 3,
            faults: vec![],
            transaction_latency: Duration::from_millis(10),
            ..Chaos::default()
        });
        let first = tokio::spawn({
            let store = store.clone();
            async move { store.transact(&count_insert("a", "i1")).await }
        });
        tokio::task::yield_now().await;
        // Same counter item: cancelled, the conflict on the counter's slot.
        let err = store.transact(&count_insert("b", "i2")).await.unwrap_err();
        assert_eq!(
            err,
            StoreError::Cancelled {
                reasons: vec![CancelReason::TransactionConflict, CancelReason::None]
            }
        );
        // A plain write of a held item is refused as transient.
        let err = store.mark_deleted(&key("a"), "i1", 0).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        first.await.unwrap().unwrap();
        store.transact(&count_insert("b", "i2")).await.unwrap();
        assert_eq!(store.counter("acct", "eventual"), 2);
        assert_eq!(store.lock_conflicts(), 2);
    }

    #[tokio::test]
    async fn a_transaction_that_was_not_applied_answers_its_own_reasons_under_an_ambiguous_fault() {
        let store = MemoryStore::new();
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.put_resource(&resource("b", "i2")).await.unwrap();
        store.transact(&count_insert("a", "i1")).await.unwrap();
        // "a" is counted already, "b" is not: the batch's transaction fails
        // on "a" only, and nothing is applied. The injected fault may not
        // make "b" look done too (the consumer would then drop it uncounted).
        let batch = crate::stream::plan::batch_transaction(
            &Scope::new("acct").unwrap(),
            "eventual",
            vec![
                ItemWrite::MarkCounted {
                    key: key("a"),
                    incarnation: "i1".into(),
                },
                ItemWrite::MarkCounted {
                    key: key("b"),
                    incarnation: "i2".into(),
                },
            ],
            0,
        );
        store.inject(Op::Transact, Fault::AppliedThenConditionFailed);
        assert_eq!(
            store.transact(&batch).await,
            Err(StoreError::Cancelled {
                reasons: vec![
                    CancelReason::None,
                    CancelReason::ConditionalCheckFailed,
                    CancelReason::None
                ]
            })
        );
        assert_eq!(store.counter("acct", "eventual"), 1);
        // Applied, then the retry fails: every item's condition, not the counter's.
        store.inject(Op::Transact, Fault::AppliedThenConditionFailed);
        let b_only = crate::stream::plan::count_insert(&key("b"), "i2", crate::stream::plan::ShardChoice::SINGLE, 0);
        assert_eq!(
            store.transact(&b_only).await,
            Err(StoreError::Cancelled {
                reasons: vec![CancelReason::None, CancelReason::ConditionalCheckFailed]
            })
        );
        assert_eq!(store.counter("acct", "eventual"), 2);
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
