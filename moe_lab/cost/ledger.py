"""The ledger: every phase of a layer call against its own floor, and the recoverable
microseconds (measured - floor), largest first. Pure functions; no GPU; DataFrames out.

    phase_floors(problem, topk_ids, *, experts_hit, pairs, ceilings) -> {phase: floor}
    phase_rows(point_id, problem, topk_ids, kernels, ceilings, median_us=) -> rows of
              a run's phases.parquet (what the sweep stores per point)
    ledger(results, kernels, phases=None)  -> per point and phase: measured, floor, over
    best_points(results)                   -> the best row per point (the targets' points;
                                              moe_lab.analysis.targets evaluates them)
    of_runs(runs, mode)                    -> (results, ledger) of several runs; inside
                                              `with shared():` once per runs and mode
    memo(key, compute)                     -> compute() once per key inside `with shared():`

Floors (units: bytes, FLOP, us). Symbols: T tokens, H hidden, I the per-rank intermediate
size, k top-k; rows = T*k, the (token, slot) pairs as the glue kernels see them (under EP
only pairs/(T*k) of them are local: a kernel that skipped the remote rows could go below
the act/align/combine floors by that factor); pairs and experts_hit are LOCAL counts
(roofline.local_counts from the ids, else the uniform expectation, as roofline.cost).
a = bytes of an activation element (2: bf16; the fp8 schemes keep x and out in bf16),
w = bytes of a weight (1 for the fp8 schemes, else a), q = bytes of a GEMM input (1 for
the fp8 schemes, else a). Scales are fp32: S_w(n, k) of a weight [n, k] (quant.scale_bytes:
tensor 4, channel 4n, block128 4*ceil(n/128)*ceil(k/128)), S_a(m, k) of an activation
[m, k] (tensor 4, channel/token 4m, block128 4m*ceil(k/128)); 0 for bf16/fp16.

  quant    fp8 schemes only, 0 for bf16: read x [T, H] in bf16, write it in fp8 with its
           scales: T*H*a + T*H + S_a(T, H). The quantisation of gemm2's input is part of
           the act floor (deployments fuse it into the activation).
  act      read gemm1's output [rows, 2I] in bf16, write [rows, I] as gemm2 takes it:
           rows*2I*a + rows*I*q + S_a(rows, I).
  align    read the routing ids, write the sorted ids, int32 both: 2 * T*k*4 (the
           per-block expert ids and the padding are not counted: the minimum). A backend
           that gathers the activation rows into expert order (Backend.gathers_rows: the
           torch backends' index_select of x, which the profiler files under align) also
           moves those rows: + (min(T, pairs) + pairs) * H*q + S_a(min(T, pairs) + pairs, H)
           (each token's row read once, each local pair's row written once).
  combine  read [T, k, H], write [T, H], bf16: T*k*H*a + T*H*a; 0 when k == 1. A backend
           that gathered the rows has gemm2's output in expert order, [pairs, H], and must
           bring it back to token order whatever k: pairs*H*a + T*H*a.
  gemm1    flops 2*pairs*H*2I; bytes experts_hit*(2I*H*w + S_w(2I, H)) + T*H*q + S_a(T, H)
           + pairs*2I*a (its output).
  gemm2    flops 2*pairs*I*H; bytes experts_hit*(H*I*w + S_w(H, I)) + pairs*I*q
           + S_a(pairs, I) + pairs*H*a (its output).
  route    none: routing is an input of the layer here (floor 0, like `other`: copies,
           fills, bookkeeping a layer need not run).
  gaps     the layer's median minus the profiler's kernel sum: launch gaps and idle time
           (negative when the profiled kernels ran longer than the timed call); floor 0.
           `unprofiled` instead, the whole median, for a point without kernel rows.

floor_us = max(bytes / read bandwidth, flops / matrix peak of the dtype), with the
device's measured ceilings (roofline.roof_bandwidth: read where measured, else copy;
roofline.peak_tflops: fp8 schemes use the fp8 peak). Without ceilings (a CPU run) the
floors are NaN and the measured column still adds up to the layer time. gemm1 + gemm2
weights equal roofline's per-expert weight bytes; the sum of the floors is not the
layer roof (that one is one fused kernel: no intermediates at all).
"""
from __future__ import annotations

import contextlib
import math
import os

import numpy as np
import pandas as pd

from ..storage import rows as row_schema
from ..core.devices import Ceilings, DeviceSpec, ceilings_for
from ..core.errors import UsageError
from ..core.problems import Problem, make_problem
from ..core.quant import BLOCK, scale_bytes
from ..core.problems import sharding_name
from .roofline import _ELEM_BYTES, cost, peak_tflops, roof_bandwidth
from ..core.validate import frames

