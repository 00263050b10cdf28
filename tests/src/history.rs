//! A history of the request path's calls and its offline check (issue 34,
//! item 3). Tests record each create's and delete's invocation and answer
//! in one global order ([`History`]); after the drain, [`check`] holds the
//! history against the scope's final items ([`End`]): the calls on each id
//! are linearizable as a register ending as the id's item ([`linear`]), a
//! strict scope never held more
//! live items than its limit at any moment the history allows, and the
//! eventual counter equals the live items. A broken promise is a
//! [`Violation`] whose `Display` is the minimal trace that breaks it.
//!
//! The check assumes only that a call takes effect (at most once) between
//! its invocation and its answer; a call whose outcome is unknown (a 500
//! after apply, a timeout) may take effect at any instant after its
//! invocation, even after its answer, or never.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use aws_sdk_dynamodb::types::AttributeValue;
use hybrid_counter::{Counter, Created, EpochMillis, Error, RequestStore, ResourceId, Scope};

mod op;
pub use op::{Call, Op, Outcome, Refusal, Tick};

/// A recorder of calls, shared by concurrent clients (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct History(Arc<Mutex<Log>>);

#[derive(Debug, Default)]
struct Log {
    clock: Tick,
    ops: Vec<Op>,
}

/// A call invoked and not answered yet ([`History::complete`]).
#[derive(Debug)]
#[must_use = "a call is answered with History::complete"]
pub struct Invoked(usize);

impl History {
    pub fn new() -> Self {
        Self::default()
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the invocation of `call` on `scope`/`id`, now.
    pub fn invoke(&self, call: Call, scope: &Scope, id: &ResourceId) -> Invoked {
        let mut log = self.log();
        log.clock += 1;
        let invoked = log.clock;
        log.ops.push(Op {
            call,
            scope: scope.to_string(),
            id: id.to_string(),
            invoked,
            answered: None,
        });
        Invoked(log.ops.len() - 1)
    }

    /// Records the answer of an invoked call, now.
    pub fn complete(&self, invoked: Invoked, outcome: Outcome) {
        let mut log = self.log();
        log.clock += 1;
        let at = log.clock;
        log.ops[invoked.0].answered = Some((at, outcome));
    }

    /// `counter.create` with an empty payload, recorded.
    pub async fn create<S: RequestStore>(
        &self,
        counter: &Counter<S>,
        scope: &Scope,
        id: &ResourceId,
        now: EpochMillis,
    ) -> Result<Created, Error> {
        let invoked = self.invoke(Call::Create, scope, id);
        let result = counter.create(scope, id, Default::default(), now).await;
        self.complete(invoked, Outcome::of_create(&result));
        result
    }

    /// `counter.delete`, recorded.
    pub async fn delete<S: RequestStore>(
        &self,
        counter: &Counter<S>,
        scope: &Scope,
        id: &ResourceId,
        now: EpochMillis,
    ) -> Result<(), Error> {
        let invoked = self.invoke(Call::Delete, scope, id);
        let result = counter.delete(scope, id, now).await;
        self.complete(invoked, Outcome::of_delete(&result));
        result
    }

    /// Every call recorded so far, in order of invocation.
    pub fn ops(&self) -> Vec<Op> {
        self.log().ops.clone()
    }

    /// After the drain and before any repair: `scope`'s EC (from `store`)
    /// and items (with `client`, from `table`), read past any fault proxy,
    /// held against the calls on it ([`check`]; strict admission with the
    /// limit `strict`). A broken promise panics with `context` (the seed)
    /// and the minimal trace.
    pub async fn assert_kept<S: RequestStore>(
        &self,
        (store, client, table): (&S, &aws_sdk_dynamodb::Client, &str),
        scope: &Scope,
        strict: Option<u64>,
        context: &str,
    ) -> Checked {
        let eventual = store.read_counters(scope).await.expect("read the counters").eventual;
        let mut end = End::read(client, table, scope).await.with_eventual(eventual);
        if let Some(limit) = strict {
            end = end.strict(limit);
        }
        self.check(scope, &end)
            .unwrap_or_else(|violation| panic!("{context}, {scope}: {violation}"))
    }

    /// [`check`] over the calls on `scope`.
    pub fn check(&self, scope: &Scope, end: &End) -> Result<Checked, Violation> {
        let ops: Vec<Op> = self
            .log()
            .ops
            .iter()
            .filter(|op| op.scope == scope.as_str())
            .cloned()
            .collect();
        check(&ops, end)
    }
}

/// A `counterctl load` run as a library, recorded: each call's answer
/// classified once, by [`Outcome::of_create`] and [`Outcome::of_delete`].
impl ops_cli::commands::load::CallObserver for History {
    fn invoked(&self, create: bool, scope: &Scope, id: &ResourceId) -> usize {
        let call = if create { Call::Create } else { Call::Delete };
        self.invoke(call, scope, id).0
    }

