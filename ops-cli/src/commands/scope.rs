//! `counterctl usage SCOPE` and `counterctl limit get|set|clear SCOPE`: one
//! scope's counters and its limit override, through the same library the
//! API uses.

use std::fmt;

use hybrid_counter::{Counter, Scope, Usage};
use hybrid_counter_aws::DynamoStore;
use serde::Serialize;

use super::Context;
use super::deployed::counter_config;
use crate::config::LimitAction;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Serialize)]
pub struct UsageReport {
    pub scope: String,
    #[serde(flatten)]
    pub usage: Usage,
    /// Whether the limit comes from the scope's override (else the default).
    pub overridden: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LimitReport {
    pub scope: String,
    pub limit: u64,
    pub overridden: bool,
    pub default_limit: u64,
    pub changed: bool,
}

fn store_error(action: &'static str) -> impl Fn(hybrid_counter::error::StoreError) -> Error {
    move |e| Error::Aws {
        action,
        message: e.to_string(),
    }
}

fn counter_error(e: hybrid_counter::Error) -> Error {
    Error::Aws {
        action: "reading the counters",
        message: e.to_string(),
    }
}

async fn open(ctx: &Context<'_>) -> Result<(DynamoStore, u64)> {
    let config = counter_config(ctx).await?;
    let default_limit = config.default_limit.unwrap_or_default();
    Ok((DynamoStore::new(ctx.clients.dynamodb.clone(), &config), default_limit))
}

pub async fn usage(ctx: &Context<'_>, scope: &Scope) -> Result<UsageReport> {
    let (store, default_limit) = open(ctx).await?;
    let snapshot = hybrid_counter::Store::read_counters(&store, scope)
        .await
        .map_err(store_error("reading the counters"))?;
    let usage = Counter::new(store, default_limit)
        .usage(scope)
        .await
        .map_err(counter_error)?;
    Ok(UsageReport {
        scope: scope.to_string(),
        usage,
        overridden: snapshot.limit_override.is_some(),
    })
}

pub async fn limit(ctx: &Context<'_>, scope: &Scope, action: &LimitAction) -> Result<LimitReport> {
    let (store, default_limit) = open(ctx).await?;
    if let LimitAction::Set(limit) = action {
        store
            .set_limit(scope, *limit, hybrid_counter::now_millis())
            .await
            .map_err(store_error("writing the limit"))?;
    }
    let snapshot = hybrid_counter::Store::read_counters(&store, scope)
        .await
        .map_err(store_error("reading the limit"))?;
    Ok(LimitReport {
        scope: scope.to_string(),
        limit: snapshot.limit_override.unwrap_or(default_limit),
        overridden: snapshot.limit_override.is_some(),
        default_limit,
        changed: matches!(action, LimitAction::Set(_)),
    })
}

impl fmt::Display for UsageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = &self.usage;
        writeln!(
            f,
            "scope {}: effective {} of {} ({}); best-effort {}, eventual {}",
            self.scope,
            u.effective,
            u.limit,
            if self.overridden { "override" } else { "default limit" },
            u.best_effort,
            u.eventual
        )
    }
}

impl fmt::Display for LimitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = if self.overridden {
            "scope override".to_owned()
        } else {
            format!("the stack default, {}", self.default_limit)
        };
        let verb = if self.changed { "is now" } else { "is" };
        writeln!(f, "limit of scope {} {verb} {} ({source})", self.scope, self.limit)
    }
}
