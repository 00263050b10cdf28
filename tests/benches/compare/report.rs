//! COMPARISON.md from the runs' [`Results`]: per approach the median and
//! range over the fault seeds, its full cost, and a verdict per approach: the
//! claim of the AWS database blog's "Implement resource counters with Amazon
//! DynamoDB" (its seven approaches, named by section, paraphrased) or of the
//! kit's design, a hypothesis with a threshold the runs can fail, and whether
//! every run held it; then seed 004's experiment and the fixed text.

use std::fmt::Write as _;

use counter_lab::hybrid::overshoot_bound;

use super::results::{DOLLARS_PER_MILLION_READ_UNITS, DOLLARS_PER_MILLION_WRITE_UNITS, Results, Row, Workload};

/// The runs of each approach, in the order they ran.
fn approaches(results: &Results) -> Vec<(&str, Vec<&Row>)> {
    let mut groups: Vec<(&str, Vec<&Row>)> = Vec::new();
    for row in &results.rows {
        match groups.iter_mut().find(|(name, _)| *name == row.strategy) {
            Some((_, runs)) => runs.push(row),
            None => groups.push((&row.strategy, vec![row])),
        }
    }
    groups
}

/// Median, min and max of `values`.
fn spread(values: impl IntoIterator<Item = f64>) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    let median = match v.len() {
        0 => return (f64::NAN, f64::NAN, f64::NAN),
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    };
    (median, v[0], v[v.len() - 1])
}

/// "median (min to max)", or the one value when all runs agree.
fn show(runs: &[&Row], decimals: usize, value: impl Fn(&Row) -> f64) -> String {
    let (median, min, max) = spread(runs.iter().map(|r| value(r)));
    if min == max {
        format!("{median:.decimals$}")
    } else {
        format!("{median:.decimals$} ({min:.decimals$} to {max:.decimals$})")
    }
}

/// A claim, the hypothesis that stands for it, and the test each run must pass.
struct Verdict {
    approach: &'static str,
    claim: &'static str,
    hypothesis: &'static str,
    holds: fn(&Row, &Workload) -> bool,
}

/// EC equal to the live items within this long after the last change.
const EXACT_WITHIN_SECONDS: f64 = 10.0;

fn exact_in_time(r: &Row) -> bool {
    r.seconds_until_exact.is_some_and(|s| s <= EXACT_WITHIN_SECONDS)
}