    fn created(&self, token: usize, answer: &Result<Created, Error>) {
        self.complete(Invoked(token), Outcome::of_create(answer));
    }

    fn deleted(&self, token: usize, answer: &Result<(), Error>) {
        self.complete(Invoked(token), Outcome::of_delete(answer));
    }
}

/// One item of a scope at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalItem {
    pub incarnation: String,
    pub counter_processed: bool,
    pub deleted: bool,
}

/// A scope's state at the end of a test, after the drain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct End {
    /// Every item of the scope, by id.
    pub items: BTreeMap<String, FinalItem>,
    /// The eventual counter, when the stream was drained (then every live
    /// item must be counted, every deleted one hard-deleted).
    pub eventual: Option<i64>,
    /// The limit, when the scope admits in strict mode.
    pub strict_limit: Option<u64>,
}

impl End {
    /// Every item of `scope` in `table`, read strongly consistent (give it
    /// a client that does not go through a fault proxy).
    pub async fn read(client: &aws_sdk_dynamodb::Client, table: &str, scope: &Scope) -> Self {
        let items: Vec<std::collections::HashMap<String, AttributeValue>> = client
            .query()
            .table_name(table)
            .key_condition_expression("#s = :s")
            .expression_attribute_names("#s", "scope")
            .expression_attribute_values(":s", AttributeValue::S(scope.to_string()))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .expect("query the scope's items");
        let text = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| {
            item.get(name).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default()
        };
        let flag = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| {
            item.get(name).and_then(|v| v.as_bool().ok()).copied().unwrap_or(false)
        };
        let items = items
            .iter()
            .map(|item| {
                let state = FinalItem {
                    incarnation: text(item, "incarnation"),
                    counter_processed: flag(item, "counter_processed"),
                    deleted: flag(item, "deleted"),
                };
                (text(item, "id"), state)
            })
            .collect();
        Self {
            items,
            ..Self::default()
        }
    }

    /// With the eventual counter read after the drain.
    pub fn with_eventual(mut self, eventual: i64) -> Self {
        self.eventual = Some(eventual);
        self
    }

    /// With the scope's strict limit.
    pub fn strict(mut self, limit: u64) -> Self {
        self.strict_limit = Some(limit);
        self
    }

    /// The incarnation of `id` when it is live (there and not deleted).
    fn live(&self, id: &str) -> Option<&str> {
        self.items
            .get(id)
            .filter(|item| !item.deleted)
            .map(|item| item.incarnation.as_str())
    }

    fn live_count(&self) -> usize {
        self.items.values().filter(|item| !item.deleted).count()
    }
}

/// What a passing check went over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    pub ops: usize,
    pub acknowledged_creates: usize,
    pub acknowledged_deletes: usize,
    pub refused: usize,
    pub unknown: usize,
    /// The most items definitely live at one instant.
    pub most_definitely_live: usize,
    pub live_at_end: usize,
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} calls ({} creates and {} deletes acknowledged, {} refused, {} unknown); at most {} definitely live, {} live at the end",
            self.ops,
            self.acknowledged_creates,
            self.acknowledged_deletes,
            self.refused,
            self.unknown,
            self.most_definitely_live,
            self.live_at_end
        )
    }
}

/// A promise the kit makes to its callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promise {
    /// The calls on each id are linearizable as a register (absent, live,
    /// gone) that ends as the id's final item: no acknowledged create lost
    /// or doubled, no acknowledged delete undone or doubled, no live item
    /// without a create that may have written it.
    Linearizable,
    /// Strict admission: never more live items than the limit.
    StrictLimit,
    /// After the drain every live item is counted (`counter_processed`)
    /// and no soft-deleted item waits for its hard delete.
    Drained,
    /// The eventual counter equals the live items after the drain.
    EventualExact,
}

