"""FP8 schemes on the CPU: quantisation round trips, the e4m3fn -> e4m3fnuz conversion,
the FP8 reference catching a wrong scale, and `moe-lab check --dtype fp8-*`."""
import subprocess
import sys

import pytest
import torch

from moe_lab.core import quant
from moe_lab.backends import get
from moe_lab.measuring.correctness import (THRESHOLDS, check_backend, make_inputs, make_weights,
                                 quant_facts, reference)
from moe_lab.core.devices import DEVICE_SPECS, fp8_format_for
from moe_lab.core.problems import make_problem
from moe_lab.cost.roofline import cost

SCHEMES = quant.SCHEMES
# a shape with partial 128-blocks in both dimensions
W_SHAPE = (3, 200, 300)


def _weights(shape=W_SHAPE, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g) * 0.05
    w[0, 5, :] *= 40  # one loud row: per-channel and block scales differ from per-tensor
    return w


def _within_one_quantum(deq, ref, scale_full, fmt):
    """|deq - ref| <= one fp8 quantum at ref's scaled magnitude, in real units."""
    q = quant.quantum(ref / scale_full, fmt) * scale_full
    return bool(((deq - ref).abs() <= q + 1e-12).all())


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("fmt", ["e4m3fn", "e4m3fnuz"])
def test_weight_round_trip_within_one_quantum(scheme, fmt):
    w = _weights()
    q, s = quant.quantize_weight(w, scheme, fmt)
    assert q.dtype == quant.FORMATS[fmt] and s.dtype == torch.float32
    E, N, K = W_SHAPE
    assert tuple(s.shape) == {"fp8-tensor": (E,), "fp8-channel": (E, N),
                              "fp8-block128": (E, 2, 3)}[scheme]
    full = quant.expand_weight_scale(s, scheme, w.shape)
    deq = quant.dequantize_weight(q, s, scheme)
    assert _within_one_quantum(deq, w, full, fmt)
    # the largest value of each scale group lands on the format's max
    assert q.float().abs().max().item() == quant.fp8_max(fmt)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_activation_round_trip_within_one_quantum(scheme):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(7, 300, generator=g) * torch.logspace(-2, 1, 7)[:, None]).to(torch.bfloat16)
    q, s = quant.quantize_act(x, "fp8-" + scheme.split("-")[1], "e4m3fn")
    assert tuple(s.shape) == {"fp8-tensor": (1,), "fp8-channel": (7, 1),
                              "fp8-block128": (7, 3)}[scheme]
    full = quant.expand_act_scale(s, scheme, x.shape)
    assert _within_one_quantum(quant.dequantize_act(q, s, scheme), x.float(), full, "e4m3fn")


def test_per_token_scales_follow_each_token():
    """fp8-channel: a quiet token keeps its precision next to a loud one (per-tensor does not)."""
    x = torch.stack([torch.full((256,), 1e-3), torch.full((256,), 100.0)])
    x[0, 0] = 1.1e-3
    tok = quant.fake_quant_act(x, "fp8-channel", "e4m3fn", torch.float32)
    ten = quant.fake_quant_act(x, "fp8-tensor", "e4m3fn", torch.float32)
    rel = lambda y: ((y[0] - x[0]).abs() / x[0]).max().item()  # noqa: E731
    assert rel(tok) <= 2 ** -4  # half an fp8 quantum: 3 mantissa bits
    assert rel(ten) > 0.1  # in the subnormals of the loud token's scale


@pytest.mark.parametrize("scheme", SCHEMES)
def test_fn_to_fnuz_keeps_values_and_doubles_scales(scheme):
    w = _weights()
    q, s = quant.quantize_weight(w, scheme, "e4m3fn")
    q[0, 0, 0] = -0.0  # 0x80: -0 in fn, NaN in fnuz
    qz, sz = quant.fn_to_fnuz(q, s)
    assert qz.dtype == torch.float8_e4m3fnuz
    assert torch.equal(sz, s * 2)
    before = quant.dequantize_weight(q, s, scheme)
    after = quant.dequantize_weight(qz, sz, scheme)
    assert torch.isfinite(after).all()
    full = quant.expand_weight_scale(s, scheme, w.shape)
    assert _within_one_quantum(after, before, full, "e4m3fn")
    assert torch.equal(after, before)  # exact, in fact: same bits, twice the scale
    # the bits alone, without the doubled scale, read as half: what the test guards
    stale = quant.dequantize_weight(qz, s, scheme)
    nz = before.abs() > 0
    assert torch.allclose(stale[nz] / before[nz], torch.full_like(stale[nz], 0.5))


