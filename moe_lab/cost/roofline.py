"""Roofline for one MoE layer call on one GPU: what it must compute, what it must move,
and the fastest time the device's ceilings allow.

Pure functions; no GPU. Ceilings come from moe_lab.devices.

Cost model (SwiGLU experts, per rank):
  pairs    (token, slot) pairs routed to this rank's experts: T*k without EP; under EP
           exact from `ids` when given, else the expectation T*k/ep (uniform routing).
  flops    2 * pairs * (2*I*H + I*H)    gemm1 [pairs, H] x [H, 2I] + gemm2 [pairs, I] x [I, H]
  weight   experts_hit * 3*H*I * bytes per weight (+ scales when quantised), where
           experts_hit counts only LOCAL experts that at least one token picked: exact from
           `ids`, else E_local * (1 - (1 - k/E)**T) (each token picks k distinct experts
           uniformly; TraceLens writes the same as E*(1 - ((E-k)/E)**T)).
  act      x in (T*H) and out (T*H), in the activation dtype.
  inter    intermediates a backend writes to memory and reads back (its class declares
           them: `Backend.intermediates`); none for backend=None: the ideal fused kernel.
  floor_us max(flops / peak FLOP/s, bytes / bandwidth), the classic roofline.

Bandwidth: measured ceilings give the READ bandwidth when the file has one (a reduction:
weights and activations are read once, and the outputs written are tiny next to the
weights), else the copy bandwidth (read + written); vendor specs give their peak for
both. `roof_basis` names the one used; `add_roofline_columns` records it per row. Bytes
a backend writes and reads back (intermediates) are counted at that same rate.

Units: TFLOP/s and TB/s are decimal (1e12); times are microseconds.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from ..core.devices import Ceilings, DeviceSpec, ceilings_for
from ..core.problems import Problem, ProblemError, make_problem, sharding_name  # noqa: F401 (re-exported)


# --- cost -----------------------------------------------------------------------------

_ELEM_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# the weight scales of each fp8 scheme (moe_lab.quant), in _weight_bytes_per_expert's terms
FP8_SCALES = {"fp8-tensor": "per-tensor", "fp8-channel": "per-channel",
              "fp8-block128": "block:128"}

@dataclass
class Cost:
    """What one MoE call on one rank must compute and move. Bytes are totals."""
    flops: float
    bytes: float
    weight_bytes: float
    act_bytes: float
    inter_bytes: float
    experts_hit: float  # local experts read (exact or expected)
    pairs: float = 0.0  # (token, slot) pairs computed on this rank
    exact: bool = False  # counts from ids (True) or expectations (False)
    backend: str | None = None
    inter_detail: dict = field(default_factory=dict)


def expected_experts_hit(E: int, k: int, T: int) -> float:
    """Expected distinct experts picked by T tokens choosing k distinct of E uniformly:
    E * (1 - (1 - k/E)**T) (= TraceLens's E * (1 - ((E - k)/E)**T))."""
    return E * (1.0 - (1.0 - k / E) ** T)


def _weight_bytes_per_expert(H: int, I: int, weight_dtype: str, scales: str) -> float:
    """3*H*I weights (w1 [2I, H] + w2 [H, I]) plus fp32 scales when quantised to fp8:
    per-tensor (one per matrix), per-channel (one per output row), block:N (N x N tiles)."""
    n = 3 * H * I * _ELEM_BYTES[weight_dtype]
    if weight_dtype != "fp8":
        return n
    if scales == "per-tensor":
        return n + 2 * 4
    if scales == "per-channel":
        return n + (2 * I + H) * 4
    m = re.fullmatch(r"block:(\d+)", scales)
    if not m:
        raise ValueError(f"scales must be per-tensor, per-channel or block:N, not {scales!r}")
    b = int(m.group(1))
    tiles = math.ceil(2 * I / b) * math.ceil(H / b) + math.ceil(H / b) * math.ceil(I / b)
    return n + tiles * 4


def local_counts(problem: Problem, ids: torch.Tensor) -> tuple[int, int]:
    """(local experts hit, local (token, slot) pairs) from global ids int32[T, k]."""
    flat = ids.reshape(-1).long()
    emap = problem.expert_map()
    local = emap.long()[flat] if emap is not None else flat
    local = local[local >= 0]
    if not local.numel():
        return 0, 0
    # bincount, not unique: unique sorts, and the predicted floors call this per rank and seed
    return int(torch.count_nonzero(torch.bincount(local))), int(local.numel())


def intermediates_of(backend: str) -> list | None:
    """What a backend declares it writes and reads back (None: not declared)."""
    from ..backends import backend_class
    return backend_class(backend).intermediates


def cost(problem: Problem, ids: torch.Tensor | None = None, backend: str | None = None,
         routing_expected: bool = False, weight_dtype: str | None = None,
         scales: str = "per-tensor", experts_hit: float | None = None,
         pairs: float | None = None) -> Cost:
    """FLOPs and bytes of one MoE call on this rank (module docstring has the model).

    ids: global topk ids int32[T, k] for exact counts; None (or routing_expected=True)
    uses the uniform-routing expectations. experts_hit and pairs override the counts of
    local experts read and local (token, slot) pairs computed (e.g. a row's exact counts).
    weight_dtype defaults to the problem's dtype; "fp8" adds `scales`. An fp8 scheme
    (fp8-tensor/-channel/-block128) is fp8 weights with its own scales (FP8_SCALES) and
    x/out in bf16; fp8 activations inside the layer are the backend's. backend adds that
    backend's declared intermediates (ValueError if it declares none)."""
    T, H, I, k = problem.tokens, problem.hidden, problem.inter, problem.topk
    E, E_local, ep = problem.experts, problem.local_experts, problem.ep
    if ids is not None and not routing_expected:
        if tuple(ids.shape) != (T, k):
            raise ValueError(f"ids must be [T={T}, k={k}], got {tuple(ids.shape)}")
        hit, local_pairs = local_counts(problem, ids)
        pairs, exact = (local_pairs if pairs is None else pairs), True
    else:  # a rank holds E_local of the E experts: its share of the expected distinct hits
        hit = E_local / E * expected_experts_hit(E, k, T)
        pairs, exact = (T * k / ep if pairs is None else pairs), False
    if experts_hit is not None:
        hit = float(experts_hit)
    pairs = float(pairs)
    act_b = _ELEM_BYTES[problem.act_dtype]
    wdt = weight_dtype or problem.dtype
    if wdt in FP8_SCALES:
        wdt, scales = "fp8", FP8_SCALES[wdt]
    flops = 2.0 * pairs * (2 * I * H + I * H)
    weight_bytes = hit * _weight_bytes_per_expert(H, I, wdt, scales)
    act_bytes = 2.0 * T * H * act_b
    inter_bytes, detail = 0.0, {}
    if backend is not None:
        inter = intermediates_of(backend)
        if inter is None:
            raise ValueError(f"backend {backend!r} declares no intermediates")
        rows_of = {"local": pairs, "all": float(T * k), "tokens": float(T)}
        width_of = {"H": H, "I": I, "2I": 2 * I}
        for what, rows, width, eb in inter:
            b = 2.0 * rows_of[rows] * width_of[width] * (act_b if eb == "act" else eb)
            detail[what] = b
            inter_bytes += b
    return Cost(flops=flops, bytes=weight_bytes + act_bytes + inter_bytes,
                weight_bytes=weight_bytes, act_bytes=act_bytes, inter_bytes=inter_bytes,
                experts_hit=hit, pairs=pairs, exact=exact, backend=backend,
                inter_detail=detail)


def intensity(c: Cost) -> float:
    """Arithmetic intensity, FLOP per byte moved."""
    return c.flops / c.bytes


# --- ceilings and floors -----------------------------------------------------------------

def _peaks(ceil) -> tuple[float, float | None, float]:
    """(bf16 TFLOP/s, fp8 TFLOP/s or None, the roof's TB/s)."""
    if isinstance(ceil, DeviceSpec):
        return ceil.bf16_tflops, ceil.fp8_tflops, ceil.hbm_tb_s
    if isinstance(ceil, Ceilings):
        return ceil.tflops_bf16, ceil.tflops_fp8, ceil.roof_tb_s
    raise TypeError(f"expected a DeviceSpec or Ceilings, got {type(ceil).__name__}")


def roof_bandwidth(ceil: DeviceSpec | Ceilings) -> tuple[str, float]:
    """(basis, TB/s) of the bandwidth a roof uses: ("read", r) or ("copy", c) for
    measured ceilings (Ceilings.bandwidth_basis), ("peak", hbm) for vendor peaks."""
    if isinstance(ceil, Ceilings):
        return ceil.bandwidth_basis, ceil.roof_tb_s
    return "peak", _peaks(ceil)[2]


def roof_basis(ceil: DeviceSpec | Ceilings, dtype: str = "bf16") -> str:
    """What a roof is drawn with, one line: "read 4.9 TB/s, gemm 793 TFLOP/s (measured)",
    "copy 4.28 TB/s, gemm 793 TFLOP/s (measured)" or "peak 4.8 TB/s, gemm 989.4 TFLOP/s
    (vendor)". TB/s to 3 significant digits, TFLOP/s to 4; a dtype other than bf16/fp16
    is named ("gemm fp8 1339 TFLOP/s"); one without a peak says so ("no fp32 gemm peak")."""
    if isinstance(ceil, Ceilings):
        bw, source = ceil.bandwidth_text, ceil.source
    else:
        bw, source = f"peak {_peaks(ceil)[2]:.3g} TB/s", "vendor"
    try:
        peak = peak_tflops(ceil, dtype)
        name = "fp8" if dtype in FP8_SCALES else dtype
        gemm = f"gemm {'' if dtype in ('bf16', 'fp16') else name + ' '}{peak:.4g} TFLOP/s"
    except ValueError:
        gemm = f"no {dtype} gemm peak"
    return f"{bw}, {gemm} ({source})"


def peak_tflops(ceil: DeviceSpec | Ceilings, dtype: str = "bf16") -> float:
    """The matrix peak for dtype: bf16/fp16 share one; fp8 (and the fp8 schemes) its own;
    fp32 has none quoted."""
    bf16, fp8, _ = _peaks(ceil)
    if dtype in FP8_SCALES:
        dtype = "fp8"
    if dtype in ("bf16", "fp16"):
        return bf16
    if dtype == "fp8" and fp8 is not None:
        return fp8
    raise ValueError(f"no matrix peak for dtype {dtype!r} (have bf16/fp16"
                     f"{', fp8' if fp8 is not None else ''})")


def compute_us(c: Cost, ceil, dtype: str = "bf16") -> float:
    return c.flops / (peak_tflops(ceil, dtype) * 1e12) * 1e6


def memory_us(c: Cost, ceil) -> float:
    return c.bytes / (_peaks(ceil)[2] * 1e12) * 1e6


def floor_us(c: Cost, ceil: DeviceSpec | Ceilings, dtype: str = "bf16") -> float:
    """max(flops / peak FLOP/s, bytes / bandwidth) in microseconds."""
    return max(compute_us(c, ceil, dtype), memory_us(c, ceil))


def bound(c: Cost, ceil: DeviceSpec | Ceilings, dtype: str = "bf16") -> str:
    """"memory" or "compute": which roof sets the floor."""
    return "memory" if memory_us(c, ceil) >= compute_us(c, ceil, dtype) else "compute"


def ridge_intensity(ceil: DeviceSpec | Ceilings, dtype: str = "bf16") -> float:
    """FLOP/byte where the two roofs meet."""
    return peak_tflops(ceil, dtype) / _peaks(ceil)[2]


# --- results tables -----------------------------------------------------------------

def add_roofline_columns(df, device_name: str, data_dir=None):
    """A copy of a results DataFrame (model, tp, ep, ep_rank, dtype, backend, tokens,
    median_us, optional experts_hit and pairs) with the roofline columns filled:

      experts_hit   local experts read (the row's exact count if given, else expected)
      pairs         local (token, slot) pairs computed (the row's exact count if given,
                    else expected: under EP at 1 token that expectation is k/ep, while
                    the drawn routing has whole pairs)
      flops, bytes  the ideal fused cost (no intermediates): the same roof for every backend
      roof_us       floor_us of that cost on this device's ceilings
      pct_of_roof   100 * roof_us / median_us (100 = at the roof)
      bound         "memory" | "compute"
      backend_bytes, backend_roof_us   the same with the backend's own intermediates
                    (NaN for a backend that declares no intermediates)
      ceiling_source "measured" | "vendor"
      roof_basis    the bandwidth and matrix peak the roof used (roof_basis()), e.g.
                    "read 4.9 TB/s, gemm 793 TFLOP/s (measured)"
    Rows whose dtype has no quoted peak (fp32) get NaN.
    """
    import pandas as pd

    ceil = ceilings_for(device_name, data_dir)
    out = df.copy()
    def given(row, col):
        v = getattr(row, col, None)
        return None if v is None or pd.isna(v) else float(v)
    cols = {c: [] for c in ("experts_hit", "pairs", "flops", "bytes", "roof_us", "bound",
                            "backend_bytes", "backend_roof_us")}
    cache: dict = {}
    for row in out.itertuples(index=False):
        hit, pairs = given(row, "experts_hit"), given(row, "pairs")
        # no tp/ep: an imported row whose model is the shape one rank holds (custom:...)
        tp, ep = (int(given(row, c) or 1) for c in ("tp", "ep"))
        key = (row.model, tp, ep, int(row.ep_rank), row.dtype,
               int(row.tokens), row.backend, hit, pairs)
        if key not in cache:
            try:
                p = make_problem(row.model, row.tokens, row.dtype, tp, ep, row.ep_rank)
            except ProblemError:  # a scheme the cost model has no bytes for (int8-tensor)
                p = None
            cache[key] = ((hit, pairs, math.nan, math.nan, math.nan, None, math.nan, math.nan)
                          if p is None else _roof_entry(p, row, ceil, hit, pairs))
        for name, v in zip(cols, cache[key]):
            cols[name].append(v)
    for name, vals in cols.items():
        out[name] = vals
    median = pd.to_numeric(out["median_us"], errors="coerce")
    out["pct_of_roof"] = 100.0 * out["roof_us"] / median
    out["ceiling_source"] = ceil.source
    bases = {d: roof_basis(ceil, d) for d in set(out["dtype"])}
    out["roof_basis"] = [bases[d] for d in out["dtype"]]
    return out


def _roof_entry(p, row, ceil, hit, pairs) -> tuple:
    """add_roofline_columns' values of one point: experts_hit, pairs, flops, bytes, roof_us,
    bound, backend_bytes, backend_roof_us."""
    c = cost(p, experts_hit=hit, pairs=pairs)
    try:
        roof, bnd = floor_us(c, ceil, row.dtype), bound(c, ceil, row.dtype)
    except ValueError:
        roof, bnd = math.nan, None
    bb = broof = math.nan
    if _declares_intermediates(row.backend):
        cb = cost(p, backend=row.backend, experts_hit=hit, pairs=pairs)
        bb = cb.bytes
        try:
            broof = floor_us(cb, ceil, row.dtype)
        except ValueError:
            pass
    return c.experts_hit, c.pairs, c.flops, c.bytes, roof, bnd, bb, broof


def _declares_intermediates(backend: str) -> bool:
    from ..backends import names
    return backend in names() and intermediates_of(backend) is not None


# --- predicted floors ------------------------------------------------------------------

SEED_SHARDINGS = ((8, 1), (8, 8))  # (tp, ep): TP8 and TP8+EP8


def _mean_cost(costs: list[Cost]) -> Cost:
    """The field-wise mean of costs (the counts and bytes; flags from the first)."""
    n = len(costs)
    return Cost(**{**costs[0].__dict__, **{
        k: sum(getattr(c, k) for c in costs) / n
        for k in ("flops", "bytes", "weight_bytes", "act_bytes", "inter_bytes",
                  "experts_hit", "pairs")}})


def predicted_floors(models=None, shardings=SEED_SHARDINGS, tokens=None,
                     devices=("mi300x", "h200-sxm"), dtype: str = "bf16",
                     straggler_seeds: int = 0):
    """Ideal fused floors (expected uniform routing) for every model x (tp, ep) x tokens
    x device spec: columns model, sharding, tp, ep, tokens, device, experts_hit, flops,
    bytes, intensity, floor_us, bound, tokens_per_s (per rank). models default to the
    seed models, tokens to 1..8192 (powers of two); devices are DEVICE_SPECS keys or specs.

    In expectation TP and EP cost the same per rank (EP reads 1/ep of the experts at ep
    times the width). What differs is the slowest EP rank: with straggler_seeds > 0, EP
    shardings get an extra sharding '<TPxEPy> slowest rank': for each seed, the rank with
    the most work (the MAX of the ranks' floors) under the model's real router on random
    logits; its cost is averaged over the seeds."""
    import pandas as pd

    from ..core.devices import DEVICE_SPECS
    from ..core.problems import SEED_MODELS, default_token_grid
    from ..core.routing import make_routing

    models = SEED_MODELS if models is None else models
    tokens = tokens or default_token_grid(8192)
    specs = [(d, DEVICE_SPECS[d] if isinstance(d, str) else d) for d in devices]
    rows = []

    def add(m, sh, tp, ep, t, cost_on):
        for d, spec in specs:
            c = cost_on(spec)
            f = floor_us(c, spec, dtype)
            rows.append(dict(model=m, sharding=sh, tp=tp, ep=ep, tokens=t,
                             device=d if isinstance(d, str) else spec.name,
                             experts_hit=c.experts_hit, flops=c.flops, bytes=c.bytes,
                             intensity=intensity(c), floor_us=f, bound=bound(c, spec, dtype),
                             tokens_per_s=t / f * 1e6))

    for m in models:
        for tp, ep in shardings:
            for t in tokens:
                c = cost(make_problem(m, t, dtype, tp, ep))
                add(m, sharding_name(tp, ep), tp, ep, t, lambda spec, c=c: c)
                if ep > 1 and straggler_seeds > 0:
                    ranks = [make_problem(m, t, dtype, tp, ep, r) for r in range(ep)]
                    per_seed = []  # per seed: the cost of every rank
                    for seed in range(straggler_seeds):
                        _, ids, _ = make_routing(ranks[0].model, t, "uniform", seed)
                        per_seed.append([cost(p, ids) for p in ranks])

                    def slowest(spec, per_seed=per_seed):
                        return _mean_cost([max(cs, key=lambda c: floor_us(c, spec, dtype))
                                           for cs in per_seed])
                    add(m, sharding_name(tp, ep) + " slowest rank", tp, ep, t, slowest)
    return pd.DataFrame(rows)
