"""Timers: quantiles, noise flag, a real CPU timing, capture-failure reasons; GPU paths on CUDA."""
import math

import pytest
import torch

from moe_lab.measuring import timing
from moe_lab.measuring.timing import CaptureError, Timing, capture_reason, summarize, time_cpu


def test_summarize_quantiles_match_numpy_linear():
    xs = [float(v) for v in range(1, 101)]  # 1..100
    t = summarize(xs)
    assert t.median_us == pytest.approx(50.5)
    assert t.p10_us == pytest.approx(10.9)
    assert t.p90_us == pytest.approx(90.1)
    assert t.n == 100
    assert t.noisy  # (90.1 - 10.9) / 50.5 is far above 10 %
    assert "noisy" in t.note


def test_summarize_steady_times_are_not_noisy_and_order_does_not_matter():
    xs = [10.0, 10.2, 9.9, 10.1, 10.05, 9.95, 10.0, 10.1, 9.9, 10.0, 10.02]
    t = summarize(list(reversed(xs)))
    assert not t.noisy
    assert t.p10_us <= t.median_us <= t.p90_us
    assert t.note == ""


def test_summarize_edge_cases():
    t = summarize([5.0])
    assert (t.median_us, t.p10_us, t.p90_us, t.n) == (5.0, 5.0, 5.0, 1)
    assert "only 1" in t.note
    with pytest.raises(ValueError):
        summarize([])
    assert summarize([0.0, 0.0]).noisy is True  # zero median: spread undefined, flagged


def test_time_cpu_real_function():
    a = torch.randn(128, 128)
    b = torch.randn(128, 128)
    t = time_cpu(lambda x, y: x @ y, [(a, b), (b, a)], warmup_ms=2, rep_ms=20)
    assert isinstance(t, Timing)
    assert t.n >= 5
    assert 0 < t.p10_us <= t.median_us <= t.p90_us < 1e6
    assert "cpu" in t.note


def test_time_cpu_wall_clock_sees_a_known_sleep():
    import time
    t = time_cpu(lambda: time.sleep(0.002), [()], warmup_ms=1, rep_ms=30, min_reps=5,
                 clock="wall")
    # a sleep is never shorter; the upper bound only catches a unit slip (ns read as us:
    # 2e6), not a busy machine (was < 50_000: a 25x-slow scheduler failed it)
    assert 1900 < t.median_us < 1_000_000


def _spin(s):
    import time
    t0 = time.thread_time()
    while time.thread_time() - t0 < s:
        pass


def test_time_cpu_thread_clock_counts_work_not_waiting():
    """The default CPU clock is the thread's: 2 ms of computing is 2 ms however busy the
    machine; a 2 ms sleep (waiting for a core looks the same) is not counted."""
    import time
    work = time_cpu(_spin, [(0.002,)], warmup_ms=1, rep_ms=30, min_reps=5)
    slept = time_cpu(lambda: time.sleep(0.002), [()], warmup_ms=1, rep_ms=30, min_reps=5)
    assert 1999 < work.median_us < 1_000_000
    assert slept.median_us < 1000
    assert "thread's CPU time" in work.note


def test_time_cpu_holds_torch_to_one_thread_and_restores_it():
    import torch
    was, seen = torch.get_num_threads(), set()
    time_cpu(lambda: seen.add(torch.get_num_threads()), [()], warmup_ms=0.01, rep_ms=0.01,
             min_reps=3, max_reps=6)
    assert seen == {1} and torch.get_num_threads() == was


def test_time_cpu_refuses_an_unknown_clock():
    with pytest.raises(ValueError, match="clock"):
        time_cpu(lambda: None, [()], clock="sundial")


def test_time_cpu_rotates_argument_sets():
    seen = []
    time_cpu(lambda i: seen.append(i), [(0,), (1,), (2,)], warmup_ms=0.01, rep_ms=0.01,
             min_reps=6, max_reps=6)
    assert {0, 1, 2} <= set(seen)


def test_time_fn_on_cpu_uses_perf_counter():
    t = timing.time_fn("graph", lambda: None, [()], device="cpu", warmup_ms=1, rep_ms=2)
    assert t.n > 0 and "cpu" in t.note
    with pytest.raises(ValueError):
        timing.time_fn("bogus", lambda: None, [()], device="cuda")


def test_empty_arg_sets_rejected():
    with pytest.raises(ValueError):
        time_cpu(lambda: None, [])


def test_capture_reason_reports_the_original_error_first():
    try:
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
    except RuntimeError as exc:
        reason = capture_reason(exc)
    first, _, second = reason.partition(" <- then: ")
    assert "not permitted when stream is capturing" in first
    assert "previous error" in second
    assert "\n" not in reason


def test_flush_buffer_is_larger_than_any_l2():
    assert timing.flush_bytes() >= 256 << 20


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@cuda
def test_gpu_eager_and_graph_time_a_matmul():
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    sets = [(a.clone(), a.clone()) for _ in range(2)]
    e = timing.time_eager(torch.matmul, sets, warmup_ms=5, rep_ms=20)
    g = timing.time_graph(torch.matmul, sets, warmup_ms=5, rep_ms=20)
    assert e.n >= 10 and g.n >= 10
    assert 0 < g.median_us and 0 < e.median_us
    assert g.median_us <= e.median_us * 1.2  # no launch overhead in graph replay


@cuda
def test_gpu_graph_capture_failure_is_a_capture_error():
    x = torch.arange(8, device="cuda")

    def syncs(v):
        return torch.tensor((v + 1).tolist(), device="cuda")
    with pytest.raises(CaptureError) as info:
        timing.time_graph(syncs, [(x,)], warmup_ms=1, rep_ms=2)
    assert "captur" in str(info.value).lower()
    # the device still works afterwards
    assert int((x + 1).sum()) == 36
    t = timing.time_eager(syncs, [(x,)], warmup_ms=1, rep_ms=2)
    assert t.n > 0 and not math.isnan(t.median_us)


# --- the eager statistic over blocks (host speed changes) -------------------------------

def test_steady_summary_ignores_blocks_where_the_host_was_slow():
    """Two blocks from a period when the host ran at half speed do not move the eager
    time; the plain median over every call is kept beside it."""
    fast = [[300.0 + (i % 7) for i in range(20)] for _ in range(4)]
    slow = [[600.0 + (i % 7) for i in range(20)] for _ in range(5)]
    t = timing.steady_summary(fast[:2] + slow + fast[2:])
    assert 300 <= t.median_us <= 307 and 300 <= t.p10_us <= t.p90_us <= 307
    assert t.n == 180 and abs(t.steady_frac - 80 / 180) < 1e-9
    assert t.median_all_us > 590  # most calls were slow: the plain median says so
    assert t.noisy and "4/9 blocks steady" in t.note


def test_steady_summary_keeps_blocks_within_tolerance():
    blocks = [[100.0] * 10, [104.0] * 10, [106.0] * 10]
    t = timing.steady_summary(blocks)
    assert t.median_us == 102.0 and t.steady_frac == 2 / 3 and not t.noisy
    with pytest.raises(ValueError):
        timing.steady_summary([[]])


def test_gc_is_paused_inside_timed_loops_and_restored():
    import gc
    assert gc.isenabled()
    with timing.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
