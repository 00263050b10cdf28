//! `counterctl limits plan FILE`: what the table's overrides would become
//! under the file. The diff itself is a pure function of the file and one
//! Scan ([`diff`]); each change is then annotated with the scope's current
//! usage, and a change that would leave a scope below its usage is flagged.

use std::collections::BTreeSet;
use std::fmt;

use hybrid_counter_aws::limits::{LimitItem, LimitTable};
use serde::{Deserialize, Serialize};

use futures_util::future::join_all;
use hybrid_counter::Counter;

use super::file::{Limit, LimitsFile};
use super::table::{CONCURRENCY, Limits, store_error};
use crate::error::{Error, Result};

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
    /// The scope's effective usage when planned.
    #[serde(default)]
    pub usage: u64,
    /// The limit after the change (the default for a removal) is below `usage`.
    #[serde(default)]
    pub below_usage: bool,
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

/// A plan: what `limits apply` writes, and what it checks first. Written
/// by `--out` and read back by `limits apply --plan`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsPlan {
    pub stack_name: String,
    pub counters_table: String,
    pub default_limit: DefaultLimit,
    pub changes: Vec<Change>,
    /// Overrides read.
    pub overrides: usize,
    /// Scopes matched by a prefix entry (existing now: a scope created
    /// later gets its override at the next apply).
    #[serde(default)]
    pub prefixed_scopes: usize,
}

impl LimitsPlan {
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty() || self.default_limit.differs()
    }

    pub fn below_usage(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.below_usage)
    }

    /// Checks a plan read back from a file (it may have been edited): each
    /// change names a valid scope once, its kind agrees with what it read
    /// (`old`, `version`) and sets (`new`), and every limit is one a file
    /// could set. So every write it makes is conditioned (absent, or the
    /// version read) and within the maximum.
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut seen = BTreeSet::new();
        for c in &self.changes {
            let at = |what: &str| format!("change of {:?}: {what}", c.scope);
            hybrid_counter::Scope::new(c.scope.clone()).map_err(|e| at(&e.to_string()))?;
            if !seen.insert(c.scope.as_str()) {
                return Err(at("a second change of the same scope"));
            }
            let consistent = match c.kind {
                Kind::Added => c.old.is_none() && c.version.is_none() && c.rev.is_none() && c.new.is_some(),
                Kind::Changed => c.old.is_some() && c.version.is_some() && c.new.is_some() && c.old != c.new,
                Kind::Removed => c.old.is_some() && c.version.is_some() && c.new.is_none(),
            };
            if !consistent {
                return Err(at(&format!(
                    "kind {:?} does not agree with old {:?}, new {:?}, version {:?}",
                    c.kind, c.old, c.new, c.version
                )));
            }
            if let Some(new) = c.new {
                Limit::try_from(new).map_err(|e| at(&e))?;
            }
        }
        Limit::try_from(self.default_limit.deployed).map_err(|e| format!("default_limit: {e}"))?;
        Ok(())
    }
}

/// The changes that make `table` what `file` says, sorted by scope (usage
/// not read yet). A scope is covered by its exact entry, else by its
/// longest prefix entry that matches an existing scope; an override no entry
/// covers is removed.
pub fn diff(file: &LimitsFile, table: &LimitTable) -> Vec<Change> {
    let scopes: BTreeSet<&str> = table
        .overrides
        .keys()
        .chain(&table.prefixed_scopes)
        .map(String::as_str)
        .chain(file.overrides.iter().filter_map(|o| match &o.scope {
            super::file::Pattern::Exact(s) => Some(s.as_str()),
            super::file::Pattern::Prefix(_) => None,
        }))
        .collect();
    scopes
        .into_iter()
        .filter_map(|scope| {
            let entry = file.entry_for(scope);
            let current = table.overrides.get(scope);
            let new = entry.map(|e| e.limit.get());
            let kind = match (current, new) {
                (None, Some(_)) => Kind::Added,
                (Some(LimitItem { limit, .. }), Some(new)) if *limit != new => Kind::Changed,
                (Some(_), None) => Kind::Removed,
                _ => return None,
            };
            Some(Change {
                scope: scope.to_owned(),
                kind,
                old: current.map(|c| c.limit),
                new,
                version: current.map(|c| c.version),
                rev: current.and_then(|c| c.rev.clone()),
                prefix: entry.and_then(|e| match &e.scope {
                    super::file::Pattern::Prefix(p) => Some(p.clone()),
                    super::file::Pattern::Exact(_) => None,
                }),
                usage: 0,
                below_usage: false,
            })
        })
        .collect()
}

