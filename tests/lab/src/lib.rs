//! The counter-approach lab: the classic ways to keep a counter on DynamoDB
//! (the AWS database blog's seven, with the usual variants) and the kit's
//! hybrid counter, each written the way it is usually written, behind one
//! small interface ([`strategy::Strategy`]: apply +1 or -1 with an optional
//! threshold, read the value). Each strategy keeps its *truth*, what its
//! callers believe happened, so `make compare` (the `compare` bench of the
//! `e2e` crate) can measure how far the stored value drifts from it under
//! the same injected faults.
//!
//! The strategies only talk to DynamoDB through the SDK client they are
//! given; the unit tests answer that client with `aws-smithy-mocks`
//! sequences (the ambiguous case: HTTP 500 after the write was applied).
//!
//! | module | approach |
//! |---|---|
//! | [`atomic`] | `ADD` on one item, with or without the SDK's retries |
//! | [`occ`] | optimistic concurrency on an entity tag read back (the blog's), on a numeric version, or with a history of writers |
//! | [`transaction`] | `TransactWriteItems` with a client request token (per send, or reused) or with a marker item |
//! | [`ledger`] | one item per change in an item collection, summed by a `Query` |
//! | [`token_set`] | a string set of tokens on one item, its size the value |
//! | [`likes`] | seed 004: concurrent `ADD`s of likes, and its read-then-conditional-`ADD` loop |
//! | [`swallow`] | seed 004's likely real cause: a handler that catches a throttled `ADD` |
//! | [`bursts`] | which changes of a `make compare` run meet a resend burst |
//! | [`hybrid`] | the kit's [`hybrid_counter::Counter`] over [`hybrid_counter_aws::DynamoStore`] |

pub mod atomic;
pub mod bursts;
pub mod hybrid;
pub mod ledger;
pub mod likes;
pub mod occ;
pub mod strategy;
pub mod swallow;
pub mod table;
pub mod token_set;
pub mod transaction;

#[cfg(test)]
mod test_util;
