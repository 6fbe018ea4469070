"""The ledger of stored rows: every phase of a point against its own floor
(moe_lab.cost.ledger computes the floors), the recoverable microseconds (measured - floor)
largest first, and the runs it is read from. DataFrames out.

    ledger(results, kernels, phases=None)  -> per point and phase: measured, floor, over
    layer_summary(ledger)                  -> per point: kernel sum, floors, recoverable us
    best_points(results)                   -> the best row per point (the targets' points;
                                              moe_lab.analysis.targets evaluates them)
    of_runs(runs, mode)                    -> (results, ledger) of several runs; inside
                                              `with shared():` once per runs and mode
    memo(key, compute)                     -> compute() once per key inside `with shared():`
    opened(runs), run_paths(runs)          -> the runs as Runs; their folders (a memo key)
"""
from __future__ import annotations

import contextlib
import os

import pandas as pd

from ..core.devices import ceilings_for
from ..core.errors import UsageError
from ..core.problems import sharding_name
from ..cost.ledger import (GAPS, GATHER_PHASES, PHASE_COLUMNS, UNPROFILED, gathers_rows,
                           phase_floors, phase_rows, problem_of)
from ..storage.rows import ok_rows  # the one rule for which rows are points
from ..storage.store import Run, open_run
from ..storage.checked import CALLABLE, FRAME, MODE, RUNS, columns, takes

POINT = ["model", "tp", "ep", "ep_rank", "dtype", "routing", "tokens"]


def _given(row, col):
    v = row.get(col)
    return None if v is None or pd.isna(v) else float(v)


def _ceilings(device, cache: dict):
    if device not in cache:
        try:
            cache[device] = ceilings_for(str(device))
        except UsageError:  # a CPU run: no ceilings, no vendor spec
            cache[device] = None
    return cache[device]


@takes(kernels_df=FRAME & columns("point_id", "phase", "calls", "total_us") | None,
       results_df=FRAME & columns("model", "tp", "ep", "ep_rank", "dtype", "tokens", "median_us",
       "point_id"), phases_df=columns(*PHASE_COLUMNS) | None)
