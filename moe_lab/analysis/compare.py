"""Compare two runs, or one run split by a column, point by point: the ratio of medians
(B over A; below 1 means B is faster) with a bootstrap 95% interval from the kept per-call
samples (scipy.stats.bootstrap), and a verdict that needs the change to clear both that
interval and the device's between-process noise in that mode (moe_lab.analysis.noise).

    table = compare(open_run("a"), open_run("b"))                   # two runs
    table = compare(run, run, by="config", values=("default", "tuned"))   # one run, split
    cal = calibrate(open_run("a"), open_run("a2"))   # an A/A' pair -> data/noise/<device>.json

Verdicts: an interval that holds 1 is `no detectable change` (the samples alone show none;
no band is needed to say so, so a run against itself is that at every point). Otherwise
`faster` / `slower` when the whole interval lies outside the calibrated band
[exp(-noise), exp(noise)] of the device and mode (noise.Bands; two devices: the larger
band), `no detectable change` inside it, and `no calibration for <device> <mode>` when no
A/A' pair calibrated that device and mode: the interval excludes 1, but without the
between-process noise (eager on an H200: a ratio of 0.52-1.68 between two processes of one
commit) a verdict would be a guess. The band is measured from A/A' pairs, not assumed; a
compare of the very pair it was calibrated on is circular and says so (column
`calibration`). Points are never silently compared when they cannot be: different inputs
(`inputs_digest`) -> `inputs differ`; no samples (runs made before samples were kept) ->
`no samples`; present on one side only -> `only in A` / `only in B`.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import noise as noise_model
from ..core.constants import BOOTSTRAP_CONFIDENCE, BOOTSTRAP_RESAMPLES
from ..core.errors import UsageError

KEY = ("model", "tp", "ep", "ep_rank", "dtype", "backend", "mode", "wrapped", "config",
       "tokens", "routing")
CONFIDENCE = BOOTSTRAP_CONFIDENCE  # core.constants, defined once
RESAMPLES = BOOTSTRAP_RESAMPLES  # the default n_resamples, core.constants'
NO_CHANGE = "no detectable change"
# what a compared point is drawn and banded by (a panel per model, sharding and mode, tokens
# along it): a split by one of them left the table without it (KeyError, a traceback)
AXES = ("model", "tp", "ep", "mode", "tokens")


def ratio_interval(a, b, n_resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
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


def verdict(lo: float, hi: float, noise: float | None,
            uncalibrated: str = "no calibration") -> str:
    """The interval [lo, hi] of B/A against 1 and the band [exp(-noise), exp(noise)]:
    `faster`/`slower` only when it clears both; noise None (no calibration): `uncalibrated`
    for an interval that excludes 1, `no detectable change` for one that holds it."""
    if not (hi < 1 or lo > 1):
        return NO_CHANGE
    if noise is None or not math.isfinite(noise):
        return uncalibrated
    if hi < math.exp(-noise):
        return "faster"
    if lo > math.exp(noise):
        return "slower"
    return NO_CHANGE


def check_args(a, b, by: str | None = None, values=None, mode: str | None = None) -> None:
    """UsageError (one line, exit 2) for a split or a mode that selects nothing: an unknown
    --by column, a --values value no row has, a --mode no row is in. Without this they
    gave an empty table (every point `only in A`) and exit 0. A run without rows (a tune
    run: its timings are candidates, not points) likewise, and a split by a column each
    point is drawn by (AXES)."""
    for run in (a, b):
        measured(run)
    if by is not None:
        if by in AXES:
            raise UsageError(f"--by {by}: a compared point is drawn at its "
                             f"{', '.join(AXES[:-1])} and {AXES[-1]}, so none of them can "
                             "split the runs; split by another column, e.g. config or backend")
        if values is None or len(values) != 2:
            raise UsageError("--by needs two values, e.g. --by config --values default,tuned")
        if values[0] == values[1] and a.path.resolve() == b.path.resolve():
            raise UsageError(f"--values {values[0]},{values[1]}: one value twice compares the "
                             "run with itself; give two values")
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


def measured(run):
    """`run` (a Run, a run id or a folder, opened) when it has measured points; UsageError
    naming its kind otherwise (a tune run's timings are candidates, not points)."""
    run = noise_model._run(run, "run")
    if not len(run.results):
        kind = run.manifest.get("kind") or "sweep"
        raise UsageError(f"run {run.run_id} has no measured points to compare"
                         + (f" (a {kind} run)" if kind != "sweep" else ""))
    return run


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


def joined(a, b, by: str | None = None, values=None) -> tuple[pd.DataFrame, list[str]]:
    """(the ok rows of A and B outer-joined on the point key, with samples, `_merge`, and
    suffixes _a/_b; the key)."""
    if by is not None and (values is None or len(values) != 2):
        raise UsageError("--by needs two values, e.g. --by config --values default,tuned")
    ra = _side(a, by, values[0] if by else None)
    rb = _side(b, by, values[1] if by else None)
    key = [k for k in KEY if k != by]
    return ra.merge(rb, on=key, how="outer", suffixes=("_a", "_b"), indicator=True), key


def point_ratio(row: dict) -> tuple[float, str]:
    """(B/A, what it is of) of a joined row: the ratio of sample medians when both sides
    kept samples (what the interval is around), else of the rows' median_us."""
    if _has(row.get("samples_us_a")) and _has(row.get("samples_us_b")):
        return (float(np.median(np.asarray(row["samples_us_b"], float))
                      / np.median(np.asarray(row["samples_us_a"], float))), "samples")
    a, b = row.get("median_us_a"), row.get("median_us_b")
    ok = a is not None and b is not None and a == a and b == b and a > 0
    return (float(b) / float(a) if ok else math.nan), "median_us"


def same_inputs(row: dict) -> bool:
    return not _differ(row.get("inputs_digest_a"), row.get("inputs_digest_b"))


def compare(a, b, by: str | None = None, values=None, n_resamples: int = RESAMPLES,
            calibration=None) -> pd.DataFrame:
    """One row per point of A or B (see the module doc); `by`/`values` split a run by a
    column (A = the rows where it is values[0], B = values[1]) and match on the rest.
    calibration: a noise.Calibration, a calibration file or folder; None: each device's
    file under data/noise (noise.noise_dirs). a, b: Runs, run ids or folders; checked as
    the CLI checks them (check_args) before anything is read further."""
    from ..core.validate import limit
    a, b = measured(a), measured(b)
    limit(n_resamples, "resamples", "n_resamples", api=True)  # scipy's ValueError before
    check_args(a, b, by, values)  # a tune run, a split by an axis: one line, not a KeyError
    j, key = joined(a, b, by, values)
    bands = noise_model.Bands(calibration, None if a is b else (a.run_id, b.run_id))
    out = []
    for row in j.to_dict("records"):
        rec = {k: row[k] for k in key}
        dev_a, dev_b = row.get("device_a"), row.get("device_b")
        nz, what = bands.band(dev_a if row["_merge"] != "right_only" else dev_b,
                              dev_b if row["_merge"] != "left_only" else dev_a, row["mode"])
        lo_b, hi_b = noise_model.band(nz)
        rec.update(device=" vs ".join(dict.fromkeys(str(d) for d in (dev_a, dev_b)
                                                    if isinstance(d, str) and d)) or None,
                   a_us=row.get("median_us_a"), b_us=row.get("median_us_b"), ratio=math.nan,
                   low=math.nan, high=math.nan, noise=math.nan if nz is None else nz,
                   band_low=lo_b, band_high=hi_b, calibration=what)
        if row["_merge"] != "both":
            rec["verdict"] = "only in A" if row["_merge"] == "left_only" else "only in B"
        elif not same_inputs(row):
            rec["verdict"] = "inputs differ"
        elif not _has(row.get("samples_us_a")) or not _has(row.get("samples_us_b")):
            rec["verdict"] = "no samples"
            rec["ratio"] = rec["b_us"] / rec["a_us"]
        else:
            r_, lo, hi = ratio_interval(row["samples_us_a"], row["samples_us_b"], n_resamples)
            rec.update(ratio=r_, low=lo, high=hi, verdict=verdict(
                lo, hi, nz, f"no calibration for {rec['device'] or 'unknown device'} "
                            f"{row['mode']}"))
        if str(row["mode"]) == "eager" and rec["verdict"] != "only in A":
            rec["note"] = "eager: host noise, compare graph mode for kernels"
        out.append(rec)
    return pd.DataFrame(out).sort_values(key).reset_index(drop=True)


def _pair(a, b, command: str | None) -> tuple[dict, list]:
    """(the A/A' pair's entry, its joined rows both runs hold) of two runs: noise.check_pair
    (two runs of one commit, device and sweep), every point both timed alike, its ratio."""
    a, b = noise_model.check_pair(measured(a), measured(b))  # a tune run: said as such
    j, _ = joined(a, b)
    both = j[j["_merge"] == "both"].to_dict("records")
    points = [(row, *point_ratio(row)) for row in both if same_inputs(row)]
    skipped = {"only in one run": int((j["_merge"] != "both").sum()),
               "inputs differ": len(both) - len(points)}
    return noise_model.pair_of(a, b, points, skipped, command), both


def calibrate(a, b, path=None, command: str | None = None):
    """Calibrate the A/A' pair (a, b): two runs of one commit, the same sweep, two
    processes; adds it to the device's file (noise.add_pair) and returns the Calibration.
    Runs, run ids or folders (noise.check_pair opens them)."""
    return noise_model.add_pair(_pair(a, b, command)[0], path)


def recalibrated(pair: dict) -> dict | None:
    """An A/A' pair's entry of a noise file computed again from its two runs, as calibrate
    computes it (nothing written), with `row_vs_samples`: the rows whose median_us is not
    the median of the samples stored beside them (edited, or written by another rule: the
    ratio of their samples would not show it). None when either run is not in the data
    folder. What `findings` reads, so the bands it states are the runs' and a changed row
    shows."""
    try:
        out, both = _pair(pair["a"], pair["b"], pair.get("command"))
    except (UsageError, KeyError, TypeError):
        return None
    out["row_vs_samples"] = sorted(
        f"{row['mode']} {noise_model._label(row)} ({side})" for row in both for side in "ab"
        if _off_samples(row.get(f"median_us_{side}"), row.get(f"samples_us_{side}")))
    return out


def _off_samples(median_us, samples) -> bool:
    """A row's median_us that is not the median of its stored samples (to 1e-6)."""
    if not _has(samples) or median_us is None or median_us != median_us:
        return False
    return abs(float(median_us) / float(np.median(np.asarray(samples, float))) - 1) > 1e-6


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


def bands_line(table: pd.DataFrame) -> str:
    """'noise bands: <device> <mode>: band lo-hi (q95 |ln B/A| of N A/A' pairs, M points,
    file); ...': the band each mode of the table met, or that there was none."""
    if not len(table) or "calibration" not in table:
        return "noise bands: none met"
    seen = list(dict.fromkeys(str(c) for c in table["calibration"].dropna()))
    return "noise bands: " + "; ".join(seen)
