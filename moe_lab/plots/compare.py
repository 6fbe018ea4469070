"""The compare figure: ratio of medians B/A against tokens, one panel per model x sharding,
a line per backend x mode with its bootstrap interval as a band; below 1 is B faster."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from ..roofline import sharding_name
from . import style


def fig_ratio(table: pd.DataFrame, a, b, by=None, values=None) -> Figure:
    t = table[table["ratio"].notna()]
    if t.empty:
        return style.note_figure("no point was compared (see the verdicts)", a, None)
    panels = list(dict.fromkeys(zip(t["model"], t["tp"], t["ep"])))
    fig, axes = style.new_figure(1, len(panels), squeeze=False,
                                 figsize=(4.6 * len(panels) + 1.5, 3.8))
    for ax, (m, tp, ep) in zip(axes[0], panels):
        sub = t[(t["model"] == m) & (t["tp"] == tp) & (t["ep"] == ep)]
        for (bk, mode), g in sub.groupby(["backend", "mode"]):
            g = g.sort_values("tokens")
            c = style.backend_color(bk)
            ax.plot(g["tokens"], g["ratio"], style.mode_style(mode), marker=".", color=c,
                    label=f"{style.backend_label(bk)} {mode}")
            ax.fill_between(g["tokens"], g["low"], g["high"], color=c, alpha=0.15, linewidth=0)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens")
        ax.set_ylabel("B / A (median time)")
        ax.set_title(f"{m} {sharding_name(int(tp), int(ep))}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    style.shared_legend(fig)
    what = (f"A = {by} {values[0]}, B = {by} {values[1]} in {a.run_id}" if by else
            f"A = {a.run_id}, B = {b.run_id}")
    return style.finish(fig, a, None, f"{what}; bands: bootstrap 95% intervals; "
                        "below 1: B faster")
