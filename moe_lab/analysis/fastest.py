"""The fastest path per point over every kernel measured (issue 64): a verdict about the GPU
must not be a verdict about the kernel list. Frames in, frames out.

    fastest(results) -> per run and point (model, sharding, dtype, mode, tokens): paths
        (how many backend/config pairs have a correct, timed row of the default glue there),
        fastest ('backend config'), fastest_us, its pct_of_roof (the row's) and pct_of_peak
        (its TFLOP/s over the device's measured GEMM peak of the scheme's dtype: bf16, or
        fp8 for an FP8 scheme; ceilings_for the row's device), kernel_class (what ran, where
        the backend names it), vllm_us (`vllm` default: vLLM's Triton path as shipped) and
        deployed_us / deployed_class (`vllm-deployed`: the class vLLM's oracle picks), the
        fastest over each (< 1: faster), and own_us / own (the fastest of the workbook's
        own layers, analysis.vllm_compare.OWN); every point within one run
    newest(table) -> the newest measurement of each point (the run whose rows were
        measured last), as vllm_compare.newest does for its table
    by_shape(table) -> per model, sharding and scheme: points, the backends that are the
        fastest and at how many points (most first), the median pct_of_peak at 4096+
        tokens, and at how many points the fastest is not one of the workbook's own layers
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.devices import ceilings_for
from ..core.problems import sharding_name
from ..storage.checked import columns, takes
from . import vllm_compare as vc

POINT = ["run_id", "model", "sharding", "tp", "ep", "dtype", "mode", "tokens"]
SHAPE = ["model", "sharding", "dtype"]
PREFILL = 4096  # the token counts of the bf16-peak target (analysis.targets)
COLUMNS = POINT + ["paths", "fastest", "fastest_us", "pct_of_roof", "pct_of_peak",
                   "kernel_class", "vllm_us", "over_vllm", "deployed_us", "deployed_class",
                   "over_deployed", "own", "own_us", "measured_at"]


def _peak(device: str, dtype: str) -> float:
    c = ceilings_for(str(device))
    peak = c.tflops_fp8 if str(dtype).startswith("fp8") else c.tflops_bf16
    return float(peak) if peak else np.nan


def _ok(results: pd.DataFrame) -> pd.DataFrame:
    """The comparison's rows (vllm_compare.candidates, every mode) with a finite time, their
    sharding and choice ('backend config')."""
    r = vc.candidates(results, None)
    r = r[np.isfinite(pd.to_numeric(r["median_us"], errors="coerce"))]
    r = r.assign(sharding=[sharding_name(t, e) for t, e in zip(r["tp"], r["ep"])])
    return r.assign(choice=r["backend"].astype(str) + " " + r["config"])


@takes(results=columns("model", "tp", "ep", "dtype", "backend", "mode", "tokens", "status",
       "median_us", "flops", "device"))
def fastest(results: pd.DataFrame) -> pd.DataFrame:
    """Module doc."""
    r = _ok(results)
    if not len(r):
        return pd.DataFrame(columns=COLUMNS)
    own = {f"{b} {c}" for b, c in vc.OWN}
    peaks = {(d, t): _peak(d, t) for d, t in r[["device", "dtype"]].drop_duplicates()
             .itertuples(index=False)}
    out = []
    for key, g in r.groupby(POINT, sort=True):
        g = g.sort_values("median_us")
        best = g.iloc[0]
        peak = peaks[(best["device"], best["dtype"])]
        tflops = float(best["flops"]) / float(best["median_us"]) / 1e6

        def us_of(choice):
            hit = g[g["choice"] == choice]
            return (float(hit["median_us"].iloc[0]), hit.iloc[0]) if len(hit) else (np.nan, None)
        vllm_us, _ = us_of("vllm default")
        dep_us, dep = us_of("vllm-deployed default")
        mine = g[g["choice"].isin(own)]
        out.append(dict(zip(POINT, key), paths=g["choice"].nunique(), fastest=best["choice"],
                        fastest_us=float(best["median_us"]),
                        pct_of_roof=float(pd.to_numeric(best.get("pct_of_roof"), errors="coerce")),
                        pct_of_peak=100 * tflops / peak if peak == peak else np.nan,
                        kernel_class=str(best.get("kernel_class") or ""),
                        vllm_us=vllm_us, over_vllm=float(best["median_us"]) / vllm_us,
                        deployed_us=dep_us,
                        deployed_class=str(dep.get("kernel_class") or "") if dep is not None else "",
                        over_deployed=float(best["median_us"]) / dep_us,
                        own=mine["choice"].iloc[0] if len(mine) else "",
                        own_us=float(mine["median_us"].iloc[0]) if len(mine) else np.nan,
                        measured_at=str(g["measured_at"].max()) if "measured_at" in g else ""))
    return pd.DataFrame(out, columns=COLUMNS)


def newest(table: pd.DataFrame) -> pd.DataFrame:
    """Module doc (vllm_compare.newest's rule), in point order."""
    if not len(table):
        return table
    return vc.newest(table).sort_values(POINT[1:]).reset_index(drop=True)


@takes(table=columns("model", "sharding", "dtype", "tokens", "fastest", "pct_of_peak", "own"))
def by_shape(table: pd.DataFrame) -> pd.DataFrame:
    """Module doc (over the newest measurement of each point)."""
    cols = SHAPE + ["points", "fastest", "median_pct_of_peak_prefill", "not_own"]
    t = newest(table)
    if not len(t):
        return pd.DataFrame(columns=cols)
    own = {f"{b} {c}" for b, c in vc.OWN}
    rows = []
    for key, g in t.groupby(SHAPE, sort=True):
        counts = g["fastest"].value_counts()
        pre = g[g["tokens"] >= PREFILL]["pct_of_peak"]
        rows.append(dict(zip(SHAPE, key), points=len(g),
                         fastest=", ".join(f"{b} ({n})" for b, n in counts.items()),
                         median_pct_of_peak_prefill=float(pre.median()) if len(pre) else np.nan,
                         not_own=int((~g["fastest"].isin(own)).sum())))
    return pd.DataFrame(rows, columns=cols)
