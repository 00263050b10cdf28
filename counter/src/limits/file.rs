//! The limits file (YAML, `docs/limits.schema.json`): the stack's default
//! limit and the per-scope overrides a team agreed on, exact or by scope
//! prefix, each with an optional owner and reason. Parsing refuses what the
//! API would refuse, and says where: every error carries the line and
//! column, because the checks run inside deserialization, where the YAML
//! reader still knows the position.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

pub use super::MAX_LIMIT;

/// Why a limits file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}:{column}: {message}")]
pub struct FileError {
    pub path: String,
    /// 1-based; 0 when the reader gave no position (an unreadable file).
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// A limit: at most [`MAX_LIMIT`]; negative numbers fail as not a `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(into = "u64")]
pub struct Limit(u64);

impl Limit {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl TryFrom<u64> for Limit {
    type Error = String;
    fn try_from(value: u64) -> Result<Self, String> {
        if value > MAX_LIMIT {
            Err(format!("limit {value} is above the maximum {MAX_LIMIT}"))
        } else {
            Ok(Self(value))
        }
    }
}

impl From<Limit> for u64 {
    fn from(limit: Limit) -> u64 {
        limit.0
    }
}

/// Which scopes an entry covers: one scope (`scope: acme/prod`, taken
/// as written, `*` included), or every existing scope starting with a
/// prefix (`prefix: acme/`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pattern {
    Exact(crate::Scope),
    Prefix(String),
}

impl Pattern {
    /// How specific a match is: an exact entry beats every prefix, a longer
    /// prefix a shorter one; `None` when `scope` is not covered.
    pub fn rank(&self, scope: &str) -> Option<usize> {
        match self {
            Pattern::Exact(s) => (s.as_str() == scope).then_some(usize::MAX),
            Pattern::Prefix(p) => scope.starts_with(p.as_str()).then_some(p.len()),
        }
    }

    fn exact(value: &str) -> Result<Self, String> {
        crate::Scope::new(value.to_owned())
            .map(Pattern::Exact)
            .map_err(|e| format!("invalid scope {value:?}: {e}"))
    }

    fn prefix(value: &str) -> Result<Self, String> {
        if value.is_empty() {
            return Err("a prefix must not be empty: set default_limit for every scope".into());
        }
        // A prefix is checked as the shortest scope it could match.
        crate::Scope::new(format!("{value}x"))
            .map(|_| Pattern::Prefix(value.to_owned()))
            .map_err(|e| format!("invalid scope prefix {value:?}: {e}"))
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Exact(scope) => f.write_str(scope.as_str()),
            Pattern::Prefix(prefix) => write!(f, "prefix {prefix}"),
        }
    }
}

/// Both checks run in the visitor of the value itself, not after it (as
/// `#[serde(try_from)]` would): there the reader still points at the value,
/// so the error carries its line and column.
impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Checked;
        impl Visitor<'_> for Checked {
            type Value = Limit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a limit, a whole number from 0 to {MAX_LIMIT}")
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Limit, E> {
                Limit::try_from(value).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Limit, E> {
                match u64::try_from(value) {
                    Ok(value) => self.visit_u64(value),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(value), &self)),
                }
            }
            /// `1e3` is a whole number to the schema too (JSON has one
            /// number type): accepted; `1.5` is refused by both.
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<Limit, E> {
                if value.fract() == 0.0 && (0.0..=MAX_LIMIT as f64).contains(&value) {
                    self.visit_u64(value as u64)
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(value), &self))
                }
            }
        }
        deserializer.deserialize_any(Checked)
    }
}

/// A `scope:` or `prefix:` value: a string only (`scope: 123` is refused,
/// as the schema does), checked in its visitor for the position.
struct PatternField<const PREFIX: bool>(Pattern);

impl<'de, const PREFIX: bool> Deserialize<'de> for PatternField<PREFIX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Checked<const PREFIX: bool>;
        impl<const PREFIX: bool> Visitor<'_> for Checked<PREFIX> {
            type Value = PatternField<PREFIX>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(if PREFIX {
                    "a scope prefix (a string)"
                } else {
                    "a scope (a string)"
                })
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                let pattern = if PREFIX {
                    Pattern::prefix(value)
                } else {
                    Pattern::exact(value)
                };
                pattern.map(PatternField).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Checked::<PREFIX>)
    }
}

/// One entry as written: exactly one of `scope` and `prefix`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(default)]
    scope: Option<PatternField<false>>,
    #[serde(default)]
    prefix: Option<PatternField<true>>,
    limit: Limit,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// One agreed override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// Written as `scope:` (exact) or `prefix:`.
    pub scope: Pattern,
    pub limit: Limit,
    /// Who asked for it (a team, a ticket's author).
    pub owner: Option<String>,
    /// Why (a contract, an incident).
    pub reason: Option<String>,
}

