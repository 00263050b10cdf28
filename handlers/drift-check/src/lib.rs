//! The drift check's Lambda glue: a scheduled event (its content is not
//! read) runs one [`DriftCheck`] over the store, logs what it found with
//! the run's cost, publishes the drifted scopes as the metric
//! `DriftedScopes` (embedded metric format, `hybrid_counter::metrics`; the
//! stack's drift alarm watches it), and answers with the run's record. Everything the check
//! decides (which scopes, the budget, the cursor, drifted or held back) is
//! the core's `hybrid_counter::audit::drift`; it never repairs. `main.rs`
//! wires it to the runtime; the tests call the same function.

use hybrid_counter::audit::drift::DriftRun;
use hybrid_counter::audit::drift::{DEFAULT_BUDGET, DriftCheck, DriftOutcome, DriftStore};
use hybrid_counter::config::ENV_DRIFT_CHECK_BUDGET;
use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter::{Clock, CounterConfig};
use hybrid_counter_aws::info_with_cost;
use hybrid_counter_aws::lambda::{CostWatch, emit_metrics};
use lambda_runtime::LambdaEvent;
use tracing::warn;

/// The function's own settings, from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Items one run may read (`DRIFT_CHECK_BUDGET`, default
    /// [`DEFAULT_BUDGET`]).
    pub budget: u64,
}

impl Settings {
    /// From the environment as `lookup` reads it; a bad budget is an error
    /// at start-up, by name.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, lambda_runtime::Error> {
        let budget = match lookup(ENV_DRIFT_CHECK_BUDGET) {
            None => DEFAULT_BUDGET,
            Some(raw) if raw.trim().is_empty() => DEFAULT_BUDGET,
            Some(raw) => raw.trim().parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("environment variable {ENV_DRIFT_CHECK_BUDGET} must be a positive integer, got {raw:?}")
            })?,
        };
        Ok(Self { budget })
    }
}

/// The run's metrics: the drifted scopes, recorded also when there are
/// none, so the drift alarm sees a data point (and goes back to `OK`).
pub fn add_run(metrics: &mut Metrics, run: &DriftRun) {
    metrics.add(Metric::DriftedScopes, run.drifted as f64);
}

/// Runs the check once and answers with its outcome. A failure to read the
/// table or the state fails the invocation (the next tick starts from the
/// same cursor; nothing is published, the errors alarm sees it); a scope
/// that cannot be read is reported in the outcome.
pub async fn handle_drift_check<S: DriftStore>(
    store: &S,
    config: &CounterConfig,
    settings: &Settings,
    clock: &Clock,
    _event: LambdaEvent<serde_json::Value>,
) -> Result<DriftOutcome, lambda_runtime::Error> {
    let watch = CostWatch::start(store);
    let outcome = DriftCheck::new(settings.budget).run(store, config, clock).await?;
    let run = &outcome.run;
    let mut metrics = Metrics::from_env();
    add_run(&mut metrics, run);
    emit_metrics(&metrics);
    info_with_cost!(
        watch.cost(store),
        scopes_checked = run.scopes_checked,
        drifted = run.drifted,
        defects = run.defects,
        held_back = run.held_back,
        failed = run.failed,
        items_read = run.items_read,
        budget = run.budget,
        completed_pass = run.completed_pass,
        recorded = outcome.recorded,
        "drift check"
    );
    if run.drifted > 0 {
        warn!(scopes = ?run.drifted_scopes, "drift found: run `counterctl audit --scope <scope> --repair`");
    }
    if !outcome.recorded {
        warn!("another run recorded its progress first; this run's cursor was not stored");
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hybrid_counter::config::Admission;
    use hybrid_counter::memory::MemoryStore;
    use hybrid_counter::{Counter, ResourceId, Scope};
    use lambda_runtime::Context;

    use super::*;

    fn env(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        let pairs = pairs.to_vec();
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn the_drifted_scopes_are_published_also_when_none() {
        for drifted in [0, 3] {
            let mut metrics = Metrics::new("hc-dev");
            add_run(
                &mut metrics,
                &DriftRun {
                    drifted,
                    ..DriftRun::default()
                },
            );
            assert_eq!(metrics.value(Metric::DriftedScopes), Some(drifted as f64));
            let document = metrics.document(0).unwrap();
            assert_eq!(document["Stack"], "hc-dev");
            assert_eq!(document["DriftedScopes"], drifted as f64);
        }
    }

    #[test]
    fn the_budget_defaults_and_a_bad_one_is_refused_by_name() {
        assert_eq!(Settings::from_lookup(env(&[])).unwrap().budget, DEFAULT_BUDGET);
        assert_eq!(
            Settings::from_lookup(env(&[(ENV_DRIFT_CHECK_BUDGET, "250")]))
                .unwrap()
                .budget,
            250
        );
        for bad in ["0", "-3", "lots"] {
            let err = Settings::from_lookup(env(&[(ENV_DRIFT_CHECK_BUDGET, bad)])).unwrap_err();
            assert!(err.to_string().contains(ENV_DRIFT_CHECK_BUDGET), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn a_scheduled_event_reports_the_drifted_scope_and_records_the_run() {
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::new(store.clone(), 10);
        let scope = Scope::new("acct").unwrap();
        counter
            .create(&scope, &ResourceId::new("a").unwrap(), Default::default(), 0)
            .await
            .unwrap();
        // The stream never counted it, yet EC says 3.
        store.set_counter("acct", "eventual", 3);
        let config = CounterConfig {
            resources_table: "r".into(),
            counters_table: "c".into(),
            default_limit: None,
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Admission::BestEffort,
        };
        let event = LambdaEvent::new(
            serde_json::json!({"source": "aws.events", "detail-type": "Scheduled Event"}),
            Context::default(),
        );
        let outcome = handle_drift_check(
            &*store,
            &config,
            &Settings { budget: 100 },
            &Clock::new(|| 1_000_000),
            event,
        )
        .await
        .unwrap();
        assert_eq!(outcome.run.drifted_scopes, ["acct"]);
        assert!(outcome.recorded);
        assert_eq!(store.tables().drift_state.unwrap().last_run, Some(outcome.run));
        assert_eq!(store.counter("acct", "eventual"), 3, "report-only");
    }
}
