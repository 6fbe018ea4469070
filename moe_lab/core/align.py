"""The align glue step: (token, slot) pairs sorted by expert, each expert padded to BLOCK_M,
in aiter's layout, twice: ours (`align_fused`, three Triton kernels of
moe_lab.glue_kernels) and aiter's moe_align_block_size_triton (`align_aiter`). Where few
pairs meet many experts (`is_sparse`: no EP map, pairs * SPARSE_FACTOR <= experts), ours
sorts nothing (`align_sparse`, one kernel): a block per pair, its expert the pair's. moe_lab.glue
says which variant runs which, and what each costs on an H200.
"""
from __future__ import annotations

import torch

from .glue_kernels import KERNELS

try:
    import triton
except ImportError:  # align_fused then cannot run; moe_lab.glue falls back to aiter's
    triton = None

# aiter's align kernels (moe_align_block_size_triton), as the profiler names them
AITER_ALIGN_KERNELS = tuple(f"_moe_align_block_size_stage{i}_kernel" for i in (1, 2, 3, 4))

# Both take the router's topk_ids (global ids) and, under EP, the expert map (global ->
# local, -1 remote). n_exp counts the experts aligned: E_local, or E_local + 1 under EP,
# where remote pairs go to the sentinel expert E_local, sorted last, whose blocks get
# expert id -1 (the GEMM kernels then write zero rows without loading A). Both return
# (sorted_token_ids, expert_ids, num_tokens_post_padded) in aiter's layout: expert_ids is
# -1 for every block past the end (aiter-triton-silu counts the local blocks from it);
# slots of sorted_token_ids past num_tokens_post_padded are never read (the GEMM programs
# past it return at once) and align_fused leaves them unwritten.

