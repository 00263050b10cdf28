//! Operator commands on a deployed stack: `load`, then the stream drained by
//! the local runner, then `audit` (clean: exit 0); a hand-injected
//! best-effort decrement makes `audit` exit 1 and name the scope;
//! `audit --repair` fixes it and the next audit exits 0. `audit --repair`
//! in a loop beside `load`, the stream pipeline and injected faults never
//! leaves a counter worse than it found it. `usage` and `limit` read and
//! change one scope; `seq next|get` claim and read its sequence numbers.

use std::time::{Duration, Instant};

use crate::deployed;
use e2e::counterctl::Counterctl;
use e2e::drain_deployed;
use e2e::faults::{Conflicting, Fault, FaultKind, FaultPlan, FaultProxy, Operation};
use e2e::history::History;
use hybrid_counter::audit::RepairMode;
use ops_cli::{Report, exit};

/// `counterctl load` with `workers` on `scopes` scopes named `<prefix>-<n>` for `seconds`,
/// with no limit in reach and no drain (the stream is the test's), then
/// `done` set: the traffic an operator's command meets on a busy stack.
/// `history`: records every call of the load, invocation and answer.
async fn busy_load(
    ctl: &Counterctl,
    prefix: &str,
    (scopes, workers): (u32, u32),
    delete_ratio: &str,
    seconds: u64,
    done: &std::sync::atomic::AtomicBool,
    history: Option<&History>,
) -> Result<Report, ops_cli::Error> {
    let (scopes, workers, seconds) = (scopes.to_string(), workers.to_string(), seconds.to_string());
    let args = vec![
        "load",
        "--scopes",
        &scopes,
        "--scope-prefix",
        prefix,
        "--workers",
        &workers,
        "--duration",
        &seconds,
        "--delete-ratio",
        delete_ratio,
        "--limit",
        "100000",
        "--drain-timeout",
        "0",
    ];
    let observer = history.map(|h| std::sync::Arc::new(h.clone()) as std::sync::Arc<_>);
    let report = ctl.run_observed(&args, observer).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    report
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
    let store =
        hybrid_counter_aws::DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let scope = hybrid_counter::Scope::new("load-1").unwrap();
    hybrid_counter::RequestStore::add_best_effort(&store, &scope, "best_effort", -1, 0)
        .await
        .unwrap();
    let drift = ctl.run(&["audit"]).await.unwrap();
    assert_eq!(drift.exit_code(), exit::FAILED, "{drift}");
    let text = drift.to_string();
    assert!(text.contains("load-1") && text.contains("best-effort"), "{text}");
    let Report::Audit(found) = &drift else { panic!() };
    assert_eq!(found.scopes.len(), 1);
    assert!(!found.defect, "an undercount is drift, not a defect");

    assert_eq!(
        ctl.run(&["audit", "--scope", "load-1"]).await.unwrap().exit_code(),
        exit::FAILED
    );

    // Raising BE waits until no request can be in flight: within the grace
    // period after the scope's last write it is held back, with the reason.
    let early = ctl.run(&["audit", "--repair"]).await.unwrap();
    assert!(
        early.to_string().contains("NOT repaired") && early.to_string().contains("in flight"),
        "{early}"
    );
    // The load is over: a short grace is enough (nothing is in flight).
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let dry = ctl.run(&["audit", "--dry-run", "--grace", "1"]).await.unwrap();
    assert!(dry.to_string().contains("would repair: best_effort := "), "{dry}");
    let repair = ctl.run(&["audit", "--repair", "--grace", "1"]).await.unwrap();
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
    // Sequence numbers live beside the counters and never count as usage.
    for expected in [1, 2] {
        let Report::Seq(next) = ctl.run(&["seq", "next", "acct-0", "--owner", "inv"]).await.unwrap() else {
            panic!()
        };
        assert_eq!((next.number, next.claimed), (expected, true), "{next}");
    }
    let Report::Seq(last) = ctl.run(&["seq", "get", "acct-0"]).await.unwrap() else {
        panic!()
    };
    assert_eq!((last.number, last.claimed), (2, false));
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
    let store =
        hybrid_counter_aws::DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
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

/// `counterctl audit --repair` run again and again for 30 s while
/// `counterctl load` writes three scopes, the deployed mappings play the
/// stream (and DLQ1) in process, and a fault proxy between all of them and
/// the emulator injects 500s before and after apply, throttling and
/// transaction conflicts. Meanwhile a sampler takes consistent looks at each
/// scope (its counters unchanged while its items were counted) and never
/// finds best-effort BE above live. After the drain, one more repair and
/// the audit finds no drift, and DLQ1 is empty.
#[tokio::test]
async fn audit_repair_beside_load_faults_and_the_stream_never_leaves_a_counter_worse() {
    const LOAD_SECONDS: u64 = 30;
    let (emulator, _, config) = deployed().await;
    let dynamodb = |name| Operation::dynamodb(name);
    let plan = FaultPlan::from_env("audit_repair_beside_load")
        .random(dynamodb("PutItem"), Fault::FailBefore, 0.02)
        .random(dynamodb("PutItem"), Fault::ApplyThenFail, 0.02)
        .random(dynamodb("UpdateItem"), Fault::ApplyThenFail, 0.03)
        .random(dynamodb("UpdateItem"), Fault::Throttle, 0.04)
        .random(dynamodb("Query"), Fault::Throttle, 0.02)
        .random(
            dynamodb("TransactWriteItems"),
            Fault::TransactionConflict(Conflicting::One),
            0.08,
        )
        .random(dynamodb("TransactWriteItems"), Fault::ApplyThenFail, 0.03);
    let seed = plan.seed();
    let proxy = FaultProxy::start(&emulator.endpoint, plan);
    let ctl = Counterctl::at(&proxy.endpoint);
    let runner = e2e::in_process_runner(&proxy.endpoint, &config).await;
    let store =
        hybrid_counter_aws::DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let scopes: Vec<hybrid_counter::Scope> = (0..3).map(|n| crate::scope(&format!("busy-{n}"))).collect();
    let load_done = std::sync::atomic::AtomicBool::new(false);
    let started = Instant::now();

    let history = History::new();
    let load = busy_load(&ctl, "busy", (3, 4), "0.4", LOAD_SECONDS, &load_done, Some(&history));
    let audits = async {
        let (mut runs, mut failed, mut repaired, mut held_back) = (0, 0, 0, 0);
        while !load_done.load(std::sync::atomic::Ordering::SeqCst) {
            match ctl.run(&["audit", "--repair", "--attempts", "3"]).await {
                Ok(Report::Audit(audit)) => {
                    runs += 1;
                    repaired += audit.scopes.iter().filter(|s| s.repaired).count();
                    held_back += audit.scopes.iter().filter(|s| s.held_back()).count();
                }
                Ok(other) => panic!("audit answered {other}"),
                // A request that failed after the SDK's retries: the
                // audit stops and writes nothing more.
                Err(_) => failed += 1,
            }
        }
        (runs, failed, repaired, held_back)
    };
    let sampler = async {
        let (mut looks, mut torn) = (0, 0);
        while !load_done.load(std::sync::atomic::Ordering::SeqCst) {
            for s in &scopes {
                let look = e2e::audit(&store, s, RepairMode::None, 3, hybrid_counter::now_millis())
                    .await
                    .unwrap();
                // Only a look whose counters did not move while the items
                // were counted says anything about BE against live.
                if look.not_repaired.is_some() {
                    torn += 1;
                    continue;
                }
                looks += 1;
                assert!(
                    look.best_effort <= look.counts.live as i64,
                    "seed {seed}: best-effort above live under load: {look:?}"
                );
                assert!(!look.has_defect(), "seed {seed}: {look:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (looks, torn)
    };
    let ((load, (runs, failed, repaired, held_back), (looks, torn)), played) =
        e2e::run_beside(&runner, async { tokio::join!(load, audits, sampler) }).await;
    let played = played.expect("the runner plays the mappings");
    let Report::Load(load) = load.expect("load runs to the end") else {
        panic!("load report expected")
    };
    let elapsed = started.elapsed();
    let stats = proxy.stats();
    eprintln!(
        "audit_repair_beside_load: seed {seed}, {:.1} s; load {} ops ({} created, {} deleted); {runs} audit --repair \
         runs ({failed} failed on a request, {repaired} scope repairs written, {held_back} held back); {looks} \
         consistent looks ({torn} torn); stream: {played}\n{stats}",
        elapsed.as_secs_f64(),
        load.operations,
        load.created,
        load.deleted
    );
    assert!(elapsed >= Duration::from_secs(LOAD_SECONDS), "{elapsed:?}");
    assert!(runs >= 3, "seed {seed}: only {runs} audits ran beside the load");
    // Under continuous writes most looks are torn (counters moved while the
    // items were counted) and say nothing; how many are consistent depends on
    // the machine's load, so the test asks only that the sampler ran and
    // that BE was checked against live a few times.
    assert!(
        looks + torn >= 10,
        "seed {seed}: the sampler looked only {} times",
        looks + torn
    );
    assert!(looks >= 3, "seed {seed}: only {looks} consistent looks");
    stats.assert_injected(&[
        FaultKind::FailBefore,
        FaultKind::ApplyThenFail,
        FaultKind::Throttle,
        FaultKind::TransactionConflict,
    ]);

    // The drain, without faults; then one repair after the load (a short
    // grace: nothing is in flight any more) and a clean audit.
    proxy.set_enabled(false);
    drain_deployed(&emulator.endpoint, &config).await;
    // Every answer the load heard against the items and EC, before the
    // repair after the load.
    let direct = aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await);
    for s in &scopes {
        let checked = history
            .assert_kept(
                (&store, &direct, &config.resources_table),
                s,
                None,
                &format!("seed {seed}"),
            )
            .await;
        assert!(
            checked.acknowledged_creates > 0,
            "seed {seed}, {s}: the load's history proved nothing: {checked}"
        );
        eprintln!("audit_repair_beside_load: {s}: history: {checked}");
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let repair = ctl.run(&["audit", "--repair", "--grace", "1"]).await.unwrap();
    let Report::Audit(repair) = &repair else { panic!() };
    assert!(!repair.defect, "seed {seed}: {repair}");
    let after = ctl.run(&["audit"]).await.unwrap();
    assert_eq!(
        after.exit_code(),
        exit::SUCCESS,
        "seed {seed}: zero drift after the drain: {after}"
    );
    let Report::Audit(after) = &after else { panic!() };
    // A request answered with an error may still have been applied (a 500
    // after the write): each moves the live count by one at most.
    let ambiguous: u64 = load.errors.values().sum();
    let expected = load.created - load.deleted;
    assert!(
        after.totals.live.abs_diff(expected) <= ambiguous,
        "seed {seed}: live {} against {expected} answered, {ambiguous} errors: {after}",
        after.totals.live
    );
    assert_eq!((after.totals.pending_create, after.totals.pending_delete), (0, 0));
    let sqs = aws_sdk_sqs::Client::new(&emulator.sdk_config().await);
    let status = ctl.status().await.unwrap();
    let dlq1 = status.outputs[stack::outputs::DLQ1_URL].clone();
    assert_eq!(
        e2e::queue_depth(&sqs, &dlq1).await,
        (0, 0),
        "seed {seed}: DLQ1 (visible, in flight) after the drain"
    );
}

/// Issue 26: `audit --scope <hot> --repair` in a loop, and the drift check
/// (the drift-check function's run and metric), beside 8 writers on one hot
/// scope while the stream counts them, with no fault injected. Nothing
/// drifts: a count the stream moved while it was read is in motion (no
/// finding), a best-effort counter behind a create still in flight is held
/// back (listed, never written), and no drift-check run publishes a drifted
/// scope. After the drain the scope audits clean and EC equals the live
/// items.
#[tokio::test]
async fn audits_and_drift_checks_beside_a_busy_scope_report_no_drift_when_there_is_none() {
    const LOAD_SECONDS: u64 = 20;
    let (emulator, ctl, config) = deployed().await;
    let runner = e2e::in_process_runner(&emulator.endpoint, &config).await;
    let store =
        hybrid_counter_aws::DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let hot = "hot-0";
    let load_done = std::sync::atomic::AtomicBool::new(false);
    let busy = || !load_done.load(std::sync::atomic::Ordering::SeqCst);

    let load = busy_load(&ctl, "hot", (1, 8), "0.3", LOAD_SECONDS, &load_done, None);
    let audits = async {
        let (mut runs, mut in_motion) = (0, 0);
        while busy() {
            let report = ctl
                .run(&["audit", "--scope", hot, "--repair"])
                .await
                .expect("audit runs");
            let Report::Audit(audit) = &report else {
                panic!("audit report expected")
            };
            assert!(!audit.defect, "{report}");
            // A count the stream moved while it was read is in motion: no
            // finding. What is reported is confirmed and held back (a
            // request may still be in flight), never written.
            for scope in &audit.scopes {
                assert!(
                    scope.held_back() && !scope.repaired,
                    "drift that is not there, or a repair, beside the load: {report}"
                );
            }
            runs += 1;
            in_motion += audit.scopes.iter().filter(|s| s.held_back()).count();
        }
        (runs, in_motion)
    };
    let drift_checks = async {
        let (mut runs, mut held_back) = (0, 0);
        while busy() {
            let outcome = hybrid_counter::audit::drift::DriftCheck::new(100_000)
                .run(&store, &config, &hybrid_counter::Clock::system())
                .await
                .expect("the drift check runs");
            let mut metrics = hybrid_counter::metrics::Metrics::new("hc-e2e");
            drift_check::add_run(&mut metrics, &outcome.run);
            assert_eq!(
                metrics.value(hybrid_counter::metrics::Metric::DriftedScopes),
                Some(0.0),
                "the drift metric beside the load: {:?}",
                outcome.run
            );
            runs += 1;
            held_back += outcome.run.held_back;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (runs, held_back)
    };
    let ((load, (audits, in_motion), (checks, held_back)), played) =
        e2e::run_beside(&runner, async { tokio::join!(load, audits, drift_checks) }).await;
    let played = played.expect("the runner plays the mappings");
    let Report::Load(load) = load.expect("load runs to the end") else {
        panic!("load report expected")
    };
    eprintln!(
        "audits beside a busy scope: load {} ops ({} created, {} deleted); {audits} audit --repair runs \
         ({in_motion} in motion or held back); {checks} drift checks ({held_back} scopes held back); stream: {played}",
        load.operations, load.created, load.deleted
    );
    assert!(
        audits >= 2 && checks >= 2,
        "too few looks: {audits} audits, {checks} drift checks"
    );
    assert!(
        !load.errors.contains_key("Unavailable"),
        "no fault was injected: {:?}",
        load.errors
    );

    drain_deployed(&emulator.endpoint, &config).await;
    let after = ctl.run(&["audit", "--scope", hot]).await.unwrap();
    assert_eq!(after.exit_code(), exit::SUCCESS, "{after}");
    let Report::Audit(after) = &after else { panic!() };
    assert_eq!(after.totals.live, load.created - load.deleted, "{after}");
    let usage = hybrid_counter::RequestStore::read_counters(&store, &crate::scope(hot))
        .await
        .unwrap();
    assert_eq!(
        usage.eventual, after.totals.live as i64,
        "EC equals the live items after the drain"
    );
}
