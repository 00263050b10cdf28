//! What the kit's code calls on AWS and what IAM checks for it: the one
//! table the function roles are checked against and the operator's policy
//! is generated from ([`CALLS`] keyed by operation, components and the
//! files the calls are in, [`PLATFORM_USES`], [`needs()`]). How
//! `stack/tests/access.rs` checks it against the code (with each SDK
//! operation's IAM actions, `stack/tests/access/operations.rs`), and what it
//! does not see: SECURITY.md, "How row 6 is checked".

mod calls;
mod component;
mod needs;
mod platform;
mod target;

pub use calls::{CALLS, Call};
pub use component::Component;
pub use needs::{KIT_STATE_DENIED, Need, needs};
pub use platform::{PLATFORM_USES, PlatformUse};
pub use target::{Grant, OperatorScope, Target, limits_file_arn, scope_callers};
