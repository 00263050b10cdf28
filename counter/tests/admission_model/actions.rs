//! The model's steps and properties: what each client, the audit and
//! the operator may do from a state, and what must hold in every state.

use super::*;

impl Model for AdmissionModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            be: [0; SLOTS],
            live: [0; SLOTS],
            clients: [Client::Idle; CLIENTS],
            epoch: [0; SLOTS],
            present: 0,
            strict: self.admission == Admission::Strict && !self.switch,
            raised: false,
            repair: None,
            repair_strict: false,
            changed: false,
            excess: 0,
            in_flight_at_change: 0,
            window: 0,
            in_flight_at_raise: 0,
            in_flight_at_plan: 0,
            closed: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let open = self.window_open(state);
        // In a rollout window of the shard count, best-effort writes go to
        // the shards of either layout.
        let mut active = self.active(state);
        if open {
            for k in self.layout_of(false).active().map(|s| self.names().slot_of(s)) {
                if !active.contains(&k) {
                    active.push(k);
                }
            }
        }
        // In a rollout window of the switch, a request runs either admission.
        let strict_too = state.strict;
        let best_effort_too = !state.strict || open && self.switch;
        for (c, client) in state.clients.iter().enumerate() {
            // Interchangeable clients in the same state do the same: one is enough.
            if state.clients[..c].contains(client) {
                continue;
            }
            match *client {
                Client::Idle => {
                    if strict_too {
                        if self.torn_reads || self.admits(state) {
                            actions.push(Action::Read(c));
                        }
                        // A request on an invocation still under the old
                        // configuration.
                        if open
                            && !self.switch
                            && (self.torn_reads || self.admits_read(state.be_total(), self.limit_of(false)))
                        {
                            actions.push(Action::ReadOld(c));
                        }
                        for k in (0..SLOTS).filter(|&k| state.live[k] > 0) {
                            actions.push(Action::SoftDelete(c, k));
                        }
                    }
                    if best_effort_too {
                        if self.admits(state) {
                            actions.extend(active.iter().map(|&k| Action::BestEffortPut(c, k)));
                        }
                        for k in (0..SLOTS).filter(|&k| state.live[k] > 0) {
                            // The item's own shard first; a throttled `-1`
                            // moves on to the active ones.
                            actions.push(Action::Decrement(c, k, k));
                            for &to in active.iter().filter(|&&to| to != k) {
                                actions.push(Action::Decrement(c, k, to));
                            }
                        }
                    }
                }
                Client::Read { quotas, fences, .. } => {
                    for k in 0..SLOTS {
                        // The store's condition, evaluated as the store
                        // doubles evaluate it.
                        let reservation = Reservation {
                            quota: u64::from(quotas[k]),
                            fence: decode(fences[k]),
                        };
                        let count = (state.present & 1 << k != 0).then(|| i64::from(state.be[k]));
                        let epoch = (state.epoch[k] != 0).then(|| u64::from(state.epoch[k]));
                        if reservation.admits(count, epoch) {
                            actions.push(Action::Reserve(c, k));
                        }
                    }
                    actions.push(Action::GiveUp(c));
                }
                Client::Reading { .. } => actions.push(Action::ReadItem(c)),
                Client::Reserved { .. } => {
                    actions.extend([Action::PutApplied(c), Action::PutLost(c), Action::PutRefused(c)]);
                }
                Client::SoftDeleted { .. } => {
                    actions.extend([Action::GiveBack(c), Action::GiveBackLost(c)]);
                    if self.best_effort_sends == Resend::BySdk {
                        actions.push(Action::GiveBackResent(c));
                    }
                }
                Client::Put { .. } => {
                    actions.extend(active.iter().map(|&k| Action::Increment(c, k)));
                    actions.push(Action::IncrementLost(c));
                    if self.best_effort_sends == Resend::BySdk {
                        actions.extend(active.iter().map(|&k| Action::IncrementResent(c, k)));
                    }
                }
                Client::Decremented { shard } => {
                    if state.live[usize::from(shard)] > 0 {
                        actions.push(Action::SoftDeleteAfterDecrement(c));
                    }
                    actions.push(Action::DeleteStops(c));
                }
            }
        }
        match state.repair {
            Some(Plan::Raise { from, writes, .. }) => {
                // The transaction's condition: no item it writes past `from`.
                if (0..SLOTS).all(|k| writes & 1 << k == 0 || state.epoch[k] <= from) {
                    actions.push(Action::AuditWrite);
                } else {
                    actions.push(Action::AuditRaiseRefused);
                }
            }
            Some(Plan::Set(_)) => actions.push(Action::AuditWrite),
            None => {
                if self.plan_repair(state).is_some() {
                    actions.push(Action::AuditPlan);
                }
            }
        }
        if self.change != Change::None && !state.changed {
            actions.push(Action::ChangeConfig);
        }
        if open {
            actions.push(Action::CloseWindow);
        }
        if self.switch && !state.strict {
            actions.push(Action::SwitchToStrict);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            // A read under the old configuration of a rollout window is the
            // same read, marked stale (and never the new configuration's).
            Action::Read(c) | Action::ReadOld(c) => {
                let stale = matches!(action, Action::ReadOld(_));
                s.clients[c] = if self.torn_reads {
                    Client::Reading {
                        got: [0; SLOTS],
                        epochs: [0; SLOTS],
                        seen: 0,
                        n: 0,
                        fresh: true,
                        stale,
                    }
                } else {
                    self.after_read(s.be, s.epoch, s.present, s.changed && !stale, true, stale)
                };
            }
            Action::CloseWindow => s.closed = true,
            Action::ReadItem(c) => {
                let Client::Reading {
                    mut got,
                    mut epochs,
                    mut seen,
                    n,
                    fresh,
                    stale,
                } = s.clients[c]
                else {
                    unreachable!()
                };
                let k = usize::from(n);
                got[k] = s.be[k];
                epochs[k] = s.epoch[k];
                seen |= s.present & 1 << k;
                // The configuration the request started under.
                let changed = s.changed && !stale;
                s.clients[c] = if n + 1 < self.items_read() {
                    Client::Reading {
                        got,
                        epochs,
                        seen,
                        n: n + 1,
                        fresh,
                        stale,
                    }
                } else {
                    self.after_read(got, epochs, seen, changed, fresh, stale)
                };
            }
            Action::Reserve(c, k) => {
                let Client::Read { stale, fences, .. } = s.clients[c] else {
                    unreachable!()
                };
                if fences[k] >> 4 == 2 {
                    s.epoch[k] = fences[k] & 0xf;
                }
                s.add(k, 1);
                // With a rollout window the allowance is the creates in
                // flight instead (unbounded otherwise: every old read counts).
                if !self.rollout {
                    s.window += u8::from(stale);
                }
                s.clients[c] = Client::Reserved {
                    shard: u8::try_from(k).expect("slot"),
                };
            }
            Action::GiveUp(c) => s.clients[c] = Client::Idle,
            Action::PutApplied(c) => {
                let Client::Reserved { shard } = s.clients[c] else {
                    unreachable!()
                };
                s.live[usize::from(shard)] += 1;
                s.written();
                s.clients[c] = Client::Idle;
            }
            Action::PutLost(c) => s.clients[c] = Client::Idle,
            Action::PutRefused(c) => {
                let Client::Reserved { shard, .. } = s.clients[c] else {
                    unreachable!()
                };
                s.add(usize::from(shard), -1);
                s.clients[c] = Client::Idle;
            }
            Action::SoftDelete(c, k) => {
                s.live[k] -= 1;
                s.excess = s.excess.saturating_sub(1);
                s.written();
                s.clients[c] = Client::SoftDeleted {
                    shard: u8::try_from(k).expect("slot"),
                };
            }
            Action::GiveBack(c) => {
                let Client::SoftDeleted { shard } = s.clients[c] else {
                    unreachable!()
                };
                s.add(usize::from(shard), -1);
                s.clients[c] = Client::Idle;
            }
            Action::GiveBackLost(c) => s.clients[c] = Client::Idle,
            Action::GiveBackResent(c) => {
                let Client::SoftDeleted { shard } = s.clients[c] else {
                    unreachable!()
                };
                s.add(usize::from(shard), -2);
                s.clients[c] = Client::Idle;
            }
            Action::IncrementResent(c, k) => {
                s.add(k, 2);
                s.clients[c] = Client::Idle;
            }
            Action::BestEffortPut(c, k) => {
                s.live[k] += 1;
                s.written();
                s.clients[c] = Client::Put {
                    shard: u8::try_from(k).expect("slot"),
                };
            }
            Action::Increment(c, k) => {
                s.add(k, 1);
                s.clients[c] = Client::Idle;
            }
            Action::IncrementLost(c) => s.clients[c] = Client::Idle,
            Action::Decrement(c, k, to) => {
                s.add(to, -1);
                s.clients[c] = Client::Decremented {
                    shard: u8::try_from(k).expect("slot"),
                };
            }
            Action::SoftDeleteAfterDecrement(c) => {
                let Client::Decremented { shard } = s.clients[c] else {
                    unreachable!()
                };
                s.live[usize::from(shard)] -= 1;
                s.written();
                s.clients[c] = Client::Idle;
            }
            Action::DeleteStops(c) => s.clients[c] = Client::Idle,
            Action::AuditPlan => {
                s.repair = self.plan_repair(&s);
                s.repair_strict = s.strict;
                s.in_flight_at_plan = 0;
            }
            Action::AuditWrite => {
                let repair = s.repair.take().expect("planned");
                // A raise that only created the shards is not the raise:
                // the engine reports the scope not repaired and raises on
                // its next try (the model's next plan).
                let shards_only = matches!(repair, Plan::Raise { shards_only: true, .. });
                match repair {
                    Plan::Set(be) => {
                        for k in (0..SLOTS).filter(|&k| be[k] != s.be[k]) {
                            s.present |= 1 << k;
                        }
                        s.be = be;
                    }
                    Plan::Raise { adds, from, writes, .. } => {
                        for k in (0..SLOTS).filter(|&k| writes & 1 << k != 0) {
                            s.be[k] += adds[k];
                            s.epoch[k] = from + 1;
                            s.present |= 1 << k;
                        }
                    }
                }
                s.written();
                if !shards_only {
                    self.landed(&mut s);
                }
                s.repair_strict = false;
                s.in_flight_at_plan = 0;
            }
            Action::AuditRaiseRefused => {
                s.repair = None;
                s.repair_strict = false;
                s.in_flight_at_plan = 0;
            }
            Action::SwitchToStrict => {
                s.strict = true;
                s.closed = !self.rollout;
                // Best-effort admission may have passed the limit (BE
                // undercounts): deletes drain what is above it.
                let limit = i64::try_from(self.limit(&s)).expect("limit");
                s.excess = u8::try_from((s.live_total() - limit).max(0)).expect("bounded");
            }
            Action::ChangeConfig => {
                s.changed = true;
                s.closed = !self.rollout;
                let limit = i64::try_from(self.limit(&s)).expect("limit");
                s.excess = u8::try_from((s.live_total() - limit).max(0)).expect("bounded");
                let limit_changed = matches!(self.change, Change::Limit(_));
                for client in &mut s.clients {
                    match client {
                        Client::Read { stale, .. } | Client::Reading { stale, .. } => {
                            *stale = true;
                            s.in_flight_at_change += 1;
                        }
                        // Reserved under the old limit; under the old shard
                        // count it is in BE already, which new reads see.
                        Client::Reserved { .. } => {
                            s.in_flight_at_change += 1;
                            s.window += u8::from(limit_changed);
                        }
                        _ => {}
                    }
                }
            }
        }
        if self.rollout && !self.bound_at_change && (self.window_open(last) || self.window_open(&s)) {
            // The documented bound: the most creates in flight at any
            // instant of the window.
            let creates = s
                .clients
                .iter()
                .filter(|c| {
                    matches!(
                        c,
                        Client::Read { .. } | Client::Reading { .. } | Client::Reserved { .. } | Client::Put { .. }
                    )
                })
                .count();
            s.in_flight_at_change = s.in_flight_at_change.max(u8::try_from(creates).expect("clients"));
        }
        if self.switch && s.repair.is_some() {
            // A raise takes a reservation whose put is in flight for a live
            // item, and an item soft-deleted whose `-1` is in flight for a
            // gone one: BE falls short by one as each lands. The bound: the
            // most strict requests between their writes at any instant from
            // the audit's read to the repair's landing.
            s.in_flight_at_plan = s.in_flight_at_plan.max(strict_in_flight(&s));
        }
        s.clients.sort();
        Some(s)
    }

    /// Strict admission stays within these unless it overshoots; room is
    /// left to see an overshoot. Best-effort admission may pass its limit
    /// (BE undercounts): it is cut at the limit, and BE at -1 per shard, as
    /// its property (BE <= live) only compares sums.
    fn within_boundary(&self, state: &State) -> bool {
        let limit = i64::try_from(self.limit.max(self.limit(state))).expect("limit");
        let (live, low, high) = if self.switch {
            (limit + 2, -1, limit + 3)
        } else if self.strict() {
            // One above what `OVERSHOOT` allows: a violation stays a
            // reachable state.
            let live = self.allowed(state) + self.allowance(state) + 1;
            (live, -3, (limit + 3).max(live))
        } else {
            (limit, -1, limit)
        };
        state.live_total() <= live
            && state.be.iter().all(|c| (low..=high).contains(&i64::from(*c)))
            && state.epoch.iter().all(|e| *e <= 3)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        type P = Property<AdmissionModel>;
        fn lowered(s: &State) -> bool {
            matches!(s.repair, Some(Plan::Set(r)) if (0..SLOTS).any(|k| r[k] < s.be[k]))
        }
        fn raised(s: &State) -> bool {
            match s.repair {
                Some(Plan::Set(r)) => r.iter().map(|c| i64::from(*c)).sum::<i64>() > s.be_total(),
                Some(Plan::Raise { adds, .. }) => adds.iter().any(|a| *a > 0),
                None => false,
            }
        }
        fn holds(s: &State) -> bool {
            s.strict && s.raised
        }
        if self.switch {
            // Strict's limit holds once a raise has landed after the switch
            // with no best-effort request left; before, strict admits over
            // BE below live.
            vec![
                // The documented exception, bounded: the reservations whose
                // puts were in flight when the last raise landed.
                P::always(OVERSHOOT, |m, s| {
                    !holds(s) || s.live_total() <= m.allowed(s) + m.allowance(s) + i64::from(s.in_flight_at_raise)
                }),
                // Best-effort's `+1`s and `-1`s moved on to other shards:
                // the audit's raise ([`decide`]) fills each shard's
                // shortfall, but not as an `always`: a raise that only
                // creates the shards ([`hybrid_counter::best_effort::Raise::fences_only`]) lands with a
                // shard short, and `raised` is set by it (the sum covers
                // live); a reservation given back before the next raise
                // lands then takes the shard further below (trace in
                // `after_the_switch_to_strict_the_raise_is_planned_at_once_and_the_limit_holds_but_for_the_requests_in_flight`'s
                // doc).
                P::sometimes(UNCOVERED, |_, s| {
                    let short: i64 = (0..SLOTS)
                        .map(|k| (i64::from(s.live[k]) - i64::from(s.be[k])).max(0))
                        .sum();
                    holds(s) && short > i64::from(s.in_flight_at_raise)
                }),
                P::always(RAISE_PLANNED, |m, s| {
                    !s.strict || s.be_total() >= s.live_total() || s.repair.is_some() || m.plan_repair(s).is_some()
                }),
                P::sometimes(UNDERCOUNT, |_, s| s.strict && s.be_total() < s.live_total()),
                P::sometimes(RAISED, |_, s| raised(s)),
                P::sometimes(STRICT_HOLDS, |m, s| {
                    holds(s) && s.live_total() == i64::try_from(m.limit(s)).expect("limit")
                }),
            ]
        } else if self.strict() {
            vec![
                P::always(OVERSHOOT, |m, s| s.live_total() <= m.allowed(s) + m.allowance(s)),
                P::always(COVERED, |_, s| {
                    (0..SLOTS).all(|k| i64::from(s.be[k]) >= i64::from(s.live[k]))
                }),
                P::sometimes(FULL, |m, s| s.live_total() == i64::try_from(m.limit(s)).expect("limit")),
                P::sometimes(LOWERED, |_, s| lowered(s)),
                P::sometimes(WINDOW_USED, |m, s| s.live_total() > m.allowed(s)),
            ]
        } else {
            vec![
                P::always(BE_AT_MOST_LIVE, |_, s| s.be_total() <= s.live_total()),
                P::sometimes(FULL, |m, s| s.live_total() == i64::try_from(m.limit(s)).expect("limit")),
                P::sometimes(UNDERCOUNT, |_, s| s.be_total() < s.live_total()),
                P::sometimes(RAISED, |_, s| raised(s)),
            ]
        }
    }
}