def test_fnuz_weights_stay_within_240():
    qw = quant.quantize_weights(_weights(), _weights(seed=1).transpose(1, 2).contiguous(),
                                "fp8-channel", "e4m3fnuz")
    assert qw.w1.dtype == torch.float8_e4m3fnuz
    assert qw.w1.float().abs().max().item() <= 240.0
    assert quant.fp8_max("e4m3fn") == 448.0 and quant.fp8_max("e4m3fnuz") == 240.0


def test_device_fp8_formats():
    assert {k: v.fp8_format for k, v in DEVICE_SPECS.items()} == {
        "mi300x": "e4m3fnuz", "mi325x": "e4m3fnuz", "mi355x": "e4m3fn",
        "h100-sxm": "e4m3fn", "h200-sxm": "e4m3fn", "b200": "e4m3fn"}
    assert fp8_format_for("NVIDIA H200") == "e4m3fn"
    assert fp8_format_for("AMD Instinct MI300X") == "e4m3fnuz"
    assert fp8_format_for("cpu") == "e4m3fn"


# --- the reference and the check -------------------------------------------------------

SMALL = "custom:H=512,I=256,E=16,k=4"  # 128-divisible, several experts, quick on a CPU


def _point(scheme, model=SMALL, tokens=8, tp=1, ep=1):
    p = make_problem(model, tokens, scheme, tp, ep)
    w = make_weights(p, "cpu", 3)
    inp = make_inputs(p, "cpu", 11)
    return p, w, inp, reference(p, w, inp)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_fp8_backend_passes_and_a_wrong_scale_fails(scheme):
    p, w, inp, ref = _point(scheme)
    be = get("torch-fp8-dequant")
    good = check_backend(be, p, w, inp, ref, "cpu")
    assert good["status"] == "ok", good
    assert good["threshold"] == THRESHOLDS[scheme]
    qw = w.quant
    for bad in (quant.QuantWeights(scheme, qw.fmt, qw.w1, qw.w1_scale * 2, qw.w2, qw.w2_scale),
                # e4m3fn bits read as e4m3fnuz, scales NOT doubled: every weight halves
                quant.QuantWeights(scheme, "e4m3fnuz", *(
                    t.view(torch.int8).view(torch.float8_e4m3fnuz) if t.dtype.itemsize == 1 else t
                    for t in (qw.w1, qw.w1_scale, qw.w2, qw.w2_scale)))):
        w.quant = bad
        row = check_backend(be, p, w, inp, ref, "cpu")
        assert row["status"] == "incorrect", row
        assert row["max_rel_err"] > 3 * THRESHOLDS[scheme]
    w.quant = qw


def test_reference_isolates_kernel_error_from_quantisation_error():
    p, w, inp, ref = _point("fp8-channel")
    facts = quant_facts(p, w, inp, ref)
    assert facts["fp8_format"] == "e4m3fn"
    assert 1e-3 < facts["quant_err"] < 0.2  # fp8 is measurably off the bf16 layer
    row = check_backend(get("torch-fp8"), p, w, inp, ref, "cpu")
    # an fp8 GEMM with fp32 accumulation on the same fp8 operands: kernel error only,
    # far below what quantisation itself costs
    assert row["status"] == "ok" and row["max_rel_err"] < 0.01 < facts["quant_err"]
    bf = make_problem(SMALL, 8, "bf16", 1, 1)
    assert quant_facts(bf, make_weights(bf, "cpu", 3), inp, ref)["fp8_format"] == ""


@pytest.mark.parametrize("model,ep", [(SMALL, 8),
                                      ("custom:H=256,I=256,E=4,k=1,router=llama4", 1)])
def test_fp8_under_ep_and_weight_on_input(model, ep):
    p, w, inp, ref = _point("fp8-tensor", model, tokens=5, tp=ep if ep > 1 else 1, ep=ep)
    row = check_backend(get("torch-fp8"), p, w, inp, ref, "cpu")
    assert row["status"] == "ok", row


def test_bf16_backends_refuse_fp8_points():
    p, w, inp, ref = _point("fp8-block128")
    for name in ("torch", "torch-grouped"):
        row = check_backend(get(name), p, w, inp, ref, "cpu")
        assert row["status"] == "unsupported" and "fp8-block128" in row["error"]


def test_fp8_roofline_bytes_and_peak():
    bf = cost(make_problem("deepseek-r1", 4096, "bf16", 8, 1))
    f8 = cost(make_problem("deepseek-r1", 4096, "fp8-block128", 8, 1))
    assert f8.flops == bf.flops and f8.act_bytes == bf.act_bytes
    H, I = 7168, 256
    per_expert = 3 * H * I + 4 * ((2 * I // 128) * (H // 128) + (H // 128) * (I // 128))
    assert f8.weight_bytes == pytest.approx(f8.experts_hit * per_expert)
    from moe_lab.cost.roofline import peak_tflops, roof_basis
    spec = DEVICE_SPECS["h200-sxm"]
    assert peak_tflops(spec, "fp8-channel") == spec.fp8_tflops
    assert "fp8 1979" in roof_basis(spec, "fp8-tensor")


# --- the command line ---------------------------------------------------------------------

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "moe_lab", *args], capture_output=True,
                          text=True, timeout=600)