impl Serialize for Override {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            scope: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            prefix: Option<&'a str>,
            limit: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            owner: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<&'a str>,
        }
        let (scope, prefix) = match &self.scope {
            Pattern::Exact(s) => (Some(s.as_str()), None),
            Pattern::Prefix(p) => (None, Some(p.as_str())),
        };
        Out {
            scope,
            prefix,
            limit: self.limit.get(),
            owner: self.owner.as_deref(),
            reason: self.reason.as_deref(),
        }
        .serialize(serializer)
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// The stack's `DefaultLimit` as agreed; compared, never applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_limit: Option<Limit>,
    /// Required: a file without the key (empty, or only comments: a
    /// failed `export > limits.yaml`) would remove every override.
    /// `overrides: []` says so explicitly.
    #[serde(deserialize_with = "unique_overrides")]
    pub overrides: Vec<Override>,
}

impl LimitsFile {
    /// Parses and validates `text`; `path` only names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, FileError> {
        let blank = |l: &str| l.trim().is_empty() || l.trim_start().starts_with('#');
        if text.lines().all(blank) {
            return Err(FileError {
                path: path.to_owned(),
                line: 1,
                column: 1,
                message: "the file is empty (a failed export?): to remove every override, write \
                          `overrides: []`"
                    .into(),
            });
        }
        serde_yaml_ng::from_str(text).map_err(|err| {
            // The reader gives no position for a second document: its `---`.
            let (line, column) = err
                .location()
                .map(|l| (l.line(), l.column()))
                .or_else(|| second_document(text).map(|line| (line, 1)))
                .unwrap_or((0, 0));
            let full = err.to_string();
            let message = full
                .strip_suffix(&format!(" at line {line} column {column}"))
                .unwrap_or(&full)
                .to_owned();
            FileError {
                path: path.to_owned(),
                line,
                column,
                message,
            }
        })
    }

    /// The file as YAML, entries in the order given.
    pub fn to_yaml(&self) -> Result<String, serde_yaml_ng::Error> {
        serde_yaml_ng::to_string(self)
    }

    /// The prefixes of the prefix entries.
    pub fn prefixes(&self) -> Vec<String> {
        self.overrides
            .iter()
            .filter_map(|o| match &o.scope {
                Pattern::Prefix(p) => Some(p.clone()),
                Pattern::Exact(_) => None,
            })
            .collect()
    }

    /// The entry that sets `scope`'s limit: the exact one, else the longest
    /// prefix; `None` when no entry covers it.
    pub fn entry_for(&self, scope: &str) -> Option<&Override> {
        self.overrides
            .iter()
            .filter_map(|o| o.scope.rank(scope).map(|rank| (rank, o)))
            .max_by_key(|(rank, _)| *rank)
            .map(|(_, o)| o)
    }
}

/// The line (1-based) of the `---` that starts a second YAML document
/// after some content, if any.
fn second_document(text: &str) -> Option<usize> {
    let mut content = false;
    for (i, line) in text.lines().enumerate() {
        if content && line.starts_with("---") {
            return Some(i + 1);
        }
        let line = line.trim();
        content |= !(line.is_empty() || line.starts_with('#') || line.starts_with("---"));
    }
    None
}

/// The overrides, refusing a second entry for the same scope or prefix.
/// The check runs while each entry's mapping is read, so the error points
/// at the duplicate entry.
fn unique_overrides<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Override>, D::Error> {
    struct Entries;
    impl<'de> Visitor<'de> for Entries {
        type Value = Vec<Override>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of overrides")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut seen = BTreeMap::new();
            let mut entries = Vec::new();
            while let Some(entry) = seq.next_element_seed(Unique {
                seen: &mut seen,
                index: entries.len(),
            })? {
                entries.push(entry);
            }
            Ok(entries)
        }
    }
    deserializer.deserialize_seq(Entries)
}

