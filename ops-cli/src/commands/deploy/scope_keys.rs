//! The parameters `plan` and `deploy` refuse to change on a deployed
//! stack: `ScopeKeyShards` and `ResourceKeySpread`, on which every item's
//! partition key and every override copy depend. An empty table is no
//! exception: during Lambda's rollout old and new instances would admit
//! one scope under two layouts.

use std::collections::BTreeMap;

use hybrid_counter::scope_keys::{MAX_KEYS, MAX_SPREAD, ScopeKeys};
use stack::params::{RESOURCE_KEY_SPREAD, SCOPE_KEY_SHARDS};

use super::cfn::StackInfo;
use crate::commands::Context;
use crate::error::{Error, Result, store_error};

/// A store over `stack`'s counters table, `None` before it has one.
fn layout_store(ctx: &Context<'_>, stack: &StackInfo) -> Option<hybrid_counter_aws::DynamoStore> {
    let counters = stack.outputs.get(stack::outputs::COUNTERS_TABLE)?;
    let config = hybrid_counter::CounterConfig {
        resources_table: String::new(),
        counters_table: counters.clone(),
        default_limit: None,
        eventual_shards: 1,
        best_effort_shards: 1,
        admission: Default::default(),
        scope_keys: Default::default(),
    };
    Some(hybrid_counter_aws::DynamoStore::new(
        ctx.clients.dynamodb.clone(),
        &config,
    ))
}

/// The layout record of `stack`'s counters table, `None` when the table
/// or the record does not exist yet.
pub async fn recorded(ctx: &Context<'_>, stack: &StackInfo) -> Result<Option<ScopeKeys>> {
    use hybrid_counter::layout::LayoutStore as _;
    let Some(store) = layout_store(ctx, stack) else {
        return Ok(None);
    };
    store
        .layout_record()
        .await
        .map_err(store_error("reading the layout record"))
}

/// Records the layout `stack`'s parameters give, when nothing is recorded
/// yet (a new stack, or one that predates the record), right after a
/// deploy that passed [`guard`]: the functions then refuse to start under
/// another layout ([`hybrid_counter::layout`]). A failure is a warning: the
/// stack changed whatever the record says, and the next deploy records it.
pub async fn record(ctx: &Context<'_>, stack: &StackInfo) -> Option<String> {
    let store = layout_store(ctx, stack)?;
    let layout = match scope_keys_param(&stack.parameters) {
        Ok(layout) => layout,
        Err(e) => return Some(format!("the layout was not recorded: {e}")),
    };
    hybrid_counter::layout::record(&store, layout, hybrid_counter::now_millis())
        .await
        .err()
        .map(|e| format!("the layout was not recorded (the next deploy records it): {e}"))
}

/// The deployed layout and the one a deploy with `overrides` would set,
/// when they differ (a parameter not given keeps its deployed value; a
/// stack deployed before a parameter existed has one key for it).
pub fn change(
    deployed: &BTreeMap<String, String>,
    overrides: &BTreeMap<String, String>,
) -> Result<Option<(ScopeKeys, ScopeKeys)>> {
    let from = scope_keys_param(deployed)?;
    let mut merged = deployed.clone();
    for name in [SCOPE_KEY_SHARDS, RESOURCE_KEY_SPREAD] {
        if let Some(value) = overrides.get(name) {
            merged.insert(name.to_owned(), value.clone());
        }
    }
    let to = scope_keys_param(&merged)?;
    Ok((from != to).then_some((from, to)))
}

/// The `ScopeKeyShards` and `ResourceKeySpread` of a stack's `parameters`;
/// one each when absent (a stack deployed before the parameter existed) or
/// empty.
pub fn scope_keys_param(parameters: &BTreeMap<String, String>) -> Result<ScopeKeys> {
    let count = |key: &str, max: u32, what: &str| -> Result<u32> {
        match parameters.get(key) {
            None => Ok(1),
            Some(value) if value.trim().is_empty() => Ok(1),
            Some(value) => hybrid_counter::config::parse_count(value, max).ok_or_else(|| Error::ParamValue {
                key: key.to_owned(),
                value: value.clone(),
                reason: format!("{what} 1 to {max}"),
            }),
        }
    };
    let keys =
        ScopeKeys::new(count(SCOPE_KEY_SHARDS, MAX_KEYS, "a scope is spread over")?).expect("checked against MAX_KEYS");
    Ok(keys
        .with_spread(count(RESOURCE_KEY_SPREAD, MAX_SPREAD, "a counters key is spread over")?)
        .expect("checked against MAX_SPREAD"))
}

