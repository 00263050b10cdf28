//! `make bench`, part 2: the stream consumer's three designs on one
//! private emulator in one run, and the request path against raw round
//! trips. Numbers, not assertions (only correctness is asserted: every run
//! must end with EC == live). Writes `target/bench/modes.json` and
//! `BENCHMARKS.md`; `tests/benches/chart.py` draws the PNG from the JSON.
//!
//! Per mode (fresh tables each): `BENCH_EVENTS` creates spread over
//! `BENCH_SCOPES` hot scopes are written through the request path, their
//! stream records are read and consumed by `BENCH_LANES` concurrent
//! consumers (records split by item key, so each item's records stay in
//! order in one lane: the way several stream shards carry one hot scope
//! after its partition split), in batches of 100 retried from the reported
//! failure as the event source mapping does; then a quarter of the items
//! are deleted and consumed the same way. Cost comes from the store's
//! [`hybrid_counter::store::meter::Meter`] (requests the kit sent and the
//! capacity the emulator reported).

use std::collections::HashMap;
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use e2e::spread::Spread;
use e2e::{Emulator, create_tables, read_new_records};
use hybrid_counter::AuditStore as _;
use hybrid_counter::store::meter::Meter;
use hybrid_counter::stream::process::GROUP_CONCURRENCY;
use hybrid_counter::stream::{Mode, Processor};
use hybrid_counter::{Counter, ResourceId, Scope, now_millis};
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::streams::ShardReader;
use serde::Serialize;
use serde_dynamo::Item;
use shared::*;

// In modes/: files directly in benches/ would be bench targets of their own.
#[path = "modes/ceiling.rs"]
mod ceiling;
#[path = "modes/ceiling_report.rs"]
mod ceiling_report;
#[path = "modes/metering.rs"]
mod metering;
#[path = "modes/sharded.rs"]
mod sharded;
#[path = "modes/shared.rs"]
mod shared;
#[path = "modes/throttling.rs"]
mod throttling;

#[derive(Debug, Clone, Copy)]
struct Design {
    name: &'static str,
    mode: Mode,
    shards: u32,
    /// Concurrent workers inside one invocation (1: the processor gets the
    /// whole batch; more: the batch split by item key, the parts processed
    /// at once, see [`invoke`]).
    record_workers: usize,
}

#[derive(Debug, Clone, Serialize)]
struct DesignResult {
    design: &'static str,
    eventual_shards: u32,
    record_workers: usize,
    creates: Phase,
    deletes: Phase,
    /// As many creates as deletes, interleaved, consumed together.
    churn: Phase,
    events_per_second: f64,
    stream_read_seconds: f64,
    /// Writes taken by the busiest eventual-counter item per counted event
    /// of its scope (its `version` counts every write).
    hottest_counter_writes_per_event: f64,
    /// Counted events/s one scope could sustain on DynamoDB before its
    /// busiest counter item reaches 1,000 write units/s (a transactional
    /// counter write costs 2).
    projected_scope_cap: f64,
    transactions: u64,
    conflicts: u64,
    retries: u64,
    counter_item_writes_per_event: f64,
}

/// One design's runs, one per round, each on fresh tables.
#[derive(Debug, Clone, Serialize)]
struct DesignRuns {
    design: &'static str,
    eventual_shards: u32,
    record_workers: usize,
    runs: Vec<DesignResult>,
}

impl DesignRuns {
    /// `f` over the rounds.
    fn spread(&self, f: impl Fn(&DesignResult) -> f64) -> Spread {
        Spread::of(self.runs.iter().map(f))
    }

    /// `f` of this design over `other`'s, round by round.
    fn ratio(&self, other: &DesignRuns, f: fn(&DesignResult) -> f64) -> Spread {
        Spread::of(self.runs.iter().zip(&other.runs).map(|(a, b)| f(a) / f(b)))
    }
}

