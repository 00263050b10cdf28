//! [`Component`]: who calls AWS, each deployed function with its own role,
//! the operator running `counterctl`, and a CI job that only plans limits.

use crate::logical;

/// Who makes a call: one of the deployed functions (with its role), the
/// operator running `counterctl` (a person or CI, with the operator
/// policy), or a CI job that only plans limits (`counterctl limits
/// plan|export`, with the read-only policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    StreamCounter,
    DlqReprocessor,
    Api,
    DriftCheck,
    Operator,
    /// `counterctl limits plan|export` only: reads, never a write.
    LimitsPlanner,
}

impl Component {
    /// The deployed functions, each with a role of its own.
    pub const FUNCTIONS: [Component; 4] = [
        Component::StreamCounter,
        Component::DlqReprocessor,
        Component::Api,
        Component::DriftCheck,
    ];

    /// The logical ids of the function's role and log group; `None` for the
    /// operator and the limits planner, which are not functions.
    pub fn role_and_log_group(self) -> Option<(&'static str, &'static str)> {
        match self {
            Component::StreamCounter => Some((logical::STREAM_COUNTER_ROLE, logical::STREAM_COUNTER_LOG_GROUP)),
            Component::DlqReprocessor => Some((logical::DLQ_REPROCESSOR_ROLE, logical::DLQ_REPROCESSOR_LOG_GROUP)),
            Component::Api => Some((logical::API_ROLE, logical::API_LOG_GROUP)),
            Component::DriftCheck => Some((logical::DRIFT_CHECK_ROLE, logical::DRIFT_CHECK_LOG_GROUP)),
            Component::Operator | Component::LimitsPlanner => None,
        }
    }
}
