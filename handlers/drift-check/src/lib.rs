//! The drift check's Lambda glue: a scheduled event (its content is not
//! read) runs one [`DriftCheck`] over the store, logs what it found with
//! the run's cost, publishes the drifted scopes as the metric
//! `DriftedScopes` (embedded metric format, `hybrid_counter::metrics`; the
//! stack's drift alarm watches it), and answers with the run's record. Everything the check
//! decides (which scopes, the budget, the cursor, drifted or held back) is
//! the core's `hybrid_counter::audit::drift`; it never repairs. With a
//! limits file configured (`LIMITS_FILE_URI`), each run then compares the
//! overrides with it ([`limits`]), within the invocation's time left.
//! `main.rs` wires it to the runtime; the tests call the same function.

pub mod limits;

use std::time::{Duration, SystemTime};

use hybrid_counter::audit::drift::DriftRun;
use hybrid_counter::audit::drift::{DEFAULT_BUDGET, DriftCheck, DriftOutcome, DriftStore};
use hybrid_counter::config::{ENV_DRIFT_CHECK_BUDGET, ENV_LIMITS_FILE_URI};
use hybrid_counter::limits::drift::LimitsDrift;
use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter::{Clock, CounterConfig};
use hybrid_counter_aws::info_with_cost;
use hybrid_counter_aws::lambda::{CostWatch, emit_metrics};
use lambda_runtime::LambdaEvent;
use serde::Serialize;
use tracing::{error, warn};

/// The function's own settings, from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Items one run may read (`DRIFT_CHECK_BUDGET`, default
    /// [`DEFAULT_BUDGET`]).
    pub budget: u64,
    /// The limits file to compare the overrides with (`LIMITS_FILE_URI`,
    /// `s3://bucket/key`); `None` when unset or empty. Checked at each run,
    /// so a bad value fails that comparison only.
    pub limits_file: Option<String>,
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
        let limits_file = lookup(ENV_LIMITS_FILE_URI)
            .map(|uri| uri.trim().to_owned())
            .filter(|uri| !uri.is_empty());
        Ok(Self { budget, limits_file })
    }
}

/// The run's metrics: the drifted scopes, recorded also when there are
/// none, so the drift alarm sees a data point (and goes back to `OK`).
pub fn add_run(metrics: &mut Metrics, run: &DriftRun) {
    metrics.add(Metric::DriftedScopes, run.drifted as f64);
}

/// What a run answers: the counters' drift check's outcome and, with a
/// limits file, the comparison with it.
#[derive(Debug, Clone, Serialize)]
pub struct DriftCheckResponse {
    #[serde(flatten)]
    pub outcome: DriftOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsDrift>,
}

/// What the limits comparison leaves of the invocation's time for the
/// answer and the metrics.
const LIMITS_MARGIN: Duration = Duration::from_secs(5);

