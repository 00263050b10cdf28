//! `counterctl limits plan FILE`: what the table's overrides would become
//! under the file. The diff itself is the core's pure function of the file
//! and one Scan ([`diff`]); each change is then annotated with the scope's current
//! usage, and a change that would leave a scope below its usage is flagged.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use futures_util::future::join_all;
use hybrid_counter::Counter;
use hybrid_counter::limits::diff::{Change, DefaultLimit, Kind, diff};

use super::table::{CONCURRENCY, Limits, during};
use crate::error::{Error, Result};
use hybrid_counter::limits::file::{Limit, LimitsFile};

/// One change of a plan: the core's [`Change`] and the scope's usage when
/// planned, which only `limits plan | apply` read. Flattened: a change is
/// one JSON object in the plan file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedChange {
    #[serde(flatten)]
    pub change: Change,
    /// The scope's effective usage when planned.
    #[serde(default)]
    pub usage: u64,
    /// The limit after the change (the default for a removal) is below `usage`.
    #[serde(default)]
    pub below_usage: bool,
}

impl From<Change> for PlannedChange {
    /// Usage not read yet.
    fn from(change: Change) -> Self {
        Self {
            change,
            usage: 0,
            below_usage: false,
        }
    }
}

/// A plan: what `limits apply` writes, and what it checks first. Written
/// by `--out` and read back by `limits apply --plan`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsPlan {
    pub stack_name: String,
    pub counters_table: String,
    pub default_limit: DefaultLimit,
    pub changes: Vec<PlannedChange>,
    /// Overrides read.
    pub overrides: usize,
    /// Scopes matched by a prefix entry (existing now: a scope created
    /// later gets its override at the next apply).
    #[serde(default)]
    pub prefixed_scopes: usize,
    /// The keys each scope is spread over when planned (`ScopeKeyShards`):
    /// above 1, each change carries every key's copy as read.
    #[serde(default = "one_key")]
    pub scope_keys: u32,
    /// Overrides on partitions no create reads at this count (a bare
    /// scope's, left from a smaller count): not planned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

fn one_key() -> u32 {
    1
}

