"""The full layer's weights and each rank's real shard of them.

The full layer is defined expert by expert: expert e's w1 [2I, H] (gate rows, then up) and
w2 [H, I] are drawn from a generator seeded by (seed, e) on the run's device (the CPU's
generator on the CPU; on a GPU its own, so that DeepSeek-sized layers are drawn in seconds;
the same numbers on every GPU of that kind), so every shard is a slice of one
well-defined layer, whatever N:

    EP rank r of N   experts [r*E/N, (r+1)*E/N), whole (drawn directly: only its experts)
    TP rank r of N   every expert's gate rows, up rows and w2 columns [r*I/N, (r+1)*I/N)
                     (sliced from the full weights)

The full weights (for the single-process reference and the TP slices) are the EP shards
of all ranks gathered (the worker's all-gather) or drawn in one process (`full_weights`).
"""
from __future__ import annotations

import zlib

import torch

from ..backends import Weights
from ..core.problems import ModelSpec, Problem, make_problem


def expert_seed(seed: int, expert: int) -> int:
    return zlib.crc32(f"moe-lab/expert/{seed}/{expert}".encode())


def draw_experts(model: ModelSpec, lo: int, hi: int, dtype: torch.dtype, device,
                 seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """w1 [hi-lo, 2I, H], w2 [hi-lo, H, I] of experts lo..hi-1 of the full layer
    (N(0, 1/H) and N(0, 1/I): activations stay O(1))."""
    H, I = model.hidden, model.intermediate
    w1 = torch.empty(hi - lo, 2 * I, H, dtype=dtype, device=device)
    w2 = torch.empty(hi - lo, H, I, dtype=dtype, device=device)
    gen_device = "cuda" if str(device).startswith("cuda") else "cpu"
    for j, e in enumerate(range(lo, hi)):
        g = torch.Generator(device=device if gen_device == "cuda" else "cpu")
        g.manual_seed(expert_seed(seed, e))
        w1[j].copy_(torch.randn(2 * I, H, generator=g, device=g.device).mul_(H ** -0.5))
        w2[j].copy_(torch.randn(H, I, generator=g, device=g.device).mul_(I ** -0.5))
    return w1, w2


def full_problem(model: ModelSpec, tokens: int, dtype: str) -> Problem:
    """The unsharded layer (one process holds everything): what the reference computes."""
    return make_problem(model, tokens, dtype, 1, 1, 0)


def rank_problem(model: ModelSpec, tokens: int, dtype: str, variant: str, world: int,
                 rank: int) -> Problem:
    """This rank's shard as a Problem: TP (tp=N, I/N) or EP (tp=ep=N, E/N experts)."""
    if variant.startswith("tp"):
        return make_problem(model, tokens, dtype, world, 1, 0)
    return make_problem(model, tokens, dtype, world, world, rank)


def ep_shard(model: ModelSpec, dtype: torch.dtype, device, seed: int, world: int,
             rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = model.experts // world
    return draw_experts(model, rank * n, (rank + 1) * n, dtype, device, seed)


def full_weights(model: ModelSpec, dtype: torch.dtype, device, seed: int) -> Weights:
    w1, w2 = draw_experts(model, 0, model.experts, dtype, device, seed)
    return Weights(w1, w2, None)


def tp_slice(full: Weights, world: int, rank: int) -> Weights:
    """TP rank r's weights: every expert's intermediate slice r of N (gate rows, up rows,
    w2 columns), contiguous, in the backends' gate-first layout."""
    I = full.w2.shape[2]
    if I % world:
        raise ValueError(f"I={I} does not split over {world} ranks")
    n = I // world
    lo, hi = rank * n, (rank + 1) * n
    w1 = torch.cat([full.w1[:, lo:hi], full.w1[:, I + lo:I + hi]], dim=1).contiguous()
    return Weights(w1, full.w2[:, :, lo:hi].contiguous(), None)


def rank_weights(variant: str, prob: Problem, full: Weights, world: int, rank: int,
                 device) -> Weights:
    """This rank's weights for a variant: its TP slice, or its experts (views of the full
    layer) with the expert map (global -> local, -1 remote)."""
    if variant.startswith("tp"):
        return tp_slice(full, world, rank)
    lo, n = prob.first_local_expert, prob.local_experts
    return Weights(full.w1[lo:lo + n], full.w2[lo:lo + n], prob.expert_map(device))
