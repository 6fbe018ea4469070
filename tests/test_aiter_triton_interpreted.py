"""aiter's real Triton MoE kernels, run on the CPU by Triton's interpreter
(TRITON_INTERPRET=1), checked against the reference: the numbers our `aiter-triton`
and `aiter-triton-silu` backends produce, not just their call bindings. fp16 (the
interpreter's bf16 goes through numpy, which has no bfloat16, and returns garbage), small
tiles (the interpreter runs every program instance in Python).

The EP points are the regression test for the fused-SiLU kernel's zero-fill of remote
blocks, which is sized for [.., 2I] while its output is [.., I]: before the backend kept
gemm1 off the remote blocks it wrote past its rows (wrong output, then a crash)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
from moe_lab.backends.aiter_triton import aiter_root  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(aiter_root() is None, reason="amd-aiter is not installed")

SCRIPT = r"""
import json, sys
import moe_lab.backends as registry
from moe_lab.core.problems import make_problem
from moe_lab.measuring.correctness import make_weights, make_inputs, reference
from moe_lab.core import glue
sparse = []  # the points whose align took the sparse path (a block per pair, no sort)
_sparse = glue.align_sparse
def _count(*a, **k):
    sparse.append(1)
    return _sparse(*a, **k)
glue.align_sparse = _count
cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1,
       "num_warps": 4, "num_stages": 1}
out = []
for name, ep, tokens in json.loads(sys.argv[1]):
    p = make_problem("custom:H=64,I=32,E=8,k=2", tokens, "fp16", ep, ep, 0)
    w = make_weights(p, "cpu", 11)
    inp = make_inputs(p, "cpu", 12 + tokens)
    ref = reference(p, w, inp).float()
    sparse.clear()
    try:
        got = registry.get(name).prepare(p, w, {"gemm1": cfg, "gemm2": cfg})(
            inp.x, inp.topk_weights, inp.topk_ids).float()
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        out.append([name, ep, tokens, err, "", bool(sparse)])
    except Exception as exc:
        out.append([name, ep, tokens, None, f"{type(exc).__name__}: {exc}"[:300], bool(sparse)])
print(json.dumps(out))
"""

POINTS = [[b, ep, t] for b in ("aiter-triton", "aiter-triton-silu")
          for ep in (1, 2) for t in (1, 7, 40)]


@pytest.fixture(scope="module")
def interpreted():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(POINTS)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"the interpreted run died (rc {p.returncode}): {p.stderr[-2000:]}"
    return {(b, ep, t): (err, why, sp)
            for b, ep, t, err, why, sp in json.loads(p.stdout.strip().splitlines()[-1])}


@pytest.mark.parametrize("backend,ep,tokens", [tuple(x) for x in POINTS])
def test_aiter_triton_kernels_match_the_reference(interpreted, backend, ep, tokens):
    err, why, _ = interpreted[(backend, ep, tokens)]
    assert not why, why
    # fp16 products accumulated in fp32, one rounding of C to fp16 per GEMM
    assert err < 5e-3, f"{backend} ep={ep} tokens={tokens}: max_rel_err {err:.3g}"


@pytest.mark.parametrize("backend", ["aiter-triton", "aiter-triton-silu"])
def test_the_sparse_align_serves_few_pairs_without_ep_and_matches_the_reference(interpreted,
                                                                                backend):
    """1 token x top-2 over 8 experts (2 * 4 <= 8): the align sorts nothing (a block per
    pair) and the layer still matches the reference (the test above); 7 tokens, or any
    EP point (remote pairs must sort last), take the sort."""
    assert interpreted[(backend, 1, 1)][2] is True
    assert not any(interpreted[(backend, ep, t)][2] for ep, t in ((1, 7), (1, 40), (2, 1)))

