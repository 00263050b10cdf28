//! The capacity a create and a delete cost, metered by the capacity model
//! of the fault proxy (`tests/src/capacity/`, DynamoDB's unit rules) on
//! the request path and on the stream path separately, at item sizes of
//! 0.1, 1 and 4 KB, beside the plain put + `ADD` a user would write
//! instead; and from them the cost in dollars per million creates and per
//! million create+delete lifecycles.
//!
//! The model runs at DynamoDB's own rates here (scale 1): nothing is
//! throttled, only charged. Phases run one after the other (creates, their
//! stream, deletes, their stream), so each one's units are its own. The
//! stream is consumed in batches of 100 by the real batched `Processor`,
//! each batch timed as one invocation.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use e2e::Emulator;
use e2e::capacity::{CapacityModel, CapacityParams, CapacityUsage, TableKeys};
use e2e::faults::{FaultPlan, FaultProxy};
use e2e::spread::Spread;
use hybrid_counter::keys::{ID, NAME, SCOPE};
use hybrid_counter::metrics::Metrics;
use hybrid_counter::store::meter::Meter;
use hybrid_counter::stream::{Mode, Processor};
use hybrid_counter::{Counter, ResourceId, Scope, now_millis};
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::streams::ShardReader;
use serde::Serialize;
use serde_dynamo::Item;

use crate::shared::BATCH_SIZE;

/// Prices used, us-east-1, as published on 2026-11-26 (on-demand
/// throughput since the price cut of 1 November 2024).
pub const PRICES: Prices = Prices {
    on_demand_write_per_million: 0.625,
    on_demand_read_per_million: 0.125,
    provisioned_wcu_hour: 0.00065,
    provisioned_rcu_hour: 0.00013,
    lambda_arm_gb_second: 0.000_013_333_4,
    lambda_requests_per_million: 0.20,
    logs_ingestion_per_gb: 0.50,
};
/// The stack's default `LambdaMemorySize`, MB.
pub const LAMBDA_MEMORY_MB: f64 = 256.0;
/// Lambda's own log lines per invocation (`START`, `END`, `REPORT`), bytes: an estimate.
pub const PLATFORM_LOG_BYTES: f64 = 350.0;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Prices {
    pub on_demand_write_per_million: f64,
    pub on_demand_read_per_million: f64,
    pub provisioned_wcu_hour: f64,
    pub provisioned_rcu_hour: f64,
    pub lambda_arm_gb_second: f64,
    pub lambda_requests_per_million: f64,
    pub logs_ingestion_per_gb: f64,
}

/// Units per event.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Units {
    pub write: f64,
    pub read: f64,
}

impl Units {
    fn per(usage: &CapacityUsage, events: u64) -> Self {
        let n = events.max(1) as f64;
        Self {
            write: usage.tables.values().map(|t| t.write_units).sum::<f64>() / n,
            read: usage.tables.values().map(|t| t.read_units).sum::<f64>() / n,
        }
    }

    fn plus(self, other: Self) -> Self {
        Self {
            write: self.write + other.write,
            read: self.read + other.read,
        }
    }

    /// Dollars per million events on demand.
    fn on_demand(self) -> f64 {
        self.write * PRICES.on_demand_write_per_million + self.read * PRICES.on_demand_read_per_million
    }

