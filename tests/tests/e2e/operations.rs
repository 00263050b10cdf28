//! Operator commands on a deployed stack: `load`, then the stream drained by
//! the local runner, then `audit` (clean: exit 0); a hand-injected
//! best-effort decrement makes `audit` exit 1 and name the scope;
//! `audit --repair` fixes it and the next audit exits 0. `usage` and
//! `limit` read and change one scope.

use e2e::counterctl::Counterctl;
use e2e::{Emulator, drain_deployed};
use ops_cli::{Report, exit};

async fn deployed() -> (Emulator, Counterctl, hybrid_counter::CounterConfig) {
    let emulator = Emulator::start();
    let ctl = Counterctl::new(&emulator);
    let report = ctl.deploy(&[]).await;
    let outputs = report.outputs;
    let config = hybrid_counter::CounterConfig {
        resources_table: outputs[stack::outputs::RESOURCES_TABLE].clone(),
        counters_table: outputs[stack::outputs::COUNTERS_TABLE].clone(),
        default_limit: Some(100),
        eventual_shards: 1,
        admission: Default::default(),
    };
    (emulator, ctl, config)
}

#[tokio::test]
async fn load_then_drain_audits_clean_and_injected_drift_is_found_and_repaired() {
    let (emulator, ctl, config) = deployed().await;
    let Report::Load(load) = ctl
        .run(&[
            "load",
            "--scopes",
            "3",
            "--workers",
            "4",
            "--operations",
            "150",
            "--delete-ratio",
            "0.3",
            "--limit",
            "1000",
            "--drain-timeout",
            "0",
        ])
        .await
        .unwrap()
    else {
        panic!("load report expected")
    };
    assert_eq!(load.operations, 150);
    assert!(load.created > 0 && load.deleted > 0, "{load:?}");
    assert!(load.errors.is_empty(), "{:?}", load.errors);
    assert!(load.overshoots.is_empty());
    assert!(load.create.p50_ms > 0.0 && load.create.p99_ms >= load.create.p50_ms);

    let drained = drain_deployed(&emulator.endpoint, &config).await;
    assert!(drained.to_string().contains("stream"), "{drained}");

    let clean = ctl.run(&["audit"]).await.unwrap();
    assert_eq!(clean.exit_code(), exit::SUCCESS, "{clean}");
    let Report::Audit(audit) = &clean else { panic!() };
    assert_eq!(audit.scopes_checked, 3);
    assert_eq!(audit.totals.live, (load.created - load.deleted), "{audit:?}");

    // Lose a best-effort update by hand.
    let store = hybrid_counter::DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let scope = hybrid_counter::Scope::new("load-1").unwrap();
    hybrid_counter::Store::add_best_effort(&store, &scope, -1, 0)
        .await
        .unwrap();
    let drift = ctl.run(&["audit"]).await.unwrap();
    assert_eq!(drift.exit_code(), exit::FAILED, "{drift}");
    let text = drift.to_string();
    assert!(text.contains("load-1") && text.contains("best-effort"), "{text}");
    let Report::Audit(found) = &drift else { panic!() };
    assert_eq!(found.scopes.len(), 1);
    assert!(!found.defect, "an undercount is drift, not a defect");

    let dry = ctl.run(&["audit", "--dry-run"]).await.unwrap();
    assert!(dry.to_string().contains("would repair: best_effort := "), "{dry}");
    assert_eq!(
        ctl.run(&["audit", "--scope", "load-1"]).await.unwrap().exit_code(),
        exit::FAILED
    );

    let repair = ctl.run(&["audit", "--repair"]).await.unwrap();
    assert!(repair.to_string().contains("repaired: best_effort := "), "{repair}");
    let after = ctl.run(&["audit"]).await.unwrap();
    assert_eq!(after.exit_code(), exit::SUCCESS, "{after}");
}

