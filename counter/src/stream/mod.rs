//! Stream processing (DESIGN §3): decode DynamoDB Stream records of the
//! resources table ([`record`]), plan the writes that keep the eventual
//! counter exact ([`plan`], pure), and run the plans with retries, reporting
//! what could not be done as a partial batch failure ([`process`]).
//! [`filter`] is the event source mapping's `FilterCriteria`, written into
//! the template by `stack/` and applied by the local runner. Reading the
//! stream and replaying a failed range talk to AWS: crate
//! `hybrid-counter-aws` (`streams`, `replay`).

pub mod filter;
pub mod plan;
pub mod process;
pub mod record;

pub use process::{BatchReport, Mode, Processor, RecordOutcome};
pub use record::{Change, ChangeRecord, DecodeError};
