"""Kernel time, for notebooks/01_kernel_time.ipynb: time per call against tokens, the
device time per phase, launch overhead (eager - graph), and whether the profiler sees the
whole graph time.

Every figure takes a moe_lab.storage.store.Run (the tables, moe_lab.analysis.kernel_time, also a run id). Tables are
DataFrames; figures are matplotlib Figures with one legend and the provenance footer of
the rows they draw (moe_lab.plots.style)."""
from __future__ import annotations
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from ..storage.vocabulary import NOISE_LIMIT
from . import style
from ..analysis.kernel_time import (  # noqa: F401 (the tables)
    COVERAGE_RANGE, PHASE_TOKENS, SPEEDUP_TOKENS, coverage_summary, coverage_table, default_mode, launch_overhead, ok_times, phase_table, speedup_table, status_table)


CONFIG_MARKERS = ("^", "v", "s", "D", "P", "X", "<", ">", "*", "h")  # non-default configs


NOISY_LABEL = f"noisy (spread > {NOISE_LIMIT:.0%})"  # spread = (p90 - p10) / median


def mark_noisy(ax, x, y, color) -> int:
    """Ring the noisy points (hollow markers over the line's own): they are drawn, but not
    as normal points. Returns how many."""
    if len(x):
        ax.plot(x, y, "o", ms=8, mfc="none", mec=color, mew=1.3, linestyle="none",
                label="_noisy", zorder=4)
    return len(x)


def noisy_legend(ax) -> None:
    """The one legend entry of every ring (grey), on a panel so the shared legend finds it."""
    ax.plot([], [], "o", ms=8, color="0.3", mfc="none", mec="0.3", mew=1.3, linestyle="none",
            label=NOISY_LABEL)


def fig_time_vs_tokens(run, models=None) -> Figure:
    """A panel per model x sharding: median time per call against tokens, a line per
    backend (colour) x mode (style: eager dashed, graph solid), a bar p10-p90 per point."""
    r = ok_times(run.results)
    if isinstance(models, str):  # `report -p models a,b` hands over text: list() split it
        from ..core.problems import split_models
        models = split_models(models)
    if models:
        r = r[r["model"].isin(list(models))]
    if r.empty:
        return style.note_figure("no ok point to draw in this run", run, r)
    models = list(dict.fromkeys(r["model"]))
    shards = sorted(r["sharding"].unique(), key=len)
    r = r.assign(_config=r["config"].fillna("default").astype(str) if "config" in r
                 else "default")
    configs = sorted(c for c in r["_config"].unique() if c != "default")  # a marker each
    fig, cells = style.panel_grid(models, shards, 4.8, 3.4, 1.8, 0.5)
    noisy = 0
    for ax, m, s in cells:
        sub = r[(r["model"] == m) & (r["sharding"] == s)]
        for (b, mode, cfg), g in sub.groupby(["backend", "mode", "_config"]):
            g = g.sort_values("tokens")  # a line per configuration (never default-tuned zigzags)
            c = style.backend_color(b)
            style.series(ax.plot(g["tokens"], g["median_us"], style.mode_style(mode),
                    marker="." if cfg == "default" else CONFIG_MARKERS[
                        configs.index(cfg) % len(CONFIG_MARKERS)],
                    markersize=None if cfg == "default" else 4, color=c,
                    label=f"{style.backend_label(b)} {mode}"
                    + ("" if cfg == "default" else f" [{style.config_label(cfg)}]")), g)
            # p10-p90 as a bar at each point, in the line's colour: translucent bands of
            # several backends overlapped into blends no legend entry has
            style.series(ax.vlines(g["tokens"], g["p10_us"], g["p90_us"], color=c, lw=0.8), g)
            n = g[g["noisy"]]
            noisy += mark_noisy(ax, n["tokens"], n["median_us"], c)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{m} {s}", fontsize=10)
        ax.set_xlabel("tokens")
        ax.set_ylabel("time per MoE call (us)")
        ax.grid(True, which="both", alpha=0.3)
    if noisy:
        noisy_legend(cells[0][0])
    return style.finish(fig, run, r, "median, bars p10-p90; " + style.mode_note(r["mode"])
                        + (f"; ringed: {noisy} noisy points (p10-p90 spread > "
                           f"{NOISE_LIMIT:.0%} of the median)" if noisy else ""))


