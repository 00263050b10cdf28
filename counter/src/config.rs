//! Where the counters live and the default limit. Binaries build it from the
//! environment the stack sets; tests build it directly.

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
/// Environment variable choosing how the stream consumer writes a batch:
/// `batched` (default) or `per-record` (kept for comparison).
pub const ENV_PROCESSING_MODE: &str = "PROCESSING_MODE";

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
        let eventual_shards = match lookup(ENV_EC_SHARDS) {
            None => 1,
            Some(raw) => raw
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "environment variable {ENV_EC_SHARDS} must be an integer from 1 to 100, got {raw:?}"
                    ))
                })?,
        };
        Ok(Self {
            eventual_shards,
            resources_table: required(ENV_RESOURCES_TABLE)?,
            counters_table: required(ENV_COUNTERS_TABLE)?,
            default_limit,
        })
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
        assert_eq!(cfg.resources_table, "res");
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
