//! What the kit's code calls on AWS and what IAM checks for it: the one
//! table the function roles are checked against and the operator's policy
//! is generated from.
//!
//! * [`OPERATIONS`]: each SDK operation the kit calls and the IAM actions
//!   that authorize it.
//! * [`CALLS`]: which component calls which operation, on which of the
//!   stack's resources, with which of its actions; keyed by operation and
//!   component, never by file or function.
//! * [`PLATFORM_USES`]: what AWS does with a function's role on its behalf.
//! * [`needs()`]: what a component needs, derived from both.
//!
//! `stack/tests/access.rs` scans the sources of the crates each component
//! links for SDK calls: each must be covered by an entry of its operation
//! for a component that links the call's crate, each entry's components
//! must link some call of its operation, and each role must grant exactly
//! its needs. Which components reach a call, and which resource it
//! touches, are declared here and reviewed, not derived from a call graph.

mod calls;
mod component;
mod needs;
mod operations;
mod platform;
mod target;

pub use calls::{CALLS, Call};
pub use component::Component;
pub use needs::{KIT_STATE_DENIED, Need, needs};
pub use operations::{OPERATIONS, Operation, operation};
pub use platform::{PLATFORM_USES, PlatformUse};
pub use target::{Grant, OperatorScope, Target, limits_file_arn, scope_callers};
