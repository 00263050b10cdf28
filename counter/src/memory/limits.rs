//! Limit overrides as `counterctl limit set` writes them: one `limit` item
//! per counters key, each transaction over every copy conditioned as
//! `DynamoStore` conditions it (the first on each copy as read, the later
//! ones on the token of the one before), so a concurrent `limit set`
//! refuses one of them, and a fault can lose a transaction's answer.

use super::MemoryStore;
use super::chaos::{LimitOutcomes, Op};
use super::locks::LockKey;
use super::tables::Tables;
use crate::error::StoreError;
use crate::ids::Scope;
use crate::scope_keys::ScopeKeys;
use crate::shares::{self, Round, Sent};

/// A limit transaction that was not written: refused by its condition, or
/// its outcome unknown (it may have been applied).
#[derive(Debug)]
enum NotWritten {
    Refused,
    Unknown(String),
}

impl MemoryStore {
    /// Sets the per-scope limit override, as `counterctl limit set` does
    /// (`None` clears it).
    pub fn set_limit(&self, scope: &str, limit: Option<u64>) {
        let mut inner = self.inner.lock().unwrap();
        write_copy(&mut inner.tables, scope, limit, None, None);
    }

    /// `limit set` of `scope` over `keys`, as `DynamoStore` writes it:
    /// each copy with its share of `limit` through [`shares::assign`], each
    /// transaction conditioned as there; planned again (a few times) when
    /// its first is refused. A clear, or one key, is written unconditioned
    /// (`DynamoStore` expects nothing of the copies then either). A key
    /// without an override reads `default_limit`.
    pub async fn set_scope_limit(
        &self,
        keys: ScopeKeys,
        scope: &Scope,
        limit: Option<u64>,
        default_limit: u64,
    ) -> Result<(), StoreError> {
        let copies = keys.keys(scope).map_err(|e| StoreError::Rejected(e.to_string()))?;
        let Some(limit) = limit.filter(|_| copies.len() > 1) else {
            return self.call(Op::LimitWrite, &limit_locks(&copies), |t, _| {
                let token = fresh_rev(t);
                for key in &copies {
                    write_copy(t, key.as_str(), limit, None, Some(&token));
                }
                Ok(())
            });
        };
        shares::replanned(scope, async || {
            let send = async |round: Round<'_>, shares: &[u64]| Ok(self.send_round(&copies, limit, round, shares));
            match shares::assign(self, keys, &copies, limit, default_limit, send).await? {
                shares::Assigned::Written | shares::Assigned::Superseded => Ok(Some(())),
                shares::Assigned::Ended(NotWritten::Refused) => Ok(None),
                shares::Assigned::Ended(NotWritten::Unknown(error)) => Err(StoreError::Unavailable(error)),
                shares::Assigned::Unraised(error) => Err(StoreError::Unavailable(format!(
                    "the limit is written, its shares only lowered: {error}"
                ))),
            }
        })
        .await
    }

    /// How the transactions of `limit set`s over several keys ended so far.
    pub fn limit_outcomes(&self) -> LimitOutcomes {
        self.inner.lock().unwrap().limit_outcomes
    }

