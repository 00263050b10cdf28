//! The parameters `plan` and `deploy` refuse to change on a deployed
//! stack: `ScopeKeyShards` and `ResourceKeySpread`, on which every item's
//! partition key and every override copy depend. An empty table is no
//! exception: during Lambda's rollout old and new instances would admit
//! one scope under two layouts.

use std::collections::BTreeMap;

use hybrid_counter::error::StoreError;
use hybrid_counter::scope_keys::{MAX_KEYS, MAX_SPREAD, ScopeKeys};
use stack::params::{EC_SHARD_COUNT, PARALLELIZATION_FACTOR, RESOURCE_KEY_SPREAD, SCOPE_KEY_SHARDS};

use super::cfn::StackInfo;
use crate::commands::Context;
use crate::error::{Error, Result, during};

/// What a deploy's layout comes from, in [`Error::LayoutMismatch`].
const WITH_FLAGS: &str = "its parameters, with this command's --param flags if any,";

/// `EcShardCount`'s largest value (the functions' and the template's).
const EC_SHARDS_MAX: u32 = hybrid_counter::best_effort::MAX_SHARDS;

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
/// or the record does not exist yet. A record counterctl cannot parse is
/// refused with the way to clear it ([`Error::LayoutRecordMalformed`]).
pub async fn recorded(ctx: &Context<'_>, stack: &StackInfo) -> Result<Option<ScopeKeys>> {
    use hybrid_counter::layout::LayoutStore as _;
    let Some(store) = layout_store(ctx, stack) else {
        return Ok(None);
    };
    let table = || {
        stack
            .outputs
            .get(stack::outputs::COUNTERS_TABLE)
            .cloned()
            .unwrap_or_default()
    };
    store.layout_record().await.map_err(|e| read_error(table(), e))
}

/// A failed read of the layout record as counterctl reports it.
fn read_error(table: String, e: StoreError) -> Error {
    match e {
        StoreError::Malformed(reason) => Error::LayoutRecordMalformed { table, reason },
        e if e.to_string().contains("AccessDenied") => Error::Aws {
            action: "reading the layout record",
            message: format!(
                "{e} (a role made from an earlier release's `counterctl policy operator` lacks GetItem on the \
                 record: regenerate it)"
            ),
        },
        e => during("reading the layout record")(e),
    }
}

/// Records `approved`, the layout this deploy's [`guard`] checked (on an
/// update the deployed or recorded one, on a create the one created), in
/// `stack`'s counters table when nothing is recorded yet (a new stack, or
/// one that predates the record): the functions then refuse to start
/// under another layout ([`hybrid_counter::layout`]). Before an update
/// executes and again after a deploy. `None` for a stack without a
/// counters table yet.
pub async fn record(
    ctx: &Context<'_>,
    stack: &StackInfo,
    approved: ScopeKeys,
) -> Option<std::result::Result<(), hybrid_counter::Error>> {
    let store = layout_store(ctx, stack)?;
    Some(hybrid_counter::layout::record(&store, approved, hybrid_counter::now_millis()).await)
}