    /// Dollars per million events on provisioned capacity used fully (a
    /// unit-second is 1/3,600 of a unit-hour).
    fn provisioned(self) -> f64 {
        1e6 / 3600.0 * (self.write * PRICES.provisioned_wcu_hour + self.read * PRICES.provisioned_rcu_hour)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SizeRow {
    pub payload_bytes: usize,
    pub create_request: Units,
    pub create_stream: Units,
    pub delete_request: Units,
    pub delete_stream: Units,
    pub plain_create: Units,
    pub plain_delete: Units,
    /// Milliseconds per batch of [`BATCH_SIZE`] records processed (an invocation's work).
    pub invocation_ms: Spread,
    pub events_per_invocation: f64,
    /// Bytes of the EMF line one invocation prints.
    pub emf_bytes: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Metering {
    pub items: u64,
    pub runs: usize,
    pub prices: Prices,
    pub lambda_memory_mb: f64,
    pub rows: Vec<SizeRow>,
}

async fn drain(
    processor: &Processor<DynamoStore>,
    reader: &ShardReader,
    cursors: &mut HashMap<String, String>,
) -> (Vec<Duration>, u64, usize) {
    let records = e2e::read_new_records(reader, cursors).await;
    let values: Vec<serde_json::Value> = records
        .iter()
        .map(|r| serde_json::to_value(r).expect("a record"))
        .collect();
    let (mut durations, mut events, mut emf) = (Vec::new(), 0, 0);
    for batch in values.chunks(BATCH_SIZE) {
        let started = Instant::now();
        let report = processor.process_json(batch, now_millis()).await;
        durations.push(started.elapsed());
        assert!(
            report.failed_sequence_number.is_none(),
            "nothing fails unthrottled: {report:?}"
        );
        events += u64::from(report.counted + report.deleted_counted);
        let mut metrics = Metrics::new("hck");
        metrics
            .add_batch(&report)
            .add_cost(&processor.store().meter().snapshot());
        emf = emf.max(metrics.document(now_millis()).map_or(0, |d| d.to_string().len()));
    }
    (durations, events, emf)
}

async fn size_row(emulator: &Emulator, payload_bytes: usize, items: u64, run: usize) -> (SizeRow, Vec<Duration>) {
    let config = crate::shared::config(&format!("bench-meter-{payload_bytes}-{run}"), 1);
    let sdk = emulator.sdk_config().await;
    let stream_arn = e2e::create_tables(&aws_sdk_dynamodb::Client::new(&sdk), &config).await;
    let proxy = FaultProxy::start(&emulator.endpoint, FaultPlan::new(0));
    // Units only: every rate raised so far that nothing is refused (at
    // DynamoDB's rates these sequential calls would outrun a partition's
    // second with 4 KB items); the unit rules do not depend on the rates.
    proxy.limit_capacity(Some(CapacityModel::new(
        CapacityParams {
            table: None,
            split_for_heat: false,
            ..CapacityParams::dynamodb(1e6)
        },
        &[
            TableKeys::new(&config.resources_table, SCOPE, ID),
            TableKeys::new(&config.counters_table, SCOPE, NAME),
        ],
    )));
    let usage = || proxy.capacity_usage().expect("a model");
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config().await);
    let store = DynamoStore::new(client.clone(), &config).with_meter(Meter::new());
    let counter = Counter::configured(store.clone(), u64::MAX / 2, &config);
    let processor = Processor::new(store).with_mode(Mode::Batched);
    let reader = ShardReader::new(aws_sdk_dynamodbstreams::Client::new(&sdk), stream_arn);
    let mut cursors = HashMap::new();
    let scope = Scope::new("metered").unwrap();
    let payload = || {
        Item::from(HashMap::from([(
            "payload".to_owned(),
            serde_dynamo::AttributeValue::S("p".repeat(payload_bytes)),
        )]))
    };
    let ids: Vec<ResourceId> = (0..items)
        .map(|n| ResourceId::new(format!("{:016x}", fastrand::u64(..) ^ n)).unwrap())
        .collect();

    let before = usage();
    for id in &ids {
        counter
            .create(&scope, id, payload(), now_millis())
            .await
            .expect("create");
    }
    let create_request = Units::per(&usage().since(&before), items);
    let before = usage();
    let (mut durations, created, emf_create) = drain(&processor, &reader, &mut cursors).await;
    let create_stream = Units::per(&usage().since(&before), created);
    let before = usage();
    for id in &ids {
        counter.delete(&scope, id, now_millis()).await.expect("delete");
    }
    let delete_request = Units::per(&usage().since(&before), items);
    let before = usage();
    let (more, deleted, emf_delete) = drain(&processor, &reader, &mut cursors).await;
    durations.extend(more);
    let delete_stream = Units::per(&usage().since(&before), deleted);

    // The plain alternative: read the counter (admission), put the item,
    // ADD 1; delete it, ADD -1. One item, one counter, no stream work.
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let counter_key = || HashMap::from([(SCOPE.to_owned(), s("plain")), (NAME.to_owned(), s("count"))]);
    let add = |delta: &'static str| {
        client
            .update_item()
            .table_name(&config.counters_table)
            .set_key(Some(counter_key()))
            .update_expression("ADD #c :d")
            .expression_attribute_names("#c", "count")
            .expression_attribute_values(":d", AttributeValue::N(delta.into()))
            .send()
    };
    let before = usage();
    for id in &ids {
        client
            .get_item()
            .table_name(&config.counters_table)
            .set_key(Some(counter_key()))
            .consistent_read(true)
            .send()
            .await
            .expect("read the counter");
        client
            .put_item()
            .table_name(&config.resources_table)
            .item(SCOPE, s("plain"))
            .item(ID, s(id.as_str()))
            .item("payload", s(&"p".repeat(payload_bytes)))
            .condition_expression("attribute_not_exists(#s)")
            .expression_attribute_names("#s", SCOPE)
            .send()
            .await
            .expect("put");
        add("1").await.expect("add");
    }
    let plain_create = Units::per(&usage().since(&before), items);
    let before = usage();
    for id in &ids {
        client
            .delete_item()
            .table_name(&config.resources_table)
            .key(SCOPE, s("plain"))
            .key(ID, s(id.as_str()))
            .send()
            .await
            .expect("delete");
        add("-1").await.expect("add");
    }
    let plain_delete = Units::per(&usage().since(&before), items);
    let invocations = durations.len().max(1) as f64;
    (
        SizeRow {
            payload_bytes,
            create_request,
            create_stream,
            delete_request,
            delete_stream,
            plain_create,
            plain_delete,
            invocation_ms: Spread::of([]),
            events_per_invocation: (created + deleted) as f64 / invocations,
            emf_bytes: emf_create.max(emf_delete),
        },
        durations,
    )
}

pub async fn run(emulator: &Emulator, items: u64, runs: usize) -> Metering {
    let mut rows = Vec::new();
    for payload_bytes in [100, 1024, 4096] {
        let (mut row, mut medians) = (None, Vec::new());
        for run in 0..runs {
            let (r, mut durations) = size_row(emulator, payload_bytes, items, run).await;
            durations.sort();
            medians.push(durations[durations.len() / 2].as_secs_f64() * 1000.0);
            row.get_or_insert(r);
        }
        let mut row = row.expect("a run");
        row.invocation_ms = Spread::of(medians);
        rows.push(row);
    }
    Metering {
        items,
        runs,
        prices: PRICES,
        lambda_memory_mb: LAMBDA_MEMORY_MB,
        rows,
    }
}

impl SizeRow {
    fn create(&self) -> Units {
        self.create_request.plus(self.create_stream)
    }

