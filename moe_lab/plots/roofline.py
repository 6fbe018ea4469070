"""Roofline figures and tables, for notebooks/03_roofline.ipynb.

The computation is moe_lab.cost.roofline's (add_roofline_columns for measured rows,
predicted_floors for predictions); this module draws it. Every figure has one legend and
the provenance footer: device (and whether its ceilings were measured), dtype, models,
run id and the commits of the rows drawn; predictions name no run and no commit."""
from __future__ import annotations
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from ..core.devices import DEVICE_SPECS, Ceilings, DeviceSpec
from ..core.problems import sharding_name
from ..cost.roofline import peak_tflops
from . import style
from ..analysis.roofline_tables import (  # noqa: F401 (the tables)
    best_pct_of_roof, measured, ok_rows, pct_of_roof_table)


def _ceiling_text(ceil: Ceilings) -> str:
    return f"{ceil.source} ceilings: {ceil.tflops_bf16:g} TFLOP/s bf16, {ceil.bandwidth_text}"


def _roofs(ax, ceil: Ceilings | DeviceSpec, xs):
    """The bf16 roof solid, the fp8 roof dashed (when known)."""
    bw = ceil.roof_tb_s if isinstance(ceil, Ceilings) else ceil.hbm_tb_s
    for dt, ls in (("bf16", "-"), ("fp8", "--")):
        try:
            peak = peak_tflops(ceil, dt)
        except ValueError:
            continue
        ax.plot(xs, np.minimum(peak, bw * xs), color="k", ls=ls, lw=1.2,
                label=f"roof {dt}: {peak:.0f} TFLOP/s, {bw:.2f} TB/s")


def fig_roofline(run, df: pd.DataFrame, ceil: Ceilings) -> Figure:
    """Classic roofline: intensity (FLOP/B, log) against achieved TFLOP/s (log), both
    roofs drawn, every measured point coloured by backend, marker by mode."""
    d = ok_rows(df)
    d = d[d["flops"].notna() & d["bytes"].notna()]
    if d.empty:
        return style.note_figure("no ok row with a cost to draw", run, d)
    fig, ax = style.new_figure(figsize=(9.5, 5.5))
    x = d["flops"] / d["bytes"]
    lo = max(min(x.min(), 1.0) / 2, 0.1)
    hi = max(x.max(), peak_tflops(ceil, "bf16") / ceil.roof_tb_s) * 4
    _roofs(ax, ceil, np.logspace(np.log10(lo), np.log10(hi), 200))
    d = _series(d)
    looks = _looks(d)
    for (b, cfg, glue, mode, wrapped), g in d.groupby(["backend", "config", "glue", "mode", "wrapped"]):
        m = style.mode_of(mode, wrapped)
        color, name = looks[(b, cfg, glue)]
        style.series(ax.scatter(g["flops"] / g["bytes"], g["flops"] / g["median_us"] / 1e6,
                                s=18, alpha=0.75, marker=style.MODE_MARKER.get(m.name, "o"),
                                color=color, label=f"{name} / {m.label}" if name else None), g)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP / byte, ideal fused bytes)",
           ylabel="achieved TFLOP/s", title="MoE layer roofline")
    ax.grid(True, which="both", alpha=0.25)
    return style.finish(fig, run, d, _ceiling_text(ceil), device=f"{ceil.device} [{ceil.source}]")


def _series(d: pd.DataFrame) -> pd.DataFrame:
    """Rows with what tells one measured series from another: a series is one backend,
    configuration, glue and mode, never an aggregate across them."""
    return d.assign(wrapped=d["wrapped"].fillna(False).astype(bool) if "wrapped" in d else False,
                    config=d["config"].fillna("default").astype(str) if "config" in d else "default",
                    glue=d["glue"].fillna("").astype(str) if "glue" in d else "")


MANY = 3  # past this many configurations of one backend: one legend entry names the count


def _looks(d: pd.DataFrame) -> dict:
    """(backend, config, glue) -> (colour, label or None): each configuration of a backend
    its own shade of the backend's colour and its own legend entry; past MANY of them, one
    entry saying how many (every series still drawn, none merged)."""
    from matplotlib.colors import to_rgb
    out = {}
    for b, g in d.groupby("backend"):
        keys = sorted(set(zip(g["config"], g["glue"])))
        base = np.array(to_rgb(style.backend_color(b)))
        for i, (cfg, glue) in enumerate(keys):
            shade = tuple(base + (1 - base) * (0.55 * i / max(len(keys) - 1, 1)))
            label = (_name(b, cfg, glue) if len(keys) <= MANY else
                     f"{style.backend_label(b)} ({len(keys)} configurations, one series each)"
                     if i == 0 else None)
            out[(b, cfg, glue)] = (shade if len(keys) <= MANY else tuple(base), label)
    return out


