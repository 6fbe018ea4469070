"""Compare two runs, or one run split by a column, point by point: the ratio of medians
(B over A; below 1 means B is faster) with a bootstrap 95% interval from the kept per-call
samples (scipy.stats.bootstrap), and a verdict that accounts for the mode's noise.

    table = compare(open_run("a"), open_run("b"))                   # two runs
    table = compare(run, run, by="config", values=("default", "tuned"))   # one run, split

Verdicts: `faster` / `slower` when the whole interval lies beyond the mode's noise band
(1 +/- NOISE[mode]: graph replays repeat within a fraction of a percent on one host, eager
calls carry host noise of 10-25%), else `no detectable change`. Points are never silently
compared when they cannot be: different inputs (`inputs_digest`) -> `inputs differ`; no
samples (runs made before samples were kept) -> `no samples`; present on one side only ->
`only in A` / `only in B`.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .errors import UsageError

KEY = ("model", "tp", "ep", "ep_rank", "dtype", "backend", "mode", "wrapped", "config",
       "tokens", "routing")
# half-width of the band inside which a ratio is not taken for a change, per mode family
NOISE = {"graph": 0.02, "eager": 0.10, "compile": 0.10, "other": 0.05}
CONFIDENCE = 0.95


def noise_of(mode: str) -> float:
    mode = str(mode)
    return NOISE["compile" if mode.startswith("compile") else mode if mode in NOISE else "other"]


def ratio_interval(a, b, n_resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(median(b) / median(a), low, high): the percentile bootstrap interval of the ratio of
    medians at CONFIDENCE, resampling a and b independently."""
    from scipy.stats import bootstrap
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("a bootstrap interval needs at least two samples on each side")

    def stat(x, y, axis=-1):
        return np.median(x, axis=axis) / np.median(y, axis=axis)
    res = bootstrap((b, a), stat, vectorized=True, paired=False, n_resamples=n_resamples,
                    confidence_level=CONFIDENCE, method="percentile",
                    random_state=np.random.default_rng(seed))
    return (float(np.median(b) / np.median(a)), float(res.confidence_interval.low),
            float(res.confidence_interval.high))


def verdict(lo: float, hi: float, noise: float) -> str:
    if hi < 1 - noise:
        return "faster"
    if lo > 1 + noise:
        return "slower"
    return "no detectable change"


def check_args(a, b, by: str | None = None, values=None, mode: str | None = None) -> None:
    """UsageError (one line, exit 2) for a split or a mode that selects nothing: an unknown
    --by column, a --values value no row has, a --mode no row is in. Without this they
    gave an empty table (every point `only in A`) and exit 0."""
    if by is not None:
        if values is None or len(values) != 2:
            raise UsageError("--by needs two values, e.g. --by config --values default,tuned")
        for run, value in ((a, values[0]), (b, values[1])):
            if by not in run.results:
                raise UsageError(f"run {run.run_id} has no column {by!r}")
            have = sorted(set(run.results[by].dropna().astype(str)))
            if str(value) not in have:
                raise UsageError(f"run {run.run_id} has no rows with {by}={value!r}; its "
                                 f"values: {', '.join(have) or 'none'}")
    if mode is not None:
        have = sorted(set(a.results.get("mode", pd.Series(dtype=str)).dropna().astype(str))
                      | set(b.results.get("mode", pd.Series(dtype=str)).dropna().astype(str)))
        if str(mode) not in have:
            raise UsageError(f"--mode {mode!r}: no rows in that mode; modes here: "
                             f"{', '.join(have) or 'none'}")


def _side(run, by=None, value=None) -> pd.DataFrame:
    r = run.results
    if by is not None:
        if by not in r:
            raise UsageError(f"run {run.run_id} has no column {by!r}")
        r = r[r[by].astype(str) == str(value)]
    r = r[r["status"] == "ok"].copy()
    for k in KEY:
        if k not in r:
            r[k] = "default" if k == "config" else (False if k == "wrapped" else None)
    r["wrapped"] = r["wrapped"].fillna(False).astype(bool)
    r["config"] = r["config"].fillna("default")
    s = run.samples()
    return r.merge(s, on="point_id", how="left") if len(s) else r.assign(samples_us=None)


def compare(a, b, by: str | None = None, values=None, n_resamples: int = 2000) -> pd.DataFrame:
    """One row per point of A or B (see the module doc); `by`/`values` split a run by a
    column (A = the rows where it is values[0], B = values[1]) and match on the rest."""
    if by is not None and (values is None or len(values) != 2):
        raise UsageError("--by needs two values, e.g. --by config --values default,tuned")
    ra = _side(a, by, values[0] if by else None)
    rb = _side(b, by, values[1] if by else None)
    key = [k for k in KEY if k != by]
    j = ra.merge(rb, on=key, how="outer", suffixes=("_a", "_b"), indicator=True)
    out = []
    for row in j.to_dict("records"):
        rec = {k: row[k] for k in key}
        rec.update(a_us=row.get("median_us_a"), b_us=row.get("median_us_b"), ratio=math.nan,
                   low=math.nan, high=math.nan, noise=noise_of(row["mode"]))
        if row["_merge"] != "both":
            rec["verdict"] = "only in A" if row["_merge"] == "left_only" else "only in B"
        elif _differ(row.get("inputs_digest_a"), row.get("inputs_digest_b")):
            rec["verdict"] = "inputs differ"
        elif not _has(row.get("samples_us_a")) or not _has(row.get("samples_us_b")):
            rec["verdict"] = "no samples"
            rec["ratio"] = rec["b_us"] / rec["a_us"]
        else:
            r_, lo, hi = ratio_interval(row["samples_us_a"], row["samples_us_b"], n_resamples)
            rec.update(ratio=r_, low=lo, high=hi, verdict=verdict(lo, hi, rec["noise"]))
        if str(row["mode"]) == "eager" and rec["verdict"] != "only in A":
            rec["note"] = "eager: host noise, compare graph mode for kernels"
        out.append(rec)
    return pd.DataFrame(out).sort_values(key).reset_index(drop=True)


def _has(samples) -> bool:
    return samples is not None and not (isinstance(samples, float) and math.isnan(samples)) \
        and len(samples) >= 2


def _differ(x, y) -> bool:
    def real(v):
        return isinstance(v, str) and v != ""
    return real(x) and real(y) and x != y


def summary(table: pd.DataFrame) -> str:
    counts = table["verdict"].value_counts().to_dict()
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
