"""moe_lab.measuring.sol.dense_gemm_us: two dense GEMMs with the MoE's rows and FLOPs, timed with
the project's timer (time_cpu here); arithmetic checked with a timer that records what
it was given."""
import math

import pytest
import torch

from moe_lab.core.errors import UsageError
from moe_lab.core.problems import make_problem
from moe_lab.cost.roofline import cost
from moe_lab.measuring.sol import DenseGemm, dense_gemm_flops, dense_gemm_us
from moe_lab.measuring.timing import Timing

SMALL = "custom:H=64,I=32,E=4,k=2"


class RecordingTimer:
    """Returns a fixed time; keeps what it was called with."""

    def __init__(self, us=250.0):
        self.us, self.calls = us, []

    def __call__(self, mode, fn, arg_sets, device):
        self.calls.append((mode, fn, arg_sets, device))
        return Timing(self.us, self.us, self.us, 10, False, "fixed")


def never(*a, **k):
    raise AssertionError("the timer must not be called")


def test_flops_are_the_moe_gemms_flops():
    p = make_problem(SMALL, 3)
    H, I = 64, 32
    assert dense_gemm_flops(p, 6) == 2 * 6 * H * 2 * I + 2 * 6 * I * H == 6 * 6 * H * I == 73_728
    assert dense_gemm_flops(p, 6) == cost(p).flops  # 3 tokens x k=2: 6 pairs
    big = make_problem("deepseek-r1", 64, "bf16", 8, 8)
    assert dense_gemm_flops(big, 64) == cost(big, pairs=64).flops == 6 * 64 * 7168 * 2048


def test_the_timer_gets_the_two_gemms_and_the_rate_is_flops_over_time():
    p = make_problem(SMALL, 3)
    timer = RecordingTimer(250.0)
    r = dense_gemm_us(p, 6, "cpu", timer=timer)
    assert isinstance(r, DenseGemm)
    assert (r.M, r.flops, r.dense_gemm_us) == (6, 73_728.0, 250.0)
    assert r.dense_tflops == 73_728 / 250.0 / 1e6
    assert (r.dtype, r.mode, r.device) == ("bf16", "graph", "cpu")
    assert r.as_dict()["dense_gemm_us"] == 250.0
    (mode, fn, arg_sets, device), = timer.calls
    assert (mode, device, len(arg_sets)) == ("graph", "cpu", 1)
    x, w1, h, w2 = arg_sets[0]
    assert [tuple(t.shape) for t in (x, w1, h, w2)] == [(6, 64), (64, 64), (6, 32), (64, 32)]
    assert all(t.dtype == torch.bfloat16 and (t != 0).all() for t in (x, w1, h, w2))
    a, y = fn(*arg_sets[0])
    assert tuple(a.shape) == (6, 2 * 32) and tuple(y.shape) == (6, 64)
    assert torch.equal(a, x @ w1.t()) and torch.equal(y, h @ w2.t())
    # the same seed draws the same data
    again = RecordingTimer()
    dense_gemm_us(p, 6, "cpu", timer=again)
    assert len(again.calls[0][2][0]) == len(arg_sets[0]) == 4  # zip over none passes
    assert all(torch.equal(u, v) for u, v in zip(arg_sets[0], again.calls[0][2][0]))


def test_timed_for_real_on_the_cpu():
    r = dense_gemm_us(make_problem(SMALL, 3), 6, "cpu")
    assert r.M == 6 and r.dense_gemm_us > 0 and r.dense_tflops > 0
    assert "thread's CPU time" in r.note and "[6, 64] x [64, 64]" in r.note
    r32 = dense_gemm_us(make_problem(SMALL, 3, "fp32"), 5.0, "cpu", mode="eager")
    assert (r32.M, r32.dtype, r32.mode) == (5, "fp32", "eager") and r32.dense_gemm_us > 0


def test_no_pairs_is_zero_us_and_launches_nothing():
    for zero in (0, 0.0):
        r = dense_gemm_us(make_problem(SMALL, 1), zero, "cpu", timer=never)
        assert (r.M, r.flops, r.dense_gemm_us) == (0, 0.0, 0.0)
        assert math.isnan(r.dense_tflops) and "nothing launched" in r.note


@pytest.mark.parametrize("pairs, exc", [
    (-1, ValueError), (1.5, ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError), (True, TypeError), ("6", TypeError), (None, TypeError),
])
def test_bad_pairs_raise(pairs, exc):
    with pytest.raises(exc, match="pairs"):
        dense_gemm_us(make_problem(SMALL, 3), pairs, "cpu", timer=never)


def test_other_bad_input_raises():
    p = make_problem(SMALL, 3)
    with pytest.raises(TypeError, match="Problem"):
        dense_gemm_us(SMALL, 6, "cpu", timer=never)
    with pytest.raises(ValueError, match="mode"):
        dense_gemm_us(p, 6, "cpu", timer=never, mode="fast")
    with pytest.raises(ValueError, match="device"):
        dense_gemm_us(p, 6, "nope", timer=never)
    with pytest.raises(RuntimeError, match="timer returned"):
        dense_gemm_us(p, 6, "cpu", timer=RecordingTimer(0.0))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_a_gpu_device_without_a_gpu_is_a_usage_error():
    with pytest.raises(UsageError, match="no CUDA"):
        dense_gemm_us(make_problem(SMALL, 3), 6, "cuda", timer=never)
