//! Strict admission against the emulator: a create reserves its slot with a
//! conditional best-effort increment before the put, so concurrent creators
//! fill a scope exactly to its limit; failures only over-reserve; the audit
//! reads BE the other way round (`BE >= live`) and lowers an over-reserved BE
//! only once no reservation can be in flight; a stack deployed with
//! `AdmissionMode=strict` configures the API function, `load` and `audit`.

use std::sync::Arc;

use e2e::Kit;
use e2e::counterctl::Counterctl;
use hybrid_counter::audit::Finding;
use hybrid_counter::audit::RepairMode;
use hybrid_counter::best_effort::{Fence, Raise, Reservation};
use hybrid_counter::error::StoreError;
use hybrid_counter::{Admission, AuditStore, Counter, CounterConfig, Error, RequestStore};
use hybrid_counter_aws::DynamoStore;
use ops_cli::{Report, exit};
use serde_dynamo::Item;

use crate::{NOW, id, scope};

fn strict_store(kit: &Kit) -> DynamoStore {
    kit.store.clone().with_admission(Admission::Strict)
}

fn strict(kit: &Kit, limit: u64) -> Counter<DynamoStore> {
    Counter::new(strict_store(kit), limit).with_admission(Admission::Strict)
}

/// `creators` creates of distinct ids in one scope, released together;
/// returns how many were admitted. Any outcome but success or
/// `LimitExceeded` fails the test.
async fn race(counter: &Counter<DynamoStore>, scope_name: &str, creators: usize) -> usize {
    let start = Arc::new(tokio::sync::Barrier::new(creators));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..creators {
        let (counter, start) = (counter.clone(), start.clone());
        let s = scope(scope_name);
        tasks.spawn(async move {
            start.wait().await;
            counter.create(&s, &id(&format!("w{n}")), Item::default(), NOW).await
        });
    }
    let mut admitted = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("creator task") {
            Ok(created) => {
                assert!(created.best_effort_counted);
                admitted += 1;
            }
            Err(Error::LimitExceeded { .. }) => {}
            Err(other) => panic!("a racing create failed outside the contract: {other}"),
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_creators_fill_exactly_the_limit_in_strict_admission() {
    let mut kit = Kit::start(5).await;
    let counter = strict(&kit, 5);
    let store = strict_store(&kit);
    for round in 0..3 {
        let name = format!("race-{round}");
        let s = scope(&name);
        assert_eq!(race(&counter, &name, 16).await, 5, "round {round}");
        let counts = kit.counts(&s).await;
        let usage = counter.usage(&s).await.unwrap();
        assert_eq!((counts.live, usage.best_effort), (5, 5), "round {round}");
    }
    kit.drain().await;
    for round in 0..3 {
        let audit = e2e::audit(&store, &scope(&format!("race-{round}")), RepairMode::None, 3, NOW)
            .await
            .unwrap();
        assert!(audit.findings.is_empty(), "{audit:?}");
        assert_eq!((audit.counts.live, audit.best_effort, audit.eventual), (5, 5, 5));
    }

    // The same race in best-effort admission may overshoot (DESIGN §5):
    // reported, not asserted; its own invariant still holds.
    let best_effort = Counter::new(kit.store.clone(), 5);
    let admitted = race(&best_effort, "race-best-effort", 16).await;
    let (counts, _) = kit.assert_invariants(&scope("race-best-effort")).await;
    eprintln!(
        "best-effort admission: {admitted} of 16 concurrent creators admitted, {} live items for a limit of 5",
        counts.live
    );
}

#[tokio::test]
async fn the_reservation_is_a_conditional_increment_that_stamps_the_counter() {
    let kit = Kit::start(2).await;
    let s = scope("acct");
    assert_eq!(
        kit.store
            .reserve_best_effort(&s, "best_effort", slot(0, Fence::Unfenced), NOW)
            .await,
        Err(StoreError::ConditionFailed),
        "a zero limit has no slot, not even the first"
    );
    kit.store
        .reserve_best_effort(&s, "best_effort", slot(2, Fence::Unfenced), NOW)
        .await
        .unwrap();
    kit.store
        .reserve_best_effort(&s, "best_effort", slot(2, Fence::Unfenced), NOW + 5)
        .await
        .unwrap();
    assert_eq!(
        kit.store
            .reserve_best_effort(&s, "best_effort", slot(2, Fence::Unfenced), NOW + 9)
            .await,
        Err(StoreError::ConditionFailed)
    );
    let items = kit.store.counter_items(&s).await.unwrap();
    let be = items.iter().find(|i| i.name == "best_effort").expect("BE item");
    assert_eq!(
        (be.count, be.version, be.updated_at),
        (2, 2, NOW + 5),
        "a refused reservation writes nothing"
    );
    // A larger limit (an override) has room again.
    kit.store
        .reserve_best_effort(&s, "best_effort", slot(3, Fence::Unfenced), NOW + 10)
        .await
        .unwrap();
    assert_eq!(kit.store.read_counters(&s).await.unwrap().best_effort, 3);
}

fn slot(quota: u64, fence: Fence) -> Reservation {
    Reservation { quota, fence }
}

/// The fence of issue 34 D2 as DynamoDB evaluates it: a raise moves every
/// shard it names to the next epoch in one transaction (refused when one is
/// already past the epoch it read), a reservation is conditioned on the
/// epoch its read saw, and one on a shard read absent creates it at that
/// epoch only while it is still absent.
#[tokio::test]
async fn a_raise_fences_out_reservations_read_before_it_on_the_emulator() {
    let kit = Kit::start(10).await;
    let s = scope("acct");
    let (one, two) = ("best_effort#0", "best_effort#1");
    kit.store
        .reserve_best_effort(&s, one, slot(5, Fence::Unfenced), NOW)
        .await
        .unwrap();
    let raise = Raise {
        adds: [(one.to_owned(), 2), (two.to_owned(), 0)].into(),
        from: 0,
    };
    assert_eq!(kit.store.raise_best_effort(&s, &raise, NOW + 1).await, Ok(true));
    assert_eq!(
        kit.store.raise_best_effort(&s, &raise, NOW + 2).await,
        Ok(false),
        "a second raise from the same read never adds twice"
    );
    let read = kit.store.read_counters(&s).await.unwrap();
    assert_eq!(read.best_effort_items[one], 3);
    assert_eq!(
        read.best_effort_epochs.get(two),
        Some(&1),
        "the raise created #1, fenced"
    );
    assert_eq!(
        kit.store
            .reserve_best_effort(&s, one, slot(5, Fence::Unfenced), NOW + 3)
            .await,
        Err(StoreError::ConditionFailed),
        "a reservation read before the raise"
    );
    assert_eq!(
        kit.store
            .reserve_best_effort(&s, two, slot(5, Fence::Absent(1)), NOW + 3)
            .await,
        Err(StoreError::ConditionFailed),
        "#1 read absent, created since"
    );
    kit.store
        .reserve_best_effort(&s, one, slot(5, Fence::At(1)), NOW + 4)
        .await
        .unwrap();
    kit.store
        .reserve_best_effort(&s, "best_effort#2", slot(5, Fence::Absent(1)), NOW + 5)
        .await
        .unwrap();
    let read = kit.store.read_counters(&s).await.unwrap();
    assert_eq!(read.best_effort, 5);
    assert_eq!(read.best_effort_epochs.get("best_effort#2"), Some(&1));
}

#[tokio::test]
async fn duplicates_and_deletes_give_their_slots_back() {
    let kit = Kit::start(3).await;
    let counter = strict(&kit, 3);
    let s = scope("acct");
    let be = || async { counter.usage(&s).await.unwrap().best_effort };
    for n in 0..2 {
        counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    // A duplicate below the limit reserves a slot, meets the item, and
    // gives the slot back.
    let err = counter.create(&s, &id("w0"), Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists), "{err}");
    assert_eq!(be().await, 2, "the duplicate's reservation was given back");
    counter.create(&s, &id("w2"), Item::default(), NOW).await.unwrap();
    let err = counter.create(&s, &id("w3"), Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { limit: 3, .. }), "{err}");
    assert_eq!(kit.counts(&s).await.live, 3);

    counter.delete(&s, &id("w0"), NOW).await.unwrap();
    assert_eq!((kit.counts(&s).await.live, be().await), (2, 2));
    assert!(matches!(counter.delete(&s, &id("w0"), NOW).await, Err(Error::NotFound)));
    assert_eq!(be().await, 2, "repeated deletes give nothing back");
    counter.create(&s, &id("w3"), Item::default(), NOW).await.unwrap();

    // The reservation honours the scope's limit override.
    kit.store.set_limit(&s, Some(4), NOW).await.unwrap();
    counter.create(&s, &id("w4"), Item::default(), NOW).await.unwrap();
    let err = counter.create(&s, &id("w5"), Item::default(), NOW).await.unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { limit: 4, .. }), "{err}");
    assert_eq!((kit.counts(&s).await.live, be().await), (4, 4));
}