/// One entry, checked against those before it.
struct Unique<'a> {
    seen: &'a mut BTreeMap<Pattern, usize>,
    index: usize,
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Override;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Override, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Override;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an override (scope, limit, and optionally owner and reason)")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Override, A::Error> {
        let raw = Entry::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let scope = match (raw.scope, raw.prefix) {
            (Some(PatternField(p)), None) | (None, Some(PatternField(p))) => p,
            (None, None) => return Err(de::Error::custom("an override needs `scope` or `prefix`")),
            (Some(_), Some(_)) => {
                return Err(de::Error::custom(
                    "an override has `scope` (one scope) or `prefix` (every scope under it), not both",
                ));
            }
        };
        let entry = Override {
            scope,
            limit: raw.limit,
            owner: raw.owner,
            reason: raw.reason,
        };
        if let Some(first) = self.seen.insert(entry.scope.clone(), self.index) {
            return Err(de::Error::custom(format!(
                "duplicate override for {}: entry {} already sets it",
                entry.scope,
                first + 1
            )));
        }
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> FileError {
        LimitsFile::parse("limits.yaml", text).unwrap_err()
    }

    fn at(text: &str) -> (usize, usize, String) {
        let e = error(text);
        (e.line, e.column, e.message)
    }

    #[test]
    fn a_file_with_a_default_exact_and_prefix_entries_parses() {
        let file = LimitsFile::parse(
            "limits.yaml",
            "default_limit: 100\noverrides:\n  - scope: acme/prod\n    limit: 5000\n    owner: team-a\n    reason: contract 42\n  - prefix: acme/\n    limit: 200\n",
        )
        .unwrap();
        assert_eq!(file.default_limit, Some(Limit(100)));
        assert_eq!(file.overrides.len(), 2);
        assert_eq!(file.overrides[0].owner.as_deref(), Some("team-a"));
        assert_eq!(file.overrides[1].scope, Pattern::Prefix("acme/".into()));
        assert_eq!(file.prefixes(), vec!["acme/".to_owned()]);
        assert_eq!(LimitsFile::parse("x", &file.to_yaml().unwrap()).unwrap(), file);
        assert_eq!(LimitsFile::parse("x", "overrides: []").unwrap(), LimitsFile::default());
    }

    #[test]
    fn an_exact_entry_beats_every_prefix_and_the_longest_prefix_wins() {
        let file = LimitsFile::parse(
            "x",
            "overrides:\n  - {prefix: a, limit: 1}\n  - {prefix: ab, limit: 2}\n  - {scope: abc, limit: 3}\n",
        )
        .unwrap();
        let limit = |scope: &str| file.entry_for(scope).map(|o| o.limit.get());
        assert_eq!(limit("abc"), Some(3));
        assert_eq!(limit("abd"), Some(2));
        assert_eq!(limit("ax"), Some(1));
        assert_eq!(limit("b"), None);
    }

    #[test]
    fn a_bad_scope_is_refused_at_its_line_and_column_with_the_apis_reason() {
        let (line, column, message) =
            at("overrides:\n  - scope: ok\n    limit: 1\n  - scope: \" padded\"\n    limit: 2\n");
        assert_eq!((line, column), (4, 12), "{message}");
        assert!(message.contains("must not start or end with whitespace"), "{message}");
        // The kit's own partition is no scope.
        let kit = format!(
            "overrides:\n  - scope: \"{}\"\n    limit: 2\n",
            crate::keys::KIT_STATE_SCOPE
        );
        assert!(error(&kit).message.contains("invalid scope"));
        assert!(
            at("overrides:\n  - prefix: \"\"\n    limit: 2\n")
                .2
                .contains("must not be empty")
        );
        let long = format!("overrides:\n  - scope: {}\n    limit: 2\n", "x".repeat(300));
        assert!(error(&long).message.contains("bytes long"));
    }

    #[test]
    fn negative_and_absurd_limits_are_refused_where_they_are_written() {
        let (line, column, message) = at("overrides:\n  - scope: a\n    limit: -5\n");
        assert_eq!((line, column), (3, 12), "{message}");
        let (line, _, message) = at("default_limit: 1000000001\n");
        assert_eq!(line, 1);
        assert!(message.contains("above the maximum 1000000000"), "{message}");
        assert!(at("overrides:\n  - scope: a\n    limit: 1.5\n").2.contains("limit"));
        assert_eq!(
            LimitsFile::parse("x", "overrides: [{scope: a, limit: 1e3}]")
                .unwrap()
                .overrides[0]
                .limit,
            Limit(1000)
        );
    }

    #[test]
    fn a_duplicate_entry_is_refused_at_the_second_one() {
        let (line, column, message) =
            at("overrides:\n  - scope: a\n    limit: 1\n  - prefix: b\n    limit: 1\n  - scope: a\n    limit: 2\n");
        assert_eq!((line, column), (6, 5), "{message}");
        assert!(
            message.contains("duplicate override for a: entry 1 already sets it"),
            "{message}"
        );
        assert!(
            at("overrides:\n  - {prefix: b, limit: 1}\n  - {prefix: b, limit: 2}\n")
                .2
                .contains("duplicate")
        );
    }

    /// docs/limits.schema.json and the parser agree on every document here:
    /// the schema is hand-written (a few lines, with the descriptions the
    /// docs need), so this is what keeps the two from drifting apart.
    #[test]
    fn the_published_schema_and_the_parser_accept_and_refuse_the_same_files() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/");
        let schema: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{root}limits.schema.json")).unwrap()).unwrap();
        let validator = jsonschema::draft202012::new(&schema).expect("the schema compiles");
        let example = std::fs::read_to_string(format!("{root}limits.example.yaml")).unwrap();
        let cases: Vec<(&str, bool)> = vec![
            (example.as_str(), true),
            ("overrides: []\n", true),
            ("default_limit: 0\noverrides: []\n", true),
            ("overrides:\n  - {scope: a, limit: 1, owner: o, reason: r}\n", true),
            // A `*` in a scope is part of the name: exact entries.
            (
                "overrides:\n  - {scope: a*b, limit: 1}\n  - {scope: '*b', limit: 1}\n  - {scope: '*', limit: 1}\n  - {scope: 'c*', limit: 1}\n",
                true,
            ),
            (
                "overrides:\n  - {prefix: acme/, limit: 1}\n  - {prefix: 'acme ', limit: 1}\n",
                true,
            ),
            ("overrides:\n  - {scope: 'acme *', limit: 1}\n", true),
            ("overrides:\n  - {scope: a, limit: 1e3}\n", true),
            ("{}", false),
            ("default_limit: 5\n", false),
            ("overrides:\n  - {prefix: '', limit: 1}\n", false),
            ("overrides:\n  - {prefix: ' a', limit: 1}\n", false),
            ("overrides:\n  - {scope: a, prefix: a, limit: 1}\n", false),
            ("overrides:\n  - {scope: 123, limit: 1}\n", false),
            ("overrides:\n  - {scope: a, limit: 1.5}\n", false),
            ("overrides:\n  - {scope: ' a', limit: 1}\n", false),
            ("overrides:\n  - {scope: 'a ', limit: 1}\n", false),
            ("overrides:\n  - {scope: \"a\\u0007b\", limit: 1}\n", false),
            ("overrides:\n  - {scope: '', limit: 1}\n", false),
            ("overrides:\n  - {scope: a, limit: -1}\n", false),
            ("overrides:\n  - {scope: a, limit: 1000000001}\n", false),
            ("overrides:\n  - {scope: a}\n", false),
            ("overrides:\n  - {limit: 1}\n", false),
            ("overrides:\n  - {scope: a, limit: 1, team: x}\n", false),
            ("default_limit: x\noverrides: []\n", false),
            ("limits: []\n", false),
        ];
        for (text, valid) in cases {
            let instance: serde_json::Value = serde_yaml_ng::from_str(text).unwrap();
            let errors: Vec<String> = validator.iter_errors(&instance).map(|e| e.to_string()).collect();
            assert_eq!(errors.is_empty(), valid, "schema on {text:?}: {errors:?}");
            let parsed = LimitsFile::parse("case", text);
            assert_eq!(parsed.is_ok(), valid, "parser on {text:?}: {parsed:?}");
        }
        // What the schema cannot say, and the description tells: a
        // duplicate, and a scope over 256 bytes in fewer characters.
        for text in [
            "overrides:\n  - {scope: a, limit: 1}\n  - {scope: a, limit: 2}\n".to_owned(),
            format!("overrides:\n  - {{scope: {}, limit: 1}}\n", "é".repeat(200)),
        ] {
            let instance: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
            assert!(validator.is_valid(&instance), "{text}");
            assert!(LimitsFile::parse("case", &text).is_err(), "{text}");
        }
    }

    #[test]
    fn unknown_fields_and_missing_ones_are_refused_with_their_position() {
        let (line, column, message) = at("overrides:\n  - scope: a\n    limt: 1\n");
        assert_eq!((line, column), (3, 5), "{message}");
        assert!(message.contains("unknown field `limt`"), "{message}");
        assert!(at("defaults: 1\n").2.contains("unknown field `defaults`"));
        // Empty, only comments, or no `overrides` key: refused, never
        // "remove every override".
        for text in ["", "\n  \n", "# exported by ...\n# nothing else\n"] {
            assert!(error(text).message.contains("the file is empty"), "{text:?}");
        }
        assert!(at("default_limit: 5\n").2.contains("missing field `overrides`"));
        assert!(at("overrides:\n  - scope: a\n").2.contains("missing field `limit`"));
        assert!(at("overrides: [\n").0 > 0);
        let (line, column, message) = at("---\noverrides: []\n# two\n---\noverrides: []\n");
        assert_eq!((line, column), (4, 1), "{message}");
        assert!(message.contains("more than one document"), "{message}");
    }
}
