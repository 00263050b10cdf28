//! The crate's errors. The request path's public contract has exactly five
//! outcomes besides success; a DynamoDB transaction error is never one of
//! them (it becomes [`Error::Unavailable`] at worst). A gapless sequence
//! ([`crate::sequence`]) adds two: [`Error::SequenceContended`] (nothing
//! held) and [`Error::SequenceOutcomeUnknown`] (a number may be held).

use crate::ids::IdError;

/// Errors of the request path and of configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("limit exceeded: the scope uses {usage} of {limit}")]
    LimitExceeded { usage: i64, limit: u64 },
    /// A scope spread over several keys ([`crate::scope_keys`]): the
    /// create's key holds its share of the limit. `usage` is that key's.
    #[error(
        "limit exceeded: the scope's key {key} of {keys} uses {usage} of its share {share} of the limit {limit} \
         (each key admits up to its share; ids are spread over the keys by hash)"
    )]
    ShareExceeded {
        usage: i64,
        share: u64,
        limit: u64,
        key: u32,
        keys: u32,
    },
    #[error("the resource already exists")]
    AlreadyExists,
    #[error("the resource does not exist")]
    NotFound,
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("the counter store is unavailable, retry later: {0}")]
    Unavailable(String),
    /// This process runs with another layout than the one the stack's
    /// items are written under ([`crate::layout`]): it must not read or
    /// write items.
    #[error(
        "this function runs with ScopeKeyShards={keys} ResourceKeySpread={spread}, but the stack's items are \
         written under ScopeKeyShards={recorded_keys} ResourceKeySpread={recorded_spread} (the layout record in \
         the counters table, written by counterctl deploy); it refuses to read or write items rather than \
         hide or miscount them: set the stack's parameters back to the recorded layout (the layout is fixed \
         when a stack is created)"
    )]
    LayoutMismatch {
        recorded_keys: u32,
        recorded_spread: u32,
        keys: u32,
        spread: u32,
    },
    /// [`crate::sequence::Sequence::next`] spent its retry budget on
    /// conflicts, lost races and ambiguous answers without claiming a
    /// number, and no number carries this call's token (every ambiguous
    /// claim was read back once the sequence had passed it): nothing is
    /// held, retry later.
    ///
    /// `last` is the last failure, in the store's words when the store
    /// failed: for the log ([`Error::detail`]), never part of the message.
    #[error(
        "no sequence number claimed in scope {scope} after {attempts} attempts: the sequence is contended or the \
         store keeps failing; nothing is held for this call, retry later"
    )]
    SequenceContended { scope: String, attempts: u32, last: String },
    /// [`crate::sequence::Sequence::next`] stopped (budget spent or store
    /// refusal) while a claim of one of `numbers` was answered ambiguously
    /// (500, timeout) and could not be settled: it may still apply, so one
    /// of these numbers may carry this call's token and owner. Not
    /// "nothing held": the caller finds out by reading the numbered item
    /// (`sequence#<n>`, whose owner names what it is for) once the
    /// sequence has passed it. `last` as in [`Error::SequenceContended`].
    #[error(
        "sequence number in scope {scope} unknown after {attempts} attempts: a claim of number(s) {numbers:?} was \
         answered ambiguously and may still apply; one of them may be held for this call (its item names the \
         owner), read it back before claiming another"
    )]
    SequenceOutcomeUnknown {
        scope: String,
        numbers: Vec<u64>,
        attempts: u32,
        last: String,
    },
}

impl Error {
    /// The machine-readable name of the error, as the API's `error` field
    /// and `counterctl load` report it.
    pub fn code(&self) -> &'static str {
        match self {
            Error::LimitExceeded { .. } | Error::ShareExceeded { .. } => "LimitExceeded",
            Error::AlreadyExists => "AlreadyExists",
            Error::NotFound => "NotFound",
            Error::InvalidInput(_) => "InvalidInput",
            Error::Unavailable(_) | Error::LayoutMismatch { .. } => "Unavailable",
            Error::SequenceContended { .. } => "SequenceContended",
            Error::SequenceOutcomeUnknown { .. } => "SequenceOutcomeUnknown",
        }
    }

    /// Whether the create was refused for the scope's limit (or, on a
    /// scope spread over keys, its key's share of it).
    pub fn is_limit_exceeded(&self) -> bool {
        matches!(self, Error::LimitExceeded { .. } | Error::ShareExceeded { .. })
    }

    /// What the store said, for the log: the detail of
    /// [`Error::Unavailable`] and the last failure of
    /// [`Error::SequenceContended`] and [`Error::SequenceOutcomeUnknown`].
    /// Never for a caller of an API.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Error::Unavailable(detail)
            | Error::SequenceContended { last: detail, .. }
            | Error::SequenceOutcomeUnknown { last: detail, .. } => Some(detail),
            _ => None,
        }
    }
}

impl From<IdError> for Error {
    fn from(err: IdError) -> Self {
        Error::InvalidInput(err.to_string())
    }
}

/// Why one transaction item was cancelled, in the request order of the
/// transaction's actions (as `CancellationReasons` are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelReason {
    /// This action did not cause the cancellation.
    None,
    ConditionalCheckFailed,
    TransactionConflict,
    Throttled,
    Other(String),
}

impl CancelReason {
    /// Maps a `CancellationReason.Code` as DynamoDB documents them.
    pub fn from_code(code: Option<&str>) -> Self {
        match code {
            None | Some("None") => CancelReason::None,
            Some("ConditionalCheckFailed") => CancelReason::ConditionalCheckFailed,
            Some("TransactionConflict") => CancelReason::TransactionConflict,
            Some("ThrottlingError") | Some("ProvisionedThroughputExceeded") => CancelReason::Throttled,
            Some(other) => CancelReason::Other(other.to_string()),
        }
    }

    /// Conflicts and throttling go away by themselves: retry after a backoff.
    pub fn is_transient(&self) -> bool {
        matches!(self, CancelReason::TransactionConflict | CancelReason::Throttled)
    }
}

/// Errors of a store ([`crate::store`]), classified for the caller's decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A plain conditional write's condition was false.
    #[error("conditional check failed")]
    ConditionFailed,
    /// A transaction was cancelled; reasons in the order of its actions.
    #[error("transaction cancelled: {reasons:?}")]
    Cancelled { reasons: Vec<CancelReason> },
    /// Throttled, or the item is in another transaction: retry later.
    #[error("transient failure: {0}")]
    Transient(String),
    /// The service refused the request itself (`ValidationException`, e.g.
    /// an item over 400 KB): retrying cannot help.
    #[error("request rejected: {0}")]
    Rejected(String),
    /// Anything else from the service or the transport (after SDK retries).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Stream records or a stream that are no longer there (trimmed after
    /// 24 hours, or the stream was deleted).
    #[error("gone from the stream: {0}")]
    Gone(String),
    /// An item in the store does not have the kit's shape.
    #[error("malformed item: {0}")]
    Malformed(String),
}

impl StoreError {
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Transient(_) => true,
            StoreError::Cancelled { reasons } => {
                reasons.iter().any(CancelReason::is_transient)
                    && !reasons.iter().any(|r| matches!(r, CancelReason::Other(_)))
            }
            _ => false,
        }
    }
}
