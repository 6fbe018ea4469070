"""Several devices in one figure: the same MoE shapes measured on different GPUs (by
moe-lab on each GPU it ran on, AMD Instinct GPUs by aiter's own tuner, imported), in
absolute time and in % of each device's own roof. Every series says where its numbers
come from.

    fig_side_by_side(rows, runs)  a row of panels per model (analysis.devices.rows_for)
    fig_devices(table, runs)      one seed shape on every device (analysis.devices.side_by_side
                                  split by per_shape): time, % of the device's roof and tuned
                                  over default against tokens, a colour per device
"""
from __future__ import annotations
import zlib

import pandas as pd
from matplotlib.figure import Figure
from ..core.devices import DEVICE_SPECS, spec_for, spec_key
from ..core.errors import UsageError
from ..core.problems import sharding_name
from . import style
from ..analysis.devices import (  # noqa: F401 (the tables)
    IMPORTED, MEASURED_SERIES, SHAPE, claim_shapes, floors_against_aiter, imported_runs,
    measured_devices, per_shape, richest_run, rows_for, short_device, side_by_side, summary)


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
    labels = sorted({s for m in models for s, _ in _one_point_per_x(rows[rows["model"] == m])})
    colour = {s: style.CYCLE[k % len(style.CYCLE)] for k, s in enumerate(labels)}
    for i, m in enumerate(models):
        sub = rows[rows["model"] == m]
        no_roof = []
        for s, g in _one_point_per_x(sub):
            g = g.sort_values("tokens")
            dash = "--" if "imported" in s else "-"
            keyed = g.assign(config=[_config_text(c) for c in g["config"]]) if "config" in g else g
            style.series(axes[i][0].plot(g["tokens"], g["median_us"], dash, marker=".", label=s,
                                         color=colour[s]), keyed)
            if g["pct_of_roof"].notna().any():
                style.series(axes[i][1].plot(g["tokens"], g["pct_of_roof"], dash, marker=".",
                                             label=s, color=colour[s]), keyed)
            else:
                no_roof.append(s)
        mine = [r.run_id for r in runs if not str(r.device).startswith("AMD")]
        if mine and not sub["run_id"].isin(mine).any():  # said, not a series silently missing
            style.panel_note(axes[i][0], f"no {own} series: run {', '.join(mine)} has no rows "
                             f"of {m} at this sharding", fontsize=7)
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
        axes[i][1].set_ylim(0, max(100, axes[i][1].get_ylim()[1]))  # a share from 0 to the roof
    style.shared_legend(fig, loc="outside lower center")
    if title:
        fig.suptitle(title, fontsize=10)
    run = runs[0] if runs else None  # a Run: its id and commits head the footer
    return style.finish(fig, run, rows, f"solid: measured by moe-lab on the {own} (graph); "
                        "dashed: aiter's tuner on AMD GPUs, imported from amd-aiter's "
                        "tuned_fmoe.csv; each % against its own device's roof")


def device_color(device: str) -> str:
    """One colour per device in every figure: by its vendor spec's place in DEVICE_SPECS,
    else (a GPU with no spec) by its name."""
    spec = spec_for(str(device))
    key = spec_key(spec) if spec is not None else None
    if key:
        return style.CYCLE[list(DEVICE_SPECS).index(key) % len(style.CYCLE)]
    spare = len(style.CYCLE) - len(DEVICE_SPECS)
    return style.CYCLE[len(DEVICE_SPECS) + zlib.crc32(str(device).encode()) % spare]


SPLIT_BY = ("config", "glue", "routing", "run_id", "ep_rank")  # what two points of one x differ in


def _one_point_per_x(sub: pd.DataFrame):
    """(label, rows) per line to draw: a series per `series` label, split by what its
    points at one token count differ in (a configuration, glue, routing or run each its
    own line, its label naming it); never two points of one x joined, never one of them
    quietly dropped. A series with two points at one x that nothing tells apart: refused.
    One measurement listed twice (a run given twice: one run and point id) is drawn once."""
    same = [c for c in ("run_id", "point_id") if c in sub]
    sub = sub.drop_duplicates(same) if len(same) == 2 else sub
    for s, g in sub.groupby("series", sort=True):
        if not g["tokens"].duplicated().any():
            yield s, g
            continue
        by = [c for c in SPLIT_BY if c in g and g[c].astype(str).nunique() > 1]
        parts = g.groupby([g[c].astype(str) for c in by], sort=True) if by else [((), g)]
        for key, h in parts:
            if h["tokens"].duplicated().any():
                t = sorted(set(h.loc[h["tokens"].duplicated(), "tokens"]))
                raise UsageError(f"{s}: {len(h)} rows with two points at tokens "
                                 f"{', '.join(map(str, t[:5]))} that no configuration, glue, "
                                 "routing or run tells apart: one line cannot draw them")
            key = key if isinstance(key, tuple) else (key,)
            yield s + "".join(f" [{c} {v}]" for c, v in zip(by, key)), h


