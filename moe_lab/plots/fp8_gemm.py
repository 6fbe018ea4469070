"""The FP8 grouped GEMM against its speed of light (notebook 03): the figure of
moe_lab.analysis.fp8_gemm's table (re-exported here); it opens nothing."""
from __future__ import annotations

import pandas as pd

from ..analysis.fp8_gemm import (  # noqa: F401 (the tables, as notebook 03 calls them)
    KEY, PROMISE, SOL_BACKEND, gemm_table, sources, verdict)
from ..core.problems import FP8_SCHEMES
from . import style


def fig_gemm_sol(table: pd.DataFrame, run=None, rows=None):
    """TFLOP/s of the GEMMs vs tokens, a panel per (model, sharding): the best FP8 point's
    (per scheme), torch._scaled_grouped_mm's on the same rows, bf16's; the FP8 peak and
    the measured dense FP8 matmul as lines. `run`, `rows`: the Run the footer names first
    and the rows of every run drawn (analysis.fp8_gemm.sources(table))."""
    if not len(table):
        return style.note_figure("No FP8 point with stored phases and a bf16 point beside it.",
                                 run)
    panels = sorted({(m, s) for m, s in zip(table["model"], table["sharding"])})
    # at most three panels a row: five in one row were 21 inches wide, their text shrunk to
    # nothing at the width a pull request shows
    fig, _, flat = style.wrapped_panels(len(panels), 3, 3.9, 3.0, 2.6, 0.8)
    colors = dict(zip(list(FP8_SCHEMES) + ["sol", "bf16"], style.CYCLE))
    for ax, (model, sh) in zip(flat, panels):
        d = table[(table["model"] == model) & (table["sharding"] == sh)].sort_values("tokens")
        for scheme, g in d.groupby("scheme"):
            ax.plot(g["tokens"], g["fp8_tflops"], "-o", ms=3, color=colors[scheme],
                    label=f"{scheme} best FP8 point's GEMMs")
        s = d.dropna(subset=["sol_tflops"]).drop_duplicates("tokens")
        if len(s):
            ax.plot(s["tokens"], s["sol_tflops"], "--s", ms=3, color=colors["sol"],
                    label="torch._scaled_grouped_mm (row-wise), same rows")
        b = d.drop_duplicates("tokens")
        ax.plot(b["tokens"], b["bf16_tflops"], ":^", ms=3, color=colors["bf16"],
                label="bf16 best point's GEMMs")
        peak, dense = d["fp8_peak_tflops"].dropna(), d["fp8_dense_tflops"].dropna()
        if len(peak):
            ax.axhline(peak.iloc[0], color="0.3", lw=0.8, label="FP8 peak (vendor)")
        if len(dense):
            ax.axhline(dense.iloc[0], color="0.3", lw=0.8, ls="--",
                       label="FP8 dense matmul, measured")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{model} {sh}", fontsize=8)
        ax.set_xlabel("tokens")
        ax.set_ylabel("GEMM TFLOP/s")
    return style.finish(fig, run, rows, device=str(table["device"].iloc[0]))