impl LimitsPlan {
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty() || self.default_limit.differs()
    }

    pub fn below_usage(&self) -> impl Iterator<Item = &PlannedChange> {
        self.changes.iter().filter(|c| c.below_usage)
    }

    /// Checks a plan read back from a file (it may have been edited): each
    /// change names a valid scope once, its kind agrees with what it read
    /// (`old`, `version`) and sets (`new`), and every limit is one a file
    /// could set. So every write it makes is conditioned (absent, or the
    /// version read) and within the maximum.
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut seen = BTreeSet::new();
        for c in self.changes.iter().map(|p| &p.change) {
            let at = |what: &str| format!("change of {:?}: {what}", c.scope);
            hybrid_counter::Scope::new(c.scope.clone()).map_err(|e| at(&e.to_string()))?;
            if !seen.insert(c.scope.as_str()) {
                return Err(at("a second change of the same scope"));
            }
            let consistent = if self.scope_keys > 1 {
                // Every key's copy, once, in order; each conditioned on
                // what it read (absent, or its version).
                let keyed = c.copies.len() == self.scope_keys as usize
                    && c.copies.iter().enumerate().all(|(k, copy)| {
                        copy.key as usize == k
                            && copy.limit.is_some() == copy.version.is_some()
                            && (copy.version.is_some() || copy.rev.is_none())
                    });
                let present = c.copies.iter().any(|copy| copy.version.is_some());
                keyed
                    && c.version.is_none()
                    && c.rev.is_none()
                    && match c.kind {
                        Kind::Added => c.old.is_none() && !present && c.new.is_some(),
                        Kind::Changed => c.old.is_some() && present && c.new.is_some(),
                        Kind::Removed => c.old.is_some() && present && c.new.is_none(),
                    }
            } else {
                c.copies.is_empty()
                    && match c.kind {
                        Kind::Added => c.old.is_none() && c.version.is_none() && c.rev.is_none() && c.new.is_some(),
                        Kind::Changed => c.old.is_some() && c.version.is_some() && c.new.is_some() && c.old != c.new,
                        Kind::Removed => c.old.is_some() && c.version.is_some() && c.new.is_none(),
                    }
            };
            if !consistent {
                return Err(at(&format!(
                    "kind {:?} does not agree with old {:?}, new {:?}, version {:?}, copies {:?} (keys {})",
                    c.kind, c.old, c.new, c.version, c.copies, self.scope_keys
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

/// Reads each changed scope's effective usage (what admission compares
/// with the limit) and flags the changes whose new limit is below it.
pub(crate) async fn annotate_usage(limits: &Limits<'_>, changes: &mut [PlannedChange]) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let counter = Counter::new(limits.store.clone(), limits.default_limit).with_scope_keys(limits.scope_keys);
    let bar = limits
        .ctx
        .ui
        .bar(changes.len() as u64, "reading the changed scopes' usage");
    for chunk in changes.chunks_mut(CONCURRENCY) {
        let reads = chunk.iter().map(|PlannedChange { change: c, .. }| async {
            let scope = hybrid_counter::Scope::new(c.scope.clone())
                .map_err(|e| Error::InvalidArgument(format!("scope {:?} in the table: {e}", c.scope)))?;
            counter.usage(&scope).await.map_err(during("reading a scope's usage"))
        });
        let usages = join_all(reads).await;
        for (change, usage) in chunk.iter_mut().zip(usages) {
            let effective = u64::try_from(usage?.effective).unwrap_or(0);
            let after = change.change.new.unwrap_or(limits.default_limit);
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
        .map_err(during("reading the limit overrides"))?
        .fold(limits.scope_keys);
    let changes = diff(file, &table).into_iter().map(PlannedChange::from).collect();
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
        scope_keys: limits.scope_keys.count(),
        unread: table.unread.into_keys().collect(),
    })
}

fn limit_text(limit: Option<u64>, default: u64) -> String {
    limit.map_or_else(|| format!("default ({default})"), |l| l.to_string())
}

impl fmt::Display for LimitsPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |kind| self.changes.iter().filter(|p| p.change.kind == kind).count();
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
        for planned in &self.changes {
            let c = &planned.change;
            let (sign, what) = match c.kind {
                Kind::Added => ("+", c.new.map_or_else(String::new, |n| n.to_string())),
                Kind::Changed | Kind::Removed => (
                    if c.kind == Kind::Changed { "~" } else { "-" },
                    format!("{} -> {}", limit_text(c.old, default), limit_text(c.new, default)),
                ),
            };
            write!(f, "  {sign} {}: {what} (usage {})", c.scope, planned.usage)?;
            if let Some(prefix) = &c.prefix {
                write!(f, " [from prefix {prefix}]")?;
            }
            if planned.below_usage {
                write!(f, "  BELOW USAGE")?;
            }
            if c.kind == Kind::Changed && c.copies_disagree() {
                let copies: Vec<String> = c
                    .copies
                    .iter()
                    .map(|copy| {
                        format!(
                            "#{}: {}",
                            copy.key,
                            copy.limit.map_or("none".to_owned(), |l| l.to_string())
                        )
                    })
                    .collect();
                write!(
                    f,
                    "  COPIES DISAGREE ({}; admission bounded by the larger): apply writes every key",
                    copies.join(", ")
                )?;
            }
            writeln!(f)?;
        }
        if self.scope_keys > 1 {
            writeln!(
                f,
                "Each scope is spread over {} keys: its override is a copy on each, and a copy missing or \
                 disagreeing is a change.",
                self.scope_keys
            )?;
        }
        if !self.unread.is_empty() {
            writeln!(
                f,
                "{} override(s) on partitions no create reads at {} keys per scope (left from another count), not \
                 planned: {}",
                self.unread.len(),
                self.scope_keys,
                self.unread.join(", ")
            )?;
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

    use hybrid_counter::limits::{LimitItem, LimitTable};

    use super::*;

    fn file(text: &str) -> LimitsFile {
        LimitsFile::parse("x", text).unwrap()
    }

    #[test]
    fn a_hand_edited_plan_is_refused_unless_each_change_agrees_with_itself() {
        let f = file("overrides:\n  - {scope: a, limit: 5}\n  - {scope: c, limit: 9}\n");
        let read = |limit, version: u64| LimitItem {
            limit,
            version,
            rev: Some(format!("r{version}")),
        };
        let t = LimitTable {
            overrides: BTreeMap::from([("a".to_owned(), read(4, 3)), ("d".to_owned(), read(4, 8))]),
            ..LimitTable::default()
        };
        let plan = |changes: Vec<Change>| LimitsPlan {
            stack_name: "hck".into(),
            counters_table: "t".into(),
            default_limit: DefaultLimit {
                deployed: 100,
                file: None,
            },
            changes: changes.into_iter().map(PlannedChange::from).collect(),
            overrides: 2,
            prefixed_scopes: 0,
            scope_keys: 1,
            unread: Vec::new(),
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
    fn over_four_keys_a_plan_carries_every_copy_and_a_hand_edited_one_must_still_agree() {
        let f = file("overrides:\n  - {scope: a, limit: 20}\n  - {scope: c, limit: 9}\n");
        let read = |limit, version: u64| LimitItem {
            limit,
            version,
            rev: Some(format!("r{version}")),
        };
        let t = LimitTable {
            overrides: BTreeMap::from([
                ("a#0".to_owned(), read(20, 2)),
                ("a#1".to_owned(), read(15, 1)),
                ("a#3".to_owned(), read(20, 2)),
            ]),
            ..LimitTable::default()
        }
        .fold(hybrid_counter::scope_keys::ScopeKeys::new(4).unwrap());
        let plan = |changes: Vec<Change>| LimitsPlan {
            stack_name: "hck".into(),
            counters_table: "t".into(),
            default_limit: DefaultLimit {
                deployed: 100,
                file: None,
            },
            changes: changes.into_iter().map(PlannedChange::from).collect(),
            overrides: 1,
            prefixed_scopes: 0,
            scope_keys: 4,
            unread: Vec::new(),
        };
        let good = diff(&f, &t);
        assert_eq!(good.len(), 2, "{good:?}");
        assert_eq!(plan(good.clone()).check(), Ok(()));
        let text = plan(good.clone()).to_string();
        assert!(text.contains("  ~ a: 20 -> 20"), "{text}");
        assert!(
            text.contains("COPIES DISAGREE (#0: 20, #1: 15, #2: none, #3: 20; admission bounded by the larger)"),
            "{text}"
        );
        assert!(text.contains("spread over 4 keys"), "{text}");
        let edited = |edit: fn(&mut Change)| {
            let mut changes = good.clone();
            changes.iter_mut().for_each(edit);
            plan(changes).check().unwrap_err()
        };
        assert!(
            edited(|c| {
                c.copies.pop();
            })
            .contains("does not agree")
        );
        assert!(edited(|c| c.copies.iter_mut().for_each(|k| k.version = None)).contains("does not agree"));
        assert!(edited(|c| c.version = Some(1)).contains("does not agree"));
        // A plan of one key per scope takes no copies.
        let mut one = plan(good);
        one.scope_keys = 1;
        assert!(one.check().unwrap_err().contains("does not agree"));
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
            changes: vec![PlannedChange {
                change: Change {
                    scope: "a".into(),
                    kind: Kind::Changed,
                    old: Some(10),
                    new: Some(2),
                    version: Some(3),
                    rev: Some("r3".into()),
                    prefix: None,
                    copies: Vec::new(),
                },
                usage: 5,
                below_usage: true,
            }],
            overrides: 1,
            prefixed_scopes: 0,
            scope_keys: 1,
            unread: Vec::new(),
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