/// What a deploy reports after [`record`], with the remedy: the write's
/// failure, or `stack`'s parameters, as read after the deploy, giving
/// another layout than `approved` (an update made outside counterctl
/// while it ran). `approved` is recorded all the same, so functions
/// started under the other layout refuse to run instead of hiding items,
/// and the remedy sets the parameters back.
pub fn unrecorded(
    written: std::result::Result<(), hybrid_counter::Error>,
    parameters: &BTreeMap<String, String>,
    approved: ScopeKeys,
) -> Option<String> {
    let set_back = |keys: ScopeKeys| {
        format!(
            "counterctl deploy --param {SCOPE_KEY_SHARDS}={} --param {RESOURCE_KEY_SPREAD}={}",
            keys.count(),
            keys.spread()
        )
    };
    match written {
        Err(e @ hybrid_counter::Error::LayoutMismatch { .. }) => {
            return Some(format!(
                "the record holds another layout than the one this deploy checked ({e}); the functions refuse to \
                 start under the parameters: run counterctl deploy again to see which to set back"
            ));
        }
        Err(e) => {
            return Some(format!(
                "{e}. If no record exists the functions start unchecked: run counterctl deploy again (a role \
                 without dynamodb:GetItem and PutItem on the counters table's record cannot write it; \
                 counterctl policy operator prints one that can)"
            ));
        }
        Ok(()) => {}
    }
    match scope_keys_param(parameters) {
        Ok(now) if now == approved => None,
        Ok(now) => Some(format!(
            "the stack's parameters now give {SCOPE_KEY_SHARDS}={} {RESOURCE_KEY_SPREAD}={}, not the \
             {SCOPE_KEY_SHARDS}={} {RESOURCE_KEY_SPREAD}={} this deploy checked and recorded (changed outside \
             counterctl while it ran): the functions refuse to start until they are set back with {}",
            now.count(),
            now.spread(),
            approved.count(),
            approved.spread(),
            set_back(approved)
        )),
        Err(e) => Some(format!(
            "{e}; the layout recorded is the one this deploy checked: {}",
            set_back(approved)
        )),
    }
}

