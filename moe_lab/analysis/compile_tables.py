"""Eager vs torch.compile vs graphs (notebook 02), the tables: moe_lab.plots.compile draws them.

A run's results hold modes eager, graph (the sweep's experts-only timings) and
compile:<variant>[:dynamic] with a `wrapped` column (the experts call through its custom
op); its compile table has one row per backend x variant x wrapped.

Baselines of the gap: `compile:off` rows time the same MoELayer (router + experts)
uncompiled, so compiled / off is like for like. Where a run has no `compile:off` rows
the sweep's `eager` rows are used: they time the experts call only (no router), which
flatters eager by the router's time; the `baseline` column says which was used.

Every function takes a run (a moe_lab.storage.store.Run, or what open_run accepts)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..storage.modes import parse_mode
from ..storage.rows import ok_rows
from ..storage.store import open_run
from ..storage.checked import DICT, RUN, takes


KEY = ["model", "tp", "ep", "ep_rank", "dtype", "routing", "backend", "tokens"]


BASELINE_MODE = "compile:off"


def _wrapped(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with `wrapped` a plain bool column (missing or NA: False)."""
    df = df.copy()
    df["wrapped"] = (df["wrapped"].astype("boolean").fillna(False).astype(bool)
                     if "wrapped" in df else False)
    return df


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return ok_rows(df)


def _compile_rows(run) -> pd.DataFrame:
    df = _wrapped(open_run(run).results)
    return df[df["mode"].astype(str).str.startswith("compile:")]


@takes(run=RUN)
def time_table(run) -> pd.DataFrame:
    """median/p10/p90 per backend x mode x wrapped x tokens (ok points), every mode."""
    df = _ok(_wrapped(open_run(run).results))
    cols = [c for c in KEY + ["mode", "wrapped", "median_us", "p10_us", "p90_us", "point_id"]
            if c in df]
    return df[cols].sort_values(["backend", "mode", "wrapped", "tokens"]).reset_index(drop=True)


GAP_COLUMNS = KEY + ["mode", "wrapped", "compile_us", "eager_us", "ratio", "baseline",
                     "point_id"]


@takes(run=RUN)
def gap_table(run) -> pd.DataFrame:
    """Compiled time / uncompiled time per backend x compile mode x wrapped x tokens.
    ratio < 1: compile is faster. `baseline` is `compile:off` (the same layer uncompiled,
    same wrapping) or `eager (experts only)` (the sweep's eager row) where no compile:off
    row exists. point_id is the compiled row's."""
    run = open_run(run)
    comp = _ok(_compile_rows(run))
    key = [k for k in KEY if k in comp]
    off = comp[comp["mode"] == BASELINE_MODE][key + ["wrapped", "median_us"]]
    off = off.rename(columns={"median_us": "eager_us"})
    timed = comp[comp["mode"] != BASELINE_MODE].rename(columns={"median_us": "compile_us"})
    out = timed.merge(off, on=key + ["wrapped"], how="left")
    out["baseline"] = np.where(out["eager_us"].notna(), BASELINE_MODE, None)
    eager = _ok(run.results)
    eager = eager[eager["mode"] == "eager"][key + ["median_us"]]
    if len(eager):
        out = out.merge(eager.rename(columns={"median_us": "_experts_us"}), on=key, how="left")
        fill = out["eager_us"].isna() & out["_experts_us"].notna()
        out.loc[fill, "eager_us"] = out.loc[fill, "_experts_us"]
        out.loc[fill, "baseline"] = "eager (experts only)"
        out = out.drop(columns="_experts_us")
    out["ratio"] = out["compile_us"] / out["eager_us"]
    cols = [c for c in GAP_COLUMNS if c in out]
    return out[cols].sort_values(["backend", "mode", "wrapped", "tokens"]).reset_index(drop=True)


def _both_ways(backend: str) -> bool:
    from .. import backends as registry
    try:
        return bool(registry.backend_class(backend).compile_both_ways)
    except Exception:  # not registered here: measured one way
        return False


@takes(manifest=DICT)
def planned_points(manifest: dict) -> set[tuple]:
    """Every point the run's config asked for, as (model, tp, ep, routing, backend, mode,
    wrapped, tokens): config models x tp x ep x routings x token grid x backends x modes,
    a compile mode twice (plain and wrapped) for a backend whose class has
    compile_both_ways."""
    cfg = manifest.get("config") or {}
    out = set()
    for b in cfg.get("backends") or []:
        for m in cfg.get("modes") or []:
            is_compile = parse_mode(m).kind == "compile"
            for w in ((False, True) if is_compile and _both_ways(b) else (False,)):
                for model in cfg.get("models") or []:
                    for tp in cfg.get("tp") or [8]:
                        for ep in cfg.get("ep") or [1]:
                            for r in cfg.get("routing") or ["uniform"]:
                                for t in cfg.get("tokens") or []:
                                    out.add((model, int(tp), int(ep), r, b, m, w, int(t)))
    return out


