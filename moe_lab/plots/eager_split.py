"""The "why eager costs so much at decode" figure: each traced point's eager call split into
Python and dispatch on the host, launch gaps on the device and kernel time, against tokens,
with the timed eager and graph medians beside the bars (moe_lab.analysis.eager_split)."""
from __future__ import annotations
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from ..analysis.eager_split import CHECK_TOL
from ..storage.vocabulary import PART_LABELS, PARTS
from ..core.problems import sharding_name
from . import style
from ..analysis.eager_split_tables import (  # noqa: F401 (the tables)
    table)


PART_COLOR = {"host_us": "#e377c2", "gap_us": "#bbbbbb", "kernel_us": "#1f77b4"}


def fig_eager_split(run, t: pd.DataFrame | None = None) -> Figure:
    """A panel per model x sharding x backend: stacked bars (host, gaps, kernels) per token
    count; a black bar marks the timed eager median, a hollow square the graph median."""
    t = table(run) if t is None else t
    if t.empty:
        return style.note_figure("this run has no sweep traces to split (sweep --traces N)", run)
    t = t.assign(sharding=[sharding_name(a, b) for a, b in zip(t["tp"], t["ep"])])
    labels = dict(PART_LABELS)
    if not t["device_timeline"].any():  # a CPU run: the ops are the work, no device
        labels.update(host_us="Python between ops (host)", kernel_us="aten ops (CPU)",
                      gap_us="launch gaps (none on a CPU)")
    panels = list(dict.fromkeys(zip(t["model"], t["sharding"])))
    bks = list(dict.fromkeys(t["backend"]))
    fig, axes = style.new_figure(len(panels), len(bks), squeeze=False, sharey="row",
                                 figsize=(max(2.6 * len(bks) + 2.3, 6.8), 2.9 * len(panels) + 0.9))
    for i, (m, sh) in enumerate(panels):
        for j, bk in enumerate(bks):
            ax = axes[i][j]
            g = t[(t["model"] == m) & (t["sharding"] == sh) & (t["backend"] == bk)]
            g = g.sort_values("tokens")
            x = np.arange(len(g))
            bottom = np.zeros(len(g))
            for p in PARTS:
                ax.bar(x, g[p], 0.6, bottom=bottom, color=PART_COLOR[p], label=labels[p])
                bottom += g[p].to_numpy()
            ax.scatter(x, g["eager_us"], marker="_", s=500, color="black", linewidths=2,
                       zorder=3, label="timed eager median")
            ax.scatter(x, g["graph_us"], marker="s", s=30, facecolors="none",
                       edgecolors="black", zorder=3, label="timed graph median")
            for xi, top, r in zip(x, bottom, g["wall_us"] / g["eager_us"]):
                if r == r:  # the sum over the timed eager median
                    ax.annotate(f"{r:.2f}x", (xi, top), xytext=(0, 2), textcoords="offset points",
                                ha="center", va="bottom", fontsize=7,
                                color="0.2" if abs(r - 1) <= 0.1 else "#b00000")
            ax.set_xticks(x, [str(v) for v in g["tokens"]])
            ax.set_xlim(-0.7, max(len(g), 2) - 0.3)
            ax.set_title(f"{m} {sh}\n{style.backend_label(bk)}", fontsize=9)
            ax.set_xlabel("tokens")
            if j == 0:
                ax.set_ylabel("one eager call (us)")
            ax.grid(True, axis="y", alpha=0.3)
            ax.margins(y=0.12)
    handles = [Patch(color=PART_COLOR[p], label=labels[p]) for p in reversed(PARTS)] + [
        Line2D([], [], color="black", marker="_", markersize=14, linestyle="none",
               markeredgewidth=2, label="timed eager median"),
        Line2D([], [], color="black", marker="s", markerfacecolor="none", linestyle="none",
               label="timed graph median")][:None if t["graph_us"].notna().any() else -1]
    style.shared_legend(fig, handles=handles, fontsize=8)
    fig.suptitle(f"Where eager time goes, {run.device}", fontsize=11, x=0.01, ha="left")
    n_bad = int((~t["adds_up"]).sum())
    note = ("bars: one profiled call (mean of the calls after the first); over a bar: its sum "
            f"/ the timed eager median, red where beyond {CHECK_TOL:.0%} ({n_bad} of {len(t)}; "
            "`moe-lab profile --split --run` says why)")
    rows = run.results[run.results["backend"].isin(bks) & run.results["model"].isin(t["model"])
                       & run.results["tokens"].isin(t["tokens"])]
    return style.finish(fig, run, rows[rows["mode"] == "eager"], note, legend=False)