def _name(backend: str, config: str, glue: str) -> str:
    """A series' legend name: the backend, and its configuration and glue where not the
    default."""
    return style.backend_label(backend) + (f" {config}" if config != "default" else "") + (
        f" ({glue} glue)" if glue not in ("", "fused") else "")


def fig_floor_vs_tokens(run, df: pd.DataFrame, ceil: Ceilings) -> Figure:
    """Per model (one panel each): measured median_us per backend, configuration, glue and
    sharding against tokens in one mode (graph where the run has it: the title says which),
    with the ideal fused floor (roof_us) as a black line per sharding. Each line is one
    measured series: no point is an aggregate of configurations or modes."""
    d = _series(ok_rows(df))
    if d.empty:
        return style.note_figure("no ok row to draw", run, d)
    modes = list(d["mode"].astype(str).unique())
    mode = "graph" if "graph" in modes else sorted(modes)[0]
    d = d[(d["mode"] == mode) & ~d["wrapped"]].copy()
    if d.empty:
        return style.note_figure(f"no ok {mode} row to draw", run, d)
    d["sharding"] = [sharding_name(t, e) for t, e in zip(d["tp"], d["ep"])]
    looks = _looks(d)
    models = sorted(d["model"].unique())
    shards = sorted(d["sharding"].unique(), key=len)
    fig, axes = style.new_figure(1, len(models), squeeze=False,
                                 figsize=(4.6 * len(models) + 2.0, 4.2))
    for ax, m in zip(axes[0], models):
        g = d[d["model"] == m]
        for sh, gs in g.groupby("sharding"):
            ls = style.sharding_style(shards.index(sh))
            fl = gs.groupby("tokens")["roof_us"].median()
            ax.plot(fl.index, fl.values, color="k", ls=ls, lw=1.5, label=f"floor {sh}")
            for (b, cfg, glue), gb in gs.groupby(["backend", "config", "glue"]):
                med = gb.sort_values("measured_at" if "measured_at" in gb else "tokens") \
                    .groupby("tokens")["median_us"].last()  # a point measured again: its newest
                color, name = looks[(b, cfg, glue)]
                style.series(ax.plot(med.index, med.values, marker="o", ms=3, lw=1, ls=ls,
                                     color=color, label=f"{name} {sh}" if name else None), gb)
        ax.set(yscale="log", xlabel="tokens", ylabel=f"time per call (us, {mode})", title=m)
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.25)
    return style.finish(fig, run, d, _ceiling_text(ceil), device=f"{ceil.device} [{ceil.source}]")


def fig_predicted_floors(table: pd.DataFrame, dtype: str = "bf16") -> Figure:
    """Predicted ideal floors (moe_lab.cost.roofline.predicted_floors): a row of panels per
    model, a column per device spec, a line per sharding; memory-bound points hollow,
    compute-bound filled."""
    models = list(dict.fromkeys(table["model"]))
    devices = list(dict.fromkeys(table["device"]))
    shards = list(dict.fromkeys(table["sharding"]))
    fig, axes = style.new_figure(len(models), len(devices), squeeze=False, sharey="row",
                                 figsize=(4.6 * len(devices) + 2.4, 2.7 * len(models) + 0.6))
    for r, m in enumerate(models):
        for c, dev in enumerate(devices):
            ax = axes[r][c]
            g = table[(table["model"] == m) & (table["device"] == dev)]
            for sh, gs in g.groupby("sharding", sort=False):
                color = f"C{shards.index(sh) % 10}"
                ax.plot(gs["tokens"], gs["floor_us"], lw=1.2, color=color, label=sh)
                comp = gs["bound"] == "compute"
                ax.scatter(gs["tokens"][~comp], gs["floor_us"][~comp], s=14,
                           facecolors="none", edgecolors=color)
                ax.scatter(gs["tokens"][comp], gs["floor_us"][comp], s=14, color=color)
            spec = DEVICE_SPECS.get(dev)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{m} on {spec.name if spec else dev}", fontsize=9)
            ax.grid(True, which="both", alpha=0.25)
            if r == len(models) - 1:
                ax.set_xlabel("tokens")
            if c == 0:
                ax.set_ylabel("floor (us)")
    return style.finish(fig, None, table.assign(dtype=dtype),
                        "vendor dense peaks, ideal fused kernel, uniform routing; TP and EP "
                        "coincide in expectation, the slowest EP rank does not",
                        legend_title="sharding (hollow: memory-bound)",
                        device=", ".join(devices))