def ledger(results_df: pd.DataFrame, kernels_df: pd.DataFrame | None,
           phases_df: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per ok point and phase: measured_us, floor_us, over_us (max(measured - floor, 0):
    the recoverable us), x_floor (measured / floor), share (of the layer's median_us),
    with the point's columns; per point sorted by over_us, largest first. Stored phases
    (a run's phases.parquet) are used where present, else the floors are computed from
    the row (make_problem; its experts_hit/pairs, else expected) and the row's device's
    committed ceilings (none: NaN). The measured column adds up to median_us. The align
    and combine floors of a backend that gathers x's rows are computed here from the row's
    own counts (the runs stored before they counted the rows hold the ids-only align floor
    and a combine floor of 0 at k = 1)."""
    ok = ok_rows(results_df)
    stored = {} if phases_df is None or not len(phases_df) else {
        pid: g for pid, g in phases_df.groupby(phases_df["point_id"].astype(str))}
    kern: dict = {}
    if kernels_df is not None and len(kernels_df):
        agg = kernels_df.groupby([kernels_df["point_id"].astype(str), "phase"])[
            ["total_us", "calls"]].sum()
        for (pid, ph), us, n in zip(agg.index, agg["total_us"], agg["calls"]):
            kern.setdefault(pid, {})[ph] = [float(us), float(n)]
    cache, recs = {}, []
    keep = [c for c in ("point_id", "model", "tp", "ep", "ep_rank", "dtype", "routing",
                        "tokens", "backend", "config", "glue", "mode", "median_us", "roof_us",
                        "device", "git_commit") if c in ok]
    for full in ok.to_dict("records"):
        row, pid = {c: full[c] for c in keep}, str(full["point_id"])
        gathered = gathers_rows(row.get("backend"))
        counts = dict(experts_hit=_given(full, "experts_hit"), pairs=_given(full, "pairs"))
        ceil = _ceilings(row.get("device"), cache)
        if pid in stored:
            ph = stored[pid].reindex(columns=list(PHASE_COLUMNS)).to_dict("records")
            if gathered:  # times as stored; the align and combine floors with the rows
                f = phase_floors(problem_of(row), None, **counts, ceilings=ceil, gathered=True)
                for r in ph:
                    if r["phase"] in GATHER_PHASES:
                        g = f[r["phase"]]
                        r.update(floor_us=g["floor_us"], floor_bytes=g["bytes"], bound=g["bound"])
        else:
            ph = phase_rows(pid, problem_of(row), None, kern.get(pid, {}), ceil,
                            median_us=float(row["median_us"]), gathered=gathered, **counts)
        recs += [{**r, **row} for r in ph]
    cols = keep + ["sharding", "phase", "measured_us", "calls", "floor_us", "floor_bytes",
                   "floor_flops", "bound", "over_us", "x_floor", "share"]
    if not recs:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame(recs)
    out["sharding"] = [sharding_name(t, e) for t, e in zip(out["tp"], out["ep"])]
    out["over_us"] = (out["measured_us"] - out["floor_us"]).clip(lower=0)
    out["x_floor"] = out["measured_us"] / out["floor_us"].where(out["floor_us"] > 0)
    out["share"] = out["measured_us"] / out["median_us"].astype(float)
    order = {p: i for i, p in enumerate(dict.fromkeys(out["point_id"]))}
    out = out.assign(_p=out["point_id"].map(order)).sort_values(
        ["_p", "over_us", "measured_us"], ascending=[True, False, False], na_position="last")
    return out.drop(columns="_p")[cols].reset_index(drop=True)


@takes(ledger_df=columns("point_id", "phase", "measured_us", "floor_us", "over_us"))
def layer_summary(ledger_df: pd.DataFrame) -> pd.DataFrame:
    """Per point: median_us, the kernel sum, the sum of the phase floors (beside the layer
    roof, roof_us), the recoverable us and the phase holding the most of it."""
    g = ledger_df.groupby("point_id", sort=False)
    top = g.head(1).set_index("point_id")
    kern = ledger_df[~ledger_df["phase"].isin([GAPS, UNPROFILED])].groupby(
        "point_id", sort=False)["measured_us"].sum()
    out = top.drop(columns=[c for c in ("phase", "measured_us", "calls", "floor_us",
                                        "floor_bytes", "floor_flops", "bound", "over_us",
                                        "x_floor", "share") if c in top]).assign(
        kernel_us=kern, floor_sum_us=g["floor_us"].sum(min_count=1),
        recoverable_us=g["over_us"].sum(min_count=1), top_phase=top["phase"],
        top_over_us=top["over_us"])
    return out.reset_index()


# --- the best point (what the targets are evaluated on) --------------------------------------

@takes(mode=MODE, results_df=columns("model", "tp", "ep", "ep_rank", "dtype", "backend", "mode",
       "tokens", "routing", "median_us"))
def best_points(results_df: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    """Per point (model, sharding, dtype, routing, tokens), the ok row of `mode` with the
    lowest median, with `choice` ('backend config')."""
    r = ok_rows(results_df[results_df["mode"] == mode]).copy()
    r["config"] = r["config"].fillna("default") if "config" in r else "default"
    # the glue variant, where a backend has a choice; built per row, so that a run without
    # rows of `mode` (a CPU run's eager rows) gives no row instead of a str + float error
    glue = r["glue"] if "glue" in r else [None] * len(r)
    r["choice"] = [f"{b} {c}" + (f" glue={g}" if isinstance(g, str) and g else "")
                   for b, c, g in zip(r["backend"], r["config"], glue)]
    r["sharding"] = [sharding_name(t, e) for t, e in zip(r["tp"], r["ep"])]
    return r.sort_values("median_us").groupby(POINT).head(1).sort_values(POINT) \
        .reset_index(drop=True)


# --- runs in, frames out (what notebooks and report call) ---------------------------------


_SHARED: dict | None = None  # of_runs' answers inside shared(), by the runs' folders and mode


@contextlib.contextmanager
def shared():
    """Inside the block, of_runs over the same run folders and mode (and whatever else is
    asked through memo) is computed once (a document whose sections read the same runs:
    moe_lab.findings); each caller gets its own copy of the frames."""
    global _SHARED
    outer = _SHARED is not None
    if not outer:
        _SHARED = {}
    try:
        yield
    finally:
        if not outer:
            _SHARED = None


def _copied(value):
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)
    return value.copy() if isinstance(value, pd.DataFrame) else value


@takes(compute=CALLABLE)
def memo(key, compute):
    """compute(), once per key inside shared() (a frame, or a tuple of frames and plain
    values, each caller getting its own copy of the frames); outside it, every time."""
    if _SHARED is None:
        return compute()
    if key not in _SHARED:
        _SHARED[key] = compute()
    return _copied(_SHARED[key])


def opened(runs) -> list:
    """`runs` (Runs, run ids or folders, or one of them) as a list of Runs: a run id or a
    folder is opened (storage.open_run; an unknown one is a UsageError in one line). Before,
    an id where a Run was expected was an AttributeError ('str' object has no attribute 'path')."""
    if runs is None:
        raise UsageError("runs: give a list of runs (Runs, run ids or folders), not None")
    if isinstance(runs, (str, os.PathLike, Run)):
        runs = [runs]
    try:
        runs = list(runs)
    except TypeError:
        raise UsageError(f"runs {runs!r}: give a list of runs (Runs, run ids or folders)") from None
    bad = next((r for r in runs if isinstance(r, str) and not r.strip()), None)
    if bad is not None:
        raise UsageError(f"runs holds {bad!r}: give a list of runs (Runs, run ids or folders)")
    return [r if hasattr(r, "results") and hasattr(r, "path") else open_run(r) for r in runs]


@takes(runs=RUNS)
def run_paths(runs) -> tuple:
    """The runs' folders, resolved: the part of a memo key that names runs."""
    return tuple(os.path.realpath(r.path) for r in runs)


@takes(runs=RUNS, mode=MODE | None)
def of_runs(runs, mode: str = "graph") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results, ledger) of several runs read together, each row with its `run_id`; the
    results of `mode` only (None: every mode). A point measured by more than one of the
    runs (a baseline sweep repeating another's point) is taken from the first run given."""
    runs = opened(runs)
    return memo((mode, run_paths(runs)), lambda: _of_runs(runs, mode))


def _of_runs(runs, mode):
    res, led, seen = [], [], set()
    for r in runs:
        rows = r.results if mode is None else r.results[r.results["mode"] == mode]
        rows = rows[~rows["point_id"].astype(str).isin(seen)]
        seen |= set(rows["point_id"].astype(str))
        res.append(rows.assign(run_id=r.run_id))
        led.append(ledger(rows, r.kernels, r.phases).assign(run_id=r.run_id))
    nonempty = [x for x in led if len(x)]
    return (pd.concat(res, ignore_index=True) if res else pd.DataFrame(),
            pd.concat(nonempty, ignore_index=True) if nonempty else ledger(pd.DataFrame(
                columns=["status", "median_us"]), None))
