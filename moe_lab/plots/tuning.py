"""Tuning's figures (notebooks/05_tuning.ipynb): what tuned configurations buy over the
shipped ones, the best backend against the roof and the roof targets, where the time goes.
They draw the tables of moe_lab.analysis.tuning (re-exported here) for a Run they are
handed; they open nothing."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..analysis import targets as tg
from ..analysis.tuning import (  # noqa: F401 (the tables, as notebook 05 calls them)
    AFTER, BEFORE, DEFAULT, GLUE_BEFORE_RUN, PHASE_TOKENS, POINT, TUNED, before_after,
    best_per_point, by_tokens, compact, glue_before_after, kernel_label, measured,
    open_tuned_run, phase_best_worst, phases_of, target_metrics, tuned_summary,
    tuned_vs_default, winners_table)
from . import style


def fig_tuned_over_default(run, table: pd.DataFrame) -> Figure:
    """A panel per model: default/tuned against tokens, a line per backend x sharding."""
    ok = table[table["default_over_tuned"].notna()]
    rows = run.results[run.results["point_id"].isin(pd.concat([ok["point_id_default"],
                                                               ok["point_id_tuned"]]))]
    if ok.empty:
        return style.note_figure("no point has both a default and a tuned time", run, rows)
    models, shards = list(dict.fromkeys(ok["model"])), sorted(ok["sharding"].unique(), key=len)
    fig, axes = style.new_figure(1, len(models), squeeze=False, sharey=True,
                                 figsize=(3.6 * len(models) + 2.2, 3.8))
    for ax, m in zip(axes[0], models):
        for (b, s), g in ok[ok["model"] == m].groupby(["backend", "sharding"]):
            # the ratio of the default and the tuned row by definition: one series of one
            # glue and mode, its config the pair
            drawn = rows[rows["point_id"].isin(pd.concat([g["point_id_default"],
                                                          g["point_id_tuned"]]))]
            style.series(ax.plot(g["tokens"], g["default_over_tuned"],
                                 style.sharding_style(shards.index(s)), marker="o", ms=3,
                                 color=style.backend_color(b), label=f"{style.backend_label(b)} {s}"),
                         drawn.drop(columns="config", errors="ignore"))
        ax.axhline(1, color="k", lw=0.7)
        ax.set(yscale="log", title=m, xlabel="tokens")
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("default / tuned (> 1: tuned faster)")
    return style.finish(fig, run, rows, "graph mode; points without a tuned row not drawn")


def fig_best_pct_of_roof(run, table: pd.DataFrame, targets=tg.TARGETS) -> Figure:
    """A panel per sharding x model: the best's % of roof, before (dashed) and after (solid;
    a star: a tuned config won); % of roof targets as red bars over their token ranges."""
    rows = run.results[run.results["point_id"].isin(pd.concat([table["before_point_id"],
                                                               table["after_point_id"]]))]
    if table.empty:
        return style.note_figure("no ok point among the candidates", run, rows)
    models, shards = list(dict.fromkeys(table["model"])), sorted(set(table["sharding"]), key=len)
    fig, axes = style.new_figure(len(shards), len(models), squeeze=False, sharey=True,
                                 figsize=(3.4 * len(models) + 2.6, 2.9 * len(shards) + 0.6))
    for (i, s), (j, m) in ((a, b) for a in enumerate(shards) for b in enumerate(models)):
        ax = axes[i][j]
        g = table[(table["model"] == m) & (table["sharding"] == s)].sort_values("tokens")
        # the best per point: an aggregate over backends and configurations, its label says
        style.series(ax.plot(g["tokens"], g["before_pct_of_roof"], "--", color="0.55", lw=1,
                             label="best before (shipped configs)"),
                     rows[rows["point_id"].isin(g["before_point_id"])])
        style.series(ax.plot(g["tokens"], g["after_pct_of_roof"], "-", color="k", lw=1,
                             label="best after (tuned added)"),
                     rows[rows["point_id"].isin(g["after_point_id"])])
        for c, h in g.groupby("after_choice"):
            b, cfg = c.rsplit(" ", 1)
            style.series(ax.scatter(h["tokens"], h["after_pct_of_roof"], zorder=3,
                                    label=f"after: {c}", s=40 if cfg == TUNED else 16,
                                    color=style.backend_color(b),
                                    marker="*" if cfg == TUNED else "o"),
                         rows[rows["point_id"].isin(h["after_point_id"])])
        for t in (t for t in targets if t.metric == "pct_of_roof"):
            ax.hlines(t.limit, t.lo / 1.3, min(t.hi, 8192) * 1.3, color="tab:red", lw=2,
                      alpha=0.5, label="target (% of roof)")
        ax.set_xscale("log", base=2)
        ax.set(title=f"{m} {s}", xlabel="tokens", ylim=(0, 105),
               ylabel="% of roof (best)" if j == 0 else "")
        ax.grid(True, alpha=0.3)
    return style.finish(fig, run, rows, "graph mode, status ok; roof = ideal fused floor")


def fig_phase_bars(run, table: pd.DataFrame) -> Figure:
    """A panel per token count: each row's device time per phase stacked, its graph median
    a black tick; the footer names the commits of every run drawn."""
    rows = run.results[run.results["point_id"].isin(table["point_id"])]
    if table.empty:
        return style.note_figure("no profiled ok point to draw", run, rows)
    toks = list(dict.fromkeys(table["tokens"]))
    fig, axes = style.new_figure(1, len(toks), squeeze=False,
                                 figsize=(max(3.2 * len(toks), 4.5) + 2, 4.2))
    for ax, t in zip(axes[0], toks):
        g = table[table["tokens"] == t]
        x, bottom, med = np.arange(len(g)), np.zeros(len(g)), g["median_us"].to_numpy(float)
        for p in (p for p in style.PHASE_COLOR if p in g.columns):
            ax.bar(x, g[p], bottom=bottom, color=style.PHASE_COLOR[p], label=p, width=0.6)
            bottom += g[p].to_numpy(float)
        ax.scatter(x, med, marker="_", s=400, color="k", zorder=3, label="graph median per call")
        for xi, k, m in zip(x, bottom, med):
            ax.text(xi, max(k, m) * 1.02, f"{k:.0f} / {m:.0f}", ha="center", fontsize=8)
        ax.set_xticks(x, [f"{k}\n{c}" + ("" if r == run.run_id else f"\n{r}")
                          for k, c, r in zip(g["rank"], g["choice"], g["run"])], fontsize=7)
        ax.set(ylabel="us per call", title=f"{g['model'].iloc[0]} {g['sharding'].iloc[0]}, "
               f"{t} tokens")
    commits = {r: sorted(set(g["git_commit"].dropna().astype(str).str[:7]))
               if "git_commit" in g else [] for r, g in table.groupby("run", sort=False)}
    other = [f"also run {r}, commit " + (", ".join(c) or "unknown")
             for r, c in commits.items() if r != run.run_id]
    return style.finish(fig, run, rows, "; ".join(other + [
        "profiler device time per phase; labels: kernel sum / graph median (us)"]),
        legend_title="phase")


def fig_search_spread(run, spread: pd.DataFrame) -> Figure:
    """A panel per backend and model: per sharding and dtype, the search's first-rung
    candidates at each token key against the winner (best and worst, the median
    dashed) and the default configuration (x), all over the winner's us (1: the winner).
    Best and worst are thin lines: translucent bands of several colours overlapped into
    blends that no legend entry has."""
    if spread.empty:
        return style.note_figure("no tune run with the search's spread per point", run, spread)
    panels = list(dict.fromkeys(zip(spread["backend"], spread["model"])))
    fig, axes, flat = style.wrapped_panels(len(panels), 3, 3.6, 2.8, 2.6, 0.8, sharey=True)
    lines = sorted(set(zip(spread["sharding"], spread["dtype"])))
    colors = {k: f"C{i}" for i, k in enumerate(lines)}
    for ax, (b, m) in zip(flat, panels):
        for (s, dt), g in spread[(spread["backend"] == b) & (spread["model"] == m)].groupby(
                ["sharding", "dtype"]):
            g, c = g.sort_values("tokens"), colors[(s, dt)]
            w = g["winner_us"].to_numpy(float)
            for edge in ("search_best_us", "search_worst_us"):  # thin lines, no blending band
                ax.plot(g["tokens"], g[edge] / w, "-", color=c, lw=0.7)
            ax.plot(g["tokens"], g["search_median_us"] / w, "--", color=c, lw=1)
            ax.scatter(g["tokens"], g["default_us"] / w, marker="x", s=14, color=c)
        ax.axhline(1, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set(yscale="log", xlabel="tokens")  # two lines: on one, titles ran into each other
        ax.set_title(f"{style.backend_label(b)}\n{m}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    # one entry per colour (sharding, dtype) and one per mark, not every pair of them
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Patch(color=colors[k], label=f"{k[0]} {k[1]}") for k in lines] + [
        Line2D([], [], color="0.6", lw=0.7, label="best and worst candidate (thin)"),
        Line2D([], [], ls="--", color="0.3", label="median candidate"),
        Line2D([], [], ls="", marker="x", color="0.3", label="default configuration"),
        Line2D([], [], color="k", lw=0.8, label="the winner (1)")]
    style.shared_legend(fig, handles=handles)
    for row in axes:
        row[0].set_ylabel("us / winner's us")
    return style.finish(fig, run, spread, "graph mode; the search's first rung (short "
                        "repetition) against the winner timed at full length", legend=False)
