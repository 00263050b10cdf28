//! The table's overrides compared with a limits file, as an attention
//! item: an override changed outside the file (a `limit set`), one the
//! file does not have, or a scope under a prefix entry that has no
//! override yet (created after the last apply). `counterctl status
//! --limits` prints it; the scheduled drift check logs it and publishes
//! how many scopes differ.

use std::fmt;

use serde::Serialize;

use super::diff::{Change, DefaultLimit, Kind};

/// Scope names listed per kind of difference; the rest are counted.
const NAMED: usize = 10;

#[derive(Debug, Clone, Serialize)]
pub struct LimitsDrift {
    pub file: String,
    /// Scopes the file gives an override the table lacks (new under a prefix, or cleared).
    pub added: Vec<String>,
    /// Scopes whose override differs from the file.
    pub changed: Vec<String>,
    /// Overrides the file does not have.
    pub removed: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_limit: Option<DefaultLimit>,
    /// Why the comparison could not be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LimitsDrift {
    /// The drift `changes` (as [`super::diff::diff`] found them) and the
    /// default limits make; `file` names the file in the text.
    pub fn of(file: &str, changes: &[Change], default_limit: &DefaultLimit) -> Self {
        let scopes = |kind| -> Vec<String> {
            changes
                .iter()
                .filter(|c| c.kind == kind)
                .map(|c| c.scope.clone())
                .collect()
        };
        Self {
            file: file.to_owned(),
            added: scopes(Kind::Added),
            changed: scopes(Kind::Changed),
            removed: scopes(Kind::Removed),
            default_limit: default_limit.differs().then(|| default_limit.clone()),
            error: None,
        }
    }

    /// The comparison that could not be made, and why.
    pub fn failed(file: &str, error: String) -> Self {
        Self {
            file: file.to_owned(),
            added: Vec::new(),
            changed: Vec::new(),
            removed: Vec::new(),
            default_limit: None,
            error: Some(error),
        }
    }

    /// Scopes whose override differs from the file, of every kind.
    pub fn scopes(&self) -> usize {
        self.added.len() + self.changed.len() + self.removed.len()
    }

    pub fn in_sync(&self) -> bool {
        self.error.is_none()
            && self.added.is_empty()
            && self.changed.is_empty()
            && self.removed.is_empty()
            && self.default_limit.is_none()
    }

    /// The attention item, when the table and the file differ.
    pub fn attention(&self) -> Option<String> {
        (!self.in_sync()).then(|| format!("limit overrides: {self}"))
    }
}

fn names(scopes: &[String]) -> String {
    let mut text = scopes.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
    if scopes.len() > NAMED {
        text.push_str(&format!(" and {} more", scopes.len() - NAMED));
    }
    text
}

impl fmt::Display for LimitsDrift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(error) = &self.error {
            return write!(f, "could not compare with {}: {error}", self.file);
        }
        if self.in_sync() {
            return write!(f, "as in {}", self.file);
        }
        let mut parts = Vec::new();
        if !self.changed.is_empty() {
            parts.push(format!("changed outside the file: {}", names(&self.changed)));
        }
        if !self.removed.is_empty() {
            parts.push(format!("not in the file: {}", names(&self.removed)));
        }
        if !self.added.is_empty() {
            parts.push(format!(
                "missing (new under a prefix, or cleared): {}",
                names(&self.added)
            ));
        }
        if let Some(default) = &self.default_limit {
            parts.push(format!(
                "default limit {} where the file says {}",
                default.deployed,
                default.file.unwrap_or_default()
            ));
        }
        // `limits plan` reads a local file: the drift check's is in S3.
        let file = &self.file;
        let fix = if file.starts_with("s3://") {
            format!("download {file} and run `counterctl limits plan` on the copy")
        } else {
            format!("run `counterctl limits plan {file}`")
        };
        write!(f, "differ from {file}: {}; {fix}", parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(scope: &str, kind: Kind) -> Change {
        Change {
            scope: scope.into(),
            kind,
            old: None,
            new: None,
            version: None,
            rev: None,
            prefix: None,
            copies: Vec::new(),
        }
    }

    fn drift(changes: Vec<Change>, file_default: Option<u64>) -> LimitsDrift {
        let default = DefaultLimit {
            deployed: 100,
            file: file_default,
        };
        LimitsDrift::of("l.yaml", &changes, &default)
    }

    #[test]
    fn overrides_changed_outside_the_file_are_an_attention_item_naming_them() {
        let drift = drift(
            vec![
                change("a", Kind::Changed),
                change("late/b", Kind::Added),
                change("old", Kind::Removed),
            ],
            None,
        );
        let item = drift.attention().unwrap();
        assert!(item.starts_with("limit overrides: differ from l.yaml"), "{item}");
        assert!(item.contains("changed outside the file: a"), "{item}");
        assert!(
            item.contains("missing (new under a prefix, or cleared): late/b"),
            "{item}"
        );
        assert!(item.contains("not in the file: old"), "{item}");
        assert!(item.ends_with("run `counterctl limits plan l.yaml`"), "{item}");
    }

    #[test]
    fn a_file_in_s3_is_to_be_downloaded_before_it_is_planned() {
        let default = DefaultLimit {
            deployed: 100,
            file: None,
        };
        let drift = LimitsDrift::of("s3://ops/limits.yaml", &[change("a", Kind::Changed)], &default);
        assert!(
            drift
                .to_string()
                .ends_with("download s3://ops/limits.yaml and run `counterctl limits plan` on the copy"),
            "{drift}"
        );
    }

    #[test]
    fn a_table_as_in_the_file_needs_nothing_and_a_default_difference_does() {
        let same = drift(Vec::new(), Some(100));
        assert!(same.attention().is_none());
        assert_eq!(same.to_string(), "as in l.yaml");
        let default = drift(Vec::new(), Some(200));
        assert!(
            default
                .attention()
                .unwrap()
                .contains("default limit 100 where the file says 200")
        );
        let many: Vec<Change> = (0..12).map(|i| change(&format!("s{i:02}"), Kind::Changed)).collect();
        let text = drift(many, None).to_string();
        assert!(text.contains("s09 and 2 more"), "{text}");
    }
}
