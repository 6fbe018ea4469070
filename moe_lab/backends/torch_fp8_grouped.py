"""`torch-fp8-grouped`: fp8-tensor and fp8-channel experts as two `torch._scaled_grouped_mm`
calls (row-wise scaled FP8 grouped GEMM; CUDA sm90+), no host synchronisation, so a
CUDA graph can capture it. Checked on an H200 (2026-12-01; with both glues at DeepSeek-R1
TP8+EP8 and Llama-4 Scout TP8).

The call, for T tokens, k slots, N = T*k pairs, E local experts (steps 1, 2, 4, 5 and 7 are
moe_lab.glue's: `glue="fused"`, the default, where Triton runs (CUDA); `glue="naive"`,
and on a CPU, PyTorch; `fn.glue_used` says which ran):
  1. quant   x (times the router weight first, Llama-4) to fp8 with the scheme's dynamic
             scales: one per tensor or one per token (phase `quant`). Fused: aiter's
             dynamic_per_token_quant_fp8_i8 (one kernel) or dynamic_per_tensor_quant_fp8_i8
             (an amax kernel and a scaling kernel); naive: moe_lab.quant (~8 kernels)
  2. route   (glue step align) the pairs sorted by local expert (remote: last), every
             expert's group padded to a multiple of ALIGN rows (FP8 grouped GEMMs want
             16-row aligned group starts), so the row of a sorted pair is its expert's
             padded start plus its rank in the group. Fused: our align kernels with
             BLOCK_M = ALIGN (moe_lab.align); naive: one stable sort, counts by index_add
             (no sync). The same rows, bit for bit.
             The GEMM's [R, H] rows (and scales) by one gather from x's rows plus a zero
             row, the padding rows reading the zero row.
  3. gemm1   h = _scaled_grouped_mm(xs [R, H] fp8, w1^T [E, H, 2I] column-major,
             scale_a [R] (the row's token scale), scale_b [E, 2I], offs = padded ends)
  4. act     a = silu(gate) * up, bf16 (fused: one kernel of ours; naive: F.silu, mul_);
             per tensor, rows past the last group zeroed (their h is never written, and
             the amax reads them); per row they are left: no GEMM or pair reads them
  5. quant   a to fp8 (per tensor over all rows, or per row), as in 1. A padding row is
             all zero: aiter's per-row quantiser gives it scale 0 and NaN values, which
             stay in that row of y (rows are independent in the GEMM) and no pair reads
  6. gemm2   y = _scaled_grouped_mm(aq, w2^T [E, I, H], ...)
  7. combine out[t] = sum_j w_tj * y[row of (t, j)], remote pairs pointing at row R:
             fused our one-pass kernel (moe_lab.combine_rows; row R never read), naive one
             embedding_bag over y with a zero row R appended (padding_idx), as
             torch-grouped does.
A per-tensor weight scale is given as the same value for every column (scale_b [E, N]):
row-wise scaling with equal values is per-tensor scaling.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core import glue as glue_mod
from ..core import quant
from . import Backend, Weights, register

ALIGN = 16
SCHEMES = ("fp8-tensor", "fp8-channel")


def _row_scales(w_scale: torch.Tensor, n: int) -> torch.Tensor:
    """[E] (per tensor) or [E, n] (per channel) -> [E, n] fp32, contiguous."""
    s = w_scale.float()
    return (s.view(-1, 1).expand(-1, n) if s.dim() == 1 else s).contiguous()


def grouped_fp8_fn(problem, qw: quant.QuantWeights, expert_map, mm=None,
                   glue: str = glue_mod.DEFAULT):
    """fn(x, topk_weights, topk_ids) -> out [T, H]; `mm` stands in for
    torch._scaled_grouped_mm (tests on a CPU, where it has no kernel). fn.glue: the
    moe_lab.glue.Glue it runs, fn.glue_used: fused or naive."""
    mm = mm or torch._scaled_grouped_mm
    scheme, fmt = qw.scheme, qw.fmt
    E, two_i, H = qw.w1.shape
    inter, woi = two_i // 2, problem.weight_on_input
    G = glue_mod.Glue(glue, qw.w1.device, steps=("align", "quant", "act", "combine_rows"),
                      scheme=scheme, fmt=fmt, hidden=H, inter=inter, align_alt="torch")
    dev = qw.w1.device
    w1t, w2t = qw.w1.transpose(-2, -1), qw.w2.transpose(-2, -1)  # column-major views
    s1, s2 = _row_scales(qw.w1_scale, two_i), _row_scales(qw.w2_scale, H)
    key_of = emap32 = None
    if expert_map is not None:
        emap = expert_map.to(device=dev, dtype=torch.int64)
        key_of = torch.where(emap < 0, E, emap)
        emap32 = expert_map.to(device=dev, dtype=torch.int32)

    def layout_fused(topk_ids):
        """(src, row, ends, R) from our align kernels (glue step align, fused): padding to
        ALIGN rows per expert is their BLOCK_M; remote pairs sort last, past ends[-1]."""
        T, k = topk_ids.shape
        n = T * k
        sorted_ids, _, _, starts = glue_mod.align_fused(
            topk_ids, E + 1 if emap32 is not None else E, ALIGN, emap32, with_starts=True)
        R = sorted_ids.numel()  # n + experts * (ALIGN - 1): fixed, as the naive layout's
        ends = starts[1:E + 1].clone()
        slot = torch.arange(R, device=dev)
        pair = sorted_ids.long()  # past the last group: never written, never used below
        local = (slot < ends[-1]) & (pair < n)
        src = torch.where(local, pair // k, T)  # padding and the rest read the zero row T
        row = torch.full((n + 1,), R, dtype=torch.int64, device=dev)  # remote: row R
        row.scatter_(0, torch.where(local, pair, n), slot)  # n: a slot nobody reads
        return src, row[:n], ends, R

    def layout_naive(topk_ids):
        T, k = topk_ids.shape
        n = T * k
        ids = topk_ids.reshape(-1).long()
        key = key_of.index_select(0, ids) if key_of is not None else ids
        skey, order = torch.sort(key, stable=True)
        counts = torch.zeros(E + 1, dtype=torch.int64, device=dev).index_add_(
            0, key, torch.ones_like(key))
        padded = (counts[:E] + ALIGN - 1) // ALIGN * ALIGN
        pstart = torch.cumsum(padded, 0) - padded
        start = torch.cumsum(counts, 0) - counts  # unpadded start of each key
        rank = torch.arange(n, device=dev) - start.index_select(0, skey)
        rows_total = n + E * (ALIGN - 1)  # fixed: every padding fits
        # remote pairs (key E) get the spare row `rows_total` (zero, the bag's padding)
        first = F.pad(pstart, (0, 1), value=rows_total).index_select(0, skey)
        row_sorted = torch.where(skey < E, first + rank, torch.full_like(rank, rows_total))
        row = torch.empty_like(row_sorted)
        row[order] = row_sorted
        ends = torch.cumsum(padded, 0).to(torch.int32)
        # the GEMM's rows by ONE gather: src[r] = the token of row r, T (a zero row) for
        # padding and spare rows (a byte-wise index_copy into a zero-filled buffer took
        # 1519 + 140 us at DeepSeek-R1 TP8+EP8, 8192 tokens: h200-align-sgmm-*-20261201)
        src = torch.full((rows_total + 1,), T, dtype=torch.int64, device=dev)
        src.index_copy_(0, row_sorted, order // k)
        return src[:rows_total], row, ends, rows_total

    layout = layout_fused if G.used["align"] == "fused" else layout_naive
    fold = woi and G.variant != "naive"  # Llama-4's router weight in the scales, not on x
    if woi:  # the rows' glue_notes say how the router weight was applied
        G.notes["router"] = ("weight folded into each token's activation scale" if fold
                             else "x scaled by the weight in fp32")

    def fn(x, topk_weights, topk_ids):
        T, k = topk_ids.shape
        src, row, ends, R = layout(topk_ids)
        xin = x
        if woi and not fold:  # Llama-4, top-1: x scaled by the router
            xin = (x.float() * topk_weights.reshape(T, k)[:, :1].float()).to(x.dtype)
        xq, xs = G.quant(xin)
        xq_z = torch.cat([xq, xq.new_zeros(1, H)])
        rows = xq_z.index_select(0, src)
        x_s = (xs.expand(T, 1) if xs.numel() == 1 else xs).reshape(-1)
        if fold:  # the router weight folded into each token's
            # scale: row r of gemm1 is (q_t * s_t * w_t) @ W, no pass over [T, H] (the fp32
            # multiply and its casts took 313 of 1046 us at Scout TP8, 8192 tokens:
            # h200-rows-fp8-channel-tp8-20261201)
            x_s = x_s * topk_weights.reshape(T, k)[:, 0].float()
        sa = torch.cat([x_s, x_s.new_ones(1)]).index_select(0, src)
        h = mm(rows, w1t, sa, s1, offs=ends, out_dtype=torch.bfloat16)
        a = G.act(h, inter)
        if xs.numel() == 1:  # per tensor: rows past the last group are never written by
            # the GEMM, and their garbage would enter the amax: zero them (padding rows inside
            # a group are zero already: their x rows are zeros). Per row, a row's scale is
            # its own and gemm2 reads no row past the last group: no pass over [R, I]
            used = torch.arange(R, device=x.device) < ends[-1]
            a = torch.where(used[:, None], a, torch.zeros((), dtype=a.dtype, device=a.device))
        aq, a_s = G.quant(a)
        y = mm(aq, w2t, a_s.reshape(-1).expand(R).contiguous() if a_s.numel() == 1
               else a_s.reshape(-1), s2, offs=ends, out_dtype=torch.bfloat16)
        # glue step combine_rows: our kernel never reads row R (remote pairs); the naive
        # embedding_bag gets a zero row R appended
        return G.combine_rows(y, row.view(T, k), None if woi else topk_weights.view(T, k),
                              R).to(x.dtype)
    fn.glue, fn.glue_used = G, G.glue_used
    return fn


@register
class TorchFp8GroupedBackend(Backend):
    name = "torch-fp8-grouped"
    gathers_rows = True  # the GEMM's rows by one gather from x
    description = ("fp8-tensor/fp8-channel experts as torch._scaled_grouped_mm row-wise FP8 "
                   "grouped GEMMs (CUDA sm90+), 16-row aligned groups")
    label, color = "torch-fp8-grouped", "tab:cyan"
    quant_schemes, fp8_only = SCHEMES, True
    glues = glue_mod.GLUES
    # xs fp8 [R, H], h [R, 2I] bf16, a [R, I] bf16 and fp8, y [R, H] bf16 (R ~ T*k)
    intermediates = [("x fp8", "tokens", "H", 1), ("x gathered fp8", "all", "H", 1),
                     ("gemm1 out h", "all", "2I", "act"), ("act out a", "all", "I", "act"),
                     ("a fp8", "all", "I", 1), ("gemm2 out y", "all", "H", "act")]

    def available(self):
        if not torch.cuda.is_available():  # nothing it could run here: not counted as available
            return False, "torch._scaled_grouped_mm has no CPU kernel: needs a CUDA or ROCm GPU (none visible)"
        if not hasattr(torch, "_scaled_grouped_mm"):
            return False, f"torch {torch.__version__} has no torch._scaled_grouped_mm"
        return True, ""

    def supports(self, problem, device):
        if problem.dtype not in SCHEMES:
            return False, f"torch._scaled_grouped_mm has row-wise scales only: no {problem.dtype}"
        if not str(device).startswith("cuda"):
            return False, "torch._scaled_grouped_mm has no CPU kernel"
        if torch.version.hip is None and torch.cuda.is_available():
            major, _ = torch.cuda.get_device_capability()
            if major < 9:
                return False, f"torch._scaled_grouped_mm needs sm90+ (this is sm{major}x)"
        if problem.hidden % 16 or problem.inter % 16:
            return False, (f"FP8 grouped GEMM rows must be 16-byte aligned: H and I multiples of "
                           f"16 (H={problem.hidden}, I={problem.inter})")
        return True, ""

    def prepare(self, problem, weights: Weights, glue: str = glue_mod.DEFAULT):
        fn = grouped_fp8_fn(problem, weights.quant, weights.expert_map, glue=glue)
        self.glue, self.glue_used = fn.glue, fn.glue_used
        return fn
