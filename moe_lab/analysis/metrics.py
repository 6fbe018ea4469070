"""Metric frames for the targets (analysis.targets): a row per point and metric, from the
frames the analysis functions return. Each builder says which points it takes.

    ledger_metrics(ledger_df, results_df)  the best point per (model, sharding, dtype,
        routing, tokens) in graph: glue_us per glue phase (with its floor), gemm_pct, and
        fp8_speedup (best bf16 / the fastest FP8 scheme's best)
    roof_metrics(best)                     pct_of_roof, pct_of_gemm_peak of a frame of best
        points (analysis.tuning.best_per_point)
    fp8_metrics(cmp)                       fp8_pct_of_roof and fp8_speedup per FP8 scheme
        (analysis.fp8.fp8_vs_bf16's rows of one mode)
    promise_metrics(table)                 fp8_speedup_{memory,compute}_bound (the FP8
        GEMM table, analysis.fp8_gemm.gemm_table)
    prediction_metrics(pts), spread_metrics(ratio) the expert-parallel targets
    span(values, fmt)                      'lo-hi' of finite values (the findings' ranges)
    geomean(values)                        their geometric mean (ratios, times)
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import ledger as lg
from ..core.problems import sharding_name
from .targets import METRIC_COLUMNS, metric_rows
from ..storage.vocabulary import GEMMS
from ..storage.checked import FORMAT, MODE, NUMBERS, STR, columns, frame, takes


@takes(values=NUMBERS, fmt=FORMAT)
def span(values, fmt="{:.2f}") -> str:
    """'lo-hi' of the finite values in `fmt` ('lo' when equal; 'n/a' when none)."""
    v = pd.to_numeric(pd.Series(list(values), dtype=float), errors="coerce")
    v = v[np.isfinite(v)]
    if not len(v):
        return "n/a"
    lo, hi = fmt.format(v.min()), fmt.format(v.max())
    return lo if lo == hi else f"{lo}-{hi}"


GLUE = ("quant", "act", "align", "combine")


@takes(values=NUMBERS)
def geomean(values) -> float:
    """The geometric mean of positive values (a shape's ratios, a series' times)."""
    return float(np.exp(np.log(np.asarray(values, dtype=float)).mean()))


def _concat(frames) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=METRIC_COLUMNS)


def _sharding(d: pd.DataFrame) -> pd.DataFrame:
    if "sharding" not in d and len(d):
        d = d.assign(sharding=[sharding_name(t, e) for t, e in zip(d["tp"], d["ep"])])
    return d


@takes(ledger_df=columns("point_id", "phase", "measured_us", "floor_us"),
       results_df=columns("model", "tp", "ep", "ep_rank", "dtype", "backend", "mode", "tokens",
       "routing", "median_us", "point_id"))
def ledger_metrics(ledger_df: pd.DataFrame, results_df: pd.DataFrame,
                   mode: str = "graph") -> pd.DataFrame:
    """The ledger's metrics on the best `mode` row per point (ledger.best_points): per glue
    phase that ran or has a floor, its measured us beside its floor (glue_us); gemm1 +
    gemm2 as % of the layer (gemm_pct); and per point with a bf16 and an FP8 row, the best
    bf16 us over the fastest FP8 scheme's (fp8_speedup, on the FP8 point)."""
    best = lg.best_points(results_df, mode)
    if not len(best):
        return pd.DataFrame(columns=METRIC_COLUMNS)
    led = ledger_df[ledger_df["point_id"].isin(best["point_id"])]
    by_pt = {pid: g.set_index("phase") for pid, g in led.groupby("point_id")}
    glue, gemm = [], []
    for b in best.to_dict("records"):
        ph = by_pt.get(b["point_id"])
        if ph is None:
            continue
        for p in GLUE:
            if p in ph.index and (ph.at[p, "measured_us"] > 0 or ph.at[p, "floor_us"] > 0):
                glue.append({**b, "phase": p, "value": ph.at[p, "measured_us"],
                             "floor_us": ph.at[p, "floor_us"]})
        g = float(ph["measured_us"].reindex(list(GEMMS)).fillna(0).sum())
        gemm.append({**b, "value": 100 * g / b["median_us"]})
    key = [c for c in lg.POINT if c != "dtype"]
    fp8 = best[best["dtype"].str.startswith("fp8")].sort_values("median_us").groupby(key).head(1)
    bf16 = best[best["dtype"] == "bf16"].set_index(key)["median_us"]
    bf16 = bf16[~bf16.index.duplicated()]
    f = fp8.join(bf16.rename("bf16_us"), on=key, how="inner")
    return _concat([metric_rows(pd.DataFrame(glue), "glue_us", "value"),
                    metric_rows(pd.DataFrame(gemm), "gemm_pct", "value"),
                    metric_rows(f, "fp8_speedup", f["bf16_us"] / f["median_us"])])


