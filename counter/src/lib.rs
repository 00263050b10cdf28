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
//! This crate decides; the edges do I/O, and it has no AWS SDK in its
//! build. [`request`] is the API's request path, [`stream`] decodes Lambda
//! stream records and plans (pure) and runs the writes that keep the
//! eventual counter exact, [`audit`] compares the counters with the items
//! and repairs them; [`sequence`] gives gapless per-scope numbers;
//! [`limits`] is the reviewed limits file and its diff with the table's
//! overrides (feature `limits-file`: counterctl and the drift check). All of them run against the role traits of [`store`]
//! ([`RequestStore`], [`StreamStore`], …), small enough for an in-memory double (`memory`, feature
//! `test-util`). [`metrics`] builds the kit's CloudWatch metrics as
//! embedded-metric-format documents (the handlers print them). The DynamoDB implementation, the Streams API reader and
//! everything else that talks to AWS is the crate `hybrid-counter-aws`;
//! ARCHITECTURE.md draws the crates.

pub mod audit;
pub mod best_effort;
pub mod config;
pub mod error;
mod hash;
pub mod ids;
pub mod items;
pub mod keys;
pub mod layout;
pub mod limits;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
pub mod metrics;
pub mod request;
pub mod retry;
pub mod scope_keys;
#[cfg(test)]
mod scope_keys_tests;
pub mod sequence;
pub mod shares;
pub mod store;
pub mod stream;
pub mod throttle;
pub mod time;

pub use config::{Admission, CounterConfig};
pub use error::Error;
pub use ids::{IdError, ResourceId, Scope};
pub use request::{Counter, Created, Usage};
pub use sequence::Sequence;
pub use store::{AuditStore, RequestStore, ResourceRead, SequenceStore, StoreBase, StreamStore};

pub use time::{Clock, EpochMillis, now_millis};