#[derive(Debug, Clone, Serialize)]
struct RequestPath {
    library: Latency,
    raw: Latency,
    round_trips_per_create: f64,
    overhead_p50_percent: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Results {
    events: u64,
    scopes: u64,
    lanes: u64,
    batch_size: usize,
    /// Rounds of the designs and of the request path.
    rounds: usize,
    designs: Vec<DesignRuns>,
    request_paths: Vec<RequestPath>,
    sharded: sharded::Sharded,
    throttling: throttling::Throttling,
    ceiling: ceiling::Ceiling,
    metering: metering::Metering,
    /// The commit measured (`-dirty` when the tree had changes).
    commit: String,
    fakecloud: String,
    cores: usize,
}

async fn run_design(
    sdk: &aws_config::SdkConfig,
    design: Design,
    events: u64,
    scopes: u64,
    lanes: usize,
    round: usize,
) -> DesignResult {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let table_prefix: String = design
        .name
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' => Some(c),
            '+' | ' ' | '-' => Some('-'),
            _ => None,
        })
        .collect();
    let config = config(&format!("bench-{table_prefix}-r{round}"), design.shards);
    let stream_arn = create_tables(&dynamodb, &config).await;
    let counter = Counter::new(DynamoStore::new(dynamodb.clone(), &config), u64::MAX / 2);
    let processor = Processor::new(DynamoStore::new(dynamodb.clone(), &config).with_meter(Meter::new()))
        .with_mode(design.mode)
        .with_eventual_shards(design.shards);
    let reader = ShardReader::new(aws_sdk_dynamodbstreams::Client::new(sdk), stream_arn.clone());
    let mut cursors = HashMap::new();
    let scope_names: Vec<Scope> = (0..scopes).map(|n| Scope::new(format!("hot-{n}")).unwrap()).collect();
    let jobs: Vec<(Scope, ResourceId)> = (0..events)
        .map(|n| {
            (
                scope_names[(n % scopes) as usize].clone(),
                ResourceId::new(format!("item-{n:06}")).unwrap(),
            )
        })
        .collect();

    let c = counter.clone();
    fan_out(jobs.clone(), 8, move |scope, id| {
        let c = c.clone();
        async move {
            c.create(&scope, &id, Item::default(), now_millis())
                .await
                .expect("create");
        }
    })
    .await;
    let started = Instant::now();
    let records = read_new_records(&reader, &mut cursors).await;
    let mut stream_read_seconds = started.elapsed().as_secs_f64();
    let creates = consume(&processor, records, lanes, design.record_workers).await;

    let c = counter.clone();
    let doomed: Vec<_> = jobs.iter().step_by(4).cloned().collect();
    fan_out(doomed, 8, move |scope, id| {
        let c = c.clone();
        async move {
            c.delete(&scope, &id, now_millis()).await.expect("delete");
        }
    })
    .await;
    let started = Instant::now();
    let records = read_new_records(&reader, &mut cursors).await;
    stream_read_seconds += started.elapsed().as_secs_f64();
    let deletes = consume(&processor, records, lanes, design.record_workers).await;

    // The busiest counter item after creates and deletes (the churn has a
    // table of its own).
    let mut hottest: f64 = 0.0;
    for scope in &scope_names {
        let scope_events = jobs.iter().filter(|(s, _)| s == scope).count()
            + jobs.iter().step_by(4).filter(|(s, _)| s == scope).count();
        let busiest = processor
            .store()
            .counter_items(scope)
            .await
            .expect("counter items")
            .iter()
            .filter(|item| hybrid_counter::keys::is_eventual_name(&item.name))
            .map(|item| item.version)
            .max()
            .unwrap_or(0);
        hottest = hottest.max(busiest as f64 / scope_events.max(1) as f64);
    }

    // Churn: a create of a new item and a delete of a counted one, pair by
    // pair, so batches hold both and their net delta is near zero.
    let survivors: Vec<(Scope, ResourceId)> = jobs
        .iter()
        .enumerate()
        .filter(|(n, _)| n % 4 != 0)
        .map(|(_, job)| job.clone())
        .take(jobs.len() / 4)
        .collect();
    let c = counter.clone();
    fan_out(survivors.clone(), 8, move |scope, old| {
        let c = c.clone();
        async move {
            let new = ResourceId::new(format!("churn-{}", old.as_str())).expect("id");
            c.create(&scope, &new, Item::default(), now_millis())
                .await
                .expect("create");
            c.delete(&scope, &old, now_millis()).await.expect("delete");
        }
    })
    .await;
    let records = read_new_records(&reader, &mut cursors).await;
    let churn = consume(&processor, records, lanes, design.record_workers).await;

    // Numbers from a wrong answer are worth nothing: every scope must end exact.
    for scope in &scope_names {
        let counts = hybrid_counter::audit::count_scope(processor.store(), scope)
            .await
            .expect("count scope");
        let usage = counter.usage(scope).await.expect("usage");
        assert_eq!(
            (usage.eventual, counts.processed),
            (counts.live as i64, counts.live),
            "{}: EC must equal the live count after the drain",
            design.name
        );
    }
    let total_events = creates.events + deletes.events;
    let counter_writes = creates.counter_item_writes_per_event * creates.events as f64
        + deletes.counter_item_writes_per_event * deletes.events as f64;
    DesignResult {
        design: design.name,
        eventual_shards: design.shards,
        record_workers: design.record_workers,
        events_per_second: total_events as f64 / (creates.seconds + deletes.seconds),
        hottest_counter_writes_per_event: hottest,
        projected_scope_cap: ITEM_WRITE_UNITS_PER_SECOND / (2.0 * hottest.max(f64::MIN_POSITIVE)),
        transactions: creates.transactions + deletes.transactions,
        conflicts: creates.conflicts + deletes.conflicts,
        retries: creates.retries + deletes.retries,
        counter_item_writes_per_event: counter_writes / total_events.max(1) as f64,
        creates,
        deletes,
        churn,
        stream_read_seconds,
    }
}

