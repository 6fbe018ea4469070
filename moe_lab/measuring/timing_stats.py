"""What a timer's per-call times become (the timers: moe_lab.measuring.timing): a `Timing`
(median, p10, p90, `noisy`), the steady-block statistic of a host's calls, the warm-up and
repeat counts and the pause of the garbage collector around timed calls."""
from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from ..storage.vocabulary import NOISE_LIMIT  # (p90 - p10) / median above this: `noisy`
EAGER_MIN_REPS = 200  # eager: calls at least (see the module doc)
EAGER_MAX_MS = 1500.0  # eager: stop adding blocks after this long
EAGER_BLOCK_MS = 25.0  # eager: one block lasts at least this long ...
EAGER_BLOCK_MIN = 10   # ... and holds at least this many calls
STEADY_TOL = 0.05      # a block whose median is within 5% of the fastest block's is steady
STEADY_BLOCKS = 3      # eager stops once this many blocks are steady
STEADY_MIN_FRAC = 0.5  # a point with a smaller share of its calls steady is `noisy`
CPU_BLOCK_MIN = 3      # a CPU block holds at least this many calls (CPU calls last ms)


@contextlib.contextmanager
def gc_paused():
    """No garbage collection inside timed calls (re-enabled after). No collection before
    either: a full gc.collect() took 108 ms per timing in a tune process holding thousands
    of candidate rows (a third of an H200 search's time), and a disabled collector already
    keeps every pause out of the timed calls."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    n: int
    noisy: bool
    note: str = ""
    median_all_us: float = math.nan  # eager: plain median over every call
    steady_frac: float = 1.0          # eager: share of calls in steady blocks
    # the statistic's own per-call times, in call order (eager: the steady blocks' calls),
    # kept so that any statistic (a bootstrap interval, another quantile) can be redone
    samples_us: tuple = ()

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "samples_us"}


def _quantile(sorted_x: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(sorted_x) == 1:
        return float(sorted_x[0])
    pos = q * (len(sorted_x) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_x) - 1)
    return float(sorted_x[lo] + (sorted_x[hi] - sorted_x[lo]) * (pos - lo))


def summarize(times_us: Sequence[float], note: str = "") -> Timing:
    """Median, p10, p90 of per-call times; `noisy` when (p90 - p10) / median > NOISE_LIMIT."""
    xs = sorted(float(t) for t in times_us)
    if not xs:
        raise ValueError("summarize() needs at least one time")
    med = statistics.median(xs)
    p10, p90 = _quantile(xs, 0.1), _quantile(xs, 0.9)
    spread = (p90 - p10) / med if med > 0 else math.inf
    noisy = spread > NOISE_LIMIT
    notes = [note] if note else []
    if noisy:
        notes.append(f"noisy: p10-p90 spread is {spread:.0%} of the median "
                     f"(limit {NOISE_LIMIT:.0%}) over {len(xs)} calls; "
                     "other work on the device, clock changes or too few repeats")
    if len(xs) < 10:
        notes.append(f"only {len(xs)} timed calls")
    return Timing(med, p10, p90, len(xs), noisy, "; ".join(notes),
                  samples_us=tuple(float(t) for t in times_us))


def counts(estimate_ms: float, warmup_ms: float, rep_ms: float,
            min_reps: int, max_reps: int) -> tuple[int, int]:
    est = max(estimate_ms, 1e-4)
    n_warmup = max(1, int(warmup_ms / est))
    n_rep = min(max_reps, max(min_reps, int(rep_ms / est)))
    return min(n_warmup, max_reps), n_rep


def check_args(arg_sets) -> list[tuple]:
    if not arg_sets:
        raise ValueError("arg_sets must hold at least one argument tuple")
    return [tuple(a) for a in arg_sets]


def steady_summary(blocks: Sequence[Sequence[float]], note: str = "") -> Timing:
    """Summarize per-call times measured in blocks: statistics over the calls of the
    blocks whose median is within STEADY_TOL of the fastest block's (see module doc)."""
    blocks = [list(map(float, b)) for b in blocks if len(b)]
    if not blocks:
        raise ValueError("steady_summary() needs at least one non-empty block")
    meds = [statistics.median(b) for b in blocks]
    best = min(meds)
    steady = [x for b, m in zip(blocks, meds) if m <= best * (1 + STEADY_TOL) for x in b]
    n_all = sum(len(b) for b in blocks)
    frac = len(steady) / n_all
    t = summarize(steady, note)
    t.median_all_us = statistics.median([x for b in blocks for x in b])
    t.steady_frac = frac
    t.n = n_all
    n_steady = sum(m <= best * (1 + STEADY_TOL) for m in meds)
    extra = (f"{n_steady}/{len(blocks)} blocks steady ({frac:.0%} of {n_all} calls); "
             f"median over all calls {t.median_all_us:.1f} us")
    if frac < STEADY_MIN_FRAC:
        t.noisy = True
        extra = ("noisy: the host was slower for most of the window; " + extra)
    t.note = "; ".join(x for x in (t.note, extra) if x)
    return t


def steady_enough(blocks_meds: list[float], n_calls: int, min_reps: int) -> bool:
    if len(blocks_meds) < STEADY_BLOCKS or n_calls < min_reps:
        return False
    best = min(blocks_meds)
    return sum(m <= best * (1 + STEADY_TOL) for m in blocks_meds) >= STEADY_BLOCKS


def steady_blocks(one_block: Callable, block: int, rep_ms: float, max_ms: float,
                   min_reps: int, max_reps: int) -> list[list[float]]:
    """Blocks of `block` calls (one_block(n) -> per-call us) until three agree after
    `rep_ms` (module doc), or `max_ms` / `max_reps` is reached: a CPU's or an eager host's."""
    blocks, meds, n_calls = [], [], 0
    t_start = time.perf_counter()
    while True:
        blocks.append(one_block(block))
        meds.append(statistics.median(blocks[-1]))
        n_calls += block
        elapsed_ms = (time.perf_counter() - t_start) * 1e3
        if elapsed_ms >= rep_ms and steady_enough(meds, n_calls, min_reps):
            return blocks
        if elapsed_ms >= max_ms or n_calls + block > max_reps:
            return blocks
