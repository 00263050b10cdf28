//! What is in flight, for DynamoDB's transaction conflicts ("Transaction
//! conflict handling in DynamoDB"): a `PutItem`, `UpdateItem` or
//! `DeleteItem` on an item an ongoing `TransactWriteItems` includes fails
//! with `TransactionConflictException`; a `TransactWriteItems` whose item
//! another ongoing one includes is cancelled (`TransactionConflict` on that
//! action); a `TransactGetItems` whose item an ongoing transaction or plain
//! write includes likewise; a `GetItem` conflicts with nothing. The proxy
//! sees a request begin ([`InFlight::hold`]) and its answer come back
//! ([`InFlight::release`]). A transaction's client request token is held
//! too: a second one with the token while the first is in flight gets
//! `TransactionInProgressException` (`TransactWriteItems` API reference).

use std::collections::{HashMap, HashSet};

use super::units::ItemId;

#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight {
    /// Items held by transactions, and how many hold each.
    transactions: HashMap<ItemId, u32>,
    /// Items being written by plain writes.
    writes: HashMap<ItemId, u32>,
    tokens: HashSet<String>,
}

fn add(map: &mut HashMap<ItemId, u32>, items: &[ItemId]) {
    for item in items {
        *map.entry(item.clone()).or_default() += 1;
    }
}

fn remove(map: &mut HashMap<ItemId, u32>, items: &[ItemId]) {
    for item in items {
        if let Some(n) = map.get_mut(item) {
            *n -= 1;
            if *n == 0 {
                map.remove(item);
            }
        }
    }
}

impl InFlight {
    /// Which of a `TransactWriteItems`' items an ongoing transaction holds.
    pub fn transaction_conflicts(&self, items: &[ItemId]) -> Vec<bool> {
        items.iter().map(|i| self.transactions.contains_key(i)).collect()
    }

    /// Whether a plain write of `item` meets an ongoing transaction.
    pub fn write_conflicts(&self, item: &ItemId) -> bool {
        self.transactions.contains_key(item)
    }

    /// Which of a `TransactGetItems`' items an ongoing write holds.
    pub fn read_conflicts(&self, items: &[ItemId]) -> Vec<bool> {
        items
            .iter()
            .map(|i| self.transactions.contains_key(i) || self.writes.contains_key(i))
            .collect()
    }

    /// Whether a transaction with `token` is in flight.
    pub fn token_in_flight(&self, token: &str) -> bool {
        self.tokens.contains(token)
    }

    fn writers(&mut self, transactional: bool) -> &mut HashMap<ItemId, u32> {
        if transactional {
            &mut self.transactions
        } else {
            &mut self.writes
        }
    }

    pub fn hold(&mut self, items: &[ItemId], transactional: bool, token: Option<&str>) {
        add(self.writers(transactional), items);
        if let Some(token) = token {
            self.tokens.insert(token.to_owned());
        }
    }

    pub fn release(&mut self, items: &[ItemId], transactional: bool, token: Option<&str>) {
        remove(self.writers(transactional), items);
        if let Some(token) = token {
            self.tokens.remove(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(sk: &str) -> ItemId {
        ("t".into(), "a".into(), sk.into())
    }

    #[test]
    fn transactions_conflict_with_writes_and_transactions_plain_writes_only_with_transactional_reads() {
        let mut f = InFlight::default();
        f.hold(&[item("x"), item("y")], true, Some("tok"));
        f.hold(&[item("w")], false, None);
        assert_eq!(f.transaction_conflicts(&[item("z"), item("y")]), [false, true]);
        assert!(f.write_conflicts(&item("x")));
        assert!(!f.write_conflicts(&item("w")), "two plain writes do not conflict");
        assert_eq!(
            f.transaction_conflicts(&[item("w")]),
            [false],
            "a plain write holds nothing from a transaction"
        );
        assert_eq!(
            f.read_conflicts(&[item("w"), item("x"), item("v")]),
            [true, true, false]
        );
        assert!(f.token_in_flight("tok"));
        f.release(&[item("x"), item("y")], true, Some("tok"));
        assert!(!f.write_conflicts(&item("x")) && !f.token_in_flight("tok"));
    }
}