/// Library creates against the same three requests sent bare with the same
/// content (consistent Query of the counters, conditional PutItem of the
/// same attributes, the same BE update), alternated so both see the same
/// emulator state and machine load.
async fn request_path(sdk: &aws_config::SdkConfig, samples: usize, round: usize) -> RequestPath {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let config = config(&format!("bench-latency-r{round}"), 1);
    create_tables(&dynamodb, &config).await;
    let store = DynamoStore::new(dynamodb.clone(), &config).with_meter(Meter::new());
    let counter = Counter::new(store.clone(), u64::MAX / 2);
    let scope = Scope::new("latency").unwrap();
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let (mut library, mut raw) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for n in 0..samples + 20 {
        let id = ResourceId::new(format!("lib-{n:06}")).unwrap();
        let started = Instant::now();
        counter
            .create(&scope, &id, Item::default(), now_millis())
            .await
            .expect("create");
        let lib = started.elapsed();

        let started = Instant::now();
        dynamodb
            .query()
            .table_name(&config.counters_table)
            .key_condition_expression("#s = :s")
            .expression_attribute_names("#s", "scope")
            .expression_attribute_values(":s", s("raw"))
            .consistent_read(true)
            .send()
            .await
            .expect("query");
        // The same item and the same counter update the library writes.
        let now = AttributeValue::N(now_millis().to_string());
        dynamodb
            .put_item()
            .table_name(&config.resources_table)
            .item("scope", s("raw"))
            .item("id", s(&format!("raw-{n:06}")))
            .item("counter_processed", AttributeValue::Bool(false))
            .item("deleted", AttributeValue::Bool(false))
            .item("incarnation", s("0123456789abcdef0123456789abcdef"))
            .item("created_at", now.clone())
            .condition_expression("attribute_not_exists(#s)")
            .expression_attribute_names("#s", "scope")
            .send()
            .await
            .expect("put");
        dynamodb
            .update_item()
            .table_name(&config.counters_table)
            .key("scope", s("raw"))
            .key("name", s("best_effort"))
            .update_expression("ADD #count :delta, #version :one SET #updated_at = :now")
            .expression_attribute_names("#count", "count")
            .expression_attribute_names("#version", "version")
            .expression_attribute_names("#updated_at", "updated_at")
            .expression_attribute_values(":delta", AttributeValue::N("1".into()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":now", now)
            .send()
            .await
            .expect("update");
        let bare = started.elapsed();
        // The first 20 of each warm connections and tables up.
        if n >= 20 {
            library.push(lib);
            raw.push(bare);
        }
    }
    let requests = store.meter().snapshot().requests.total();
    let (library, raw) = (latency(library), latency(raw));
    RequestPath {
        round_trips_per_create: requests as f64 / (samples + 20) as f64,
        overhead_p50_percent: (library.p50_ms / raw.p50_ms - 1.0) * 100.0,
        library,
        raw,
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**not met**" }
}

fn markdown(results: &Results) -> String {
    let mut out = String::new();
    let line = |out: &mut String, text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(&mut out, "# Benchmarks\n".into());
    line(
        &mut out,
        format!(
            "Generated by `make bench` at commit `{}` ({} build, one private fakecloud; \
             `tests/benches/pipeline.rs`, `tests/benches/modes.rs`, charts by `tests/benches/chart.py`). Every \
             figure is measured over several runs, each on fresh tables (or a scope of its own), and given as \
             median (min–max), the median alone where the runs agree: the designs and the request path {} \
             rounds, the sharded run {}, the throttling run {}, the ceiling {}, the metering {}, the load run and \
             the audit scan as their section says. Sizes are per run. To keep `make bench` under about 25 minutes on 2 \
             shared cores with the spread, two runs were made smaller per run than when they were run once: the \
             designs take {} creates per round (3,000 in the single run before) and the sharded run {} creates \
             per shard count per round (3,000 before), so each totals about what the single run did; the \
             throttling run (paced) and the load run keep their sizes. Reproduce with:\n\n```sh\nmake bench    \
             # BENCH_EVENTS=1000 BENCH_SCOPES=1 BENCH_LANES=4 BENCH_SHARDS=8 BENCH_RECORD_WORKERS=8 \
             BENCH_LATENCY_SAMPLES=400 BENCH_DESIGN_RUNS=3\n              # BENCH_E2E_CREATES=1000 BENCH_E2E_RUNS=3 \
             BENCH_THROTTLE_CREATES=1500 BENCH_THROTTLE_WORKERS=16 BENCH_THROTTLE_RATE=50 BENCH_THROTTLE_DEMAND=500 \
             BENCH_THROTTLE_RUNS=3\n              # BENCH_CEILING_RUNS=3 BENCH_CEILING_SCALE_DIVISOR=50 \
             BENCH_CEILING_STEP_MS=1500 BENCH_METER_ITEMS=200 BENCH_METER_RUNS=3 BENCH_ITEMS=4000 BENCH_LOAD_RUNS=3 \
             BENCH_SEGMENTS=8\n```\n",
            results.commit,
            if cfg!(debug_assertions) { "debug" } else { "release" },
            results.rounds,
            results.sharded.rounds,
            results.throttling.rounds,
            results.ceiling.runs.len(),
            results.metering.runs,
            results.events,
            results.sharded.creates,
        ),
    );
    line(
        &mut out,
        format!(
            "Workload per design and round, each on fresh tables: {} creates over {} hot scope(s) through the request path, \
             consumed by {} concurrent consumers (records split by item key: several stream shards carrying one \
             hot scope), batch size {}; then a quarter of the items deleted and consumed the same way; then a churn of creates and deletes. fakecloud \
             {}, {} cores shared by the emulator and the benchmark.\n",
            results.events, results.scopes, results.lanes, results.batch_size, results.fakecloud, results.cores
        ),
    );
    line(&mut out, "![stream consumer designs](docs/benchmarks.png)\n".into());
    line(
        &mut out,
        "| design | EC shards | workers per invocation | counted events/s | vs per-record | vs per-record (concurrent) | WU / counted create | WU / counted delete | counter-item writes / event | busiest counter item: writes / event | projected per-scope cap on DynamoDB, events/s | transactions | conflicts | retries |".into(),
    );
    line(
        &mut out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into(),
    );
    let per_record = |concurrent: bool| {
        results
            .designs
            .iter()
            .find(|d| {
                d.eventual_shards == 1 && d.design.starts_with("per-record") && (d.record_workers > 1) == concurrent
            })
            .expect("both per-record designs")
    };
    let (base, concurrent_base) = (per_record(false), per_record(true));
    let events_per_second = |d: &DesignResult| d.events_per_second;
    for d in &results.designs {
        line(
            &mut out,
            format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                d.design,
                d.eventual_shards,
                d.record_workers,
                d.spread(events_per_second).show(0),
                d.ratio(base, events_per_second).show_with(1, "x"),
                d.ratio(concurrent_base, events_per_second).show_with(1, "x"),
                d.spread(|r| r.creates.write_units_per_event).show(2),
                d.spread(|r| r.deletes.write_units_per_event).show(2),
                d.spread(|r| r.counter_item_writes_per_event).show(4),
                d.spread(|r| r.hottest_counter_writes_per_event).show(4),
                d.spread(|r| r.projected_scope_cap).show(0),
                d.spread(|r| r.transactions as f64).show(0),
                d.spread(|r| r.conflicts as f64).show(0),
                d.spread(|r| r.retries as f64).show(0),
            ),
        );
    }
    line(
        &mut out,
        format!(
            "\nThe per-record design is measured two ways. *per-record* is the seed's handler: each invocation \
             writes its records one after another, one transaction each. *per-record (concurrent)* gives it the \
             concurrency the batched design has: the same {} lanes, the same batches of {}, the same emulator, and \
             inside each invocation the batch split by item key into {} parts processed at once (the batched \
             processor writes up to {} counter groups of a batch at once; on one hot scope it has one group, so \
             this baseline has more transactions in flight than the batched design, never fewer). A failure is \
             reported at the lowest record not completed, as a partial batch response would. The ratios of the \
             batched designs against both are in the two `vs` columns. The emulator serialises transactions, so \
             more of them in flight buy per-record little here, and on this shared 2-core machine the two \
             per-record rows have come out either way round from one run to the next; on DynamoDB per-record is capped at about 500 events/s per scope by its hot counter item whatever its \
             concurrency (the projected cap column), so neither baseline can approach the batched design.\n",
            results.lanes,
            results.batch_size,
            per_record(true).record_workers,
            GROUP_CONCURRENCY
        ),
    );
    line(
        &mut out,
        "\nChurn (after the deletes, as many creates as deletes of one scope, interleaved, consumed together): \
         every stream transaction writes its counter item, also with a net delta of 0, so that an audit \
         counting the scope sees the processed items change (`version` bumped; DESIGN §5a). The code before \
         that fix left the counter out of a zero-delta transaction. At most one counter write per transaction \
         is added, 2 WU over up to 99 records (about 0.02 WU per event); in per-record mode only the delete of \
         a never-counted item gains one (2 WU). The lanes split records by item key, so a batch mixes creates \
         and deletes in varying proportions and only some transactions net to zero.\n"
            .into(),
    );
    line(
        &mut out,
        "| design | counted events | transactions | of them with a zero delta | WU / counted event | before the fix (without those counter writes) | cost of the fix |\n|---|---:|---:|---:|---:|---:|---:|"
            .into(),
    );
    for d in &results.designs {
        let c = |f: fn(&Phase) -> f64| d.spread(|r| f(&r.churn));
        line(
            &mut out,
            format!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                d.design,
                c(|c| c.events as f64).show(0),
                c(|c| c.transactions as f64).show(0),
                c(|c| c.version_only_counter_writes as f64).show(0),
                c(|c| c.write_units_per_event).show(3),
                c(|c| c.write_units_per_event_without_version_only).show(3),
                c(|c| 100.0
                    * (c.write_units_per_event / c.write_units_per_event_without_version_only.max(f64::MIN_POSITIVE)
                        - 1.0))
                .show_signed(1, " %"),
            ),
        );
    }
    let rp = |f: fn(&RequestPath) -> f64| Spread::of(results.request_paths.iter().map(f));
    let (round_trips, overhead) = (rp(|r| r.round_trips_per_create), rp(|r| r.overhead_p50_percent));
    line(
        &mut out,
        format!(
            "\nRequest path ({} sequential creates each, alternated, {} rounds on fresh tables; median (min–max) \
             over the rounds): library p50 {}, p99 {}; the same three requests sent bare p50 {}, p99 {}; overhead \
             at p50 {}; {} round trips per create.\n",
            results.request_paths.first().map_or(0, |r| r.library.samples),
            results.request_paths.len(),
            rp(|r| r.library.p50_ms).show_with(2, " ms"),
            rp(|r| r.library.p99_ms).show_with(2, " ms"),
            rp(|r| r.raw.p50_ms).show_with(2, " ms"),
            rp(|r| r.raw.p99_ms).show_with(2, " ms"),
            overhead.show_signed(1, " %"),
            round_trips.show(2),
        ),
    );
    let batched = results
        .designs
        .iter()
        .find(|d| d.design == "batched")
        .expect("batched design");
    // The fastest design at the median, against each baseline's median.
    let best = results
        .designs
        .iter()
        .map(|d| d.spread(events_per_second).median)
        .fold(0.0, f64::max);
    let (base, concurrent_base) = (
        base.spread(events_per_second).median,
        concurrent_base.spread(events_per_second).median,
    );
    let counter_writes = batched.spread(|r| r.counter_item_writes_per_event).median;
    let create_units = batched.spread(|r| r.creates.write_units_per_event);
    out.push_str(&results.sharded.markdown());
    out.push_str(&results.ceiling.markdown());
    out.push_str(&results.metering.markdown());
    out.push_str(&results.throttling.markdown());
    line(&mut out, "\n## Targets\n".into());
    line(&mut out, "| target | measured | |\n|---|---:|---|".into());
    for (target, measured, met) in [
        (
            "WU per counted create <= 2.1 at batch size 100 (per-record 4.0)".to_owned(),
            create_units.show(2),
            create_units.median <= 2.1,
        ),
        (
            "counter-item writes per event <= 1/50".to_owned(),
            format!("1/{:.0}", 1.0 / counter_writes.max(f64::MIN_POSITIVE)),
            counter_writes <= 1.0 / 50.0,
        ),
        (
            "counted events/s >= 5x per-record (records one after another)".to_owned(),
            format!("{:.1}x", best / base),
            best / base >= 5.0,
        ),
        (
            "counted events/s >= 5x per-record with the same concurrency".to_owned(),
            format!("{:.1}x", best / concurrent_base),
            best / concurrent_base >= 5.0,
        ),
        (
            "request path <= 3 round trips per create".to_owned(),
            round_trips.show(2),
            round_trips.median <= 3.0,
        ),
        (
            "library overhead <= 10 % over raw round trips at p50".to_owned(),
            overhead.show_signed(1, " %"),
            overhead.median <= 10.0,
        ),
    ]
    .into_iter()
    .chain(results.sharded.targets())
    .chain(results.ceiling.targets())
    .chain(results.throttling.targets())
    {
        line(&mut out, format!("| {target} | {measured} | {} |", verdict(met)));
    }
    line(
        &mut out,
        "\nWrite units are the capacity the emulator reports (`ReturnConsumedCapacity=TOTAL`, a transactional \
         write counted twice), summed by the store's meter over the requests the kit sent; a cancelled \
         transaction reports none. The emulator has no per-item throughput limit, so the 1,000 WU/s cap of \
         one DynamoDB item (about 500 per-record events/s per scope) does not show here: on DynamoDB the \
         per-record design is capped there, the batched one writes the hot counter once per batch. The \
         emulator serialises transactions, so concurrent consumers see no `TransactionConflict` here; \
         sharding the eventual counter shows in the writes its busiest item takes (each counter item's \
         `version` counts its writes), from which the projected cap follows: 1,000 WU/s over 2 WU per \
         transactional counter write. Counter-item writes per event are the scopes per batch over the batch \
         size: a batch of 100 records of one scope needs two transactions (100 actions at most, counter \
         included), hence 1/50 and about 2.04 WU per counted create; a batch spread over k scopes writes k \
         counters. Strict admission never overshooting with shards (0 overshoots in 10,000 simulated \
         schedules) is proved by `make test` (the simulation), not measured here."
            .into(),
    );
    out
}

