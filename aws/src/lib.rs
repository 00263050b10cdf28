//! The AWS layer of the hybrid counter kit: everything that talks to AWS,
//! used by the handlers, the local runner, `counterctl` and the tests. The
//! decisions stay in the core crate (`hybrid-counter`, no SDK); this crate
//! carries them to the services and turns the services' types into the
//! core's.
//!
//! - [`dynamo`]: [`DynamoStore`], the core's store roles on `aws-sdk-dynamodb`,
//!   with the classification of the SDK's errors.
//! - [`drift`]: the drift check's Scan of the counters table's keys and its
//!   state item, on [`DynamoStore`].
//! - [`streams`]: the DynamoDB Streams API reader ([`streams::ShardReader`])
//!   and the conversion of its records into the Lambda event's records.
//! - [`replay`]: the on-failure record of a stream event source mapping and
//!   the replay of the range it names.
//! - [`failed_batch`]: what a DLQ1 message is (a pointer, an S3
//!   notification of a failed batch kept with its records, S3's test
//!   event), the object an S3 on-failure destination receives, and its
//!   replay (stack parameter `FailedBatchRecords`).
//! - [`s3`] (feature `s3`): reading (and, for the local runner, writing)
//!   failed-batch objects.
//! - [`esm`] (feature `ops`): the event source mappings as Lambda describes them
//!   ([`esm::MappingConfig`]), listed or read by uuid.
//! - [`emulator`]: the emulators' differences from AWS the kit works
//!   around (ministack's numbers as strings, fakecloud's `Number` `Ref`s).
//! - [`sqs`] (feature `sqs`, part of `ops`): receiving, sending with
//!   attributes, deleting in batches, a queue's depth and attributes, and a
//!   received message as the Lambda event's SQS record.
//! - [`layout`]: the layout record, read by every function, written once by counterctl.
//! - [`probe`]: the emulator's HTTP health probe.
//! - [`lambda`] (feature `lambda`): what the Lambda binaries share.
//! - [`sdk`] (feature `sdk`): the SDK configuration every client starts from.

pub mod drift;
pub mod dynamo;
pub mod emulator;
#[cfg(feature = "ops")]
pub mod esm;
pub mod failed_batch;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod layout;
pub mod limits;
pub mod probe;
pub mod replay;
#[cfg(feature = "s3")]
pub mod s3;
#[cfg(feature = "sdk")]
pub mod sdk;
#[cfg(feature = "sqs")]
pub mod sqs;
pub mod streams;
#[cfg(test)]
mod test_util;

pub use dynamo::DynamoStore;