impl fmt::Display for Promise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Promise::Linearizable => "the calls on each id are linearizable and end as its item",
            Promise::StrictLimit => "strict admission never holds more live items than the limit",
            Promise::Drained => "the drain counts every live item and hard-deletes every deleted one",
            Promise::EventualExact => "the eventual counter is exact after the drain",
        })
    }
}

/// A broken promise and the minimal trace that breaks it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "promise broken: {promise}: {detail}\nminimal trace (ticks: one global order of invocations and answers):\n{}",
    .trace.join("\n")
)]
pub struct Violation {
    pub promise: Promise,
    pub detail: String,
    /// The calls involved, in order of invocation, then the final items involved.
    pub trace: Vec<String>,
}

impl Violation {
    fn new(promise: Promise, detail: String, ops: &[&Op], end: &End, ids: &[&str]) -> Self {
        let mut trace: Vec<String> = ops.iter().map(|op| format!("  {op}")).collect();
        for id in ids {
            trace.push(match end.items.get(*id) {
                Some(item) if item.deleted => format!("  final: {id} soft-deleted ({})", item.incarnation),
                Some(item) if !item.counter_processed => {
                    format!("  final: {id} live, uncounted ({})", item.incarnation)
                }
                Some(item) => format!("  final: {id} live ({})", item.incarnation),
                None => format!("  final: {id} absent"),
            });
        }
        Self { promise, detail, trace }
    }
}

/// Checks the calls `ops` on one scope against its final state `end`.
pub fn check(ops: &[Op], end: &End) -> Result<Checked, Violation> {
    let mut by_id: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_id.entry(op.id.as_str()).or_default().push(op);
    }
    let ids: std::collections::BTreeSet<&str> = by_id
        .keys()
        .copied()
        .chain(end.items.keys().map(String::as_str))
        .collect();
    for id in ids {
        let mut ops = by_id.remove(id).unwrap_or_default();
        ops.sort_by_key(|op| op.invoked);
        check_item(id, &ops, end)?;
    }
    let most_definitely_live = check_strict(ops, end)?;
    let live_at_end = end.live_count();
    if end.eventual.is_some() {
        let undrained: Vec<&str> = end
            .items
            .iter()
            .filter(|(_, item)| item.deleted || !item.counter_processed)
            .map(|(id, _)| id.as_str())
            .collect();
        if !undrained.is_empty() {
            return Err(Violation::new(
                Promise::Drained,
                format!("{} items uncounted or soft-deleted after the drain", undrained.len()),
                &[],
                end,
                &undrained,
            ));
        }
    }
    if let Some(eventual) = end.eventual
        && eventual != live_at_end as i64
    {
        let live: Vec<&str> = end
            .items
            .iter()
            .filter(|(_, item)| !item.deleted)
            .map(|(id, _)| id.as_str())
            .collect();
        return Err(Violation::new(
            Promise::EventualExact,
            format!("the eventual counter is {eventual}, {live_at_end} items are live"),
            &[],
            end,
            &live,
        ));
    }
    let count = |pred: fn(&Op) -> bool| ops.iter().filter(|op| pred(op)).count();
    Ok(Checked {
        ops: ops.len(),
        acknowledged_creates: count(|op| op.call == Call::Create && op.acknowledged()),
        acknowledged_deletes: count(|op| op.call == Call::Delete && op.acknowledged()),
        refused: count(|op| !op.may_have_applied()),
        unknown: count(|op| op.may_have_applied() && !op.acknowledged()),
        most_definitely_live,
        live_at_end,
    })
}

