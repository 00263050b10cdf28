//! Where the counters live, the default limit and the admission mode.
//! Binaries build it from the environment the stack sets; tests build it
//! directly.

use crate::error::Error;
use crate::stream::Mode;

/// Environment variable naming the resources table.
pub const ENV_RESOURCES_TABLE: &str = "RESOURCES_TABLE";
/// Environment variable naming the counters table.
pub const ENV_COUNTERS_TABLE: &str = "COUNTERS_TABLE";
/// Environment variable with the default per-scope limit.
pub const ENV_DEFAULT_LIMIT: &str = "DEFAULT_LIMIT";
/// Environment variable with the number of eventual-counter shards.
pub const ENV_EC_SHARDS: &str = "EC_SHARDS";
/// Environment variable with the number of best-effort-counter shards.
pub const ENV_BE_SHARDS: &str = "BE_SHARDS";
/// Environment variable with the number of partition keys each scope is
/// spread over ([`crate::scope_keys`]).
pub const ENV_SCOPE_KEYS: &str = "SCOPE_KEY_SHARDS";
/// Resources keys per counters key ([`crate::scope_keys`]); 1 when unset.
pub const ENV_RESOURCE_KEY_SPREAD: &str = "RESOURCE_KEY_SPREAD";
/// Environment variable choosing how the stream consumer writes a batch:
/// `batched` (default) or `per-record` (kept for comparison).
pub const ENV_PROCESSING_MODE: &str = "PROCESSING_MODE";
/// Environment variable choosing how the request path admits a create:
/// `best-effort` (default) or `strict` (see [`Admission`]).
pub const ENV_ADMISSION_MODE: &str = "ADMISSION_MODE";
/// Environment variable of the DLQ reprocessor: the ARN of the stream the
/// stack's mapping reads. An on-failure record of another stream can never
/// be replayed, so it is a permanent failure.
pub const ENV_STREAM_ARN: &str = "STREAM_ARN";
/// Environment variable of the DLQ reprocessor: the URL of DLQ2, where it
/// sends a permanent failure at once.
pub const ENV_DLQ2_URL: &str = "DLQ2_URL";
/// Which scopes an API caller may act on (`none` or `principal-tag`; the
/// api's `scope_auth`).
pub const ENV_SCOPE_AUTHORIZATION: &str = "SCOPE_AUTHORIZATION";
/// Environment variable of the drift check: items one run may read
/// ([`crate::audit::drift::DriftCheck::budget`]).
pub const ENV_DRIFT_CHECK_BUDGET: &str = "DRIFT_CHECK_BUDGET";
/// Environment variable of the drift check: the schedule expression its
/// rule runs it on (the stack's `DriftCheckSchedule`; empty: off). The
/// function only reports it; the local runner plays it.
pub const ENV_DRIFT_CHECK_SCHEDULE: &str = "DRIFT_CHECK_SCHEDULE";
/// Environment variable of the drift check: the limits file it compares
/// the overrides with, `s3://bucket/key` (the stack's `LimitsFileUri`;
/// empty: no comparison).
pub const ENV_LIMITS_FILE_URI: &str = "LIMITS_FILE_URI";

/// How the request path admits a create (DESIGN §5).
///
/// * [`Admission::BestEffort`]: admit when `max(BE, EC) < limit` from one
///   read, put the item, then increment BE once. Concurrent creators can
///   overshoot the limit; BE never counts above the live items
///   (`BE <= live` at every instant).
/// * [`Admission::Strict`]: reserve the slot first with a conditional BE
///   increment (`count < limit`), then put the item, and give the slot back
///   when the put definitively failed. Concurrent creators can never
///   overshoot; BE is a count of reservations, so it never counts *below*
///   the live items (`BE >= live` at every instant) and failures leave it
///   over-reserved, which `audit --repair` lowers once no reservation can
///   be in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Admission {
    #[default]
    BestEffort,
    Strict,
}

impl Admission {
    /// Every mode, in the spelling of [`ENV_ADMISSION_MODE`] and of the
    /// stack's `AdmissionMode` parameter.
    pub const NAMES: [&'static str; 2] = ["best-effort", "strict"];

    pub fn as_str(self) -> &'static str {
        match self {
            Admission::BestEffort => "best-effort",
            Admission::Strict => "strict",
        }
    }