/// Runs the check once and answers with its outcome. The counters' check
/// runs first, within its read budget; then the limits file is compared,
/// within what is left of the invocation's time (less
/// [`LIMITS_MARGIN`]): a failure or a comparison out of time is logged and
/// published as `LimitsFileErrors`, never raised. A failure to read the
/// table or the state fails the invocation (the next tick starts from the
/// same cursor; only the limits metrics are published, the errors alarm
/// sees it); a scope that cannot be read is reported in the outcome.
pub async fn handle_drift_check<S: DriftStore>(
    store: &S,
    s3: &aws_sdk_s3::Client,
    config: &CounterConfig,
    settings: &Settings,
    clock: &Clock,
    event: LambdaEvent<serde_json::Value>,
) -> Result<DriftCheckResponse, lambda_runtime::Error> {
    let watch = CostWatch::start(store);
    let mut metrics = Metrics::from_env();
    let checked = DriftCheck::new(settings.budget).run(store, config, clock).await;
    let limits = match &settings.limits_file {
        Some(uri) => {
            // No deadline (0: a caller that is not the Lambda runtime, such
            // as a test invoking the handler): no bound.
            let left = (event.context.deadline != 0).then(|| {
                event
                    .context
                    .deadline()
                    .duration_since(SystemTime::now())
                    .unwrap_or_default()
                    .saturating_sub(LIMITS_MARGIN)
            });
            let check = limits::check(s3, store, uri, config.default_limit, config.scope_keys);
            let compared = match left {
                None => Ok(check.await),
                Some(left) if left.is_zero() => Err(left),
                Some(left) => tokio::time::timeout(left, check).await.map_err(|_| left),
            };
            Some(compared.unwrap_or_else(|left| {
                let why = format!("the comparison did not finish within the invocation's time ({left:?} were left)");
                error!(file = %uri, "limits file check failed: {why}; the counters' drift check ran");
                LimitsDrift::failed(uri, why)
            }))
        }
        None => None,
    };
    if let Some(drift) = &limits {
        limits::add_metrics(&mut metrics, drift);
    }
    let outcome = match checked {
        Ok(outcome) => outcome,
        Err(e) => {
            emit_metrics(&metrics);
            return Err(e.into());
        }
    };
    let run = &outcome.run;
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
    Ok(DriftCheckResponse { outcome, limits })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use aws_sdk_s3::operation::get_object::{GetObjectError, GetObjectOutput};
    use aws_sdk_s3::primitives::ByteStream;
    use aws_sdk_s3::types::error::NoSuchKey;
    use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};
    use hybrid_counter::config::Admission;
    use hybrid_counter::memory::MemoryStore;
    use hybrid_counter::{Counter, ResourceId, Scope};
    use lambda_runtime::Context;

    use super::*;

    const URI: &str = "s3://ops-config/limits/prod.yaml";

    fn env(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        let pairs = pairs.to_vec();
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    /// An S3 client whose requests `rules` answer (any order, no retries).
    fn s3(rules: &[&Rule]) -> aws_sdk_s3::Client {
        let interceptor = rules.iter().fold(
            MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny),
            |interceptor, rule| interceptor.with_rule(rule),
        );
        let config = aws_sdk_s3::Config::builder()
            .with_test_defaults()
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
            .http_client(create_mock_http_client())
            .interceptor(interceptor)
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }

    /// GetObject of the configured object only, answering `body`.
    fn serves(body: &'static str) -> Rule {
        mock!(aws_sdk_s3::Client::get_object)
            .match_requests(|r| r.bucket() == Some("ops-config") && r.key() == Some("limits/prod.yaml"))
            .then_output(move || {
                GetObjectOutput::builder()
                    .body(ByteStream::from_static(body.as_bytes()))
                    .build()
            })
    }

    fn config() -> CounterConfig {
        CounterConfig {
            resources_table: "r".into(),
            counters_table: "c".into(),
            default_limit: Some(10),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Admission::BestEffort,
            scope_keys: Default::default(),
        }
    }

    fn settings(limits_file: Option<&str>) -> Settings {
        Settings {
            budget: 100,
            limits_file: limits_file.map(str::to_owned),
        }
    }

    /// One scope whose eventual counter drifted (the stream never counted
    /// its item, yet EC says 3), and the overrides `limits`.
    async fn store_with(limits: &[(&str, u64)]) -> Arc<MemoryStore> {
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::new(store.clone(), 10);
        let scope = Scope::new("acct").unwrap();
        counter
            .create(&scope, &ResourceId::new("a").unwrap(), Default::default(), 0)
            .await
            .unwrap();
        store.set_counter("acct", "eventual", 3);
        for (scope, limit) in limits {
            store.set_limit(scope, Some(*limit));
        }
        store
    }

    /// One run with 60 s of the invocation left.
    async fn run(store: &MemoryStore, s3: &aws_sdk_s3::Client, settings: &Settings) -> DriftCheckResponse {
        run_with(store, s3, settings, Duration::from_secs(60)).await
    }

    async fn run_with(
        store: &MemoryStore,
        s3: &aws_sdk_s3::Client,
        settings: &Settings,
        left: Duration,
    ) -> DriftCheckResponse {
        let mut context = Context::default();
        let deadline = SystemTime::now() + left;
        context.deadline = u64::try_from(deadline.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis()).unwrap();
        let event = LambdaEvent::new(
            serde_json::json!({"source": "aws.events", "detail-type": "Scheduled Event"}),
            context,
        );
        handle_drift_check(store, s3, &config(), settings, &Clock::new(|| 1_000_000), event)
            .await
            .unwrap()
    }

    /// Review 2 of issue 39: the counters' check runs first, and a limits
    /// comparison without the time to finish is an error of its own, not a
    /// timed-out invocation that publishes nothing.
    #[tokio::test]
    async fn out_of_time_the_limits_comparison_is_an_error_metric_after_the_counter_drift_check() {
        let get = serves("default_limit: 5\noverrides:\n  - scope: acme/a\n    limit: 5\n");
        let store = store_with(&[("acme/a", 5)]).await;
        let response = run_with(&store, &s3(&[&get]), &settings(Some(URI)), LIMITS_MARGIN).await;
        let drift = response.limits.unwrap();
        let error = drift.error.clone().unwrap();
        assert!(error.contains("did not finish within the invocation's time"), "{error}");
        assert_eq!(limits_metrics(&drift), (None, Some(1.0)));
        assert_eq!(response.outcome.run.drifted_scopes, ["acct"]);
        assert!(response.outcome.recorded);
    }

    #[tokio::test]
    async fn over_four_keys_the_limits_file_is_compared_with_each_scopes_copies() {
        let keys = hybrid_counter::scope_keys::ScopeKeys::new(4).unwrap();
        let file = "default_limit: 10\noverrides:\n  - scope: acme/a\n    limit: 5\n";
        let store = MemoryStore::new();
        for k in 0..4 {
            store.set_limit(&format!("acme/a#{k}"), Some(5));
        }
        let get = serves(file);
        let drift = limits::check(&s3(&[&get]), &store, URI, Some(10), keys).await;
        assert!(drift.in_sync(), "every copy as in the file: {drift:?}");

        // A copy missing on one key is drift on the scope.
        store.set_limit("acme/a#2", None);
        let get = serves(file);
        let drift = limits::check(&s3(&[&get]), &store, URI, Some(10), keys).await;
        assert_eq!(drift.changed, ["acme/a"], "{drift:?}");
        assert_eq!(limits_metrics(&drift), (Some(1.0), Some(0.0)));
    }

    fn limits_metrics(drift: &LimitsDrift) -> (Option<f64>, Option<f64>) {
        let mut metrics = Metrics::new("hc-dev");
        limits::add_metrics(&mut metrics, drift);
        (
            metrics.value(Metric::LimitsDrifted),
            metrics.value(Metric::LimitsFileErrors),
        )
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

    #[test]
    fn an_empty_limits_file_uri_is_no_limits_file() {
        assert_eq!(Settings::from_lookup(env(&[])).unwrap().limits_file, None);
        assert_eq!(
            Settings::from_lookup(env(&[(ENV_LIMITS_FILE_URI, " ")]))
                .unwrap()
                .limits_file,
            None
        );
        assert_eq!(
            Settings::from_lookup(env(&[(ENV_LIMITS_FILE_URI, URI)]))
                .unwrap()
                .limits_file
                .as_deref(),
            Some(URI)
        );
    }

    #[tokio::test]
    async fn a_scheduled_event_reports_the_drifted_scope_and_records_the_run_and_reads_no_file_when_none_is_set() {
        let store = store_with(&[]).await;
        let get = serves("overrides: []\n");
        let response = run(&store, &s3(&[&get]), &settings(None)).await;
        let outcome = &response.outcome;
        assert_eq!(outcome.run.drifted_scopes, ["acct"]);
        assert!(outcome.recorded);
        assert_eq!(store.tables().drift_state.unwrap().last_run, Some(outcome.run.clone()));
        assert_eq!(store.counter("acct", "eventual"), 3, "report-only");
        assert!(response.limits.is_none());
        assert_eq!(get.num_calls(), 0, "no limits file, no GetObject");
    }

    #[tokio::test]
    async fn a_limits_file_matching_the_table_reports_no_limits_drift() {
        let store = store_with(&[("acme/a", 5), ("acme/b", 50)]).await;
        let get =
            serves("default_limit: 10\noverrides:\n  - {scope: acme/a, limit: 5}\n  - {prefix: acme/, limit: 50}\n");
        let response = run(&store, &s3(&[&get]), &settings(Some(URI))).await;
        let drift = response.limits.unwrap();
        assert!(drift.in_sync(), "{drift}");
        assert_eq!(get.num_calls(), 1);
        assert_eq!(limits_metrics(&drift), (Some(0.0), Some(0.0)));
        assert_eq!(response.outcome.run.drifted_scopes, ["acct"]);
    }

    #[tokio::test]
    async fn an_override_changed_outside_the_limits_file_is_reported_and_counted() {
        // `limit set acme/a 7` where the file says 5, and an override the
        // file does not have; the deployed default is 10, the file says 20.
        let store = store_with(&[("acme/a", 7), ("stray", 3)]).await;
        let get = serves("default_limit: 20\noverrides:\n  - {scope: acme/a, limit: 5}\n");
        let response = run(&store, &s3(&[&get]), &settings(Some(URI))).await;
        let drift = response.limits.unwrap();
        assert_eq!(drift.changed, ["acme/a"]);
        assert_eq!(drift.removed, ["stray"]);
        assert!(drift.added.is_empty());
        let text = drift.to_string();
        assert!(text.contains("changed outside the file: acme/a"), "{text}");
        assert!(text.contains("default limit 10 where the file says 20"), "{text}");
        assert_eq!(limits_metrics(&drift), (Some(3.0), Some(0.0)));
    }

    #[tokio::test]
    async fn a_bad_limits_file_is_an_error_metric_and_the_counter_drift_check_still_runs() {
        let invalid = serves("overrides:\n  - scope: acme/a\n    limit: -5\n");
        let missing = mock!(aws_sdk_s3::Client::get_object)
            .then_error(|| GetObjectError::NoSuchKey(NoSuchKey::builder().message("gone").build()));
        let cases: [(aws_sdk_s3::Client, &str, &str); 3] = [
            (
                s3(&[&invalid]),
                URI,
                "invalid limits file s3://ops-config/limits/prod.yaml:3:12",
            ),
            (
                s3(&[&missing]),
                URI,
                "cannot read the limits file s3://ops-config/limits/prod.yaml",
            ),
            (s3(&[]), "ops-config/limits.yaml", "is not an S3 URI"),
        ];
        for (client, uri, expected) in cases {
            let store = store_with(&[("acme/a", 5)]).await;
            let response = run(&store, &client, &settings(Some(uri))).await;
            let drift = response.limits.unwrap();
            let error = drift.error.clone().unwrap();
            assert!(error.contains(expected), "{uri}: {error}");
            assert_eq!(limits_metrics(&drift), (None, Some(1.0)), "{error}");
            assert_eq!(response.outcome.run.drifted_scopes, ["acct"], "{error}");
            assert!(response.outcome.recorded);
        }
        assert_eq!(missing.num_calls(), 1);
    }
}
