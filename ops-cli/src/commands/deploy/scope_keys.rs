//! The one parameter `plan` and `deploy` refuse to change on a deployed
//! stack: `ScopeKeyShards`, on which every item's partition key and every
//! override copy depend. An empty table is no exception: during Lambda's
//! rollout old and new instances would admit one scope under two layouts.

use std::collections::BTreeMap;

use hybrid_counter::scope_keys::ScopeKeys;

use super::cfn::StackInfo;
use crate::error::{Error, Result};

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

/// Refuses an update of `stack` that changes `ScopeKeyShards`: the count
/// is fixed when a stack is created.
pub fn guard(stack: &StackInfo, overrides: &BTreeMap<String, String>) -> Result<()> {
    match change(&stack.parameters, overrides)? {
        None => Ok(()),
        Some((from, to)) => Err(Error::ScopeKeysChange {
            from: from.count(),
            to: to.count(),
            stack: stack.name.clone(),
        }),
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
}