const VERDICTS: [Verdict; 12] = [
    Verdict {
        approach: "atomic counter (SDK retries)",
        claim: "the blog's approach 1, atomic counters, paraphrased: `UpdateItem` with `ADD` is not idempotent; a retry after a failure whose write had landed counts it twice.",
        hypothesis: "over-applies silently: changes applied beyond the reported errors ≥ 1 in every run",
        holds: |r, _| r.silent_extra() >= 1,
    },
    Verdict {
        approach: "atomic counter (no retries)",
        claim: "the blog's approach 1, paraphrased: without the retry the failure reaches the caller, who cannot know whether the write landed.",
        hypothesis: "never over-applies silently, and the callers see errors: extra ≤ errors and errors ≥ 1 in every run",
        holds: |r, _| r.silent_extra() <= 0 && r.errors >= 1,
    },
    Verdict {
        approach: "OCC, entity tag read back",
        claim: "the blog's approach 2, optimistic concurrency control, paraphrased: each write sets a random `entityTag` on the condition that the tag read is unchanged; after a failure the item is read back, and the writer's own tag there means its write landed.",
        hypothesis: "the read-back keeps changes from landing twice: extra ≤ errors and no overshoot in every run",
        holds: |r, _| r.silent_extra() <= 0 && r.overshoot.unwrap_or(0) == 0,
    },
    Verdict {
        approach: "OCC on a numeric version",
        claim: "the lab's variant of the blog's approach 2, named as such: a numeric version is the same whoever writes it, so a retry cannot tell its own landed write from a competitor's.",
        hypothesis: "over-applies silently: extra beyond the errors ≥ 1 in every run",
        holds: |r, _| r.silent_extra() >= 1,
    },
    Verdict {
        approach: "OCC with history",
        claim: "the blog's approach 3, optimistic concurrency control with history, paraphrased: the writers kept on the item let a retry find its own write: accurate, at a bigger item.",
        hypothesis: "exact: extra ≤ errors and no overshoot in every run",
        holds: |r, _| r.silent_extra() <= 0 && r.overshoot.unwrap_or(0) == 0,
    },
    Verdict {
        approach: "transaction, SDK token per send",
        claim: "the blog's approach 4, transactions with a client request token, paraphrased: retry with the same token, which makes the call idempotent for 10 minutes; the SDK's own retries are transparent (they carry it). This row is the caller who resends with a new `send()`, against that advice.",
        hypothesis: "a resend with a fresh token over-applies silently: extra beyond the errors ≥ 1 in every run",
        holds: |r, _| r.silent_extra() >= 1,
    },
    Verdict {
        approach: "transaction, token reused",
        claim: "the blog's approach 4, paraphrased: with the same token on every retry, each change is applied once within the 10-minute window.",
        hypothesis: "never over-applies silently: extra ≤ errors and no overshoot in every run",
        holds: |r, _| r.silent_extra() <= 0 && r.overshoot.unwrap_or(0) == 0,
    },
    Verdict {
        approach: "transaction with a marker item",
        claim: "the blog's approach 5, transactions with a marker item, paraphrased: a marker per change, put on the condition it is absent, refuses repeats for as long as it lives.",
        hypothesis: "never over-applies silently: extra ≤ errors and no overshoot in every run",
        holds: |r, _| r.silent_extra() <= 0 && r.overshoot.unwrap_or(0) == 0,
    },
    Verdict {
        approach: "item collection (ledger)",
        claim: "the blog's approach 6, item collection, paraphrased: one item per change is idempotent and contention-free; reading the total costs more as the history grows.",
        hypothesis: "exact, and a read of the total costs ≥ 2 RU: extra ≤ errors and read ≥ 2 RU in every run",
        holds: |r, _| r.silent_extra() <= 0 && r.read_units_per_read >= 2.0,
    },
    Verdict {
        approach: "set of tokens",
        claim: "the blog's approach 7, set of tokens, paraphrased: adding a token twice changes nothing, and the set's size carries a threshold, for a small bounded set (\"for example fifty\").",
        hypothesis: "exact and never past its threshold: extra ≤ errors and no overshoot in every run",
        holds: |r, _| r.silent_extra() <= 0 && r.overshoot.unwrap_or(0) == 0,
    },
    Verdict {
        approach: BEST_EFFORT,
        claim: "the kit's (DESIGN §1, §3): BE may undercount and never overcounts, EC is exact once the stream is drained; admission reads `max(BE, EC)` strongly consistent, then puts, then adds 1 to BE, never resent after an ambiguous error (a throttle, which wrote nothing, is tried again a few times), so concurrent creators may overshoot a little, and a BE increment lost (throttled past those tries, failed, or never sent because its create failed after its put landed) lets later creators admit one more. The last create admitted read BE ≤ limit - 1; every create that landed is then counted in BE, lost to BE, or in flight (one per caller, itself included): overshoot ≤ callers - 1 + BE increments lost, the bound reached when every caller reads limit - 1 at once.",
        hypothesis: "EC equal to the live items within 10 s, BE ≤ live, and overshoot ≤ callers - 1 + the BE increments lost in that run (the live items after the +1s minus BE then) in every run",
        holds: |r, w| {
            exact_in_time(r)
                && r.best_effort.is_some_and(|be| be <= r.value)
                && r.overshoot.unwrap_or(0) <= overshoot_bound(w.callers, r.lost_best_effort.unwrap_or(0))
        },
    },
    Verdict {
        approach: "hybrid, strict admission",
        claim: "the kit's (DESIGN §5): a reservation before the put never overshoots; a reservation whose outcome is unknown is kept (BE over-reserves, the create fails); EC exact once drained.",
        hypothesis: "no overshoot, EC equal to the live items within 10 s, BE ≥ live in every run",
        holds: |r, _| exact_in_time(r) && r.overshoot == Some(0) && r.best_effort.is_some_and(|be| be >= r.value),
    },
];