#[tokio::test]
async fn usage_and_limit_commands_read_and_change_one_scope() {
    let (_emulator, ctl, _config) = deployed().await;
    let Report::Limit(get) = ctl.run(&["limit", "get", "acct"]).await.unwrap() else {
        panic!()
    };
    assert_eq!((get.limit, get.overridden), (100, false));
    let Report::Limit(set) = ctl.run(&["limit", "set", "acct", "3"]).await.unwrap() else {
        panic!()
    };
    assert_eq!((set.limit, set.overridden), (3, true));
    ctl.run(&[
        "load",
        "--scopes",
        "1",
        "--scope-prefix",
        "acct",
        "--workers",
        "2",
        "--operations",
        "10",
        "--delete-ratio",
        "0",
        "--drain-timeout",
        "0",
    ])
    .await
    .unwrap();
    // "acct-0" is the load scope; "acct" is untouched.
    let Report::Usage(usage) = ctl.run(&["usage", "acct-0"]).await.unwrap() else {
        panic!()
    };
    assert_eq!((usage.usage.best_effort, usage.usage.limit), (10, 100));
    let Report::Limit(cleared) = ctl.run(&["limit", "clear", "acct"]).await.unwrap() else {
        panic!()
    };
    assert_eq!((cleared.limit, cleared.overridden), (100, false));
    let err = ctl.run(&["usage", " bad"]).await.unwrap_err();
    assert_eq!(err.exit_code(), exit::USAGE, "{err}");
}

#[tokio::test]
async fn load_with_a_small_limit_is_refused_at_the_limit() {
    let (emulator, ctl, config) = deployed().await;
    let Report::Load(load) = ctl
        .run(&[
            "load",
            "--scopes",
            "1",
            "--workers",
            "1",
            "--operations",
            "20",
            "--delete-ratio",
            "0",
            "--limit",
            "5",
            "--drain-timeout",
            "0",
        ])
        .await
        .unwrap()
    else {
        panic!()
    };
    // One sequential worker: exactly the limit is admitted, never more.
    assert_eq!((load.created, load.limit_exceeded), (5, 15), "{load:?}");
    assert!(load.overshoots.is_empty());
    drain_deployed(&emulator.endpoint, &config).await;
    assert_eq!(ctl.run(&["audit"]).await.unwrap().exit_code(), exit::SUCCESS);
}

#[tokio::test]
async fn audit_repair_sweeps_pending_items_whose_records_left_the_stream() {
    // Nothing consumes the stream here, as when a DLQ range expired: the
    // counters match the flags (no drift), but the items never reached
    // their end state, so EC stays below live until the sweep.
    let (emulator, ctl, config) = deployed().await;
    let store = hybrid_counter::DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let counter = hybrid_counter::Counter::new(store.clone(), 100);
    let scope = hybrid_counter::Scope::new("stranded").unwrap();
    for n in 0..4 {
        let id = hybrid_counter::ResourceId::new(format!("w{n}")).unwrap();
        counter.create(&scope, &id, Default::default(), 1).await.unwrap();
    }
    counter
        .delete(&scope, &hybrid_counter::ResourceId::new("w0").unwrap(), 1)
        .await
        .unwrap();
    let before = ctl.run(&["audit"]).await.unwrap();
    let Report::Audit(before_report) = &before else {
        panic!()
    };
    assert_eq!(
        before_report.totals.pending_create + before_report.totals.pending_delete,
        4
    );
    let dry = ctl.run(&["audit", "--dry-run"]).await.unwrap();
    assert!(dry.to_string().contains("would sweep 4 pending item(s)"), "{dry}");
    let repair = ctl.run(&["audit", "--repair"]).await.unwrap();
    assert!(repair.to_string().contains("swept 4 pending item(s)"), "{repair}");
    assert_eq!(repair.exit_code(), exit::SUCCESS, "{repair}");
    let counts = hybrid_counter::audit::count_scope(&store, &scope).await.unwrap();
    let usage = counter.usage(&scope).await.unwrap();
    assert_eq!((counts.live, counts.pending_create, counts.pending_delete), (3, 0, 0));
    assert_eq!((usage.eventual, usage.best_effort), (3, 3));
}