@takes(mode=MODE)
def fp8_roof_metrics(results_df: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    """fp8_pct_of_roof of the best `mode` row per FP8 point (ledger.best_points: each
    scheme its own point), from the row's stored % of its FP8 roof."""
    best = lg.best_points(results_df, mode)
    f = best[best["dtype"].str.startswith("fp8")] if len(best) else best
    if not len(f) or "pct_of_roof" not in f:
        return pd.DataFrame(columns=METRIC_COLUMNS)
    return metric_rows(f, "fp8_pct_of_roof", pd.to_numeric(f["pct_of_roof"], errors="coerce"))


@takes(best=frame("pct_of_roof", "pct_of_gemm_peak"), run_id=STR)
def roof_metrics(best: pd.DataFrame, run_id: str = "") -> pd.DataFrame:
    """pct_of_roof and pct_of_gemm_peak of each point of `best` (one row per point)."""
    b = _sharding(best)
    if run_id and len(b):
        b = b.assign(run_id=run_id)
    return _concat([metric_rows(b, "pct_of_roof", "pct_of_roof"),
                    metric_rows(b, "pct_of_gemm_peak", "pct_of_gemm_peak")])


@takes(cmp=frame("mode", "fp8_pct_of_roof", "speedup"), mode=MODE)
def fp8_metrics(cmp: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    """fp8_pct_of_roof and fp8_speedup of the `mode` rows of a fp8_vs_bf16 table (a row
    per FP8 scheme and point: dtype = the scheme, on the FP8 point)."""
    if not len(cmp):
        return pd.DataFrame(columns=METRIC_COLUMNS)
    c = _sharding(cmp[cmp["mode"] == mode])
    c = c.assign(backend=c.get("fp8_backend", ""), median_us=c.get("fp8_us", np.nan),
                 point_id=c.get("fp8_point_id", ""), run_id=c.get("fp8_run", ""))
    return _concat([metric_rows(c, "fp8_pct_of_roof", pd.to_numeric(c["fp8_pct_of_roof"])),
                    metric_rows(c, "fp8_speedup", "speedup")])


@takes(table=frame("scheme", "fp8_us", "fp8_run", "bf16_bound", "speedup"))
def promise_metrics(table: pd.DataFrame) -> pd.DataFrame:
    """The FP8 GEMM table's layer speedup as fp8_speedup_memory_bound or _compute_bound,
    by the bound of bf16's gemm1 at that point (no bound stored: compute)."""
    if not len(table):
        return pd.DataFrame(columns=METRIC_COLUMNS)
    t = table.assign(dtype=table["scheme"], median_us=table["fp8_us"],
                     point_id=table.get("fp8_point_id", ""), run_id=table["fp8_run"])
    mem = t["bf16_bound"].astype(str) == "memory"
    return _concat([metric_rows(t[mem], "fp8_speedup_memory_bound", "speedup"),
                    metric_rows(t[~mem], "fp8_speedup_compute_bound", "speedup")])


@takes(pts=frame("backend", "parallel", "mode", "layer_us", "world_size", "ratio"))
def prediction_metrics(pts: pd.DataFrame) -> pd.DataFrame:
    """|predicted / measured - 1| per distributed point (analysis.expert_parallel.points),
    backend labelled with its parallel variant and mode."""
    if not len(pts):
        return pd.DataFrame(columns=METRIC_COLUMNS)
    p = pts.assign(choice=pts["backend"] + " " + pts["parallel"] + " " + pts["mode"],
                   median_us=pts["layer_us"], sharding=[f"x{int(w)}" for w in pts["world_size"]])
    return metric_rows(p, "prediction_err", (p["ratio"] - 1).abs())


def spread_metrics(ratio: float, spread_run: str = "") -> pd.DataFrame:
    """The spread target's one row: spread wall / one-GPU wall (NaN: no pair yet)."""
    p = pd.DataFrame([dict(backend="sweep --gpus", run_id=spread_run, tokens=np.nan)])
    return metric_rows(p, "spread_ratio", [ratio])
