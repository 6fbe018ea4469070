"""The ledger's floors: what every phase of a layer call must move and compute, and its
fastest time on a device (the recoverable microseconds, measured - floor, of stored rows
are moe_lab.analysis.ledger's). Pure functions; no GPU; nothing read from a run.

    phase_floors(problem, topk_ids, *, experts_hit, pairs, ceilings) -> {phase: floor}
    phase_rows(point_id, problem, topk_ids, kernels, ceilings, median_us=) -> rows of
              a run's phases.parquet (what the sweep stores per point)

The ledger of stored rows (per point and phase: measured, floor, over), the best point and
the ledger of runs: moe_lab.analysis.ledger, from these floors.

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

import math

import numpy as np
import pandas as pd

from ..core.devices import Ceilings, DeviceSpec
from ..core.problems import Problem, make_problem
from ..core.quant import BLOCK, scale_bytes
from .roofline import _ELEM_BYTES, cost, peak_tflops, roof_bandwidth

GLUE = ("quant", "act", "align", "combine")
FLOOR_PHASES = ("quant", "act", "align", "gemm1", "gemm2", "combine")
GATHER_PHASES = ("align", "combine")  # the floors a row-gathering backend's rows change
GAPS, UNPROFILED = "gaps", "unprofiled"
PHASE_COLUMNS = ("point_id", "phase", "measured_us", "calls", "floor_us", "floor_bytes",
                 "floor_flops", "bound")


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


# --- a stored row's problem ---------------------------------------------------------------

def problem_of(row) -> Problem:
    return make_problem(row["model"], int(row["tokens"]), row["dtype"], int(row["tp"]),
                        int(row["ep"]), int(row["ep_rank"]))
