"""Timers: one call of a MoE function, three ways. Every timer returns a `Timing` in us.

    time_eager(fn, arg_sets)   GPU, as a user's Python calls it (mode `eager`)
    time_graph(fn, arg_sets)   GPU, captured once in a CUDA/HIP graph, replayed (mode `graph`)
    time_cpu(fn, arg_sets)     CPU, the thread's CPU time of each call, one intra-op thread

`arg_sets` is a list of argument tuples (several copies of the inputs); call i uses
`arg_sets[i % len(arg_sets)]`, so consecutive calls read different input buffers.
Warm-up and repeat counts are sized by time (`warmup_ms`, `rep_ms`) from a first
estimate, as `triton.testing.do_bench` does, within [min_reps, max_reps].

What each timer measures, and what it cannot see:

* `time_eager`: before every call the L2 is flushed (a buffer larger than the
  last-level cache is zeroed) and the host waits for the device to go idle, *then* the
  start event is recorded, `fn` runs, the end event is recorded. The interval is
  therefore the wall time of one call issued to an idle GPU: Python, dispatcher and
  kernel-launch overhead and the gaps between kernels are all inside it; the flush is
  not. It cannot tell launch overhead from kernel time (compare with `graph`, or the
  profiler's kernel sum), and it does not show how much of that overhead would hide
  behind earlier work in a real model, where the GPU is rarely idle.
* `time_graph`: one graph per argument set, captured on a side stream after warm-up;
  each replay is bracketed by events right after an (uncaptured) L2 flush, so the host
  is ahead of the device and no launch gap is measured. This is device time of the
  kernels plus the small gaps between graph nodes. It cannot see anything the function
  does on the host (a `.tolist()`/`nonzero` sync makes capture fail: `CaptureError`),
  and work whose size depends on data is frozen at capture time (the replay repeats
  the captured launch grid). The profiler may not attribute graph-replayed kernels
  (on ROCm they can vanish from traces altogether, as aiter's test_common notes), so
  profile eagerly.
* `time_cpu`: per call, the calling thread's CPU time (`time.thread_time`) with torch held
  to one intra-op thread, in steady blocks as `time_eager` below; no cache flush (CPU
  caches are small next to MoE weights, and inputs rotate through `arg_sets`). On a shared
  2-core machine wall time mostly measures the other processes (two torch threads
  fighting them gave medians 10-100x the one-thread CPU time), so the CPU clock is the
  default; a distributed rank, whose collectives wait on other ranks, times the wall.
* The L2 flush buffer is max(2 x L2, 256 MB), and 512 MB on ROCm so it also covers
  MI300's 256 MB Infinity Cache. Weights larger than the cache are never warm anyway;
  for small problems flushing makes the numbers pessimistic compared with a model
  where the previous layer left activations in L2.
* Event timestamps have ~0.5 us resolution on NVIDIA; below ~5 us per call the
  quantiles are coarse.
* Eager times of host-bound calls depend on how fast the host runs Python, which
  changes on a shared machine. So `time_eager` times calls in blocks (>= 10 calls and
  >= 25 ms each) and keeps going until three blocks agree within `STEADY_TOL` of the
  fastest block, at least `EAGER_MIN_REPS` calls are in, or `EAGER_MAX_MS` has passed;
  `median_us`, `p10_us`, `p90_us` are over the calls of the steady blocks: the eager time
  at the host's steady speed. `median_all_us` keeps the plain median over every call and
  `steady_frac` the share kept; a point where fewer than half the calls were steady is
  flagged `noisy`. This removes slow stretches inside a window, not a window that is
  slow throughout (data/runs/h200-seed4-20261129/evidence/README.md has what that means
  on the H200).
  Python's garbage collector is paused while a GPU timer runs, so a collection cannot
  land inside a timed call.
"""
from __future__ import annotations

import contextlib
import itertools
import statistics
import time
from typing import Callable

from .timing_stats import (  # what a timer's per-call times become (moe_lab.measuring.timing_stats)
    EAGER_BLOCK_MIN, EAGER_BLOCK_MS, EAGER_MAX_MS, EAGER_MIN_REPS, CPU_BLOCK_MIN, Timing,
    check_args, counts, gc_paused, steady_blocks, steady_summary, summarize)


class CaptureError(RuntimeError):
    """The function cannot be captured in a CUDA/HIP graph; str(e) is the reason."""


# --- CPU -------------------------------------------------------------------------------

@contextlib.contextmanager
def one_thread():
    """torch held to one intra-op thread (restored after): a CPU call then computes in the
    calling thread, so a pre-empted worker thread of torch's pool cannot stall it, and the
    thread's CPU clock sees all its work."""
    import torch
    was = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(was)


CPU_CLOCKS = {"thread": time.thread_time, "wall": time.perf_counter}