/// The calls on one id, as a register ([`linear`]): some order of them,
/// each within its span, each allowed by the state before it, ends in the
/// id's final state.
fn check_item(id: &str, ops: &[&Op], end: &End) -> Result<(), Violation> {
    let ops: Vec<&Op> = ops.iter().copied().filter(|op| linear::takes_part(op)).collect();
    if linear::linearizable(&ops, Some(end.live(id))) {
        return Ok(());
    }
    // The trace: the shortest prefix (by invocation) no order of which
    // works whatever the end, else every call; without the refusals it
    // does not need (leaving one out only allows more orders).
    let mut trace = (1..=ops.len())
        .map(|k| &ops[..k])
        .find(|prefix| !linear::linearizable(prefix, None))
        .unwrap_or(&ops)
        .to_vec();
    let mut i = 0;
    while i < trace.len() {
        let mut without = trace.clone();
        without.remove(i);
        let refusal = matches!(trace[i].outcome(), Some(Outcome::Refused(_)));
        if refusal && !linear::linearizable(&without, Some(end.live(id))) {
            trace = without;
        } else {
            i += 1;
        }
    }
    Err(Violation::new(
        Promise::Linearizable,
        format!(
            "no order of the calls on {id} within their spans (a create from absent, a delete from live) ends as {id} ends"
        ),
        &trace,
        end,
        &[id],
    ))
}

/// Strict admission: sweeps the instants at which a create's item is
/// definitely live (it must have taken effect by then, and no delete that
/// may remove it was invoked yet); more of them than the limit, or more
/// live items at the end, breaks the promise. Returns the most at one
/// instant.
fn check_strict(ops: &[Op], end: &End) -> Result<usize, Violation> {
    // (from, until) per create whose item must have been written: an
    // acknowledged one, or one whose outcome is unknown that every order
    // of the calls on its id needs. Its slot is held from its answer at
    // the latest (strict admission reserves before the put, which may
    // land later) until the first delete that may have removed its item
    // is invoked.
    let windows: Vec<(&Op, Tick, Tick)> = ops
        .iter()
        .filter(|op| op.call == Call::Create && (op.acknowledged() || (op.optional() && forced(op, ops, end))))
        .filter_map(|create| {
            let until = ops
                .iter()
                .filter(|d| d.call == Call::Delete && d.id == create.id && d.may_have_applied())
                .filter(|d| d.deadline() > create.invoked)
                .map(|d| d.invoked)
                .min()
                .unwrap_or(Tick::MAX);
            (until > create.completed()).then_some((create, create.completed(), until))
        })
        .collect();
    let mut events: Vec<(Tick, i64)> = windows
        .iter()
        .flat_map(|&(_, from, until)| [(from, 1), (until, -1)])
        .collect();
    events.sort_unstable();
    let (mut live, mut most, mut worst) = (0i64, 0usize, None);
    for (at, delta) in events {
        live += delta;
        if live as usize > most {
            most = live as usize;
            worst = Some(at);
        }
    }
    let Some(limit) = end.strict_limit else {
        return Ok(most);
    };
    if most as u64 > limit {
        let at = worst.expect("a peak has an instant");
        let counted: Vec<&Op> = windows
            .iter()
            .filter(|&&(_, from, until)| from <= at && at < until)
            .map(|&(op, _, _)| op)
            .collect();
        return Err(Violation::new(
            Promise::StrictLimit,
            format!("{most} items definitely live at {at}, the limit is {limit}"),
            &counted,
            end,
            &[],
        ));
    }
    let live_at_end = end.live_count();
    if live_at_end as u64 > limit {
        let live: Vec<&str> = end
            .items
            .iter()
            .filter(|(_, item)| !item.deleted)
            .map(|(id, _)| id.as_str())
            .collect();
        let creates: Vec<&Op> = ops
            .iter()
            .filter(|op| op.call == Call::Create && op.may_have_applied() && live.contains(&op.id.as_str()))
            .collect();
        return Err(Violation::new(
            Promise::StrictLimit,
            format!("{live_at_end} items live at the end, the limit is {limit}"),
            &creates,
            end,
            &live,
        ));
    }
    Ok(most)
}

/// Whether every order of the calls on `create`'s id needs it to take
/// effect (its outcome unknown): without it, none ends as the id ends.
fn forced(create: &Op, ops: &[Op], end: &End) -> bool {
    let others: Vec<&Op> = ops
        .iter()
        .filter(|op| op.id == create.id && !std::ptr::eq(*op, create) && linear::takes_part(op))
        .collect();
    !linear::linearizable(&others, Some(end.live(&create.id)))
}

mod linear;

#[cfg(test)]
mod tests;
