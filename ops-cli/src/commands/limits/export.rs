//! `counterctl limits export [--out FILE]`: today's overrides and the
//! deployed default limit as a limits file, one exact entry per scope, so
//! a team can adopt the file from a live stack (a plan of it has no
//! changes). The table keeps no owner or reason: the file leaves them out.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use super::table::{Limits, store_error, write};
use crate::error::{Error, Result};
use hybrid_counter::limits::file::{Limit, LimitsFile, Override, Pattern};

#[derive(Debug, Clone, Serialize)]
pub struct LimitsExportReport {
    pub stack_name: String,
    pub overrides: usize,
    /// Where the file was written (`None`: it is printed).
    pub out: Option<String>,
    /// The file.
    pub file: String,
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
        .map_err(store_error("reading the limit overrides"))?;
    let file = to_file(
        limits.default_limit,
        table.overrides.into_iter().map(|(scope, item)| (scope, item.limit)),
    )?;
    let text = format!(
        "# Limit overrides of stack {}, exported by counterctl limits export.\n\
         # Add an owner and a reason to each entry; see docs/counterctl.md.\n{}",
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
    })
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
        use hybrid_counter::limits::{LimitItem, LimitTable};
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
            prefixed_scopes: Default::default(),
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
    fn an_exported_file_parses_back_to_the_same_overrides() {
        let file = to_file(100, [("a".to_owned(), 5), ("b/c".to_owned(), 0)]).unwrap();
        let parsed = LimitsFile::parse("x", &file.to_yaml().unwrap()).unwrap();
        assert_eq!(parsed, file);
        assert_eq!(parsed.entry_for("b/c").map(|o| o.limit.get()), Some(0));
    }
}
