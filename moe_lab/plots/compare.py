"""The compare figure: ratio of medians B/A against tokens, a panel per model (rows) x
sharding (columns), a line per backend x mode with its bootstrap interval as a band; below
1 is B faster."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from ..problems import sharding_name
from . import style


def fig_ratio(table: pd.DataFrame, a, b, by=None, values=None) -> Figure:
    t = table[table["ratio"].notna()]
    if t.empty:
        return style.note_figure("no point was compared (see the verdicts)", a, None)
    lines = ["backend", "mode"] if by != "backend" else ["mode"]
    models = list(dict.fromkeys(t["model"]))
    shards = list(dict.fromkeys(zip(t["tp"], t["ep"])))
    shards.sort(key=lambda s: (int(s[1]), int(s[0])))
    fig, cells = style.panel_grid(models, shards)
    for ax, m, (tp, ep) in cells:
        sub = t[(t["model"] == m) & (t["tp"] == tp) & (t["ep"] == ep)]
        for key, g in sub.groupby(lines):
            bk, mode = (key if by != "backend" else (None, key[0]))  # split by backend:
            g = g.sort_values("tokens")                             # a line per mode
            c = style.backend_color(bk) if bk else style.mode_color(mode)
            ax.plot(g["tokens"], g["ratio"], style.mode_style(mode), marker=".", color=c,
                    label=f"{style.backend_label(bk)} {mode}" if bk else str(mode))
            ax.fill_between(g["tokens"], g["low"], g["high"], color=c, alpha=0.15,
                            linewidth=0)
        ax.axhline(1.0, color="black", linewidth=0.8)
        if "noise" in sub and sub["noise"].notna().any():  # inside it: no detectable change
            nz = float(sub["noise"].max())
            ax.axhspan(1 - nz, 1 + nz, color="0.92", zorder=0, linewidth=0,
                       label="no-change band (the mode's noise)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens")
        ax.set_ylabel("B / A (median time)")
        ax.set_title(f"{m} {sharding_name(int(tp), int(ep))}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if sub.empty:
            ax.text(0.5, 0.5, "no point compared", transform=ax.transAxes, ha="center",
                    color="0.4")
    style.shared_legend(fig)
    what = (f"A = {by} {values[0]}, B = {by} {values[1]} in {a.run_id}" if by else
            f"A = {a.run_id}, B = {b.run_id}")
    bare = int((t["verdict"] == "no samples").sum())
    nb = (f"; {bare} points without samples: ratio only, no interval" if bare else "")
    return style.finish(fig, a, None, f"{what}; bands: bootstrap 95% intervals; "
                        f"below 1: B faster{nb}")
