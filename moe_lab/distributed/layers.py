"""The three ways to run one MoE layer over N ranks. Each is an object with

    layer()       the layer end to end on this rank (expert work + collectives); returns
                  this rank's output: all T tokens (all-reduce variants) or its own
                  token chunk (all-to-all)
    compute()     this rank's expert work alone (no collective): the per-rank time
    collective()  the collectives alone, with the sizes the layer uses
    rows          the token indices layer()'s output covers
    pairs, experts_hit, sent_bytes   this rank's routed (token, slot) pairs, local experts
                  hit, and the bytes it hands to the collective

`fn` is a backend's prepared callable for this rank's shard (moe_lab.backends).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..backends import MoEFn
from ..core.problems import Problem


def element_bytes(t: torch.Tensor) -> int:
    return t.element_size()


class AllReduceLayer:
    """tp-allreduce and ep-allreduce: every rank runs all tokens on its shard (TP: I/N of
    every expert; EP: its E/N experts, zero for the others), an all-reduce sums."""

    def __init__(self, prob: Problem, fn: MoEFn, x, topk_weights, topk_ids, group=None):
        self.fn, self.args, self.group = fn, (x, topk_weights, topk_ids), group
        T, H = x.shape
        self.rows = torch.arange(T)
        self.buf = torch.zeros(T, H, dtype=x.dtype, device=x.device)
        self.sent_bytes = T * H * element_bytes(x)
        flat = topk_ids.reshape(-1).long().cpu()
        emap = prob.expert_map()
        local = emap.long()[flat] if emap is not None else flat
        local = local[local >= 0]
        self.pairs, self.experts_hit = int(local.numel()), int(torch.unique(local).numel())

    def compute(self):
        return self.fn(*self.args)

    def collective(self):
        dist.all_reduce(self.buf, group=self.group)

    def layer(self):
        y = self.fn(*self.args)
        dist.all_reduce(y, group=self.group)
        return y


class AllToAllLayer:
    """ep-alltoall: rank r owns token chunk r (torch.tensor_split of T over N). Its
    (token, slot) pairs are sorted by the rank that holds their expert; the counts are
    exchanged, then the rows of x and (expert id, weight) go out with all_to_all_single;
    each rank runs its experts on the rows it received (one slot per row: k=1) and sends
    the results back the same way; the owner sums them per token (fp32).
    The split sizes are read on the host (.tolist()), so this layer cannot be captured
    in a CUDA graph."""

    not_capturable = ("the dispatch reads every rank's pair counts on the host (.tolist()) "
                      "to size all_to_all_single; a graph would freeze them")

    def __init__(self, prob: Problem, fn: MoEFn, x, topk_weights, topk_ids, world: int,
                 rank: int, group=None):
        self.fn, self.group, self.world, self.rank = fn, group, world, rank
        self.per_rank = prob.local_experts
        self.rows = torch.tensor_split(torch.arange(x.shape[0]), world)[rank]
        lo, hi = (int(self.rows[0]), int(self.rows[-1]) + 1) if len(self.rows) else (0, 0)
        self.x = x[lo:hi].contiguous()
        self.w = topk_weights[lo:hi].contiguous()
        self.ids = topk_ids[lo:hi].contiguous()
        self.k = topk_ids.shape[1]
        # what the timed parts reuse: one dispatch done here, outside any timing
        self._plan()
        self._dispatch()
        self.pairs = int(self.xr.shape[0])
        self.experts_hit = int(torch.unique(self.mr[:, 0]).numel()) if self.pairs else 0
        H, eb = x.shape[1], element_bytes(x)
        off = sum(n for d, n in enumerate(self.send) if d != rank)
        back = sum(n for d, n in enumerate(self.recv) if d != rank)
        self.sent_bytes = off * (H * eb + 8) + back * H * eb

    def _plan(self):
        flat = self.ids.reshape(-1).long()
        dest = torch.div(flat, self.per_rank, rounding_mode="floor")
        self.order = torch.argsort(dest, stable=True)
        counts = torch.bincount(dest, minlength=self.world)
        recv = torch.empty_like(counts)
        dist.all_to_all_single(recv, counts, group=self.group)
        self.send, self.recv = counts.tolist(), recv.tolist()
        self.tok = torch.div(self.order, self.k, rounding_mode="floor")

    def _dispatch(self):
        H = self.x.shape[1]
        xs = self.x.index_select(0, self.tok)
        meta = torch.stack([self.ids.reshape(-1)[self.order].float(),
                            self.w.reshape(-1)[self.order].float()], dim=1)
        n_in = sum(self.recv)
        self.xr = self.x.new_empty(n_in, H)
        self.mr = meta.new_empty(n_in, 2)
        dist.all_to_all_single(self.xr, xs, self.recv, self.send, group=self.group)
        dist.all_to_all_single(self.mr, meta, self.recv, self.send, group=self.group)
        self.xs, self.meta = xs, meta

    def compute(self):
        if not self.xr.shape[0]:
            return self.xr
        return self.fn(self.xr, self.mr[:, 1:2].contiguous(),
                       self.mr[:, 0:1].to(torch.int32).contiguous())

    def _return(self, yr):
        ys = self.xr.new_empty(self.xs.shape[0], self.xr.shape[1])
        dist.all_to_all_single(ys, yr.contiguous(), self.send, self.recv, group=self.group)
        return ys

    def _combine(self, ys):
        out = torch.zeros(self.x.shape, dtype=torch.float32, device=self.x.device)
        out.index_add_(0, self.tok, ys.float())
        return out.to(self.x.dtype)

    def collective(self):
        """Counts, rows and metadata out, results back: the layer's four exchanges."""
        recv = torch.empty(self.world, dtype=torch.int64, device=self.x.device)
        counts = torch.tensor(self.send, dtype=torch.int64, device=self.x.device)
        dist.all_to_all_single(recv, counts, group=self.group)
        dist.all_to_all_single(self.xr, self.xs, self.recv, self.send, group=self.group)
        dist.all_to_all_single(self.mr, self.meta, self.recv, self.send, group=self.group)
        self._return(self.xr)

    def layer(self):
        self._plan()
        self._dispatch()
        return self._combine(self._return(self.compute()))


def k1_problem(prob: Problem) -> Problem:
    """The receiving side of ep-alltoall: the same EP shard with one slot per row."""
    import dataclasses
    return dataclasses.replace(prob, model=dataclasses.replace(prob.model, topk=1))


def build(variant: str, prob: Problem, fn: MoEFn, inp, world: int, rank: int, group=None):
    x, w, ids = inp.args()
    if variant == "ep-alltoall":
        return AllToAllLayer(prob, fn, x, w, ids, world, rank, group)
    return AllReduceLayer(prob, fn, x, w, ids, group)