def _align_buffers(numel, n_exp, block_m, device, fill):
    max_pad = numel + n_exp * (block_m - 1)
    make = (lambda n, v: torch.full((n,), v, dtype=torch.int32, device=device)) if fill else \
        (lambda n, v: torch.empty(n, dtype=torch.int32, device=device))
    return (make(max_pad, numel), make((max_pad + block_m - 1) // block_m, -1),
            torch.empty(1, dtype=torch.int32, device=device))


def align_aiter(topk_ids, n_exp, block_m, expert_map=None, kernel=None):
    """aiter's moe_align_block_size_triton (one program per expert), with the EP map and
    the sentinel's -1 applied by PyTorch around it, as the aiter-triton backend did.
    `kernel`: the aiter module holding it (default: moe_lab.aiter_import's)."""
    if kernel is None:
        from .aiter_import import load_aiter_triton
        _, kernel = load_aiter_triton()
    numel = topk_ids.numel()
    sentinel = n_exp - 1
    if expert_map is not None:
        local = expert_map[topk_ids.long()]
        ids = torch.where(local < 0, sentinel, local).to(torch.int32)
    else:
        ids = topk_ids
    # aiter's kernels write no padding slot: they must hold numel already
    sorted_ids, expert_ids, npp = _align_buffers(numel, n_exp, block_m, topk_ids.device, True)
    kernel.moe_align_block_size_triton(ids, n_exp, block_m, sorted_ids, expert_ids, npp)
    if expert_map is not None:
        expert_ids = torch.where(expert_ids == sentinel, -1, expert_ids)
    return sorted_ids, expert_ids, npp


ALIGN_MAX_CHUNKS = 64  # the scan kernel holds [chunks, experts] counts in one program
ALIGN_MIN_CHUNK = 256  # pairs per program at least (a power of two; tests under Triton's
#                        interpreter, where each step of the chunk's sort costs, set less)


def align_fused(topk_ids, n_exp, block_m, expert_map=None, with_starts=False):
    """Three kernels of ours (moe_lab.glue_kernels): count, scan, place, the EP map applied
    inside; one launch of the three in one program where the pairs fit one chunk. The same
    sorted_token_ids, expert_ids and count as align_aiter, bit for bit up to
    num_tokens_post_padded. `with_starts`: also each expert's padded start, int32
    [E_PAD] (start[e] for e >= n_exp: the padded total), a grouped GEMM's offsets."""
    count, scan, place = KERNELS["align"]
    numel = topk_ids.numel()
    device = topk_ids.device
    ids = topk_ids.reshape(-1)
    sorted_ids, expert_ids, npp = _align_buffers(numel, n_exp, block_m, device, False)
    chunk = max(ALIGN_MIN_CHUNK, triton.next_power_of_2(triton.cdiv(max(numel, 1), ALIGN_MAX_CHUNKS)))
    n_chunks = max(1, triton.cdiv(numel, chunk))
    e_pad = triton.next_power_of_2(n_exp + 1)
    counts = torch.empty(n_chunks, e_pad, dtype=torch.int32, device=device)
    adj = torch.empty(n_chunks, e_pad, dtype=torch.int32, device=device)
    starts = torch.empty(e_pad, dtype=torch.int32, device=device)
    ends = torch.empty(e_pad, dtype=torch.int32, device=device)
    has_map = expert_map is not None
    emap = expert_map if has_map else ids
    sentinel = n_exp - 1
    remote = has_map  # the sentinel's blocks get expert id -1 (the GEMMs skip them)
    n_blocks = expert_ids.numel()
    per_prog = triton.cdiv(n_blocks, n_chunks)
    bb = min(64, triton.next_power_of_2(per_prog))
    with torch.profiler.record_function("moe_lab.align"):
        if n_chunks == 1:  # one launch: count, scan and place in one program
            KERNELS["align_one"][(1,)](
                ids, emap, adj, starts, ends, npp, sorted_ids, expert_ids, numel, sentinel,
                n_exp, n_blocks, HAS_MAP=has_map, SENTINEL_REMOTE=remote, CHUNK=chunk,
                E_PAD=e_pad, BLOCK_M=block_m, BB=bb, ET=min(64, e_pad),
                MAXB=triton.next_power_of_2(triton.cdiv(chunk, block_m)), num_warps=8)
        else:
            count[(n_chunks,)](ids, emap, counts, numel, sentinel, HAS_MAP=has_map, CHUNK=chunk,
                               E_PAD=e_pad, num_warps=4)
            scan[(1,)](counts, adj, starts, ends, npp, n_chunks, n_exp, block_m,
                       P_PAD=triton.next_power_of_2(n_chunks), E_PAD=e_pad, num_warps=8)
            place[(n_chunks,)](ids, emap, adj, starts, ends, npp, sorted_ids, expert_ids, numel,
                               sentinel, n_exp, n_blocks, per_prog, HAS_MAP=has_map,
                               SENTINEL_REMOTE=remote, CHUNK=chunk, E_PAD=e_pad,
                               BLOCK_M=block_m, BB=bb, num_warps=4)
    return (sorted_ids, expert_ids, npp, starts) if with_starts else (sorted_ids, expert_ids, npp)


SPARSE_FACTOR = 4  # pairs * 4 <= experts: most experts get no pair (vLLM's threshold)


def is_sparse(numel: int, n_exp: int, expert_map=None) -> bool:
    """Whether align_sparse serves: no EP map (remote pairs must sort last) and
    numel * SPARSE_FACTOR <= n_exp."""
    return expert_map is None and 0 < numel and numel * SPARSE_FACTOR <= n_exp


def align_sparse(topk_ids, block_m):
    """One kernel of ours: block b holds pair b (its first slot; the rest numel) and
    expert_ids is the pairs' experts (topk_ids as int32, no copy when it is one). The
    GEMMs read the same rows with the same experts as from align_fused's sort, in another
    block order; each output row is computed alone, so the layer's output is the same."""
    numel = topk_ids.numel()
    device = topk_ids.device
    sorted_ids = torch.empty(numel * block_m, dtype=torch.int32, device=device)
    npp = torch.empty(1, dtype=torch.int32, device=device)
    with torch.profiler.record_function("moe_lab.align"):
        KERNELS["align_small"][(numel,)](sorted_ids, npp, numel, BLOCK_M=block_m, num_warps=1)
    return sorted_ids, topk_ids.reshape(-1).to(torch.int32), npp