/// `git describe` of the tree measured.
fn commit() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".into(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        )
}

/// The figures `make bench`'s first part (`pipeline.rs`) wrote, as a section.
fn pipeline_markdown(path: &std::path::Path) -> String {
    let Ok(raw) = std::fs::read_to_string(path) else {
        return "\n## The deployed pipeline under load, and the audit's scan rate\n\nNot in this run: \
                `target/bench/pipeline.json` is missing (run `make bench`, which runs `pipeline.rs` first).\n"
            .into();
    };
    let v: serde_json::Value = serde_json::from_str(&raw).expect("pipeline.json");
    let (load, audit) = (&v["load"], &v["audit"]);
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
    let spread = |x: &serde_json::Value| serde_json::from_value::<Spread>(x.clone()).expect("a spread");
    let (raw, aud) = (
        spread(&audit["raw_items_per_second"]),
        spread(&audit["audit_items_per_second"]),
    );
    let ms = |key: &str| spread(&load[key]).show_with(2, " ms");
    format!(
        "\n## The deployed pipeline under load, and the audit's scan rate\n\n\
         From `tests/benches/pipeline.rs` in the same `make bench`: the stack deployed by `counterctl` on a \
         private emulator, `counterctl load` ({} operations, {} workers, {} scopes, a fifth deletes) while the \
         local runner plays the deployed mappings (handlers in process), run {} times on the same deployment \
         (scopes and ids of their own each time); median (min–max) over the runs, drained and audit over all \
         of them.\n\n\
         | operations/s | create p50 | create p95 | create p99 | delete p50 | delete p99 | drained | drain after \
         the load | audit after the drain | overshoots |\n|---:|---:|---:|---:|---:|---:|---|---:|---|---:|\n\
         | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n\n\
         Audit (`counterctl audit`, segmented Scan and the counters) against a bare parallel Scan that only \
         counts, {} items (after all the load runs), {} segments, {} rounds: the audit reads {} items/s, the \
         bare scan {} items/s; audit/raw time {:.2} at the median.\n",
        load["operations"],
        load["workers"],
        load["scopes"],
        load["runs"],
        spread(&load["operations_per_second"]).show(0),
        ms("create_p50_ms"),
        ms("create_p95_ms"),
        ms("create_p99_ms"),
        ms("delete_p50_ms"),
        ms("delete_p99_ms"),
        load["drained"],
        spread(&load["drain_seconds"]).show_with(2, " s"),
        if load["drift"].as_bool() == Some(false) {
            "clean"
        } else {
            "**drift**"
        },
        load["overshoots"],
        audit["items"],
        audit["segments"],
        audit["rounds"],
        aud.show(0),
        raw.show(0),
        f(&audit["audit_over_raw"]),
    )
}