def time_cpu(fn: Callable, arg_sets: list[tuple], warmup_ms: float = 25, rep_ms: float = 100,
             min_reps: int = 5, max_reps: int = 10_000, max_ms: float = EAGER_MAX_MS,
             clock: str = "thread") -> Timing:
    """One call on a CPU, timed in blocks as `time_eager` times a host (module doc), with
    torch held to one intra-op thread. `clock` "thread": the calling thread's CPU time,
    what the call computes, not the time it waited for a core on a shared machine; "wall":
    perf_counter (a distributed rank, whose collectives wait on other processes)."""
    arg_sets = check_args(arg_sets)
    if clock not in CPU_CLOCKS:
        raise ValueError(f"clock {clock!r}: use {' or '.join(CPU_CLOCKS)}")
    clk = CPU_CLOCKS[clock]
    with one_thread(), gc_paused():
        t0 = time.perf_counter()
        fn(*arg_sets[0])  # first call: lazy init, allocator warm-up
        first_ms = (time.perf_counter() - t0) * 1e3
        t0 = clk()
        n_est = 3
        for i in range(n_est):
            fn(*arg_sets[i % len(arg_sets)])
        est_ms = (clk() - t0) * 1e3 / n_est
        n_warmup, _ = counts(est_ms, warmup_ms, rep_ms, min_reps, max_reps)
        for i in range(n_warmup):
            fn(*arg_sets[i % len(arg_sets)])
        block = max(CPU_BLOCK_MIN, int(EAGER_BLOCK_MS / max(est_ms, 1e-4)))
        calls = itertools.cycle(arg_sets)

        def one_block(n):
            times = []
            for _ in range(n):
                args = next(calls)
                t0 = clk()
                fn(*args)
                times.append((clk() - t0) * 1e6)
            return times

        blocks = steady_blocks(one_block, block, rep_ms, max_ms, min_reps, max_reps)
    what = "the thread's CPU time" if clock == "thread" else "perf_counter"
    return steady_summary(blocks, f"cpu: {what} of each call, 1 intra-op thread, blocks of "
                                  f"{block}; first call {first_ms:.1f} ms")


# --- GPU helpers -----------------------------------------------------------------------

_FLUSH_BUFFERS: dict = {}


def flush_bytes(device=None) -> int:
    """Size of the buffer zeroed to flush the last-level cache (see module docstring)."""
    import torch
    mb = 1 << 20
    l2 = 0
    try:
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    except Exception:  # no device / old torch
        l2 = 0
    floor = 512 * mb if torch.version.hip else 256 * mb
    return max(2 * l2, floor)


def _flush_buffer(device=None):
    import torch
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    buf = _FLUSH_BUFFERS.get(dev)
    if buf is None:
        buf = torch.empty(flush_bytes(dev) // 4, dtype=torch.int32, device=dev)
        _FLUSH_BUFFERS[dev] = buf
    return buf


def _device_of(arg_sets) -> "object | None":
    import torch
    for args in arg_sets:
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_cuda:
                return a.device
    return None


# --- eager -----------------------------------------------------------------------------

def time_eager(fn: Callable, arg_sets: list[tuple], warmup_ms: float = 25, rep_ms: float = 100,
               flush_l2: bool = True, min_reps: int = EAGER_MIN_REPS,
               max_reps: int = 4_000, max_ms: float = EAGER_MAX_MS) -> Timing:
    """Wall time of one call on an idle GPU, launch overhead included (see module doc).

    Per timed call: [flush L2] -> synchronize -> start event -> fn(*args) -> end event.
    Calls run in blocks until the host has been seen at a steady speed (module doc);
    `rep_ms` is the shortest window, `max_ms` the longest.
    """
    import torch
    arg_sets = check_args(arg_sets)
    dev = _device_of(arg_sets)
    flush = _flush_buffer(dev).zero_ if flush_l2 else (lambda: None)
    sync = torch.cuda.synchronize

    fn(*arg_sets[0])  # compile / autotune / allocate outside every measurement
    sync()
    n_est = 5
    est = []
    for i in range(n_est):
        flush()
        sync()
        t0 = time.perf_counter()
        fn(*arg_sets[i % len(arg_sets)])
        sync()
        est.append(time.perf_counter() - t0)
    est_ms = statistics.median(est) * 1e3
    n_warmup, _ = counts(est_ms, warmup_ms, rep_ms, 1, max_reps)
    for i in range(n_warmup):
        fn(*arg_sets[i % len(arg_sets)])
    sync()

    block = max(EAGER_BLOCK_MIN, int(EAGER_BLOCK_MS / max(est_ms, 1e-4)))
    calls = itertools.cycle(arg_sets)

    def one_block(n):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for j in range(n):
            args = next(calls)
            flush()
            sync()  # the device is idle: launch overhead lands inside the interval
            starts[j].record()
            fn(*args)
            ends[j].record()
        sync()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    with gc_paused():
        blocks = steady_blocks(one_block, block, rep_ms, max_ms, min_reps, max_reps)
    what = f"flush {flush_bytes(dev) >> 20} MB" if flush_l2 else "no flush"
    return steady_summary(blocks, f"eager: events around each call from idle, {what}, "
                                  f"{len(arg_sets)} input set(s), blocks of {block}")


# --- graph -----------------------------------------------------------------------------

def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    return chain[::-1]  # the original error first


def capture_reason(exc: BaseException) -> str:
    """One line: the original error of a failed capture, then what capture_end said."""
    parts = []
    for e in _exception_chain(exc):
        first = (str(e).strip().splitlines() or [""])[0].strip()
        msg = f"{type(e).__name__}: {first}"[:300]
        if msg not in parts:
            parts.append(msg)
    return " <- then: ".join(parts)


def capture_graphs(fn: Callable, arg_sets: list[tuple], warmup_iters: int = 3) -> list:
    """One torch.cuda.CUDAGraph per argument set (shared memory pool), captured on a side
    stream after warm-up there. Raises CaptureError with the real reason on failure."""
    import torch
    arg_sets = check_args(arg_sets)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):
            for i in range(warmup_iters):
                fn(*arg_sets[i % len(arg_sets)])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
    except Exception as exc:  # fails before capture: not a capture problem
        raise RuntimeError(f"warm-up before graph capture failed: {exc}") from exc
    graphs, pool = [], None
    for args in arg_sets:
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, pool=pool, stream=side):
                fn(*args)
        except Exception as exc:
            reason = capture_reason(exc)
            _recover_after_failed_capture()
            raise CaptureError(f"graph capture failed: {reason}") from exc
        pool = g.pool()
        graphs.append(g)
    torch.cuda.synchronize()
    return graphs