/// Refuses an update of `stack` that changes its scope keys: they are
/// fixed when a stack is created. When the table holds a layout record
/// (`recorded`, [`hybrid_counter::layout`]) the update must give that
/// layout: setting the parameters back to it after a change made outside
/// counterctl is allowed, anything else refused.
pub fn guard(stack: &StackInfo, overrides: &BTreeMap<String, String>, recorded: Option<ScopeKeys>) -> Result<()> {
    let found = match recorded {
        Some(recorded) => {
            let deployed = scope_keys_param(&stack.parameters)?;
            let to = change(&stack.parameters, overrides)?.map_or(deployed, |(_, to)| to);
            (to != recorded).then_some((recorded, to))
        }
        None => change(&stack.parameters, overrides)?,
    };
    // Parameters that already differ from the record were changed outside
    // counterctl: the remedy is to set them back. Otherwise it is a change.
    let drifted = recorded.is_some_and(|r| scope_keys_param(&stack.parameters).is_ok_and(|p| p != r));
    if let (Some(recorded), Some((_, to)), true) = (recorded, found, drifted) {
        return Err(Error::layout_mismatch(&stack.name, recorded, to));
    }
    match found {
        None => Ok(()),
        Some((from, to)) => {
            let (param, from, to) = if from.count() != to.count() {
                (SCOPE_KEY_SHARDS, from.count(), to.count())
            } else {
                (RESOURCE_KEY_SPREAD, from.spread(), to.spread())
            };
            Err(Error::ScopeKeysChange {
                param,
                from,
                to,
                stack: stack.name.clone(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn only_a_given_count_other_than_the_deployed_one_is_a_change() {
        let given = |n: &str| params(&[("ScopeKeyShards", n)]);
        assert_eq!(change(&given("4"), &params(&[])).unwrap(), None);
        assert_eq!(change(&given("4"), &given("4")).unwrap(), None);
        // A stack that predates the parameter has one key.
        assert_eq!(change(&params(&[]), &given("1")).unwrap(), None);
        let (from, to) = change(&params(&[]), &given("8")).unwrap().unwrap();
        assert_eq!((from.count(), to.count()), (1, 8));
        let (from, to) = change(&given("8"), &given("2")).unwrap().unwrap();
        assert_eq!((from.count(), to.count()), (8, 2));
    }

    #[test]
    fn a_change_of_the_spread_is_a_change_and_a_bad_spread_is_named() {
        let deployed = params(&[("ScopeKeyShards", "4"), ("ResourceKeySpread", "8")]);
        assert_eq!(change(&deployed, &params(&[("ScopeKeyShards", "4")])).unwrap(), None);
        let (from, to) = change(&deployed, &params(&[("ResourceKeySpread", "16")]))
            .unwrap()
            .unwrap();
        assert_eq!((from.spread(), to.spread(), to.count()), (8, 16, 4));
        // A stack that predates the parameter has a spread of one.
        assert_eq!(
            change(&params(&[]), &params(&[("ResourceKeySpread", "1")])).unwrap(),
            None
        );
        assert!(
            change(&params(&[]), &params(&[("ResourceKeySpread", "2")]))
                .unwrap()
                .is_some()
        );
        let err = scope_keys_param(&params(&[("ResourceKeySpread", "0")])).unwrap_err();
        assert!(err.to_string().contains("ResourceKeySpread"), "{err}");
    }

    #[test]
    fn with_a_layout_record_an_update_must_give_the_recorded_layout_and_may_set_it_back() {
        let info = |pairs: &[(&str, &str)]| StackInfo {
            id: "arn:stack".into(),
            name: "hybrid-counter".into(),
            status: aws_sdk_cloudformation::types::StackStatus::UpdateComplete,
            status_reason: None,
            parameters: params(pairs),
            outputs: BTreeMap::new(),
            tags: BTreeMap::new(),
            last_updated: None,
            description: None,
        };
        let recorded = Some(ScopeKeys::new(4).unwrap().with_spread(8).unwrap());
        let as_recorded = info(&[("ScopeKeyShards", "4"), ("ResourceKeySpread", "8")]);
        guard(&as_recorded, &params(&[]), recorded).unwrap();
        // Changed outside counterctl (the parameter dropped to 1): setting it
        // back is allowed, keeping the wrong value is not.
        let changed = info(&[("ScopeKeyShards", "4")]);
        guard(&changed, &params(&[("ResourceKeySpread", "8")]), recorded).unwrap();
        let err = guard(&changed, &params(&[]), recorded).unwrap_err();
        assert!(
            matches!(
                err,
                Error::LayoutMismatch {
                    recorded_spread: 8,
                    spread: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("--param ResourceKeySpread=8"),
            "the remedy: {err}"
        );
        // Parameters as recorded: asking for another layout is a change.
        let err = guard(&as_recorded, &params(&[("ScopeKeyShards", "2")]), recorded).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ScopeKeysChange {
                    param: "ScopeKeyShards",
                    from: 4,
                    to: 2,
                    ..
                }
            ),
            "{err}"
        );
    }
}
