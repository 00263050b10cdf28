//! Counting a scope's items by state, the ground truth the counters are
//! checked against: `EC == processed` always, and after the stream is
//! drained `EC == live`. Items the kit did not write (no `incarnation`)
//! are counted apart as `foreign` and never move a counter. BE is read by the admission mode: `BE <= live`
//! always in best-effort admission (it may undercount), `BE >= live` always
//! in strict admission (it counts reservations, so it may over-reserve).
//!
//! Repairs set EC to the processed count and BE to the live count. A BE
//! move that a request still in flight could push past the invariant
//! (raising in best-effort admission, lowering in strict admission) is only
//! safe once no request can be in flight: [`plan_repair_at`] holds it back
//! until the scope's counters and items were last written more than the
//! grace period ([`REQUEST_GRACE_MS`]) ago. [`findings`](mod@findings) decides (pure); [`engine`] runs the audit over an `AuditStore`.

pub mod drift;
pub mod engine;
pub mod findings;

pub use engine::{Auditor, RepairMode, ScopeAudit, count_over, count_scope, pending_changes};
pub use findings::*;
