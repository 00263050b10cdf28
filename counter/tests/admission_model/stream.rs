//! The stream's side of one resource id, checked with `stateright`
//! (issue 34 D1): creates whose put is applied and answered with a
//! failure, deletes, and the stream consumer, which counts inserts on the
//! eventual counter (EC) and hard-deletes a soft-deleted item (EC `-1`).
//!
//! Two creators put the same id, each its own incarnation (1 and 2; the
//! second is the client's retry after a 503, or another client), under
//! `attribute_not_exists`. A put is applied, or lost before it was
//! applied, or still travelling when its creator gave up (then it may
//! land later, once). An applied put is answered, or its answer is lost
//! (a 500 after DynamoDB applied it). After a failure the put is sent as
//! [`hybrid_counter::store::sends::PUT_RESOURCE`] says: [`Resend::BySdk`] sends it
//! once more later (the SDK's standard retry), after other actors ran;
//! [`Resend::Never`] reads the item back once and answers with the real
//! [`read_back_created`]. A deleter soft-deletes the live incarnation
//! (its condition names it; acknowledged), as often as there is one.
//! The stream processes an item's records in order: the insert's `+1`
//! before the soft delete's hard delete.
//!
//! Checked at every state: **an acknowledged delete stays deleted** (the
//! incarnation it deleted is never live again), and once the stream has
//! caught up, EC counts the live item. The documented exception
//! (docs/design.md: a put still travelling when its create answered 503
//! lands after the id was created again, deleted and hard-deleted: the id
//! comes back, as another incarnation) is reachable, a `sometimes`.

use stateright::{Model, Property};

