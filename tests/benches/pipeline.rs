//! `make bench`: numbers, not assertions. On one private emulator with the
//! stack deployed by `counterctl`:
//!
//! 1. **load with the pipeline running**: `counterctl load` while the local
//!    runner plays the deployed mappings (handlers in process), then the
//!    time until the stream is drained, and the audit;
//! 2. **audit vs raw scan**: `counterctl audit` (segmented Scan + counters)
//!    against a bare parallel Scan of the same table that only counts items,
//!    same segments, same emulator, same run: the ratio is the audit's
//!    overhead.
//!
//! Sizes: `BENCH_ITEMS` (default 4000 operations per load run),
//! `BENCH_LOAD_RUNS` (3), `BENCH_SEGMENTS` (8).
//!
//! Writes `target/bench/pipeline.json`, which the `modes` bench (run after
//! it by `make bench`) puts into BENCHMARKS.md.

use std::time::Instant;

use e2e::in_process_runner;
use e2e::spread::Spread;
use ops_cli::Report;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn raw_scan(client: &aws_sdk_dynamodb::Client, table: &str, segments: i32) -> u64 {
    let mut tasks = tokio::task::JoinSet::new();
    for segment in 0..segments {
        let (client, table) = (client.clone(), table.to_owned());
        tasks.spawn(async move {
            let mut pages = client
                .scan()
                .table_name(table)
                .segment(segment)
                .total_segments(segments)
                .into_paginator()
                .send();
            let mut n = 0u64;
            while let Some(page) = pages.next().await {
                n += page.expect("scan page").items.unwrap_or_default().len() as u64;
            }
            n
        });
    }
    let mut total = 0;
    while let Some(n) = tasks.join_next().await {
        total += n.expect("scan task");
    }
    total
}

#[tokio::main]
async fn main() {
    let operations = env_number("BENCH_ITEMS", 4000);
    let segments = env_number("BENCH_SEGMENTS", 8);
    let (emulator, ctl, config) = e2e::counterctl::deployed().await;

    // 1. Load with the pipeline running, `BENCH_LOAD_RUNS` times on the
    // same deployment (scopes and ids of their own each), the runner
    // playing the mappings throughout.
    let load_runs = env_number("BENCH_LOAD_RUNS", 3).max(1);
    let runner = in_process_runner(&emulator.endpoint, &config).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let pipeline = async {
        runner
            .run(async {
                let _ = stopped.await;
            })
            .await
            .expect("runner")
    };
    let operations_arg = operations.to_string();
    let loads = async {
        let mut loads = Vec::new();
        for round in 0..load_runs {
            let (seed, prefix) = (round.to_string(), format!("load{round}"));
            let report = ctl
                .run(&[
                    "load",
                    "--scopes",
                    "50",
                    "--scope-prefix",
                    &prefix,
                    "--seed",
                    &seed,
                    "--workers",
                    "8",
                    "--operations",
                    &operations_arg,
                    "--delete-ratio",
                    "0.2",
                    "--limit",
                    "100000",
                    "--drain-timeout",
                    "300",
                ])
                .await
                .expect("load");
            let Report::Load(load) = report else {
                panic!("load report")
            };
            println!(
                "== load {round} with the pipeline running ({} workers, {} scopes)",
                load.workers, load.scopes
            );
            println!(
                "operations {} in {:.2}s: {:.0} ops/s; create p50 {:.2} ms p95 {:.2} ms p99 {:.2} ms; delete p50 {:.2} ms p99 {:.2} ms",
                load.operations,
                load.seconds,
                load.operations_per_second,
                load.create.p50_ms,
                load.create.p95_ms,
                load.create.p99_ms,
                load.delete.p50_ms,
                load.delete.p99_ms
            );
            println!(
                "drained: {} after {:.2}s more; audit after drain: {}; errors: {:?}; overshoots: {}",
                load.drained,
                load.drain_seconds,
                if load.drift { "DRIFT" } else { "clean" },
                load.errors,
                load.overshoots.len()
            );
            loads.push(load);
        }
        let _ = stop.send(());
        loads
    };
    let (loads, run) = tokio::join!(loads, pipeline);
    println!("runner: {}", run.to_string().replace('\n', "\n  "));
    let load = |f: fn(&ops_cli::commands::load::LoadReport) -> f64| Spread::of(loads.iter().map(f));

    // 2. Audit against a raw parallel Scan of the same table.
    let client = aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await);
    let segments_arg = segments.to_string();
    let rounds = 5;
    let (mut raws, mut audits, mut items) = (Vec::new(), Vec::new(), 0);
    for _ in 0..rounds {
        let started = Instant::now();
        items = raw_scan(&client, &config.resources_table, segments as i32).await;
        raws.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let report = ctl.run(&["audit", "--segments", &segments_arg]).await.expect("audit");
        audits.push(started.elapsed().as_secs_f64());
        assert!(matches!(report, Report::Audit(_)));
    }
    let (raw, audit) = (Spread::of(raws), Spread::of(audits));
    // Items/s: the slowest scan gives the lowest rate.
    let rate = |s: &Spread| Spread {
        min: items as f64 / s.max,
        median: items as f64 / s.median,
        max: items as f64 / s.min,
    };
    println!("== audit vs raw parallel scan ({items} items, {segments} segments, median (min-max) of {rounds})");
    println!(
        "raw scan {:.1} ms ({:.0} items/s); audit {:.1} ms ({:.0} items/s, {:.0}-{:.0}); audit/raw = {:.2}",
        raw.median * 1000.0,
        rate(&raw).median,
        audit.median * 1000.0,
        rate(&audit).median,
        rate(&audit).min,
        rate(&audit).max,
        audit.median / raw.median
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let figures = serde_json::json!({
        "load": {
            "runs": loads.len(),
            "operations": operations,
            "workers": loads[0].workers,
            "scopes": loads[0].scopes,
            "seconds": load(|l| l.seconds),
            "operations_per_second": load(|l| l.operations_per_second),
            "create_p50_ms": load(|l| l.create.p50_ms),
            "create_p95_ms": load(|l| l.create.p95_ms),
            "create_p99_ms": load(|l| l.create.p99_ms),
            "delete_p50_ms": load(|l| l.delete.p50_ms),
            "delete_p99_ms": load(|l| l.delete.p99_ms),
            "drain_seconds": load(|l| l.drain_seconds),
            "drained": loads.iter().all(|l| l.drained),
            "drift": loads.iter().any(|l| l.drift),
            "overshoots": loads.iter().map(|l| l.overshoots.len()).sum::<usize>(),
        },
        "audit": {
            "items": items,
            "segments": segments,
            "rounds": rounds,
            "raw_items_per_second": rate(&raw),
            "audit_items_per_second": rate(&audit),
            "audit_over_raw": audit.median / raw.median,
        },
    });
    std::fs::write(
        dir.join("pipeline.json"),
        serde_json::to_string_pretty(&figures).expect("json"),
    )
    .expect("write pipeline.json");
}
