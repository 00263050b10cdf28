//! What the history records: a call ([`Op`]), what it asked for
//! ([`Call`]) and how it was answered ([`Outcome`]), on the history's one
//! clock ([`Tick`]).

use std::fmt;

use hybrid_counter::{Created, Error};

/// A point in the history's one global order of invocations and answers.
pub type Tick = u64;

/// What a recorded call asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Create,
    Delete,
}

/// Why a call was refused: it took no effect, for certain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    AlreadyExists,
    NotFound,
    LimitExceeded,
    InvalidInput,
}

/// How a call was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged create; the item's incarnation.
    Created { incarnation: String },
    /// Acknowledged create whose answer does not name the incarnation (the
    /// API's `503 CreatedWithoutSequence`: created, unnumbered).
    CreatedUnnamed,
    /// Acknowledged delete.
    Deleted,
    /// Took no effect.
    Refused(Refusal),
    /// An error whose effect is unknown (it may have been applied).
    Unknown(String),
}

impl Outcome {
    /// A create's answer, classified.
    pub fn of_create(result: &Result<Created, Error>) -> Self {
        match result {
            Ok(created) => Outcome::Created {
                incarnation: created.incarnation.clone(),
            },
            Err(err) => Self::of_error(err),
        }
    }

    /// A delete's answer, classified.
    pub fn of_delete(result: &Result<(), Error>) -> Self {
        match result {
            Ok(()) => Outcome::Deleted,
            Err(err) => Self::of_error(err),
        }
    }

    pub(super) fn of_error(err: &Error) -> Self {
        match err {
            Error::AlreadyExists => Outcome::Refused(Refusal::AlreadyExists),
            Error::NotFound => Outcome::Refused(Refusal::NotFound),
            Error::LimitExceeded { .. } => Outcome::Refused(Refusal::LimitExceeded),
            Error::InvalidInput(_) => Outcome::Refused(Refusal::InvalidInput),
            other => Outcome::Unknown(other.to_string()),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Created { incarnation } => write!(f, "created {incarnation}"),
            Outcome::CreatedUnnamed => write!(f, "created (incarnation not answered)"),
            Outcome::Deleted => write!(f, "deleted"),
            Outcome::Refused(refusal) => write!(f, "refused ({refusal:?})"),
            Outcome::Unknown(why) => write!(f, "unknown: {}", why.chars().take(80).collect::<String>()),
        }
    }
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub call: Call,
    pub scope: String,
    pub id: String,
    pub invoked: Tick,
    /// `None`: never answered (its effect is unknown, at any time after
    /// its invocation).
    pub answered: Option<(Tick, Outcome)>,
}

impl Op {
    /// When it was answered; never: after everything.
    pub(super) fn completed(&self) -> Tick {
        self.answered.as_ref().map_or(Tick::MAX, |(at, _)| *at)
    }

    pub(super) fn outcome(&self) -> Option<&Outcome> {
        self.answered.as_ref().map(|(_, outcome)| outcome)
    }

    /// Acknowledged: its effect happened.
    pub(super) fn acknowledged(&self) -> bool {
        matches!(
            self.outcome(),
            Some(Outcome::Created { .. } | Outcome::CreatedUnnamed | Outcome::Deleted)
        )
    }

    /// Its effect is unknown: it may never have happened.
    pub(super) fn optional(&self) -> bool {
        matches!(self.outcome(), None | Some(Outcome::Unknown(_)))
    }

    /// The latest instant it can have taken effect at: its answer, when
    /// its outcome is known; else none (a put or an update answered with
    /// an error may still land late: `Counter::create`'s read-back can
    /// only tell that it is not there yet).
    pub(super) fn deadline(&self) -> Tick {
        if self.optional() { Tick::MAX } else { self.completed() }
    }

    /// Its effect may have happened (acknowledged or unknown).
    pub(super) fn may_have_applied(&self) -> bool {
        !matches!(self.outcome(), Some(Outcome::Refused(_)))
    }

    pub(super) fn incarnation(&self) -> Option<&str> {
        match self.outcome() {
            Some(Outcome::Created { incarnation }) => Some(incarnation),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = match self.call {
            Call::Create => "create",
            Call::Delete => "delete",
        };
        match &self.answered {
            Some((at, outcome)) => write!(
                f,
                "[{:>6} .. {at:>6}] {call} {}/{} -> {outcome}",
                self.invoked, self.scope, self.id
            ),
            None => write!(
                f,
                "[{:>6} ..  never] {call} {}/{} -> no answer",
                self.invoked, self.scope, self.id
            ),
        }
    }
}