/// The ceiling run's parameters from the environment. Split for heat takes
/// AWS's minutes unless `BENCH_CEILING_SPLIT_AFTER_S` compresses it (the
/// report then says so through the model's description). Durations given
/// here (a step, split for heat) are in model time.
fn ceiling_params() -> ceiling::Params {
    let mut model =
        e2e::capacity::CapacityParams::dynamodb(1.0 / env_number("BENCH_CEILING_SCALE_DIVISOR", 10).max(1) as f64);
    // Time dilated by the scale (a window of 1 s / scale serves DynamoDB's
    // units of a second) unless `BENCH_CEILING_UNDILATED=1`.
    if std::env::var_os("BENCH_CEILING_UNDILATED").is_none() {
        model = model.dilated();
    }
    if let Ok(seconds) = std::env::var("BENCH_CEILING_SPLIT_AFTER_S") {
        model.split_after = std::time::Duration::from_secs(seconds.parse().expect("seconds"));
    }
    let shards: Vec<u32> = std::env::var("BENCH_CEILING_SHARDS")
        .ok()
        .map(|list| list.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1]);
    // `BENCH_CEILING_KEYS`: the `ScopeKeyShards` values to run the kit at
    // (each with every shard count).
    let keys: Vec<u32> = std::env::var("BENCH_CEILING_KEYS")
        .ok()
        .map(|list| list.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1]);
    // `BENCH_CEILING_SPREAD`: the `ResourceKeySpread` values (M resources
    // keys per counters key) to run each of those at (default 1).
    let spreads: Vec<u32> = std::env::var("BENCH_CEILING_SPREAD")
        .ok()
        .map(|list| list.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1]);
    let mut approaches: Vec<ceiling::Approach> = keys
        .iter()
        .flat_map(|&keys| spreads.iter().map(move |&spread| (keys, spread)))
        .flat_map(|(keys, spread)| {
            shards
                .iter()
                .map(move |&shards| ceiling::Approach::Kit { shards, keys, spread })
        })
        .collect();
    // `BENCH_CEILING_WARM_WRITE_UNITS`: the tables pre-warmed
    // (`WarmThroughput`) to serve this many write units a second (and three
    // times as many read units) from the start, as many partitions.
    // `BENCH_CEILING_TABLE_QUOTA`: the account's per-table quota raised to
    // this many units a second, reads and writes each (default 40,000; a
    // Service Quotas request on AWS).
    if let Ok(units) = std::env::var("BENCH_CEILING_TABLE_QUOTA") {
        let units: f64 = units.parse().expect("units");
        if let Some(table) = model.table.as_mut() {
            table.quota_write_units = units;
            table.quota_read_units = units;
        }
    }
    if let Ok(units) = std::env::var("BENCH_CEILING_WARM_WRITE_UNITS") {
        let units: f64 = units.parse().expect("write units");
        if let Some(table) = model.table.as_mut() {
            table.initial_write_units = table.initial_write_units.max(units);
            table.initial_read_units = table.initial_read_units.max(3.0 * units);
        }
    }
    // `BENCH_CEILING_ANCHORS`: both (default), `plain`, `transaction`, or `none`.
    let anchors = std::env::var("BENCH_CEILING_ANCHORS").unwrap_or_default();
    if matches!(anchors.as_str(), "" | "both" | "plain") {
        approaches.push(ceiling::Approach::Plain);
    }
    if matches!(anchors.as_str(), "" | "both" | "transaction") {
        approaches.push(ceiling::Approach::Transaction);
    }
    ceiling::Params {
        model,
        approaches,
        runs: env_number("BENCH_CEILING_RUNS", 1).max(1) as usize,
        step: std::time::Duration::from_secs(env_number("BENCH_CEILING_STEP_S", 10).max(1)),
        min_requests: env_number("BENCH_CEILING_MIN_REQUESTS", 1000),
        start_share: env_number("BENCH_CEILING_START_PERCENT", 60) as f64 / 100.0,
        growth: 1.25,
        refine: env_number("BENCH_CEILING_REFINE", 2) as usize,
        lanes: env_number("BENCH_LANES", 4).max(1) as usize,
        target: std::env::var("BENCH_CEILING_TARGET")
            .ok()
            .map(|creates| creates.parse().expect("BENCH_CEILING_TARGET: creates/s")),
        sequential_ids: std::env::var("BENCH_CEILING_IDS").is_ok_and(|ids| ids == "sequential"),
        // Lambda's default concurrency quota per Region ("Lambda quotas").
        in_flight: env_number("BENCH_CEILING_IN_FLIGHT", 1000).max(1),
    }
}