/// The hybrid's best-effort admission: its verdict shows its bound per run.
const BEST_EFFORT: &str = "hybrid, best-effort admission";

/// Best-effort admission's overshoot against its bound, run by run.
fn bounds(runs: &[&Row], callers: usize) -> String {
    let each: Vec<String> = runs
        .iter()
        .map(|r| {
            let lost = r.lost_best_effort.unwrap_or(0);
            format!(
                "{} ≤ {} - 1 + {lost} = {}",
                r.overshoot.unwrap_or(0),
                callers,
                overshoot_bound(callers, lost)
            )
        })
        .collect();
    format!(
        "; per run, overshoot ≤ callers - 1 + BE increments lost: {}",
        each.join("; ")
    )
}

fn verdicts(results: &Results) -> String {
    let mut out = String::new();
    let groups = approaches(results);
    for v in &VERDICTS {
        let Some((_, runs)) = groups.iter().find(|(name, _)| *name == v.approach) else {
            continue;
        };
        let held = runs.iter().filter(|r| (v.holds)(r, &results.workload)).count();
        let outcome = if held == runs.len() {
            "**Supported**".to_owned()
        } else {
            format!("**Not supported**: held in {held} of {} runs", runs.len())
        };
        let hybrid = runs[0].best_effort.map_or(String::new(), |_| {
            format!(
                "; BE - live {}; EC exact after {} s{}",
                show(runs, 0, |r| (r.best_effort.unwrap_or(0) - r.value) as f64),
                show(runs, 1, |r| r.seconds_until_exact.unwrap_or(f64::INFINITY)),
                if v.approach == BEST_EFFORT {
                    bounds(runs, results.workload.callers)
                } else {
                    String::new()
                }
            )
        });
        let _ = writeln!(
            out,
            "* **{}.** Claim ({}) Hypothesis: {}. Measured (median, range): extra beyond errors {}, errors {}, overshoot {}, \
             extra per 1,000 ambiguous {}, one read of the value {} RU{hybrid}. {outcome}.",
            v.approach,
            v.claim,
            v.hypothesis,
            show(runs, 0, |r| r.silent_extra() as f64),
            show(runs, 0, |r| r.errors as f64),
            show(runs, 0, |r| r.overshoot.unwrap_or(0) as f64),
            show(runs, 0, |r| r.extra_per_1000_ambiguous),
            show(runs, 1, |r| r.read_units_per_read),
        );
    }
    out
}

