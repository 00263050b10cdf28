//! The history check over concurrent clients on the emulator (issue 34,
//! item 3). Several clients create and delete a handful of ids of one
//! scope with a small limit through [`Counter`], while the stream handler
//! counts them as the event source mapping would, all through a fault
//! proxy that applies `PutItem`, `UpdateItem` and `TransactWriteItems` and
//! then answers 500. Every call's invocation and answer is recorded; after
//! the drain the history is held against the final items
//! ([`e2e::history::check`]): no acknowledged create lost, no acknowledged
//! delete undone, no strict overshoot, every item counted and EC exact.
//! The calls run in rounds; after each, the stream is drained, the history
//! checked, and only then the scope repaired (what an operator does after
//! the grace period), so that slots kept by ambiguous strict reservations
//! do not end the test's admissions early.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::Kit;
use e2e::faults::{Conflicting, Fault, FaultKind, FaultPlan, FaultProxy};
use e2e::history::History;
use hybrid_counter::audit::RepairMode;
use hybrid_counter::config::Admission;
use hybrid_counter::stream::Processor;
use hybrid_counter::{Counter, Error};
use hybrid_counter_aws::DynamoStore;

use crate::{NOW, id, scope};
use e2e::mapping::{Deliveries, PROCESSOR_BACKOFF, deliver_like_a_mapping, get, put, query, transact, update};

const LIMIT: u64 = 4;
const CLIENTS: u64 = 4;
/// Rounds of calls; between two, the stream is drained and the scope
/// repaired, as an operator's `audit --repair` after the grace period
/// gives back the slots that ambiguous reservations kept (strict).
const ROUNDS: usize = 8;
const CALLS_PER_ROUND: usize = 20;
/// Ids per scope: few, so creates and deletes of one id overlap.
const IDS: usize = 8;

async fn concurrent_clients_keep_every_promise(admission: Admission, test: &str) {
    let started = Instant::now();
    let mut kit = Kit::start(LIMIT).await;
    let plan = FaultPlan::from_env(test);
    let seed = plan.seed();
    // One applied-then-500 on each write for sure, then at random; puts
    // held now and then, so a re-send (there must be none) would land
    // after other clients and the stream acted on the item.
    let plan = plan
        .next(put(), Fault::ApplyThenFail, 1)
        .next(update(), Fault::ApplyThenFail, 1)
        .next(transact(), Fault::ApplyThenFail, 1)
        .random(put(), Fault::ApplyThenFail, 0.12)
        .random(put(), Fault::FailBefore, 0.03)
        .random(put(), Fault::Delay(Duration::from_millis(300)), 0.15)
        .random(update(), Fault::ApplyThenFail, 0.04)
        .bursts(update(), Fault::Throttle, 0.03, 2)
        .random(transact(), Fault::ApplyThenFail, 0.12)
        .random(transact(), Fault::TransactionConflict(Conflicting::One), 0.08)
        .random(get(), Fault::FailBefore, 0.03)
        .random(query(), Fault::Throttle, 0.03);
    let proxy = FaultProxy::start(&kit.emulator.endpoint, plan);
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&proxy.sdk_config().await), &kit.config)
        .with_admission(admission);
    let direct = kit.store.clone().with_admission(admission);
    let counter = Counter::new(store.clone(), LIMIT)
        .with_admission(admission)
        .with_seed(seed);
    let processor = Processor::new(store).with_seed(seed).with_backoff(PROCESSOR_BACKOFF);
    let history = History::new();
    let s = scope("history");
    let mut deliveries = Deliveries::default();
    // The audits' defects, asserted after the history check, whose trace
    // says more.
    let mut defects = Vec::new();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut checked = None;
    for round in 0..ROUNDS as u64 {
        let done = AtomicBool::new(false);
        let clients = async {
            let mut tasks = tokio::task::JoinSet::new();
            for client in 0..CLIENTS {
                let (history, counter, s) = (history.clone(), counter.clone(), s.clone());
                tasks.spawn(async move {
                    let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(round * CLIENTS + client));
                    for _ in 0..CALLS_PER_ROUND {
                        let i = id(&format!("w{}", rng.usize(..IDS)));
                        let answer = if rng.f64() < 0.6 {
                            history.create(&counter, &s, &i, NOW).await.map(drop)
                        } else {
                            history.delete(&counter, &s, &i, NOW).await
                        };
                        if let Err(err @ Error::InvalidInput(_)) = answer {
                            panic!("seed {seed}: {err}");
                        }
                    }
                });
            }
            tasks.join_all().await;
            done.store(true, Ordering::SeqCst);
        };
        // The stream, through the proxy, while the clients run.
        let stream = async {
            loop {
                let finished = done.load(Ordering::SeqCst);
                let records = kit.new_records().await;
                if records.is_empty() {
                    if finished {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                deliver_like_a_mapping(&processor, &kit, &[], &records, &mut rng, seed, &mut deliveries).await;
            }
        };
        tokio::join!(clients, stream);
        kit.drain().await;
        // The history so far against the items and EC, before the repair
        // (which must have nothing of theirs to mend).
        let unproxied = (&direct, &kit.dynamodb, kit.config.resources_table.as_str());
        let strict = admission.is_strict().then_some(LIMIT);
        let context = format!("seed {seed}, {admission:?}, round {round}");
        checked = Some(history.assert_kept(unproxied, &s, strict, &context).await);
        let repair = e2e::audit(&direct, &s, RepairMode::Apply, 5, e2e::after_grace())
            .await
            .expect("repair the scope");
        if repair.has_defect() {
            defects.push(format!("round {round}: {repair:?}"));
        }
    }

    let checked = checked.expect("a round ran");
    assert!(defects.is_empty(), "seed {seed}, {admission:?}: {defects:#?}");
    let stats = proxy.stats();
    for op in [put(), update(), transact()] {
        assert!(
            stats.injected(&op, FaultKind::ApplyThenFail) > 0,
            "seed {seed}: no applied-then-500 on {op}\n{stats}"
        );
    }
    assert!(
        checked.acknowledged_creates > 0 && checked.acknowledged_deletes > 0 && checked.unknown > 0,
        "seed {seed}: the history proved little: {checked}"
    );
    eprintln!(
        "{test}: seed {seed}, {:.1} s; history: {checked}; stream {deliveries:?}\n{stats}",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
async fn concurrent_strict_clients_beside_the_stream_keep_every_promise_of_the_history_under_ambiguous_faults() {
    concurrent_clients_keep_every_promise(Admission::Strict, "history (strict)").await;
}

#[tokio::test]
async fn concurrent_best_effort_clients_beside_the_stream_keep_every_promise_of_the_history_under_ambiguous_faults() {
    concurrent_clients_keep_every_promise(Admission::BestEffort, "history (best effort)").await;
}
