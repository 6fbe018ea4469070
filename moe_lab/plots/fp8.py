"""FP8 beside bf16 (notebooks 01 and 03): the figure of moe_lab.analysis.fp8's table (its
tables re-exported here); it opens nothing."""
from __future__ import annotations

import pandas as pd

from ..analysis import targets as tg
from ..analysis.fp8 import (  # noqa: F401 (the tables, as notebooks 01 and 03 call them)
    KEY, NONE_YET, comparison_rows, dtype_table, fp8_vs_bf16, imported, is_fp8, summary,
    targets, with_dtype)
from ..core.problems import sharding_name
from ..storage.store import Run
from . import style

PREFILL_TARGET = tg.by_name("fp8 >= 1.5x bf16, 4096+ tokens")  # the dotted line and its note


def fig_fp8_vs_bf16(cmp: pd.DataFrame, run: Run | None, rows: pd.DataFrame | None = None):
    """Speedup of the best FP8 point over the best bf16 point vs tokens, a line (and a
    colour) per scheme and mode, one y-axis (each one's % of roof is in the table,
    analysis.fp8.fp8_vs_bf16). Says so plainly when there is nothing to compare."""
    have = cmp[cmp["speedup"].notna()] if len(cmp) else cmp
    if run is None or not len(have):
        why = NONE_YET if run is None else (
            f"{run.run_id} has FP8 rows but no bf16 row of the same model, sharding, mode "
            "and tokens on this device to compare them with.")
        return style.note_figure(why, run, rows)
    # one device per figure: the one with the most points on a roof, then the most points
    rank = have.groupby("device").agg(roofed=("fp8_pct_of_roof", "count"), n=("tokens", "size"))
    devices = rank.sort_values(["roofed", "n"], ascending=False)
    have = have[have["device"] == devices.index[0]]
    shards = sorted({(int(t), int(e)) for t, e in zip(have["tp"], have["ep"])})
    models = sorted(set(have["model"]))
    fig, cells = style.panel_grid(models, shards)
    # one colour per legend entry (scheme and mode), the same in every panel
    series = sorted({(str(a), str(b)) for a, b in zip(have["dtype"], have["mode"])})
    colors = {k: style.CYCLE[i % len(style.CYCLE)] for i, k in enumerate(series)}
    for ax, model, (tp, ep) in cells:
        d = have[(have["model"] == model) & (have["tp"] == tp) & (have["ep"] == ep)]
        if not len(d):  # say so, rather than draw an empty panel
            ax.text(0.5, 0.5, "no FP8 point with a bf16 point\nbeside it at this sharding",
                    transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.4")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{model} {sharding_name(tp, ep)}", fontsize=8)
            continue
        # one quantity on this axis (the speedup); % of roof is in the table beside the figure
        for (scheme, mode), g in d.groupby(["dtype", "mode"]):
            g = g.sort_values("tokens")
            ls = style.MODE_STYLE.get(str(mode).split(":")[0], "-.")
            # the best of each dtype per point (any backend, any configuration): an
            # aggregate, and its label says so
            drawn = None if rows is None else rows[rows["point_id"].isin(
                pd.concat([g["fp8_point_id"], g.get("bf16_point_id", g["fp8_point_id"])]))]
            style.series(ax.plot(g["tokens"], g["speedup"], ls, marker="o", ms=3,
                                 color=colors[(str(scheme), str(mode))],
                                 label=f"{scheme} {mode}: bf16 / fp8 (best of each)"), drawn)
        ax.axhline(1.0, color="0.6", lw=0.8)
        ax.axhline(PREFILL_TARGET.limit, color="0.6", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{model} {sharding_name(tp, ep)}", fontsize=8)
        ax.set_xlabel("tokens")
        ax.set_ylabel("speedup over best bf16")
    runs = sorted(set(have["fp8_run"]) | set(have.get("bf16_run", pd.Series(dtype=str)).dropna()))
    note = f"dotted: the {PREFILL_TARGET.limit:g}x target; rows from {', '.join(runs)}"
    if len(devices) > 1:
        note += f"; {devices.index[0]} shown, {len(devices) - 1} other device(s) in the table"
    drawn = rows[rows["device"] == devices.index[0]] if rows is not None else None
    return style.finish(fig, run, drawn, extra=note, device=devices.index[0])
