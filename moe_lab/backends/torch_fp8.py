"""FP8 experts in plain PyTorch: the loop every FP8 reference and PyTorch FP8 backend shares.

`fp8_moe` is the FP8 layer of an fp8 scheme (moe_lab.quant), per expert, in two passes:
  1. x (times the router weight first, Llama-4) quantised once for all T tokens with the
     scheme's dynamic activation scales, then gemm1 per local expert on its rows;
  2. a = silu(gate) * up of every local pair, quantised with the scheme's activation
     scales over all local pairs (per tensor: one amax over them), then gemm2 per expert,
     scaled by the router weight (unless it went on the input) and summed per token.
The GEMMs are callables, so the same loop is
  * the reference (`compute_dtype` fp64 on CPU / fp32 on GPU): the dequantised fp8
    operands multiplied exactly: the check then measures kernel error only;
  * `torch-fp8`: per-expert `torch._scaled_mm` (per-tensor, row-wise) or
    `torch.nn.functional.scaled_mm` (1x128 x 128x128 blocks) where the build has them;
  * `torch-fp8-dequant`: weights dequantised once to bf16, activations quantised and
    dequantised per call, bf16 matmuls: the FP8 layer's numbers without an FP8 GEMM
    (the fallback that runs anywhere; it moves bf16 weights, so it is no FP8 timing).
The loop reads expert counts on the host (one sync): not capturable in a CUDA graph.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from .. import quant
from . import Backend, Weights, register
from .torch_ref import expert_rows

_NOT_CAPTURABLE = ("the per-expert loop reads expert token counts on the host "
                   "(bincount().tolist()), a sync that CUDA graph capture forbids")


def fp8_moe(x, topk_weights, topk_ids, expert_map, weight_on_input: bool, scheme: str,
            fmt: str, gemm1, gemm2, acc=torch.float32, act_dtype=None):
    """out[T, H] (acc dtype) of the FP8 layer. gemm1(e, q, scale) -> h [n, 2I] and
    gemm2(e, q, scale) -> y [n, H] take fp8 rows and their activation scales.
    act_dtype: the dtype of the intermediate (gemm1's output, silu, the product) before
    its quantisation: bf16 as the layer holds it; None keeps gemm1's output dtype."""
    T, H = x.shape
    k = topk_ids.shape[1]
    w_flat = topk_weights.reshape(-1).float()
    xin = x
    if weight_on_input:  # Llama-4 (top-1): the router weight scales x before quantisation
        xin = (x.to(acc) * topk_weights.reshape(T, k)[:, 0:1].to(acc)).to(x.dtype)
    xq, xs = quant.quantize_act(xin, scheme, fmt)
    groups, a_rows = [], []
    for e, idx, tok in expert_rows(topk_ids, expert_map):
        xs_rows = xs if scheme == "fp8-tensor" else xs[tok]
        with record_function("moe_lab.gemm1"):  # all gemm1s run before any gemm2 (profiling)
            h = gemm1(e, xq[tok], xs_rows)
        inter = h.shape[1] // 2
        if act_dtype is not None:  # the layer's bf16 intermediate: h, silu and the product
            h = h.to(act_dtype)
        a = F.silu(h[:, :inter]) * h[:, inter:]
        groups.append((e, idx, tok))
        a_rows.append(a)
    out = torch.zeros(T, H, dtype=acc, device=x.device)
    if not groups:
        return out
    a_all = torch.cat(a_rows)
    aq, a_s = quant.quantize_act(a_all, scheme, fmt)
    row = 0
    for e, idx, tok in groups:
        n = idx.numel()
        s = a_s if scheme == "fp8-tensor" else a_s[row:row + n]
        with record_function("moe_lab.gemm2"):
            y = gemm2(e, aq[row:row + n], s).to(acc)
        row += n
        if not weight_on_input:
            y = y * w_flat[idx, None].to(acc)
        out.index_add_(0, tok, y)
    return out


def dequant_gemms(qw: quant.QuantWeights, dtype):
    """gemm1/gemm2 on operands dequantised to `dtype` (the reference, or bf16 fallback)."""
    w1, w2 = qw.dequantized(dtype)

    def make(w):
        def gemm(e, q, s):
            return quant.dequantize_act(q, s, qw.scheme, dtype) @ w[e].t()
        return gemm
    return make(w1), make(w2)


def fp8_reference(x, qw: quant.QuantWeights, topk_weights, topk_ids, expert_map,
                  weight_on_input: bool, compute_dtype=torch.float64):
    """The FP8 layer on the dequantised operands: both GEMMs exact (compute_dtype), the
    intermediate between them in x's dtype as the layer keeps it (gemm1's output, silu,
    the product, rounded to bf16 as vLLM's intermediate cache and every kernel here hold
    it), then quantised: so the check measures the kernels' error, not which neighbouring
    fp8 value an unrounded intermediate would have picked."""
    g1, g2 = dequant_gemms(qw, compute_dtype)
    return fp8_moe(x, topk_weights, topk_ids, expert_map, weight_on_input, qw.scheme,
                   qw.fmt, g1, g2, acc=compute_dtype, act_dtype=x.dtype)


# --- scaled matmuls ----------------------------------------------------------------------

# Layouts of the block scales tried for F.scaled_mm (BlockWise1x128 x BlockWise128x128):
# a's [n, K/128] row- or column-major, b's [K/128, N/128] as the transposed view of our
# [N/128, K/128] or made contiguous. Which one the build takes is found by the probe.
BLOCK_LAYOUTS = (("rows", "view"), ("cols", "view"), ("cols", "contiguous"),
                 ("rows", "contiguous"))


def scaled_mm_gemm(w: torch.Tensor, w_scale: torch.Tensor, scheme: str, out_dtype=torch.bfloat16,
                   layout=BLOCK_LAYOUTS[0]):
    """gemm(e, q, s) = (q * s) @ (w[e] * w_scale[e])^T by the build's scaled matmul:
    per tensor torch._scaled_mm(scalar, scalar); per channel (row-wise) _scaled_mm([n, 1],
    [1, N]); blocks F.scaled_mm(BlockWise1x128 [n, K/128], BlockWise128x128 [K/128, N/128])
    with the scales in `layout` (BLOCK_LAYOUTS)."""
    if scheme == "fp8-block128":
        ST = F.ScalingType
        a_cols, b_contig = layout[0] == "cols", layout[1] == "contiguous"

        def gemm(e, q, s):
            sa = s.t().contiguous().t() if a_cols else s
            sb = w_scale[e].t().contiguous() if b_contig else w_scale[e].t()
            return F.scaled_mm(q, w[e].t(), sa, ST.BlockWise1x128, sb, ST.BlockWise128x128,
                               output_dtype=out_dtype)
        return gemm
    if scheme == "fp8-channel":
        def gemm(e, q, s):
            return torch._scaled_mm(q, w[e].t(), s.reshape(-1, 1).contiguous(),
                                    w_scale[e].reshape(1, -1), out_dtype=out_dtype)
        return gemm

    def gemm(e, q, s):
        return torch._scaled_mm(q, w[e].t(), s.reshape(()), w_scale[e].reshape(()),
                                out_dtype=out_dtype)
    return gemm


@functools.lru_cache(maxsize=None)
def scaled_mm_probe(scheme: str, device: str, fmt: str):
    """(ok, why, layout): whether this torch build's scaled matmul computes `scheme` on
    `device`, by one small call checked against the dequantised product (blocks: the
    first scale layout that runs and gives the right numbers)."""
    if scheme == "fp8-block128" and not hasattr(F, "scaled_mm"):
        return False, f"torch {torch.__version__} has no torch.nn.functional.scaled_mm (blockwise)", None
    if not hasattr(torch, "_scaled_mm"):
        return False, f"torch {torch.__version__} has no torch._scaled_mm", None
    g = torch.Generator().manual_seed(0)
    w = torch.randn(1, 256, 384, generator=g).to(device)
    x = torch.randn(32, 384, generator=g).to(device)
    qw, sw = quant.quantize_weight(w, scheme, fmt)
    qx, sx = quant.quantize_act(x, scheme, fmt)
    want = quant.dequantize_act(qx, sx, scheme) @ quant.dequantize_weight(qw, sw, scheme)[0].t()
    why = ""
    for layout in (BLOCK_LAYOUTS if scheme == "fp8-block128" else BLOCK_LAYOUTS[:1]):
        try:
            got = scaled_mm_gemm(qw, sw, scheme, layout=layout)(0, qx, sx).float()
        except Exception as exc:
            msg = str(exc).strip().splitlines()
            why = f"{type(exc).__name__}: {msg[0][:160] if msg else ''}"
            continue
        err = ((got - want).abs().max() / want.abs().max()).item()
        if err < 1e-2:
            return True, "", layout
        why = f"wrong numbers (max_rel_err {err:.2g}) with scales laid out {layout}"
    return False, f"torch {torch.__version__} scaled matmul cannot do {scheme} on {device}: {why}", None


def scaled_mm_supports(scheme: str, device: str, fmt: str) -> tuple[bool, str]:
    ok, why, _ = scaled_mm_probe(scheme, device, fmt)
    return ok, why


def _fmt(weights: Weights) -> quant.QuantWeights:
    if weights.quant is None:
        raise ValueError("an fp8 backend was given unquantised weights")
    return weights.quant


@register
class TorchFp8Backend(Backend):
    name = "torch-fp8"
    description = ("per-expert loop of torch._scaled_mm / F.scaled_mm FP8 matmuls "
                   "(fp8 schemes where the build has the scaling)")
    label, color = "torch-fp8 (scaled_mm loop)", "tab:olive"
    quant_schemes, fp8_only = quant.SCHEMES, True
    # xq [T, H] fp8, h [local, 2I] bf16, a [local, I] bf16 and fp8, y [local, H] bf16
    intermediates = [("x fp8", "tokens", "H", 1), ("gemm1 out h", "local", "2I", "act"),
                     ("act out a", "local", "I", "act"), ("a fp8", "local", "I", 1),
                     ("gemm2 out y", "local", "H", "act"), ("fp32 accumulator", "tokens", "H", 4)]
    not_capturable = _NOT_CAPTURABLE

    def supports(self, problem, device):
        if not quant.is_fp8(problem.dtype):
            return False, "torch-fp8 runs the fp8 schemes (bf16: torch, torch-grouped)"
        from ..devices import fp8_format_for
        from ..environment import device_name
        return scaled_mm_supports(problem.dtype, str(device), fp8_format_for(device_name(device)))

    def prepare(self, problem, weights: Weights):
        qw = _fmt(weights)
        layout = scaled_mm_probe(qw.scheme, str(qw.w1.device), qw.fmt)[2] or BLOCK_LAYOUTS[0]
        g1 = scaled_mm_gemm(qw.w1, qw.w1_scale, qw.scheme, layout=layout)
        g2 = scaled_mm_gemm(qw.w2, qw.w2_scale, qw.scheme, layout=layout)
        emap, woi = weights.expert_map, problem.weight_on_input

        def fn(x, topk_weights, topk_ids):
            return fp8_moe(x, topk_weights, topk_ids, emap, woi, qw.scheme, qw.fmt, g1, g2,
                           act_dtype=x.dtype).to(x.dtype)
        return fn


@register
class TorchFp8DequantBackend(Backend):
    name = "torch-fp8-dequant"
    description = ("fp8 schemes without an fp8 GEMM: weights dequantised once to bf16, "
                   "activations quantised and dequantised per call, bf16 matmuls per expert")
    label, color = "torch-fp8-dequant (bf16 matmuls)", "tab:brown"
    quant_schemes, fp8_only = quant.SCHEMES, True
    intermediates = [("x fp8", "tokens", "H", 1), ("x dequantised", "tokens", "H", "act"),
                     ("gemm1 out h", "local", "2I", "act"), ("act out a", "local", "I", "act"),
                     ("a fp8", "local", "I", 1), ("a dequantised", "local", "I", "act"),
                     ("gemm2 out y", "local", "H", "act"), ("fp32 accumulator", "tokens", "H", 4)]
    not_capturable = _NOT_CAPTURABLE

    def supports(self, problem, device):
        if not quant.is_fp8(problem.dtype):
            return False, "torch-fp8-dequant runs the fp8 schemes only"
        return True, ""

    def prepare(self, problem, weights: Weights):
        qw = _fmt(weights)
        g1, g2 = dequant_gemms(qw, torch.bfloat16)
        emap, woi = weights.expert_map, problem.weight_on_input

        def fn(x, topk_weights, topk_ids):
            return fp8_moe(x, topk_weights, topk_ids, emap, woi, qw.scheme, qw.fmt, g1, g2,
                           act_dtype=x.dtype).to(x.dtype)
        return fn