/// Reads each changed scope's effective usage (what admission compares
/// with the limit) and flags the changes whose new limit is below it.
pub(crate) async fn annotate_usage(limits: &Limits<'_>, changes: &mut [Change]) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let counter = Counter::new(limits.store.clone(), limits.default_limit);
    let bar = limits
        .ctx
        .ui
        .bar(changes.len() as u64, "reading the changed scopes' usage");
    for chunk in changes.chunks_mut(CONCURRENCY) {
        let reads = chunk.iter().map(|c| async {
            let scope = hybrid_counter::Scope::new(c.scope.clone())
                .map_err(|e| Error::InvalidArgument(format!("scope {:?} in the table: {e}", c.scope)))?;
            counter.usage(&scope).await.map_err(|e| Error::Aws {
                action: "reading a scope's usage",
                message: e.to_string(),
            })
        });
        let usages = join_all(reads).await;
        for (change, usage) in chunk.iter_mut().zip(usages) {
            let effective = u64::try_from(usage?.effective).unwrap_or(0);
            let after = change.new.unwrap_or(limits.default_limit);
            change.usage = effective;
            // A removal leaves the scope at the default.
            change.below_usage = after < effective;
            bar.inc(1);
        }
    }
    Ok(())
}

/// Reads the table and the scopes' usage, and plans.
pub async fn run(limits: &Limits<'_>, file: &LimitsFile) -> Result<LimitsPlan> {
    let mut plan = read(limits, file).await?;
    annotate_usage(limits, &mut plan.changes).await?;
    Ok(plan)
}

/// The plan without the scopes' usage (one Scan, no read per scope).
pub async fn read(limits: &Limits<'_>, file: &LimitsFile) -> Result<LimitsPlan> {
    limits.ctx.ui.step("reading the limit overrides");
    let table = limits
        .store
        .scan_limits(&file.prefixes())
        .await
        .map_err(store_error("reading the limit overrides"))?;
    let changes = diff(file, &table);
    Ok(LimitsPlan {
        stack_name: limits.ctx.config.stack_name.clone(),
        counters_table: limits.store.counters_table().to_owned(),
        default_limit: DefaultLimit {
            deployed: limits.default_limit,
            file: file.default_limit.map(|l| l.get()),
        },
        changes,
        overrides: table.overrides.len(),
        prefixed_scopes: table.prefixed_scopes.len(),
    })
}

fn limit_text(limit: Option<u64>, default: u64) -> String {
    limit.map_or_else(|| format!("default ({default})"), |l| l.to_string())
}

