//! The best-effort counter over several items on a deployed stack:
//! `BeShardCount` set at deploy and changed on the live stack with
//! `counterctl deploy --param`, in both admission modes. Creates spread over
//! the shards, strict admission never overshoots across them, and an audit
//! after every change finds nothing.

use std::collections::BTreeMap;

use e2e::counterctl::Counterctl;
use hybrid_counter::{AuditStore as _, CounterConfig, RequestStore as _, keys};
use hybrid_counter_aws::DynamoStore;
use ops_cli::{Report, exit};

/// The API function's configuration as deployed.
async fn api_config(emulator: &e2e::Emulator, function: &str) -> CounterConfig {
    let sdk = emulator.sdk_config().await;
    let variables = aws_sdk_lambda::Client::new(&sdk)
        .get_function_configuration()
        .function_name(function)
        .send()
        .await
        .unwrap()
        .environment()
        .and_then(|e| e.variables())
        .cloned()
        .unwrap_or_default();
    CounterConfig::from_lookup(|name| variables.get(name).cloned()).unwrap()
}

/// The best-effort items of `scope` and their counts.
async fn best_effort_items(store: &DynamoStore, scope: &hybrid_counter::Scope) -> BTreeMap<String, i64> {
    store
        .counter_items(scope)
        .await
        .unwrap()
        .into_iter()
        .filter(|i| keys::is_best_effort_name(&i.name))
        .map(|i| (i.name, i.count))
        .collect()
}

async fn audit_is_clean(ctl: &Counterctl, when: &str) {
    let audit = ctl.run(&["audit"]).await.unwrap();
    assert_eq!(audit.exit_code(), exit::SUCCESS, "{when}: {audit}");
    let Report::Audit(found) = &audit else { panic!() };
    assert!(!found.defect, "{when}: {audit}");
}

#[tokio::test]
async fn best_effort_shards_change_on_a_live_stack_in_both_modes_and_every_audit_finds_nothing() {
    let emulator = e2e::Emulator::start();
    let ctl = Counterctl::new(&emulator);
    let report = ctl.deploy(&["BeShardCount=4", "EcShardCount=4"]).await;
    assert!(report.succeeded(), "{report}");
    let function = report.outputs[stack::outputs::API_FUNCTION].clone();
    let config = api_config(&emulator, &function).await;
    assert_eq!(config.best_effort_shards, 4);
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let scope = hybrid_counter::Scope::new("load-0").unwrap();

    // Best-effort admission over four items.
    let first = ctl.load_one_scope(1, 80, "0.25", 1_000).await;
    assert!(first.errors.is_empty(), "{first:?}");
    let items = best_effort_items(&store, &scope).await;
    assert!(
        items.len() >= 2 && items.keys().all(|n| n.starts_with("best_effort#")),
        "creates spread over the shards: {items:?}"
    );
    let live = first.created - first.deleted;
    assert_eq!(items.values().sum::<i64>(), live as i64, "{items:?}");
    audit_is_clean(&ctl, "four shards").await;

    // Down to two on the live stack: the items of shards 2 and 3 stay
    // counted where they are, and drain as their items are deleted.
    let report = ctl.deploy(&["BeShardCount=2"]).await;
    assert!(report.succeeded(), "{report}");
    assert_eq!(api_config(&emulator, &function).await.best_effort_shards, 2);
    let second = ctl.load_one_scope(2, 80, "0.25", 1_000).await;
    assert!(second.errors.is_empty(), "{second:?}");
    let live = live + second.created - second.deleted;
    let items = best_effort_items(&store, &scope).await;
    assert_eq!(items.values().sum::<i64>(), live as i64, "{items:?}");
    audit_is_clean(&ctl, "two shards after four").await;

    // Strict admission over the two shards (and what four left): the limit
    // holds across all of them.
    let report = ctl.deploy(&["AdmissionMode=strict"]).await;
    assert!(report.succeeded(), "{report}");
    let strict = api_config(&emulator, &function).await;
    assert_eq!((strict.admission.is_strict(), strict.best_effort_shards), (true, 2));
    audit_is_clean(&ctl, "the switch to strict").await;
    let third = ctl.load_one_scope(3, 40, "0", live + 5).await;
    assert_eq!((third.created, third.limit_exceeded), (5, 35), "{third:?}");
    assert!(third.overshoots.is_empty(), "{third:?}");
    let items = best_effort_items(&store, &scope).await;
    assert_eq!(items.values().sum::<i64>(), (live + 5) as i64, "{items:?}");
    audit_is_clean(&ctl, "strict over two shards").await;

    // Up to eight under strict admission: still exactly the limit.
    let report = ctl.deploy(&["BeShardCount=8"]).await;
    assert!(report.succeeded(), "{report}");
    let fourth = ctl.load_one_scope(4, 40, "0", live + 12).await;
    assert_eq!((fourth.created, fourth.limit_exceeded), (7, 33), "{fourth:?}");
    assert!(fourth.overshoots.is_empty(), "{fourth:?}");
    audit_is_clean(&ctl, "strict over eight shards").await;
}

