//! The one parameter `plan` and `deploy` refuse to change on a stack with
//! data: `ScopeKeyShards`. Every item's partition key depends on it
//! (`scope#k`, `k` = a hash of its id mod the count), so after a change the
//! items already stored would sit under keys no create, usage, audit or
//! limit reads any more: hidden from their scope's counters and admission.
//! No migration command exists, so a change is let through only on a fresh
//! stack or while the resources table is empty (one `Scan` of one item).

use std::collections::BTreeMap;

use hybrid_counter::scope_keys::ScopeKeys;

use super::cfn::StackInfo;
use crate::error::{self, Error, Result};
use crate::progress::Ui;

/// The deployed count and the one a deploy with `overrides` would set,
/// when they differ (a parameter not given keeps its deployed value; a
/// stack deployed before the parameter existed has one key).
pub fn change(
    deployed: &BTreeMap<String, String>,
    overrides: &BTreeMap<String, String>,
) -> Result<Option<(ScopeKeys, ScopeKeys)>> {
    let from = scope_keys_param(deployed)?;
    let to = match overrides.get(stack::params::SCOPE_KEY_SHARDS) {
        Some(value) => scope_keys_param(&BTreeMap::from([(
            stack::params::SCOPE_KEY_SHARDS.to_owned(),
            value.clone(),
        )]))?,
        None => from,
    };
    Ok((from != to).then_some((from, to)))
}

/// The `ScopeKeyShards` of a stack's `parameters`; one key when absent
/// (a stack deployed before the parameter existed) or empty.
pub fn scope_keys_param(
    parameters: &std::collections::BTreeMap<String, String>,
) -> Result<hybrid_counter::scope_keys::ScopeKeys> {
    let key = stack::params::SCOPE_KEY_SHARDS;
    match parameters.get(key) {
        None => Ok(Default::default()),
        Some(value) if value.trim().is_empty() => Ok(Default::default()),
        Some(value) => value
            .trim()
            .parse::<u32>()
            .ok()
            .and_then(|n| hybrid_counter::scope_keys::ScopeKeys::new(n).ok())
            .ok_or_else(|| Error::ParamValue {
                key: key.to_owned(),
                value: value.clone(),
                reason: format!(
                    "a scope is spread over 1 to {} keys",
                    hybrid_counter::scope_keys::MAX_KEYS
                ),
            }),
    }
}

/// Refuses an update of `stack` that changes `ScopeKeyShards` while its
/// resources table holds any item; reads the table only when the count
/// changes.
pub async fn guard(
    dynamodb: &aws_sdk_dynamodb::Client,
    stack: &StackInfo,
    overrides: &BTreeMap<String, String>,
    ui: &Ui,
) -> Result<()> {
    let Some((from, to)) = change(&stack.parameters, overrides)? else {
        return Ok(());
    };
    let table = stack
        .outputs
        .get(stack::outputs::RESOURCES_TABLE)
        .ok_or_else(|| Error::StackIncomplete {
            name: stack.name.clone(),
            missing: stack::outputs::RESOURCES_TABLE.to_owned(),
        })?;
    ui.step(format!(
        "{} changes from {} to {}: checking that {table} is empty",
        stack::params::SCOPE_KEY_SHARDS,
        from.count(),
        to.count()
    ));
    if holds_items(dynamodb, table).await? {
        return Err(Error::ScopeKeysChange {
            from: from.count(),
            to: to.count(),
            table: table.clone(),
        });
    }
    Ok(())
}

/// Whether `table` holds any item: a strongly consistent Scan of one.
/// A page that stops with a key but no item counts as holding items.
async fn holds_items(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Result<bool> {
    let page = dynamodb
        .scan()
        .table_name(table)
        .limit(1)
        .consistent_read(true)
        .send()
        .await
        .map_err(error::aws("Scan"))?;
    Ok(page.count() > 0 || !page.items().is_empty() || page.last_evaluated_key().is_some())
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
}
