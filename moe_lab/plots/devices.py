"""Several devices in one figure: the same MoE shapes measured on different GPUs (the H200
by moe-lab, AMD Instinct GPUs by aiter's own tuner, imported), in absolute time and in %
of each device's own roof. Every series says where its numbers come from."""
from __future__ import annotations
import pandas as pd
from matplotlib.figure import Figure
from ..core.problems import sharding_name
from . import style
from ..analysis.devices import (  # noqa: F401 (the tables)
    H200_SERIES, claim_shapes, floors_against_aiter, imported_runs, measured_devices, richest_run,
    rows_for, summary)


def fig_side_by_side(rows: pd.DataFrame, runs=(), title: str | None = None) -> Figure:
    """A row of panels per model: time per call against tokens, and % of each device's
    roof, one line per device x backend (x configuration). `runs`: the Runs drawn, the
    first one named first in the footer; `title`: the figure's (e.g. which runs are
    context beside the one a page is about)."""
    if rows.empty:
        return style.note_figure("no rows of these shapes in the runs given")
    models = list(dict.fromkeys(rows["model"]))
    own = measured_devices(rows)  # the devices moe-lab measured, as the data names them
    fig, axes = style.new_figure(len(models), 2, squeeze=False,
                                 figsize=(11, 3.6 * len(models) + 0.6))
    colour = {s: style.CYCLE[k % len(style.CYCLE)] for k, s in enumerate(sorted(set(rows["series"])))}
    for i, m in enumerate(models):
        sub = rows[rows["model"] == m]
        no_roof = []
        for s, g in sub.groupby("series"):
            g = g.sort_values("tokens")
            dash = "--" if "imported" in s else "-"
            if g["tokens"].duplicated().any():  # never join two points of one x
                g = g.drop_duplicates("tokens")
            axes[i][0].plot(g["tokens"], g["median_us"], dash, marker=".", label=s,
                            color=colour[s])
            if g["pct_of_roof"].notna().any():
                axes[i][1].plot(g["tokens"], g["pct_of_roof"], dash, marker=".", label=s,
                                color=colour[s])
            else:
                no_roof.append(s)
        if no_roof:  # said on the panel, not a series silently missing
            style.panel_note(axes[i][1], "no % of roof (no spec for the GPU): "
                             + "; ".join(no_roof), fontsize=7)
        shard = sharding_name(sub["tp"].iloc[0], sub["ep"].iloc[0])
        for ax, ylab in zip(axes[i], (f"us per MoE call\n({own}: graph replay; AMD: aiter's "
                                      "tuner)", "% of the device's roof")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tokens")
            ax.set_ylabel(ylab)
            ax.set_title(f"{m} {shard}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
        axes[i][0].set_yscale("log")
    style.shared_legend(fig, loc="outside lower center")
    if title:
        fig.suptitle(title, fontsize=10)
    run = runs[0] if runs else None  # a Run: its id and commits head the footer
    return style.finish(fig, run, rows, f"solid: measured by moe-lab on the {own} (graph); "
                        "dashed: aiter's tuner on AMD GPUs, imported from amd-aiter's "
                        "tuned_fmoe.csv; each % against its own device's roof")