/// Strict admission over shards whose sum is right but one of which is
/// short of the live items recorded on it (after best-effort admission a
/// `+1` may land on another shard): `counterctl audit` over the whole
/// table finds it although no sum disagrees, and `--repair` raises the
/// short shard at once.
#[tokio::test]
async fn a_whole_table_strict_audit_finds_and_raises_a_shard_short_of_its_items_when_the_sums_agree() {
    let emulator = e2e::Emulator::start();
    let ctl = Counterctl::new(&emulator);
    let report = ctl.deploy(&["AdmissionMode=strict", "BeShardCount=2"]).await;
    assert!(report.succeeded(), "{report}");
    let config = api_config(&emulator, &report.outputs[stack::outputs::API_FUNCTION]).await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let scope = hybrid_counter::Scope::new("load-0").unwrap();
    let load = ctl.load_one_scope(1, 6, "0", 10).await;
    assert_eq!(load.created, 6, "{load:?}");
    audit_is_clean(&ctl, "after the creates").await;

    // Move one count off a shard that records an item onto the other.
    let mut recorded: BTreeMap<String, i64> = BTreeMap::new();
    for row in store.scope_items(&scope).await.unwrap() {
        *recorded.entry(keys::best_effort_name(row.be_shard)).or_default() += 1;
    }
    let short = recorded.keys().next().unwrap().clone();
    let other = ["best_effort#0", "best_effort#1"]
        .into_iter()
        .find(|n| *n != short)
        .unwrap();
    let now = hybrid_counter::now_millis();
    store.add_best_effort(&scope, &short, -1, now).await.unwrap();
    store.add_best_effort(&scope, other, 1, now).await.unwrap();
    assert_eq!(best_effort_items(&store, &scope).await.values().sum::<i64>(), 6);

    let found = ctl.run(&["audit"]).await.unwrap();
    assert_eq!(found.exit_code(), exit::FAILED, "{found}");
    assert!(found.to_string().contains("1 short of the live items"), "{found}");
    let Report::Audit(audit) = &found else { panic!() };
    assert!(audit.defect, "{found}");

    let repaired = ctl.run(&["audit", "--repair"]).await.unwrap();
    assert!(repaired.to_string().contains("repaired"), "{repaired}");
    let items = best_effort_items(&store, &scope).await;
    assert_eq!(
        items[&short], recorded[&short],
        "the short shard covers its items again: {items:?}"
    );
    let Report::Audit(after) = ctl.run(&["audit"]).await.unwrap() else {
        panic!()
    };
    assert!(!after.defect, "only over-reserved is left, the safe side: {after:?}");
}

/// A scope over four partition keys (`ScopeKeyShards=4`, issue 38 item 4):
/// the api function gets the count, load's creates spread over the keys,
/// `usage` sums them, `audit --scope` covers each, the override is a copy
/// on every key that `limit get` reads back in agreement, and a change of
/// the count is refused on the deployed stack.
#[tokio::test]
async fn a_scope_over_four_keys_is_summed_audited_and_limited_on_every_key_and_its_count_is_kept() {
    let emulator = e2e::Emulator::start();
    let ctl = Counterctl::new(&emulator);
    let report = ctl.deploy(&["ScopeKeyShards=4"]).await;
    assert!(report.succeeded(), "{report}");
    let function = report.outputs[stack::outputs::API_FUNCTION].clone();
    let config = api_config(&emulator, &function).await;
    assert_eq!(config.scope_keys.count(), 4);
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let scope = hybrid_counter::Scope::new("load-0").unwrap();

    let load = ctl.load_one_scope(1, 80, "0.25", 1_000).await;
    assert!(load.errors.is_empty(), "{load:?}");
    let live = load.created - load.deleted;
    let mut per_key = Vec::new();
    for key in config.scope_keys.keys(&scope).unwrap() {
        let rows = store.scope_items(&key).await.unwrap();
        per_key.push(rows.iter().filter(|r| !r.deleted).count() as u64);
    }
    assert!(per_key.iter().filter(|n| **n > 0).count() >= 2, "{per_key:?}");
    assert_eq!(per_key.iter().sum::<u64>(), live, "{per_key:?}");
    assert!(
        store.scope_items(&scope).await.unwrap().is_empty(),
        "nothing under the bare scope"
    );

    let Ok(Report::Usage(usage)) = ctl.run(&["usage", "load-0"]).await else {
        panic!("usage")
    };
    assert_eq!(usage.usage.best_effort, live as i64, "{usage:?}");
    assert_eq!(usage.keys, 4);

    let audit = ctl.run(&["audit", "--scope", "load-0"]).await.unwrap();
    assert_eq!(audit.exit_code(), exit::SUCCESS, "{audit}");
    let Report::Audit(found) = &audit else { panic!() };
    assert_eq!((found.scopes_checked, found.totals.live), (4, live), "{audit}");

    let Ok(Report::Limit(limit)) = ctl.run(&["limit", "get", "load-0"]).await else {
        panic!("limit get")
    };
    assert_eq!((limit.limit, limit.overridden), (1_000, true), "{limit:?}");
    assert_eq!(limit.copies, [Some(1_000); 4], "load wrote the override on every key");
    assert!(!limit.copies_disagree);

    let refused = ctl
        .run(&ctl.with_zips(&["deploy", "--param", "ScopeKeyShards=2"]))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ops_cli::Error::ScopeKeysChange { from: 4, to: 2, .. }),
        "{refused}"
    );
    assert_eq!(refused.exit_code(), exit::USAGE);
}