pub fn markdown(results: &Results) -> String {
    let w = &results.workload;
    let r = &results.rates;
    let runs = results.seeds.len();
    let mut md = String::new();
    let _ = writeln!(md, "# Counter approaches compared\n");
    let seeds: Vec<String> = results.seeds.iter().map(u64::to_string).collect();
    let _ = writeln!(
        md,
        "Generated by `make compare` (`tests/benches/compare.rs`, the strategies in `tests/lab/`, crate `counter-lab`) in {:.0} s: \
         one private fakecloud {} with the stack deployed by `counterctl` and its stream mapping run by the local runner, \
         {} cores shared by the emulator, the pipeline and the callers. {runs} runs of every approach, one per fault seed ({}; \
         `HCK_FAULT_SEED=<first>` replays them). The schedule is seeded per change, not per order of calls: every request names its change \
         (the changes are numbered alike in every approach), and change n draws its faults from its own copy of the plan, seeded for n, in its own order of calls, \
         whatever the interleaving of the callers; the hybrid's stream pipeline, whose requests belong to no one change, draws in order of calls from the same random faults (and bursts of its own, below), restarted for each run. \
         Approaches that send more requests per change still draw more faults (the *ambiguous injected* column). \
         Not run against real DynamoDB: latencies are the emulator's; round trips, capacity units and drift are properties of each approach's code.\n",
        results.seconds,
        results.fakecloud,
        results.cores,
        seeds.join(", ")
    );
    let _ = writeln!(
        md,
        "**Workload**, the same for every approach and run: {} concurrent callers on one hot counter (a fresh one per approach and run), {} changes of +1 \
         against a threshold of {} (for the approaches that take one), then {} changes of -1. \
         The same SDK tuning for all: standard retries, 3 attempts, 5-50 ms backoff; the approaches whose usual code resends do so within the same budget (3 sends); OCC's conflict loop has 40 attempts. \
         The set of tokens runs at the same threshold, not at the fifty or so the blog sizes it for: its overshoot and its cost per change are then comparable with the others', \
         change for change. Its cost follows the item's size: a write is charged 1 WU per KB of the whole item, and {} tokens of 8 characters are about 1.3 KB, so its writes cost 2 WU \
         once the set passes about 125 tokens, where at fifty (about 0.4 KB) every write costs 1 WU.\n",
        w.callers, w.increments, w.threshold, w.decrements, w.threshold
    );
    let _ = writeln!(
        md,
        "**Faults** on every DynamoDB request of the callers and of the hybrid's stream pipeline (`GetItem`, `PutItem`, `UpdateItem`, `Query`, `TransactWriteItems`), from the fault proxy of the e2e tests: \
         HTTP 500 before apply {:.0} %, HTTP 500 after apply (the ambiguous case) {:.0} %, \
         throttling {:.0} %, and on `TransactWriteItems` a `TransactionConflict` cancellation {:.0} %. \
         **Resend bursts**: in every run, {} changes drawn from the run's seed (the same changes in every approach: {}) have the first {} calls of every write operation \
         (`PutItem`, `UpdateItem`, `TransactWriteItems`) answered 500 after they were applied, as many as the SDK's attempts: the SDK gives up, and what the caller's code does next \
         (resend, with which token, or report the error) is tested in every run, not when chance brings a burst. A burst that reaches a write sets part of \
         some rows' figures by construction: the atomic counter with the SDK's retries lands 3 writes for 1 error (2 silent extras), a resend with a new token 1; \
         a burst on a +1 past the threshold reaches no write in an approach that refuses it, and the hybrid sends its put once, so it meets one ambiguous put, \
         not 3 attempts. The stream pipeline, whose requests belong to no change, \
         meets bursts of {} consecutive calls after apply with chance {:.1} % per call instead. Conflicts: OCC's come from real contention (the emulator refuses its stale conditional writes); \
         the emulator serialises transactions, so the injected cancellation stands in for the transaction-against-transaction contention DynamoDB has on a hot item; \
         a plain `PutItem` or `UpdateItem` meets a conflict on DynamoDB only when a transaction holds its item, which never happens to the approaches without transactions, so none is injected there.\n",
        r.fail_before * 100.0,
        r.apply_then_fail * 100.0,
        r.throttle * 100.0,
        r.transaction_conflict * 100.0,
        r.resend_bursts,
        results
            .bursts
            .iter()
            .map(|changes| format!("{changes:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        r.resend_burst_calls,
        r.burst_length,
        r.apply_then_fail_burst * 100.0,
    );
    let _ = writeln!(
        md,
        "**Cost** counts everything a change causes: the capacity the emulator reports (`ReturnConsumedCapacity=TOTAL`); a write refused by its condition, charged 1 WU per KB of the item as DynamoDB charges it \
         ([condition expressions](https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ConditionExpressions.html): a failed conditional write still consumes write capacity), computed from the item's size since the emulator reports none; \
         a write answered 500 after it was applied, charged as the approach's mean applied change; and for the hybrid its stream pipeline (2 WU per record for the transactional flag flip or hard delete, 2 WU per transaction for the counter item, 1 RU per read, from the pipeline's requests). \
         Not charged: transactions cancelled by the injected conflict, and the hybrid's refused conditional puts. Dollars at on-demand prices, US East (N. Virginia): ${DOLLARS_PER_MILLION_WRITE_UNITS} per million write request units, \
         ${DOLLARS_PER_MILLION_READ_UNITS} per million read request units (the prices since the on-demand reduction of 1 November 2024; \
         [pricing](https://aws.amazon.com/dynamodb/pricing/on-demand/)), storage and streams left out.\n"
    );
    let _ = writeln!(md, "![The approaches compared](docs/comparison.png)\n");
    let _ = writeln!(
        md,
        "Each cell: the median over the {runs} runs, and the range (lowest to highest) when they differ.\n"
    );
    let _ = writeln!(
        md,
        "| approach | drift | extra beyond errors | extra per 1,000 ambiguous | ambiguous injected | overshoot | errors | WU/change | RU/change | $ per million changes | round trips/change | p99 ms | exact after s |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, runs) in approaches(results) {
        let threshold = runs[0].threshold.is_some();
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            show(&runs, 0, |r| r.drift as f64),
            show(&runs, 0, |r| r.silent_extra() as f64),
            show(&runs, 0, |r| r.extra_per_1000_ambiguous),
            show(&runs, 0, |r| r.ambiguous_failures as f64),
            if threshold {
                show(&runs, 0, |r| r.overshoot.unwrap_or(0) as f64)
            } else {
                "n/a".to_owned()
            },
            show(&runs, 0, |r| r.errors as f64),
            show(&runs, 2, Row::all_write_units_per_op),
            show(&runs, 2, Row::all_read_units_per_op),
            show(&runs, 2, Row::dollars_per_million_changes),
            show(&runs, 2, |r| r.round_trips_per_op),
            show(&runs, 0, |r| r.latency.p99_ms),
            if runs[0].best_effort.is_some() {
                show(&runs, 1, |r| r.seconds_until_exact.unwrap_or(f64::INFINITY))
            } else {
                "n/a".to_owned()
            },
        );
    }
    let _ = writeln!(
        md,
        "\n*drift*: the stored value at the end (the hybrid: its live items, which EC converges to) minus the sum of the changes the callers were told were applied; \
         *extra beyond errors*: changes that landed beyond those the callers were told were applied, minus the errors they were told of (a change reported as failed that had landed is at most one error; \
         what is left was applied twice while its caller was told once); *extra per 1,000 ambiguous*: all changes landed beyond those reported, per 1,000 500s after apply injected into the approach's writes; \
         *overshoot*: how far the value went past the threshold after the +1s; *errors*: changes that reached their caller as an error; *WU/RU*: all the capacity per change, as above (the hybrid's includes its pipeline); \
         *round trips*: the callers' DynamoDB requests that reached the proxy (SDK retries included) per change; *exact after*: from the last change until EC equals the live items.\n"
    );
    let _ = writeln!(md, "## Verdicts\n");
    let _ = writeln!(
        md,
        "Each approach's claim, a hypothesis that stands for it with a threshold, and whether every one of the {runs} runs held it.\n"
    );
    md.push_str(&verdicts(results));
    let _ = writeln!(
        md,
        "\nThe kit's gapless `Sequence` (issue 15, built beside this lab) gives numbers rather than counts and is not measured here.\n"
    );
    md.push_str(&super::likes::markdown(&results.likes));
    md.push_str(&super::hot_likes::markdown(&results.hot_likes));
    md.push_str(PROTOCOL);
    md
}

/// The client-side multi-item transaction protocol, not rebuilt.
const PROTOCOL: &str = "## Why not the client-side transaction protocol\n\n\
Before `TransactWriteItems` (November 2018), multi-item atomicity on DynamoDB came from a client-side multi-phase commit \
(the Java transactions library of awslabs, its DESIGN.md): a TX record per transaction holds its state and its requests; \
each item is locked by writing the TX record's id into it, a copy of its old image is saved, the write is applied, the TX \
record is moved to committed by a conditional write, then each item is unlocked and its image deleted, and the record is \
finalised and cleaned up. Its own cost figure is **7N + 4 writes** for a transaction of N updates (per item: add the request \
to the TX record, lock, save the image, apply, verify, unlock, delete the image; plus create, commit, finalise, clean), every \
one a sequential round trip and a point where a crashed coordinator leaves locks for others (or a sweeper) to roll forward \
or back; readers must understand the locks to avoid uncommitted reads. For the marker transaction above (N = 2) that is 18 \
writes where `TransactWriteItems` sends one request; for a one-item counter update, 11 against one. Native transactions do \
the same on the service side, all-or-nothing and isolated, up to 100 actions, with idempotency by client request token, at \
twice the write units of the plain writes (the table's WU/change column shows it). Nothing the old protocol offered is \
missing, and it costs an order of magnitude more requests: the lab does not rebuild it.\n";
