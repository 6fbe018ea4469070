"""The ledger figure (moe_lab.analysis.ledger): per point, the measured time of every phase stacked,
a tick at each phase's floor (the part of a segment above its tick is recoverable), the
sum of the phase floors and the layer roof beside each bar; below, the recoverable us by
phase per token count. Takes a ledger frame; loads nothing."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..cost.ledger import GAPS, UNPROFILED
from . import style

ORDER = ("gemm1", "gemm2", "act", "align", "combine", "quant", "route", "other", GAPS,
         UNPROFILED)
COLOR = {**style.PHASE_COLOR, GAPS: "#17becf", UNPROFILED: "#7f7f7f"}


@dataclass
class _Named:
    """What the footer needs of a run when only its id is known: the id, the commits."""
    run_id: str
    device: str = "?"

    def commits(self, rows):
        c = rows["git_commit"].dropna() if "git_commit" in rows else []
        return sorted({str(x)[:7] for x in c})


VARIANT = ("dtype", "backend", "config", "glue", "mode")  # what tells two points of a panel apart


def _labels(g: pd.DataFrame) -> list[str]:
    """Per point, the VARIANT fields that differ within its panel ('' when none do)."""
    cols = [c for c in VARIANT if c in g and g[c].astype(str).nunique() > 1]
    return [" ".join(style.config_label(r[c]) if c == "config" else str(r[c]) for c in cols)
            for _, r in g.iterrows()]


def fig_ledger(ledger_df: pd.DataFrame, run=None, run_id: str | None = None,
               extra: str = "") -> Figure:
    """A panel per model x sharding, a bar per point (token count on x; several points at
    one count side by side, labelled). run: the Run the frame came from (its id and the
    commits of the rows drawn go in the footer), or run_id alone; rows of several runs (a
    run_id column, as ledger.of_runs gives) name the runs of the points drawn."""
    drawn = list(dict.fromkeys(ledger_df["run_id"].dropna().astype(str))) \
        if run is None and "run_id" in ledger_df else []
    prov = run if run is not None else _Named(drawn[0]) if drawn else \
        (_Named(run_id) if run_id else None)
    rows = (run.results[run.results["point_id"].isin(ledger_df["point_id"])]
            if run is not None else ledger_df.drop_duplicates("point_id"))
    if ledger_df.empty:
        return style.note_figure("no ok point in the ledger to draw", prov, rows)
    pts = ledger_df.drop_duplicates("point_id").copy()
    models = list(dict.fromkeys(pts["model"]))
    shards = sorted(dict.fromkeys(pts["sharding"]), key=len)
    cells = [(m, s) for m in models for s in shards
             if ((pts["model"] == m) & (pts["sharding"] == s)).any()]
    ncols = 2 if len(shards) == 1 and len(cells) > 1 else max(len(shards), 1)
    nrows = -(-len(cells) // ncols)
    heights = _row_heights(pts, cells, ncols, nrows)
    fig = Figure(figsize=(4.4 * ncols + 2.2, sum(heights) + 0.7), layout="constrained")
    gs = fig.add_gridspec(nrows + 1, ncols, height_ratios=heights)
    piv = ledger_df.pivot_table(index="point_id", columns="phase", values="measured_us",
                                aggfunc="sum", fill_value=0.0)
    flo = ledger_df.pivot_table(index="point_id", columns="phase", values="floor_us",
                                aggfunc="sum")
    phases = [p for p in ORDER if p in piv.columns] + [p for p in piv.columns if p not in ORDER]
    negative = False
    for i, (m, s) in enumerate(cells):
        ax = fig.add_subplot(gs[i // ncols, i % ncols])
        g = pts[(pts["model"] == m) & (pts["sharding"] == s)]
        negative |= _draw_panel(ax, g, piv, flo, phases)
        ax.set(title=f"{m} {s}", xlabel="tokens", ylabel="us per call")
        ax.grid(True, axis="y", alpha=0.3)
    _recoverable(fig.add_subplot(gs[nrows, :]), ledger_df, phases)
    note = "graph median = kernels + gaps" + ("; negative gaps (kernels longer than the "
                                              "timed call) not drawn" if negative else "")
    return style.finish(fig, prov, rows, "; ".join(x for x in (note, extra) if x),
                        legend_title="phase", legend_order=list(phases))


def _row_heights(pts: pd.DataFrame, cells: list, ncols: int, nrows: int) -> list[float]:
    """Inches per grid row, the recoverable panel's last: a row's upright tick labels take
    their own height (6.5 pt a character), not the bars': with one height for every row,
    long labels left bars a few pixels tall."""
    tick_in = [0.0] * nrows
    for i, (m, s) in enumerate(cells):
        g = pts[(pts["model"] == m) & (pts["sharding"] == s)]
        longest = max((len(f"{t} {lab}") for t, lab in zip(g["tokens"], _labels(g)) if lab),
                      default=0)
        tick_in[i // ncols] = max(tick_in[i // ncols], longest * 6.5 * 0.6 / 72)
    return [3.0 + t for t in tick_in] + [2.7]


def _draw_panel(ax, g: pd.DataFrame, piv: pd.DataFrame, flo: pd.DataFrame,
                phases: list) -> bool:
    """One model x sharding panel: per point a bar of stacked phases with each phase's
    floor, the sum of the floors and the layer roof; True when a phase was negative."""
    negative = False
    g = g.sort_values(["tokens"] + [c for c in VARIANT if c in g])
    toks, labels = sorted(set(g["tokens"])), _labels(g)
    slot = g.groupby("tokens").cumcount().to_numpy()
    count = g.groupby("tokens")["point_id"].transform("size").to_numpy()
    xs = []
    for j, (_, p) in enumerate(g.iterrows()):
        width = 0.8 / count[j]
        x = toks.index(p["tokens"]) - 0.4 + width * (slot[j] + 0.5)
        xs.append(x)
        bottom = 0.0
        for ph in phases:
            v = float(piv.at[p["point_id"], ph])
            negative |= v < 0
            v = max(v, 0.0)
            if v <= 0:
                continue
            ax.bar(x, v, bottom=bottom, width=width * 0.9, color=COLOR.get(ph, "0.6"),
                   label=ph)
            f = flo.at[p["point_id"], ph] if ph in flo.columns else np.nan
            if f > 0:
                ax.hlines(bottom + min(f, v), x - width * 0.45, x + width * 0.45,
                          color="k", lw=1.2, label="floor of the phase")
            bottom += v
        floors = float(flo.loc[p["point_id"]].sum(min_count=1))
        if np.isfinite(floors):
            ax.scatter([x], [floors], marker="D", s=14, color="tab:red", zorder=4,
                       label="sum of the phase floors")
        if np.isfinite(p.get("roof_us", np.nan)):
            ax.scatter([x], [p["roof_us"]], marker="x", s=18, color="k", zorder=4,
                       label="layer roof (one fused kernel)")
    if any(labels):  # a tick per bar, upright: its token count and what sets it apart
        ax.set_xticks(xs, [f"{t} {lab}" for t, lab in zip(g["tokens"], labels)],
                      fontsize=6.5, rotation=90)
    else:
        ax.set_xticks(range(len(toks)), [str(t) for t in toks])
    return negative


def _recoverable(ax, ledger_df: pd.DataFrame, phases: list) -> None:
    """Stacked over_us (measured - floor) per token count, summed over the points drawn."""
    rec = ledger_df.pivot_table(index="tokens", columns="phase", values="over_us",
                                aggfunc="sum", fill_value=0.0)
    n = ledger_df.groupby("tokens")["point_id"].nunique()
    x, bottom = np.arange(len(rec)), np.zeros(len(rec))
    for ph in (p for p in phases if p in rec.columns):
        v = rec[ph].to_numpy(float)
        if v.sum() > 0:
            ax.bar(x, v, bottom=bottom, color=COLOR.get(ph, "0.6"), width=0.6, label=ph)
            bottom += v
    for xi, b in zip(x, bottom):
        ax.text(xi, b * 1.01, f"{b:.0f}", ha="center", va="bottom", fontsize=6)
    if bottom.any():  # room for the tallest bar's number inside the panel, not on its frame
        ax.set_ylim(top=float(bottom.max()) * 1.15)
    ax.set_xticks(x, [f"{t}\n({n[t]} pt)" for t in rec.index], fontsize=7)
    ax.set_title("recoverable us by phase (measured - floor, all points drawn)", fontsize=9)
    ax.set(xlabel="tokens", ylabel="us above the floors")
    if not np.isfinite(rec.to_numpy(float)).any() or not bottom.any():
        ax.text(0.5, 0.5, "no floors (no ceilings for this device)", transform=ax.transAxes,
                ha="center")
    ax.grid(True, axis="y", alpha=0.3)