    pub fn is_strict(self) -> bool {
        self == Admission::Strict
    }
}

impl std::fmt::Display for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Admission {
    type Err = Error;

    /// `best-effort` or `strict` (surrounding whitespace ignored).
    fn from_str(raw: &str) -> Result<Self, Error> {
        match raw.trim() {
            "best-effort" => Ok(Admission::BestEffort),
            "strict" => Ok(Admission::Strict),
            _ => Err(Error::InvalidInput(format!(
                "the admission mode must be best-effort or strict, got {raw:?}"
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterConfig {
    pub resources_table: String,
    pub counters_table: String,
    /// Limit for scopes without a `limit` override item; only the request
    /// path needs it.
    pub default_limit: Option<u64>,
    /// Items the eventual counter is spread over (`eventual#0..n-1`); 1
    /// keeps the single `eventual` item. Readers sum whatever exists.
    pub eventual_shards: u32,
    /// Items the best-effort counter is spread over (`best_effort#0..n-1`);
    /// 1 keeps the single `best_effort` item. Readers sum whatever exists
    /// ([`crate::best_effort`]).
    pub best_effort_shards: u32,
    /// How the request path admits a create; the audit reads BE against the
    /// live count by the same mode.
    pub admission: Admission,
    /// The partition keys each scope is spread over (1: the scope itself).
    pub scope_keys: crate::scope_keys::ScopeKeys,
}

/// A count from 1 to `max` as a stack passes it: digits, or a number with
/// a zero fraction (a CloudFormation `Number` parameter accepts `8.0`, and
/// the function must not refuse to start over it).
pub fn parse_count(raw: &str, max: u32) -> Option<u32> {
    let raw = raw.trim();
    let n = raw.parse::<u32>().ok().or_else(|| {
        let (whole, fraction) = raw.split_once('.')?;
        (!whole.is_empty() && fraction.bytes().all(|b| b == b'0'))
            .then(|| whole.parse::<u32>().ok())
            .flatten()
    })?;
    (1..=max).contains(&n).then_some(n)
}

impl CounterConfig {
    /// Reads the configuration from `lookup` (normally `std::env::var`), so a
    /// missing or bad value is reported by name before any I/O.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let required = |name: &str| {
            lookup(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| Error::InvalidInput(format!("environment variable {name} is not set")))
        };
        let default_limit = lookup(ENV_DEFAULT_LIMIT)
            .map(|raw| {
                raw.trim().parse::<u64>().map_err(|_| {
                    Error::InvalidInput(format!(
                        "environment variable {ENV_DEFAULT_LIMIT} must be a non-negative integer, got {raw:?}"
                    ))
                })
            })
            .transpose()?;
        let shards = |name: &str| match lookup(name) {
            None => Ok(1),
            Some(raw) => parse_count(&raw, crate::best_effort::MAX_SHARDS).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "environment variable {name} must be an integer from 1 to {}, got {raw:?}",
                    crate::best_effort::MAX_SHARDS
                ))
            }),
        };
        let eventual_shards = shards(ENV_EC_SHARDS)?;
        let best_effort_shards = shards(ENV_BE_SHARDS)?;
        let count = |name: &str, max: u32| match lookup(name) {
            None => Ok(1),
            Some(raw) if raw.trim().is_empty() => Ok(1),
            Some(raw) => parse_count(&raw, max).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "environment variable {name} must be an integer from 1 to {max}, got {raw:?}"
                ))
            }),
        };
        let scope_keys = crate::scope_keys::ScopeKeys::new(count(ENV_SCOPE_KEYS, crate::scope_keys::MAX_KEYS)?)?
            .with_spread(count(ENV_RESOURCE_KEY_SPREAD, crate::scope_keys::MAX_SPREAD)?)?;
        let admission = match lookup(ENV_ADMISSION_MODE) {
            None => Admission::default(),
            Some(raw) if raw.trim().is_empty() => Admission::default(),
            Some(raw) => raw.parse::<Admission>().map_err(|_| {
                Error::InvalidInput(format!(
                    "environment variable {ENV_ADMISSION_MODE} must be best-effort or strict, got {raw:?}"
                ))
            })?,
        };
        Ok(Self {
            eventual_shards,
            best_effort_shards,
            admission,
            scope_keys,
            resources_table: required(ENV_RESOURCES_TABLE)?,
            counters_table: required(ENV_COUNTERS_TABLE)?,
            default_limit,
        })
    }

    /// The stream consumer of a deployed stack over `store`: its eventual
    /// shards and scope keys.
    pub fn processor<S: crate::store::StreamStore>(
        &self,
        store: impl crate::store::IntoShared<S>,
    ) -> crate::stream::Processor<S> {
        crate::stream::Processor::new(store)
            .with_eventual_shards(self.eventual_shards)
            .with_scope_keys(self.scope_keys)
    }

    /// The default limit, or an error naming the variable that sets it.
    pub fn require_default_limit(&self) -> Result<u64, Error> {
        self.default_limit
            .ok_or_else(|| Error::InvalidInput(format!("environment variable {ENV_DEFAULT_LIMIT} is not set")))
    }

    /// The stream consumer's [`Mode`] from `lookup` (normally
    /// `std::env::var`); unset means batched. Kept out of the struct so the
    /// tables' configuration stays the same for every consumer.
    pub fn processing_mode_from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Mode, Error> {
        match lookup(ENV_PROCESSING_MODE).as_deref().map(str::trim) {
            None | Some("") => Ok(Mode::default()),
            Some("batched") => Ok(Mode::Batched),
            Some("per-record") => Ok(Mode::PerRecord),
            Some(other) => Err(Error::InvalidInput(format!(
                "environment variable {ENV_PROCESSING_MODE} must be batched or per-record, got {other:?}"
            ))),
        }
    }

    /// [`Self::from_lookup`] over the process environment.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn reads_all_three_settings() {
        let cfg = CounterConfig::from_lookup(env(&[
            ("RESOURCES_TABLE", "res"),
            ("COUNTERS_TABLE", "cnt"),
            ("DEFAULT_LIMIT", "25"),
        ]))
        .unwrap();
        assert_eq!(cfg.require_default_limit().unwrap(), 25);
        assert_eq!(cfg.eventual_shards, 1);
        assert_eq!(cfg.best_effort_shards, 1, "one best-effort item unless set");
        assert_eq!(cfg.resources_table, "res");
        assert_eq!(cfg.admission, Admission::BestEffort, "best-effort unless set");
    }

    #[test]
    fn admission_mode_reads_both_spellings_and_names_a_bad_value() {
        let base = [("RESOURCES_TABLE", "res"), ("COUNTERS_TABLE", "cnt")];
        for (raw, expected) in [
            ("strict", Admission::Strict),
            (" strict\n", Admission::Strict),
            ("best-effort", Admission::BestEffort),
            ("", Admission::BestEffort),
        ] {
            let mut pairs = base.to_vec();
            pairs.push(("ADMISSION_MODE", raw));
            assert_eq!(
                CounterConfig::from_lookup(env(&pairs)).unwrap().admission,
                expected,
                "{raw:?}"
            );
        }
        for bad in ["Strict", "best_effort", "exact"] {
            let mut pairs = base.to_vec();
            pairs.push(("ADMISSION_MODE", bad));
            let err = CounterConfig::from_lookup(env(&pairs)).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("ADMISSION_MODE") && text.contains(bad), "{text}");
        }
        for name in Admission::NAMES {
            assert_eq!(name.parse::<Admission>().unwrap().as_str(), name);
        }
    }

    /// Review 1 (11): unset or empty is one key; a bad count is named.
    #[test]
    fn scope_keys_default_to_one_and_a_bad_count_is_named() {
        let base = [("RESOURCES_TABLE", "res"), ("COUNTERS_TABLE", "cnt")];
        for value in [None, Some(""), Some(" ")] {
            let mut pairs = base.to_vec();
            pairs.extend(value.map(|v| (ENV_SCOPE_KEYS, v)));
            assert_eq!(CounterConfig::from_lookup(env(&pairs)).unwrap().scope_keys.count(), 1);
        }
        let mut pairs = base.to_vec();
        pairs.push((ENV_SCOPE_KEYS, "16"));
        assert_eq!(CounterConfig::from_lookup(env(&pairs)).unwrap().scope_keys.count(), 16);
        for bad in ["0", "101", "x"] {
            let mut pairs = base.to_vec();
            pairs.push((ENV_SCOPE_KEYS, bad));
            let err = CounterConfig::from_lookup(env(&pairs)).unwrap_err();
            assert!(err.to_string().contains(ENV_SCOPE_KEYS), "{err}");
        }
        pairs.push((ENV_RESOURCE_KEY_SPREAD, "8"));
        let keys = CounterConfig::from_lookup(env(&pairs)).unwrap().scope_keys;
        assert_eq!((keys.count(), keys.spread()), (16, 8));
        pairs.push((ENV_RESOURCE_KEY_SPREAD, "8.0"));
        assert_eq!(
            CounterConfig::from_lookup(env(&pairs)).unwrap().scope_keys.spread(),
            8,
            "a Number parameter's 8.0"
        );
        for bad in ["0", "1001", "x", "8.5", ".0", "-1"] {
            let mut pairs = base.to_vec();
            pairs.push((ENV_RESOURCE_KEY_SPREAD, bad));
            let err = CounterConfig::from_lookup(env(&pairs)).unwrap_err();
            assert!(err.to_string().contains(ENV_RESOURCE_KEY_SPREAD), "{err}");
        }
    }

    #[test]
    fn default_limit_is_optional_until_required() {
        let cfg = CounterConfig::from_lookup(env(&[("RESOURCES_TABLE", "res"), ("COUNTERS_TABLE", "cnt")])).unwrap();
        let err = cfg.require_default_limit().unwrap_err();
        assert!(err.to_string().contains("DEFAULT_LIMIT"), "{err}");
    }

    #[test]
    fn names_the_missing_or_bad_variable() {
        let err = CounterConfig::from_lookup(env(&[("RESOURCES_TABLE", "res"), ("DEFAULT_LIMIT", "5")])).unwrap_err();
        assert!(err.to_string().contains("COUNTERS_TABLE"), "{err}");
        let err = CounterConfig::from_lookup(env(&[
            ("RESOURCES_TABLE", "res"),
            ("COUNTERS_TABLE", "cnt"),
            ("DEFAULT_LIMIT", "-1"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("DEFAULT_LIMIT"), "{err}");
        let err = CounterConfig::from_lookup(env(&[
            ("RESOURCES_TABLE", "res"),
            ("COUNTERS_TABLE", "cnt"),
            ("EC_SHARDS", "0"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("EC_SHARDS"), "{err}");
        for bad in ["0", "101", "four", "-2"] {
            let err = CounterConfig::from_lookup(env(&[
                ("RESOURCES_TABLE", "res"),
                ("COUNTERS_TABLE", "cnt"),
                ("BE_SHARDS", bad),
            ]))
            .unwrap_err();
            assert!(
                err.to_string().contains("BE_SHARDS") && err.to_string().contains(bad),
                "{err}"
            );
        }
        let cfg = CounterConfig::from_lookup(env(&[
            ("RESOURCES_TABLE", "res"),
            ("COUNTERS_TABLE", "cnt"),
            ("BE_SHARDS", " 16 "),
        ]))
        .unwrap();
        assert_eq!(cfg.best_effort_shards, 16);
    }

    #[test]
    fn processing_mode_defaults_to_batched_and_names_a_bad_value() {
        assert_eq!(
            CounterConfig::processing_mode_from_lookup(env(&[])).unwrap(),
            Mode::Batched
        );
        let per_record = env(&[("PROCESSING_MODE", "per-record")]);
        assert_eq!(
            CounterConfig::processing_mode_from_lookup(per_record).unwrap(),
            Mode::PerRecord
        );
        let err = CounterConfig::processing_mode_from_lookup(env(&[("PROCESSING_MODE", "fast")])).unwrap_err();
        assert!(err.to_string().contains("PROCESSING_MODE"), "{err}");
    }
}
