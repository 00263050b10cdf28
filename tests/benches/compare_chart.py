"""Draws docs/comparison.png (the counter approaches side by side, the
median of their runs with the range as whiskers) from
target/compare/compare.json (written by `cargo bench -p e2e --bench
compare`). Run by `make compare` with the venv's matplotlib."""

import json
import pathlib
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = pathlib.Path(__file__).resolve().parents[2]
results = json.loads((root / "target/compare/compare.json").read_text())
runs = {}
for r in results["rows"]:
    runs.setdefault(r["strategy"], []).append(r)
names = list(runs)


def extra(r):
    return r["extra_increments"] + r["extra_decrements"]


def silent(r):
    return extra(r) - r["errors"]


def all_write_units(r):
    return r["write_units_per_op"] + r["unreported_write_units_per_op"] + r["pipeline_write_units_per_op"]


def color(name):
    rs = runs[name]
    if all(silent(r) > 0 for r in rs):
        return "#c62828"
    if any(silent(r) > 0 for r in rs):
        return "#ef6c00"
    return "#2e7d32" if name.startswith("hybrid") else "#4f81bd"


colors = [color(n) for n in names]


def spread(value):
    """Median per approach, and its distance to the lowest and highest run."""
    medians, low, high = [], [], []
    for name in names:
        values = [value(r) for r in runs[name]]
        m = statistics.median(values)
        medians.append(m)
        low.append(m - min(values))
        high.append(max(values) - m)
    return medians, [low, high]


panels = [
    (
        "changes applied beyond the reported errors\n(red: in every run; orange: in some runs)",
        spread(silent),
        "{:+.0f}",
    ),
    (
        "threshold overshoot after the +1s\n(ledger: no threshold)",
        spread(lambda r: r["overshoot"] if r["overshoot"] is not None else 0),
        "{:.0f}",
    ),
    ("DynamoDB round trips per change\n(SDK retries included)", spread(lambda r: r["round_trips_per_op"]), "{:.2f}"),
    ("write units per change, all charged\n(refused, unreported, pipeline)", spread(all_write_units), "{:.2f}"),
    ("p99 latency per change, ms (emulator)", spread(lambda r: r["latency"]["p99_ms"]), "{:.0f}"),
    ("errors surfaced to the callers", spread(lambda r: r["errors"]), "{:.0f}"),
]
fig, axes = plt.subplots(2, 3, figsize=(17, 9.5), sharey=True)
for ax, (title, (values, ranges), fmt) in zip(axes.flat, panels):
    bars = ax.barh(names, values, color=colors, xerr=ranges, error_kw={"elinewidth": 0.8, "capsize": 2})
    ax.set_title(title, fontsize=10)
    ax.invert_yaxis() if ax is axes.flat[0] else None
    ax.tick_params(axis="y", labelsize=9)
    ax.axvline(0, color="#424242", linewidth=0.8)
    for bar, value in zip(bars, values):
        ax.annotate(
            fmt.format(value),
            (bar.get_width(), bar.get_y() + bar.get_height() / 2),
            xytext=(3 if value >= 0 else -3, 0),
            textcoords="offset points",
            ha="left" if value >= 0 else "right",
            va="center",
            fontsize=8,
        )
    ax.margins(x=0.2)
w = results["workload"]
fig.suptitle(
    f"Counter approaches on fakecloud {results['fakecloud']}: {w['callers']} callers, {w['increments']} x +1 "
    f"(threshold {w['threshold']}), then {w['decrements']} x -1, under injected faults: "
    f"median and range of {len(results['seeds'])} fault seeds",
    fontsize=11,
)
fig.tight_layout()
out = root / "docs/comparison.png"
out.parent.mkdir(exist_ok=True)
fig.savefig(out, dpi=100)
print(f"wrote {out.relative_to(root)}", file=sys.stderr)
