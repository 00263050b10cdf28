//! The fold of an override's copies (one per partition key) back onto
//! its scope.

use std::collections::{BTreeMap, BTreeSet};

use super::{LimitItem, LimitTable};
use crate::scope_keys::ScopeKeys;

fn item(limit: u64, version: u64) -> LimitItem {
    LimitItem {
        limit,
        version,
        rev: Some(format!("r{version}")),
    }
}

fn table(rows: &[(&str, u64)], prefixed: &[&str]) -> LimitTable {
    LimitTable {
        overrides: rows.iter().map(|(s, l)| ((*s).to_owned(), item(*l, 1))).collect(),
        prefixed_scopes: prefixed.iter().map(|s| (*s).to_owned()).collect(),
        ..LimitTable::default()
    }
}

#[test]
fn copies_on_every_key_fold_onto_their_scope_and_a_missing_or_other_copy_is_seen() {
    let keys = ScopeKeys::new(4).unwrap();
    let folded = table(
        &[
            ("a#0", 10),
            ("a#1", 10),
            ("a#2", 10),
            ("a#3", 10),
            ("b#0", 5),
            ("b#2", 9),
            ("old", 7),
        ],
        &["acme/x#3", "acme/y"],
    )
    .fold(keys);
    assert_eq!(folded.overrides.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(folded.overrides["b"].limit, 9, "the larger copy bounds admission");
    assert_eq!(folded.copies["b"].keys().copied().collect::<Vec<_>>(), [0, 2]);
    assert!(folded.copies_hold("a", Some(10)));
    assert!(!folded.copies_hold("a", Some(11)));
    assert!(!folded.copies_hold("b", Some(9)), "copies missing and disagreeing");
    assert!(!folded.copies_hold("b", None));
    assert!(folded.copies_hold("c", None));
    assert_eq!(folded.unread, BTreeMap::from([("old".to_owned(), item(7, 1))]));
    assert_eq!(
        folded.prefixed_scopes,
        BTreeSet::from(["acme/x".to_owned(), "acme/y".to_owned()])
    );
}

#[test]
fn one_key_leaves_the_table_as_read() {
    let read = table(&[("a#0", 10), ("a", 3)], &["a#0"]);
    let folded = read.clone().fold(ScopeKeys::default());
    assert_eq!(folded, read);
    assert!(folded.copies.is_empty());
}
