"""The FP8 grouped GEMM against its speed of light (issue 24, notebook 03): per point, the
TFLOP/s of the FP8 GEMMs (gemm1 + gemm2, from the stored phases) of the best point of each
FP8 scheme, beside the same point's bf16 GEMMs and beside torch._scaled_grouped_mm
(`torch-fp8-grouped`: CUTLASS's FP8 grouped GEMM, row-wise scales) on the same rows, with
the FP8 peaks (vendor, and moe-lab's measured dense FP8 matmul); and per scheme and model
a verdict: what keeps FP8 from its promise over bf16.

The promise (two targets of moe_lab.analysis.targets): 2x where the bf16 GEMMs are memory-bound (weights at one byte instead of two),
1.7x where they are compute-bound (the FP8 peak is 2x, less what scaling costs). At a point
that misses it, the FP8 layer takes `excess_us` more than bf16_us / promise. That excess
is split between the GEMMs (fp8 GEMM us - bf16 GEMM us / promise) and the rest of the
layer (glue and gaps, the same way): `excess_in` is the larger, "kernel" or "glue" (the
one phase behind a target's miss is analysis.targets.held_back_by's).

    gemm_table(runs=None) -> DataFrame, a row per (device, model, sharding, tokens, scheme)
    verdict(table) -> DataFrame, a row per (scheme, model, sharding)
    sources(table) -> (Run, rows): what its figure's footer names (plots.fp8_gemm draws it)
"""
from __future__ import annotations

import pandas as pd

from . import ledger
from . import targets as tg
from .runs import runs_with_phases
from ..core.devices import ceilings_for, spec_for
from ..core.problems import FP8_SCHEMES, sharding_name
from ..storage.rows import ok_rows
from ..storage.vocabulary import GEMMS
from ..storage.checked import MODE, RUNS, columns, takes

KEY = ["device", "model", "sharding", "tokens"]
SOL_BACKEND = "torch-fp8-grouped"  # torch._scaled_grouped_mm, row-wise: CUTLASS's grouped GEMM
PROMISE = {b: tg.by_name(n).limit for b, n in (   # the targets' records (analysis.targets)
    ("memory", "fp8 >= 2x bf16 where bf16's GEMMs are memory-bound"),
    ("compute", "fp8 >= 1.7x bf16 where bf16's GEMMs are compute-bound"))}


def _points(res: pd.DataFrame, led: pd.DataFrame) -> pd.DataFrame:
    """One row per point: layer us, GEMM us, the GEMM phases' bound, flops, run."""
    g = led[led["phase"].isin(GEMMS)]
    per = g.groupby("point_id").agg(gemm_us=("measured_us", "sum"),
                                   gemm_floor_flops=("floor_flops", "sum"))
    bound = g[g["phase"] == "gemm1"].set_index("point_id")["bound"]
    r = ok_rows(res).copy()
    r["sharding"] = [sharding_name(t, e) for t, e in zip(r["tp"], r["ep"])]
    r = r.join(per, on="point_id").assign(bound=r["point_id"].map(bound))
    return r[r["gemm_us"].notna() & (r["gemm_us"] > 0)]


@takes(runs=RUNS, mode=MODE)
def gemm_table(runs=None, mode: str = "graph") -> pd.DataFrame:
    """`runs`: ids, folders or Runs (None: analysis.runs.runs_with_phases of the newest device
    with FP8 points and phases). A row per point and
    FP8 scheme with a bf16 point beside it: the FP8 point with the fastest layer and its
    GEMMs, the bf16 point likewise, and the fastest torch-fp8-grouped GEMMs on the same
    rows (any FP8 scheme; NaN where none was measured)."""
    runs = runs_with_phases(runs, question="fp8_ledger")
    res, led = ledger.of_runs(runs, mode=mode)
    if not len(res) or not len(led):
        return pd.DataFrame()
    pts = _points(res, led)
    best = lambda d, col: d.sort_values(col).groupby(KEY, as_index=False).head(1).set_index(KEY)  # noqa: E731
    bf = best(pts[pts["dtype"] == "bf16"], "median_us")
    sol = best(pts[pts["dtype"].isin(FP8_SCHEMES) & (pts["backend"] == SOL_BACKEND)], "gemm_us")
    out, peaks = [], {}  # per device: (vendor spec, ceilings), each read once
    for scheme in FP8_SCHEMES:
        f = best(pts[(pts["dtype"] == scheme) & (pts["backend"] != SOL_BACKEND)
                     if scheme != "fp8-channel" else pts["dtype"] == scheme], "median_us")
        both = f.index.intersection(bf.index)
        for k in both:
            a, b = f.loc[k], bf.loc[k]
            s = sol.loc[k] if k in sol.index else None
            if k[0] not in peaks:
                peaks[k[0]] = (spec_for(str(k[0])), ceilings_for(str(k[0])))
            dev, ceil = peaks[k[0]]
            flops = float(a["flops"])
            promise = PROMISE.get(str(b["bound"]), PROMISE["compute"])
            fp8_rest, bf_rest = a["median_us"] - a["gemm_us"], b["median_us"] - b["gemm_us"]
            need = b["median_us"] / promise
            out.append(dict(
                zip(KEY, k), scheme=scheme, backend=a["backend"], config=a.get("config"),
                fp8_us=a["median_us"], fp8_gemm_us=a["gemm_us"],
                bf16_backend=b["backend"], bf16_us=b["median_us"], bf16_gemm_us=b["gemm_us"],
                sol_gemm_us=None if s is None else s["gemm_us"],
                fp8_tflops=flops / a["gemm_us"] / 1e6, bf16_tflops=flops / b["gemm_us"] / 1e6,
                sol_tflops=None if s is None else flops / s["gemm_us"] / 1e6,
                fp8_peak_tflops=dev.fp8_tflops if dev else None,
                fp8_dense_tflops=ceil.tflops_fp8 if ceil.source == "measured" else None,
                speedup=b["median_us"] / a["median_us"],
                gemm_speedup=b["gemm_us"] / a["gemm_us"], bf16_bound=b["bound"],
                promise=promise, excess_us=max(0.0, a["median_us"] - need),
                gemm_excess_us=a["gemm_us"] - b["gemm_us"] / promise,
                glue_excess_us=fp8_rest - bf_rest / promise,
                fp8_run=a["run_id"], bf16_run=b["run_id"], fp8_point_id=a["point_id"],
                sol_run=None if s is None else s["run_id"]))
    t = pd.DataFrame(out)
    if not len(t):
        return t
    t["pct_of_fp8_peak"] = 100 * t["fp8_tflops"] / t["fp8_peak_tflops"]
    t["sol_pct_of_fp8_peak"] = 100 * pd.to_numeric(t["sol_tflops"]) / t["fp8_peak_tflops"]
    t["excess_in"] = ["" if e <= 0 else ("kernel" if g >= u else "glue")
                      for e, g, u in zip(t["excess_us"], t["gemm_excess_us"],
                                         t["glue_excess_us"])]
    return t.sort_values(["scheme"] + KEY).reset_index(drop=True)


