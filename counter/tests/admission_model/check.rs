//! Running the admission model: [`check`] explores every state breadth
//! first and returns what it found, with the states explored and the
//! time; [`step`] prints a trace's lines. A trace is short, not always a
//! shortest: stateright 0.31 keeps the last trace it meets of a broken
//! `always` property and checks states in blocks of 1,500, stopping only
//! between blocks ([`shortest`] deepens step by step for a shortest one).

use std::collections::BTreeMap;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};
use std::fmt::Debug;
use std::hash::Hash;

use super::{Action, AdmissionModel, Client, OVERSHOOT, State};

/// What one exhaustive run found.
pub(super) struct Run {
    pub(super) what: String,
    pub(super) states: usize,
    pub(super) seconds: f64,
    /// Property name and the trace to its discovery, cut at the first
    /// state that shows it.
    pub(super) found: BTreeMap<&'static str, Vec<String>>,
    /// The `always` properties it found broken.
    pub(super) failures: Vec<&'static str>,
}

impl Run {
    pub(super) fn assert_found(&self, name: &str) {
        assert!(self.found.contains_key(name), "{}: never {name}", self.what);
    }
}

/// Checks every state of `model` (breadth first); stops after the first
/// failure, or with `overshoot` after the first overshoot.
pub(super) fn check(what: &str, model: AdmissionModel, overshoot: bool) -> Run {
    let finish = if overshoot {
        HasDiscoveries::AnyOf([OVERSHOOT].into())
    } else {
        HasDiscoveries::AnyFailures
    };
    check_until(what, model, finish)
}

/// Checks every state of `model` until `finish` holds.
pub(super) fn check_until(what: &str, model: AdmissionModel, finish: HasDiscoveries) -> Run {
    let started = Instant::now();
    let checker = model.clone().checker().finish_when(finish).spawn_bfs().join();
    let properties = model.properties();
    let failures = properties
        .iter()
        .filter(|p| p.expectation.discovery_is_failure() && checker.discovery(p.name).is_some())
        .map(|p| p.name)
        .collect();
    let found = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| {
            let property = properties.iter().find(|p| p.name == name).expect("a property");
            let failure = property.expectation.discovery_is_failure();
            let shows = |s: &State| (property.condition)(&model, s) != failure;
            let mut trace = Vec::new();
            for (state, action) in path.into_vec() {
                if shows(&state) {
                    trace.push(step(&state, None));
                    break;
                }
                trace.push(step(&state, action));
            }
            (name, trace)
        })
        .collect();
    let run = Run {
        what: what.to_owned(),
        states: checker.unique_state_count(),
        seconds: started.elapsed().as_secs_f64(),
        found,
        failures,
    };
    eprintln!(
        "admission model, {what}: {} states in {:.1}s; failures {:?}",
        run.states, run.seconds, run.failures
    );
    run
}

/// A client as a trace names it (clients are kept sorted, so not by
/// position).
pub(super) fn who(c: &Client) -> String {
    match c {
        Client::Idle => "an idle client".to_owned(),
        Client::Read {
            quotas, fences, stale, ..
        } => {
            format!(
                "the client with quotas {quotas:?}{}{}",
                if fences.iter().any(|f| *f != 0) {
                    format!(" fences {fences:x?}")
                } else {
                    String::new()
                },
                if *stale { " (stale)" } else { "" }
            )
        }
        Client::Reading { got, n, .. } => format!("the client that has read {:?}", &got[..usize::from(*n)]),
        Client::Reserved { shard } => format!("the client reserved on #{shard}"),
        Client::SoftDeleted { shard } => format!("the client deleting from #{shard}"),
        Client::Put { shard } => format!("the client that put an item on #{shard}"),
        Client::Decremented { shard } => format!("the client deleting from #{shard}"),
    }
}