/// Two levels (`ScopeKeyShards=2`, `ResourceKeySpread=4`, issue 38 item
/// 4): every function gets both counts, load's items spread over the
/// scope's eight resources keys while its counters stay on two counters
/// keys, the stream counts each item on its counters key, `usage` and
/// `audit --scope` see every item, and a change of the spread is refused
/// on the deployed stack.
#[tokio::test]
async fn a_scope_over_two_counters_keys_of_four_resources_keys_is_counted_and_audited_on_its_counters_keys() {
    let emulator = e2e::Emulator::start();
    let ctl = Counterctl::new(&emulator);
    let report = ctl.deploy(&["ScopeKeyShards=2", "ResourceKeySpread=4"]).await;
    assert!(report.succeeded(), "{report}");
    assert!(
        report.warnings.iter().any(|w| w.contains("--param EcShardCount=4")),
        "four stream shards' batches on one eventual counter item are advised against: {report}"
    );
    let mut layouts = Vec::new();
    for output in [stack::outputs::API_FUNCTION, stack::outputs::STREAM_COUNTER_FUNCTION] {
        let config = api_config(&emulator, &report.outputs[output]).await;
        layouts.push((config.scope_keys.count(), config.scope_keys.spread()));
    }
    assert_eq!(
        layouts,
        [(2, 4), (2, 4)],
        "the api and the stream function read the layout"
    );
    let config = api_config(&emulator, &report.outputs[stack::outputs::API_FUNCTION]).await;
    let keys = config.scope_keys;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let scope = hybrid_counter::Scope::new("load-0").unwrap();

    let load = ctl.load_one_scope(1, 80, "0.25", 1_000).await;
    assert!(load.errors.is_empty(), "{load:?}");
    let live = load.created - load.deleted;
    e2e::drain_deployed(&emulator.endpoint, &config).await;
    let mut per_resources_key = BTreeMap::new();
    for key in keys.resource_keys(&scope).unwrap() {
        let rows = store.scope_items(&key).await.unwrap();
        per_resources_key.insert(key.to_string(), rows.iter().filter(|r| !r.deleted).count() as u64);
    }
    assert_eq!(per_resources_key.len(), 8);
    assert!(
        per_resources_key.values().filter(|n| **n > 0).count() >= 5,
        "{per_resources_key:?}"
    );
    assert_eq!(per_resources_key.values().sum::<u64>(), live, "{per_resources_key:?}");
    for counters_key in keys.keys(&scope).unwrap() {
        let on_key: u64 = keys
            .resource_keys_of(&counters_key)
            .iter()
            .map(|k| per_resources_key[k.as_str()])
            .sum();
        let counters = store.read_counters(&counters_key).await.unwrap();
        assert_eq!(
            counters.eventual, on_key as i64,
            "{counters_key}: EC counts its resources keys"
        );
    }

    let Ok(Report::Usage(usage)) = ctl.run(&["usage", "load-0"]).await else {
        panic!("usage")
    };
    assert_eq!((usage.usage.eventual, usage.keys), (live as i64, 2), "{usage:?}");

    let audit = ctl.run(&["audit", "--scope", "load-0"]).await.unwrap();
    assert_eq!(audit.exit_code(), exit::SUCCESS, "{audit}");
    let Report::Audit(found) = &audit else { panic!() };
    assert_eq!((found.scopes_checked, found.totals.live), (2, live), "{audit}");
    audit_is_clean(&ctl, "the whole table over two levels").await;

    let refused = ctl
        .run(&ctl.with_zips(&["deploy", "--param", "ResourceKeySpread=8"]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            ops_cli::Error::ScopeKeysChange {
                param: "ResourceKeySpread",
                from: 4,
                to: 8,
                ..
            }
        ),
        "{refused}"
    );
}

