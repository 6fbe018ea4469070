"""FP8 beside bf16 (notebooks 01 and 03), the tables (moe_lab.plots.fp8 draws them): which dtypes a run holds, the best FP8 point
against the best bf16 point of the same model, sharding, mode and token count (speedup,
and % of each one's own roof), and the FP8 targets (moe_lab.analysis.targets).

FP8 and bf16 rows may come from different runs of the same device: the bf16 side is the
best ok row over every run of that device (`comparison_rows`), each row keeping its
run_id and commit.
"""
from __future__ import annotations

import dataclasses

import pandas as pd

from ..core.problems import FP8_SCHEMES
from ..storage.store import Run
from ..storage.rows import ok_rows
from . import metrics, targets as tg
from .runs import default_runs
from ..storage.checked import RUN, RUNS, TEXT, columns, frame, takes

NONE_YET = ("No FP8 rows measured by moe-lab in any run yet: FP8 schemes are measured on a GPU by "
            "`moe-lab sweep --dtype fp8-block128 ...` (or fp8-tensor, fp8-channel).")
KEY = ["device", "model", "tp", "ep", "mode", "tokens"]


def is_fp8(dtype) -> bool:
    """moe-lab's schemes, and fp8 rows imported from aiter's tuning table (named with
    the same schemes; other fp8 schemes of another importer start with `fp8-`)."""
    return str(dtype) in FP8_SCHEMES or str(dtype).startswith("fp8-")


@takes(run=RUN)
def imported(run: Run) -> bool:
    """Rows imported from another tool (`moe-lab import-aiter`), not measured by moe-lab."""
    return run.manifest.get("kind") == "import" or "aiter-tuner" in set(run.results.get("mode", []))


@takes(run=RUN)
def dtype_table(run: Run) -> pd.DataFrame:
    """Rows per dtype, fp8 format and status."""
    r = run.results.copy()
    if "fp8_format" not in r:
        r["fp8_format"] = ""
    r["fp8_format"] = r["fp8_format"].fillna("")
    return (r.groupby(["dtype", "fp8_format", "status"]).size().unstack("status", fill_value=0)
            .reset_index())


@takes(run=RUN, dtype=TEXT | None)
def with_dtype(run: Run, dtype: str | None) -> Run:
    """The run with only the rows of `dtype` (None: unchanged). UsageError, one line, for a
    dtype the run has no rows of (a typo such as 'fp9' showed an empty page)."""
    if dtype is None:
        return run
    have = sorted(set(run.results["dtype"].dropna().astype(str))) if "dtype" in run.results else []
    if dtype not in have:
        from ..core.errors import UsageError
        from ..core.problems import DTYPES
        raise UsageError(f"dtype {dtype!r}: run {run.run_id} has no rows of it (its dtypes: "
                         f"{', '.join(have) or 'none'}; moe-lab's: {', '.join(DTYPES)})")
    return dataclasses.replace(run, results=run.results[run.results["dtype"] == dtype])


def _ok(run: Run) -> pd.DataFrame:
    r = run.results
    r = ok_rows(r)
    if "parallel" in r:  # single-process rows only
        r = r[r["parallel"].isna() | (r["parallel"].astype(str) == "")]
    return r.assign(run_id=run.run_id)


@takes(run=RUN | None, runs=RUNS | None)
def comparison_rows(run: Run | None = None, runs: list[Run] | None = None
                    ) -> tuple[pd.DataFrame, Run | None]:
    """(ok rows, the FP8 run): the FP8 rows of `run` (else of the newest run measured by
    moe-lab that has any, else of the newest imported one), and the bf16 rows of the same
    device and models from every run. Empty, None when no run has FP8 rows."""
    runs = default_runs() if runs is None else runs
    others = [r for r in runs if run is None or r.run_id != run.run_id]
    cands = (([run] if run is not None else []) + [r for r in others if not imported(r)]
             + [r for r in others if imported(r)])
    fp8_run = next((r for r in cands if _ok(r)["dtype"].map(is_fp8).any()), None)
    if fp8_run is None:
        return pd.DataFrame(columns=KEY + ["dtype", "median_us"]), None
    f8 = _ok(fp8_run)
    f8 = f8[f8["dtype"].map(is_fp8)]
    bf = [(_ok(r)) for r in [fp8_run] + [r for r in runs if r.run_id != fp8_run.run_id]
          if r.device == fp8_run.device]
    bf = pd.concat([b[(b["dtype"] == "bf16") & b["model"].isin(set(f8["model"]))] for b in bf]
                   or [f8.iloc[:0]])
    return pd.concat([f8, bf], ignore_index=True), fp8_run


