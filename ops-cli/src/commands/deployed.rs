//! The deployed stack, for the commands that work with its resources:
//! its outputs, and the kit's data location (tables, default limit, shard
//! count, admission mode) that `audit`, `usage`, `limit`, `load` and
//! `redrive --replay` work against.

use super::Context;
use super::deploy::cfn::{self, StackInfo};
use crate::error::{Error, Result};

/// A deployed stack, for the commands that work with its resources.
pub struct Deployed {
    pub stack: StackInfo,
}

impl Deployed {
    /// One of the stack's outputs, or an error naming the missing one.
    pub fn output(&self, key: &str) -> Result<String> {
        self.stack
            .outputs
            .get(key)
            .cloned()
            .ok_or_else(|| Error::StackIncomplete {
                name: self.stack.name.clone(),
                missing: key.to_owned(),
            })
    }

    /// The kit's data location: its tables (from the outputs), the default
    /// limit, the eventual-counter shard count and the admission mode (from
    /// the parameters; a stack deployed before `AdmissionMode` existed is
    /// best-effort). What `audit`, `usage`, `limit`, `load` and `redrive
    /// --replay` work against.
    pub fn counter_config(&self) -> Result<hybrid_counter::CounterConfig> {
        let number = |key: &str| {
            self.stack
                .parameters
                .get(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Ok(hybrid_counter::CounterConfig {
            resources_table: self.output(stack::outputs::RESOURCES_TABLE)?,
            counters_table: self.output(stack::outputs::COUNTERS_TABLE)?,
            default_limit: number(stack::params::DEFAULT_LIMIT),
            eventual_shards: number(stack::params::EC_SHARD_COUNT)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(1),
            best_effort_shards: number(stack::params::BE_SHARD_COUNT)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(1),
            admission: self.admission()?,
            scope_keys: self.scope_keys()?,
        })
    }

    /// [`Deployed::counter_config`], refused when the stack's parameters
    /// give another layout than the one its items are written under (the
    /// layout record): counterctl reads and writes no items under a layout
    /// the functions would refuse.
    pub async fn checked_counter_config(&self, ctx: &Context<'_>) -> Result<hybrid_counter::CounterConfig> {
        let config = self.counter_config()?;
        match super::deploy::scope_keys::recorded(ctx, &self.stack).await? {
            Some(recorded) if recorded != config.scope_keys => Err(Error::layout_mismatch(
                &self.stack.name,
                recorded,
                config.scope_keys,
                "its parameters",
            )),
            _ => Ok(config),
        }
    }

    /// The deployed `ScopeKeyShards` parameter (the API function's
    /// `SCOPE_KEY_SHARDS`); one key when the stack does not have it.
    pub fn scope_keys(&self) -> Result<hybrid_counter::scope_keys::ScopeKeys> {
        super::deploy::scope_keys::scope_keys_param(&self.stack.parameters)
    }

    /// The deployed `AdmissionMode` parameter (the API function's
    /// `ADMISSION_MODE`); best-effort when the stack does not have it.
    pub fn admission(&self) -> Result<hybrid_counter::Admission> {
        match self.stack.parameters.get(stack::params::ADMISSION_MODE) {
            None => Ok(hybrid_counter::Admission::default()),
            Some(value) if value.trim().is_empty() => Ok(hybrid_counter::Admission::default()),
            Some(value) => value.parse().map_err(|_| Error::ParamValue {
                key: stack::params::ADMISSION_MODE.to_owned(),
                value: value.clone(),
                reason: format!(
                    "the deployed stack has an admission mode counterctl does not know; expected one of {}",
                    hybrid_counter::Admission::NAMES.join(", ")
                ),
            }),
        }
    }
}

/// The stack named by the command line, or [`Error::StackNotFound`].
pub async fn deployed(ctx: &Context<'_>) -> Result<Deployed> {
    let stack = cfn::describe(&ctx.clients.cloudformation, &ctx.config.stack_name)
        .await?
        .ok_or_else(|| ctx.not_found())?;
    Ok(Deployed { stack })
}

/// [`Deployed::counter_config`] of the stack named by the command line.
pub async fn counter_config(ctx: &Context<'_>) -> Result<hybrid_counter::CounterConfig> {
    deployed(ctx).await?.checked_counter_config(ctx).await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// A deployed stack with `parameters` and the two tables' outputs.
    fn deployed(parameters: &[(&str, &str)]) -> Deployed {
        Deployed {
            stack: StackInfo {
                id: "arn:stack".into(),
                name: "hybrid-counter".into(),
                status: "UPDATE_COMPLETE".into(),
                status_reason: None,
                parameters: map(parameters),
                outputs: map(&[
                    (stack::outputs::RESOURCES_TABLE, "res"),
                    (stack::outputs::COUNTERS_TABLE, "cnt"),
                ]),
                tags: BTreeMap::new(),
                last_updated: None,
                description: None,
            },
        }
    }

    #[test]
    fn the_deployed_admission_mode_comes_from_the_stack_parameter() {
        let strict = deployed(&[("AdmissionMode", "strict"), ("DefaultLimit", "7")])
            .counter_config()
            .unwrap();
        assert_eq!(strict.admission, hybrid_counter::Admission::Strict);
        assert_eq!(strict.default_limit, Some(7));
        let older = deployed(&[("DefaultLimit", "7")]).counter_config().unwrap();
        assert_eq!(older.admission, hybrid_counter::Admission::BestEffort);
        let err = deployed(&[("AdmissionMode", "exact")]).counter_config().unwrap_err();
        assert!(err.to_string().contains("AdmissionMode"), "{err}");
    }

    #[test]
    fn the_deployed_scope_keys_come_from_the_stack_parameter_and_default_to_one() {
        let spread = deployed(&[("ScopeKeyShards", "8")]).counter_config().unwrap();
        assert_eq!(spread.scope_keys.count(), 8);
        let older = deployed(&[]).counter_config().unwrap();
        assert_eq!(older.scope_keys.count(), 1);
        let err = deployed(&[("ScopeKeyShards", "0")]).counter_config().unwrap_err();
        assert!(err.to_string().contains("ScopeKeyShards"), "{err}");
    }
}
