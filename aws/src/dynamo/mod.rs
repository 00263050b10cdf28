//! [`DynamoStore`], the core's store roles over `aws-sdk-dynamodb`: the
//! struct and its role impls in `store.rs`, the helpers it calls one concern
//! per file; every attribute is referenced through a `#placeholder`
//! (several names are reserved words). This file only declares the files
//! and re-exports what callers name as `dynamo::…`.

mod admin;
mod attributes;
mod classify;
mod meter;
mod read;
mod request;
mod retry;
#[cfg(test)]
mod sequence;
mod store;
#[cfg(test)]
mod test_support;
mod transact;

pub(crate) use attributes::{counter_key, n, s};
pub use classify::{
    ThrottleDetail, classify, is_capacity_throttle, is_conditional_check_failed, is_throttle, is_validation,
    throttle_reasons,
};
#[cfg(test)]
pub(crate) use retry::ONE_OFF_WRITE_BACKOFF;
pub(crate) use retry::{one_off_write, sent};
pub use store::DynamoStore;
pub use transact::cancel_reasons;