#[tokio::test]
async fn a_strict_audit_raises_at_once_and_lowers_only_after_the_grace_period() {
    let mut kit = Kit::start(10).await;
    let counter = strict(&kit, 10);
    let store = strict_store(&kit);
    let s = scope("acct");
    for n in 0..3 {
        counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    kit.drain().await;
    let be = || async { counter.usage(&s).await.unwrap().best_effort };

    // Two slots not given back (creates that failed ambiguously, or still
    // in flight): over-reserved, the safe side, left alone for now.
    store.add_best_effort(&s, "best_effort", 2, NOW).await.unwrap();
    let early = e2e::audit(&store, &s, RepairMode::Apply, 3, NOW + 1_000).await.unwrap();
    assert_eq!(
        early.findings,
        vec![Finding::OverReserved {
            best_effort: 5,
            live: 3
        }]
    );
    assert!(early.has_drift() && !early.has_defect(), "{early:?}");
    assert!(!early.repaired, "{early:?}");
    assert!(
        early
            .not_repaired
            .as_deref()
            .is_some_and(|why| why.contains("in flight")),
        "{early:?}"
    );
    assert_eq!(be().await, 5, "a held-back repair writes nothing");
    // Best-effort admission reads the same state as a defect.
    let other_view = e2e::audit(&kit.store, &s, RepairMode::None, 3, NOW).await.unwrap();
    assert_eq!(
        other_view.findings,
        vec![Finding::BestEffortAboveLive {
            best_effort: 5,
            live: 3
        }]
    );
    assert!(other_view.has_defect());

    let later = e2e::after_grace();
    let dry = e2e::audit(&store, &s, RepairMode::DryRun, 3, later).await.unwrap();
    assert_eq!(dry.repair.and_then(|r| r.best_effort), Some(3), "{dry:?}");
    assert_eq!(dry.not_repaired, None);
    assert_eq!(be().await, 5, "a dry run writes nothing");
    let fixed = e2e::audit(&store, &s, RepairMode::Apply, 3, later).await.unwrap();
    assert!(fixed.repaired, "{fixed:?}");
    assert_eq!(be().await, 3);

    // Under-reserved: the defect of strict admission, raised at once, even
    // right after a write.
    store.add_best_effort(&s, "best_effort", -2, later).await.unwrap();
    let under = e2e::audit(&store, &s, RepairMode::Apply, 3, later).await.unwrap();
    assert_eq!(
        under.findings,
        vec![Finding::UnderReserved {
            best_effort: 1,
            live: 3
        }]
    );
    assert!(under.has_defect() && under.repaired, "{under:?}");
    assert_eq!(be().await, 3);
    let clean = e2e::audit(&store, &s, RepairMode::None, 1, later).await.unwrap();
    assert!(clean.findings.is_empty(), "{clean:?}");
}

#[tokio::test]
async fn a_stack_deployed_strict_configures_the_api_load_and_audit() {
    let emulator = e2e::Emulator::start();
    let ctl = Counterctl::new(&emulator);
    let report = ctl.deploy(&["AdmissionMode=strict"]).await;
    assert!(report.succeeded(), "{report}");
    let sdk = emulator.sdk_config().await;

    // The API function is configured for strict admission.
    let function = aws_sdk_lambda::Client::new(&sdk)
        .get_function_configuration()
        .function_name(&report.outputs[stack::outputs::API_FUNCTION])
        .send()
        .await
        .unwrap();
    let variables = function
        .environment()
        .and_then(|e| e.variables())
        .cloned()
        .unwrap_or_default();
    assert_eq!(variables.get("ADMISSION_MODE").map(String::as_str), Some("strict"));
    let config = CounterConfig::from_lookup(|name| variables.get(name).cloned()).unwrap();
    assert_eq!(config.admission, Admission::Strict);

    // `load` runs the deployed mode: eight workers never overshoot.
    let load = ctl.load_one_scope(1, 40, "0", 3).await;
    assert_eq!((load.created, load.limit_exceeded), (3, 37), "{load:?}");
    assert!(load.overshoots.is_empty(), "{load:?}");

    // `audit` reads BE the strict way round.
    let clean = ctl.run(&["audit"]).await.unwrap();
    assert_eq!(clean.exit_code(), exit::SUCCESS, "{clean}");
    let Report::Audit(audit) = &clean else { panic!() };
    assert_eq!(audit.admission, Admission::Strict);
    assert!(clean.to_string().contains("strict admission"), "{clean}");

    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config);
    let s = hybrid_counter::Scope::new("load-0").unwrap();
    let now = hybrid_counter::now_millis();
    // A slot not given back, just now: drift, not a defect, and not lowered yet.
    store.add_best_effort(&s, "best_effort", 1, now).await.unwrap();
    let held = ctl.run(&["audit", "--repair"]).await.unwrap();
    assert_eq!(held.exit_code(), exit::FAILED, "{held}");
    let text = held.to_string();
    assert!(
        text.contains("over-reserved") && text.contains("NOT repaired"),
        "{text}"
    );
    let Report::Audit(found) = &held else { panic!() };
    assert!(!found.defect, "over-reserving is strict admission's safe side");
    assert_eq!(store.read_counters(&s).await.unwrap().best_effort, 4);
    // Once the scope's last write is older than the grace period, `--repair`
    // lowers it (a grace of 1 s here: the load is over, nothing is in flight).
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let repaired = ctl.run(&["audit", "--repair", "--grace", "1"]).await.unwrap();
    assert!(
        repaired.to_string().contains("repaired: best_effort := 3"),
        "{repaired}"
    );
    assert_eq!(ctl.run(&["audit"]).await.unwrap().exit_code(), exit::SUCCESS);
    // Under-reserving is the defect.
    store.add_best_effort(&s, "best_effort", -1, now).await.unwrap();
    let Report::Audit(under) = ctl.run(&["audit"]).await.unwrap() else {
        panic!()
    };
    assert!(under.defect, "{under:?}");
}
