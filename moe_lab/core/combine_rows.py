"""The combine of the backends that keep their expert outputs in sorted-row order
(torch-grouped, torch-fp8-grouped): out[t] = sum_j w[t, j] * y[pos[t, j]], a slot whose
pos is `pad` (a remote expert, or no row) adding exactly 0. Two variants, the glue step
`combine_rows` of moe_lab.glue:

    fused  one Triton kernel of ours (moe_lab.glue_kernels._moe_lab_moe_sum_rows_kernel):
           the k rows of a token gathered and summed in fp32 registers, [T, H] written once;
           the row `pad` is never read, so y needs no zero row appended
    naive  F.embedding_bag(pos, y, per_sample_weights=w, mode="sum", padding_idx=pad), as
           these backends did (a zero row is appended to y first where it has no row `pad`)

Weights: the router's (fp32) in the fused kernel; embedding_bag takes them in y's dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .glue_kernels import KERNELS

try:
    import triton
except ImportError:  # the fused variant cannot run; moe_lab.glue falls back to naive
    triton = None


def combine_rows_naive(y, pos, weights, pad: int):
    """pos [T, k] int64 rows of y (pad: none); weights [T, k] or None (weight 1)."""
    if y.shape[0] <= pad:
        y = torch.cat([y, y.new_zeros(pad + 1 - y.shape[0], y.shape[1])])
    psw = None if weights is None else weights.to(y.dtype)
    return F.embedding_bag(pos, y, per_sample_weights=psw, mode="sum", padding_idx=pad)


def combine_rows_fused(y, pos, weights, pad: int):
    T, k = pos.shape
    H = y.shape[1]
    out = torch.empty(T, H, dtype=y.dtype, device=y.device)
    if T == 0 or H == 0:
        return out
    pos = pos.contiguous()
    w = weights.contiguous() if weights is not None else pos
    block_h = min(1024, triton.next_power_of_2(H))
    with torch.profiler.record_function("moe_lab.combine"):
        KERNELS["combine_rows"][(T, triton.cdiv(H, block_h))](
            y, pos, w, out, H, pad, y.stride(0), y.stride(1), out.stride(0), out.stride(1),
            K=k, HAS_W=weights is not None, BLOCK_H=block_h, num_warps=4)
    return out
