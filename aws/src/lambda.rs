//! What the Lambda binaries share (feature `lambda`): the processor built
//! from the environment, the cost fields of an invocation's log line, and
//! the one line of embedded-metric-format metrics per invocation
//! ([`emit_metrics`]). Their logs are lambda_runtime's default subscriber
//! (JSON when the function's `LogFormat` is). Each function's own glue
//! lives in its folder under `handlers/`.

use hybrid_counter::metrics::Metrics;
use hybrid_counter::store::StoreBase;
pub use hybrid_counter::store::meter::MeterSnapshot;
use hybrid_counter::stream::Processor;
use hybrid_counter::{Clock, CounterConfig};

use crate::DynamoStore;

/// What both stream-processing functions build once at start-up: the
/// processor over the tables named by the environment (`RESOURCES_TABLE`,
/// `COUNTERS_TABLE`, `EC_SHARDS`, the scope keys, `PROCESSING_MODE`) and the SDK
/// configuration (standard chain, `AWS_ENDPOINT_URL` honoured) for any other
/// client they need.
pub async fn processor_from_env() -> Result<(Processor<DynamoStore>, aws_config::SdkConfig), lambda_runtime::Error> {
    let mode = CounterConfig::processing_mode_from_lookup(|name| std::env::var(name).ok())?;
    let (store, config, sdk) = store_from_env().await?;
    let processor = config.processor(store).with_mode(mode).with_clock(Clock::system());
    Ok((processor, sdk))
}

/// The store over the tables named by the environment (`RESOURCES_TABLE`,
/// `COUNTERS_TABLE`, shards, admission mode), its configuration, and the
/// SDK configuration (standard chain, `AWS_ENDPOINT_URL` honoured), once
/// the layout record confirms the configured scope keys
/// ([`hybrid_counter::layout::check`]).
pub async fn store_from_env() -> Result<(DynamoStore, CounterConfig, aws_config::SdkConfig), lambda_runtime::Error> {
    let config = CounterConfig::from_env()?;
    let sdk = crate::sdk::defaults().load().await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config);
    // A function started with another layout than the recorded one
    // refuses to start: its stream batches are retried and end in DLQ1,
    // not miscounted.
    confirm_layout(&store, &config).await?;
    Ok((store, config, sdk))
}

/// [`hybrid_counter::layout::check`] at a function's start: a definite
/// mismatch stops the start, logged in its own words (the error a failed
/// init returns is printed with `Debug`); a record that cannot be read
/// (throttled at a scale-out) is logged and the function starts, rather
/// than fail every cold start until the table answers.
pub async fn confirm_layout(store: &DynamoStore, config: &CounterConfig) -> Result<(), lambda_runtime::Error> {
    match hybrid_counter::layout::check(store, config.scope_keys).await {
        Ok(hybrid_counter::layout::Checked::Matches) => Ok(()),
        Ok(hybrid_counter::layout::Checked::NotRecorded) => {
            tracing::warn!("no layout record: starting unchecked (counterctl deploy records it)");
            Ok(())
        }
        Err(e @ hybrid_counter::Error::LayoutMismatch { .. }) => {
            tracing::error!(error = %e, "not starting");
            Err(lambda_runtime::Error::from(e.to_string()))
        }
        Err(e) => {
            tracing::warn!(error = %e, "the layout record could not be read; starting unchecked");
            Ok(())
        }
    }
}

/// Prints `metrics` as embedded-metric-format lines on stdout, where
/// CloudWatch Logs extracts the data points: one line, and one more per
/// throttle reason ([`Metrics::documents`]; nothing when none was
/// recorded). One call per invocation, after the work. `println!` holds
/// stdout's lock for the whole line, so it never interleaves with a log
/// line; Lambda passes a line that is already JSON through unchanged under
/// the JSON log format.
pub fn emit_metrics(metrics: &Metrics) {
    for document in metrics.documents(hybrid_counter::now_millis()) {
        println!("{document}");
    }
}

/// The cost of one invocation: what the store's requests cost from
/// [`CostWatch::start`] to [`CostWatch::cost`] (zeros for a store without a
/// meter).
pub struct CostWatch(Option<MeterSnapshot>);

impl CostWatch {
    pub fn start<S: StoreBase>(store: &S) -> Self {
        Self(store.cost_meter().map(|m| m.snapshot()))
    }

    pub fn cost<S: StoreBase>(&self, store: &S) -> MeterSnapshot {
        store
            .cost_meter()
            .zip(self.0.as_ref())
            .map(|(meter, before)| meter.snapshot().since(before))
            .unwrap_or_default()
    }
}

/// `tracing::info!` with an invocation's cost fields (`requests`,
/// `transactions`, `items_written`, `counter_item_writes`, `write_units`,
/// `conflicts`) before the given fields and message, so every function logs
/// its cost under the same names on its one line per invocation.
#[macro_export]
macro_rules! info_with_cost {
    ($cost:expr, $($rest:tt)+) => {{
        let cost: &$crate::lambda::MeterSnapshot = &$cost;
        ::tracing::info!(
            requests = cost.requests.total(),
            transactions = cost.transactions_committed,
            items_written = cost.items_written(),
            counter_item_writes = cost.counter_item_writes(),
            write_units = cost.write_units,
            conflicts = cost.transactions_cancelled.conflict,
            $($rest)+
        )
    }};
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemOutput};
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_smithy_mocks::mock;
    use hybrid_counter::keys;

    use super::*;

    fn record(count: &str) -> aws_smithy_mocks::Rule {
        let count = count.to_owned();
        mock!(Client::get_item).then_output(move || {
            GetItemOutput::builder()
                .item(keys::SCOPE, AttributeValue::S(keys::LAYOUT_SCOPE.into()))
                .item(keys::NAME, AttributeValue::S(keys::LAYOUT_NAME.into()))
                .item(keys::LAYOUT_KEYS, AttributeValue::N(count.clone()))
                .item(keys::LAYOUT_SPREAD, AttributeValue::N("1".into()))
                .build()
        })
    }

    /// Review of the record: only a definite mismatch stops a start; a
    /// record that cannot be read (here a 500) lets the function start.
    #[tokio::test]
    async fn a_start_stops_on_a_mismatch_only() {
        let config = crate::test_util::config();
        let matching = crate::test_util::mock_store(&[record("1")]);
        assert!(confirm_layout(&matching, &config).await.is_ok());
        let other = crate::test_util::mock_store(&[record("4")]);
        let refused = confirm_layout(&other, &config).await.unwrap_err();
        assert!(
            refused.to_string().contains("refuses to read or write items"),
            "{refused}"
        );
        let unreadable = crate::test_util::mock_store(&[mock!(Client::get_item).then_error(|| {
            GetItemError::unhandled(
                aws_smithy_types::error::ErrorMetadata::builder()
                    .code("InternalServerError")
                    .build(),
            )
        })]);
        assert!(confirm_layout(&unreadable, &config).await.is_ok());
    }
}