def _recover_after_failed_capture():
    """Leave the device usable after an invalidated capture (best effort)."""
    import torch
    try:
        torch.cuda.synchronize()
    except Exception:
        pass
    try:
        torch.cuda.empty_cache()
    except Exception:
        pass


def time_graph(fn: Callable, arg_sets: list[tuple], warmup_ms: float = 25, rep_ms: float = 100,
               flush_l2: bool = True, min_reps: int = 10, max_reps: int = 2_000) -> Timing:
    """Device time of one call replayed from a CUDA/HIP graph (see module doc).

    Per timed replay: [flush L2] -> start event -> graph.replay() -> end event, without
    a host sync in between, so the launch of the replay hides behind the flush.
    Raises CaptureError(reason) when the call cannot be captured.
    """
    import torch
    arg_sets = check_args(arg_sets)
    dev = _device_of(arg_sets)
    graphs = capture_graphs(fn, arg_sets)
    flush = _flush_buffer(dev).zero_ if flush_l2 else (lambda: None)

    graphs[0].replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(5):
        graphs[i % len(graphs)].replay()
    e.record()
    torch.cuda.synchronize()
    est_ms = s.elapsed_time(e) / 5
    n_warmup, n_rep = counts(est_ms, warmup_ms, rep_ms, min_reps, max_reps)
    for i in range(n_warmup):
        graphs[i % len(graphs)].replay()
    torch.cuda.synchronize()

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    with gc_paused():
        for i in range(n_rep):
            flush()
            starts[i].record()
            graphs[i % len(graphs)].replay()
            ends[i].record()
            if i % 64 == 63:
                torch.cuda.synchronize()  # keep the host from running far ahead
        torch.cuda.synchronize()
    times_us = [a.elapsed_time(b) * 1e3 for a, b in zip(starts, ends)]
    what = f"flush {flush_bytes(dev) >> 20} MB" if flush_l2 else "no flush"
    return summarize(times_us, f"graph: events around each replay, {what}, "
                               f"{len(graphs)} graph(s)")


def time_fn(mode: str, fn: Callable, arg_sets: list[tuple], device: str = "cuda",
            clock: str = "thread", **kw) -> Timing:
    """The one timer entry of sweeps and compile runs: `graph` replays a captured graph,
    `eager` and `compile` time calls from Python; on a CPU every mode is `time_cpu`."""
    if not str(device).startswith("cuda"):
        return time_cpu(fn, arg_sets, clock=clock, **{k: v for k, v in kw.items() if k in (
            "warmup_ms", "rep_ms", "min_reps", "max_reps")})
    if mode == "graph":
        return time_graph(fn, arg_sets, **kw)
    if mode in ("eager", "compile"):
        return time_eager(fn, arg_sets, **kw)
    raise ValueError(f"unknown timing mode {mode!r}; use eager, graph or compile")
