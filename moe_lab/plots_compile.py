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
    manifests: list = field(default_factory=list)


# --- loading ---------------------------------------------------------------------------

def _has_compile_rows(run_dir: Path) -> bool:
    if (run_dir / "compile.parquet").is_file():
        return True
    try:
        modes = pd.read_parquet(run_dir / "results.parquet", columns=["mode"])["mode"]
    except Exception:
        return False
    return modes.astype(str).str.startswith("compile:").any()


def find_runs(runs_root: str | Path = RUNS_ROOT) -> list[Path]:
    """Every run folder under runs_root with compile rows, by name."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir()
                  if (p / "results.parquet").is_file() and _has_compile_rows(p))


def find_run(runs_root: str | Path = RUNS_ROOT) -> Path | None:
    """The newest run folder with compile rows (manifest start time, then name), or None."""
    runs = find_runs(runs_root)
    return max(runs, key=lambda p: (_started(p), p.name)) if runs else None


def _started(run_dir: Path) -> str:
    try:
        m = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return ""
    return str(m.get("started") or m.get("start") or "")


def _normalise(df: pd.DataFrame) -> pd.DataFrame:
    """`wrapped` as a bool column; the sweep's `compile:<v>:custom-op` mode -> compile:<v>."""
    df = df.copy()
    if "wrapped" not in df:
        df["wrapped"] = False
    df["wrapped"] = df["wrapped"].astype("boolean").fillna(False).astype(bool)
    if "mode" in df:
        mode = df["mode"].astype(str)
        op = mode.str.endswith(":custom-op")
        df.loc[op, "wrapped"] = True
        df["mode"] = mode.str.removesuffix(":custom-op")
    return df


def load_run(run_dir) -> CompileRun | None:
    """One run folder, or several (a list: their rows concatenated, `run_id` column added)."""
    if run_dir is None:
        return None
    if isinstance(run_dir, (list, tuple)):
        runs = [load_run(p) for p in run_dir]
        if not runs:
            return None
        if len(runs) == 1:
            return runs[0]
        cat = lambda frames: pd.concat([f for f in frames if len(f)], ignore_index=True) \
            if any(len(f) for f in frames) else pd.DataFrame()
        return CompileRun(", ".join(r.run_id for r in runs), runs[0].path, runs[0].manifest,
                          cat([r.results for r in runs]), cat([r.compile for r in runs]),
                          [r.manifest for r in runs])
    run_dir = Path(run_dir)
    mpath = run_dir / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.is_file() else {}
    run_id = manifest.get("run_id", run_dir.name)
    results = _normalise(pd.read_parquet(run_dir / "results.parquet")).assign(run_id=run_id)
    cpath = run_dir / "compile.parquet"
    comp = _normalise(pd.read_parquet(cpath)).assign(run_id=run_id) if cpath.is_file() \
        else pd.DataFrame()
    return CompileRun(run_id, run_dir, manifest, results, comp, [manifest])


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
    df = run.results
    ms = run.manifests or [run.manifest]
    def each(*paths):
        vals = [_get(m, *paths) for m in ms]
        return ", ".join(dict.fromkeys(v[:12] for v in vals if v)) or "?"
    device = each("environment.device_name", "device.name", "device_name", "device")
    # every commit that measured into the folders (a resumed folder has several)
    inv = [i.get("git_commit") for m in ms for i in m.get("invocations") or []]
    commit = ", ".join(dict.fromkeys(c[:12] for c in inv if c)) if any(inv) else \
        each("environment.git_commit", "git_commit", "commit", "git.commit")
    dtypes = ", ".join(sorted(df["dtype"].dropna().unique())) if "dtype" in df else "?"
    models = ", ".join(sorted(df["model"].dropna().unique())) if "model" in df else "?"
    ids = [m.get("run_id") for m in ms if m.get("run_id")] or [run.run_id]
    runs = ids[0] if len(ids) == 1 else f"{len(ids)} runs ({ids[0]}, ...)"
    return f"device {device} | dtype {dtypes} | model {models} | run {runs} | commit {commit}"


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


def _planned_combos(manifest: dict) -> set:
    """(backend, mode, wrapped) the sweep's config asked for: a compile mode of a backend in
    WRAP_BOTH is measured twice, plain and through the custom op."""
    from .compile import WRAP_BOTH
    cfg = manifest.get("config") or {}
    out = set()
    for b in cfg.get("backends") or []:
        for m in cfg.get("modes") or []:
            for w in ((False, True) if m.startswith("compile:") and b in WRAP_BOTH
                      else (False,)):
                out.add((b, m, w))
    return out


