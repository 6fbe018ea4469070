"""FP8 quantisation schemes of MoE experts, as the seed models ship them.

    fp8-tensor    one scale per weight matrix (per expert, per w1 / w2); activations one
                  dynamic scale per call (per tensor)
    fp8-channel   one scale per output channel of each weight matrix; activations one
                  dynamic scale per token (Llama-4-Scout/Maverick-FP8-dynamic)
    fp8-block128  one scale per 128x128 block of each weight matrix; activations one
                  dynamic scale per token per 128 columns (DeepSeek-V3/R1, Qwen3-FP8)

A scale is what the fp8 value is multiplied by to get the real one (dequantised =
q.float() * scale), fp32, computed from the tensor itself: amax / fp8 max of the format.
Scale shapes (w: [E, N, K], x: [M, K]):

    scheme         weight scale                  activation scale
    fp8-tensor     [E]                           [1]
    fp8-channel    [E, N]                        [M, 1]
    fp8-block128   [E, ceil(N/128), ceil(K/128)] [M, ceil(K/128)]

Formats: `e4m3fn` (OCP, max 448: NVIDIA, MI350/MI355) and `e4m3fnuz` (max 240: MI300X /
MI325X). The same bits mean half the value in e4m3fnuz (exponent bias 8, not 7), and
0x80 is -0 in e4m3fn but NaN in e4m3fnuz. A checkpoint is e4m3fn; on an fnuz device its
bits are reinterpreted and every scale doubled (`fn_to_fnuz`), which keeps each
dequantised value exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .problems import FP8_SCHEMES as SCHEMES

BLOCK = 128
FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
_MIN_AMAX = 1e-12  # an all-zero tensor gets a tiny scale, never a division by zero


def is_fp8(dtype: str) -> bool:
    return dtype in SCHEMES


def fp8_max(fmt: str) -> float:
    return float(torch.finfo(FORMATS[fmt]).max)


def _check(scheme: str, fmt: str):
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, not {scheme!r}")
    if fmt not in FORMATS:
        raise ValueError(f"fp8 format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def _cast(v: torch.Tensor, fmt: str) -> torch.Tensor:
    m = fp8_max(fmt)
    return v.clamp(-m, m).to(FORMATS[fmt])


def _pad_to_blocks(t: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Zero-pad the given trailing dims of t up to multiples of BLOCK."""
    pad = []
    for d in range(t.dim() - 1, -1, -1):
        pad += [0, (-t.shape[d]) % BLOCK if d in dims else 0]
    return torch.nn.functional.pad(t, pad) if any(pad) else t


