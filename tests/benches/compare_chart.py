"""Draws docs/comparison.png (the counter approaches side by side) from
target/compare/compare.json (written by `cargo bench -p e2e --bench
compare`). Run by `make compare` with the venv's matplotlib."""

import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = pathlib.Path(__file__).resolve().parents[2]
results = json.loads((root / "target/compare/compare.json").read_text())
rows = results["rows"]
names = [r["strategy"] for r in rows]


def color(r):
    extra = r["extra_increments"] + r["extra_decrements"]
    if extra > r["errors"]:
        return "#c62828"
    if extra > 0:
        return "#ef6c00"
    return "#2e7d32" if r["strategy"].startswith("hybrid") else "#4f81bd"


colors = [color(r) for r in rows]
panels = [
    (
        "changes applied beyond what callers were told\n(red: double applies; orange: only failures that landed)",
        [r["extra_increments"] + r["extra_decrements"] for r in rows],
        "{:+d}",
    ),
    (
        "threshold overshoot after the +1s\n(ledger: no threshold)",
        [r["overshoot"] if r["overshoot"] is not None else 0 for r in rows],
        "{:d}",
    ),
    ("DynamoDB round trips per change\n(SDK retries included)", [r["round_trips_per_op"] for r in rows], "{:.2f}"),
    ("write units per change", [r["write_units_per_op"] for r in rows], "{:.2f}"),
    ("p99 latency per change, ms (emulator)", [r["latency"]["p99_ms"] for r in rows], "{:.0f}"),
    ("errors surfaced to the callers", [r["errors"] for r in rows], "{:d}"),
]
fig, axes = plt.subplots(2, 3, figsize=(17, 9.5), sharey=True)
for ax, (title, values, fmt) in zip(axes.flat, panels):
    bars = ax.barh(names, values, color=colors)
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
    f"(threshold {w['threshold']}), then {w['decrements']} x -1, under injected faults (seed {results['seed']})",
    fontsize=11,
)
fig.tight_layout()
out = root / "docs/comparison.png"
out.parent.mkdir(exist_ok=True)
fig.savefig(out, dpi=100)
print(f"wrote {out.relative_to(root)}", file=sys.stderr)
