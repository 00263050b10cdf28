//! Crate internals that the admission model (the integration test
//! `counter/tests/admission_model/`) calls and that are not part of the
//! API: forwarded as they are, so the model runs the real code. Feature
//! `test-util` only, hidden from the docs.

use crate::audit::RepairPlan;
use crate::time::EpochMillis;

/// [`crate::audit::findings`]'s hold-back of a BE move while the scope's
/// last request write is younger than `grace` (the model's rules before
/// e03c33a held a sharded strict raise back with it).
pub fn hold_back(plan: &mut RepairPlan, why: (&str, &str, i64, u64), age: EpochMillis, grace: EpochMillis) {
    crate::audit::findings::hold_back(plan, why, age, grace);
}