@takes(run=RUN)
def coverage(run) -> tuple[str, pd.DataFrame]:
    """What a run planned against what it has rows for. Planned: planned_points of its
    manifest, plus any backend x mode x wrap or token count a row has (an earlier
    invocation may have asked for other ones) over every shard. Each planned point should
    have a row of any status. Returns a one-line summary ('N of M planned points have a
    row') and the backend x modes with points missing (never measured: the run was stopped
    before them, as run_status says), so a gap in a figure is never silent."""
    run = open_run(run)
    df = _wrapped(run.results)
    planned = planned_points(run.manifest)
    if not planned and df.empty:
        return "no planned point and no row", pd.DataFrame()
    have = {(str(r.model), int(r.tp), int(r.ep), str(r.routing), str(r.backend), str(r.mode),
             bool(r.wrapped), int(r.tokens)) for r in df.itertuples(index=False)}
    out, n_planned, n_missing = [], 0, 0
    status = run.manifest.get("status", "?")
    for s in sorted({p[:4] for p in planned | have}):  # model, tp, ep, routing
        shard = {p for p in planned | have if p[:4] == s}
        grid = sorted({p[7] for p in shard})
        for c in sorted({p[4:7] for p in shard}):  # backend, mode, wrapped
            n_planned += len(grid)
            missing = [t for t in grid if s + c + (t,) not in have]
            n_missing += len(missing)
            if missing:
                out.append(dict(model=s[0], tp=s[1], ep=s[2], routing=s[3], backend=c[0],
                                mode=c[1], wrapped=c[2], measured=len(grid) - len(missing),
                                missing_tokens=", ".join(map(str, missing)), run_status=status))
    summary = (f"{n_planned - n_missing} of {n_planned} planned points have a row"
               + (f"; {n_missing} were never measured (below)" if n_missing else ""))
    return summary, pd.DataFrame(out)


@takes(run=RUN)
def break_table(run) -> pd.DataFrame:
    """One row per backend x variant x wrapped: status, graphs, breaks, reasons, recompiles,
    cold compile time, first error."""
    comp = open_run(run).compile
    if comp.empty:
        return pd.DataFrame()
    cols = ["model", "backend", "wrapped", "mode", "status", "graphs", "graph_breaks",
            "recompiles", "cudagraph_skips", "compile_s", "compile_s_total", "points_ok",
            "points", "break_reasons", "error", "cudagraph_skip_reasons"]
    df = _wrapped(comp)
    return df[[c for c in cols if c in df]].sort_values(["model", "backend", "wrapped", "mode"]) \
        .reset_index(drop=True)


@takes(run=RUN)
def break_reasons(run) -> pd.DataFrame:
    """Distinct graph-break reasons per backend x wrapped, one a row, with the models and
    the number of compile variants that hit it."""
    bt = break_table(run)
    if bt.empty or "break_reasons" not in bt:
        return pd.DataFrame(columns=["backend", "wrapped", "reason", "models", "variants"])
    bt = bt.assign(reason=bt["break_reasons"].fillna("").str.split("\n")).explode("reason")
    bt = bt[bt["reason"].str.len() > 0].drop_duplicates(["model", "backend", "wrapped", "mode",
                                                          "reason"])
    return bt.groupby(["backend", "wrapped", "reason"], as_index=False) \
        .agg(models=("model", lambda m: ", ".join(sorted(set(m)))), variants=("mode", "nunique"))


@takes(run=RUN)
def payback_table(run) -> pd.DataFrame:
    """Calls needed to pay back the cold compile: compile_s / (eager_us - compile_us).
    compile_s is the compile table's (first token count); inf where compile is not faster."""
    run = open_run(run)
    gap = gap_table(run)
    if gap.empty or run.compile.empty:
        return pd.DataFrame(columns=list(gap.columns) + ["compile_s", "saved_us",
                                                         "calls_to_payback"])
    key = ["model", "tp", "ep", "ep_rank", "dtype", "routing", "backend", "mode", "wrapped"]
    comp = _wrapped(run.compile)
    cs = comp[[k for k in key if k in comp] + ["compile_s"]]
    out = gap.merge(cs, on=[k for k in key if k in cs], how="left")
    out["saved_us"] = out["eager_us"] - out["compile_us"]
    with np.errstate(divide="ignore", invalid="ignore"):
        calls = np.where(out["saved_us"] > 0, out["compile_s"] * 1e6 / out["saved_us"], np.inf)
    out["calls_to_payback"] = calls
    return out


@takes(run=RUN)
def status_line(run) -> str:
    """'compile rows: N (ok a, failed b, timeout c)': the compile-mode rows of a run
    (compile:off included) by status."""
    rows = _compile_rows(run)
    counts = rows["status"].value_counts()
    return (f"compile rows: {len(rows)} ("
            + ", ".join(f"{s} {int(n)}" for s, n in counts.items()) + ")")
