//! `ClientRequestToken` idempotency of `TransactWriteItems`, as DynamoDB
//! answers it ("TransactWriteItems", Amazon DynamoDB API Reference,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>):
//! a repeat within the window is answered without a second apply, another
//! request under the same token is refused. Used by
//! [`super::MemoryStore::transact_write`].

use std::collections::{BTreeMap, BTreeSet};

use crate::error::StoreError;
use crate::store::Transaction;
use crate::time::EpochMillis;

/// How long a `ClientRequestToken` makes a transaction idempotent: "valid
/// for 10 minutes after the first request that uses it is completed"
/// ([`super::MemoryStore::transact_write`]).
pub const CLIENT_REQUEST_TOKEN_WINDOW_MS: EpochMillis = 10 * 60 * 1_000;

/// An applied transaction's token: what it asked, and when it completed.
#[derive(Debug, Clone)]
struct TokenUse {
    request: Transaction,
    completed_at: EpochMillis,
}

/// The tokens of applied transactions while their window lasts, and those
/// of requests in flight.
#[derive(Debug, Default)]
pub(super) struct Tokens {
    used: BTreeMap<String, TokenUse>,
    in_flight: BTreeSet<String>,
    next: u64,
    /// Requests answered from a token's first success.
    pub(super) replays: u64,
}

impl Tokens {
    /// A token of its own for one call, as the SDK fills one per `send()`.
    pub(super) fn fresh(&mut self) -> String {
        self.next += 1;
        format!("sdk-{:032x}", self.next)
    }

    /// The answer to a request under `token` at `now` without applying it:
    /// a repeat of the applied request within the window succeeds again,
    /// another request is refused with `IdempotentParameterMismatch`, and
    /// while the first is still in flight with
    /// `TransactionInProgressException`. `None`: the request runs (it is
    /// now in flight; [`Self::finish`] ends that).
    pub(super) fn begin(&mut self, token: &str, tx: &Transaction, now: EpochMillis) -> Option<Result<(), StoreError>> {
        self.used
            .retain(|_, used| now - used.completed_at < CLIENT_REQUEST_TOKEN_WINDOW_MS);
        if let Some(used) = self.used.get(token) {
            if used.request != *tx {
                return Some(Err(StoreError::Rejected(format!(
                    "IdempotentParameterMismatch: ClientRequestToken {token} was used with another request"
                ))));
            }
            self.replays += 1;
            return Some(Ok(()));
        }
        if !self.in_flight.insert(token.to_owned()) {
            return Some(Err(StoreError::Transient(format!(
                "TransactionInProgressException: a request with ClientRequestToken {token} is in progress"
            ))));
        }
        None
    }

    /// Ends the request under `token`. Only an applied request keeps its
    /// token (the documented case: "if the original TransactWriteItems call
    /// was successful"), from `completed_at` on; past the window the token
    /// is new again.
    pub(super) fn finish(&mut self, token: &str, tx: &Transaction, completed_at: Option<EpochMillis>) {
        self.in_flight.remove(token);
        if let Some(completed_at) = completed_at {
            self.used.insert(
                token.to_owned(),
                TokenUse {
                    request: tx.clone(),
                    completed_at,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::MemoryStore;
    use super::super::tests::{count_insert, resource};
    use super::CLIENT_REQUEST_TOKEN_WINDOW_MS;
    use crate::error::StoreError;
    use crate::store::RequestStore;

    #[tokio::test]
    async fn a_client_request_token_answers_a_repeat_without_applying_it_again_for_ten_minutes() {
        let store = MemoryStore::new();
        let now = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let clock = now.clone();
        store.set_clock(Arc::new(move || clock.load(std::sync::atomic::Ordering::SeqCst)));
        for id in ["a", "b"] {
            store.put_resource(&resource(id, "i1")).await.unwrap();
        }
        let tx = count_insert("a", "i1");
        store.transact_write(&tx, Some("t1")).await.unwrap();
        let records = store.stream_changes().len();
        // The same request again: success, nothing applied twice.
        now.store(CLIENT_REQUEST_TOKEN_WINDOW_MS - 1, std::sync::atomic::Ordering::SeqCst);
        store.transact_write(&tx, Some("t1")).await.unwrap();
        assert_eq!(store.counter("acct", "eventual"), 1);
        assert_eq!(store.stream_changes().len(), records);
        assert_eq!(store.token_replays(), 1);
        // Another request under the same token is refused.
        let other = count_insert("b", "i1");
        assert!(matches!(
            store.transact_write(&other, Some("t1")).await,
            Err(StoreError::Rejected(why)) if why.starts_with("IdempotentParameterMismatch")
        ));
        assert_eq!(store.counter("acct", "eventual"), 1);
        // Past the window the token is new: the request runs, and its
        // condition fails (already counted).
        now.store(2 * CLIENT_REQUEST_TOKEN_WINDOW_MS, std::sync::atomic::Ordering::SeqCst);
        assert!(matches!(
            store.transact_write(&tx, Some("t1")).await,
            Err(StoreError::Cancelled { .. })
        ));
        // Without a token every request is new; a fresh token applies.
        assert!(store.transact_write(&tx, None).await.is_err());
        store.transact_write(&other, Some("t2")).await.unwrap();
        assert_eq!(store.counter("acct", "eventual"), 2);
    }
}