GLUE = ("quant", "act", "align", "combine")
GEMMS = ("gemm1", "gemm2")
FLOOR_PHASES = ("quant", "act", "align", "gemm1", "gemm2", "combine")
GATHER_PHASES = ("align", "combine")  # the floors a row-gathering backend's rows change
GAPS, UNPROFILED = "gaps", "unprofiled"
PHASE_COLUMNS = ("point_id", "phase", "measured_us", "calls", "floor_us", "floor_bytes",
                 "floor_flops", "bound")
POINT = ["model", "tp", "ep", "ep_rank", "dtype", "routing", "tokens"]


# --- floors -------------------------------------------------------------------------------

def act_scale_bytes(scheme: str, m: float, k: int) -> float:
    """fp32 scale bytes of an activation [m, k] quantised by `scheme` (0 for bf16/fp16)."""
    if scheme == "fp8-tensor":
        return 4.0
    if scheme == "fp8-channel":
        return 4.0 * m
    if scheme == "fp8-block128":
        return 4.0 * m * math.ceil(k / BLOCK)
    return 0.0


def gathers_rows(backend) -> bool:
    """Whether `backend` (a name) copies x's rows into expert order (Backend.gathers_rows);
    False for a name no backend has (an imported table's rows)."""
    from ..backends import backend_class, names
    return isinstance(backend, str) and backend in names() and \
        bool(backend_class(backend).gathers_rows)


def phase_bytes_flops(problem: Problem, experts_hit: float, pairs: float,
                      gathered: bool = False) -> dict:
    """{phase: (bytes, flops)} of the module docstring's formulas; gathered: the backend
    gathers x's rows into expert order (the align phase moves them, the combine moves
    gemm2's rows back)."""
    T, H, I, k = problem.tokens, problem.hidden, problem.inter, problem.topk
    s, fp8 = problem.dtype, problem.is_fp8
    a = _ELEM_BYTES[problem.act_dtype]
    w = q = 1 if fp8 else a
    rows = T * k
    sw = (lambda n, kk: scale_bytes(s, n, kk)) if fp8 else (lambda n, kk: 0)
    g = min(T, pairs) + pairs if gathered else 0  # rows read + rows written by the gather
    return {
        "quant": ((T * H * a + T * H * q + act_scale_bytes(s, T, H)) if fp8 else 0.0, 0.0),
        "act": (rows * 2 * I * a + rows * I * q + act_scale_bytes(s, rows, I), 0.0),
        "align": (2.0 * rows * 4 + g * H * q + (act_scale_bytes(s, g, H) if g else 0), 0.0),
        "combine": (float(pairs * H * a + T * H * a) if gathered else
                    0.0 if k == 1 else float(T * k * H * a + T * H * a), 0.0),
        "gemm1": (experts_hit * (2 * I * H * w + sw(2 * I, H)) + T * H * q
                  + act_scale_bytes(s, T, H) + pairs * 2 * I * a, 2.0 * pairs * H * 2 * I),
        "gemm2": (experts_hit * (H * I * w + sw(H, I)) + pairs * I * q
                  + act_scale_bytes(s, pairs, I) + pairs * H * a, 2.0 * pairs * I * H),
    }


def phase_floors(problem: Problem, topk_ids=None, *, experts_hit=None, pairs=None,
                 ceilings: Ceilings | DeviceSpec | None, gathered: bool = False) -> dict:
    """{phase: dict(floor_us, bytes, flops, bound, basis)} for FLOOR_PHASES. Counts: exact
    from global topk_ids [T, k] when given, else the uniform expectation; experts_hit and
    pairs override them (a stored row's counts). ceilings None: floor_us NaN. gathered:
    the backend gathers x's rows (gathers_rows), counted in the align floor."""
    c = cost(problem, topk_ids, experts_hit=experts_hit, pairs=pairs)
    out = {}
    for ph, (b, f) in phase_bytes_flops(problem, c.experts_hit, c.pairs, gathered).items():
        mem = comp = math.nan
        basis = "no ceilings"
        if ceilings is not None:
            bw_basis, tb_s = roof_bandwidth(ceilings)
            mem, comp = b / (tb_s * 1e12) * 1e6, 0.0
            basis = f"{bw_basis} {tb_s:.3g} TB/s"
            if f > 0:
                try:
                    peak = peak_tflops(ceilings, problem.dtype)
                    comp = f / (peak * 1e12) * 1e6
                except ValueError:  # fp32: no matrix peak quoted
                    comp = math.nan
                if comp > mem:
                    basis = f"{'fp8' if problem.is_fp8 else 'bf16'} {peak:.4g} TFLOP/s"
        floor = math.nan if math.isnan(mem) or math.isnan(comp) else max(mem, comp)
        bound = "" if math.isnan(floor) or floor == 0 else (
            "compute" if comp > mem else "memory")
        out[ph] = dict(floor_us=floor, bytes=float(b), flops=float(f), bound=bound,
                       basis=basis, experts_hit=c.experts_hit, pairs=c.pairs)
    return out