    fn lifecycle(&self) -> Units {
        self.create().plus(self.delete_request).plus(self.delete_stream)
    }

    /// Lambda and CloudWatch dollars per million stream events.
    fn lambda_and_logs(&self) -> (f64, f64) {
        let invocations = 1e6 / self.events_per_invocation.max(1.0);
        let gb_seconds = invocations * self.invocation_ms.median / 1000.0 * LAMBDA_MEMORY_MB / 1024.0;
        let lambda = gb_seconds * PRICES.lambda_arm_gb_second + invocations / 1e6 * PRICES.lambda_requests_per_million;
        let logs = invocations * (self.emf_bytes as f64 + PLATFORM_LOG_BYTES) / 1e9 * PRICES.logs_ingestion_per_gb;
        (lambda, logs)
    }
}

impl Metering {
    pub fn markdown(&self) -> String {
        let p = &self.prices;
        let mut out = format!(
            "\n## Capacity and cost per create and per delete\n\n\
             Metered by the capacity model (units only: every rate raised so nothing is refused): {} creates of one \
             scope through the real `Counter` (best-effort admission, 1 shard), their stream through the real \
             batched `Processor` (batches of {}), then their deletes and stream, phase by phase, so each phase's \
             units are its own. The payload is one string attribute of the size given. *Plain* is what a user \
             would write instead: a consistent `GetItem` of the counter for admission, a conditional `PutItem`, \
             an `UpdateItem ADD 1`; a `DeleteItem` and `ADD -1` (no stream, no recovery from an ambiguous \
             failure: that counter drifts). Units are deterministic (the same in each of the {} runs).\n\n\
             | payload | create: request path WU / RU | create: stream WU / RU | delete: request path WU / RU | \
             delete: stream WU / RU | kit per create WU / RU | kit per lifecycle WU / RU | plain create WU / RU | \
             plain lifecycle WU / RU |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            self.items, BATCH_SIZE, self.runs
        );
        let u = |x: Units| format!("{:.2} / {:.2}", x.write, x.read);
        for r in &self.rows {
            out.push_str(&format!(
                "| {} B | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.payload_bytes,
                u(r.create_request),
                u(r.create_stream),
                u(r.delete_request),
                u(r.delete_stream),
                u(r.create()),
                u(r.lifecycle()),
                u(r.plain_create),
                u(r.plain_create.plus(r.plain_delete)),
            ));
        }
        out.push_str(&format!(
            "\nDollars per million (us-east-1 prices as published on 2026-11-26: on-demand ${} per million write \
             request units and ${} per million read request units, in force since 1 November 2024; provisioned \
             ${} per WCU-hour and ${} per RCU-hour, counted at 100 % utilisation, so divide by the autoscaling \
             target, e.g. 0.7; Lambda arm64 ${} per GB-second at the stack's default {} MB and ${} per million \
             requests; CloudWatch Logs ingestion ${} per GB). Lambda's duration is the median time of one batch \
             of {} records processed in this bench against the emulator (min–max over the runs), not a \
             measurement on Lambda; its invocations are the stream events over the events per batch. CloudWatch \
             is the EMF line each invocation prints plus an estimated {} bytes of Lambda's own START/END/REPORT \
             lines; EMF metrics are billed as custom metrics per month, not per event, and are left out. Reading \
             the stream is free for a Lambda trigger.\n\n\
             | payload | per million | DynamoDB request path (on-demand / provisioned) | DynamoDB stream \
             processing (on-demand / provisioned) | Lambda (invocation ms) | CloudWatch Logs | kit total on-demand \
             | plain put + ADD on-demand / provisioned |\n|---:|---|---:|---:|---:|---:|---:|---:|\n",
            p.on_demand_write_per_million,
            p.on_demand_read_per_million,
            p.provisioned_wcu_hour,
            p.provisioned_rcu_hour,
            p.lambda_arm_gb_second,
            self.lambda_memory_mb,
            p.lambda_requests_per_million,
            p.logs_ingestion_per_gb,
            BATCH_SIZE,
            PLATFORM_LOG_BYTES,
        ));
        for r in &self.rows {
            let (lambda, logs) = r.lambda_and_logs();
            for (what, request, stream, events, plain) in [
                ("creates", r.create_request, r.create_stream, 1.0, r.plain_create),
                (
                    "create+delete lifecycles",
                    r.create_request.plus(r.delete_request),
                    r.create_stream.plus(r.delete_stream),
                    2.0,
                    r.plain_create.plus(r.plain_delete),
                ),
            ] {
                let total = request.on_demand() + stream.on_demand() + events * (lambda + logs);
                out.push_str(&format!(
                    "| {} B | {what} | ${:.2} / ${:.2} | ${:.2} / ${:.2} | ${:.3} ({:.1} ms) | ${:.4} | **${:.2}** | ${:.2} / ${:.2} |\n",
                    r.payload_bytes,
                    request.on_demand(),
                    request.provisioned(),
                    stream.on_demand(),
                    stream.provisioned(),
                    events * lambda,
                    r.invocation_ms.median,
                    events * logs,
                    total,
                    plain.on_demand(),
                    plain.provisioned(),
                ));
            }
        }
        out.push_str(
            "\nThe stream's flag flip rewrites the whole item inside a transaction (2 WU per KB), and the \
             transactional delete pays the item's size again: the kit's units grow with the item, the plain \
             counter's only by the put. The request path's read is one consistent Query of the scope's counter \
             items (1 RU while they are under 4 KB).\n",
        );
        out
    }
}
