"""The combine of the sorted-rows backends (moe_lab.combine_rows, glue step combine_rows):
our one-pass kernel against the embedding_bag it replaces, under Triton's interpreter, on
fresh random rows whose unread rows hold NaN (remote and spare rows are never read), with
and without router weights, k = 1 and 8; a planted bug (one slot dropped) fails."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moe_lab.core import glue

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(glue.triton is None, reason="triton is not installed")

SCRIPT = r"""
import json, sys
import torch
from moe_lab.core import combine_rows as cr

g = torch.Generator().manual_seed(int(sys.argv[1]))
res = []
for T, k, H, R, weighted, dt in [(5, 8, 96, 48, 1, torch.float32), (7, 1, 64, 9, 0, torch.bfloat16),
                                 (3, 2, 1100, 8, 1, torch.float32)]:
    y = torch.randn(R, H, generator=g).to(dt)
    y[-2:] = float("nan")        # rows no slot may read (past the last group)
    pos = torch.randint(0, R - 2, (T, k), generator=g)
    pos[0, 0] = R                # a remote slot: the pad row, never read
    w = torch.rand(T, k, generator=g) if weighted else None
    ours = cr.combine_rows_fused(y, pos, w, R)
    bag = cr.combine_rows_naive(y, pos, w, R)
    want = torch.zeros(T, H, dtype=torch.float64)
    for t in range(T):
        for j in range(k):
            if pos[t, j] < R:
                want[t] += y[pos[t, j]].double() * (1.0 if w is None else float(w[t, j]))
    tol = 1e-5 if dt == torch.float32 else 1e-2
    res.append(dict(finite=bool(torch.isfinite(ours).all()),
                    err=float((ours.double() - want).abs().max() / want.abs().max()),
                    bag_err=float((bag.double() - want).abs().max() / want.abs().max()),
                    tol=tol, dtype=str(ours.dtype), want_dtype=str(y.dtype)))
print(json.dumps(res))
"""


def _run(seed, extra=""):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", extra + SCRIPT, str(seed)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_ours_sums_the_slots_rows_and_never_reads_the_pad_row():
    rows = _run(int.from_bytes(os.urandom(2), "little"))
    assert len(rows) == 3, rows  # the script's three cases, each checked below
    for r in rows:
        assert r["finite"], r            # the NaN rows were not read
        assert r["err"] < r["tol"], r    # against a float64 hand sum
        assert r["bag_err"] < max(r["tol"], 1e-2), r  # the embedding_bag it replaces agrees
        assert r["dtype"] == r["want_dtype"]


def test_a_dropped_slot_fails_the_same_check():
    plant = ("import moe_lab.core.combine_rows as _c\n_f = _c.combine_rows_fused\n"
             "_c.combine_rows_fused = lambda y, pos, w, pad: _f(y, pos.clone().index_fill_(1, "
             "__import__('torch').tensor([0]), pad), w, pad)\n")
    bad = _run(3, plant)
    assert any(r["err"] > r["tol"] for r in bad)


def test_the_backends_run_it_as_a_glue_step():
    G = glue.Glue("fused", "cuda", steps=("act", "combine_rows"))
    assert G.used["combine_rows"] == "fused"
    assert G.kernels["combine_rows"] == ("_moe_lab_moe_sum_rows_kernel",)
    assert glue.Glue("naive", "cuda", steps=("combine_rows",)).used["combine_rows"] == "naive"
    assert glue.PHASE["combine_rows"] == "combine"
