"""Draws docs/benchmarks.png (the stream consumer's designs) and
docs/benchmarks-sharded.png (a hot scope's measured ceiling against the
shard count, and BE's undercount under throttling) from
target/bench/modes.json (written by `cargo bench -p e2e --bench modes`).
Run by `make bench` with the venv's matplotlib."""

import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = pathlib.Path(__file__).resolve().parents[2]
results = json.loads((root / "target/bench/modes.json").read_text())
designs = results["designs"]
names = [d["design"].replace(" (", "\n(") for d in designs]
colors = ["#9e9e9e", "#616161", "#4f81bd", "#2e7d32"][: len(names)]


def spread(values):
    """Median and the distances down to the min and up to the max (the
    median of an even count is the upper middle value, as in the tables)."""
    values = sorted(values)
    median = values[len(values) // 2]
    return median, median - values[0], values[-1] - median


def over_runs(f):
    """`f` over each design's runs: medians and their error bars."""
    spreads = [spread([f(r) for r in d["runs"]]) for d in designs]
    return [s[0] for s in spreads], [[s[1] for s in spreads], [s[2] for s in spreads]]


panels = [
    ("counted events/s (median, min-max)", *over_runs(lambda r: r["events_per_second"]), "{:.0f}"),
    (
        "write units per counted create",
        *over_runs(lambda r: r["creates"]["write_units_per_event"]),
        "{:.2f}",
    ),
    (
        "projected per-scope cap on DynamoDB, events/s\n(busiest counter item at 1,000 WU/s; log scale)",
        *over_runs(lambda r: r["projected_scope_cap"]),
        "{:,.0f}",
    ),
]
fig, axes = plt.subplots(1, len(panels), figsize=(13, 4.2))
for ax, (title, values, errors, fmt) in zip(axes, panels):
    bars = ax.bar(names, values, color=colors, yerr=errors, capsize=4)
    ax.set_title(title, fontsize=11)
    ax.tick_params(axis="x", labelsize=9)
    for bar, value in zip(bars, values):
        ax.annotate(
            fmt.format(value),
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    ax.margins(y=0.15)
    if "log scale" in title:
        ax.set_yscale("log")
fig.suptitle(
    f"Stream consumer designs on fakecloud {results['fakecloud']}: {results['events']} creates "
    f"per round, {results['rounds']} rounds, over {results['scopes']} scope(s), {results['lanes']} concurrent consumers, batch size {results['batch_size']}",
    fontsize=11,
)
fig.tight_layout()
out = root / "docs/benchmarks.png"
out.parent.mkdir(exist_ok=True)
fig.savefig(out, dpi=110)
print(f"wrote {out.relative_to(root)}", file=sys.stderr)

# The end-to-end sharded run and the throttling run.
sharded = results["sharded"]["runs"]
shards = list(dict.fromkeys(r["shards"] for r in sharded))
fig, (ceiling, undercount) = plt.subplots(1, 2, figsize=(13, 4.6))
# The measured ceiling (capacity model, median with min-max over the runs),
# beside the single-item arithmetic it replaces.
measured = results["ceiling"]
for ids, style in [("random", "D-"), ("sequential", "s-")]:
    rows = [r for r in measured["rows"] if r["ids"] == ids]
    xs = [r["shards"] for r in rows]
    med = [r["dynamodb"]["median"] for r in rows]
    err = [[m - r["dynamodb"]["min"] for m, r in zip(med, rows)], [r["dynamodb"]["max"] - m for m, r in zip(med, rows)]]
    ceiling.errorbar(xs, med, yerr=err, fmt=style, capsize=4, label=f"measured, {ids} ids (median, min-max)")
    for x, m in zip(xs, med):
        ceiling.annotate(f"{m:,.0f}", (x, m), textcoords="offset points", xytext=(6, -12), fontsize=9)
ceiling.plot(
    shards,
    [spread([r["ceiling"] for r in sharded if r["shards"] == n])[0] for n in shards],
    "o:",
    color="#9e9e9e",
    label="single-item arithmetic (not measured, replaced)",
)
ceiling.axhline(10_000, color="#c62828", linestyle=":", label="goal: 10,000 creates/s")
ceiling.set_xscale("log", base=2)
ceiling.set_yscale("log")
ceiling.set_xticks(shards, [str(n) for n in shards])
ceiling.set_xlabel("BeShardCount = EcShardCount")
ceiling.set_ylabel("DynamoDB creates/s one scope sustains")
ceiling.set_title(
    f"Measured ceiling of one hot scope (capacity model, scale {measured['model']['scale']})\n"
    "1,000 WU/s and 3,000 RU/s per partition, split for heat",
    fontsize=11,
)
ceiling.legend(fontsize=8, loc="upper left")

throttling = results["throttling"]
variants = list(dict.fromkeys((r["shards"], r["retry_on_other_shards"]) for r in throttling["runs"]))
labels = [f"{n} shard{'s' if n > 1 else ''}\n" + ("other shards" if retry and n > 1 else "own shard") for n, retry in variants]
under = [
    spread([r["undercount_percent"] for r in throttling["runs"] if (r["shards"], r["retry_on_other_shards"]) == v])
    for v in variants
]
bars = undercount.bar(
    labels,
    [u[0] for u in under],
    yerr=[[u[1] for u in under], [u[2] for u in under]],
    capsize=4,
    color=["#2e7d32" if retry and n > 1 else "#9e9e9e" for n, retry in variants],
)
for bar, u in zip(bars, under):
    undercount.annotate(f"{u[0]:.2f} %", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=9)
undercount.axhline(1.0, color="#c62828", linestyle=":", label="target: 1 %")
undercount.set_ylabel("BE undercount at the end, % of creates (median, min-max)")
undercount.set_title(
    f"Throttling run: {throttling['demand']:.0f} creates/s, each counter item capped at "
    f"{throttling['item_writes_per_second']:.0f} writes/s\n(BE write refused for heat retried on other shards, or on its own)",
    fontsize=11,
)
undercount.tick_params(axis="x", labelsize=9)
undercount.margins(y=0.15)
undercount.legend(fontsize=8)
fig.suptitle(
    f"A hot scope over shards on fakecloud {results['fakecloud']}: {results['sharded']['creates']} creates per shard count "
    f"per round, {results['sharded']['rounds']} rounds",
    fontsize=11,
)
fig.tight_layout()
out = root / "docs/benchmarks-sharded.png"
fig.savefig(out, dpi=110)
print(f"wrote {out.relative_to(root)}", file=sys.stderr)
