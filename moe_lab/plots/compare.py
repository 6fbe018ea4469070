"""The compare figure: ratio of medians B/A against tokens, a panel per model (rows) x
sharding and mode (columns), a line per backend with each point's bootstrap 95% interval
as a bar and, shaded behind every bar, the device's calibrated between-process noise band
for that mode (moe_lab.analysis.noise): a verdict needs the whole bar outside the shade. Below 1 is
B faster; a filled triangle marks a point with a verdict."""
from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from ..analysis.compare import CONFIDENCE
from ..analysis.noise import band_text
from ..core.problems import sharding_name
from . import style

MARK = {"faster": ("v", "faster (clears interval and band)"),
        "slower": ("^", "slower (clears interval and band)")}


def _band(ax, sub: pd.DataFrame, mode: str) -> str:
    """Shade the panel's noise band; its text for the title ('no band' when there is none)."""
    cal = sub[sub["noise"].notna()] if "noise" in sub else sub.iloc[:0]
    if cal.empty:
        what = str(sub["calibration"].iloc[0]) if "calibration" in sub and len(sub) else ""
        ax.text(0.5, 0.04, what or f"no calibration for {mode}", transform=ax.transAxes,
                ha="center", va="bottom", fontsize=7, color="firebrick")
        return "no band"
    nz = float(cal["noise"].max())  # two devices: the larger band, as the verdict used
    lo, hi = math.exp(-nz), math.exp(nz)
    c = style.mode_color(mode)
    ax.axhspan(lo, hi, color=c, alpha=0.16, zorder=0, linewidth=0,
               label=f"{mode} noise band (calibrated A/A')")
    for y in (lo, hi):
        ax.axhline(y, color=c, linewidth=0.6, alpha=0.6, zorder=0)
    return f"band {band_text(nz)}"


def fig_ratio(table: pd.DataFrame, a, b, by=None, values=None) -> Figure:
    t = table[table["ratio"].notna()]
    if t.empty:
        return style.note_figure("no point was compared (see the verdicts)", a, None,
                                 f"A = {a.run_id}, B = {b.run_id}")
    models = list(dict.fromkeys(t["model"]))
    cols = list(dict.fromkeys(zip(t["tp"], t["ep"], t["mode"].astype(str))))
    cols.sort(key=lambda s: (int(s[1]), int(s[0]), style.MODE_ORDER.index(s[2])
                             if s[2] in style.MODE_ORDER else 99))
    fig, cells = style.panel_grid(models, cols)
    for ax, m, (tp, ep, mode) in cells:
        sub = t[(t["model"] == m) & (t["tp"] == tp) & (t["ep"] == ep)
                & (t["mode"].astype(str) == mode)]
        groups = sub.groupby("backend") if by != "backend" and "backend" in sub else [
            (None, sub)]
        for bk, g in groups:
            g = g.sort_values("tokens")
            c = style.backend_color(bk) if bk else style.mode_color(mode)
            style.series(ax.plot(g["tokens"], g["ratio"], style.mode_style(mode), color=c,
                                 linewidth=1, label=f"{style.backend_label(bk)} {mode}"
                                 if bk else str(mode)), g)
            err = g[g["low"].notna()]
            ax.errorbar(err["tokens"], err["ratio"],
                        yerr=[err["ratio"] - err["low"], err["high"] - err["ratio"]],
                        fmt="none", ecolor=c, elinewidth=1.6, capsize=3,
                        label=f"bootstrap {CONFIDENCE:.0%} interval")
            plain = g[~g["verdict"].isin(list(MARK))]
            ax.plot(plain["tokens"], plain["ratio"], "o", color=c, markersize=3.5,
                    markerfacecolor="white", linestyle="none")
            for v, (marker, label) in MARK.items():
                hit = g[g["verdict"] == v]
                if len(hit):
                    ax.plot(hit["tokens"], hit["ratio"], marker, color=c, markersize=8,
                            markeredgecolor="black", linestyle="none", label=label)
        band = _band(ax, sub, mode)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens")
        ax.set_ylabel("B / A (median time)")
        ax.set_title(f"{m} {sharding_name(tp, ep)} {mode}, {band}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    what = (f"A = {by} {values[0]}, B = {by} {values[1]} in {a.run_id}" if by else
            f"A = {a.run_id}, B = {b.run_id}")
    bare = int((t["verdict"] == "no samples").sum())
    nb = (f"; {bare} points without samples: ratio only, no interval" if bare else "")
    from ..analysis.compare import bands_line
    return style.finish(fig, a, None, f"{what}; bars: bootstrap {CONFIDENCE:.0%} intervals; shaded: the "
                        "device's between-process noise band in the mode, calibrated from "
                        "A/A' pairs (a verdict needs the whole bar outside it); below 1: B "
                        f"faster{nb}; {bands_line(t)}")