def _best(rows: pd.DataFrame) -> pd.DataFrame:
    i = rows.groupby(KEY)["median_us"].idxmin()
    cols = KEY + ["median_us", "backend", "run_id", "point_id"] + (
        ["pct_of_roof"] if "pct_of_roof" in rows else [])
    return rows.loc[i, cols].reset_index(drop=True)


@takes(rows=columns("model", "tp", "ep", "dtype", "backend", "mode", "tokens", "median_us",
       "device", "point_id", "run_id"))
def fp8_vs_bf16(rows: pd.DataFrame) -> pd.DataFrame:
    """Per FP8 scheme and (model, tp, ep, mode, tokens): the best FP8 and best bf16 time
    (any backend, any configuration), speedup = bf16 / fp8, and each one's % of its own
    roof (NaN where the run has no roofline, e.g. a CPU run)."""
    out = []
    if not len(rows):
        return pd.DataFrame(columns=["dtype"] + KEY + ["fp8_us", "bf16_us", "speedup"])
    bf = _best(rows[rows["dtype"] == "bf16"]) if (rows["dtype"] == "bf16").any() else None
    for scheme in sorted(d for d in set(rows["dtype"]) if is_fp8(d)):
        f8 = _best(rows[rows["dtype"] == scheme]).rename(columns={
            "median_us": "fp8_us", "backend": "fp8_backend", "run_id": "fp8_run",
            "point_id": "fp8_point_id",
            "pct_of_roof": "fp8_pct_of_roof"})
        if bf is not None:
            f8 = f8.merge(bf.rename(columns={
                "median_us": "bf16_us", "backend": "bf16_backend", "run_id": "bf16_run",
                "point_id": "bf16_point_id",
                "pct_of_roof": "bf16_pct_of_roof"}), on=KEY, how="left")
        else:
            f8["bf16_us"] = float("nan")
        f8["speedup"] = f8["bf16_us"] / f8["fp8_us"]
        out.append(f8.assign(dtype=scheme))
    df = pd.concat(out, ignore_index=True)
    for c in ("fp8_pct_of_roof", "bf16_pct_of_roof"):
        if c not in df:
            df[c] = float("nan")
    return df[["dtype"] + KEY + [c for c in df.columns if c not in KEY + ["dtype"]]]


@takes(cmp=frame("speedup", "dtype"), run=RUN | None)
def summary(cmp: pd.DataFrame, run: Run | None) -> str:
    """One line: where the FP8 rows come from and how many points compare, or NONE_YET."""
    if run is None:
        return NONE_YET
    both = cmp["speedup"].notna() if len(cmp) else pd.Series(dtype=bool)
    src = " (imported: AMD's tuner's times, not moe-lab's)" if imported(run) else ""
    head = "No FP8 rows measured by moe-lab yet; " if imported(run) else ""
    return (head + f"FP8 rows from {run.run_id} ({run.device}){src}: {len(cmp)} FP8 points "
            f"({', '.join(sorted(set(cmp['dtype'])))}), {int(both.sum())} with a bf16 point "
            f"to compare" + (f", median speedup {cmp.loc[both, 'speedup'].median():.2f}x"
                             if both.any() else ""))


@takes(cmp=columns("tp", "ep", "mode", "fp8_pct_of_roof", "speedup"))
def targets(cmp: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    """The target table (analysis.targets.summary) of the FP8 targets over the `mode` rows:
    the FP8 roof targets and FP8 against bf16 (16-256 tokens, 4096+, never slower)."""
    ev = tg.evaluate(metrics.fp8_metrics(cmp, mode))
    return tg.summary(ev)
