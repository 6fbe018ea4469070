"""moe_lab.glue: every fused glue step against its naive twin on fresh random inputs, a
planted bug in each failing the same comparison, the backends with glue="fused" and
glue="naive" against the reference at EP1 and EP2, the phase each fused kernel lands in,
and the naive fallback (recorded) where a fused kernel cannot run.

The fused kernels (ours and aiter's) run on the CPU through Triton's interpreter
(TRITON_INTERPRET=1, in a subprocess), with two substitutions in the interpreter, both
where it departs from what a GPU does, and checked here:
  * its float downcasts to bf16 and fp8 are not round-to-nearest-even (fp32 -> bf16 is
    truncated; a rounding carry is OR-ed into the exponent, so e.g. 126.4 -> 64 in
    e4m3fn): they go through torch's conversion instead (saturating, as the GPU's
    `cvt.rn.satfinite`); `conversion_matches_torch` below checks the patched one;
  * it checks `tl.assume` as an assertion; aiter's per-token and per-tensor quantisers
    assume `pid > 0`, false for program 0 (on a GPU an assume is a compiler hint).
fp16 for the bf16 paths, as tests/test_aiter_triton_interpreted.py does; fp8 schemes keep
their bf16 activations (the patched conversion makes the interpreter's bf16 exact)."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moe_lab import backends
from moe_lab.core import glue
from moe_lab.measuring.correctness import THRESHOLDS, make_inputs, make_weights, reference, rel_err
from moe_lab.core.problems import make_problem
from moe_lab.measuring.profiling import PHASE_RANGES, classify, classify_sequence

ROOT = Path(__file__).resolve().parent.parent
triton_missing = pytest.mark.skipif(glue.triton is None, reason="triton is not installed")

PRELUDE = r"""
import json, sys
import numpy as np, torch
from triton.runtime import interpreter as _ti
from triton._C.libtriton import ir as _ir
_orig_convert = _ti._convert_float
_TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
          "fp8e4nv": torch.float8_e4m3fn, "fp8e4b8": torch.float8_e4m3fnuz}
_INT = {32: (np.int32, torch.int32), 16: (np.int16, torch.int16), 8: (np.uint8, torch.uint8)}

def _convert_rtne(input, input_dtype, output_dtype, rounding_mode):
    src, dst = _TORCH.get(str(input_dtype)), _TORCH.get(str(output_dtype))
    down = output_dtype.primitive_bitwidth < input_dtype.primitive_bitwidth
    if src is None or dst is None or not down or rounding_mode not in (None, _ir.ROUNDING_MODE.RTNE):
        return _orig_convert(input, input_dtype, output_dtype, rounding_mode)
    npi, _ = _INT[input_dtype.primitive_bitwidth]
    npo, to = _INT[output_dtype.primitive_bitwidth]
    t = torch.from_numpy(np.frombuffer(input.tobytes(), dtype=npi).copy()).view(src).float()
    if dst.itemsize == 1:  # saturate finite values, as the GPU's cvt.rn.satfinite
        m = torch.finfo(dst).max
        t = torch.where(t.isnan(), t, t.clamp(-m, m))
    return t.to(dst).view(to).numpy().view(npo).reshape(input.shape)

_ti._convert_float = _convert_rtne
_ti.InterpreterBuilder.create_assume = lambda self, cond: None

import triton.language as tl
def conversion_check():
    v = (torch.randn(4096) * 64).float()
    out = {}
    for name, tt, dt in (("e4m3fn", tl.float8e4nv, torch.float8_e4m3fn),
                         ("e4m3fnuz", tl.float8e4b8, torch.float8_e4m3fnuz),
                         ("bf16", tl.bfloat16, torch.bfloat16)):
        c = v.clamp(-torch.finfo(dt).max, torch.finfo(dt).max)
        want = c.to(dt).view(torch.uint8 if dt.itemsize == 1 else torch.int16).numpy()
        got = _convert_rtne(c.numpy(), tl.float32, tt, None)
        bad = _orig_convert(c.numpy(), tl.float32, tt, _ir.ROUNDING_MODE.RTNE if dt.itemsize == 1 else None)
        out[name] = [int((got.view(want.dtype) != want).sum()), int((bad.view(want.dtype) != want).sum())]
    return out
