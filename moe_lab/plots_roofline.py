"""Data helpers and figures for notebooks/03_roofline.ipynb.

Every figure function returns a matplotlib Figure carrying its provenance (device,
ceilings source, dtype, models, run id, commit) in a footer line.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from matplotlib.figure import Figure
import numpy as np
import pandas as pd

from .problems import SEED_MODELS, default_token_grid, make_problem
from .roofline import (DEVICE_SPECS, REPO_ROOT, Ceilings, DeviceSpec, bound, cost, floor_us,
                       intensity, peak_tflops)

RUNS_ROOT = REPO_ROOT / "data" / "runs"
SEED_SHARDINGS = ((8, 1), (8, 8))  # (tp, ep): TP8 and TP8+EP8


# --- data -------------------------------------------------------------------------------

def latest_run(runs_root: str | Path = RUNS_ROOT) -> Path | None:
    """The folder under runs_root whose results.parquet holds the most points (the main
    dataset rather than a small re-measurement); ties: the newest by name, then by
    modification time. None when there is no run."""
    root = Path(runs_root)
    if not root.is_dir():
        return None
    runs = [p for p in root.iterdir() if (p / "results.parquet").is_file()]
    if not runs:
        return None
    import pyarrow.parquet as pq
    return max(runs, key=lambda p: (pq.ParquetFile(p / "results.parquet").metadata.num_rows,
                                    p.name, (p / "results.parquet").stat().st_mtime))


def load_run(run_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """(results, manifest) of a run folder; manifest is {} when absent."""
    run_dir = Path(run_dir)
    df = pd.read_parquet(run_dir / "results.parquet")
    mpath = run_dir / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.is_file() else {}
    return df, manifest


def manifest_device(manifest: dict) -> str | None:
    """The device name a run's manifest records (a few spellings tolerated)."""
    for key in ("device_name", "device"):
        v = manifest.get(key)
        if isinstance(v, str):
            return v
        if isinstance(v, dict) and isinstance(v.get("name"), str):
            return v["name"]
    return None


def repo_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=10)
        return (out.stdout.strip() or None) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(device: str | None = None, source: str | None = None, dtype=None,
               model=None, run_id: str | None = None, commit: str | None = None) -> str:
    """One footer line: 'device X [measured] | dtype bf16 | model m | run r | commit c'."""
    def join(v):
        return ", ".join(sorted(map(str, v))) if isinstance(v, (list, tuple, set)) else v
    parts = []
    if device:
        parts.append(f"device {device}" + (f" [{source} ceilings]" if source else ""))
    for label, v in (("dtype", dtype), ("model", model), ("run", run_id), ("commit", commit)):
        if v is not None and (not isinstance(v, (list, tuple, set)) or v):
            parts.append(f"{label} {join(v)}")
    return " | ".join(parts)


def _figure(nrows=1, ncols=1, figsize=(8, 5.5), **kw):
    """A Figure outside pyplot: no global state, shown once when a notebook returns it."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kw)


def _footer(fig, text: str):
    fig.text(0.01, 0.005, text, fontsize=7, color="0.35", ha="left", va="bottom")
    return fig


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with a measured time (status ok when the column exists)."""
    d = df
    if "status" in d.columns:
        d = d[d["status"] == "ok"]
    return d[pd.to_numeric(d["median_us"], errors="coerce") > 0]


def _sharding(tp, ep) -> str:
    return f"TP{tp}" + (f"+EP{ep}" if ep > 1 else "")


def pct_of_roof_table(df: pd.DataFrame, values: str = "pct_of_roof") -> pd.DataFrame:
    """% of roof (median over repeats/ranks), rows model x sharding x tokens, columns
    backend (x mode when there are several). Needs add_roofline_columns first."""
    d = ok_rows(df).copy()
    d["sharding"] = [_sharding(t, e) for t, e in zip(d["tp"], d["ep"])]
    cols = ["backend"] + (["mode"] if "mode" in d.columns and d["mode"].nunique() > 1 else [])
    return d.pivot_table(index=["model", "sharding", "tokens"], columns=cols, values=values,
                         aggfunc="median").round(1)


