"""Kernel-time figures and tables for notebook 01. Tables are DataFrames; figures are
matplotlib Figures that carry their provenance (device, dtype, models, run id, commit)."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .store import load_run

MODE_STYLE = {"eager": "--", "graph": "-"}
BACKEND_COLOR = {"torch": "tab:gray", "torch-grouped": "tab:blue", "aiter-triton": "tab:red",
                 "aiter": "tab:orange", "vllm": "tab:green"}
PHASE_COLOR = {"route": "#8c564b", "align": "#9467bd", "gemm1": "#1f77b4", "act": "#2ca02c",
               "gemm2": "#ff7f0e", "combine": "#d62728", "quant": "#e377c2", "other": "#bbbbbb"}
DEFAULT_RUN = os.path.join("data", "runs", "h200-seed4-20261129")


def find_data_dir(start: str = ".") -> str:
    """The repo's data/ folder from the repo root or from notebooks/."""
    for cand in (os.path.join(start, "data"), os.path.join(start, "..", "data")):
        if os.path.isdir(os.path.join(cand, "runs")):
            return os.path.abspath(cand)
    raise FileNotFoundError("no data/runs folder found from " + os.path.abspath(start))


def open_run(run_dir: str | None = None):
    """(manifest, results, kernels) of a run: the given folder, else the first H200
    dataset, else the newest run with eager and graph rows."""
    if run_dir is None:
        data = find_data_dir()
        cand = os.path.join(os.path.dirname(data), DEFAULT_RUN)
        if os.path.isdir(cand):
            run_dir = cand
        else:
            runs = sorted(os.listdir(os.path.join(data, "runs")))
            run_dir = os.path.join(data, "runs", runs[-1])
    manifest, results, kernels = load_run(run_dir)
    manifest.setdefault("run_id", os.path.basename(os.path.normpath(run_dir)))
    return manifest, results, kernels


def provenance(manifest: dict, results: pd.DataFrame, extra: str = "") -> str:
    env = manifest.get("environment", {})
    dtypes = ",".join(sorted(results["dtype"].astype(str).unique())) if len(results) else "?"
    commit = env.get("git_commit") or "see manifest provenance_note"
    return (f"{env.get('device_name', '?')} | torch {env.get('torch', '?')} triton "
            f"{env.get('triton', '?')} aiter {env.get('aiter', '?')} | {dtypes} | run "
            f"{manifest.get('run_id', '?')} | commit {str(commit)[:12]}" + (f" | {extra}" if extra else ""))


def _stamp(fig: Figure, text: str):
    fig.text(0.005, 0.002, text, fontsize=7, color="0.35", ha="left", va="bottom")


def ok_times(results: pd.DataFrame) -> pd.DataFrame:
    """Only correct, timed points: status ok and a median."""
    r = results[(results["status"] == "ok") & results["median_us"].notna()].copy()
    r["sharding"] = np.where(r["ep"] > 1, "TP" + r["tp"].astype(str) + "+EP" + r["ep"].astype(str),
                             "TP" + r["tp"].astype(str))
    return r


def status_table(results: pd.DataFrame) -> pd.DataFrame:
    """Counts of each status per backend and mode, with the distinct reasons."""
    g = results.groupby(["backend", "mode", "status"], dropna=False)
    out = g.size().rename("points").reset_index()
    out["reason"] = g["error"].agg(lambda s: "; ".join(sorted({x for x in s if x}))[:160]).values
    return out


