"""aiter's real Triton FP8 MoE kernels run on the CPU by Triton's interpreter
(TRITON_INTERPRET=1) through our `aiter-triton` backend, against the FP8 reference: the
numbers of the fp8-block128 path (our 1x128 activation quantisation, aiter's block-scaled
GEMMs) and of fp8-tensor, with and without EP and with the router weight on the input.

One substitution: under the interpreter aiter's own per-tensor activation quantiser
(`_dynamic_per_tensor_quant_fp8_i8_kernel`) stops on `tl.assume(pid > 0)`, false for
program 0 (on a GPU an assume is only a compiler hint), so fp8-tensor points set aiter's
public hook `moe_set_quant_func` to moe_lab.quant's per-tensor quantiser (the same
amax / fp8-max scale); the GEMM kernels are aiter's. A wrong weight scale must fail."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
from moe_lab.backends.aiter_triton import aiter_root  # noqa: E402
from moe_lab.measuring.correctness import THRESHOLDS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(aiter_root() is None, reason="amd-aiter is not installed")

SCRIPT = r"""
import json, sys
import moe_lab.backends as registry
from moe_lab.core import quant
from moe_lab.backends.aiter_triton import load_aiter_triton
from moe_lab.core.problems import make_problem
from moe_lab.measuring.correctness import make_weights, make_inputs, reference, rel_err
moe_op, _ = load_aiter_triton()
moe_op.moe_set_quant_func(lambda out, A, s: quant.quantize_act(A, "fp8-tensor", "e4m3fn"))
cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
       "num_warps": 4, "num_stages": 1}
out = []
for scheme, model, ep, tokens, wrong in json.loads(sys.argv[1]):
    p = make_problem(model, tokens, scheme, ep, ep, 0)
    w = make_weights(p, "cpu", 11)
    inp = make_inputs(p, "cpu", 12 + tokens)
    ref = reference(p, w, inp)
    if wrong:  # a deliberately wrong weight scale, after the reference
        w.quant.w1_scale = w.quant.w1_scale * 2
    got = registry.get("aiter-triton").prepare(p, w, {"gemm1": cfg, "gemm2": cfg})(*inp.args())
    out.append([scheme, model, ep, tokens, wrong, rel_err(got, ref)])
print(json.dumps(out))
"""

MODEL, LLAMA = "custom:H=256,I=128,E=4,k=2", "custom:H=256,I=128,E=4,k=1,router=llama4"
POINTS = [[s, MODEL, ep, t, False] for s in ("fp8-block128", "fp8-tensor")
          for ep in (1, 2) for t in (1, 7)] + \
    [["fp8-block128", LLAMA, 1, 6, False], ["fp8-block128", MODEL, 1, 7, True],
     ["fp8-tensor", MODEL, 1, 7, True]]


@pytest.fixture(scope="module")
def interpreted():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(POINTS)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"the interpreted run died (rc {p.returncode}): {p.stderr[-2000:]}"
    return {tuple(r[:5]): r[5] for r in json.loads(p.stdout.strip().splitlines()[-1])}


@pytest.mark.parametrize("scheme,model,ep,tokens,wrong", [tuple(x) for x in POINTS])
def test_aiter_triton_fp8_kernels_against_the_fp8_reference(interpreted, scheme, model, ep,
                                                            tokens, wrong):
    err = interpreted[(scheme, model, ep, tokens, wrong)]
    if wrong:
        assert err > 5 * THRESHOLDS[scheme], f"a doubled weight scale passed: {err:.3g}"
    else:
        assert err < THRESHOLDS[scheme], f"{scheme} {model} ep={ep} T={tokens}: {err:.3g}"