    /// One transaction of a limit write: every copy with its share, if
    /// each copy is as `round` expects it (the first: as read; a later
    /// one: written by the one before). Faults aimed at [`Op::LimitWrite`]
    /// fail it before or after it applied.
    fn send_round(&self, copies: &[Scope], limit: u64, round: Round<'_>, shares: &[u64]) -> Sent<NotWritten> {
        let written = self.call(Op::LimitWrite, &limit_locks(copies), |t, _| {
            let holds = match round {
                Round::First(reads) => copies.iter().zip(reads).all(|(key, read)| {
                    let now = t.limits.contains_key(key.as_str()).then(|| {
                        let (version, rev) = t.limit_revs.get(key.as_str()).cloned().unwrap_or_default();
                        (version, Some(rev))
                    });
                    now == read.copy
                }),
                Round::Next(token) => copies
                    .iter()
                    .all(|key| t.limit_revs.get(key.as_str()).is_some_and(|(_, rev)| rev == token)),
            };
            if !holds {
                return Err(StoreError::ConditionFailed);
            }
            let token = fresh_rev(t);
            for (key, &share) in copies.iter().zip(shares) {
                write_copy(t, key.as_str(), Some(limit), Some(share), Some(&token));
            }
            Ok(token)
        });
        let first = matches!(round, Round::First(_));
        let sent = match written {
            Ok(token) => return Sent::Written(token),
            Err(StoreError::ConditionFailed) => Sent::Ended(NotWritten::Refused),
            Err(e) if first => Sent::Ended(NotWritten::Unknown(e.to_string())),
            Err(e) => Sent::Failed(e.to_string()),
        };
        let mut inner = self.inner.lock().unwrap();
        let outcomes = &mut inner.limit_outcomes;
        let count = match (&sent, first) {
            (Sent::Ended(NotWritten::Refused), true) => &mut outcomes.first_refused,
            (_, true) => &mut outcomes.first_unknown,
            (Sent::Ended(_), false) => &mut outcomes.later_refused,
            (_, false) => &mut outcomes.later_unknown,
        };
        *count += 1;
        sent
    }
}

/// The `limit` items a limit write touches. No transaction of this store
/// holds one (the stream's, repairs and sequence claims hold counter and
/// sequence items), so none refuses a limit write; named because a plain
/// call that touches items has the invariants checked after it
/// ([`MemoryStore::call`]), so the simulation's checker sees every bound.
fn limit_locks(copies: &[Scope]) -> Vec<LockKey> {
    copies
        .iter()
        .map(|key| LockKey::Counter(key.to_string(), crate::keys::LIMIT_NAME.to_owned()))
        .collect()
}

/// A new write's token (the item's `rev`).
fn fresh_rev(t: &mut Tables) -> String {
    t.limit_writes += 1;
    format!("limit-{}", t.limit_writes)
}