/// The layout record (issue 38, reviews 1 and 2): `deploy` records the
/// layout the items are written under; the stream function started with
/// another one (a parameter changed outside counterctl) refuses to start
/// instead of counting under it, and never writes the record; counterctl
/// refuses to read items under parameters other than the record's, and
/// `deploy` may set them back to it but not keep them.
#[tokio::test]
async fn a_function_or_counterctl_under_another_layout_than_the_recorded_one_refuses_to_work() {
    use hybrid_counter::layout::LayoutStore as _;
    let (emulator, ctl, config) = e2e::counterctl::deployed_over_keys(2, 1).await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let recorded = store.layout_record().await.unwrap();
    assert_eq!(
        recorded.map(|k| (k.count(), k.spread())),
        Some((2, 1)),
        "deploy records the layout"
    );

    // The stream function's binary, started as Lambda would start it after
    // an out-of-band change of ScopeKeyShards to 1 (and, for contrast, with
    // the recorded 2: it gets past the check and stops only for want of a
    // Lambda runtime API).
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let binary = esm_runner::binaries::target_dir(workspace, None).join("debug/stream-counter");
    let start = |keys: &str| {
        std::process::Command::new(&binary)
            .env_clear()
            .env("RESOURCES_TABLE", &config.resources_table)
            .env("COUNTERS_TABLE", &config.counters_table)
            .env("SCOPE_KEY_SHARDS", keys)
            .env("AWS_ENDPOINT_URL", &emulator.endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e} (cargo build --bins first)", binary.display()))
    };
    let refused = start("1");
    let said = String::from_utf8_lossy(&refused.stderr).to_string() + &String::from_utf8_lossy(&refused.stdout);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("refuses to read or write items") && said.contains("ScopeKeyShards=2"),
        "{said}"
    );
    let started = start("2");
    let said = String::from_utf8_lossy(&started.stderr).to_string() + &String::from_utf8_lossy(&started.stdout);
    assert!(!said.contains("refuses to read or write items"), "{said}");

    // The record says 4 keys while the stack's parameters say 2 (what a
    // change outside counterctl leaves, seen from the other side).
    let number = |n: &str| aws_sdk_dynamodb::types::AttributeValue::N(n.to_owned());
    let text = |s: &str| aws_sdk_dynamodb::types::AttributeValue::S(s.to_owned());
    store
        .client()
        .put_item()
        .table_name(&config.counters_table)
        .item(keys::SCOPE, text(keys::LAYOUT_SCOPE))
        .item(keys::NAME, text(keys::LAYOUT_NAME))
        .item(keys::LAYOUT_KEYS, number("4"))
        .item(keys::LAYOUT_SPREAD, number("1"))
        .send()
        .await
        .unwrap();
    let err = ctl.run(&["usage", "acct"]).await.unwrap_err();
    assert!(
        matches!(
            err,
            ops_cli::Error::LayoutMismatch {
                recorded_keys: 4,
                keys: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.exit_code(), exit::USAGE);
    let Ok(Report::Status(status)) = ctl.run(&["status"]).await else {
        panic!("status")
    };
    let item = status.attention.iter().find(|a| a.starts_with("scope keys:"));
    assert!(
        item.is_some_and(|a| a.contains("refuse to start") && a.contains("--param ScopeKeyShards=4")),
        "status names the refused starts and the remedy: {status}"
    );
    let kept = ctl.run(&ctl.with_zips(&["deploy"])).await.unwrap_err();
    assert!(
        matches!(
            kept,
            ops_cli::Error::LayoutMismatch {
                recorded_keys: 4,
                keys: 2,
                ..
            }
        ),
        "{kept}"
    );
    let back = ctl.deploy(&["ScopeKeyShards=4"]).await;
    assert!(
        back.succeeded(),
        "setting the parameters back to the record is allowed: {back}"
    );
    assert!(ctl.run(&["usage", "acct"]).await.is_ok());
    let Ok(Report::Status(status)) = ctl.run(&["status"]).await else {
        panic!("status")
    };
    assert!(
        !status.attention.iter().any(|a| a.starts_with("scope keys:")),
        "{status}"
    );
}
