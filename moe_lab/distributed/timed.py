"""Timing calls that contain collectives: every rank makes the same number of calls
(fixed counts, never sized by each rank's own clock, or the ranks would stop at different
calls and one would wait in a collective forever), each call starts after a barrier, and
each rank records its own per-call time. The layer's time for call i is the slowest
rank's (the others wait for it in the collective); see `across_ranks`.

    eager   host clock on the CPU; device events on a GPU (launch overhead included)
    graph   GPU only: the call captured once in a CUDA/HIP graph (collectives included,
            NCCL/RCCL allow it) and replayed
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ..measuring.timing import capture_graphs, gc_paused


def _sync(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def capture(fn, device: str, group=None):
    """fn captured in a CUDA/HIP graph (moe_lab.measuring.timing.capture_graphs: warm-up on a side
    stream, then capture; CaptureError with the reason). Every rank calls this together:
    the warm-up calls hold collectives."""
    dist.barrier(group=group)
    return capture_graphs(fn, [()], warmup_iters=2)[0].replay


def sync_loop(fn, device: str, mode: str = "eager", reps: int = 20, warmup: int = 3,
              group=None) -> list[float]:
    """This rank's time of each of `reps` calls (us), each started after a barrier."""
    if mode == "graph":
        fn = capture(fn, device, group)
    times = []
    cuda = device.startswith("cuda")
    with gc_paused():
        for i in range(warmup + reps):
            dist.barrier(group=group)
            _sync(device)
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                us = start.elapsed_time(end) * 1e3
            else:
                t0 = time.perf_counter()
                fn()
                us = (time.perf_counter() - t0) * 1e6
            if i >= warmup:
                times.append(us)
    return times


def across_ranks(per_rank: list[list[float]]) -> list[float]:
    """Per call, the slowest rank's time: what the layer took."""
    return [max(ts) for ts in zip(*per_rank)]