def predicted_floors(models=SEED_MODELS, shardings=SEED_SHARDINGS, tokens=None,
                     devices=("mi300x", "h200-sxm"), dtype: str = "bf16",
                     straggler_seeds: int = 0) -> pd.DataFrame:
    """Ideal fused floors (expected uniform routing) for every model x (tp, ep) x tokens
    x device spec: columns model, sharding, tp, ep, tokens, device, experts_hit, flops,
    bytes, intensity, floor_us, bound, tokens_per_s (per rank).

    In expectation TP and EP cost the same per rank (EP reads 1/ep of the experts at ep
    times the width). What differs is the slowest EP rank: with straggler_seeds > 0, EP
    shardings get an extra sharding '<TPxEPy> slowest rank': the floor of the rank with
    the most work under the model's real router on random logits, averaged over seeds."""
    from .routing import make_routing

    tokens = tokens or default_token_grid(8192)
    specs = [(d, DEVICE_SPECS[d] if isinstance(d, str) else d) for d in devices]
    rows = []

    def add(m, sh, tp, ep, t, c_of_dev):
        for d, spec in specs:
            c = c_of_dev(spec)
            f = floor_us(c, spec, dtype)
            rows.append(dict(model=m, sharding=sh, tp=tp, ep=ep, tokens=t,
                             device=d if isinstance(d, str) else spec.name,
                             experts_hit=c.experts_hit, flops=c.flops, bytes=c.bytes,
                             intensity=intensity(c), floor_us=f, bound=bound(c, spec, dtype),
                             tokens_per_s=t / f * 1e6))

    for m in models:
        for tp, ep in shardings:
            for t in tokens:
                c = cost(make_problem(m, t, dtype, tp, ep))
                add(m, _sharding(tp, ep), tp, ep, t, lambda spec, c=c: c)
                if ep > 1 and straggler_seeds > 0:
                    probs = [make_problem(m, t, dtype, tp, ep, r) for r in range(ep)]
                    per_seed = []
                    for seed in range(straggler_seeds):
                        _, ids, _ = make_routing(probs[0].model, t, "uniform", seed)
                        per_seed.append([cost(p, ids) for p in probs])

                    def slowest(spec, per_seed=per_seed):
                        fs = [max(cs, key=lambda c: floor_us(c, spec, dtype)) for cs in per_seed]
                        n = len(fs)
                        return type(fs[0])(**{**fs[0].__dict__, **{
                            k: sum(getattr(c, k) for c in fs) / n
                            for k in ("flops", "bytes", "weight_bytes", "act_bytes",
                                      "inter_bytes", "experts_hit", "pairs")}})
                    add(m, _sharding(tp, ep) + " slowest rank", tp, ep, t, slowest)
    return pd.DataFrame(rows)


# --- figures -------------------------------------------------------------------------------

def _roofs(ax, ceil: Ceilings | DeviceSpec, xs):
    """The bf16 roof solid, the fp8 roof dashed (when known)."""
    bw = ceil.tb_s if isinstance(ceil, Ceilings) else ceil.hbm_tb_s
    for dt, ls in (("bf16", "-"), ("fp8", "--")):
        try:
            peak = peak_tflops(ceil, dt)
        except ValueError:
            continue
        ax.plot(xs, np.minimum(peak, bw * xs), color="k", ls=ls, lw=1.2,
                label=f"roof {dt}: {peak:.0f} TFLOP/s, {bw:.2f} TB/s")


