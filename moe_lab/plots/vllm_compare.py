"""The workbook's best own layer over vLLM as shipped (moe_lab.analysis.vllm_compare's frame), drawn:
a panel per shape and scheme, the ratio per token count, each marker coloured by the
backend that was best there, the run-to-run band (1.03) and parity (1.00) as lines, the
geometric mean in the panel's title. Draws the frame it is handed; opens nothing."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..analysis.vllm_compare import BAND, SHAPE, newest, runs_of
from . import style


def fig_best_over_vllm(table: pd.DataFrame, run=None, rows: pd.DataFrame | None = None,
                       band: float = BAND) -> Figure:
    """`table`: moe_lab.analysis.vllm_compare.best_over_vllm (drawn: the newest measurement of
    each point); `run`, `rows`: the provenance footer's (the first run and the compared rows,
    with their run_id)."""
    if table.empty:
        return style.note_figure("no point has both vLLM as shipped and a layer of ours", run,
                                 rows)
    groups = list(newest(table).groupby(SHAPE, sort=True))
    fig, axes, flat = style.wrapped_panels(len(groups), 3, 3.8, 3.0, 2.4, 0.9, sharey=True)
    seen = {}
    for ax, ((model, sharding, dtype, mode), g) in zip(flat, groups):
        g = g.sort_values("tokens")
        # the best own layer per point: an aggregate over backends and configurations
        style.series(ax.plot(g["tokens"], g["ratio"], color="0.6", lw=0.8, zorder=1,
                             label="_best own over vllm"), g)
        for best, h in g.groupby(g["best"].str.split().str[0]):
            c = style.backend_color(best)
            ax.scatter(h["tokens"], h["ratio"], s=22, color=c, zorder=2,
                       marker="o" if not h["best"].str.endswith("tuned").all() else "s")
            seen.setdefault(best, c)
        ax.axhline(1.0, color="k", lw=0.7)
        ax.axhline(band, color="tab:red", lw=0.7, ls="--")
        gm = float(np.exp(np.log(g["ratio"].astype(float)).mean()))
        ax.set_xscale("log", base=2)
        ax.set(title=f"{model} {sharding} {dtype}\ngeomean {gm:.2f}x ({runs_of(g)})",
               xlabel="tokens")
        ax.title.set_fontsize(8)
        ax.grid(True, which="both", alpha=0.3)
    for row in axes:
        row[0].set_ylabel("best own / vllm as shipped\n(< 1: ours faster)")
    handles = [Line2D([], [], marker="o", ls="", color=c, label=f"best: {style.backend_label(b)}")
               for b, c in seen.items()]
    handles += [Line2D([], [], color="k", lw=0.7, label="parity"),
                Line2D([], [], color="tab:red", lw=0.7, ls="--", label=f"{band:.2f}: the run-to-run band")]
    style.shared_legend(fig, handles=handles, labels=[h.get_label() for h in handles])
    return style.finish(fig, run, rows, "graph mode; square: a tuned configuration was best",
                        legend=False)
