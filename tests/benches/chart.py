"""Draws docs/benchmarks.png from target/bench/modes.json (written by
`cargo bench -p e2e --bench modes`). Run by `make bench` with the venv's
matplotlib."""

import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = pathlib.Path(__file__).resolve().parents[2]
results = json.loads((root / "target/bench/modes.json").read_text())
designs = results["designs"]
names = [d["design"] for d in designs]
colors = ["#9e9e9e", "#4f81bd", "#2e7d32"][: len(names)]

panels = [
    ("counted events/s", [d["events_per_second"] for d in designs], "{:.0f}"),
    ("write units per counted create", [d["creates"]["write_units_per_event"] for d in designs], "{:.2f}"),
    (
        "projected per-scope cap on DynamoDB, events/s\n(busiest counter item at 1,000 WU/s; log scale)",
        [d["projected_scope_cap"] for d in designs],
        "{:,.0f}",
    ),
]
fig, axes = plt.subplots(1, len(panels), figsize=(13, 4.2))
for ax, (title, values, fmt) in zip(axes, panels):
    bars = ax.bar(names, values, color=colors)
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
    f"over {results['scopes']} scope(s), {results['lanes']} concurrent consumers, batch size {results['batch_size']}",
    fontsize=11,
)
fig.tight_layout()
out = root / "docs/benchmarks.png"
out.parent.mkdir(exist_ok=True)
fig.savefig(out, dpi=110)
print(f"wrote {out.relative_to(root)}", file=sys.stderr)
