//! The ceiling run's report: its Markdown section of BENCHMARKS.md and
//! its rows of the targets table.

use crate::ceiling::{Approach, Ceiling, arithmetic_bound};

impl Ceiling {
    fn median(&self, approach: Approach) -> Option<f64> {
        let mut values: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.approach == approach)
            .map(|r| r.ceiling)
            .collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied()
    }

    pub fn markdown(&self) -> String {
        let m = &self.model;
        let mut out = format!(
            "\n## A hot scope's measured ceiling under DynamoDB's limits, beside the anchors\n\n\
             Both tables behind the fault proxy's capacity model (`tests/src/capacity/`, its rules in \
             [docs/capacity-model.md](docs/capacity-model.md)): {}. Rates are \
             measured on the emulator and divided by the scale {} to read in DynamoDB creates/s; a second of \
             the model is {:.1} s of wall time. One hot scope, fresh tables per run. Three creates to one delete of an earlier item are \
             offered open-loop at a constant rate per step (each operation starts at its time, whatever the \
             others do) through the kit (the real `Counter`, best-effort admission, while the real batched \
             `Processor` consumes the stream in {} lanes, polling every {:.0} ms: Lambda's 250 ms divided by \
             the scale, so batches hold as many records as at DynamoDB's rate), and through two anchors a user \
             would pick instead on the same model and scope: *read + put + ADD* (a consistent read of a \
             counter item, a conditional `PutItem`, `UpdateItem ADD 1`; a delete `DeleteItem`, `ADD -1`, with \
             the SDK's retries) and *transaction* (the put or delete and the `ADD` in one `TransactWriteItems` \
             with a client request token, cancellations for conflicts and throttling retried by the caller \
             with the same token). A step lasts at least {:.0} model seconds and {} DynamoDB requests; it passes with at \
             most 1 % of its requests throttled, the offered creates achieved (90 %) and, for the kit, the \
             stream keeping up (its backlog growing by at most a tenth of the step's creates, and not at \
             all past two steps' worth). The rate grows by {}x while steps pass, then the gap to the first failing step \
             is halved. *Ceiling*: the achieved creates/s of the highest passing step; *arithmetic*: what one \
             partition of 1,000 WU/s carries for the approach by the unit rules (under 1 KB).\n\n\
             | approach | ceiling, DynamoDB creates/s | arithmetic | first failing step (offered) | bound by | steps | \
             EC lag p50 / p99 (model time) | BE undercount |\n|---|---:|---:|---:|---|---:|---:|---:|\n",
            self.model_text,
            m.scale,
            m.second.as_secs_f64(),
            self.lanes,
            self.poll_ms,
            self.step_seconds,
            self.min_requests,
            self.growth,
        );
        for run in &self.runs {
            out.push_str(&format!(
                "| {} | **{:.0}** | {:.0} | {} | {} | {} | {} | {} |\n",
                run.approach.label(),
                run.ceiling,
                arithmetic_bound(run.approach),
                if run.first_failing.is_finite() {
                    format!("{:.0}", run.first_failing)
                } else {
                    "-".into()
                },
                run.bound,
                run.steps.len(),
                run.ec_lag
                    .as_ref()
                    .map_or_else(|| "-".into(), |l| format!("{:.0} / {:.0} ms", l.p50_ms, l.p99_ms)),
                run.be_undercount.map_or_else(|| "-".into(), |u| u.to_string()),
            ));
        }
        if let Some(target) = self.target {
            out.push_str(&format!(
                "\nOne step offered at {target:.0} creates/s (no ramp): whether each layout sustains it.\n"
            ));
        }
        out.push_str(&format!(
            "\nIds {}. Steps (offered → achieved creates/s, DynamoDB units; requests; throttled by a partition's key \
             range / by a table-level limit; transaction conflicts; operations failed to the caller):\n\n",
            if self.sequential_ids {
                "numbered in order"
            } else {
                "random"
            }
        ));
        for run in &self.runs {
            let steps: Vec<String> = run
                .steps
                .iter()
                .map(|s| {
                    format!(
                        "{:.0} → {:.0} ({} req, {}/{} thr, {} conf, {} failed{})",
                        s.offered_creates,
                        s.achieved_creates,
                        s.requests,
                        s.throttled_key_range,
                        s.throttled_table,
                        s.conflicts,
                        s.failed,
                        if s.passed { ", pass" } else { "" }
                    )
                })
                .collect();
            out.push_str(&format!("* {}: {}\n", run.approach.label(), steps.join("; ")));
        }
        if let (Some(kit), Some(plain), Some(tx)) = (
            self.runs
                .iter()
                .find_map(|r| matches!(r.approach, Approach::Kit { .. }).then_some(r.approach))
                .and_then(|a| self.median(a)),
            self.median(Approach::Plain),
            self.median(Approach::Transaction),
        ) {
            out.push_str(&format!(
                "\nThe kit's ceiling is {:.2}x the plain anchor's and {:.2}x the transaction anchor's on the same \
                 model. The run took {:.0} s.\n",
                kit / plain.max(f64::MIN_POSITIVE),
                kit / tx.max(f64::MIN_POSITIVE),
                self.seconds
            ));
        }
        out
    }

    pub fn targets(&self) -> Vec<(String, String, bool)> {
        self.runs
            .iter()
            .filter_map(|r| match r.approach {
                Approach::Kit { shards, keys, spread } => Some(((keys * spread, keys, spread, shards), r)),
                _ => None,
            })
            .max_by_key(|(layout, _)| *layout)
            .map(|((_, keys, spread, shards), r)| {
                (
                    format!(
                        "measured per-scope ceiling >= 10,000 creates/s (N = {keys} keys, M = {spread}, {shards} BE shards, scale {})",
                        self.model.scale
                    ),
                    format!("{:.0} (bound by {})", r.ceiling, r.bound),
                    r.ceiling >= 10_000.0,
                )
            })
            .into_iter()
            .collect()
    }
}
