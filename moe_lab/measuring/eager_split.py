"""Profile one point here and split its eager calls (moe_lab.analysis.eager_split reads
the trace and checks the sum):

    split_point(model, tokens, backend, ...) -> dict: profile one point here, split, time it
    profiled_eager_us(fn, args, device)      -> the eager median with the profiler recording
"""
from __future__ import annotations

import os

from ..core.constants import PROFILE_ITERS, TP_DEFAULT


def profiled_eager_us(fn, args: tuple, device: str, **timer_kw) -> float:
    """The eager timer's median for fn(*args) with the profiler recording (host ops and,
    on a GPU, device activity): the call with the profiler's own cost, which a profiled
    call's window is compared with when it is far from the plain eager time."""
    from torch.profiler import ProfilerActivity, profile

    from .timing import time_fn
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if str(device).startswith("cuda")
                                     else [])
    with profile(activities=acts):
        return float(time_fn("eager", fn, [tuple(args)], device, **timer_kw).median_us)


def split_point(model: str, tokens: int, backend: str = "torch", tp: int = TP_DEFAULT,
                ep: int = 1, ep_rank: int = 0, dtype: str = "bf16", routing: str = "uniform",
                device: str | None = None, iters: int = PROFILE_ITERS, seed: int = 0,
                trace: str | None = None) -> dict:
    """Profile one point here (after its check), split its calls, time it eagerly and
    check the sum: the split dict plus eager_us, adds_up, reason, trace, point."""
    import tempfile

    from ..analysis.eager_split import check_split, split_trace
    from .correctness import checked_point, resolve_device
    from .profiling import export_trace
    from .progress import native_log_filter
    from .timing import time_fn
    device = resolve_device(device)
    # correct before fast: an incorrect backend is not split
    prob, fn, inp, _ = checked_point(model, tokens, backend, tp, ep, ep_rank, dtype, routing,
                                     device, seed)
    path = trace or os.path.join(tempfile.mkdtemp(prefix="moe-lab-split-"), "call.json.gz")
    with native_log_filter():
        # the path written (`.json.gz` added where it lacks it; was: the path given, then
        # 'no trace file' for it, exit 2, with the trace written beside it)
        path = export_trace(fn, inp.args(), path, iters=max(2, iters), device=device)
        t = time_fn("eager", fn, [inp.args()], device)
        prof_us = profiled_eager_us(fn, inp.args(), device)  # the profiler's own cost
    s = split_trace(path)
    eager = dict(median_us=t.median_us, p10_us=t.p10_us, p90_us=t.p90_us, noisy=t.noisy)
    ok, why = check_split(s["wall_us"], eager, s["n_ops"], profiled_us=prof_us,
                          cpu=not s["device_timeline"])
    return dict(s, eager_us=t.median_us, profiled_eager_us=prof_us, adds_up=ok,
                reason=why, trace=path, point=prob.describe(), backend=backend, device=device)