use hybrid_counter::request::read_back_created;
use hybrid_counter::store::Resend;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Creator {
    Idle,
    /// The put is on its way; `resent`: this is the SDK's second send.
    Sent {
        resent: bool,
    },
    /// Applied, not answered yet.
    Applied {
        resent: bool,
    },
    /// Answered with a failure; the SDK sends it again later.
    ResendPending,
    /// The creator gave up (503) while its put still travels: it may land.
    Travelling,
    /// Answered: `created` (acknowledged) or not (refused or unknown).
    Done {
        created: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct StreamState {
    /// The id's item: `None` absent (never put, or hard-deleted), else its
    /// incarnation (1 or 2) and whether it is soft-deleted.
    pub(super) item: Option<(u8, bool)>,
    /// Acknowledged deletes, by incarnation (bit `i`).
    pub(super) deleted: u8,
    /// Incarnations acknowledged as created (bit `i`).
    pub(super) created: u8,
    /// The eventual counter, and the inserts the stream has not counted.
    pub(super) ec: i8,
    pub(super) inserts: u8,
    /// Hard deletes the stream made.
    pub(super) hard_deleted: u8,
    /// The live item's put landed after its creator had given up.
    pub(super) late: bool,
    pub(super) creators: [Creator; 2],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum StreamAction {
    Send(usize),
    /// The put is applied (or refused by its condition: the id is taken).
    Apply(usize),
    /// Lost before it was applied, answered with a failure.
    Lost(usize),
    /// The creator times out and answers 503 while the put travels.
    GiveUp(usize),
    Answer(usize),
    /// Applied, the answer lost (a 500).
    AnswerLost(usize),
    /// The SDK sends the put again.
    Resend(usize),
    /// The deleter soft-deletes the live incarnation (acknowledged).
    Delete,
    /// The stream counts an insert.
    CountInsert,
    /// The stream hard-deletes the soft-deleted item, EC `-1`.
    HardDelete,
}

/// The model: the put's send policy.
#[derive(Debug, Clone)]
pub(super) struct StreamModel {
    pub(super) resend: Resend,
}

pub(super) const STAYS_DELETED: &str = "an acknowledged delete stays deleted";
pub(super) const EC_COUNTS: &str = "caught up, EC counts the live item";
pub(super) const ID_BACK: &str = "the id is live again after a hard delete, another incarnation";
pub(super) const HARD_DELETED: &str = "the stream hard-deleted an item";

fn incarnation(c: usize) -> u8 {
    u8::try_from(c + 1).expect("two creators")
}

impl StreamModel {
    /// After a failure answer: the SDK sends again, or the kit reads back.
    fn after_failure(&self, s: &mut StreamState, c: usize, resent: bool) {
        s.creators[c] = if self.resend == Resend::BySdk && !resent {
            Creator::ResendPending
        } else {
            self.read_back(s, c)
        };
    }

    fn read_back(&self, s: &mut StreamState, c: usize) -> Creator {
        let found = s.item.map(|(i, _)| i.to_string());
        let created = read_back_created(found.as_deref(), &incarnation(c).to_string());
        if created {
            s.created |= 1 << incarnation(c);
        }
        Creator::Done { created }
    }

    /// The put reaches the table: applied when the id is free.
    fn land(s: &mut StreamState, c: usize) -> bool {
        if s.item.is_some() {
            return false;
        }
        s.item = Some((incarnation(c), false));
        s.inserts += 1;
        true
    }
}

impl Model for StreamModel {
    type State = StreamState;
    type Action = StreamAction;

    fn init_states(&self) -> Vec<StreamState> {
        vec![StreamState {
            item: None,
            deleted: 0,
            created: 0,
            ec: 0,
            inserts: 0,
            hard_deleted: 0,
            late: false,
            creators: [Creator::Idle; 2],
        }]
    }

    fn actions(&self, s: &StreamState, actions: &mut Vec<StreamAction>) {
        for (c, creator) in s.creators.iter().enumerate() {
            match creator {
                Creator::Idle => actions.push(StreamAction::Send(c)),
                Creator::Sent { resent } => {
                    actions.extend([StreamAction::Apply(c), StreamAction::Lost(c)]);
                    if !resent {
                        actions.push(StreamAction::GiveUp(c));
                    }
                }
                Creator::Applied { .. } => actions.extend([StreamAction::Answer(c), StreamAction::AnswerLost(c)]),
                Creator::ResendPending => actions.push(StreamAction::Resend(c)),
                Creator::Travelling => actions.push(StreamAction::Apply(c)),
                Creator::Done { .. } => {}
            }
        }
        if matches!(s.item, Some((_, false))) {
            actions.push(StreamAction::Delete);
        }
        if s.inserts > 0 {
            actions.push(StreamAction::CountInsert);
        } else if matches!(s.item, Some((_, true))) {
            actions.push(StreamAction::HardDelete);
        }
    }

    fn next_state(&self, last: &StreamState, action: StreamAction) -> Option<StreamState> {
        let mut s = last.clone();
        match action {
            StreamAction::Send(c) => s.creators[c] = Creator::Sent { resent: false },
            StreamAction::Apply(c) => {
                let applied = Self::land(&mut s, c);
                s.late = applied && last.creators[c] == Creator::Travelling;
                s.creators[c] = match (last.creators[c], applied) {
                    (Creator::Sent { resent }, true) => Creator::Applied { resent },
                    // Refused by its condition: the id is taken (409).
                    (Creator::Sent { .. }, false) => Creator::Done { created: false },
                    // Landed late (or not): the creator answered already.
                    (_, _) => Creator::Done { created: false },
                };
            }
            StreamAction::Lost(c) => {
                let Creator::Sent { resent } = last.creators[c] else {
                    unreachable!()
                };
                self.after_failure(&mut s, c, resent);
            }
            StreamAction::GiveUp(c) => {
                // The read back finds nothing of ours: 503, the put travels on.
                let Creator::Done { created } = self.read_back(&mut s, c) else {
                    unreachable!()
                };
                assert!(!created, "read back before the put landed");
                s.creators[c] = Creator::Travelling;
            }
            StreamAction::Answer(c) => {
                s.created |= 1 << incarnation(c);
                s.creators[c] = Creator::Done { created: true };
            }
            StreamAction::AnswerLost(c) => {
                let Creator::Applied { resent } = last.creators[c] else {
                    unreachable!()
                };
                self.after_failure(&mut s, c, resent);
            }
            StreamAction::Resend(c) => s.creators[c] = Creator::Sent { resent: true },
            StreamAction::Delete => {
                let (i, _) = s.item.expect("live");
                s.item = Some((i, true));
                s.deleted |= 1 << i;
            }
            StreamAction::CountInsert => {
                s.ec += 1;
                s.inserts -= 1;
            }
            StreamAction::HardDelete => {
                s.item = None;
                s.ec -= 1;
                s.hard_deleted += 1;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(STAYS_DELETED, |_, s: &StreamState| match s.item {
                Some((i, false)) => s.deleted & 1 << i == 0,
                _ => true,
            }),
            Property::always(EC_COUNTS, |_, s: &StreamState| {
                s.inserts > 0 || matches!(s.item, Some((_, true))) || i64::from(s.ec) == i64::from(s.item.is_some())
            }),
            Property::sometimes(
                ID_BACK,
                |_, s: &StreamState| matches!(s.item, Some((i, false)) if s.late && s.deleted != 0 && s.deleted & 1 << i == 0),
            ),
            Property::sometimes(HARD_DELETED, |_, s: &StreamState| s.hard_deleted > 0),
        ]
    }
}

mod tests {
    use super::*;
    use crate::check::shortest;

    fn run(what: &str, resend: Resend) -> Vec<(&'static str, String)> {
        shortest(&format!("stream model, {what}"), StreamModel { resend }).broken
    }

    /// Today's send policy ([`hybrid_counter::store::sends::PUT_RESOURCE`]: sent
    /// once, read back after an unknown outcome): an acknowledged delete
    /// stays deleted, EC counts the live item, and the documented
    /// exception (a put travelling past its 503 lands after the id was
    /// created again, deleted and hard-deleted) is reachable.
    #[test]
    fn an_acknowledged_delete_stays_deleted_with_one_send_and_a_read_back() {
        assert_eq!(hybrid_counter::store::sends::PUT_RESOURCE, Resend::Never);
        let found = shortest(
            "stream model, one send and a read back",
            StreamModel {
                resend: hybrid_counter::store::sends::PUT_RESOURCE,
            },
        );
        assert!(found.broken.is_empty(), "{:#?}", found.broken);
        for name in [ID_BACK, HARD_DELETED] {
            assert!(found.discovered.contains(&name), "never {name}");
        }
    }

    /// Issue 34 D1 on the send policy before the fix ([`Resend::BySdk`]
    /// for the put). A shortest trace (10 steps): the second creator's put
    /// (incarnation 2) is applied and its answer lost (a 500); the SDK
    /// will send it again; the deleter soft-deletes incarnation 2
    /// (acknowledged); the stream counts the insert and hard-deletes it;
    /// the re-sent put finds `attribute_not_exists` true and incarnation
    /// 2 is live again (`Send(1)`, `Apply(1)`, `AnswerLost(1)`,
    /// `Resend(1)`, `Delete`, `CountInsert`, `HardDelete`, `Apply(1)`).
    /// `request::tests::an_acknowledged_delete_stays_deleted_when_a_put_s_answer_was_lost`
    /// replays it on the real request path.
    #[test]
    fn the_sdk_s_resend_before_the_fix_brings_back_a_deleted_item() {
        let broken = run("the SDK re-sends the put (before the fix)", Resend::BySdk);
        let names: Vec<&str> = broken.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, vec![STAYS_DELETED], "{broken:#?}");
        eprintln!("D1, a shortest trace:\n{}", broken[0].1);
    }
}
