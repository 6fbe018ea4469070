"""Roofline for one MoE layer call on one GPU: what it must compute, what it must move,
and the fastest time the device's ceilings allow.

Pure functions; no GPU, no files except `ceilings_for`, which reads a measured ceilings
JSON (written by `moe-lab ceilings`, see moe_lab/ceilings.py) when one exists.

Cost model (SwiGLU experts, per rank):
  pairs    (token, slot) pairs routed to this rank's experts: T*k without EP; under EP
           exact from `ids` when given, else the expectation T*k/ep (uniform routing).
  flops    2 * pairs * (2*I*H + I*H)    gemm1 [pairs, H] x [H, 2I] + gemm2 [pairs, I] x [I, H]
  weight   experts_hit * 3*H*I * bytes per weight (+ scales when quantised), where
           experts_hit counts only LOCAL experts that at least one token picked: exact from
           `ids`, else E_local * (1 - (1 - k/E)**T) (each token picks k distinct experts
           uniformly; TraceLens writes the same as E*(1 - ((E-k)/E)**T)).
  act      x in (T*H) and out (T*H), in the activation dtype.
  inter    intermediates a backend writes to memory and reads back (see INTERMEDIATES);
           none for backend=None: the floor of an ideal fused kernel.
  floor_us max(flops / peak FLOP/s, bytes / bandwidth), the classic roofline.

Units: TFLOP/s and TB/s are decimal (1e12); times are microseconds.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import UsageError
from .problems import Problem, make_problem

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CEILINGS_DIR = REPO_ROOT / "data" / "ceilings"


# --- vendor peaks -------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceSpec:
    """Vendor DENSE peaks (no 2:4 sparsity). TFLOP/s and TB/s are decimal."""
    name: str
    vendor: str
    bf16_tflops: float
    fp8_tflops: float
    hbm_tb_s: float
    l2_mb: float  # last-level on-chip cache: L2 on NVIDIA, Infinity Cache (MALL) on AMD
    source: str


DEVICE_SPECS: dict[str, DeviceSpec] = {
    # AMD Instinct MI300X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi300x.html):
    # 304 CUs x 2100 MHz x 2048 bf16 FLOP/clk/CU = 1307.4 TFLOP/s dense; fp8 x2 = 2614.9.
    # 5.3 TB/s HBM3; 256 MB Infinity Cache (MALL) in front of HBM; L2 is 4 MB per XCD x 8
    # (torch reports L2_cache_size=4MB: one XCD's, ROCm/legacy-rocm-build#4203).
    "mi300x": DeviceSpec("AMD Instinct MI300X", "amd", 1307.4, 2614.9, 5.3, 256.0,
                         "AMD Instinct MI300X data sheet: 1307.4 TFLOP/s bf16 dense, "
                         "2614.9 fp8 dense, 5.3 TB/s HBM3, 256 MB Infinity Cache"),
    # AMD Instinct MI325X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi325x.html):
    # same CDNA3 compute as MI300X, 256 GB HBM3E at 6.0 TB/s, 256 MB Infinity Cache.
    "mi325x": DeviceSpec("AMD Instinct MI325X", "amd", 1307.4, 2614.9, 6.0, 256.0,
                         "AMD Instinct MI325X data sheet: 1307.4 TFLOP/s bf16 dense, "
                         "2614.9 fp8 dense, 6.0 TB/s HBM3E, 256 MB Infinity Cache"),
    # AMD Instinct MI355X data sheet (amd.com/en/products/accelerators/instinct/mi350/mi355x.html):
    # AMD quotes 2.5 PF bf16 and 5.0 PF fp8 dense; 256 CUs x 2400 MHz x 4096 (bf16) or
    # 8192 (fp8, ISSCC 2026) FLOP/clk/CU = 2516.6 / 5033.2 TFLOP/s. 8.0 TB/s HBM3E,
    # 256 MB Infinity Cache (CDNA 4 white paper).
    "mi355x": DeviceSpec("AMD Instinct MI355X", "amd", 2516.6, 5033.2, 8.0, 256.0,
                         "AMD Instinct MI355X data sheet: 2.5 PF bf16 dense (2516.6), "
                         "5.0 PF fp8 dense (5033.2), 8.0 TB/s HBM3E"),
    # NVIDIA H100 SXM5 data sheet (nvidia.com/en-us/data-center/h100/): 1979 bf16 / 3958 fp8
    # TFLOP/s are WITH sparsity; dense is half (989.4 / 1978.9, 132 SMs x 1830 MHz boost).
    # 3.35 TB/s HBM3, 50 MB L2.
    "h100-sxm": DeviceSpec("NVIDIA H100 SXM5 80GB", "nvidia", 989.4, 1978.9, 3.35, 50.0,
                           "NVIDIA H100 data sheet (SXM5): 1979/3958 TFLOP/s bf16/fp8 with "
                           "sparsity, halved for dense; 3.35 TB/s; 50 MB L2"),
    # NVIDIA H200 data sheet (nvidia.com/en-us/data-center/h200/): same GH100 compute as
    # H100 SXM (989.4 / 1978.9 dense), 141 GB HBM3E at 4.8 TB/s. NVIDIA quotes 50 MB L2
    # for GH100 products, but torch.cuda.get_device_properties reports L2_cache_size =
    # 62914560 (60 MiB) on the lent H200s (torch 2.11, CUDA 13): the spec keeps the
    # vendor's 50; measured ceilings record what the device reports.
    "h200-sxm": DeviceSpec("NVIDIA H200 SXM 141GB", "nvidia", 989.4, 1978.9, 4.8, 50.0,
                           "NVIDIA H200 data sheet (SXM): 1979/3958 TFLOP/s bf16/fp8 with "
                           "sparsity, halved for dense; 4.8 TB/s HBM3E; 50 MB L2 "
                           "(torch reports 60 MB)"),
    # NVIDIA HGX B200 (nvidia.com/en-us/data-center/hgx/): 4.5 PF bf16 / 9 PF fp8 with
    # sparsity -> 2250 / 4500 dense; 8 TB/s HBM3E (HGX table: 7.7 TB/s for the 180 GB
    # part; DGX B200: 8 TB/s). L2 is not on the data sheet: 126 MB is what CUDA reports
    # (two dies); treat it as unverified.
    "b200": DeviceSpec("NVIDIA B200", "nvidia", 2250.0, 4500.0, 8.0, 126.0,
                       "NVIDIA HGX/DGX B200 data sheet: 4.5/9 PF bf16/fp8 with sparsity, "
                       "halved for dense; 8 TB/s HBM3E (HGX B200 table: 7.7)"),
}

# torch device names -> DEVICE_SPECS keys. Order matters: first match wins.
_NAME_PATTERNS: list[tuple[str, str]] = [
    (r"MI355X", "mi355x"),
    (r"MI325X", "mi325x"),
    (r"MI300X", "mi300x"),
    (r"H200(?!\s*NVL)", "h200-sxm"),       # H200 NVL (PCIe, 600 W) has lower peaks
    (r"H100 80GB HBM3|H100 SXM", "h100-sxm"),
    (r"B200", "b200"),
]


def device_slug(device_name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200', the file name of its measured ceilings."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def spec_for(device_name: str) -> DeviceSpec | None:
    """The vendor spec for a torch device name (or a DEVICE_SPECS key); None if unknown."""
    if device_name in DEVICE_SPECS:
        return DEVICE_SPECS[device_name]
    for pattern, key in _NAME_PATTERNS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return DEVICE_SPECS[key]
    return None


# --- cost -----------------------------------------------------------------------------

_ELEM_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# Per backend, the intermediates it writes to memory and reads back (2 passes each):
# (what, rows, width, element bytes). rows: "local" = (token, slot) pairs routed to this
# rank's experts, "all" = T*k (buffers sized [T, k, ...]); width in units of H or I;
# element bytes: "act" = the activation dtype. Elementwise temporaries (silu output,
# casts) and the sort/align metadata are not counted: this is a lower bound of traffic.
INTERMEDIATES: dict[str, list[tuple[str, str, str, object]]] = {
    # per-expert loop: x[tok] gather, h = xs @ w1^T, a = silu(h_g) * h_u, y = a @ w2^T,
    # y in fp32 scaled by the router weight, index_add into an fp32 [T, H] accumulator.
    "torch": [("gathered x", "local", "H", "act"), ("gemm1 out h", "local", "2I", "act"),
              ("act out a", "local", "I", "act"), ("gemm2 out y", "local", "H", "act"),
              ("y fp32 scaled", "local", "H", 4), ("fp32 accumulator", "tokens", "H", 4)],
    # torch._grouped_mm: everything sized for all T*k sorted rows.
    "torch-grouped": [("gathered x", "all", "H", "act"), ("gemm1 out h", "all", "2I", "act"),
                      ("act out a", "all", "I", "act"), ("gemm2 out y fp32", "all", "H", 4),
                      ("fp32 accumulator", "tokens", "H", 4)],
    # aiter's Triton MoE: c1 [T, k, 2I], activation [T*k, I], c2 [T, k, H], then moe_sum.
    "aiter-triton": [("c1", "all", "2I", "act"), ("a", "all", "I", "act"),
                     ("c2", "all", "H", "act")],
    # vLLM fused_experts: the same three caches as aiter-triton.
    "vllm": [("cache1", "all", "2I", "act"), ("cache2", "all", "I", "act"),
             ("cache3", "all", "H", "act")],
    # aiter CK 2-stage: stage 1 writes the activated [T*k, I], stage 2 reads it.
    "aiter": [("stage1 out a", "all", "I", "act")],
}


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
    return int(torch.unique(local).numel()), int(local.numel())


def cost(problem: Problem, ids: torch.Tensor | None = None, backend: str | None = None,
         routing_expected: bool = False, weight_dtype: str | None = None,
         scales: str = "per-tensor", experts_hit: float | None = None) -> Cost:
    """FLOPs and bytes of one MoE call on this rank (module docstring has the model).

    ids: global topk ids int32[T, k] for exact counts; None (or routing_expected=True)
    uses the uniform-routing expectations. experts_hit overrides the count of local
    experts read (e.g. a measured value). weight_dtype defaults to the problem's dtype;
    "fp8" adds `scales`. backend adds that backend's intermediates (INTERMEDIATES)."""
    T, H, I, k = problem.tokens, problem.hidden, problem.inter, problem.topk
    E, E_local, ep = problem.experts, problem.local_experts, problem.ep
    if ids is not None and not routing_expected:
        if tuple(ids.shape) != (T, k):
            raise ValueError(f"ids must be [T={T}, k={k}], got {tuple(ids.shape)}")
        hit, pairs = local_counts(problem, ids)
        exact = True
    else:
        hit = E_local * (1.0 - (1.0 - k / E) ** T)
        pairs = T * k / ep
        exact = False
    if experts_hit is not None:
        hit = float(experts_hit)
    act_b = _ELEM_BYTES[problem.dtype]
    wdt = weight_dtype or problem.dtype
    flops = 2.0 * pairs * (2 * I * H + I * H)
    weight_bytes = hit * _weight_bytes_per_expert(H, I, wdt, scales)
    act_bytes = 2.0 * T * H * act_b
    inter_bytes, detail = 0.0, {}
    if backend is not None:
        if backend not in INTERMEDIATES:
            raise ValueError(f"no intermediates known for backend {backend!r}; "
                             f"known: {', '.join(INTERMEDIATES)}")
        rows_of = {"local": pairs, "all": float(T * k), "tokens": float(T)}
        width_of = {"H": H, "I": I, "2I": 2 * I}
        for what, rows, width, eb in INTERMEDIATES[backend]:
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