def _config_text(config) -> str:
    return "tuned" if str(config).startswith("aiter-tuned") else style.config_label(config)


def _series_label(g: pd.DataFrame) -> str:
    """'H200: vllm (Triton) tuned', then '(measured by moe-lab)' on a second line: the
    device, the backend and configuration, and the source of one series."""
    r = g.iloc[0]
    return (f"{short_device(r['device'])}: {style.backend_label(r['backend'])} "
            f"{_config_text(r['config'])}\n({r['source']})")


def _draw_pairs(ax, table: pd.DataFrame) -> None:
    """Tuned over default per device (of its tuned_backend, one run), a line at 1."""
    pairs = table.dropna(subset=["tuned_over_default"])
    for dev, g in pairs.groupby("device", sort=True):
        g = g.sort_values("tokens")
        ax.plot(g["tokens"], g["tuned_over_default"], ":", marker="^", color=device_color(dev),
                label=f"{short_device(dev)}: {style.backend_label(g['tuned_backend'].iloc[0])} "
                      "tuned over default")
    ax.axhline(1.0, color="0.5", lw=0.8)
    if pairs.empty:
        style.panel_note(ax, "no device has a run holding both default and tuned of a backend "
                         "at this shape", fontsize=7)


def fig_devices(table: pd.DataFrame, runs) -> Figure:
    """One seed shape on every device with rows (a table of analysis.devices.side_by_side
    for one shape: per_shape): time per call, % of the device's own roof and tuned over
    default against tokens; per device one series (its best configuration from one run;
    solid: measured by moe-lab, dashed: aiter's tuner, imported). `runs`: the Runs the
    rows come from (the footer's); a device with no rows has no series."""
    if table.empty:
        return style.note_figure("no device has rows of this shape")
    if len(table[SHAPE].drop_duplicates()) > 1:
        raise UsageError("fig_devices draws one shape: give one of "
                         "analysis.devices.per_shape(table)")
    fig, axes = style.new_figure(1, 3, figsize=(15, 4.2))
    no_roof = []
    for dev, g in table.groupby("device", sort=True):
        g, label = g.sort_values("tokens"), _series_label(g)
        dash = "--" if g["source"].iloc[0] == IMPORTED else "-"
        kw = dict(marker=".", label=label, color=device_color(dev))
        keyed = g.assign(config=[_config_text(c) for c in g["config"]]) if "config" in g else g
        style.series(axes[0].plot(g["tokens"], g["median_us"], dash, **kw), keyed)
        if g["pct_of_roof"].notna().any():
            style.series(axes[1].plot(g["tokens"], g["pct_of_roof"], dash, **kw), keyed)
        else:
            no_roof.append(short_device(dev))
    if no_roof:
        style.panel_note(axes[1], "no % of roof (no spec for the GPU): " + ", ".join(no_roof),
                         fontsize=7)
    _draw_pairs(axes[2], table)
    for ax, ylab in zip(axes, ("us per MoE call",
                               "% of the device's own roof\n(100% = at the roof)",
                               "tuned over default (> 1: tuned faster)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens")
        ax.set_ylabel(ylab)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].set_ylim(0, max(100, axes[1].get_ylim()[1]))
    r = table.iloc[0]
    fig.suptitle(f"{r['model']} {sharding_name(r['tp'], r['ep'])} {r['dtype']}: each device's "
                 "best configuration", fontsize=10)
    drawn = pd.concat([table, table.dropna(subset=["pair_run_id"]).assign(
        run_id=lambda t: t["pair_run_id"], git_commit=None)], ignore_index=True)
    ids = list(dict.fromkeys(drawn["run_id"]))
    run = next((x for i in ids for x in runs if x.run_id == i), None)
    if run is None:  # the footer names the runs drawn: never "no run (predicted)"
        raise UsageError("fig_devices: give the Runs its rows come from "
                         "(analysis.devices.device_runs())")
    sources = ", ".join(f"{short_device(d)} {c}" for d, c in
                        table.groupby("device", sort=True)["ceiling_source"].first().items())
    dashed = "; dashed: aiter's tuner, imported" if (table["source"] == IMPORTED).any() else ""
    return style.finish(fig, run, drawn, "each device's best configuration (newest run); "
                        f"% against its own roof ({sources}){dashed}")
