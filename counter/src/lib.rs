//! Hybrid per-scope counters on DynamoDB.
//!
//! Two counters per scope: a **best-effort** counter (BE) written inline by the
//! API, never inside a transaction and never retried on an ambiguous error, so
//! it may undercount but never overcounts; and an **eventual** counter (EC)
//! written by the stream consumer inside a transaction that also flips the
//! item's idempotency flag, so `EC == items with counter_processed = true` at
//! every instant and EC is exact once the stream is drained.
//!
//! In **strict admission** ([`Admission::Strict`], DESIGN §5) BE becomes a
//! count of reservations: a create reserves its slot with a conditional
//! increment (`count < limit`) before the put, so concurrent creators can
//! never overshoot the limit, and the invariant flips to `BE >= live` (it may
//! over-reserve, never under-reserve). See [`request`].
//!
//! This crate decides; the edges do I/O. [`request`] is the API's request path,
//! [`stream`] decodes and plans stream records (pure) and runs the plans
//! against a [`store::Store`], a trait small enough for an in-memory double;
//! [`store::dynamo`] is the thin DynamoDB implementation.

pub mod audit;
pub mod backoff;
pub mod config;
pub mod error;
pub mod ids;
pub mod items;
pub mod keys;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod request;
pub mod store;
pub mod stream;

pub use config::{Admission, CounterConfig};
pub use error::Error;
pub use ids::{IdError, ResourceId, Scope};
pub use request::{Counter, Created, Usage};
pub use store::Store;
pub use store::dynamo::DynamoStore;

/// Milliseconds since the Unix epoch. Time is passed in, never read inside
/// the library, so logic is testable without a clock.
pub type EpochMillis = i64;

/// A clock the edges inject where a write must carry the time it is sent
/// (a stream transaction retried for seconds, a long replay): the library
/// never reads one itself.
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> EpochMillis + Send + Sync>);

impl Clock {
    pub fn new(now: impl Fn() -> EpochMillis + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(now))
    }

    /// The system's wall clock ([`now_millis`]).
    pub fn system() -> Self {
        Self::new(now_millis)
    }

    pub fn now(&self) -> EpochMillis {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Clock").finish_non_exhaustive()
    }
}

/// The current wall-clock time, for binaries to pass in.
pub fn now_millis() -> EpochMillis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