@dataclass(frozen=True)
class Ceilings:
    """The ceilings a roof is drawn with. source: "measured" (data/ceilings/<slug>.json)
    or "vendor" (DEVICE_SPECS). tflops_fp8 is None when neither knows it."""
    device: str
    tflops_bf16: float
    tflops_fp8: float | None
    tb_s: float
    source: str
    note: str = ""


def _peaks(ceil) -> tuple[float, float | None, float]:
    if isinstance(ceil, DeviceSpec):
        return ceil.bf16_tflops, ceil.fp8_tflops, ceil.hbm_tb_s
    if isinstance(ceil, Ceilings):
        return ceil.tflops_bf16, ceil.tflops_fp8, ceil.tb_s
    raise TypeError(f"expected a DeviceSpec or Ceilings, got {type(ceil).__name__}")


def peak_tflops(ceil: DeviceSpec | Ceilings, dtype: str = "bf16") -> float:
    """The matrix peak for dtype: bf16/fp16 share one; fp8 its own; fp32 has none quoted."""
    bf16, fp8, _ = _peaks(ceil)
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


def load_ceilings_file(path: str | Path) -> dict:
    from .ceilings import validate_ceilings
    obj = json.loads(Path(path).read_text())
    validate_ceilings(obj)
    return obj


def ceilings_for(device_name: str, data_dir: str | Path | None = None) -> Ceilings:
    """Measured ceilings from `<data_dir>/<device-slug>.json` when present, else the vendor
    peaks of DEVICE_SPECS; `source` says which. data_dir defaults to the repo's
    data/ceilings. A measured file lacking fp8 takes the vendor's fp8 and says so in note."""
    data_dir = Path(data_dir) if data_dir is not None else DEFAULT_CEILINGS_DIR
    spec = spec_for(device_name)
    path = data_dir / f"{device_slug(device_name)}.json"
    if path.is_file():
        obj = load_ceilings_file(path)
        fp8 = obj["gemm_fp8"].get("tflops")
        note = f"measured {obj['manifest']['date']} ({path.name})"
        if fp8 is None and spec is not None:
            fp8 = spec.fp8_tflops
            note += "; fp8 from vendor spec"
        return Ceilings(obj["device"]["name"], obj["gemm_bf16"]["tflops"], fp8,
                        obj["memory"]["tb_per_s"], "measured", note)
    if spec is None:
        raise UsageError(f"no measured ceilings ({path}) and no vendor spec for "
                         f"{device_name!r}; known specs: {', '.join(DEVICE_SPECS)}")
    return Ceilings(spec.name, spec.bf16_tflops, spec.fp8_tflops, spec.hbm_tb_s, "vendor",
                    spec.source)