/// One line of a trace: the state, then the step taken from it.
pub(super) fn step(s: &State, action: Option<Action>) -> String {
    let by = |c: usize| who(&s.clients[c]);
    let action = action.map(|a| {
        let what = match a {
            Action::Read(c) => format!("{} reads", by(c)),
            Action::ReadOld(c) => format!("{} reads under the old configuration", by(c)),
            Action::CloseWindow => "the rollout window closes".to_owned(),
            Action::ReadItem(c) => format!("{} reads the next item", by(c)),
            Action::Reserve(c, k) => format!("{} reserves on #{k}", by(c)),
            Action::GiveUp(c) => format!("{} gives up", by(c)),
            Action::PutApplied(c) => format!("{}: its put is applied", by(c)),
            Action::PutLost(c) => format!("{}: its put fails ambiguously, the slot is kept", by(c)),
            Action::PutRefused(c) => format!("{}: its put is refused, the slot given back", by(c)),
            Action::SoftDelete(c, k) => format!("{} soft-deletes an item on #{k}", by(c)),
            Action::GiveBack(c) => format!("{}: its -1 lands", by(c)),
            Action::GiveBackLost(c) => format!("{}: its -1 is lost", by(c)),
            Action::GiveBackResent(c) => format!("{}: its -1 lands, and again (re-sent)", by(c)),
            Action::IncrementResent(c, k) => format!("{}: its +1 lands on #{k}, and again (re-sent)", by(c)),
            Action::BestEffortPut(c, k) => format!("{} puts an item on #{k}", by(c)),
            Action::Increment(c, k) => format!("{}: its +1 lands on #{k}", by(c)),
            Action::IncrementLost(c) => format!("{}: its +1 is lost", by(c)),
            Action::Decrement(c, k, to) => format!("{} deletes an item on #{k}: -1 on #{to}", by(c)),
            Action::SoftDeleteAfterDecrement(c) => format!("{}: the soft delete lands", by(c)),
            Action::DeleteStops(c) => format!("{}: the delete stops", by(c)),
            Action::AuditPlan => "the audit reads and plans a repair".to_owned(),
            Action::AuditWrite => "the audit writes its repair".to_owned(),
            Action::ChangeConfig => "the configuration changes".to_owned(),
            Action::SwitchToStrict => "admission switches to strict".to_owned(),
            Action::AuditRaiseRefused => "the audit's raise is refused (an epoch moved)".to_owned(),
        };
        format!("\n    => {what}")
    });
    format!(
        "be {:?} live {:?}{}{}{}{}{}",
        &s.be[..],
        &s.live[..],
        if s.epoch.iter().any(|e| *e > 0) {
            format!(" epochs {:?}", &s.epoch[..])
        } else {
            String::new()
        },
        if s.strict { ", strict" } else { ", best-effort" },
        if s.changed { ", changed" } else { "" },
        s.repair.map(|r| format!(", repair planned {r:?}")).unwrap_or_default(),
        action.unwrap_or_default()
    )
}

/// What [`shortest`] found: the `always` properties broken, each with a
/// shortest trace, and the names of every property discovered.
pub(super) struct Found {
    pub(super) broken: Vec<(&'static str, String)>,
    pub(super) discovered: Vec<&'static str>,
}

/// Checks every state of a small `model` (until a failure) and prints the
/// states explored. On a failure, a shortest trace (up to 100,000 states
/// explored; beyond, a trace): the checker keeps the last trace it meets
/// of a property (and checks states in blocks, past the first failure),
/// so the depth grows one step at a time until the failure shows.
pub(super) fn shortest<M>(what: &str, model: M) -> Found
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Debug + Hash + Clone + PartialEq + Send + Sync,
    M::Action: Debug + Clone + PartialEq + Send + Sync,
{
    let started = Instant::now();
    let properties = model.properties();
    let broken = |checker: &dyn Checker<M>| -> Vec<(&'static str, String)> {
        properties
            .iter()
            .filter(|p| p.expectation.discovery_is_failure())
            .filter_map(|p| {
                let path = checker.discovery(p.name)?;
                let mut trace = Vec::new();
                for (state, action) in path.into_vec() {
                    if !(p.condition)(&model, &state) {
                        trace.push(format!("{state:?}"));
                        break;
                    }
                    trace.push(format!("{state:?}\n    => {action:?}"));
                }
                Some((p.name, trace.join("\n")))
            })
            .collect()
    };
    let all = model
        .clone()
        .checker()
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join();
    eprintln!(
        "{what}: {} states in {:.1}s",
        all.unique_state_count(),
        started.elapsed().as_secs_f64()
    );
    let discovered = all.discoveries().into_keys().collect();
    let failed = broken(&all);
    // Deepening re-explores the states up to each depth: only for small
    // models; a large one's trace is a valid one, not a shortest.
    if failed.is_empty() || all.unique_state_count() > 100_000 {
        return Found {
            broken: failed,
            discovered,
        };
    }
    for depth in 1.. {
        let checker = model.clone().checker().target_max_depth(depth).spawn_bfs().join();
        let found = broken(&checker);
        if !found.is_empty() {
            eprintln!("{what}: a shortest failure at depth {depth}");
            return Found {
                broken: found,
                discovered,
            };
        }
    }
    unreachable!()
}
