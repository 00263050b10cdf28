//! Limits as code: the per-scope limit overrides a team agreed on, kept in
//! a reviewed file, and compared with the counters table. [`file`] is the
//! YAML file and its checks, [`diff`] what the table's overrides would
//! become under it, [`drift`] that difference as an attention item. Both
//! `counterctl limits|status --limits` and the scheduled drift check use
//! them, so a file means the same thing to both. The table's side
//! ([`LimitTable`]) is read by the AWS layer's one Scan (`scan_limits`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

#[cfg(feature = "limits-file")]
pub mod diff;
#[cfg(feature = "limits-file")]
pub mod drift;
#[cfg(feature = "limits-file")]
pub mod file;

/// The largest limit an override may set: the stack's `DefaultLimit`
/// parameter's MaxValue, the most `limit set` accepts and a limits file
/// may say: one maximum, so every override can be exported to a file and
/// read back. Anything above is a typo, not a limit.
pub const MAX_LIMIT: u64 = 1_000_000_000;

/// One scope's override as read: its limit, the `version` and the write
/// token (`rev`) it was read at (`None`: written before tokens were).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LimitItem {
    pub limit: u64,
    #[serde(default)]
    pub version: u64,
    #[serde(default)]
    pub rev: Option<String>,
}

/// What one Scan of the counters table found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitTable {
    /// Every override, by scope.
    pub overrides: BTreeMap<String, LimitItem>,
    /// Every scope with an item under one of the prefixes asked for.
    pub prefixed_scopes: BTreeSet<String>,
}