#[tokio::main]
async fn main() {
    // `BENCH_CEILING_ONLY=1`: the ceiling run alone, to target/bench/ceiling.json.
    if std::env::var_os("BENCH_METER_ONLY").is_some() {
        let emulator = Emulator::start();
        let metering = metering::run(&emulator, env_number("BENCH_METER_ITEMS", 200).max(1), 1).await;
        println!("{}", metering.markdown());
        return;
    }
    if std::env::var_os("BENCH_CEILING_ONLY").is_some() {
        let emulator = Emulator::start();
        let ceiling = ceiling::run(&emulator, &ceiling_params()).await;
        println!("{}", ceiling.markdown());
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
        std::fs::create_dir_all(&dir).expect("target/bench");
        std::fs::write(
            dir.join("ceiling.json"),
            serde_json::to_string_pretty(&ceiling).expect("json"),
        )
        .expect("write ceiling.json");
        return;
    }
    // Every figure is measured `*_RUNS` times (3 by default) on fresh
    // tables; sizes are per run.
    let events = env_number("BENCH_EVENTS", 1000);
    let rounds = env_number("BENCH_DESIGN_RUNS", 3).max(1) as usize;
    let scopes = env_number("BENCH_SCOPES", 1).max(1);
    let lanes = env_number("BENCH_LANES", 4).max(1) as usize;
    let shards = env_number("BENCH_SHARDS", 8) as u32;
    let samples = env_number("BENCH_LATENCY_SAMPLES", 400) as usize;
    let emulator = Emulator::start();
    let sdk = emulator.sdk_config().await;
    let record_workers = env_number("BENCH_RECORD_WORKERS", GROUP_CONCURRENCY as u64).max(1) as usize;
    let designs = [
        Design {
            name: "per-record",
            mode: Mode::PerRecord,
            shards: 1,
            record_workers: 1,
        },
        Design {
            name: "per-record (concurrent)",
            mode: Mode::PerRecord,
            shards: 1,
            record_workers,
        },
        Design {
            name: "batched",
            mode: Mode::Batched,
            shards: 1,
            record_workers: 1,
        },
        Design {
            name: "batched+sharded",
            mode: Mode::Batched,
            shards,
            record_workers: 1,
        },
    ];
    let mut runs: Vec<Vec<DesignResult>> = vec![Vec::new(); designs.len()];
    let mut request_paths = Vec::new();
    // Round by round, every design in each, so machine load drifts over
    // all of them alike.
    for round in 0..rounds {
        for (design, runs) in designs.iter().zip(&mut runs) {
            let result = run_design(&sdk, *design, events, scopes, lanes, round).await;
            println!(
                "== {round} {:<16} {:>7.0} counted events/s | creates {} in {:.2}s: {:.2} WU/event, {:.4} counter writes/event, {} tx, {} conflicts, {} retries | deletes {} in {:.2}s: {:.2} WU/event",
                result.design,
                result.events_per_second,
                result.creates.events,
                result.creates.seconds,
                result.creates.write_units_per_event,
                result.creates.counter_item_writes_per_event,
                result.creates.transactions,
                result.creates.conflicts,
                result.creates.retries,
                result.deletes.events,
                result.deletes.seconds,
                result.deletes.write_units_per_event,
            );
            runs.push(result);
        }
        let request_path = request_path(&sdk, samples, round).await;
        println!(
            "== {round} request path: library p50 {:.2} ms p99 {:.2} ms; raw p50 {:.2} ms p99 {:.2} ms; overhead p50 {:+.1} %; {:.2} round trips/create",
            request_path.library.p50_ms,
            request_path.library.p99_ms,
            request_path.raw.p50_ms,
            request_path.raw.p99_ms,
            request_path.overhead_p50_percent,
            request_path.round_trips_per_create
        );
        request_paths.push(request_path);
    }
    let results: Vec<DesignRuns> = designs
        .iter()
        .zip(runs)
        .map(|(design, runs)| DesignRuns {
            design: design.name,
            eventual_shards: design.shards,
            record_workers: design.record_workers,
            runs,
        })
        .collect();
    let sharded = sharded::run(
        &sdk,
        &[1, 4, 16],
        env_number("BENCH_E2E_CREATES", 1000),
        8,
        lanes,
        samples,
        env_number("BENCH_E2E_RUNS", 3).max(1) as usize,
    )
    .await;
    for run in &sharded.runs {
        println!(
            "== sharded {} {:>2}: busiest item writes/create: request {:.4} stream {:.4}; single-item bound (arithmetic, not measured) {:.0} creates/s (request {:.0}, stream {:.0}); p50 {:.2} ms ({:+.1} %) p99 {:.2} ms; round trips {:.2}, strict {:.2} admitted {:.2} refused",
            run.round,
            run.shards,
            run.request_busiest_writes_per_create,
            run.stream_busiest_writes_per_event,
            run.ceiling,
            run.request_ceiling,
            run.stream_ceiling,
            run.latency.p50_ms,
            run.p50_vs_unsharded_percent,
            run.latency.p99_ms,
            run.round_trips_per_create,
            run.strict_round_trips_per_create,
            run.strict_round_trips_per_refused_create,
        );
    }
    let throttling = throttling::run(
        &emulator,
        &[(1, true), (4, false), (4, true), (16, false), (16, true)],
        env_number("BENCH_THROTTLE_CREATES", 1500),
        env_number("BENCH_THROTTLE_WORKERS", 16).max(1) as usize,
        env_number("BENCH_THROTTLE_RATE", 50).max(1) as f64,
        env_number("BENCH_THROTTLE_DEMAND", 500).max(1) as f64,
        env_number("BENCH_THROTTLE_RUNS", 3).max(1) as usize,
    )
    .await;
    for run in &throttling.runs {
        println!(
            "== throttled {} {:>2} shards, retry on other shards {:<5}: {:.0} creates/s, {} throttled, {} swallowed, undercount {} ({:.2} %)",
            run.round,
            run.shards,
            run.retry_on_other_shards,
            run.creates_per_second,
            run.throttled,
            run.swallowed,
            run.undercount,
            run.undercount_percent
        );
    }
    let ceiling = ceiling::run(&emulator, &ceiling_params()).await;
    for run in &ceiling.runs {
        println!(
            "== ceiling {}: {:.0} DynamoDB creates/s (arithmetic {:.0}), bound by {}",
            run.approach.label(),
            run.ceiling,
            ceiling::arithmetic_bound(run.approach),
            run.bound
        );
    }
    let metering = metering::run(
        &emulator,
        env_number("BENCH_METER_ITEMS", 200).max(1),
        env_number("BENCH_METER_RUNS", 3).max(1) as usize,
    )
    .await;
    for row in &metering.rows {
        println!(
            "== metered {:>4} B: create {:.2} WU {:.2} RU request + {:.2} WU {:.2} RU stream; delete {:.2} WU {:.2} RU request + {:.2} WU stream; plain create {:.2} WU {:.2} RU",
            row.payload_bytes,
            row.create_request.write,
            row.create_request.read,
            row.create_stream.write,
            row.create_stream.read,
            row.delete_request.write,
            row.delete_request.read,
            row.delete_stream.write,
            row.plain_create.write,
            row.plain_create.read,
        );
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let results = Results {
        sharded,
        throttling,
        ceiling,
        metering,
        commit: commit(),
        events,
        scopes,
        lanes: lanes as u64,
        batch_size: BATCH_SIZE,
        rounds,
        designs: results,
        request_paths,
        fakecloud: std::fs::read_to_string(root.join("localstack/fakecloud.version"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|_| "?".into()),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    std::fs::write(
        dir.join("modes.json"),
        serde_json::to_string_pretty(&results).expect("json"),
    )
    .expect("write modes.json");
    let mut document = markdown(&results);
    document.push_str(&pipeline_markdown(&dir.join("pipeline.json")));
    std::fs::write(root.join("BENCHMARKS.md"), document).expect("write BENCHMARKS.md");
    println!("wrote BENCHMARKS.md and target/bench/modes.json");
}