/// Advice on `EcShardCount` for a layout of `parameters` (the values after
/// the deploy): with `ResourceKeySpread` M > 1 the records of one counters
/// key arrive on up to M stream shards (fewer while the resources table
/// has fewer partitions), `ParallelizationFactor` batches at once on each,
/// and each batch writes that key's eventual counter on an item it picks
/// by hash. Fewer items than concurrent batches make more of them meet on
/// one and conflict; one item measured about 100 creates/s at 16 × 16
/// keys. The advised count, one item per possible concurrent batch, is
/// arithmetic, not a measured optimum.
pub fn ec_shard_advice(parameters: &BTreeMap<String, String>) -> Option<String> {
    let number = |key: &str, max: u32| {
        parameters
            .get(key)
            .and_then(|v| hybrid_counter::config::parse_count(v, max))
            .unwrap_or(1)
    };
    let spread = scope_keys_param(parameters).ok()?.spread();
    let lanes = number(PARALLELIZATION_FACTOR, 10);
    let shards = number(EC_SHARD_COUNT, EC_SHARDS_MAX);
    let writers = spread.saturating_mul(lanes);
    let advised = writers.min(EC_SHARDS_MAX);
    (spread > 1 && shards < advised).then(|| {
        format!(
            "{RESOURCE_KEY_SPREAD}={spread} with {PARALLELIZATION_FACTOR}={lanes}: up to {writers} stream batches \
             at once write each counters key's eventual counter, each on one of {EC_SHARD_COUNT}={shards} item(s) \
             picked by hash, and batches that meet on an item conflict and are retried (one item measured about \
             100 creates/s at 16 x 16 keys); consider --param {EC_SHARD_COUNT}={advised} (as many items as \
             possible concurrent batches, capped at {EC_SHARDS_MAX}; arithmetic, not measured; it may change at \
             any time, docs/admission-and-sharding.md)"
        )
    })
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
        return Err(Error::layout_mismatch(&stack.name, recorded, to, WITH_FLAGS));
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
    fn too_few_eventual_shards_for_a_spread_layout_are_advised_up_to_one_per_concurrent_batch() {
        let advice = |pairs: &[(&str, &str)]| ec_shard_advice(&params(pairs));
        // One level: every record of a counters key comes from its one key.
        assert_eq!(
            advice(&[("ScopeKeyShards", "16"), ("ParallelizationFactor", "10")]),
            None
        );
        let text = advice(&[("ResourceKeySpread", "8")]).expect("8 stream shards on one EC item");
        assert!(
            text.contains("up to 8 stream batches") && text.contains("--param EcShardCount=8"),
            "{text}"
        );
        assert_eq!(advice(&[("ResourceKeySpread", "8"), ("EcShardCount", "8")]), None);
        let text = advice(&[
            ("ResourceKeySpread", "8"),
            ("ParallelizationFactor", "4"),
            ("EcShardCount", "8.0"),
        ])
        .expect("32 concurrent batches on 8 items");
        assert!(text.contains("--param EcShardCount=32"), "{text}");
        // Capped at the parameter's largest value, which then satisfies it.
        let text = advice(&[("ResourceKeySpread", "16"), ("ParallelizationFactor", "10")]).unwrap();
        assert!(
            text.contains("up to 160 stream batches") && text.contains("EcShardCount=100"),
            "{text}"
        );
        assert_eq!(
            advice(&[
                ("ResourceKeySpread", "16"),
                ("ParallelizationFactor", "10"),
                ("EcShardCount", "100")
            ]),
            None
        );
        // A layout that does not parse is refused elsewhere, not advised on.
        assert_eq!(advice(&[("ResourceKeySpread", "zero")]), None);
    }

    #[test]
    fn a_deploy_reports_a_failed_record_and_parameters_changed_while_it_ran_with_their_remedies() {
        let approved = ScopeKeys::new(4).unwrap().with_spread(8).unwrap();
        let now = params(&[("ScopeKeyShards", "4"), ("ResourceKeySpread", "8")]);
        assert_eq!(unrecorded(Ok(()), &now, approved), None);
        // An update outside counterctl landed while the deploy ran: the
        // checked layout is recorded all the same, and the remedy sets the
        // parameters back to it (a deploy without --param would record the
        // other one if nothing were recorded).
        let raced = params(&[("ScopeKeyShards", "4"), ("ResourceKeySpread", "1")]);
        let why = unrecorded(Ok(()), &raced, approved).expect("another layout than the checked one");
        assert!(
            why.contains("ResourceKeySpread=1")
                && why.contains("refuse to start")
                && why.contains("--param ScopeKeyShards=4 --param ResourceKeySpread=8"),
            "{why}"
        );
        // A write refused by IAM keeps its reason and names the policy.
        let denied = hybrid_counter::Error::Unavailable(
            "the layout record could not be written: AccessDeniedException: not authorized".into(),
        );
        let why = unrecorded(Err(denied), &now, approved).unwrap();
        assert!(
            why.contains("AccessDeniedException") && why.contains("counterctl policy operator"),
            "{why}"
        );
        let other = hybrid_counter::Error::LayoutMismatch {
            recorded_keys: 2,
            recorded_spread: 1,
            keys: 4,
            spread: 8,
        };
        let why = unrecorded(Err(other), &now, approved).unwrap();
        assert!(why.contains("another layout") && !why.contains("unchecked"), "{why}");
    }

    #[test]
    fn a_malformed_record_is_refused_with_the_way_to_clear_it() {
        let err = read_error(
            "hc-counters".into(),
            StoreError::Malformed("layout record without a number scope_key_shards".into()),
        );
        assert!(matches!(err, Error::LayoutRecordMalformed { .. }), "{err}");
        let text = err.to_string();
        let key = text.split("--key '").nth(1).and_then(|t| t.split('\'').next());
        let key = key.expect("the key in quotes");
        let key: serde_json::Value = serde_json::from_str(key).expect("the key is JSON");
        assert_eq!(key["scope"]["S"], hybrid_counter::keys::LAYOUT_SCOPE);
        assert_eq!(key["name"]["S"], hybrid_counter::keys::LAYOUT_NAME);
        assert!(text.contains("--table-name hc-counters"), "{text}");
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        // Any other failure stays an AWS error (exit 4); a refusal by IAM
        // names the policy to regenerate, a throttle does not.
        let err = read_error("t".into(), StoreError::Unavailable("throttled".into()));
        assert!(
            matches!(err, Error::Aws { .. }) && !err.to_string().contains("policy"),
            "{err}"
        );
        let err = read_error("t".into(), StoreError::Unavailable("AccessDeniedException: no".into()));
        assert!(err.to_string().contains("counterctl policy operator"), "{err}");
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
        assert!(err.to_string().contains(WITH_FLAGS), "what it compared: {err}");
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