# --- results tables -----------------------------------------------------------------

def add_roofline_columns(df, device_name: str, data_dir: str | Path | None = None):
    """A copy of a results DataFrame (model, tp, ep, ep_rank, dtype, backend, tokens,
    median_us, optional experts_hit) with the roofline columns filled:

      experts_hit   local experts read (the row's exact count if given, else expected)
      flops, bytes  the ideal fused cost (no intermediates): the same roof for every backend
      roof_us       floor_us of that cost on this device's ceilings
      pct_of_roof   100 * roof_us / median_us (100 = at the roof)
      bound         "memory" | "compute"
      backend_bytes, backend_roof_us   the same with the backend's own intermediates
                    (NaN for a backend without an INTERMEDIATES entry)
      ceiling_source "measured" | "vendor"
    Rows whose dtype has no quoted peak (fp32) get NaN.
    """
    import pandas as pd

    ceil = ceilings_for(device_name, data_dir)
    out = df.copy()
    has_hit = "experts_hit" in out.columns
    cols = {c: [] for c in ("experts_hit", "flops", "bytes", "roof_us", "bound",
                            "backend_bytes", "backend_roof_us")}
    cache: dict = {}
    for row in out.itertuples(index=False):
        given = getattr(row, "experts_hit", None) if has_hit else None
        given = None if given is None or pd.isna(given) else float(given)
        key = (row.model, int(row.tp), int(row.ep), int(row.ep_rank), row.dtype,
               int(row.tokens), row.backend, given)
        if key not in cache:
            p = make_problem(row.model, row.tokens, row.dtype, row.tp, row.ep, row.ep_rank)
            c = cost(p, experts_hit=given)
            try:
                roof, bnd = floor_us(c, ceil, row.dtype), bound(c, ceil, row.dtype)
            except ValueError:
                roof, bnd = math.nan, None
            bb = broof = math.nan
            if row.backend in INTERMEDIATES:
                cb = cost(p, backend=row.backend, experts_hit=given)
                bb = cb.bytes
                try:
                    broof = floor_us(cb, ceil, row.dtype)
                except ValueError:
                    pass
            cache[key] = (c.experts_hit, c.flops, c.bytes, roof, bnd, bb, broof)
        for name, v in zip(cols, cache[key]):
            cols[name].append(v)
    for name, vals in cols.items():
        out[name] = vals
    median = pd.to_numeric(out["median_us"], errors="coerce")
    out["pct_of_roof"] = 100.0 * out["roof_us"] / median
    out["ceiling_source"] = ceil.source
    return out
