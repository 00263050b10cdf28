//! The scheduled drift check on the emulator: deployed off by default, then
//! with a schedule; the local runner plays the schedule, the check finds a
//! counter made wrong on purpose without touching it, and `counterctl
//! status` shows the run.

use std::time::Duration;

use hybrid_counter::audit::drift::DriftStore;
use hybrid_counter::{AuditStore, Counter, keys};
use hybrid_counter_aws::DynamoStore;
use ops_cli::commands::drift_check::DriftCheckMode;
use serde_dynamo::Item;

use crate::{NOW, deployed, id, scope};

#[tokio::test]
async fn the_runners_scheduled_drift_check_finds_a_wrong_eventual_counter_and_status_shows_it() {
    let (emulator, ctl, config) = deployed().await;
    let status = ctl.status().await.unwrap();
    assert_eq!(status.drift_check.state, DriftCheckMode::Off, "{status}");
    assert!(status.to_string().contains("drift check off"), "{status}");

    let outputs = ctl.deploy(&["DriftCheckSchedule=rate(1 minute)"]).await.outputs;
    let function = outputs[stack::outputs::DRIFT_CHECK_FUNCTION].clone();
    let status = ctl.status().await.unwrap();
    assert_eq!(status.drift_check.state, DriftCheckMode::NeverRan, "{status}");

    // Two scopes, counted by the stream; then one's eventual counter is
    // set wrong, as a bug or a hand edit would.
    let sdk = emulator.sdk_config().await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config);
    let counter = Counter::new(store.clone(), 100);
    for s in ["fine", "broken"] {
        for i in ["a", "b"] {
            counter.create(&scope(s), &id(i), Item::default(), NOW).await.unwrap();
        }
    }
    e2e::drain_deployed(&ctl.endpoint, &config).await;
    let read = store.counter_items(&scope("broken")).await.unwrap();
    assert!(
        store
            .set_counters(&scope("broken"), &read, &[(keys::EVENTUAL_NAME.to_owned(), 7)], NOW)
            .await
            .unwrap()
    );

    let before = store.counter_items(&scope("broken")).await.unwrap();

    // The runner plays the deployed schedule: its first tick is at discovery.
    let runner = e2e::in_process_runner(&ctl.endpoint, &config).await;
    let recorded = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while store.drift_state().await.unwrap().is_none_or(|s| s.last_run.is_none()) {
            assert!(tokio::time::Instant::now() < deadline, "no drift check ran within 60 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let report = runner.run(recorded).await.unwrap();
    let played = &report.schedules[&function];
    assert_eq!(played.expression, "rate(1 minute)");
    assert_eq!((played.invocations, played.function_errors), (1, 0), "{report:?}");

    let status = ctl.status().await.unwrap();
    let check = &status.drift_check;
    assert_eq!(check.state, DriftCheckMode::Ran, "{status}");
    let run = check.last_run.as_ref().unwrap();
    assert_eq!(run.drifted_scopes, ["broken"], "{status}");
    assert_eq!((run.scopes_checked, run.defects, run.held_back), (2, 1, 0), "{status}");
    assert!(run.completed_pass && check.last_full_pass.is_some(), "{status}");
    assert!(!status.healthy(), "drift needs an operator: {status}");
    assert!(
        status
            .attention
            .iter()
            .any(|a| a.contains("--scope \"broken\" --repair")),
        "{status}"
    );
    let text = status.to_string();
    assert!(
        text.contains("rate(1 minute)") && text.contains("drifted: broken"),
        "{text}"
    );
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["drift_check"]["last_run"]["drifted_scopes"][0], "broken");
    assert_eq!(
        store.counter_items(&scope("broken")).await.unwrap(),
        before,
        "report-only: the check wrote no counter"
    );
    // The audit's Scan of the counters table does not take the check's
    // state item for a scope.
    match ctl.run(&["audit"]).await.unwrap() {
        ops_cli::report::Report::Audit(audit) => {
            assert_eq!(audit.scopes_checked, 2, "{audit}");
            let found: Vec<&str> = audit.scopes.iter().map(|s| s.scope.as_str()).collect();
            assert_eq!(found, ["broken"], "{audit}");
        }
        other => panic!("audit: {other:?}"),
    }
}