def fig_roofline(df: pd.DataFrame, ceil: Ceilings, run_id=None, commit=None,
                 color_by: str = "backend"):
    """Classic roofline: intensity (FLOP/B, log) vs achieved TFLOP/s (log), both roofs
    drawn, every measured point coloured by backend (marker by mode)."""
    d = ok_rows(df)
    fig, ax = _figure(figsize=(8, 5.5))
    x = d["flops"] / d["bytes"]
    y = d["flops"] / d["median_us"] / 1e6  # TFLOP/s
    lo = max(min(x.min() if len(x) else 1.0, 1.0) / 2, 0.1)
    hi = max(x.max() if len(x) else 1e3, peak_tflops(ceil, "bf16") / ceil.tb_s) * 4
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    _roofs(ax, ceil, xs)
    markers = dict(zip(sorted(d["mode"].unique()) if "mode" in d else [], "os^Dv"))
    for (key, g) in d.groupby([color_by] + (["mode"] if "mode" in d else [])):
        key = key if isinstance(key, tuple) else (key,)
        gx, gy = g["flops"] / g["bytes"], g["flops"] / g["median_us"] / 1e6
        ax.scatter(gx, gy, s=18, alpha=0.75, marker=markers.get(key[-1], "o") if len(key) > 1 else "o",
                   label=" / ".join(map(str, key)))
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP / byte, ideal fused bytes)",
           ylabel="achieved TFLOP/s", title="MoE layer roofline")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return _footer(fig, provenance(ceil.device, ceil.source, sorted(d["dtype"].unique()),
                                   sorted(d["model"].unique()), run_id, commit))


def fig_floor_vs_tokens(df: pd.DataFrame, ceil: Ceilings, run_id=None, commit=None):
    """Per model (one panel each): measured median_us per backend (and sharding) against
    tokens, with the ideal fused floor (roof_us) drawn as a black line per sharding."""
    d = ok_rows(df).copy()
    d["sharding"] = [_sharding(t, e) for t, e in zip(d["tp"], d["ep"])]
    models = sorted(d["model"].unique())
    n = max(len(models), 1)
    fig, axes = _figure(1, n, figsize=(5.2 * n, 4.4), squeeze=False)
    for ax, m in zip(axes[0], models):
        g = d[d["model"] == m]
        for i, (sh, gs) in enumerate(g.groupby("sharding")):
            fl = gs.groupby("tokens")["roof_us"].median()
            ax.plot(fl.index, fl.values, color="k", ls=["-", "--", ":"][i % 3], lw=1.5,
                    label=f"floor {sh}")
            for (b, gb) in gs.groupby("backend"):
                med = gb.groupby("tokens")["median_us"].median()
                ax.plot(med.index, med.values, marker="o", ms=3, lw=1,
                        ls=["-", "--", ":"][i % 3], label=f"{b} {sh}")
        ax.set(xscale="log", yscale="log", xlabel="tokens", ylabel="time per call (us)",
               title=m)
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=6)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _footer(fig, provenance(ceil.device, ceil.source, sorted(d["dtype"].unique()),
                                   models, run_id, commit))


def fig_predicted_floors(table: pd.DataFrame, commit=None, dtype: str = "bf16"):
    """Predicted ideal floors, one row of panels per model, one column per device spec,
    a line per sharding; memory-bound points hollow, compute-bound filled."""
    models = list(dict.fromkeys(table["model"]))
    devices = list(dict.fromkeys(table["device"]))
    fig, axes = _figure(len(models), len(devices), squeeze=False, sharey="row",
                        figsize=(5 * len(devices), 2.8 * len(models)))
    for r, m in enumerate(models):
        for c, dev in enumerate(devices):
            ax = axes[r][c]
            g = table[(table["model"] == m) & (table["device"] == dev)]
            for sh, gs in g.groupby("sharding", sort=False):
                line, = ax.plot(gs["tokens"], gs["floor_us"], lw=1.2, label=sh)
                comp = gs["bound"] == "compute"
                ax.scatter(gs["tokens"][~comp], gs["floor_us"][~comp], s=14,
                           facecolors="none", edgecolors=line.get_color())
                ax.scatter(gs["tokens"][comp], gs["floor_us"][comp], s=14,
                           color=line.get_color())
            spec = DEVICE_SPECS.get(dev)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{m} on {spec.name if spec else dev}", fontsize=9)
            ax.grid(True, which="both", alpha=0.25)
            if r == len(models) - 1:
                ax.set_xlabel("tokens")
            if c == 0:
                ax.set_ylabel("floor (us)")
            ax.legend(fontsize=7, title="hollow: memory-bound", title_fontsize=6)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return _footer(fig, provenance(", ".join(devices), "vendor", dtype, models, None,
                                   commit) + " | predicted, ideal fused kernel; TP and EP "
                   "coincide in expectation, the slowest EP rank does not")
