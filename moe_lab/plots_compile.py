"""Tables and figures for notebooks/02_eager_vs_compile.ipynb.

A run folder `data/runs/<run_id>/` holds results.parquet (modes eager, graph and
compile:<variant>) and compile.parquet (one row per backend x variant x wrapped).
Tables are DataFrames; every figure carries a provenance footer (device, dtype, model,
run id, commit from manifest.json) as its last text.

Baselines of the gap: `compile:off` rows time the same MoELayer (router + experts)
uncompiled, so compiled / off is like for like. Where a run has no `compile:off` rows
the sweep's `eager` rows are used: they time the experts call only (no router), which
flatters eager by the router's time; the `baseline` column says which was used.
"""
from __future__ import annotations

import json
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

RUNS_ROOT = Path(__file__).resolve().parents[1] / "data" / "runs"
NO_RUN = ("no run with compile rows under data/runs yet: run `moe-lab sweep --modes "
          "compile:off,compile:default,...` on a GPU, or set demo=True for a CPU demo")


@dataclass
class CompileRun:
    run_id: str
    path: Path
    manifest: dict
    results: pd.DataFrame
    compile: pd.DataFrame = field(default_factory=pd.DataFrame)


# --- loading ---------------------------------------------------------------------------

def _has_compile_rows(run_dir: Path) -> bool:
    if (run_dir / "compile.parquet").is_file():
        return True
    try:
        modes = pd.read_parquet(run_dir / "results.parquet", columns=["mode"])["mode"]
    except Exception:
        return False
    return modes.astype(str).str.startswith("compile:").any()


def find_run(runs_root: str | Path = RUNS_ROOT) -> Path | None:
    """The newest run folder (run ids start with a timestamp) with compile rows, or None."""
    root = Path(runs_root)
    if not root.is_dir():
        return None
    runs = [p for p in root.iterdir() if (p / "results.parquet").is_file() and _has_compile_rows(p)]
    return max(runs, key=lambda p: p.name) if runs else None


