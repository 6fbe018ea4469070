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

torch-fp8 on the GPU (what torch 2.11 / cuBLASLt take, and how the call meets it):
  * rows: cuBLASLt's FP8 matmul wants every dimension a multiple of 16; the expert's row
    count is one (on the H200, 2026-12-01, an expert with 3 rows failed with
    CUBLAS_STATUS_NOT_SUPPORTED, "m 5120 n 3 k 1024"), and torch checks only K and N
    (`mat1.sizes()[1] % 16`, `mat2.sizes()[0] % 16 && mat2.sizes()[1] % 16`, in
    _scaled_mm_out_cuda and _scaled_mm_cuda_v2_out). So every expert's rows are padded
    with zero rows to a multiple of ALIGN = 16 inside the timed call (`rows_align`, its
    kernels in `moe_lab.align` ranges, so the kernel table shows the padding's cost) and
    the outputs sliced back: the same numbers (rows are independent). Every A and scale
    pointer is then 16-byte aligned too (gemm2's per-expert slices of a start on a
    multiple of 16 rows).
  * blocks (F.scaled_mm -> torch._scaled_mm_v2, recipe (BlockWise1x128, BlockWise128x128),
    aten/src/ATen/native/cuda/ScaledBlas.cpp, _scaled_block1x128_block128x128; sm90 only
    (_check_deepseek_support), cuBLASLt >= 12.9, a and b float8_e4m3fn, fp32 scales:
        scale_a: size (M, ceil(K/128)), stride(0) == 1 and stride(1) == M: column-major
        scale_b: size (round_up(ceil(K/128), 4), ceil(N/128)), stride(0) == 1 and
                 stride(1) == round_up(ceil(K/128), 4) (b = w[e].t() being K-major):
                 the K-blocks of each 128-column block contiguous, padded to 4 (16 bytes)
    (a dimension of size 1 may have stride 1). Its scale_a message prints scale_b's
    strides: the H200's "scale_a must have strides (1, 32); got [2, 1]" was the last of the
    four layouts tried then (a row-major scale_a); the column-major ones failed scale_b's
    shape (the probe's 3 K-blocks, unpadded). torch's meta function
    (_check_scaled_mm_sizes_v2, 2.13) checks the same with K // 128 and N // 128, strides
    included. So scale_b is the weight's [E, N/128, K/128] scales
    zero-padded to [E, N/128, L4] once in prepare (`block_scale_b`; [e].t() has strides
    (1, L4)), and scale_a a column-major [m, K/128] gathered per expert. H or I not a
    multiple of 128 is refused for every backend at the point gate (a layout no checkpoint
    has: moe_lab.measuring.points.checkpoint_refusal). The v1 torch._scaled_mm infers
    blockwise scaling from shapes with scale_b exactly [K/128, N/128] strides (1, K/128)
    (get_joint_scaling: no L4 padding), so this backend calls F.scaled_mm.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from ..core import quant
from . import Backend, Weights, register
from .torch_ref import expert_rows

_NOT_CAPTURABLE = ("the per-expert loop reads expert token counts on the host "
                   "(bincount().tolist()), a sync that CUDA graph capture forbids")


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _padding_sources(xq, xs, scheme: str):
    """The rows every expert's padded gemm1 input is gathered from: xq's bits with one zero
    row appended (row T, the source of every padding row; 0x00 is +0 in e4m3fn and
    e4m3fnuz), and xs with a scale 1 appended: per channel [T+1, 1]; blocks transposed,
    [K/128, T+1] contiguous, so a gather along its dim 1 is the column-major [m, K/128]
    that F.scaled_mm's BlockWise1x128 takes; per tensor xs itself."""
    bits = F.pad(xq.view(torch.uint8), (0, 0, 0, 1))
    if scheme == "fp8-tensor":
        return bits, xs
    s = F.pad(xs.reshape(xq.shape[0], -1), (0, 0, 0, 1), value=1.0)
    return bits, (s if scheme == "fp8-channel" else s.t().contiguous())


def _gather_padded(bits, s, tok, m: int, scheme: str, fp8_dtype):
    """One expert's gemm1 input with m >= len(tok) rows: its tokens' fp8 rows, then zero
    rows (row T of the sources); scales likewise (blocks: column-major, strides (1, m))."""
    T = bits.shape[0] - 1
    idx = F.pad(tok, (0, m - tok.numel()), value=T) if m > tok.numel() else tok
    q = bits.index_select(0, idx).view(fp8_dtype)
    if scheme == "fp8-tensor":
        return q, s
    if scheme == "fp8-channel":
        return q, s.index_select(0, idx)
    return q, s.index_select(1, idx).t()


def fp8_moe(x, topk_weights, topk_ids, expert_map, weight_on_input: bool, scheme: str,
            fmt: str, gemm1, gemm2, acc=torch.float32, act_dtype=None, rows_align: int = 1):
    """out[T, H] (acc dtype) of the FP8 layer. gemm1(e, q, scale) -> h [n, 2I] and
    gemm2(e, q, scale) -> y [n, H] take fp8 rows and their activation scales.
    act_dtype: the dtype of the intermediate (gemm1's output, silu, the product) before
    its quantisation: bf16 as the layer holds it; None keeps gemm1's output dtype.
    rows_align > 1: every expert's rows padded with zero rows up to a multiple of it
    (cuBLASLt's FP8 GEMMs want every dimension a multiple of 16, the expert's row count
    included), inside `moe_lab.align` ranges: gemm1's input gathered with its padding
    (per expert: one index pad, the row and scale gathers), gemm1's zero output rows
    carried through silu and the quantisation of a (a zero row changes no amax: per
    tensor, per row and per 1x128 group the other rows' scales are the same), so gemm2's
    per-expert slices start on a multiple of rows_align rows (16-byte aligned A and scale
    pointers) and need no copy; blocks also take a column-major copy of gemm2's scales per
    expert (F.scaled_mm's BlockWise1x128 layout). Outputs are sliced back to the
    expert's rows: the same numbers as rows_align=1, each row being independent."""
    T, H = x.shape
    k = topk_ids.shape[1]
    w_flat = topk_weights.reshape(-1).float()
    xin = x
    if weight_on_input:  # Llama-4 (top-1): the router weight scales x before quantisation
        xin = (x.to(acc) * topk_weights.reshape(T, k)[:, 0:1].to(acc)).to(x.dtype)
    xq, xs = quant.quantize_act(xin, scheme, fmt)
    pad = rows_align > 1
    if pad:
        with record_function("moe_lab.align"):
            bits, xs_src = _padding_sources(xq, xs, scheme)
    groups, a_rows = [], []
    for e, idx, tok in expert_rows(topk_ids, expert_map):
        m = _round_up(tok.numel(), rows_align)
        if pad:
            with record_function("moe_lab.align"):
                q, xs_rows = _gather_padded(bits, xs_src, tok, m, scheme, xq.dtype)
        else:
            q, xs_rows = xq[tok], (xs if scheme == "fp8-tensor" else xs[tok])
        with record_function("moe_lab.gemm1"):  # all gemm1s run before any gemm2 (profiling)
            h = gemm1(e, q, xs_rows)
        inter = h.shape[1] // 2
        if act_dtype is not None:  # the layer's bf16 intermediate: h, silu and the product
            h = h.to(act_dtype)
        a = F.silu(h[:, :inter]) * h[:, inter:]
        groups.append((e, idx, tok, m))
        a_rows.append(a)
    out = torch.zeros(T, H, dtype=acc, device=x.device)
    if not groups:
        return out
    a_all = torch.cat(a_rows)
    aq, a_s = quant.quantize_act(a_all, scheme, fmt)
    row = 0
    for e, idx, tok, m in groups:
        n = idx.numel()
        s = a_s if scheme == "fp8-tensor" else a_s[row:row + m]
        if pad and scheme == "fp8-block128":
            with record_function("moe_lab.align"):
                s = s.t().contiguous().t()
        with record_function("moe_lab.gemm2"):
            y = gemm2(e, aq[row:row + m], s)[:n].to(acc)
        row += m
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

ALIGN = 16  # rows per expert padded to this: cuBLASLt FP8 wants every GEMM dim a multiple of 16


def block_scale_b(w_scale: torch.Tensor) -> torch.Tensor:
    """Weight block scales [E, N/128, K/128] -> [E, N/128, L4] contiguous, L4 =
    round_up(K/128, 4), zero-padded: w[e]'s BlockWise128x128 scale_b is then its [e].t(),
    shape [L4, N/128], strides (1, L4), as torch's sm90 check wants (module doc)."""
    kb = w_scale.shape[-1]
    return F.pad(w_scale.float(), (0, _round_up(kb, 4) - kb)).contiguous()


def scaled_mm_gemm(w: torch.Tensor, w_scale: torch.Tensor, scheme: str, out_dtype=torch.bfloat16,
                   mm=None):
    """gemm(e, q, s) = (q * s) @ (w[e] * w_scale[e])^T by the build's scaled matmul:
    per tensor torch._scaled_mm(scalar, scalar); per channel (row-wise) _scaled_mm([n, 1],
    [1, N]); blocks F.scaled_mm(BlockWise1x128 [n, K/128] column-major, BlockWise128x128
    [L4, N/128] strides (1, L4)). `mm` stands in for the op (tests on a CPU): called as
    torch._scaled_mm, or for blocks as F.scaled_mm."""
    if scheme == "fp8-block128":
        ST = F.ScalingType
        mm = mm or F.scaled_mm
        sb = block_scale_b(w_scale)  # weights are static: once, in prepare

        def gemm(e, q, s):
            sa = s if s.stride(0) == 1 else s.t().contiguous().t()  # column-major [n, K/128]
            return mm(q, w[e].t(), sa, ST.BlockWise1x128, sb[e].t(), ST.BlockWise128x128,
                      output_dtype=out_dtype)
        return gemm
    mm = mm or torch._scaled_mm
    if scheme == "fp8-channel":
        def gemm(e, q, s):
            return mm(q, w[e].t(), s.reshape(-1, 1).contiguous(), w_scale[e].reshape(1, -1),
                      out_dtype=out_dtype)
        return gemm

    # Per tensor, each expert's scale is its own allocation: w_scale[e] is a view 4*e bytes
    # into [E], and cuBLASLt's per-tensor FP8 matmul on the H200 (torch 2.11, CUDA 13)
    # answered CUBLAS_STATUS_NOT_SUPPORTED at every point with such views
    # (data/checks/h200-recheck-fp8-tensor-20261201.txt), while torch._scaled_mm with fresh
    # scalar scales ran (data/ceilings). Per channel, a [1, N] row's offset is 4*e*N bytes,
    # 16-byte aligned, and those points pass. Once, in prepare: the weights are static.
    scales_b = [w_scale[e].reshape(()).clone() for e in range(w.shape[0])]

    def gemm(e, q, s):
        return mm(q, w[e].t(), s.reshape(()), scales_b[e], out_dtype=out_dtype)
    return gemm


def scaled_mm_fn(problem, qw: quant.QuantWeights, expert_map, mm=None, rows_align: int = ALIGN):
    """fn(x, topk_weights, topk_ids) -> out [T, H] of torch-fp8: the FP8 loop (fp8_moe)
    on the scaled matmuls, every expert's rows padded to rows_align. `mm`: a stand-in for
    the op (scaled_mm_gemm)."""
    g1 = scaled_mm_gemm(qw.w1, qw.w1_scale, qw.scheme, mm=mm)
    g2 = scaled_mm_gemm(qw.w2, qw.w2_scale, qw.scheme, mm=mm)
    woi = problem.weight_on_input

    def fn(x, topk_weights, topk_ids):
        return fp8_moe(x, topk_weights, topk_ids, expert_map, woi, qw.scheme, qw.fmt, g1, g2,
                       act_dtype=x.dtype, rows_align=rows_align).to(x.dtype)
    return fn


def _why(exc: Exception) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0][:160] if msg else ''}"


BLOCK_LAYOUT = ("scale_a [n, K/128] strides (1, n); "
                "scale_b [L4 = round_up(K/128, 4), N/128] strides (1, L4)")


@functools.lru_cache(maxsize=None)
def scaled_mm_probe(scheme: str, device: str, fmt: str):
    """(ok, why, layout): whether this torch build's scaled matmul computes `scheme` on
    `device`, by one small call the way the backend makes it (5 rows padded to ALIGN, K =
    384: 3 blocks of 128, so L4 = 4 pads scale_b) checked against the dequantised product.
    layout: how the scales were laid out (blocks; "" otherwise)."""
    if scheme == "fp8-block128" and not hasattr(F, "scaled_mm"):
        return False, (f"torch {torch.__version__} has no torch.nn.functional.scaled_mm "
                       "(blockwise)"), None
    if not hasattr(torch, "_scaled_mm"):
        return False, f"torch {torch.__version__} has no torch._scaled_mm", None
    g = torch.Generator().manual_seed(0)
    w = torch.randn(1, 256, 384, generator=g).to(device)
    x = torch.randn(5, 384, generator=g).to(device)
    qw, sw = quant.quantize_weight(w, scheme, fmt)
    qx, sx = quant.quantize_act(x, scheme, fmt)
    want = quant.dequantize_act(qx, sx, scheme) @ quant.dequantize_weight(qw, sw, scheme)[0].t()
    layout = BLOCK_LAYOUT if scheme == "fp8-block128" else ""
    try:
        bits, s = _padding_sources(qx, sx, scheme)
        q, s = _gather_padded(bits, s, torch.arange(5, device=device), ALIGN, scheme, qx.dtype)
        got = scaled_mm_gemm(qw, sw, scheme)(0, q, s)[:5].float()
    except Exception as exc:
        return False, (f"torch {torch.__version__} scaled matmul cannot do {scheme} on "
                       f"{device}: {_why(exc)}"), None
    err = ((got - want).abs().max() / want.abs().max()).item()
    if err < 1e-2:
        return True, "", layout
    return False, (f"torch {torch.__version__} scaled matmul gives wrong numbers for {scheme} "
                   f"on {device} (max_rel_err {err:.2g}"
                   f"{', scales ' + layout if layout else ''})"), None


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
    gathers_rows = True  # each expert's rows by index_select (fp8_moe)
    description = ("per-expert loop of torch._scaled_mm / F.scaled_mm FP8 matmuls, each "
                   "expert's rows padded to 16 (fp8 schemes where the build has the scaling)")
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
        from ..core.devices import fp8_format_for
        from ..core.environment import device_name
        return scaled_mm_supports(problem.dtype, str(device), fp8_format_for(device_name(device)))

    def prepare(self, problem, weights: Weights):
        return scaled_mm_fn(problem, _fmt(weights), weights.expert_map)


@register
class TorchFp8DequantBackend(Backend):
    name = "torch-fp8-dequant"
    gathers_rows = True
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
