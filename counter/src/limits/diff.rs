//! What the table's overrides would become under a limits file: a pure
//! function of the file and one Scan of the table ([`diff`]), sorted by
//! scope. `counterctl limits plan` annotates each change with the scope's
//! usage and applies it; `status --limits` and the scheduled drift check
//! report it as drift.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::file::{LimitsFile, Pattern};
use super::{LimitItem, LimitTable};

/// What happens to one scope's override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Added,
    Changed,
    Removed,
}

/// One scope's planned change, with what it was planned against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub scope: String,
    pub kind: Kind,
    /// The override now (`None`: the default applies).
    pub old: Option<u64>,
    /// The override after (`None`: removed, the default applies).
    pub new: Option<u64>,
    /// The `version` the override was read at (`None`: there was none).
    pub version: Option<u64>,
    /// The write token the override was read at (`None`: there was none,
    /// or it was written before tokens were): apply expects both, so an
    /// override cleared and set again since is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
    /// The prefix of the file's entry this comes from, when it is one (`acme/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// With the scope spread over N > 1 keys: each key's copy as read, in
    /// key order (`old` is then the largest copy, `version` and `rev`
    /// none): apply writes the copies not yet as planned and checks the
    /// others in one transaction, each conditioned on
    /// what it read of that copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<CopyRead>,
}

/// One key's copy of a scope's override, as a plan read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyRead {
    /// The key's index (`s#<key>`).
    pub key: u32,
    /// The copy's limit (`None`: that key has none and reads the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
}

impl Change {
    /// Whether a scope over several keys had copies missing or
    /// disagreeing when planned (some present, not all with one limit).
    pub fn copies_disagree(&self) -> bool {
        let present: Vec<Option<u64>> = self.copies.iter().map(|c| c.limit).collect();
        present.windows(2).any(|w| w[0] != w[1])
    }
}

/// The stack's `DefaultLimit`: a parameter, changed by a deploy only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultLimit {
    pub deployed: u64,
    /// What the file says (`None`: it says nothing).
    pub file: Option<u64>,
}

impl DefaultLimit {
    pub fn differs(&self) -> bool {
        self.file.is_some_and(|f| f != self.deployed)
    }
}

