"""Eager vs torch.compile vs graphs, for notebooks/02_eager_vs_compile.ipynb: the figures
of moe_lab.analysis.compile_tables' tables (re-exported here), for a Run they are handed;
one legend each and the footer of the rows they draw."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..analysis.compile_tables import (  # noqa: F401 (the tables, as notebook 02 calls them)
    BASELINE_MODE, GAP_COLUMNS, KEY, _ok, break_reasons, break_table, coverage, gap_table,
    payback_table, planned_points, status_line, time_table)
from . import style


def _panels(fig_rows: pd.DataFrame, ylabel: str):
    """(fig, [(ax, rows of the panel)]): one row of panels per model, one column per backend."""
    models, backends = sorted(fig_rows["model"].unique()), sorted(fig_rows["backend"].unique())
    fig, axes = style.new_figure(len(models), len(backends), squeeze=False, sharey=True,
                                 figsize=(4.6 * len(backends) + 2.2, 3.4 * len(models) + 0.6))
    panels = []
    for i, m in enumerate(models):
        axes[i][0].set_ylabel(ylabel if len(models) == 1 else f"{m}\n{ylabel}", fontsize=8)
        for j, b in enumerate(backends):
            ax = axes[i][j]
            ax.set(xscale="log", yscale="log")
            label = style.backend_label(b)
            ax.set_title(label if len(models) == 1 else f"{label} · {m}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(models) - 1:
                ax.set_xlabel("tokens")
            panels.append((ax, fig_rows[(fig_rows["model"] == m) & (fig_rows["backend"] == b)]))
    return fig, panels


def _note_early(ax, ends: dict) -> None:
    """Say on the panel which lines stop before its last token count (no ok row past
    that point: a failure, a timeout or a point not measured; the status table says)."""
    if not ends:
        return
    last = max(ends.values())
    early = [f"{lab.removeprefix('_')} at {t}" for lab, t in sorted(ends.items()) if t < last]
    if early:
        style.panel_note(ax, "ends early (no ok row past): " + "; ".join(early[:4])
                         + (f"; +{len(early) - 4}" if len(early) > 4 else ""))


def _rows(run, point_ids) -> pd.DataFrame:
    res = run.results
    return res[res["point_id"].isin(set(point_ids))]


def fig_time_vs_tokens(run) -> Figure:
    """Time per call vs tokens, a panel per model x backend: the sweep's eager and graph
    (experts only), the layer uncompiled (compile:off) and every compile variant, plain
    (solid) and through the custom op ([op], dotted). Colour: the mode; one legend."""
    df = time_table(run)
    if df.empty:
        return style.note_figure("no ok point in this run", run)
    fig, panels = _panels(df, "time per call, us (median, p10-p90)")
    fig.suptitle("time per call against tokens, per backend (colour: mode; dotted: [op])",
                 fontsize=10)
    for ax, sub in panels:
        ends = {}
        for (mode, wrapped), rows in sub.groupby(["mode", "wrapped"]):
            g = rows.groupby("tokens", as_index=False)[["median_us", "p10_us", "p90_us"]].median()
            m = style.mode_of(mode, wrapped)
            # one entry per mode (its colour); the custom op's dotted lines share one entry
            label = (f"{m.label} (experts only)" if m.kind != "compile" else
                     "_op" if m.wrapped else m.label)
            style.series(ax.plot(g["tokens"], g["median_us"], style.mode_style(m), marker="o",
                                 ms=3, label=label, color=style.mode_color(m)), rows)
            # p10-p90 a bar per point: translucent bands of the modes overlapped into blends
            ax.vlines(g["tokens"], g["p10_us"], g["p90_us"], color=style.mode_color(m), lw=0.8)
            ends[m.label] = int(g["tokens"].max())
        _note_early(ax, ends)
    fig = style.finish(fig, run, _rows(run, df["point_id"]), legend=False)
    _legend_with_op(fig, df, style.mode_labels_in_order(" (experts only)"))
    return fig


def _legend_with_op(fig, df: pd.DataFrame, order) -> None:
    """The figure's one legend: a colour per mode, and where any line went through the
    custom op, one dotted grey entry for all of them (not a second entry per mode)."""
    from matplotlib.lines import Line2D
    seen: dict = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith("_"):
                seen.setdefault(lab, h)
    rank = {lab: i for i, lab in enumerate(order)}
    labels = sorted(seen, key=lambda lab: rank.get(lab, len(rank)))
    handles = [seen[lab] for lab in labels]
    if "wrapped" in df and df["wrapped"].fillna(False).astype(bool).any():
        handles.append(Line2D([], [], ls=style.WRAPPED_STYLE, marker="o", ms=3, color="0.3"))
        labels.append("dotted: the same mode through the custom op [op]")
    style.shared_legend(fig, handles, labels, title="mode")


def fig_gap(run) -> Figure:
    """Compiled / uncompiled time vs tokens, a panel per model x backend; below 1 compile
    wins. The baseline is compile:off, or the experts-only eager row where a run lacks it
    (the figure then says so in its title)."""
    gap = gap_table(run)
    gap = gap[gap["ratio"].notna()]
    if gap.empty:
        return style.note_figure("no compiled ok point has an uncompiled baseline", run)
    experts_only = int((gap["baseline"] == "eager (experts only)").sum())
    ylabel = ("compiled / the layer uncompiled" if not experts_only
              else "compiled / eager") + " (<1: compile faster)"
    fig, panels = _panels(gap, ylabel)
    for ax, sub in panels:
        ends = {}
        for (mode, wrapped), rows in sub.groupby(["mode", "wrapped"]):
            g = rows.groupby("tokens", as_index=False)["ratio"].median()
            m = style.mode_of(mode, wrapped)
            # one entry per mode (its colour); the custom op's dotted lines share one entry
            style.series(ax.plot(g["tokens"], g["ratio"], style.mode_style(m), marker="o", ms=3,
                                 label="_op" if m.wrapped else m.label,
                                 color=style.mode_color(m)), rows)
            ends[m.label] = int(g["tokens"].max())
        _note_early(ax, ends)
        ax.axhline(1.0, color="k", lw=0.8)
    if experts_only:  # the ratio then flatters eager by the router's cost: say so
        fig.suptitle(f"baseline: the sweep's eager rows (experts only, no router) for "
                     f"{experts_only} of {len(gap)} points, as this run has no compile:off "
                     "rows; the compiled layer includes the router", fontsize=9, color="C3")
    else:
        fig.suptitle("compiled over uncompiled, per backend (colour: mode; dotted: [op])",
                     fontsize=10)
    # the rows drawn: the compiled ones and the baselines they were divided by
    rows = _rows(run, gap["point_id"])
    base = _ok(run.results[run.results["mode"].isin([BASELINE_MODE, "eager"])])
    rows = pd.concat([rows, base[base["backend"].isin(gap["backend"])
                                 & base["tokens"].isin(gap["tokens"])]])
    fig = style.finish(fig, run, rows, legend=False)
    _legend_with_op(fig, gap, style.mode_labels_in_order())
    return fig


def fig_payback(run) -> Figure:
    """Cold compile time against time saved per call; diagonal lines mark 1e3 and 1e6
    calls. Colour: backend; marker: variant; hollow: through the custom op."""
    pay = payback_table(run)
    if pay.empty:
        return style.note_figure("no compile rows to pay back", run)
    fig, ax = style.new_figure(figsize=(10, 4.8))
    wins = pay[pay["saved_us"] > 0]
    backends = sorted(pay["backend"].unique())
    for (b, mode, wrapped), g in wins.groupby(["backend", "mode", "wrapped"]):
        c = style.backend_color(b)
        ax.scatter(g["saved_us"], g["compile_s"], s=12 + 6 * np.log2(g["tokens"].astype(float)),
                   marker=style.MODE_MARKER.get(mode, "x"), edgecolors=c,
                   facecolors="none" if wrapped else c, alpha=0.8, linewidths=1.0)
    if len(wins):
        xs = np.geomspace(max(wins["saved_us"].min(), 1e-3) / 2, wins["saved_us"].max() * 2, 50)
        for calls in (1e3, 1e6):
            ax.plot(xs, xs * calls / 1e6, color="0.6", lw=0.8, ls="--")
            ax.annotate(f"{calls:.0e} calls", (xs[-1], xs[-1] * calls / 1e6), fontsize=7,
                        color="0.4", ha="right")
        ax.set(xscale="log", yscale="log")
    never = int((pay["saved_us"] <= 0).sum())
    ax.set(xlabel="time saved per call by compiling, us (marker size ~ log tokens)",
           ylabel="cold compile time, s",
           title=f"compile cost vs saving ({never} of {len(pay)} point(s): compile not faster)")
    ax.grid(True, which="both", alpha=0.3)
    handles = []
    if len(wins):
        handles = [Line2D([], [], ls="", marker="o", color=style.backend_color(b),
                          label=style.backend_label(b)) for b in backends]
        handles += [Line2D([], [], ls="", marker=mk, color="0.3", label=style.mode_label(m))
                    for m, mk in style.MODE_MARKER.items() if m in set(wins["mode"])]
        handles += [Line2D([], [], ls="", marker="o", markerfacecolor="none", color="0.3",
                           label="hollow: custom op")]
    style.shared_legend(fig, handles=handles)
    style.footer(fig, run, _rows(run, pay["point_id"]))
    return fig
