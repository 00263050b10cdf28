//! Auditing and healing against the emulator: exact per-scope audits, the
//! segmented scan, and repairs that never clobber a concurrent writer.

use e2e::Kit;
use hybrid_counter::RequestStore;
use hybrid_counter::audit::Finding;
use hybrid_counter::audit::RepairMode;
use serde_dynamo::Item;

use crate::{NOW, id, scope};

async fn populated(items: usize, deletes: usize) -> Kit {
    let mut kit = Kit::start(1_000).await;
    let s = scope("acct");
    for n in 0..items {
        kit.counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
    }
    for n in 0..deletes {
        kit.counter.delete(&s, &id(&format!("w{n}")), NOW).await.unwrap();
    }
    kit.drain().await;
    kit
}

#[tokio::test]
async fn a_drained_scope_audits_clean() {
    let kit = populated(10, 3).await;
    let audit = e2e::audit(&kit.store, &scope("acct"), RepairMode::Apply, 3, NOW)
        .await
        .unwrap();
    assert!(audit.findings.is_empty(), "{audit:?}");
    assert_eq!((audit.counts.live, audit.eventual, audit.best_effort), (7, 7, 7));
    assert!(!audit.repaired && audit.repair.is_none());
}

#[tokio::test]
async fn a_lost_best_effort_update_is_found_and_raised_to_live_never_above() {
    let kit = populated(6, 0).await;
    let s = scope("acct");
    kit.store.add_best_effort(&s, "best_effort", -2, NOW).await.unwrap();
    // Right after the scope's writes the raise waits: a request may be in
    // flight between its put and its increment.
    let early = e2e::audit(&kit.store, &s, RepairMode::Apply, 3, NOW).await.unwrap();
    assert!(!early.repaired && early.held_back(), "{early:?}");
    let later = e2e::after_grace();
    let dry = e2e::audit(&kit.store, &s, RepairMode::DryRun, 3, later).await.unwrap();
    assert_eq!(
        dry.findings,
        vec![Finding::BestEffortBelowLive {
            best_effort: 4,
            live: 6
        }]
    );
    assert!(
        dry.has_drift() && !dry.has_defect(),
        "an undercount is drift, not a defect"
    );
    assert_eq!(dry.repair.and_then(|r| r.best_effort), Some(6));
    assert_eq!(
        kit.counter.usage(&s).await.unwrap().best_effort,
        4,
        "a dry run writes nothing"
    );
    let fixed = e2e::audit(&kit.store, &s, RepairMode::Apply, 3, later).await.unwrap();
    assert!(fixed.repaired, "{fixed:?}");
    let again = e2e::audit(&kit.store, &s, RepairMode::None, 3, later).await.unwrap();
    assert!(again.findings.is_empty(), "{again:?}");
    assert_eq!(kit.counter.usage(&s).await.unwrap().best_effort, 6);
}

#[tokio::test]
async fn a_broken_eventual_counter_is_drift_and_is_reset_to_the_processed_count() {
    let kit = populated(5, 1).await;
    let s = scope("acct");
    // Simulate a defect: an EC write outside a transaction.
    kit.dynamodb
        .update_item()
        .table_name(&kit.config.counters_table)
        .key("scope", aws_sdk_dynamodb::types::AttributeValue::S("acct".into()))
        .key("name", aws_sdk_dynamodb::types::AttributeValue::S("eventual#3".into()))
        .update_expression("ADD #c :d, #v :one")
        .expression_attribute_names("#c", "count")
        .expression_attribute_names("#v", "version")
        .expression_attribute_values(":d", aws_sdk_dynamodb::types::AttributeValue::N("5".into()))
        .expression_attribute_values(":one", aws_sdk_dynamodb::types::AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    let audit = e2e::audit(&kit.store, &s, RepairMode::Apply, 3, NOW).await.unwrap();
    assert!(audit.has_defect());
    assert!(audit.repaired, "{audit:?}");
    kit.assert_converged(&s).await;
    assert_eq!(kit.counter.usage(&s).await.unwrap().eventual, 4);
}

/// Writers and repairs on one clock, as in production: every repair that
/// would raise BE while a request may be between its two writes is held
/// back, so no interleaving leaves BE above live; once the scope is quiet
/// the raise is written.
#[tokio::test]
async fn a_repair_racing_a_writer_never_leaves_best_effort_above_live() {
    let kit = populated(8, 0).await;
    let s = scope("acct");
    let now = hybrid_counter::now_millis;
    kit.store.add_best_effort(&s, "best_effort", -3, now()).await.unwrap();
    let writer = async {
        for n in 0..8 {
            kit.counter.delete(&s, &id(&format!("w{n}")), now()).await.unwrap();
            kit.counter
                .create(&s, &id(&format!("new{n}")), Item::default(), now())
                .await
                .unwrap();
        }
    };
    let repairs = async {
        let mut outcomes = Vec::new();
        for _ in 0..6 {
            outcomes.push(e2e::audit(&kit.store, &s, RepairMode::Apply, 2, now()).await.unwrap());
            // A consistent look (counters unchanged while counting) mid-race.
            let look = e2e::audit(&kit.store, &s, RepairMode::None, 1, now()).await.unwrap();
            if look.not_repaired.is_none() {
                assert!(look.best_effort <= look.counts.live as i64, "{look:?}");
            }
        }
        outcomes
    };
    let ((), outcomes) = tokio::join!(writer, repairs);
    for audit in &outcomes {
        assert!(
            audit.repair.is_none_or(|r| r.best_effort.is_none()),
            "a BE raise was written while requests were in flight: {audit:?}"
        );
    }
    assert!(
        outcomes.iter().any(|a| a.held_back()),
        "the undercount was seen and held back: {outcomes:?}"
    );
    let (counts, snapshot) = kit.assert_invariants(&s).await;
    assert!(snapshot.best_effort <= counts.live as i64);
    let quiet = e2e::audit(&kit.store, &s, RepairMode::Apply, 3, e2e::after_grace())
        .await
        .unwrap();
    assert!(quiet.repaired, "{quiet:?}");
    let (counts, snapshot) = kit.assert_invariants(&s).await;
    assert_eq!(snapshot.best_effort, counts.live as i64);
}

#[tokio::test]
async fn the_segmented_scan_counts_every_scope() {
    let mut kit = Kit::start(1_000).await;
    for (scope_name, items) in [("a", 7), ("b", 3), ("c", 12)] {
        let s = scope(scope_name);
        for n in 0..items {
            kit.counter
                .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
                .await
                .unwrap();
        }
    }
    kit.counter.delete(&scope("c"), &id("w0"), NOW).await.unwrap();
    kit.drain().await;
    let pages = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = pages.clone();
    let counts = kit
        .store
        .scan_scope_counts(4, move |n| {
            seen.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        })
        .await
        .unwrap();
    let live: Vec<(String, u64)> = counts.iter().map(|(s, c)| (s.clone(), c.counts.live)).collect();
    assert_eq!(live, vec![("a".into(), 7), ("b".into(), 3), ("c".into(), 11)]);
    assert_eq!(pages.load(std::sync::atomic::Ordering::Relaxed), 21);
    let counters = kit.store.scan_counters().await.unwrap();
    assert_eq!(counters["c"].eventual, 11);
    assert_eq!(counters["a"].best_effort, 7);
}
