//! `counterctl usage SCOPE`, `counterctl limit get|set|clear SCOPE` and
//! `counterctl seq get|next SCOPE`: one scope's counters, its limit
//! override and its gapless sequence, through the same library the API
//! uses.

use std::fmt;

use hybrid_counter::{Counter, Scope, Usage};
use hybrid_counter_aws::DynamoStore;
use serde::Serialize;

use super::Context;
use super::deployed::counter_config;
use crate::config::{LimitAction, SeqAction};
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

use crate::error::store_error;

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

/// `seq get` and `seq next`.
#[derive(Debug, Clone, Serialize)]
pub struct SequenceReport {
    pub scope: String,
    /// `get`: the last number claimed (0: none); `next`: the number claimed.
    pub number: u64,
    /// Whether this run claimed `number`.
    pub claimed: bool,
    /// `next`: the attempts the claim took (1: no retry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

pub async fn sequence(ctx: &Context<'_>, scope: &Scope, action: &SeqAction) -> Result<SequenceReport> {
    let (store, _) = open(ctx).await?;
    let sequence = hybrid_counter::Sequence::new(store);
    let report = |number: u64, attempts: Option<u32>, owner: &Option<String>| SequenceReport {
        scope: scope.to_string(),
        number,
        claimed: attempts.is_some(),
        attempts,
        owner: owner.clone(),
    };
    match action {
        SeqAction::Get => {
            let last = sequence.current(scope).await.map_err(|e| Error::Aws {
                action: "reading the sequence",
                message: e.to_string(),
            })?;
            Ok(report(last, None, &None))
        }
        SeqAction::Next { owner } => {
            match sequence
                .next(scope, owner.as_deref(), hybrid_counter::now_millis())
                .await
            {
                Ok(claimed) => Ok(report(claimed.number, Some(claimed.attempts), owner)),
                Err(err @ hybrid_counter::Error::SequenceContended { .. }) => {
                    Err(Error::SequenceContended(err.to_string()))
                }
                Err(err) => Err(Error::Aws {
                    action: "claiming a sequence number",
                    message: err.to_string(),
                }),
            }
        }
    }
}

impl fmt::Display for SequenceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.claimed {
            write!(f, "claimed number {} of scope {}", self.number, self.scope)?;
            if let Some(owner) = &self.owner {
                write!(f, " for {owner}")?;
            }
            match self.attempts {
                Some(n) if n > 1 => writeln!(f, " ({n} attempts)"),
                _ => writeln!(f),
            }
        } else if self.number == 0 {
            writeln!(f, "scope {} has claimed no sequence number yet", self.scope)
        } else {
            writeln!(f, "last sequence number of scope {}: {}", self.scope, self.number)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(number: u64, attempts: Option<u32>, owner: Option<&str>) -> SequenceReport {
        SequenceReport {
            scope: "tenant-a".into(),
            number,
            claimed: attempts.is_some(),
            attempts,
            owner: owner.map(str::to_owned),
        }
    }

    #[test]
    fn a_sequence_report_says_what_was_read_or_claimed() {
        assert_eq!(
            report(0, None, None).to_string(),
            "scope tenant-a has claimed no sequence number yet\n"
        );
        assert_eq!(
            report(41, None, None).to_string(),
            "last sequence number of scope tenant-a: 41\n"
        );
        assert_eq!(
            report(42, Some(1), None).to_string(),
            "claimed number 42 of scope tenant-a\n"
        );
        assert_eq!(
            report(42, Some(3), Some("invoice-7")).to_string(),
            "claimed number 42 of scope tenant-a for invoice-7 (3 attempts)\n"
        );
        assert_eq!(
            serde_json::to_value(report(42, Some(3), Some("invoice-7"))).unwrap(),
            serde_json::json!({"scope": "tenant-a", "number": 42, "claimed": true, "attempts": 3, "owner": "invoice-7"})
        );
        assert_eq!(
            serde_json::to_value(report(0, None, None)).unwrap(),
            serde_json::json!({"scope": "tenant-a", "number": 0, "claimed": false})
        );
    }
}
