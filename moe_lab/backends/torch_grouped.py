"""`torch-grouped`: the best plain-PyTorch MoE we know how to write. Sort (token, slot)
pairs by local expert once, two `torch._grouped_mm` calls (CUTLASS on Hopper), glue in
the activation dtype.

The call, for T tokens, k slots, N = T*k pairs (`fn` below):
  1. route     key = local expert of each pair (remote = E, so remote pairs sort last);
               one stable sort; group ends (grouped_mm's offs) by searchsorted; the
               sorted row of each pair by one index_put (the inverse permutation). [N]
               integers only.
  2. gather    xs = x[token of each sorted pair], N+1 rows (one spare row, see 5), in the
               activation dtype (one index_select). Llama-4 (router weight on the input,
               k=1): then xs.mul_(w) in place, the product computed in fp32 with the
               unrounded weight and rounded once to the activation dtype, as the
               reference does. (Rounding the weight to bf16 first, vLLM's
               `x * w.to(x.dtype)`, which one embedding_bag could fuse into the gather,
               moves the output by up to 2% of its max on small random shapes, enough to
               fail the bf16 check.)
  3. gemm1     h = grouped_mm(xs, w1 viewed [E, H, 2I] column-major, offs)
  4. act       a = silu(h_gate) * h_up, bf16 in and out (moe_lab.glue): `glue="fused"` (the
               default) one Triton kernel of ours, fp32 inside (phase act), where Triton
               runs (CUDA, or its interpreter); `glue="naive"`, and on a CPU, F.silu then
               `mul_` in place (two kernels). `fn.glue_used` says which ran.
  5. gemm2     y = grouped_mm(a, w2 viewed [E, I, H], offs). Rows past offs[-1] (remote
               pairs and the spare row N) are NOT written: garbage, possibly NaN/Inf.
  6. combine   out[t] = sum_j w_tj * y[pos[t, j]]: glue step combine_rows, fused one
               Triton kernel of ours (moe_lab.combine_rows: fp32 in registers, the row N
               never read), naive (and on a CPU) ONE embedding_bag (sum mode,
               per-sample weights = router weights, fp32 accumulation in the kernel,
               activation dtype out). Remote pairs point at the spare row N, which is the
               bag's padding_idx: the kernel replaces its value by 0 before the multiply,
               so garbage (even NaN) there contributes exactly 0, and no garbage row is
               otherwise ever read. Llama-4: no per-sample weights (combine weight 1).

No host synchronisation and no data-dependent shape (no .item(), .tolist(), nonzero or
boolean-mask indexing; no bincount, which syncs on CUDA): the call can be captured in a
CUDA graph and traced by Dynamo with fullgraph=True (tests/test_torch_grouped.py).

`torch-grouped-bmm` (torch_grouped_bmm.py) is the other combine the issue proposed, for an A/B on a GPU:
y scattered back to slot order (one index_select by the inverse permutation, [T, k, H])
and reduced over k by torch.bmm([T, 1, k] router weights, [T, k, H]) with fp32
accumulation inside the GEMM. That needs an exactly-zero row for remote slots to read:
xs gets a zero row FIRST, placed in the first non-empty expert group (so no expert is
read that no token picked), or in the last group when no pair is local at all, so the
GEMMs compute y[0] = 0 @ W = 0. It moves one more [T*k, H] tensor than the bag combine
(`INTERMEDIATES["bmm"]`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core import glue as glue_mod
from . import Backend, Weights, register


# What each combine's fn writes to memory and reads back, for the roofline (every entry
# counts two passes: written once, read once). rows: "all" = N = T*k, "local" = pairs on
# this rank's experts, "tokens" = T. Not listed: x (read k times by the gather: rows of
# x, not an intermediate), the weights, the output [T, H], and [N]-sized integer vectors.
# Llama-4 (weight on the input) also scales the gathered x in place: one more write and
# read of T*k (= T) rows x H that this list cannot carry (it is one per backend, not per
# problem), so the roofline undercounts those problems by 2*T*H*act bytes.
_COMMON = [
    # 2. written for all N rows (remote pairs too: a fixed shape); gemm1 reads only the
    #    local rows, so under EP this counts (all - local) rows of reads too many
    ("x gathered by expert", "all", "H", "act"),
    # 3./4. gemm1 writes the local rows; silu reads the gate half and mul the up half of
    #    every row (the unwritten remote rows too: their results are never used)
    ("gemm1 out h", "all", "2I", "act"),
    # 4. silu(gate) -> a new [N, I] tensor, read back by the in-place mul (glue="naive";
    #    the fused act kernel writes none: this list counts the naive glue)
    ("silu(gate)", "all", "I", "act"),
    # 4. a = silu(gate) * up, written in place over it for all rows, read by gemm2
    ("act out a", "all", "I", "act"),
]
INTERMEDIATES = {
    # 5./6. gemm2 writes only the local rows; the embedding_bag reads exactly those
    #    (remote slots read the one spare row, from cache) and writes out [T, H] directly
    "bag": _COMMON + [("gemm2 out y", "local", "H", "act")],
    # 5./6. y as above, then the index_select writes all T*k rows in slot order (remote
    #    slots copy the zero row) and the bmm reads them back
    "bmm": _COMMON + [("gemm2 out y", "local", "H", "act"),
                      ("y in slot order", "all", "H", "act")],
}


def grouped_moe_fn(problem, weights: Weights, combine: str | None = None,
                   glue: str = glue_mod.DEFAULT):
    """fn(x, topk_weights, topk_ids) -> out[T, H] for this rank's experts (module doc);
    fn.glue: the moe_lab.glue.Glue it runs, fn.glue_used: fused or naive."""
    combine = combine or "bag"
    if combine not in INTERMEDIATES:
        raise ValueError(f"combine must be one of {sorted(INTERMEDIATES)}, not {combine!r}")
    G = glue_mod.Glue(glue, weights.w1.device,
                      steps=("act", "combine_rows") if combine == "bag" else ("act",))
    E = weights.w1.shape[0]
    inter = problem.inter
    woi = problem.weight_on_input
    dev = weights.w1.device
    w1t = weights.w1.transpose(-2, -1)  # [E, H, 2I], column-major view, no copy
    w2t = weights.w2.transpose(-2, -1)  # [E, I, H]
    experts = torch.arange(E, dtype=torch.int32, device=dev)
    if weights.expert_map is not None:  # global id -> sort key: local id, remote (-1) -> E
        emap = weights.expert_map.to(device=dev, dtype=torch.int32)
        key_of = torch.where(emap < 0, E, emap).to(torch.int32)
    else:
        key_of = None
    is_last = experts == E - 1

    def route(topk_ids):
        ids = topk_ids.reshape(-1)
        key = key_of.index_select(0, ids) if key_of is not None else ids.to(torch.int32)
        skey, order = torch.sort(key, stable=True)
        # ends[e] = pairs with key <= e: the group ends of grouped_mm (remote pairs, key E,
        # lie past ends[-1])
        ends = torch.searchsorted(skey, experts, right=True, out_int32=True)
        return key, order, ends

    def inverse(order, first):
        # pos[pair] = its row in the sorted order (+ first). An index_put (its kernel,
        # index_elementwise, is classified `align` by moe_lab.measuring.profiling; scatter_'s would
        # be taken for the combine)
        pos = torch.empty_like(order)
        pos[order] = torch.arange(first, first + order.numel(), device=order.device)
        return pos

    def gather(x, tok, topk_weights, order, pad):
        xs = x.index_select(0, tok)
        if woi:  # Llama-4: scale the rows by the router weight: computed in fp32 (the weight
            # is not rounded), rounded once to x's dtype, in place (the reference's numbers)
            xs.mul_(F.pad(topk_weights.reshape(-1).index_select(0, order), pad)[:, None])
        return xs

    def experts_out(xs, ends):
        h = torch._grouped_mm(xs, w1t, offs=ends)
        a = G.act(h, inter)  # row-wise: unwritten rows of h stay in rows nobody reads
        return torch._grouped_mm(a, w2t, offs=ends)

    def fn_bag(x, topk_weights, topk_ids):
        T, k = topk_ids.shape
        N = T * k
        key, order, ends = route(topk_ids)
        tok = F.pad(order // k, (0, 1))  # + spare row N (token 0): past ends[-1]
        xs = gather(x, tok, topk_weights, order, (0, 1))
        y = experts_out(xs, ends)  # [N+1, H]; rows >= ends[-1] unwritten
        pos = inverse(order, 0)
        if key_of is not None:  # remote slots -> the spare row, the bag's padding
            pos = torch.where(key == E, N, pos)
        # glue step combine_rows: our kernel (fused), or the embedding_bag (naive)
        return G.combine_rows(y, pos.view(T, k), None if woi else topk_weights.view(T, k), N)

    def fn_bmm(x, topk_weights, topk_ids):
        T, k = topk_ids.shape
        key, order, ends = route(topk_ids)
        tok = F.pad(order // k, (1, 0))  # row 0: the zero row, then the sorted pairs
        xs = gather(x, tok, topk_weights, order, (1, 0))
        xs[0].zero_()
        # row 0 joins the first non-empty group (or the last group when none is)
        offs = ends + ((ends > 0) | is_last).to(torch.int32)
        y = experts_out(xs, offs)  # y[0] = 0 exactly; rows >= offs[-1] unwritten
        pos = inverse(order, 1)
        if key_of is not None:  # remote slots -> the zero row
            pos = torch.where(key == E, 0, pos)
        yk = y.index_select(0, pos).view(T, k, -1)
        if woi:  # combine weight 1
            return yk.sum(1) if k > 1 else yk.view(T, -1)
        return torch.bmm(topk_weights.to(x.dtype).view(T, 1, k), yk).view(T, -1)

    fn = fn_bag if combine == "bag" else fn_bmm
    fn.glue, fn.glue_used = G, G.glue_used
    return fn


@register
class TorchGroupedBackend(Backend):
    name = "torch-grouped"
    gathers_rows = True  # xs = x[token of each sorted pair]
    description = "torch._grouped_mm grouped GEMMs (CUTLASS on Hopper), bf16 glue"
    label, color = "torch-grouped", "tab:blue"
    combine = "bag"  # "bag" (embedding_bag) or "bmm" (torch-grouped-bmm)
    # what this combine's fn writes and reads back; each entry explained above
    intermediates = INTERMEDIATES["bag"]
    glues = glue_mod.GLUES

    def available(self):
        if not hasattr(torch, "_grouped_mm"):
            return False, f"torch {torch.__version__} has no torch._grouped_mm (needs >= 2.8)"
        return True, ""

    def supports(self, problem, device):
        if str(device).startswith("cuda"):
            if problem.dtype != "bf16":
                return False, "torch._grouped_mm on GPU takes bf16 only"
            if torch.version.hip is None and torch.cuda.is_available():
                major, _ = torch.cuda.get_device_capability()
                if major < 9:
                    return False, f"torch._grouped_mm needs sm90+ on NVIDIA (this is sm{major}x)"
        # torch._grouped_mm checks 16-byte aligned strides on every device (the CPU fallback too)
        esz = problem.torch_dtype.itemsize
        if (problem.hidden * esz) % 16 or (problem.inter * esz) % 16:
            return False, (f"torch._grouped_mm needs 16-byte rows: H*{esz} and I*{esz} must be "
                           f"multiples of 16 (H={problem.hidden}, I={problem.inter})")
        return True, ""

    def prepare(self, problem, weights: Weights, glue: str = glue_mod.DEFAULT):
        fn = grouped_moe_fn(problem, weights, self.combine, glue)
        self.glue, self.glue_used = fn.glue, fn.glue_used
        return fn