"""

FUNCTIONS = PRELUDE + r"""
import torch.nn.functional as F
from moe_lab.core import glue, quant

def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))

def quant_gap(q, s, qr, sr, scheme, fmt):
    # (max |dequantised difference| in units of the reference's fp8 quantum,
    #  max relative difference of the scales)
    d, dr = quant.dequantize_act(q, s, scheme), quant.dequantize_act(qr, sr, scheme)
    step = quant.quantum(qr.float(), fmt) * quant.expand_act_scale(sr, scheme, qr.shape)
    steps = float(((d - dr).abs() / step).max())
    return steps, float((s / sr - 1).abs().max())

out = {"conversion": conversion_check()}
torch.manual_seed(int(sys.argv[1]))
# act: a row stride wider than 2I (a view of a wider buffer), I not a power of two
for dt in ("fp16", "fp32"):
    d = getattr(torch, {"fp16": "float16", "fp32": "float32"}[dt])
    I = 96
    g = torch.randn(37, 2 * I + 8, dtype=d)[:, 4:4 + 2 * I]
    ref = glue.silu_mul_naive(g, I)
    out[f"act {dt}"] = rel(glue.silu_mul_fused(g, I), ref)
    swapped = torch.cat([g[:, I:], g[:, :I]], 1)  # planted bug: gate and up swapped
    out[f"act {dt} bug"] = rel(glue.silu_mul_fused(swapped, I), ref)
# combine: c2 [T, k, H] as a non-contiguous view, k = 3 and 8
for k in (3, 8):
    c2 = torch.randn(9, 200, k, dtype=torch.float16).transpose(1, 2)
    ref = glue.combine_naive(c2)
    out[f"combine k={k}"] = rel(glue.combine_fused(c2), ref)
    out[f"combine k={k} bug"] = rel(glue.combine_fused(c2[:, 1:]), ref)  # one slot lost
one = torch.randn(5, 1, 64, dtype=torch.float16)
out["combine k=1 is a view"] = glue.combine_fused(one).data_ptr() == one.data_ptr()
# x-quant, every scheme and format (fp8-block128 by both group kernels, and a ragged
# width for ours); fp16 and bf16 inputs
CASES = [(s, impl, 384) for s, impl in (("fp8-block128", "moe_lab"), ("fp8-block128", "aiter"),
                                        ("fp8-channel", "aiter"), ("fp8-tensor", "aiter"))]
CASES.append(("fp8-block128", "moe_lab", 200))
for fmt in ("e4m3fn", "e4m3fnuz"):
    for scheme, impl, K in CASES:
        for dt in (torch.float16, torch.bfloat16):
            x = torch.randn(13, K, dtype=dt) * 3
            x[2, :128] = 0  # an all-zero group: both give zeros
            qr, sr = glue.quantize_act_naive(x, scheme, fmt)
            q, s = glue.quantize_act_fused(x, scheme, fmt, impl)
            key = f"quant {scheme} {impl} K={K} {fmt} {dt}"
            live = sr > 1e-9  # the all-zero group's clamp differs (1e-10 vs 1e-12 / max)
            out[key] = list(quant_gap(q, torch.where(live, s, sr), qr, sr, scheme, fmt)) + [
                list(q.shape) == list(qr.shape) and list(s.shape) == list(sr.shape)
                and s.dtype == sr.dtype and q.dtype == qr.dtype]
            out[key + " bug"] = list(quant_gap(q, s * 2, qr, sr, scheme, fmt))  # a scale off by 2x