impl AdmissionModel {
    /// After a repair lands: in strict admission after the switch, with no
    /// best-effort request left, strict's limit holds from now on. Live
    /// items above it, admitted over the low BE before (reservations whose
    /// put is still to land among them), drain by deletes.
    fn landed(&self, s: &mut State) {
        if self.switch && s.repair_strict && s.closed && !s.best_effort_in_flight() && s.be_total() >= s.live_total() {
            s.raised = true;
            let limit = i64::try_from(self.limit(s)).expect("limit");
            let reserved = s
                .clients
                .iter()
                .filter(|c| matches!(c, Client::Reserved { .. }))
                .count();
            let admitted = s.live_total() + i64::try_from(reserved).expect("clients");
            let over = u8::try_from((admitted - limit).max(0)).expect("bounded");
            s.excess = s.excess.max(over);
            s.in_flight_at_raise = s.in_flight_at_plan.max(strict_in_flight(s));
        }
    }
}

/// Strict requests between their two writes: reserved, the put not landed;
/// soft-deleted, the `-1` not landed.
fn strict_in_flight(s: &State) -> u8 {
    let n = s
        .clients
        .iter()
        .filter(|c| matches!(c, Client::Reserved { .. } | Client::SoftDeleted { .. }))
        .count();
    u8::try_from(n).expect("clients")
}