def load_run(run_dir: str | Path | None) -> CompileRun | None:
    if run_dir is None:
        return None
    run_dir = Path(run_dir)
    mpath = run_dir / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.is_file() else {}
    results = pd.read_parquet(run_dir / "results.parquet")
    cpath = run_dir / "compile.parquet"
    comp = pd.read_parquet(cpath) if cpath.is_file() else pd.DataFrame()
    if "wrapped" in results.columns:
        results["wrapped"] = results["wrapped"].fillna(False).astype(bool)
    return CompileRun(manifest.get("run_id", run_dir.name), run_dir, manifest, results, comp)


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, cwd=Path(__file__).parent)
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def demo_run(out_dir: str | Path, tokens=(1, 8, 32), variants=("default", "default:dynamic"),
             backends=("torch",), model: str = "custom:H=64,I=32,E=4,k=2") -> Path:
    """A tiny CPU compile sweep written as a run folder (for the notebook's demo=True)."""
    from .compile import run_compile_sweep
    from .problems import make_problem
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.strftime("%Y-%m-%dT%H:%M:%S")
    probs = [make_problem(model, t, dtype="fp32") for t in tokens]
    rows, crows = run_compile_sweep(probs, list(backends), ["off", *variants], "cpu")
    pd.DataFrame(rows).to_parquet(out / "results.parquet")
    pd.DataFrame(crows).to_parquet(out / "compile.parquet")
    import torch
    manifest = dict(run_id=out.name, device={"name": f"CPU ({platform.processor() or platform.machine()})",
                                             "vendor": "cpu"},
                    git_commit=_commit(), torch=torch.__version__, command="plots_compile.demo_run",
                    start=start, end=time.strftime("%Y-%m-%dT%H:%M:%S"), demo=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out


# --- provenance ------------------------------------------------------------------------

def _get(d: dict, *paths):
    for path in paths:
        v = d
        for k in path.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        if isinstance(v, str) and v:
            return v
    return None


def provenance(run: CompileRun | None) -> str:
    if run is None:
        return "no run"
    m, df = run.manifest, run.results
    device = _get(m, "device.name", "device_name", "device", "gpu.name") or "?"
    commit = _get(m, "git_commit", "commit", "git.commit") or "?"
    dtypes = ", ".join(sorted(df["dtype"].dropna().unique())) if "dtype" in df else "?"
    models = ", ".join(sorted(df["model"].dropna().unique())) if "model" in df else "?"
    return f"device {device} | dtype {dtypes} | model {models} | run {run.run_id} | commit {commit[:12]}"


def _footer(fig, run):
    fig.text(0.01, 0.005, provenance(run), fontsize=7, color="0.35", ha="left", va="bottom")
    return fig


def _note_figure(run, text: str):
    fig, ax = plt.subplots(figsize=(8, 1.6))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return _footer(fig, run)


# --- tables ----------------------------------------------------------------------------

KEY = ["model", "tp", "ep", "ep_rank", "dtype", "routing", "backend", "tokens"]


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"] if "status" in df else df


def _compile_rows(run: CompileRun) -> pd.DataFrame:
    df = run.results
    df = df[df["mode"].astype(str).str.startswith("compile:")].copy()
    if "wrapped" not in df:
        df["wrapped"] = False
    return df


def time_table(run: CompileRun | None) -> pd.DataFrame:
    """median/p10/p90 per backend x mode x wrapped x tokens (ok points), all modes."""
    if run is None:
        return pd.DataFrame()
    df = _ok(run.results).copy()
    if "wrapped" not in df:
        df["wrapped"] = False
    cols = [c for c in KEY + ["mode", "wrapped", "median_us", "p10_us", "p90_us"] if c in df]
    return df[cols].sort_values(["backend", "mode", "wrapped", "tokens"]).reset_index(drop=True)


def gap_table(run: CompileRun | None) -> pd.DataFrame:
    """Compiled time / eager time per backend x compile mode x wrapped x tokens.
    ratio < 1: compile is faster. `baseline` is `compile:off` (the same layer uncompiled)
    or `eager` (the sweep's experts-only eager rows) where no compile:off row exists."""
    if run is None:
        return pd.DataFrame(columns=KEY + ["mode", "wrapped", "compile_us", "eager_us",
                                           "ratio", "baseline"])
    comp = _ok(_compile_rows(run))
    key = [k for k in KEY if k in comp]
    off = comp[comp["mode"] == "compile:off"][key + ["wrapped", "median_us"]]
    off = off.rename(columns={"median_us": "eager_us"})
    timed = comp[comp["mode"] != "compile:off"].rename(columns={"median_us": "compile_us"})
    out = timed.merge(off, on=key + ["wrapped"], how="left")
    out["baseline"] = np.where(out["eager_us"].notna(), "compile:off", None)
    eager = _ok(run.results)
    eager = eager[eager["mode"] == "eager"][key + ["median_us"]]
    if len(eager):
        out = out.merge(eager.rename(columns={"median_us": "_experts_us"}), on=key, how="left")
        fill = out["eager_us"].isna() & out["_experts_us"].notna()
        out.loc[fill, "eager_us"] = out.loc[fill, "_experts_us"]
        out.loc[fill, "baseline"] = "eager (experts only)"
        out = out.drop(columns="_experts_us")
    out["ratio"] = out["compile_us"] / out["eager_us"]
    cols = key + ["mode", "wrapped", "compile_us", "eager_us", "ratio", "baseline"]
    return out[cols].sort_values(["backend", "mode", "wrapped", "tokens"]).reset_index(drop=True)


def break_table(run: CompileRun | None) -> pd.DataFrame:
    """One row per backend x variant x wrapped: status, graphs, breaks, reasons, recompiles,
    cold compile time, first error."""
    if run is None or run.compile.empty:
        return pd.DataFrame()
    cols = ["backend", "wrapped", "mode", "status", "graphs", "graph_breaks", "recompiles",
            "cudagraph_skips", "compile_s", "compile_s_total", "points_ok", "points",
            "break_reasons", "error", "cudagraph_skip_reasons"]
    df = run.compile
    return df[[c for c in cols if c in df]].sort_values(["backend", "wrapped", "mode"]) \
        .reset_index(drop=True)


def break_reasons(run: CompileRun | None) -> pd.DataFrame:
    """Distinct graph-break reasons per backend x wrapped, one reason a row."""
    bt = break_table(run)
    if bt.empty:
        return bt
    bt = bt.assign(reason=bt["break_reasons"].fillna("").str.split("\n")).explode("reason")
    bt = bt[bt["reason"].str.len() > 0].drop_duplicates(["backend", "wrapped", "mode", "reason"])
    return bt.groupby(["backend", "wrapped", "reason"], as_index=False).size() \
        .rename(columns={"size": "variants"})


def payback_table(run: CompileRun | None) -> pd.DataFrame:
    """Calls needed to pay back the cold compile: compile_s / (eager_us - compile_us).
    compile_s is the compile table's (first token count); inf where compile is not faster."""
    gap = gap_table(run)
    if gap.empty or run.compile.empty:
        return pd.DataFrame(columns=list(gap.columns) + ["compile_s", "saved_us",
                                                         "calls_to_payback"])
    key = ["model", "tp", "ep", "ep_rank", "dtype", "routing", "backend", "mode", "wrapped"]
    cs = run.compile[[k for k in key if k in run.compile] + ["compile_s"]]
    out = gap.merge(cs, on=[k for k in key if k in cs], how="left")
    out["saved_us"] = out["eager_us"] - out["compile_us"]
    with np.errstate(divide="ignore", invalid="ignore"):
        calls = np.where(out["saved_us"] > 0, out["compile_s"] * 1e6 / out["saved_us"], np.inf)
    out["calls_to_payback"] = calls
    return out


# --- figures ---------------------------------------------------------------------------

def _label(mode: str, wrapped) -> str:
    return mode.replace("compile:", "") + (" [op]" if wrapped else "")


def fig_time_vs_tokens(run: CompileRun | None):
    """Time per call vs tokens: one panel per backend; the sweep's eager and graph
    (experts only, dashed), the layer uncompiled (compile:off) and every compile variant,
    wrapped ([op]) and not."""
    if run is None:
        return _note_figure(run, NO_RUN)
    df = time_table(run)
    if df.empty:
        return _note_figure(run, "no ok points in this run")
    backends = sorted(df["backend"].unique())
    fig, axes = plt.subplots(1, len(backends), figsize=(5.5 * len(backends), 4.2),
                             squeeze=False, sharey=True)
    for ax, b in zip(axes[0], backends):
        sub = df[df["backend"] == b]
        for (mode, wrapped), g in sub.groupby(["mode", "wrapped"]):
            g = g.groupby("tokens", as_index=False)[["median_us", "p10_us", "p90_us"]].median()
            experts_only = not str(mode).startswith("compile:")
            style = "--" if experts_only else ("-" if not wrapped else ":")
            label = f"{mode} (experts only)" if experts_only else _label(mode, wrapped)
            ax.plot(g["tokens"], g["median_us"], style, marker="o", ms=3, label=label)
            ax.fill_between(g["tokens"], g["p10_us"], g["p90_us"], alpha=0.15)
        ax.set(xscale="log", yscale="log", title=b, xlabel="tokens")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("time per call, us (median, p10-p90 band)")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _footer(fig, run)


def fig_gap(run: CompileRun | None):
    """Compiled / eager time vs tokens per backend; below 1 compile wins."""
    gap = gap_table(run)
    if run is None or gap.empty or gap["ratio"].notna().sum() == 0:
        return _note_figure(run, NO_RUN if run is None else "no compiled point has an eager baseline")
    backends = sorted(gap["backend"].unique())
    fig, axes = plt.subplots(1, len(backends), figsize=(5.5 * len(backends), 4), squeeze=False,
                             sharey=True)
    for ax, b in zip(axes[0], backends):
        for (mode, wrapped), g in gap[gap["backend"] == b].groupby(["mode", "wrapped"]):
            g = g.groupby("tokens", as_index=False)["ratio"].median()
            ax.plot(g["tokens"], g["ratio"], "-" if not wrapped else ":", marker="o", ms=3,
                    label=_label(mode, wrapped))
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(xscale="log", yscale="log", title=b, xlabel="tokens")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("compiled / eager time (<1: compile faster)")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _footer(fig, run)


def fig_payback(run: CompileRun | None):
    """Cold compile time against time saved per call; diagonal lines mark 1e3, 1e6 calls."""
    pay = payback_table(run)
    if run is None or pay.empty:
        return _note_figure(run, NO_RUN if run is None else "no compile rows to pay back")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    wins = pay[pay["saved_us"] > 0]
    for (b, mode, wrapped), g in wins.groupby(["backend", "mode", "wrapped"]):
        ax.scatter(g["saved_us"], g["compile_s"], s=12 + 6 * np.log2(g["tokens"]),
                   label=f"{b} {_label(mode, wrapped)}")
    if len(wins):
        xs = np.geomspace(max(wins["saved_us"].min(), 1e-3) / 2, wins["saved_us"].max() * 2, 50)
        for calls in (1e3, 1e6):
            ax.plot(xs, xs * calls / 1e6, color="0.6", lw=0.8, ls="--")
            ax.annotate(f"{calls:.0e} calls", (xs[-1], xs[-1] * calls / 1e6), fontsize=7,
                        color="0.4", ha="right")
        ax.set(xscale="log", yscale="log")
    never = int((pay["saved_us"] <= 0).sum())
    ax.set(xlabel="time saved per call by compiling, us (marker size ~ log tokens)",
           ylabel="cold compile time, s",
           title=f"compile cost vs saving ({never} point(s) where compile is not faster)")
    ax.grid(True, which="both", alpha=0.3)
    if len(wins):
        ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _footer(fig, run)
