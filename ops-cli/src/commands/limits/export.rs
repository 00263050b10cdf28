//! `counterctl limits export [--out FILE]`: today's overrides and the
//! deployed default limit as a limits file, one exact entry per scope, so
//! a team can adopt the file from a live stack (a plan of it has no
//! changes). The table keeps no owner or reason: the file leaves them out.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use super::table::{Limits, during, write};
use crate::error::{Error, Result};
use hybrid_counter::limits::LimitTable;
use hybrid_counter::limits::file::{Limit, LimitsFile, Override, Pattern};

#[derive(Debug, Clone, Serialize)]
pub struct LimitsExportReport {
    pub stack_name: String,
    pub overrides: usize,
    /// Where the file was written (`None`: it is printed).
    pub out: Option<String>,
    /// The file.
    pub file: String,
    /// Scopes whose copies of the override disagree (some key missing it or
    /// holding another limit): exported at the larger limit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disagreeing: Vec<String>,
}

/// The file of `overrides` (scope, limit) with `default_limit`.
pub fn to_file(default_limit: u64, overrides: impl IntoIterator<Item = (String, u64)>) -> Result<LimitsFile> {
    let limit = |value: u64| Limit::try_from(value).map_err(Error::InvalidArgument);
    Ok(LimitsFile {
        default_limit: Some(limit(default_limit)?),
        overrides: overrides
            .into_iter()
            .map(|(scope, value)| {
                let scope = hybrid_counter::Scope::new(scope)
                    .map(Pattern::Exact)
                    .map_err(|e| Error::InvalidArgument(format!("a scope of the table: {e}")))?;
                let limit = Limit::try_from(value).map_err(|e| {
                    Error::InvalidArgument(format!("the override of {scope}: {e}: lower it with `limit set`"))
                })?;
                Ok(Override {
                    scope,
                    limit,
                    owner: None,
                    reason: None,
                })
            })
            .collect::<Result<_>>()?,
    })
}

pub async fn run(limits: &Limits<'_>, out: Option<&Path>) -> Result<LimitsExportReport> {
    limits.ctx.ui.step("reading the limit overrides");
    let table = limits
        .store
        .scan_limits(&[])
        .await
        .map_err(during("reading the limit overrides"))?
        .fold(limits.scope_keys);
    let disagreeing = disagreeing(&table);
    let mut notes = String::new();
    for scope in &disagreeing {
        let note = format!(
            "the copies of {scope}'s override on its {} keys disagree: exported the larger limit, which bounds \
             admission; `limits apply` of this file writes it on every key",
            limits.scope_keys.count()
        );
        limits.ctx.ui.log(format!("warning: {note}"));
        notes.push_str(&format!("# {note}.\n"));
    }
    let file = to_file(
        limits.default_limit,
        table.overrides.into_iter().map(|(scope, item)| (scope, item.limit)),
    )?;
    let text = format!(
        "# Limit overrides of stack {}, exported by counterctl limits export.\n\
         # Add an owner and a reason to each entry; see docs/counterctl.md.\n{notes}{}",
        limits.ctx.config.stack_name,
        file.to_yaml()
            .map_err(|e| Error::InvalidArgument(format!("cannot write the limits file: {e}")))?
    );
    if let Some(path) = out {
        write(path, &text)?;
    }
    Ok(LimitsExportReport {
        stack_name: limits.ctx.config.stack_name.clone(),
        overrides: file.overrides.len(),
        out: out.map(|p| p.display().to_string()),
        file: text,
        disagreeing,
    })
}

/// The scopes of a folded table whose copies are missing on a key or hold
/// another limit than the largest (none with one key per scope).
fn disagreeing(table: &LimitTable) -> Vec<String> {
    table
        .overrides
        .iter()
        .filter(|(scope, item)| table.keys.is_suffixed() && !table.copies_hold(scope, Some(item.limit)))
        .map(|(scope, _)| scope.clone())
        .collect()
}

impl fmt::Display for LimitsExportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.out {
            None => f.write_str(&self.file),
            Some(path) => writeln!(
                f,
                "wrote the {} limit overrides of stack {} to {path}",
                self.overrides, self.stack_name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hybrid_counter::limits::MAX_LIMIT;

    /// Export -> plan is empty: a scope with `*` in it (or only `*`) is
    /// exported as an exact `scope:`, read back as that scope, never as a
    /// prefix; the plan of the file against the table has no changes.
    #[test]
    fn an_export_of_scopes_with_stars_plans_no_changes() {
        use hybrid_counter::limits::LimitItem;
        let scopes = ["*", "foo*", "a b*", "**", "x"];
        let table = LimitTable {
            overrides: scopes
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let item = LimitItem {
                        limit: if i == 0 { MAX_LIMIT } else { i as u64 },
                        version: 1,
                        rev: None,
                    };
                    ((*s).to_owned(), item)
                })
                .collect(),
            ..LimitTable::default()
        };
        let file = to_file(100, table.overrides.iter().map(|(s, i)| (s.clone(), i.limit))).unwrap();
        let text = file.to_yaml().unwrap();
        let parsed = LimitsFile::parse("export", &text).unwrap();
        assert_eq!(parsed, file, "{text}");
        assert!(parsed.prefixes().is_empty(), "{text}");
        assert_eq!(
            hybrid_counter::limits::diff::diff(&parsed, &table),
            Vec::new(),
            "{text}"
        );
        let above = to_file(100, [("big".to_owned(), MAX_LIMIT + 1)]).unwrap_err();
        assert!(above.to_string().contains("the override of big"), "{above}");
    }

    #[test]
    fn over_four_keys_an_export_has_one_entry_per_scope_and_names_the_disagreeing_ones() {
        use hybrid_counter::limits::LimitItem;
        let item = |limit| LimitItem {
            limit,
            version: 1,
            rev: None,
        };
        let mut overrides: std::collections::BTreeMap<String, LimitItem> =
            (0..4).map(|k| (format!("a#{k}"), item(10))).collect();
        overrides.insert("b#0".into(), item(5));
        overrides.insert("b#3".into(), item(8));
        let table = LimitTable {
            overrides,
            ..LimitTable::default()
        }
        .fold(hybrid_counter::scope_keys::ScopeKeys::new(4).unwrap());
        assert_eq!(disagreeing(&table), ["b"]);
        let file = to_file(100, table.overrides.iter().map(|(s, i)| (s.clone(), i.limit))).unwrap();
        let entries: Vec<(String, u64)> = file
            .overrides
            .iter()
            .map(|o| (o.scope.to_string(), o.limit.get()))
            .collect();
        assert_eq!(entries, [("a".to_owned(), 10), ("b".to_owned(), 8)]);
        // Planned back: `a` is as exported, `b` a change that writes every key.
        let changes = hybrid_counter::limits::diff::diff(&file, &table);
        assert_eq!(changes.len(), 1);
        assert_eq!((changes[0].scope.as_str(), changes[0].new), ("b", Some(8)));
    }

    #[test]
    fn an_exported_file_parses_back_to_the_same_overrides() {
        let file = to_file(100, [("a".to_owned(), 5), ("b/c".to_owned(), 0)]).unwrap();
        let parsed = LimitsFile::parse("x", &file.to_yaml().unwrap()).unwrap();
        assert_eq!(parsed, file);
        assert_eq!(parsed.entry_for("b/c").map(|o| o.limit.get()), Some(0));
    }
}