def _expand_blocks(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """[..., ceil(rows/B), ceil(cols/B)] -> [..., rows, cols]."""
    s = scale.repeat_interleave(BLOCK, dim=-2)[..., :rows, :]
    return s.repeat_interleave(BLOCK, dim=-1)[..., :cols]


def _expand_groups(scale: torch.Tensor, cols: int) -> torch.Tensor:
    """[M, ceil(cols/B)] -> [M, cols]."""
    return scale.repeat_interleave(BLOCK, dim=-1)[..., :cols]


# --- weights (once, outside the timed call) ------------------------------------------

def weight_scale(w: torch.Tensor, scheme: str, fmt: str) -> torch.Tensor:
    """fp32 scales of w [E, N, K] (module doc for the shapes)."""
    _check(scheme, fmt)
    a = w.float().abs()
    if scheme == "fp8-tensor":
        amax = a.amax(dim=(-2, -1))
    elif scheme == "fp8-channel":
        amax = a.amax(dim=-1)
    else:
        E, N, K = w.shape
        p = _pad_to_blocks(a, (1, 2))
        amax = p.view(E, p.shape[1] // BLOCK, BLOCK, p.shape[2] // BLOCK, BLOCK).amax(dim=(2, 4))
    return (amax.clamp_min(_MIN_AMAX) / fp8_max(fmt)).to(torch.float32)


def expand_weight_scale(scale: torch.Tensor, scheme: str, shape) -> torch.Tensor:
    """A weight scale broadcast to the weight's [E, N, K]."""
    E, N, K = shape
    if scheme == "fp8-tensor":
        return scale.view(E, 1, 1).expand(E, N, K)
    if scheme == "fp8-channel":
        return scale.view(E, N, 1).expand(E, N, K)
    return _expand_blocks(scale, N, K)


def quantize_weight(w: torch.Tensor, scheme: str, fmt: str = "e4m3fn"):
    """w [E, N, K] -> (q fp8 [E, N, K], scale fp32)."""
    s = weight_scale(w, scheme, fmt)
    q = _cast(w.float() / expand_weight_scale(s, scheme, w.shape), fmt)
    return q, s


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor, scheme: str,
                      dtype=torch.float32) -> torch.Tensor:
    return (q.to(torch.float32) * expand_weight_scale(scale, scheme, q.shape)).to(dtype)


# --- activations (dynamic: inside the timed call) ---------------------------------------

def act_scale(x: torch.Tensor, scheme: str, fmt: str) -> torch.Tensor:
    """fp32 scales of x [M, K]: [1], [M, 1] or [M, ceil(K/128)]."""
    _check(scheme, fmt)
    a = x.abs()
    if scheme == "fp8-tensor":
        amax = a.amax().float().reshape(1)
    elif scheme == "fp8-channel":
        amax = a.amax(dim=-1, keepdim=True).float()
    else:
        M, K = x.shape
        p = _pad_to_blocks(a, (1,))
        amax = p.view(M, p.shape[1] // BLOCK, BLOCK).amax(dim=-1).float()
    return amax.clamp_min(_MIN_AMAX) / fp8_max(fmt)


def expand_act_scale(scale: torch.Tensor, scheme: str, shape) -> torch.Tensor:
    M, K = shape
    if scheme == "fp8-block128":
        return _expand_groups(scale, K)
    return scale.reshape(-1, 1).expand(M, K)


def quantize_act(x: torch.Tensor, scheme: str, fmt: str = "e4m3fn"):
    """x [M, K] -> (q fp8 [M, K], scale fp32), the scale from x itself (dynamic)."""
    with torch.profiler.record_function("moe_lab.quant"):
        s = act_scale(x, scheme, fmt)
        q = _cast(x.float() / expand_act_scale(s, scheme, x.shape), fmt)
    return q, s


def dequantize_act(q: torch.Tensor, scale: torch.Tensor, scheme: str,
                   dtype=torch.float32) -> torch.Tensor:
    return (q.to(torch.float32) * expand_act_scale(scale, scheme, q.shape)).to(dtype)


def fake_quant_act(x: torch.Tensor, scheme: str, fmt: str, dtype=None) -> torch.Tensor:
    """x quantised and dequantised again (what an fp8 kernel sees of x), in x's dtype."""
    q, s = quantize_act(x, scheme, fmt)
    return dequantize_act(q, s, scheme, dtype or x.dtype)


# --- formats ---------------------------------------------------------------------------

def fn_to_fnuz(q: torch.Tensor, scale: torch.Tensor):
    """e4m3fn values and their scales -> e4m3fnuz values and scales with the same
    dequantised numbers: the bits are kept (each reads as half the value in fnuz), the
    scales doubled; 0x80 (-0 in fn, NaN in fnuz) becomes 0."""
    bits = q.view(torch.int8).clone()
    bits[bits == -128] = 0
    return bits.view(torch.float8_e4m3fnuz), scale * 2.0


def quantum(value: torch.Tensor, fmt: str) -> torch.Tensor:
    """The spacing of fp8 values at |value| (one unit in the last place, in fp8 units):
    3 mantissa bits, so 2^(floor(log2|v|) - 3), and the subnormal spacing below."""
    min_normal_exp = -6 if fmt == "e4m3fn" else -7
    e = torch.floor(torch.log2(value.abs().clamp_min(2.0 ** min_normal_exp)))
    return torch.pow(2.0, e - 3)


@dataclass
class QuantWeights:
    """Expert weights quantised once: w1 [E, 2I, H] and w2 [E, H, I] in fp8, their scales."""
    scheme: str
    fmt: str
    w1: torch.Tensor
    w1_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor

    def dequantized(self, dtype=torch.float32):
        return (dequantize_weight(self.w1, self.w1_scale, self.scheme, dtype),
                dequantize_weight(self.w2, self.w2_scale, self.scheme, dtype))


def quantize_weights(w1: torch.Tensor, w2: torch.Tensor, scheme: str, fmt: str) -> QuantWeights:
    """Quantise as a checkpoint is (e4m3fn), then convert for an e4m3fnuz device."""
    q1, s1 = quantize_weight(w1, scheme, "e4m3fn")
    q2, s2 = quantize_weight(w2, scheme, "e4m3fn")
    if fmt == "e4m3fnuz":
        (q1, s1), (q2, s2) = fn_to_fnuz(q1, s1), fn_to_fnuz(q2, s2)
    elif fmt != "e4m3fn":
        raise ValueError(f"fp8 format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return QuantWeights(scheme, fmt, q1, s1, q2, s2)


def scale_bytes(scheme: str, n: int, k: int) -> int:
    """fp32 scale bytes of one [n, k] weight matrix."""
    if scheme == "fp8-tensor":
        return 4
    if scheme == "fp8-channel":
        return 4 * n
    return 4 * math.ceil(n / BLOCK) * math.ceil(k / BLOCK)
