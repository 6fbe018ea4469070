"""Expert parallelism, for notebooks/06_expert_parallel.ipynb: per-rank time, imbalance
against routing skew, the collective's share of the layer, TP against EP per token count,
and the estimate at more ranks (labelled as such). Tables come from
moe_lab.analysis.expert_parallel; every figure has the provenance footer of the rows it draws."""
from __future__ import annotations
import pandas as pd
from matplotlib.figure import Figure
from ..storage.vocabulary import VARIANTS
from ..analysis import expert_parallel as analysis
from . import style
from ..analysis.runs import (  # noqa: F401 (the runs notebook 06 reads)
    describe_distributed as describe, distributed_run as default_run, runs_at, spread_pair)


ROUTING_MARKER = ("o", "s", "^", "D")  # uniform first
VARIANT_COLOR = {"tp-allreduce": "tab:blue", "ep-allreduce": "tab:orange",
                 "ep-alltoall": "tab:green"}


def _main_rows(pts: pd.DataFrame, backend=None, mode=None) -> pd.DataFrame:
    backend = backend or pts["backend"].value_counts().index[0]
    mode = mode or ("graph" if (pts["mode"] == "graph").any() else "eager")
    return pts[(pts["backend"] == backend) & (pts["mode"] == mode)]


def fig_rank_times(run, model=None, routing=None, backend=None, mode=None) -> Figure:
    """A panel per variant: per token count two bars per rank, its expert time and its
    collective time side by side; the tick is the measured layer (end to end). The axis
    is linear: a bar's length on a log axis starts where the axis is cut."""
    r = analysis.per_rank(run.results)
    if r.empty:
        return style.note_figure("no ok distributed point in this run", run, r)
    r = _main_rows(r, backend, mode)
    model = model or r["model"].iloc[0]
    routing = routing or ("uniform" if (r["routing"] == "uniform").any() else r["routing"].iloc[0])
    r = r[(r["model"] == model) & (r["routing"] == routing)]
    variants = [v for v in VARIANTS if v in set(r["parallel"])]
    fig, axes = style.new_figure(1, len(variants), squeeze=False,
                                 figsize=(4.4 * len(variants) + 1.5, 3.8), sharey=True)
    for ax, v in zip(axes[0], variants):
        g = r[r["parallel"] == v]
        toks = sorted(g["tokens"].unique())
        ranks = sorted(g["rank"].unique())
        width = 0.8 / (2 * len(ranks))  # side by side: each bar its own time
        for j, rk in enumerate(ranks):
            gr = g[g["rank"] == rk].set_index("tokens").reindex(toks)
            xs = [i + (2 * j - (2 * len(ranks) - 1) / 2) * width for i in range(len(toks))]
            ax.bar(xs, gr["expert_us"], width, color=f"C{j}", label=f"rank {rk} experts")
            ax.bar([x + width for x in xs], gr["collective_us"], width, color=f"C{j}",
                   alpha=0.4, hatch="//", label=f"rank {rk} collective")
        layer = g.groupby("tokens")["layer_us"].first().reindex(toks)
        ax.plot(range(len(toks)), layer, "k_", markersize=18, mew=2, label="layer (measured)")
        ax.set_xticks(range(len(toks)), [str(t) for t in toks])
        ax.set_xlabel("tokens")
        ax.set_title(v, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("us per call (median)")
    rows = run.results[(run.results["model"] == model) & (run.results["routing"] == routing)]
    return style.finish(fig, run, rows, extra=f"{routing} routing, {g['backend'].iloc[0]} "
                        f"{g['mode'].iloc[0]}")


def fig_imbalance(run, backend=None, mode=None) -> Figure:
    """Imbalance (max/mean over ranks) of routed pairs and of expert time against tokens,
    a line per routing skew (EP variants: under TP every rank has every pair)."""
    pts = analysis.points(run.results)
    pts = _main_rows(pts, backend, mode) if len(pts) else pts
    pts = pts[pts["parallel"] == "ep-allreduce"] if len(pts) else pts
    if pts.empty:
        return style.note_figure("no ok ep-allreduce point in this run", run, None)
    models = list(dict.fromkeys(pts["model"]))
    fig, axes = style.new_figure(len(models), 2, squeeze=False,
                                 figsize=(10, 3.2 * len(models) + 0.6))
    for i, m in enumerate(models):
        for j, (col, what) in enumerate((("imbalance", "routed pairs"),
                                         ("imbalance_time", "expert time"))):
            ax = axes[i][j]
            for k, (routing, g) in enumerate(pts[pts["model"] == m].groupby("routing")):
                g = g.sort_values("tokens")
                style.series(ax.plot(g["tokens"], g[col], marker="o", color=f"C{k}",
                                     label=routing), g)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tokens")
            ax.set_ylabel(f"max / mean of {what}")
            ax.set_title(f"{m}: {what}", fontsize=9)
            ax.grid(True, alpha=0.3)
    return style.finish(fig, run, analysis.distributed_rows(run.results), legend_title="routing",
                        extra="ep-allreduce")


def fig_collective_share(run, backend=None, mode=None) -> Figure:
    """The collective's share of the layer's measured time against tokens, per variant."""
    pts = analysis.points(run.results)
    if pts.empty:
        return style.note_figure("no ok distributed point in this run", run, None)
    pts = _main_rows(pts, backend, mode)
    fig, ax = style.new_figure(figsize=(8, 4.2))
    routings = sorted(pts["routing"].unique(), key=lambda r: (r != "uniform", r))
    drawn = []  # the points drawn: a median over the models at each token count
    for (v, routing), rows in pts.groupby(["parallel", "routing"]):
        g = rows.groupby("tokens")["collective_share"].median()
        drawn += list(g.values)
        style.series(ax.plot(g.index, 100 * g.values,
                             marker=ROUTING_MARKER[routings.index(routing) % 4],
                             color=VARIANT_COLOR.get(v),
                             linestyle=style.sharding_style(routings.index(routing)),  # uniform solid
                             label=f"{v} ({routing})"), rows)  # a marker per routing: it hides the dashes
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens")
    ax.set_ylabel("slowest rank's collective / layer (%)")
    ax.axhline(100, color="0.5", lw=0.8)
    # counted on the points drawn, not on the rows under them (with two models the title
    # counted 5 points above the line and the figure showed 3)
    over = int(sum(x > 1 for x in drawn))
    ax.set_title("the collective timed alone (barrier, then the call) over the layer timed end "
                 "to end" + (f":\n{over} point(s) above 100% (the line), where the collective "
                             "alone took longer than the whole layer" if over else ""),
                 fontsize=8)
    ax.grid(True, alpha=0.3)
    n_models = pts["model"].nunique()
    return style.finish(fig, run, analysis.distributed_rows(run.results),
                        f"each point: the median over {n_models} models" if n_models > 1 else "")


def _model_panels(models):
    """A figure with one panel per model, side by side: (fig, the panels)."""
    fig, axes = style.new_figure(1, len(models), squeeze=False,
                                 figsize=(4.8 * len(models) + 1.8, 3.8))
    return fig, axes[0]


def _layer_axes(ax, model) -> None:
    """A model's panel: layer time per call against tokens, both log."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens")
    ax.set_ylabel("layer us per call")
    ax.set_title(model, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)


def fig_variants(run, routing="uniform", backend=None, mode=None) -> Figure:
    """TP against EP: the layer's measured time (end to end) per token count, a panel per
    model, a line per variant; dotted: predicted (slowest rank + collective)."""
    pts = analysis.points(run.results)
    if pts.empty:
        return style.note_figure("no ok distributed point in this run", run, None)
    pts = _main_rows(pts, backend, mode)
    pts = pts[pts["routing"] == routing] if (pts["routing"] == routing).any() else pts
    models = list(dict.fromkeys(pts["model"]))
    fig, axes = _model_panels(models)
    for ax, m in zip(axes, models):
        for v, g in pts[pts["model"] == m].groupby("parallel"):
            g = g.sort_values("tokens")
            c = VARIANT_COLOR.get(v)
            style.series(ax.plot(g["tokens"], g["layer_us"], "-o", color=c,
                                 label=f"{v} measured"), g)
            style.series(ax.plot(g["tokens"], g["predicted_us"], ":", color=c,
                                 label=f"{v} predicted"), g)
        _layer_axes(ax, m)
    return style.finish(fig, run, analysis.distributed_rows(run.results),
                        extra=f"{routing} routing")


def fig_estimate(run, est: pd.DataFrame, measured: pd.DataFrame | None = None) -> Figure:
    """The layer at N ranks ESTIMATED from the run (dashed), beside the run's own measured
    layer; a measured run at N (issue 18) drawn solid when there is one."""
    if est.empty:
        return style.note_figure("nothing to estimate from", run, None)
    n = int(est["world_size"].iloc[0])
    e = est[est["routing"] == "uniform"] if (est["routing"] == "uniform").any() else est
    e = e[e["backend"] == e["backend"].value_counts().index[0]]
    e = e[e["mode"] == ("graph" if (e["mode"] == "graph").any() else "eager")]
    models = list(dict.fromkeys(e["model"]))
    fig, axes = _model_panels(models)
    for ax, m in zip(axes, models):
        for v, g in e[e["model"] == m].groupby("parallel"):
            g = g.sort_values("tokens")
            c = VARIANT_COLOR.get(v)
            style.series(ax.plot(g["tokens"], g["measured_layer_us_at_from"], "-o", color=c,
                                 alpha=0.5, label=f"{v} measured, "
                                 f"{int(g['from_world_size'].iloc[0])} ranks"), g)
            style.series(ax.plot(g["tokens"], g["layer_us"], "--", color=c,
                                 label=f"{v} ESTIMATE, {n} ranks"), g)
            if measured is not None and len(measured):
                mm = measured[(measured["model"] == m) & (measured["parallel"] == v)]
                if len(mm):
                    ax.plot(mm["tokens"], mm["layer_us_measured"], "s-", color=c,
                            label=f"{v} measured, {n} ranks")
        _layer_axes(ax, m)
    return style.finish(fig, run, analysis.distributed_rows(run.results),
                        extra=f"dashed: an estimate for {n} ranks (fitted per-rank cost + "
                              "collective model), not a measurement")