def fig_time_vs_tokens(results: pd.DataFrame, manifest: dict, models=None) -> Figure:
    r = ok_times(results)
    models = models or list(dict.fromkeys(r["model"]))
    shards = sorted(r["sharding"].unique(), key=len)
    fig = Figure(figsize=(5.2 * len(shards), 3.6 * len(models)), layout="constrained")
    axes = fig.subplots(len(models), len(shards), squeeze=False)
    for i, m in enumerate(models):
        for j, s in enumerate(shards):
            ax = axes[i][j]
            sub = r[(r["model"] == m) & (r["sharding"] == s)]
            for (b, mode), g in sub.groupby(["backend", "mode"]):
                g = g.sort_values("tokens")
                ax.plot(g["tokens"], g["median_us"], MODE_STYLE.get(mode, ":"), marker=".",
                        color=BACKEND_COLOR.get(b), label=f"{b} {mode}")
                ax.fill_between(g["tokens"], g["p10_us"], g["p90_us"], color=BACKEND_COLOR.get(b),
                                alpha=0.12, linewidth=0)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{m} {s}", fontsize=10)
            ax.set_xlabel("tokens")
            ax.set_ylabel("time per MoE call (us)")
            ax.grid(True, which="both", alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    _stamp(fig, provenance(manifest, results, "median, band p10-p90; dashed eager, solid graph"))
    return fig


def phase_table(results: pd.DataFrame, kernels: pd.DataFrame, tokens=(1, 64, 1024, 8192),
                mode: str = "graph") -> pd.DataFrame:
    """Device time per phase (us per call) at the chosen token counts, one row per point."""
    r = ok_times(results)
    r = r[r["tokens"].isin(tokens) & (r["mode"] == mode)]
    k = kernels[kernels["point_id"].isin(r["point_id"])]
    piv = k.pivot_table(index="point_id", columns="phase", values="total_us", aggfunc="sum",
                        fill_value=0.0)
    cols = [p for p in PHASE_COLOR if p in piv.columns]
    out = r.set_index("point_id")[["model", "sharding", "backend", "tokens", "median_us"]].join(
        piv[cols], how="inner")
    out["kernel_us"] = out[cols].sum(axis=1)
    return out.reset_index(drop=True).sort_values(["model", "sharding", "tokens", "backend"])


def fig_phases(table: pd.DataFrame, manifest: dict, results: pd.DataFrame) -> Figure:
    groups = list(dict.fromkeys(zip(table["model"], table["sharding"])))
    fig = Figure(figsize=(12, 2.6 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False)[:, 0]
    phases = [p for p in PHASE_COLOR if p in table.columns]
    for ax, (m, s) in zip(axes, groups):
        sub = table[(table["model"] == m) & (table["sharding"] == s)]
        labels = [f"T={t}\n{b}" for t, b in zip(sub["tokens"], sub["backend"])]
        x = np.arange(len(sub))
        share = sub[phases].div(sub["kernel_us"].replace(0, np.nan), axis=0) * 100
        bottom = np.zeros(len(sub))
        for p in phases:
            ax.bar(x, share[p].fillna(0), bottom=bottom, color=PHASE_COLOR[p], label=p)
            bottom += share[p].fillna(0).values
        for xi, us in zip(x, sub["kernel_us"]):
            ax.text(xi, 101, f"{us:.0f}us", ha="center", va="bottom", fontsize=6)
        ax.set_xticks(x, labels, fontsize=6)
        ax.set_ylim(0, 112)
        ax.set_ylabel("% of kernel time")
        ax.set_title(f"{m} {s}: device time per phase (profiler)", fontsize=10)
    axes[0].legend(ncol=len(phases), fontsize=7, loc="upper left", bbox_to_anchor=(0, 1.35))
    _stamp(fig, provenance(manifest, results, "labels: total kernel us per call"))
    return fig


def launch_overhead(results: pd.DataFrame) -> pd.DataFrame:
    """eager - graph per point: what launching from Python costs (us and share of eager)."""
    r = ok_times(results)
    key = ["model", "sharding", "backend", "tokens", "routing"]
    e = r[r["mode"] == "eager"].set_index(key)
    g = r[r["mode"] == "graph"].set_index(key)
    j = e[["median_us", "p10_us", "p90_us"]].join(g[["median_us", "p10_us", "p90_us"]],
                                                   lsuffix="_eager", rsuffix="_graph", how="inner")
    j["overhead_us"] = j["median_us_eager"] - j["median_us_graph"]
    j["overhead_pct_of_eager"] = 100 * j["overhead_us"] / j["median_us_eager"]
    # eager may not be faster than graph beyond the two timers' spread
    noise = (j["p90_us_eager"] - j["p10_us_eager"]) + (j["p90_us_graph"] - j["p10_us_graph"])
    j["eager_below_graph_beyond_noise"] = j["overhead_us"] < -noise
    return j.reset_index()


def fig_launch_overhead(table: pd.DataFrame, manifest: dict, results: pd.DataFrame) -> Figure:
    models = list(dict.fromkeys(table["model"]))
    fig = Figure(figsize=(5 * len(models), 3.4), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, m in zip(axes, models):
        sub = table[table["model"] == m]
        for (b, s), g in sub.groupby(["backend", "sharding"]):
            g = g.sort_values("tokens")
            ax.plot(g["tokens"], g["overhead_us"], "-" if "EP" not in s else "--", marker=".",
                    color=BACKEND_COLOR.get(b), label=f"{b} {s}")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_title(m, fontsize=10)
        ax.set_xlabel("tokens")
        ax.set_ylabel("eager - graph (us)")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    _stamp(fig, provenance(manifest, results, "launch overhead = eager median - graph median"))
    return fig


def coverage_table(results: pd.DataFrame) -> pd.DataFrame:
    """Graph points: profiler kernel time / graph time, in [0.7, 1.05] or warned."""
    r = ok_times(results)
    g = r[r["mode"] == "graph"].copy()
    g["kernel_over_graph"] = g["kernel_us"] / g["median_us"]
    g["in_range"] = g["kernel_over_graph"].between(0.7, 1.05)
    g["warned"] = g["warning"].fillna("").str.contains("kernels sum to")
    return g[["model", "sharding", "backend", "tokens", "median_us", "kernel_us",
              "kernel_over_graph", "in_range", "warned", "warning"]]


def speedup_table(results: pd.DataFrame, mode: str = "graph", base: str = "torch-grouped",
                  tokens=(1, 16, 64, 256, 1024, 4096, 8192)) -> pd.DataFrame:
    """Time of each backend over `base` at the same point (<1: faster than base)."""
    r = ok_times(results)
    r = r[(r["mode"] == mode) & r["tokens"].isin(tokens)]
    piv = r.pivot_table(index=["model", "sharding", "tokens"], columns="backend",
                        values="median_us")
    if base not in piv.columns:
        return piv
    return piv.div(piv[base], axis=0).round(2)