def test_check_fp8_on_cpu_exits_0():
    r = _cli("check", "--model", "custom:H=256,I=256,E=4,k=2", "--tokens", "1,9", "--tp", "1",
             "--dtype", "fp8-channel", "--backends", "torch-fp8,torch-fp8-dequant,torch",
             "--seed", "5")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("custom")]
    assert sum("PASS" in ln for ln in lines) == 4
    assert sum(" torch " in ln for ln in lines) == 2  # torch's line at each token count
    assert all("unsupported" in ln for ln in lines if " torch " in ln)


def test_bad_dtype_is_one_line_exit_2():
    r = _cli("check", "--dtype", "fp8-row")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "fp8-row" in r.stderr


def test_profile_of_an_fp8_call_has_quant_and_both_gemms():
    """torch-fp8 runs every gemm1 before any gemm2 and quantises in PyTorch: its
    moe_lab.<phase> ranges give the phases (kernels inside them on a GPU get the prefix)."""
    from moe_lab.measuring.profiling import classify_sequence, phase_table, profile_kernels
    p = make_problem("custom:H=256,I=256,E=4,k=2", 8, "fp8-channel", 1, 1)
    w, inp = make_weights(p, "cpu", 1), make_inputs(p, "cpu", 3)
    df = profile_kernels(get("torch-fp8").prepare(p, w), inp.args(), iters=1, device="cpu")
    t = phase_table(df).set_index("phase")
    assert {"quant", "gemm1", "gemm2"} <= set(t.index)
    assert t.loc["gemm1", "calls"] == t.loc["gemm2", "calls"] == 4  # one per expert each
    # GPU names: three gemm1 launches then three gemm2 launches keep their phases
    names = ["moe_lab.gemm1/nvjet_a"] * 3 + ["moe_lab.quant/reduce_kernel<MaxOps>"] + \
        ["moe_lab.gemm2/nvjet_a"] * 3
    assert classify_sequence(names) == ["gemm1"] * 3 + ["quant"] + ["gemm2"] * 3


def test_default_backend_lists_follow_the_dtype():
    from moe_lab import backends
    fp8_only = {"torch-fp8", "torch-fp8-dequant", "torch-fp8-grouped"}
    assert not fp8_only & set(backends.for_dtype(backends.names(), "bf16"))
    assert fp8_only <= set(backends.for_dtype(backends.names(), "fp8-block128"))
    assert "torch" in backends.for_dtype(backends.names(), "fp8-tensor")  # an unsupported row


def test_aiter_triton_says_why_it_has_no_fp8_channel():
    ok, why = get("aiter-triton").supports(make_problem("llama4-scout-16e", 4, "fp8-channel", 8, 1),
                                           "cuda")
    assert not ok and "one weight scale per expert" in why
    assert get("aiter-triton").supports(make_problem("deepseek-r1", 4, "fp8-block128", 8, 1),
                                        "cuda")[0]


def test_fp8_compile_modes_are_refused_before_anything_runs():
    import moe_lab as ml
    from moe_lab.core.errors import UsageError
    with pytest.raises(UsageError, match="compile modes measure the bf16 layer"):
        ml.measure([SMALL], [1], backends=["torch-fp8"], modes="compile:default",
                   dtype="fp8-tensor", tp=1)
    r = _cli("sweep", "--device", "cpu", "--models", SMALL, "--tp", "1", "--dtype", "fp8-tensor",
             "--modes", "eager,compile:default", "--tokens", "1")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_scaled_mm_probe_checks_the_numbers(monkeypatch):
    """A scaled matmul that runs but reads the scales wrongly is not `supported`."""
    from moe_lab.backends import torch_fp8
    real = torch._scaled_mm
    torch_fp8.scaled_mm_probe.cache_clear()
    monkeypatch.setattr(torch, "_scaled_mm", lambda a, b, sa, sb, **kw: real(a, b, sa, sa.new_ones(
        sb.shape) if sb.numel() > 1 else sb * 0 + 1, **kw))
    ok, why, _ = torch_fp8.scaled_mm_probe("fp8-channel", "cpu", "e4m3fn")
    assert not ok and "wrong numbers" in why
    monkeypatch.setattr(torch, "_scaled_mm", real)
    torch_fp8.scaled_mm_probe.cache_clear()
    assert torch_fp8.scaled_mm_probe("fp8-channel", "cpu", "e4m3fn")[0]