impl fmt::Display for LimitsPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |kind| self.changes.iter().filter(|c| c.kind == kind).count();
        writeln!(
            f,
            "Limits of stack {} (table {}, {} overrides read): {} to add, {} to change, {} to remove",
            self.stack_name,
            self.counters_table,
            self.overrides,
            count(Kind::Added),
            count(Kind::Changed),
            count(Kind::Removed),
        )?;
        let default = self.default_limit.deployed;
        for c in &self.changes {
            let (sign, what) = match c.kind {
                Kind::Added => ("+", c.new.map_or_else(String::new, |n| n.to_string())),
                Kind::Changed | Kind::Removed => (
                    if c.kind == Kind::Changed { "~" } else { "-" },
                    format!("{} -> {}", limit_text(c.old, default), limit_text(c.new, default)),
                ),
            };
            write!(f, "  {sign} {}: {what} (usage {})", c.scope, c.usage)?;
            if let Some(prefix) = &c.prefix {
                write!(f, " [from prefix {prefix}]")?;
            }
            if c.below_usage {
                write!(f, "  BELOW USAGE")?;
            }
            writeln!(f)?;
        }
        if self.default_limit.differs() {
            let want = self.default_limit.file.unwrap_or(default);
            writeln!(
                f,
                "Default limit: the file says {want}, the stack has {default}; limits apply does not change the \
                 stack: run `counterctl deploy --param {}={want}`",
                stack::params::DEFAULT_LIMIT
            )?;
        }
        let below = self.below_usage().count();
        if below > 0 {
            writeln!(
                f,
                "{below} change(s) set a limit below the scope's current usage: limits apply refuses them \
                 without --allow-below-usage"
            )?;
        }
        if self.prefixed_scopes > 0 {
            writeln!(
                f,
                "Prefix entries cover the {} scope(s) that exist now; a scope created later gets its override at \
                 the next apply.",
                self.prefixed_scopes
            )?;
        }
        if !self.has_changes() {
            writeln!(f, "No changes: the table matches the file.")?;
        }
        Ok(())
    }
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

    #[test]
    fn a_hand_edited_plan_is_refused_unless_each_change_agrees_with_itself() {
        let f = file("overrides:\n  - {scope: a, limit: 5}\n  - {scope: c, limit: 9}\n");
        let t = table(&[("a", 4, 3), ("d", 4, 8)], &[]);
        let plan = |changes: Vec<Change>| LimitsPlan {
            stack_name: "hck".into(),
            counters_table: "t".into(),
            default_limit: DefaultLimit {
                deployed: 100,
                file: None,
            },
            changes,
            overrides: 2,
            prefixed_scopes: 0,
        };
        let good = diff(&f, &t);
        assert_eq!(plan(good.clone()).check(), Ok(()));
        let edited = |edit: fn(&mut Change)| {
            let mut changes = good.clone();
            changes.iter_mut().for_each(edit);
            plan(changes).check().unwrap_err()
        };
        // A changed or removed override without its version: unconditioned.
        assert!(edited(|c| c.version = None).contains("does not agree"));
        // An add that claims a version, a removal that sets a limit.
        assert!(edited(|c| c.kind = Kind::Added).contains("does not agree"));
        assert!(edited(|c| c.new = c.new.or(Some(1))).contains("does not agree"));
        assert!(edited(|c| c.new = c.new.map(|_| 2_000_000_000)).contains("above the maximum"));
        assert!(edited(|c| c.scope = " a".into()).contains("whitespace"));
        let mut twice = good.clone();
        twice.push(good[0].clone());
        assert!(plan(twice).check().unwrap_err().contains("second change"));
    }

    #[test]
    fn the_plan_names_the_deploy_that_changes_the_default_and_flags_lowering_below_usage() {
        let plan = LimitsPlan {
            stack_name: "hck".into(),
            counters_table: "hck-counters".into(),
            default_limit: DefaultLimit {
                deployed: 100,
                file: Some(200),
            },
            changes: vec![Change {
                scope: "a".into(),
                kind: Kind::Changed,
                old: Some(10),
                new: Some(2),
                version: Some(3),
                rev: Some("r3".into()),
                prefix: None,
                usage: 5,
                below_usage: true,
            }],
            overrides: 1,
            prefixed_scopes: 0,
        };
        let text = plan.to_string();
        assert!(text.contains("  ~ a: 10 -> 2 (usage 5)  BELOW USAGE"), "{text}");
        assert!(text.contains("counterctl deploy --param DefaultLimit=200"), "{text}");
        assert!(text.contains("limits apply does not change the stack"), "{text}");
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["changes"][0]["version"], 3);
        assert_eq!(serde_json::from_value::<LimitsPlan>(json).unwrap(), plan);
        assert!(plan.has_changes());
    }
}