# --- per point rows (phases.parquet) -------------------------------------------------------

def _measured(kernels, point_id: str | None = None) -> dict:
    """{phase: [total_us, calls]} of one point's kernels: a profile_kernels table, a run's
    kernels (filtered by point_id), or such a dict already."""
    if isinstance(kernels, dict):
        return kernels
    if kernels is None or not len(kernels):
        return {}
    k = kernels
    if point_id is not None and "point_id" in k:
        k = k[k["point_id"].astype(str) == str(point_id)]
    out: dict = {}
    for ph, us, n in zip(k["phase"], k["total_us"].astype(float), k["calls"].astype(float)):
        acc = out.setdefault(str(ph), [0.0, 0.0])
        acc[0] += us
        acc[1] += n
    return out


def phase_rows(point_id: str, problem: Problem, topk_ids, kernels_df: pd.DataFrame | None,
               ceilings, *, median_us: float | None = None, experts_hit=None,
               pairs=None, gathered: bool = False) -> list[dict]:
    """A row per phase (PHASE_COLUMNS): FLOOR_PHASES always, route/other and any other
    phase the kernels have, and `gaps` (median_us - kernel sum) when median_us is known.
    kernels_df: profile_kernels' table, or a run's kernels (filtered by point_id)."""
    m = _measured(kernels_df, point_id)
    floors = phase_floors(problem, topk_ids, experts_hit=experts_hit, pairs=pairs,
                          ceilings=ceilings, gathered=gathered)
    phases = list(FLOOR_PHASES) + [p for p in m if p not in FLOOR_PHASES]
    rows = []
    for ph in phases:
        f = floors.get(ph, dict(floor_us=0.0, bytes=0.0, flops=0.0, bound=""))  # route, other
        rows.append(dict(point_id=str(point_id), phase=ph,
                         measured_us=m.get(ph, (0.0, 0.0))[0],
                         calls=m.get(ph, (0.0, 0.0))[1], floor_us=f["floor_us"],
                         floor_bytes=f["bytes"], floor_flops=f["flops"], bound=f["bound"]))
    if median_us is not None and np.isfinite(median_us):
        ksum = sum(v[0] for v in m.values())
        rows.append(dict(point_id=str(point_id), phase=GAPS if m else UNPROFILED,
                         measured_us=float(median_us) - ksum, calls=0.0, floor_us=0.0,
                         floor_bytes=0.0, floor_flops=0.0, bound=""))
    return rows


# --- the ledger ------------------------------------------------------------------------------

def _given(row, col):
    v = row.get(col)
    return None if v is None or pd.isna(v) else float(v)


def problem_of(row) -> Problem:
    return make_problem(row["model"], int(row["tokens"]), row["dtype"], int(row["tp"]),
                        int(row["ep"]), int(row["ep_rank"]))


def _ceilings(device, cache: dict):
    if device not in cache:
        try:
            cache[device] = ceilings_for(str(device))
        except UsageError:  # a CPU run: no ceilings, no vendor spec
            cache[device] = None
    return cache[device]


ok_rows = row_schema.ok_rows  # the one rule for which rows are points


@frames(results_df=("model", "tp", "ep", "ep_rank", "dtype",
        "tokens", "median_us", "point_id"), kernels_df=("point_id", "phase", "calls", "total_us"),
        phases_df=PHASE_COLUMNS)
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


@frames(ledger_df=("point_id", "phase", "measured_us", "floor_us", "over_us"))
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

@frames(results_df=("model", "tp", "ep", "ep_rank", "dtype", "backend", "mode", "tokens",
        "routing", "median_us"))
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
    moe_lab.analysis.findings); each caller gets its own copy of the frames."""
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
    from ..core.errors import UsageError
    from ..storage.store import Run, open_run
    if runs is None:
        raise UsageError("runs: give a list of runs (Runs, run ids or folders), not None")
    if isinstance(runs, (str, os.PathLike, Run)):
        runs = [runs]
    try:
        runs = list(runs)
    except TypeError:
        raise UsageError(f"runs {runs!r}: give a list of runs (Runs, run ids or folders)") from None
    return [r if hasattr(r, "results") and hasattr(r, "path") else open_run(r) for r in runs]


def run_paths(runs) -> tuple:
    """The runs' folders, resolved: the part of a memo key that names runs."""
    return tuple(os.path.realpath(r.path) for r in runs)


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