/// Writes one key's `limit` item (`None`: deletes it), its share with it
/// (`None`: none assigned), its version bumped and its token `token`.
fn write_copy(t: &mut Tables, key: &str, limit: Option<u64>, share: Option<u64>, token: Option<&str>) {
    let Some(limit) = limit else {
        t.limits.remove(key);
        t.limit_shares.remove(key);
        t.limit_revs.remove(key);
        return;
    };
    t.limits.insert(key.to_owned(), limit);
    match share {
        Some(share) => t.limit_shares.insert(key.to_owned(), share),
        None => t.limit_shares.remove(key),
    };
    let version = t.limit_revs.get(key).map_or(0, |(v, _)| *v) + 1;
    let token = token.map_or_else(|| fresh_rev(t), str::to_owned);
    t.limit_revs.insert(key.to_owned(), (version, token));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Fault;
    use crate::shares::read_keys;

    fn scope() -> Scope {
        Scope::new("acct").unwrap()
    }

    fn setup() -> (MemoryStore, ScopeKeys, Vec<Scope>) {
        let keys = ScopeKeys::new(2).unwrap();
        let copies = keys.keys(&scope()).unwrap();
        (MemoryStore::new(), keys, copies)
    }

    fn shares(store: &MemoryStore, copies: &[Scope]) -> Vec<Option<u64>> {
        let tables = store.tables();
        copies
            .iter()
            .map(|k| tables.limit_shares.get(k.as_str()).copied())
            .collect()
    }

    /// A first transaction planned from a read that another `limit set`
    /// has changed since is refused, and the other's shares stay: without
    /// the condition it would write its own over them. The copies exist
    /// at the read, so the version and token are what tell.
    #[tokio::test]
    async fn a_first_transaction_read_before_another_limit_set_is_refused() {
        let (store, keys, copies) = setup();
        store.set_scope_limit(keys, &scope(), Some(6), 10).await.unwrap();
        let reads = read_keys(&store, keys, &copies, 10).await.unwrap();
        store.set_scope_limit(keys, &scope(), Some(4), 10).await.unwrap();
        let theirs = shares(&store, &copies);
        let sent = store.send_round(&copies, 8, Round::First(&reads), &[4, 4]);
        assert!(matches!(sent, Sent::Ended(NotWritten::Refused)), "{sent:?}");
        assert_eq!(shares(&store, &copies), theirs);
        assert_eq!(store.limit_outcomes().first_refused, 1);
    }

    /// A later transaction carrying a token another write replaced is
    /// refused (superseded); one carrying the last token is written.
    #[tokio::test]
    async fn a_later_transaction_needs_the_token_of_the_one_before() {
        let (store, keys, copies) = setup();
        let reads = read_keys(&store, keys, &copies, 10).await.unwrap();
        let Sent::Written(ours) = store.send_round(&copies, 8, Round::First(&reads), &[4, 4]) else {
            panic!("the first transaction of a fresh scope is written");
        };
        store.set_scope_limit(keys, &scope(), Some(6), 10).await.unwrap();
        let sent = store.send_round(&copies, 8, Round::Next(&ours), &[5, 3]);
        assert!(matches!(sent, Sent::Ended(NotWritten::Refused)), "{sent:?}");
        assert_eq!(store.tables().limits.get(copies[0].as_str()), Some(&6));
        let reads = read_keys(&store, keys, &copies, 10).await.unwrap();
        let Sent::Written(token) = store.send_round(&copies, 8, Round::First(&reads), &[3, 3]) else {
            panic!("a first transaction from a fresh read is written");
        };
        assert!(matches!(
            store.send_round(&copies, 8, Round::Next(&token), &[4, 4]),
            Sent::Written(_)
        ));
        assert_eq!(shares(&store, &copies), [Some(4), Some(4)]);
    }

    /// The invariants are checked after each transaction of a limit set,
    /// so a checker sees every bound it leaves, the lowered shares of the
    /// first one among them.
    #[tokio::test]
    async fn every_limit_transaction_is_checked() {
        let (store, keys, copies) = setup();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let first = copies[0].to_string();
        store.set_checker(move |t| {
            record.lock().unwrap().push(t.limits.get(&first).copied());
            Ok(())
        });
        store.set_scope_limit(keys, &scope(), Some(6), 10).await.unwrap();
        store.set_scope_limit(keys, &scope(), None, 10).await.unwrap();
        assert_eq!(*seen.lock().unwrap(), [Some(6), None]);
    }

    /// A transaction whose answer is lost after it applied: the first is
    /// `limit set`'s error (the operator runs it again), a later one the
    /// driver's unknown outcome; either way it was written.
    #[tokio::test]
    async fn a_lost_answer_is_unknown_and_the_write_stands() {
        let (store, keys, copies) = setup();
        store.inject(Op::LimitWrite, Fault::AppliedThenUnavailable);
        let err = store.set_scope_limit(keys, &scope(), Some(6), 10).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        assert_eq!(store.tables().limits.get(copies[1].as_str()), Some(&6));
        let reads = read_keys(&store, keys, &copies, 10).await.unwrap();
        let Sent::Written(token) = store.send_round(&copies, 6, Round::First(&reads), &[3, 3]) else {
            panic!("written");
        };
        store.inject(Op::LimitWrite, Fault::AppliedThenUnavailable);
        assert!(matches!(
            store.send_round(&copies, 6, Round::Next(&token), &[2, 4]),
            Sent::Failed(_)
        ));
        assert_eq!(shares(&store, &copies), [Some(2), Some(4)]);
        let outcomes = store.limit_outcomes();
        assert_eq!((outcomes.first_unknown, outcomes.later_unknown), (1, 1));
    }
}
