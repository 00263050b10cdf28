//! The deployed stack as every `limits` command sees it: its counters
//! table (through the store `limit set` uses) and its default limit; and
//! the small file and error helpers they share.

use std::path::Path;

use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter_aws::DynamoStore;

use crate::commands::Context;
use crate::commands::deployed::counter_config;
pub(crate) use crate::error::during;
use crate::error::{Error, Result};

/// Scopes whose usage is read, or whose override is written, at once.
pub const CONCURRENCY: usize = 16;

/// What every `limits` command works with: the deployed stack's counters
/// table, default limit and scope keys.
pub struct Limits<'a> {
    pub ctx: &'a Context<'a>,
    pub store: DynamoStore,
    pub default_limit: u64,
    /// The keys each scope is spread over (`ScopeKeyShards`): an override
    /// is a copy on each ([`hybrid_counter::limits::LimitTable::fold`]).
    pub scope_keys: ScopeKeys,
}

/// Writes `text` to `path` (a plan, an exported file).
pub(crate) fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", path.display())))
}

impl<'a> Limits<'a> {
    pub async fn open(ctx: &'a Context<'a>) -> Result<Self> {
        let config = counter_config(ctx).await?;
        Ok(Self {
            ctx,
            default_limit: config.default_limit.unwrap_or_default(),
            scope_keys: config.scope_keys,
            store: DynamoStore::new(ctx.clients.dynamodb.clone(), &config),
        })
    }
}