def fig_phases(run, table: pd.DataFrame) -> Figure:
    """A panel per model x sharding: each point's kernel time split into phases (% of
    its kernel time), labelled with the total kernel us per call."""
    rows = run.results[run.results["point_id"].isin(table["point_id"])]
    if table.empty:
        return style.note_figure("no profiled point at these token counts", run, rows)
    groups = list(dict.fromkeys(zip(table["model"], table["sharding"])))
    cpu = "cpu" in str(run.device).lower()
    fig, axes = style.new_figure(len(groups), 1, squeeze=False,
                                 figsize=(13, 2.6 * len(groups) + 0.5))
    axes = axes[:, 0]
    phases = [p for p in style.PHASE_COLOR if p in table.columns]
    for ax, (m, s) in zip(axes, groups):
        sub = table[(table["model"] == m) & (table["sharding"] == s)]
        cfg = sub["config"] if "config" in sub else pd.Series("default", index=sub.index)
        named = (cfg.astype(str) != "default").any()  # two bars of one T told apart
        labels = [f"T={t}\n{style.backend_label(b)}" + (f"\n{style.config_label(c)}" if named else "")
                  for t, b, c in zip(sub["tokens"], sub["backend"], cfg)]
        x = np.arange(len(sub))
        share = sub[phases].div(sub["kernel_us"].replace(0, np.nan), axis=0) * 100
        bottom = np.zeros(len(sub))
        for p in phases:
            ax.bar(x, share[p].fillna(0), bottom=bottom, color=style.PHASE_COLOR[p], label=p)
            bottom += share[p].fillna(0).values
        for xi, us in zip(x, sub["kernel_us"]):
            ax.text(xi, 101, f"{us:.0f}us", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_ylim(0, 112)
        ax.set_ylabel("% of kernel time")
        what = "CPU op time" if cpu else "device time"
        ax.set_title(f"{m} {s}: {what} per phase (profiler, "
                     f"{', '.join(sorted(sub['mode'].unique()))})", fontsize=10)
    note = ("labels: total kernel us per call" if not cpu else
            "labels: total op us per call, summed over the profiler's CPU ops (nested and "
            "threaded ops overlap: the sum can exceed the timed median)")
    return style.finish(fig, run, rows, note, legend_title="phase")


def fig_launch_overhead(run, table: pd.DataFrame) -> Figure:
    """A panel per model: eager - graph median against tokens, a line per backend
    (colour) x sharding (style)."""
    ids = set(table.get("point_id_eager", [])) | set(table.get("point_id_graph", []))
    rows = run.results[run.results["point_id"].isin(ids)]
    if table.empty:
        return style.note_figure("no point has both an eager and a graph time", run, rows)
    models = list(dict.fromkeys(table["model"]))
    shards = sorted(table["sharding"].unique(), key=len)
    fig, axes = style.new_figure(1, len(models), squeeze=False,
                                 figsize=(4.6 * len(models) + 1.8, 3.6))
    noisy = 0
    for ax, m in zip(axes[0], models):
        sub = table[table["model"] == m]
        keys = ["backend", "sharding"] + [k for k in ("config", "glue") if k in sub]
        for key, g in sub.groupby(keys):
            b, s, cfg = key[0], key[1], (key[2] if len(key) > 2 else "default")
            g = g.sort_values("tokens")  # a line per configuration and glue
            drawn = rows[rows["point_id"].isin(set(g["point_id_eager"]) | set(g["point_id_graph"]))]
            style.series(ax.plot(g["tokens"], g["overhead_us"], style.sharding_style(shards.index(s)),
                                 marker="." if str(cfg) == "default" else CONFIG_MARKERS[0],
                                 color=style.backend_color(b), label=f"{style.backend_label(b)} {s}"
                                 + ("" if str(cfg) == "default" else f" [{style.config_label(cfg)}]")),
                         drawn.drop(columns="mode"))
            if "noisy" in g:
                n = g[g["noisy"].astype(bool)]
                noisy += mark_noisy(ax, n["tokens"], n["overhead_us"], style.backend_color(b))
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_title(m, fontsize=10)
        ax.set_xlabel("tokens")
        ax.set_ylabel("eager - graph (us)")
        ax.grid(True, alpha=0.3)
    if noisy:
        noisy_legend(axes[0][0])
    return style.finish(fig, run, rows, "launch overhead = eager median - graph median"
                        + (f"; ringed: {noisy} points with a noisy eager or graph time"
                           if noisy else ""))