def coverage(run: CompileRun | None) -> tuple[str, pd.DataFrame]:
    """What a run planned against what it measured. The grid of a model is every token
    count its manifest asked for or a row has; each backend x mode (a custom-op pass is
    its own wrap) should have a row, of any status, at each. Returns a one-line summary
    and the backend x modes with points missing (never measured: the run was stopped
    before them, as its status says), so a gap in a figure is never silent."""
    if run is None or run.results.empty:
        return "no run", pd.DataFrame()
    ms = {m.get("run_id"): m for m in (run.manifests or [run.manifest])}
    df = run.results
    out, planned, n_miss = [], 0, 0
    for (rid, model), g in df.groupby(["run_id", "model"], sort=True):
        man = ms.get(rid, {})
        grid = sorted(set(int(t) for t in (man.get("config") or {}).get("tokens") or [])
                      | set(int(t) for t in g["tokens"]))
        have = {k: set(int(t) for t in gm["tokens"])
                for k, gm in g.groupby(["backend", "mode", "wrapped"], sort=True)}
        for k in sorted(set(have) | _planned_combos(man)):
            backend, mode, wrapped = k
            planned += len(grid)
            missing = sorted(set(grid) - have.get(k, set()))
            n_miss += len(missing)
            if missing:
                out.append(dict(model=model, backend=backend, mode=mode, wrapped=wrapped,
                                measured=len(grid) - len(missing),
                                missing_tokens=", ".join(map(str, missing)),
                                run_status=man.get("status", "?")))
    miss = pd.DataFrame(out)
    summary = (f"{planned - n_miss} of {planned} planned points have a row"
               + (f"; {n_miss} were never measured (below)" if n_miss else ""))
    return summary, miss


def break_table(run: CompileRun | None) -> pd.DataFrame:
    """One row per backend x variant x wrapped: status, graphs, breaks, reasons, recompiles,
    cold compile time, first error."""
    if run is None or run.compile.empty:
        return pd.DataFrame()
    cols = ["model", "backend", "wrapped", "mode", "status", "graphs", "graph_breaks", "recompiles",
            "cudagraph_skips", "compile_s", "compile_s_total", "points_ok", "points",
            "break_reasons", "error", "cudagraph_skip_reasons"]
    df = run.compile
    return df[[c for c in cols if c in df]].sort_values(["model", "backend", "wrapped", "mode"]) \
        .reset_index(drop=True)


def break_reasons(run: CompileRun | None) -> pd.DataFrame:
    """Distinct graph-break reasons per backend x wrapped, one a row, with the models and
    the number of compile variants that hit it."""
    bt = break_table(run)
    if bt.empty:
        return bt
    bt = bt.assign(reason=bt["break_reasons"].fillna("").str.split("\n")).explode("reason")
    bt = bt[bt["reason"].str.len() > 0].drop_duplicates(["model", "backend", "wrapped", "mode",
                                                          "reason"])
    return bt.groupby(["backend", "wrapped", "reason"], as_index=False) \
        .agg(models=("model", lambda m: ", ".join(sorted(set(m)))), variants=("mode", "nunique"))


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

_MODE_ORDER = ["eager", "graph", "compile:off"] + [
    f"compile:{m}{d}" for m in ("default", "max-autotune-no-cudagraphs", "reduce-overhead")
    for d in ("", ":dynamic")]


def _color(mode: str) -> str:
    """The same colour for a mode in every panel; wrapped differs by line style."""
    return f"C{_MODE_ORDER.index(mode) % 10}" if mode in _MODE_ORDER else "0.3"


def _label(mode: str, wrapped) -> str:
    return mode.replace("compile:", "") + (" [op]" if wrapped else "")


