"""`torch`: the reference. A per-expert loop in plain PyTorch, fp32 accumulation.

With `compute_dtype=torch.float32/float64` the same loop upcasts every operand and is
what `moe-lab check` compares all backends against. The loop reads expert token counts
on the host (one sync), so it cannot be captured in a CUDA graph.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import Backend, Weights, register


def expert_rows(topk_ids: torch.Tensor, expert_map: torch.Tensor | None = None,
                n_experts: int | None = None) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """(e, idx, tok) per local expert that has rows, in expert order: idx the flattened
    (token, slot) pairs routed to it (stable sort), tok their tokens. Remote experts (-1
    under EP) are left out. n_experts: the local count (None: the largest id routed + 1)."""
    T, k = topk_ids.shape
    ids = topk_ids.long()
    flat = (expert_map.long()[ids] if expert_map is not None else ids).reshape(-1)
    token_of = torch.arange(T, device=topk_ids.device).repeat_interleave(k)
    order = torch.argsort(flat, stable=True)
    if n_experts is None:
        n_experts = int(flat.max().item()) + 1 if flat.numel() and flat.max() >= 0 else 0
    counts = torch.bincount(flat[flat >= 0], minlength=n_experts).tolist()
    start = int((flat < 0).sum())  # remote experts (-1) sort first
    groups = []
    for e, n in enumerate(counts):
        if n:
            idx = order[start:start + n]
            groups.append((e, idx, token_of[idx]))
        start += n
    return groups


def torch_moe(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor,
              expert_map: torch.Tensor | None = None, weight_on_input: bool = False,
              compute_dtype: torch.dtype | None = None) -> torch.Tensor:
    """MoE experts for the local experts in w1/w2. Returns x.dtype, or compute_dtype if set."""
    T, H = x.shape
    E_local, two_i, _ = w1.shape
    inter = two_i // 2
    cd = compute_dtype or x.dtype
    acc = torch.float64 if compute_dtype == torch.float64 else torch.float32
    w_flat = topk_weights.reshape(-1).float()
    out = torch.zeros(T, H, dtype=acc, device=x.device)
    for e, idx, tok in expert_rows(topk_ids, expert_map, E_local):
        xs = x[tok]
        if weight_on_input:  # Llama-4: the router weight scales the input, in its dtype
            xs = (xs.to(acc) * w_flat[idx, None].to(acc)).to(x.dtype)
        h = xs.to(cd) @ w1[e].to(cd).t()
        a = F.silu(h[:, :inter]) * h[:, inter:]
        y = (a @ w2[e].to(cd).t()).to(acc)
        if not weight_on_input:
            y = y * w_flat[idx, None].to(acc)
        out.index_add_(0, tok, y)
    return out if compute_dtype is not None else out.to(x.dtype)


@register
class TorchBackend(Backend):
    name = "torch"
    description = "per-expert loop in PyTorch, fp32 accumulation (the reference)"
    label, color = "torch (reference loop)", "tab:gray"
    # x[tok] gather, h = xs @ w1^T, a = silu(h_g) * h_u, y = a @ w2^T, y in fp32 scaled by
    # the router weight, index_add into an fp32 [T, H] accumulator (2 passes each)
    intermediates = [("gathered x", "local", "H", "act"), ("gemm1 out h", "local", "2I", "act"),
                     ("act out a", "local", "I", "act"), ("gemm2 out y", "local", "H", "act"),
                     ("y fp32 scaled", "local", "H", 4), ("fp32 accumulator", "tokens", "H", 4)]
    gathers_rows = True
    compile_both_ways = True  # Dynamo unrolls the loop; through the op it does not
    not_capturable = ("the per-expert loop reads expert token counts on the host "
                      "(bincount().tolist()), a sync that CUDA graph capture forbids")

    def prepare(self, problem, weights: Weights):
        w1, w2, emap, woi = weights.w1, weights.w2, weights.expert_map, problem.weight_on_input

        def fn(x, topk_weights, topk_ids):
            return torch_moe(x, w1, w2, topk_weights, topk_ids, emap, woi)
        return fn