# act + quant (fp8-block128, gemm2's input): against moe_lab.quant of the fp32 product
# (the same numbers aiter's kernel quantises) and of the fp16/bf16 product (the naive step)
for fmt in ("e4m3fn", "e4m3fnuz"):
    for impl, I in (("moe_lab", 256), ("aiter", 256), ("moe_lab", 192)):
        for dt in (torch.float16, torch.bfloat16):
            g = torch.randn(21, 2 * I + 8, dtype=dt)[:, 8:] * 2  # a wider row stride
            q, s = glue.silu_mul_quant_fused(g, I, "fp8-block128", fmt, impl)
            a32 = F.silu(g[:, :I].float()) * g[:, I:].float()
            qr, sr = quant.quantize_act(a32, "fp8-block128", fmt)
            qn, sn = glue.silu_mul_quant_naive(g, I, "fp8-block128", fmt)
            key = f"act_quant {impl} I={I} {fmt} {dt}"
            n_groups = -(-I // 128)
            out[key] = list(quant_gap(q, s, qr, sr, "fp8-block128", fmt)) + [
                list(s.shape) == [21, n_groups] and s.stride() == (n_groups, 1)]
            out[key + " vs naive"] = list(quant_gap(q, s, qn, sn, "fp8-block128", fmt))
            swapped = torch.cat([g[:, I:], g[:, :I]], 1)
            out[key + " bug"] = list(quant_gap(*glue.silu_mul_quant_fused(
                swapped, I, "fp8-block128", fmt, impl), qr, sr, "fp8-block128", fmt))
print(json.dumps(out))
"""

BACKENDS = PRELUDE + r"""
import torch.nn.functional as F
import moe_lab.backends as registry
from moe_lab.core import glue, quant
from moe_lab.core.problems import make_problem
from moe_lab.measuring.correctness import make_weights, make_inputs, reference, rel_err, unquantized_reference
from moe_lab.backends.torch_fp8_grouped import grouped_fp8_fn
from moe_lab.measuring.profiling import profile_kernels

# The interpreter's cost is per program and per step, not per element: tiles as wide as
# the shapes (fewer GEMM programs), and our align's chunk sort at 16 pairs, not 256 (its
# bitonic sort costs log2(chunk)^2 steps; these points route at most 14 pairs: one chunk
# either way; tests/test_align.py runs the align at the GPU's 256)
from moe_lab.core import align as _align
_align.ALIGN_MIN_CHUNK = 16

def tiles(bk):
    return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128 if bk == 128 else 64, "BLOCK_SIZE_K": bk,
            "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 1}

from stand_ins import scaled_grouped_mm as stand_in_mm  # rows past the last group: NaN

def run(name, model, dtype, ep, tokens, g, bug=None):
    p = make_problem(model, tokens, dtype, ep, ep, 0)
    w = make_weights(p, "cpu", 11)
    inp = make_inputs(p, "cpu", 12 + tokens)
    ref = reference(p, w, inp)
    if name == "torch-fp8-grouped":
        fn = grouped_fp8_fn(p, w.quant, w.expert_map, mm=stand_in_mm, glue=g)
    elif name.startswith("aiter"):
        fn = registry.get(name).prepare(p, w, {"gemm1": tiles(128 if p.is_fp8 else 32),
                                                "gemm2": tiles(128 if p.is_fp8 else 32)}, glue=g)
    else:
        fn = registry.get(name).prepare(p, w, glue=g)
    got = fn(*inp.args())
    # fp8: also against the layer on the unquantised weights and activations
    true_err = rel_err(got, unquantized_reference(p, w, inp)) if p.is_fp8 else None
    return rel_err(got, ref), fn.glue_used, fn.glue.used, fn, inp, true_err

PLAIN, FP8 = "custom:H=64,I=32,E=8,k=2", "custom:H=256,I=128,E=4,k=2"
LLAMA = "custom:H=256,I=128,E=4,k=1,router=llama4"
RAGGED = "custom:H=256,I=192,E=4,k=2"
out = {"conversion": conversion_check(), "points": []}
for name, model, dtype in (("aiter-triton", PLAIN, "fp16"), ("aiter-triton-silu", PLAIN, "fp16"),
                           ("aiter-triton", FP8, "fp8-block128"), ("aiter-triton", FP8, "fp8-tensor"),
                           ("torch-grouped", PLAIN, "fp32"), ("torch-grouped-bmm", PLAIN, "fp32"),
                           ("torch-fp8-grouped", FP8, "fp8-channel"),
                           ("torch-fp8-grouped", FP8, "fp8-tensor")):
    for ep in (1, 2):
        for g in glue.GLUES:
            err, used, steps, _, _, true_err = run(name, model, dtype, ep, 7, g)
            out["points"].append([name, dtype, ep, g, err, used, steps, true_err])
for name, dtype in (("aiter-triton", "fp8-block128"), ("torch-fp8-grouped", "fp8-channel")):
    for g in glue.GLUES:
        err, used, steps, _, _, true_err = run(name, LLAMA, dtype, 1, 6, g)
        out["points"].append([name, dtype + " llama4", 1, g, err, used, steps, true_err])
# I = 192: a ragged last group, which our group kernels take
for g in glue.GLUES:
    err, used, steps, _, _, true_err = run("aiter-triton", RAGGED, "fp8-block128", 1, 7, g)
    out["points"].append(["aiter-triton", "fp8-block128 I=192", 1, g, err, used, steps, true_err])
# aiter's own 1x128 group kernels (GROUP_QUANT = "aiter"), EP1 and EP2
glue.GROUP_QUANT = "aiter"
for ep in (1, 2):
    err, used, steps, fn, _, true_err = run("aiter-triton", FP8, "fp8-block128", ep, 7, "fused")
    out["points"].append(["aiter-triton", "fp8-block128 aiter-groups", ep, "fused", err, used,
                          steps, true_err])
    out[f"aiter groups ep={ep} kernels"] = fn.glue.kernels
err, used, steps, fn, _, true_err = run("aiter-triton", RAGGED, "fp8-block128", 1, 7, "fused")
out["aiter groups ragged"] = [err, fn.glue.used, fn.glue.notes]
glue.GROUP_QUANT = "moe_lab"

# an interpreter whose fp8 conversion is wrong (Triton's own): the fp8 steps go naive
assert glue.interpreter_rounds_fp8()
_ti._convert_float = _orig_convert
G = glue.Glue("fused", "cpu", steps=("quant", "act_quant", "combine"), scheme="fp8-block128")
out["unpatched interpreter"] = [glue.interpreter_rounds_fp8(), G.used, G.notes]
_ti._convert_float = _convert_rtne

# planted bugs inside the backend's fused glue: the backend check must fail
real_act, real_aq = glue.silu_mul_fused, glue.silu_mul_quant_fused
glue.silu_mul_fused = lambda g, i: real_act(torch.cat([g[:, i:], g[:, :i]], 1), i)
out["bug act"] = run("aiter-triton", PLAIN, "fp16", 1, 7, "fused")[0]
glue.silu_mul_fused = real_act
def doubled(*a):
    q, s = real_aq(*a)
    return q, s * 2
glue.silu_mul_quant_fused = doubled
out["bug act_quant"] = run("aiter-triton", FP8, "fp8-block128", 2, 7, "fused")[0]
glue.silu_mul_quant_fused = real_aq

# where each step's time goes: the CPU profile of one call (top-level ops per phase)
for g in glue.GLUES:
    fn, inp = run("aiter-triton", FP8, "fp8-block128", 1, 7, g)[3:5]
    df = profile_kernels(fn, inp.args(), iters=1, device="cpu")
    out[f"profile {g}"] = [[k, ph] for k, ph in zip(df["kernel"], df["phase"])]
print(json.dumps(out))
"""


def _interpreted(script: str, *args) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1",
               PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    p = subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"the interpreted run died (rc {p.returncode}): {p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def functions():
    return _interpreted(FUNCTIONS, 5)


@pytest.fixture(scope="module")
def backend_points():
    from moe_lab.backends.aiter_triton import aiter_root
    if aiter_root() is None:
        pytest.skip("amd-aiter is not installed")
    return _interpreted(BACKENDS)


# --- the variants, declared ----------------------------------------------------------------

def test_the_variants_and_the_default():
    assert glue.GLUES == ("fused", "naive", "aiter") and glue.DEFAULT == "fused"
    for g in glue.GLUES:
        assert glue.check(g) == g
    with pytest.raises(ValueError, match="fused, naive, aiter"):
        glue.check("compiled")
    # "aiter" is the fused variant with aiter's group kernels: the A/B of the default's choice
    G = glue.Glue("aiter", "cpu", steps=("act",))
    assert (G.variant, G.group_quant) == ("aiter", "aiter")
    assert glue.Glue("fused", "cpu", steps=("act",)).group_quant == glue.GROUP_QUANT


OFFERING = ["aiter-triton", "aiter-triton-silu", "torch-grouped", "torch-grouped-bmm",
            "torch-fp8-grouped"]


def test_backends_declare_their_glues_and_take_glue_in_prepare():
    for name in backends.names():
        cls = backends.backend_class(name)
        if name in OFFERING:
            assert cls.glues == glue.GLUES, name  # fused first: the default
            param = inspect.signature(cls.prepare).parameters.get("glue")
            assert param is not None and param.default == "fused", name
        else:
            assert cls.glues == (), name
    assert backends.backend_class("torch").glues == ()
    # a tunable one keeps config=
    assert "config" in inspect.signature(backends.backend_class("aiter-triton").prepare).parameters


# --- the fallback where Triton cannot run (recorded) -----------------------------------------

def test_on_a_cpu_without_the_interpreter_torch_grouped_runs_the_naive_glue_and_says_so():
    if glue.interpreted():
        pytest.skip("this process runs Triton's interpreter")
    p = make_problem("custom:H=48,I=40,E=8,k=2", 5, "bf16", 4, 4, 1)
    w, inp = make_weights(p, "cpu", 0), make_inputs(p, "cpu", 1)
    be = backends.get("torch-grouped")
    fused, naive = be.prepare(p, w, glue="fused"), be.prepare(p, w, glue="naive")
    assert fused.glue_used == naive.glue_used == "naive" and be.glue_used == "naive"
    assert "GPU" in fused.glue.notes["act"] and not naive.glue.notes
    assert torch.equal(fused(*inp.args()), naive(*inp.args()))
    assert rel_err(fused(*inp.args()), reference(p, w, inp)) < THRESHOLDS["bf16"]
    with pytest.raises(ValueError, match="glue must be one of"):
        be.prepare(p, w, glue="fast")


@triton_missing
def test_ragged_groups_run_our_group_kernels_and_fall_back_from_aiters_with_the_reason():
    if not glue.aiter_glue_status()[0]:
        pytest.skip("amd-aiter is not installed")
    kw = dict(steps=("quant", "act_quant", "combine"), scheme="fp8-block128", hidden=200,
              inter=192)
    ours = glue.Glue("fused", "cuda", **kw)
    assert ours.group_quant == glue.GROUP_QUANT == "moe_lab"
    assert set(ours.used.values()) == {"fused"} and not ours.notes
    G = glue.Glue("fused", "cuda", group_quant="aiter", **kw)
    assert G.used == {"quant": "naive", "act_quant": "naive", "combine": "fused"}
    assert "200 columns" in G.notes["quant"] and "192 columns" in G.notes["act_quant"]
    # the act of act_quant is still our one kernel; only its quantisation is naive
    assert G.kernels["act_quant"][0] == glue.kernel_name(glue.KERNELS["act"])
    assert G.glue_used == "fused"
    ok = glue.Glue("fused", "cuda", group_quant="aiter", steps=("quant", "act_quant"),
                   scheme="fp8-block128", hidden=7168, inter=256)
    assert ok.used == {"quant": "fused", "act_quant": "fused"} and not ok.notes
    with pytest.raises(ValueError, match="group_quant"):
        glue.Glue("fused", "cuda", group_quant="vllm", **kw)


# --- phases ------------------------------------------------------------------------------

@triton_missing
def test_every_fused_kernel_is_classified_into_its_step_phase():
    if not glue.aiter_glue_status()[0]:
        pytest.skip("amd-aiter is not installed")
    act, ffq, aq = glue.aiter_glue()
    kernel_mods = [sys.modules[m.__name__.replace("aiter.ops.triton.", "aiter.ops.triton._triton_kernels.")]
                   for m in (act, ffq, aq)]
    for scheme, impl in (("fp8-block128", "moe_lab"), ("fp8-block128", "aiter"),
                         ("fp8-channel", "aiter"), ("fp8-tensor", "aiter")):
        steps = ("act", "act_quant", "quant", "combine") if scheme == "fp8-block128" else \
            ("act", "quant", "combine")
        G = glue.Glue("fused", "cuda", steps=steps, scheme=scheme, hidden=256, inter=256,
                      group_quant=impl)
        assert set(G.used.values()) == {"fused"}, G.notes
        for step, names in G.kernels.items():
            phase = glue.PHASE[step]
            for name in names:
                # every name is a real kernel: ours, or in aiter's kernel modules
                assert (name in {glue.kernel_name(k) for k in glue.KERNELS.values()}
                        or any(hasattr(m, name) for m in kernel_mods)), name
                # by name alone, and inside the step's record_function range on a GPU
                assert classify(name) == phase, (step, name)
                assert classify(f"moe_lab.{phase}/{name}") == phase
    assert PHASE_RANGES["moe_lab.act"] == "act" and PHASE_RANGES["moe_lab.combine"] == "combine"


def test_aiters_fused_silu_gemm_is_gemm1_not_the_act_glue():
    """aiter-triton-silu: its gemm1 (fused_moe_silu, SiLU*mul in the epilogue) is a GEMM;
    by the name's `silu` it was counted as act, and gemm2 as gemm1."""
    names = ["_moe_align_block_size_stage4_kernel_num_experts_33",
             "_fused_moe_silu_kernel_group_n_0_group_k_0_BLOCK_SIZE_M_256_BLOCK_SIZE_N_256",
             "_fused_moe_kernel_group_n_0_group_k_0_BLOCK_SIZE_M_256_BLOCK_SIZE_N_256",
             "moe_lab.combine/_moe_lab_moe_sum_kernel"]
    assert classify_sequence(names) == ["align", "gemm1", "gemm2", "combine"]


# --- the interpreted runs ------------------------------------------------------------------

def test_the_interpreters_conversions_are_patched_right(functions):
    # the three formats conversion_check() converts; an empty dict would check none
    assert set(functions["conversion"]) == {"e4m3fn", "e4m3fnuz", "bf16"}, functions["conversion"]
    for fmt, (patched, original) in functions["conversion"].items():
        assert patched == 0, f"{fmt}: {patched} values differ from torch's RTNE conversion"


@pytest.mark.parametrize("dt", ["fp16", "fp32"])
def test_fused_act_equals_the_naive_act_and_a_swap_fails(functions, dt):
    assert functions[f"act {dt}"] < 1e-2 if dt == "fp16" else functions[f"act {dt}"] < 1e-5
    assert functions[f"act {dt} bug"] > 0.1


@pytest.mark.parametrize("k", [3, 8])
def test_fused_combine_equals_the_sum_and_a_lost_slot_fails(functions, k):
    assert functions[f"combine k={k}"] < 1e-2
    assert functions[f"combine k={k} bug"] > 0.1
    assert functions["combine k=1 is a view"]


@pytest.mark.parametrize("scheme,impl,K", [("fp8-block128", "moe_lab", 384),
                                            ("fp8-block128", "aiter", 384),
                                            ("fp8-channel", "aiter", 384),
                                            ("fp8-tensor", "aiter", 384),
                                            ("fp8-block128", "moe_lab", 200)])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("dt", ["torch.float16", "torch.bfloat16"])
def test_fused_x_quant_equals_moe_lab_quant_and_a_doubled_scale_fails(functions, scheme, impl,
                                                                      K, fmt, dt):
    key = f"quant {scheme} {impl} K={K} {fmt} {dt}"
    steps, scale_gap, same_layout = functions[key]
    assert same_layout  # fp8 [M, K] and fp32 scales of moe_lab.quant's shape
    assert steps <= 1.0 + 1e-3, f"dequantised values {steps:.3g} fp8 steps apart"
    assert scale_gap < 1e-6
    bug_steps, bug_gap = functions[key + " bug"]
    assert bug_steps > 1.0 and bug_gap > 0.5


@pytest.mark.parametrize("impl,I", [("moe_lab", 256), ("aiter", 256), ("moe_lab", 192)])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("dt", ["torch.float16", "torch.bfloat16"])
def test_fused_act_quant_equals_the_quantised_product_and_a_swap_fails(functions, impl, I, fmt, dt):
    key = f"act_quant {impl} I={I} {fmt} {dt}"
    steps, scale_gap, layout = functions[key]
    assert layout  # [rows, I/128] fp32, row-major: fused_moe's A_scale for [128, 128] blocks
    assert steps <= 1.0 + 1e-3 and scale_gap < 1e-6
    # the naive step quantises the product rounded to fp16/bf16 first: scales one such
    # rounding apart, values one fp8 step plus that rounding
    n_steps, n_gap = functions[key + " vs naive"]
    assert n_steps <= 1.1 and n_gap < (2e-3 if dt == "torch.float16" else 1e-2)
    bug_steps, _ = functions[key + " bug"]
    assert bug_steps > 1.0


def test_the_backends_match_the_reference_with_either_glue(backend_points):
    assert set(backend_points["conversion"]) == {"e4m3fn", "e4m3fnuz", "bf16"}  # all() of none
    assert all(p == 0 for p, _ in backend_points["conversion"].values())
    seen, true_errs = set(), {}
    for name, dtype, ep, g, err, used, steps, true_err in backend_points["points"]:
        limit = THRESHOLDS[dtype.split()[0]]
        assert err < limit, f"{name} {dtype} ep={ep} glue={g}: rel err {err:.3g}"
        # on this CPU the interpreter runs the fused kernels: fused is what ran
        want = {"naive"} if g == "naive" else {"fused"}
        if g == "aiter" and "I=192" in dtype:  # aiter's group kernels take no ragged I
            want = {"fused", "naive"}
        assert used == g and set(steps.values()) == want, (name, dtype, g, steps)
        seen.add((name, ep, g))
        true_errs[(name, dtype, ep, g)] = true_err
    for name in OFFERING:
        assert {(name, ep, g) for ep in (1, 2) for g in glue.GLUES} <= seen, name
    # The fp8 reference quantises the activation rounded to bf16, as the naive glue does;
    # the fused kernels quantise the fp32 product, so they sit further from that reference
    # (still well inside its limit) but no further from the unquantised layer
    for (name, dtype, ep, g), true_err in true_errs.items():
        if g == "fused" and true_err is not None:
            naive = true_errs.get((name, dtype, ep, "naive"),
                                  true_errs.get((name, dtype.split()[0], ep, "naive")))
            assert true_err <= 1.2 * naive + 5e-3, (name, dtype, ep, true_err, naive)


def test_aiters_group_kernels_run_in_the_backend_when_chosen(backend_points):
    for ep in (1, 2):
        kernels = backend_points[f"aiter groups ep={ep} kernels"]
        assert kernels["quant"] == ["_fused_flatten_fp8_group_quant_kernel"]
        assert kernels["act_quant"] == ["_act_mul_and_dynamic_fp8_group_quant_kernel"]
    err, used, notes = backend_points["aiter groups ragged"]  # I = 192: naive quantiser
    assert used["act_quant"] == "naive" and "192 columns" in notes["act_quant"]
    assert used["quant"] == "fused" and err < THRESHOLDS["fp8-block128"]


def test_under_triton_s_own_interpreter_the_fp8_steps_fall_back_and_say_why(backend_points):
    rounds, used, notes = backend_points["unpatched interpreter"]
    assert rounds is False
    assert used == {"quant": "naive", "act_quant": "naive", "combine": "fused"}
    assert "interpreter" in notes["quant"] and "interpreter" in notes["act_quant"]


def test_a_planted_bug_in_the_fused_glue_fails_the_backend_check(backend_points):
    assert backend_points["bug act"] > 10 * 5e-3
    assert backend_points["bug act_quant"] > 5 * THRESHOLDS["fp8-block128"]


def test_the_fused_steps_are_profiled_in_their_phases(backend_points):
    fused = dict(map(tuple, backend_points["profile fused"]))
    assert fused.get("moe_lab.quant") == "quant"  # x: aiter's group quantiser
    assert fused.get("moe_lab.act") == "act"  # SiLU*mul + gemm2's quantisation, one kernel
    assert fused.get("moe_lab.combine") == "combine"
    assert "aten::silu" not in fused and "aten::sum" not in fused
    naive = dict(map(tuple, backend_points["profile naive"]))
    assert naive.get("aten::silu") == "act" and naive.get("aten::sum") == "combine"
    assert naive.get("moe_lab.quant") == "quant" and "moe_lab.act" not in naive