def _panels(df: pd.DataFrame, ylabel: str):
    """A grid of axes: one row per model, one column per backend."""
    models, backends = sorted(df["model"].unique()), sorted(df["backend"].unique())
    fig, axes = plt.subplots(len(models), len(backends), squeeze=False, sharey=True,
                             figsize=(5 * len(backends), 3.6 * len(models) + 0.4))
    for i, m in enumerate(models):
        axes[i][0].set_ylabel(ylabel if len(models) == 1 else f"{m}\n{ylabel}", fontsize=8)
        for j, b in enumerate(backends):
            ax = axes[i][j]
            ax.set(xscale="log", yscale="log")
            ax.set_title(b if len(models) == 1 else f"{b} · {m}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(models) - 1:
                ax.set_xlabel("tokens")
            yield fig, ax, df[(df["model"] == m) & (df["backend"] == b)]


def _legends(fig):
    for ax in fig.axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    return fig


def _finish(fig, run):
    _legends(fig)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return _footer(fig, run)


def fig_time_vs_tokens(run: CompileRun | None):
    """Time per call vs tokens, a panel per model x backend: the sweep's eager and graph
    (experts only, dashed), the layer uncompiled (compile:off) and every compile variant,
    plain (solid) and through the custom op ([op], dotted)."""
    if run is None:
        return _note_figure(run, NO_RUN)
    df = time_table(run)
    if df.empty:
        return _note_figure(run, "no ok points in this run")
    fig = None
    for fig, ax, sub in _panels(df, "time per call, us (median, p10-p90)"):
        for (mode, wrapped), g in sub.groupby(["mode", "wrapped"]):
            g = g.groupby("tokens", as_index=False)[["median_us", "p10_us", "p90_us"]].median()
            experts_only = not str(mode).startswith("compile:")
            style = "--" if experts_only else (":" if wrapped else "-")
            label = f"{mode} (experts only)" if experts_only else _label(mode, wrapped)
            ax.plot(g["tokens"], g["median_us"], style, marker="o", ms=3, label=label,
                    color=_color(mode))
            ax.fill_between(g["tokens"], g["p10_us"], g["p90_us"], alpha=0.12, color=_color(mode))
    return _finish(fig, run)


def fig_gap(run: CompileRun | None):
    """Compiled / uncompiled time vs tokens, a panel per model x backend; below 1 compile
    wins. The baseline is compile:off, or the experts-only eager row where a run lacks it
    (the figure then says so)."""
    gap = gap_table(run)
    if run is None or gap.empty or gap["ratio"].notna().sum() == 0:
        return _note_figure(run, NO_RUN if run is None else "no compiled point has an eager baseline")
    gap = gap[gap["ratio"].notna()]
    fig = None
    experts_only = (gap["baseline"] == "eager (experts only)").sum()
    ylabel = ("compiled / the layer uncompiled" if not experts_only
              else "compiled / eager") + " (<1: compile faster)"
    for fig, ax, sub in _panels(gap, ylabel):
        for (mode, wrapped), g in sub.groupby(["mode", "wrapped"]):
            g = g.groupby("tokens", as_index=False)["ratio"].median()
            ax.plot(g["tokens"], g["ratio"], ":" if wrapped else "-", marker="o", ms=3,
                    label=_label(mode, wrapped), color=_color(mode))
        ax.axhline(1.0, color="k", lw=0.8)
    if experts_only:
        # say so on the figure: the ratio then flatters eager by the router's cost
        fig.suptitle(f"baseline: the sweep's eager rows (experts only, no router) for "
                     f"{experts_only} of {len(gap)} points, as these runs have no compile:off "
                     "rows; the compiled layer includes the router", fontsize=9, color="C3")
        _legends(fig).tight_layout(rect=(0, 0.03, 1, 0.98))
        return _footer(fig, run)
    return _finish(fig, run)


_MARKERS = {"compile:default": "o", "compile:default:dynamic": "s",
            "compile:max-autotune-no-cudagraphs": "^",
            "compile:max-autotune-no-cudagraphs:dynamic": "v",
            "compile:reduce-overhead": "D", "compile:reduce-overhead:dynamic": "P"}


def fig_payback(run: CompileRun | None):
    """Cold compile time against time saved per call; diagonal lines mark 1e3, 1e6 calls.
    Colour: backend; marker: variant; hollow: through the custom op."""
    from matplotlib.lines import Line2D
    pay = payback_table(run)
    if run is None or pay.empty:
        return _note_figure(run, NO_RUN if run is None else "no compile rows to pay back")
    fig, ax = plt.subplots(figsize=(9, 4.8))
    wins = pay[pay["saved_us"] > 0]
    backends = sorted(pay["backend"].unique())
    colour = {b: f"C{i % 10}" for i, b in enumerate(backends)}
    for (b, mode, wrapped), g in wins.groupby(["backend", "mode", "wrapped"]):
        c = colour[b]
        ax.scatter(g["saved_us"], g["compile_s"], s=12 + 6 * np.log2(g["tokens"]),
                   marker=_MARKERS.get(mode, "x"), edgecolors=c,
                   facecolors="none" if wrapped else c, alpha=0.8, linewidths=1.0)
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
           title=f"compile cost vs saving ({never} of {len(pay)} point(s): compile not faster)")
    ax.grid(True, which="both", alpha=0.3)
    if len(wins):
        handles = [Line2D([], [], ls="", marker="o", color=colour[b], label=b) for b in backends]
        handles += [Line2D([], [], ls="", marker=mk, color="0.3", label=_label(m, False))
                    for m, mk in _MARKERS.items() if m in set(wins["mode"])]
        handles += [Line2D([], [], ls="", marker="o", markerfacecolor="none", color="0.3",
                           label="hollow: custom op")]
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _footer(fig, run)
