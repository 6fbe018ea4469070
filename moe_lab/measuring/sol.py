"""Speed of light per point: what one big dense GEMM gets on this device for the same work.

The roofline says what the ceilings allow; a well-tuned dense GEMM says what a real
kernel gets for the same rows and FLOPs without the MoE's routing: no gather, no
scatter, no expert boundaries. For a point whose rank computes M local (token, slot)
pairs, `dense_gemm_us` times the two GEMMs of SwiGLU experts as if every pair went to
one expert:

    gemm1  [M, H] x [H, 2I]    x @ w1.t(), w1 [2I, H] (the experts' layout)
    gemm2  [M, I] x [I, H]     h @ w2.t(), w2 [H, I]

FLOPs = 2*M*H*2I + 2*M*I*H = 6*M*H*I, the same as moe_lab.cost.roofline.cost for those pairs.
The weights read are one expert's, not experts_hit of them, so at small M this is faster
than any MoE can be (fewer bytes); at large M it is the compute rate a MoE GEMM can hope
for. Data: random normal in the problem's dtype (bf16 by default; never zeros, power and
clocks depend on the bits), from a generator seeded per call. Timed with the project's
one timer entry, moe_lab.measuring.timing.time_fn (graph replay with an L2 flush on CUDA/ROCm, as
the sweeps time MoE points; perf_counter on a CPU).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Callable

from ..core.errors import UsageError
from ..core.problems import Problem
from .timing import time_fn

MODES = ("graph", "eager", "compile")


@dataclass(frozen=True)
class DenseGemm:
    """One point's dense-GEMM speed of light.

    M               rows of both GEMMs (= local (token, slot) pairs)
    flops           2*M*H*2I + 2*M*I*H
    dense_gemm_us   median time of the two GEMMs together (0.0 for M = 0)
    dense_tflops    flops / dense_gemm_us, decimal TFLOP/s (NaN for M = 0)
    """
    M: int
    flops: float
    dense_gemm_us: float
    dense_tflops: float
    dtype: str
    mode: str
    device: str
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def dense_gemm_flops(problem: Problem, M: int) -> float:
    """FLOPs of the two dense GEMMs with M rows: 2*M*H*2I + 2*M*I*H."""
    H, I = problem.hidden, problem.inter
    return 2.0 * M * H * (2 * I) + 2.0 * M * I * H


def _rows(pairs) -> int:
    """pairs as a whole, non-negative row count; TypeError/ValueError otherwise."""
    if isinstance(pairs, bool) or not isinstance(pairs, numbers.Real):
        raise TypeError(f"pairs must be a number of (token, slot) pairs, "
                        f"got {type(pairs).__name__} {pairs!r}")
    x = float(pairs)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"pairs must be finite and >= 0, got {pairs!r}")
    if not x.is_integer():
        raise ValueError(f"pairs must be a whole number of rows, got {pairs!r} (an expected "
                         "count under EP? pass the drawn routing's pairs, or round it)")
    return int(x)


def _two_gemms(x, w1, h, w2):
    import torch
    return torch.matmul(x, w1.t()), torch.matmul(h, w2.t())


def dense_gemm_us(problem: Problem, pairs, device, timer: Callable = time_fn,
                  mode: str = "graph", seed: int = 0) -> DenseGemm:
    """Time the two dense GEMMs with M = pairs rows on `device` (module doc) and return
    a DenseGemm. problem: a moe_lab.problems.Problem (its H, I and dtype); pairs: the
    point's local (token, slot) pairs, a whole number >= 0 (0: nothing is allocated or
    launched, 0 us); device: "cuda", "cuda:1", "cpu", ...; timer: called as
    timer(mode, fn, [args], device) and must return a moe_lab.measuring.timing.Timing (default
    time_fn); mode: "graph" (default), "eager" or "compile" (on a CPU all are time_cpu).
    Raises TypeError/ValueError on bad input, UsageError for a GPU device without one."""
    import torch

    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a moe_lab.problems.Problem, got "
                        f"{type(problem).__name__}")
    M = _rows(pairs)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"bad device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device {device!r}: torch {torch.__version__} sees no CUDA/ROCm "
                         "device")
    flops = dense_gemm_flops(problem, M)
    common = dict(M=M, dtype=problem.dtype, mode=mode, device=str(device))
    if M == 0:
        return DenseGemm(flops=0.0, dense_gemm_us=0.0, dense_tflops=math.nan,
                         note="no local pairs: nothing computed, nothing launched", **common)

    H, I, dt = problem.hidden, problem.inter, problem.torch_dtype
    gen = torch.Generator(device=dev).manual_seed(seed)

    def randn(*shape, scale=1.0):
        t = torch.randn(*shape, generator=gen, device=dev, dtype=dt)
        return t if scale == 1.0 else t.mul_(scale)

    args = (randn(M, H), randn(2 * I, H, scale=H ** -0.5),
            randn(M, I), randn(H, I, scale=I ** -0.5))
    t = timer(mode, _two_gemms, [args], str(device))
    us = float(t.median_us)
    if not us > 0:
        raise RuntimeError(f"the timer returned {us!r} us for {M} x {H} x {2 * I} and "
                           f"{M} x {I} x {H} GEMMs")
    return DenseGemm(flops=flops, dense_gemm_us=us, dense_tflops=flops / us / 1e6,
                     note=f"[{M}, {H}] x [{H}, {2 * I}] then [{M}, {I}] x [{I}, {H}], "
                          f"{'bf16 (no fp8 dense GEMM yet)' if problem.is_fp8 else problem.dtype}"
                          f"; {getattr(t, 'note', '')}".rstrip("; "),
                     **common)