/// The changes that make `table` what `file` says, sorted by scope. A scope is covered by its exact entry, else by its
/// longest prefix entry that matches an existing scope; an override no entry
/// covers is removed. With a table folded over N > 1 keys
/// ([`LimitTable::fold`]), a scope is as the file says only when every one
/// of its keys holds a copy of the file's limit (none, for no entry): a
/// missing or disagreeing copy is a change that repairs it.
pub fn diff(file: &LimitsFile, table: &LimitTable) -> Vec<Change> {
    let scopes: BTreeSet<&str> = table
        .overrides
        .keys()
        .chain(&table.prefixed_scopes)
        .map(String::as_str)
        .chain(file.overrides.iter().filter_map(|o| match &o.scope {
            Pattern::Exact(s) => Some(s.as_str()),
            Pattern::Prefix(_) => None,
        }))
        .collect();
    scopes
        .into_iter()
        .filter_map(|scope| {
            let entry = file.entry_for(scope);
            let current = table.overrides.get(scope);
            let new = entry.map(|e| e.limit.get());
            let spread = table.keys.is_suffixed();
            if spread && table.copies_hold(scope, new) {
                return None;
            }
            let kind = match (current, new) {
                (None, Some(_)) => Kind::Added,
                (Some(LimitItem { limit, .. }), Some(new)) if *limit != new || spread => Kind::Changed,
                (Some(_), None) => Kind::Removed,
                _ => return None,
            };
            let copies = if spread {
                let read = table.copies.get(scope);
                (0..table.keys.count())
                    .map(|key| {
                        let copy = read.and_then(|c| c.get(&key));
                        CopyRead {
                            key,
                            limit: copy.map(|c| c.limit),
                            version: copy.map(|c| c.version),
                            rev: copy.and_then(|c| c.rev.clone()),
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            Some(Change {
                scope: scope.to_owned(),
                kind,
                old: current.map(|c| c.limit),
                new,
                version: current.filter(|_| !spread).map(|c| c.version),
                rev: current.filter(|_| !spread).and_then(|c| c.rev.clone()),
                prefix: entry.and_then(|e| match &e.scope {
                    Pattern::Prefix(p) => Some(p.clone()),
                    Pattern::Exact(_) => None,
                }),
                copies,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn table(overrides: &[(&str, u64, u64)], scopes: &[&str]) -> LimitTable {
        LimitTable {
            overrides: overrides
                .iter()
                .map(|(s, limit, version)| {
                    (
                        (*s).to_owned(),
                        LimitItem {
                            limit: *limit,
                            version: *version,
                            rev: Some(format!("r{version}")),
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>(),
            prefixed_scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            ..LimitTable::default()
        }
    }

    fn file(text: &str) -> LimitsFile {
        LimitsFile::parse("x", text).unwrap()
    }

    /// Scope, kind, old, new, version read.
    type Row = (String, Kind, Option<u64>, Option<u64>, Option<u64>);

    fn summary(changes: &[Change]) -> Vec<Row> {
        changes
            .iter()
            .map(|c| (c.scope.clone(), c.kind, c.old, c.new, c.version))
            .collect()
    }

    #[test]
    fn the_diff_adds_changes_and_removes_and_keeps_the_read_versions() {
        let f = file("overrides:\n  - {scope: a, limit: 5}\n  - {scope: b, limit: 7}\n  - {scope: c, limit: 9}\n");
        let t = table(&[("a", 5, 3), ("b", 6, 2), ("d", 4, 8)], &[]);
        assert_eq!(
            summary(&diff(&f, &t)),
            vec![
                ("b".into(), Kind::Changed, Some(6), Some(7), Some(2)),
                ("c".into(), Kind::Added, None, Some(9), None),
                ("d".into(), Kind::Removed, Some(4), None, Some(8)),
            ]
        );
        // The table as the file says: nothing to do.
        let same = table(&[("a", 5, 3), ("b", 7, 2), ("c", 9, 1)], &[]);
        assert!(diff(&f, &same).is_empty());
    }

    #[test]
    fn over_four_keys_a_scope_matches_the_file_only_with_every_copy_and_a_partial_write_is_repaired() {
        let keys = crate::scope_keys::ScopeKeys::new(4).unwrap();
        let f = file("overrides:\n  - {scope: a, limit: 10}\n  - {scope: b, limit: 20}\n  - {scope: c, limit: 30}\n");
        let t = table(
            &[
                ("a#0", 10, 1),
                ("a#1", 10, 1),
                ("a#2", 10, 1),
                ("a#3", 10, 1),
                // b: a `limit set` that stopped after two copies.
                ("b#0", 20, 2),
                ("b#1", 20, 2),
                ("b#2", 15, 1),
                ("d#1", 4, 5),
            ],
            &[],
        )
        .fold(keys);
        let changes = diff(&f, &t);
        assert_eq!(
            summary(&changes),
            vec![
                ("b".into(), Kind::Changed, Some(20), Some(20), None),
                ("c".into(), Kind::Added, None, Some(30), None),
                ("d".into(), Kind::Removed, Some(4), None, None),
            ]
        );
        let b = &changes[0];
        assert!(b.copies_disagree());
        let read: Vec<(u32, Option<u64>, Option<u64>)> = b.copies.iter().map(|c| (c.key, c.limit, c.version)).collect();
        assert_eq!(
            read,
            [
                (0, Some(20), Some(2)),
                (1, Some(20), Some(2)),
                (2, Some(15), Some(1)),
                (3, None, None)
            ]
        );
        assert_eq!(changes[1].copies.len(), 4);
        assert!(changes[1].copies.iter().all(|c| c.version.is_none()));
        assert_eq!(changes[2].copies[1].limit, Some(4));
    }

    #[test]
    fn a_prefix_entry_covers_the_existing_scopes_under_it_unless_an_exact_or_longer_entry_does() {
        let f = file(
            "overrides:\n  - {prefix: acme/, limit: 50}\n  - {prefix: acme/eu/, limit: 60}\n  - {scope: acme/vip, limit: 99}\n",
        );
        let t = table(
            &[("acme/a", 50, 1), ("acme/b", 10, 4)],
            &["acme/a", "acme/b", "acme/c", "acme/eu/x", "acme/vip"],
        );
        let changes = diff(&f, &t);
        assert_eq!(
            summary(&changes),
            vec![
                ("acme/b".into(), Kind::Changed, Some(10), Some(50), Some(4)),
                ("acme/c".into(), Kind::Added, None, Some(50), None),
                ("acme/eu/x".into(), Kind::Added, None, Some(60), None),
                ("acme/vip".into(), Kind::Added, None, Some(99), None),
            ]
        );
        assert_eq!(changes[0].prefix.as_deref(), Some("acme/"));
        assert_eq!(changes[2].prefix.as_deref(), Some("acme/eu/"));
        assert_eq!(changes[3].prefix, None);
    }
}