def _span(v: pd.Series, fmt="{:.2f}") -> str:
    v = v.dropna()
    if not len(v):
        return "n/a"
    lo, hi = fmt.format(v.min()), fmt.format(v.max())
    return lo if lo == hi else f"{lo}-{hi}"


@takes(table=columns("model", "sharding", "tokens", "scheme", "speedup", "gemm_speedup",
       "glue_excess_us", "pct_of_fp8_peak", "sol_pct_of_fp8_peak", "excess_in"))
def verdict(table: pd.DataFrame) -> pd.DataFrame:
    """Per scheme, model and sharding: points, how many meet the promise, the speedup and
    the FP8 GEMM's % of the FP8 peak (and torch._scaled_grouped_mm's) over them, and what
    holds the rest back, in words."""
    rows = []
    if not len(table):
        return pd.DataFrame(rows)
    for (scheme, model, sh), g in table.groupby(["scheme", "model", "sharding"]):
        miss = g[g["excess_in"] != ""]
        kern, glue = miss[miss["excess_in"] == "kernel"], miss[miss["excess_in"] == "glue"]
        if not len(miss):
            words = "meets its promise at every point"
        else:
            parts = []
            if len(kern):
                parts.append(f"the FP8 GEMM at {len(kern)} point(s) (tokens {_span(kern['tokens'], '{:.0f}')}: "
                             f"{_span(kern['pct_of_fp8_peak'], '{:.1f}')}% of the FP8 peak, "
                             f"GEMMs {_span(kern['gemm_speedup'])}x bf16's"
                             + (f"; torch._scaled_grouped_mm {_span(kern['sol_pct_of_fp8_peak'], '{:.1f}')}%"
                                if kern["sol_pct_of_fp8_peak"].notna().any() else "") + ")")
            if len(glue):
                parts.append(f"the glue at {len(glue)} point(s) (tokens {_span(glue['tokens'], '{:.0f}')}: "
                             f"{_span(glue['glue_excess_us'], '{:.0f}')} us above its share)")
            words = "held back by " + "; ".join(parts)
        rows.append(dict(scheme=scheme, model=model, sharding=sh, points=len(g),
                         met=int((g["excess_in"] == "").sum()),
                         speedup=_span(g["speedup"]), fp8_pct_of_peak=_span(g["pct_of_fp8_peak"], "{:.1f}"),
                         sol_pct_of_peak=_span(g["sol_pct_of_fp8_peak"], "{:.1f}"), verdict=words))
    return pd.DataFrame(rows)


@takes(table=columns("model", "fp8_run", "bf16_run", "sol_run"))
def sources(table: pd.DataFrame):
    """(the Run a figure of `table` names first: the first FP8 row's run; the rows of every
    run it draws, each with its run_id, of the table's models): what fig_gemm_sol's footer
    says, read here so that the figure opens nothing."""
    from ..storage.store import open_run
    if not len(table):
        return None, None
    runs = sorted(set(table["fp8_run"]) | set(table["bf16_run"]) | set(table["sol_run"].dropna()))
    drawn = pd.concat([open_run(r).results.assign(run_id=r) for r in runs], ignore_index=True)
    return open_run(str(table["fp8_run"].iloc[0])), drawn[drawn["model"].isin(set(table["model"]))]
