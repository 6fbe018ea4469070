"""The align glue step (moe_lab.glue.align_fused, our three kernels) against aiter's
moe_align_block_size_triton and against a stable sort by expert, on fresh random routing:
bf16-sized TP shapes (256 experts), EP (the map applied inside, the sentinel's blocks -1),
BLOCK_M 16..128, top-1 and top-8, no tokens, a chunk count at its cap. Both run under
Triton's interpreter (TRITON_INTERPRET=1, in a subprocess: the variable must be set before
triton is imported). A planted bug (one slot off) must fail the same comparison."""
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
import torch, triton
from moe_lab.core import align, glue

def stable(topk_ids, n_exp, bm, emap):
    ids = topk_ids.reshape(-1).long()
    if emap is not None:
        loc = emap[ids]
        ids = torch.where(loc < 0, n_exp - 1, loc)
    out, eids = [], []
    order = torch.sort(ids, stable=True).indices
    for e in range(n_exp):
        sel = order[ids[order] == e].tolist()
        if not sel:
            continue
        pad = -len(sel) % bm
        out += sel + [ids.numel()] * pad
        eids += [-1 if emap is not None and e == n_exp - 1 else e] * ((len(sel) + pad) // bm)
    return out, eids

plant = sys.argv[1] == "plant"
if plant:  # one pair's slot off by one: the place kernel's output shifted
    _orig = glue.align_fused
    def _bad(*a, **k):
        s, e, n = _orig(*a, **k)
        s = s.clone(); s[[0, 1]] = s[[1, 0]]
        return s, e, n
    glue.align_fused = _bad

g = torch.Generator().manual_seed(int(sys.argv[2]))
# T x k pairs past one chunk (256 pairs) where a case needs several programs per kernel,
# and no more: under the interpreter each chunk's sort and each pair of aiter's serial
# loops cost
cases = [(1, 8, 256, 1, 16), (3, 8, 256, 8, 16), (37, 8, 256, 8, 64), (40, 8, 64, 1, 32),
         (300, 1, 16, 1, 128), (100, 4, 32, 4, 16), (0, 8, 16, 1, 16), (150, 4, 32, 8, 16),
         (20, 8, 64, 4, 256), (16, 8, 128, 1, 32)]  # one program: BLOCK_M 256 under EP; Qwen3's 128
if plant:
    cases = cases[1:3]
res = []
for T, k, E, ep, bm in cases:
    ids = (torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]) if T
           else torch.empty(0, k, dtype=torch.int64)).to(torch.int32)
    emap, n_exp = None, E
    if ep > 1:  # this rank owns the third slice of E/ep experts
        el = E // ep
        emap = torch.full((E,), -1, dtype=torch.int32)
        lo = (2 % ep) * el
        emap[lo:lo + el] = torch.arange(el, dtype=torch.int32)
        n_exp = el + 1
    s, e, n = glue.align_fused(ids, n_exp, bm, emap)
    # the planted run is read against the stable sort only
    a_s, a_e, a_n = (s, e, n) if plant else glue.align_aiter(ids, n_exp, bm, emap)
    want_s, want_e = stable(ids, n_exp, bm, emap)
    N = int(n)
    res.append(dict(case=[T, k, E, ep, bm], n=N, aiter_n=int(a_n), want_n=len(want_s),
                    same_as_stable=s[:N].tolist() == want_s and e[:N // bm].tolist() == want_e,
                    same_as_aiter=torch.equal(s[:N], a_s[:N]) and torch.equal(e, a_e),
                    tail_minus_one=bool((e[N // bm:] == -1).all()),
                    chunks=-(-T * k // max(align.ALIGN_MIN_CHUNK, triton.next_power_of_2(
                        -(-max(T * k, 1) // align.ALIGN_MAX_CHUNKS))))))
print(json.dumps(res))
"""


def _run(mode, seed):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(seed)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def aligned():
    res = _run("ours", seed=int.from_bytes(os.urandom(2), "little"))
    # the tests below check each case in a loop: a script that printed no case would pass them
    assert len(res) == 10, f"the script's 10 cases, got {len(res)}"
    return res


def test_ours_is_a_stable_sort_by_expert_padded_to_block_m(aligned):
    for r in aligned:
        assert r["n"] == r["want_n"], r
        assert r["same_as_stable"], r


def test_ours_gives_aiters_output_bit_for_bit(aligned):
    for r in aligned:
        assert r["n"] == r["aiter_n"], r
        assert r["same_as_aiter"], r
        assert r["tail_minus_one"], r  # every block past the end reads -1, as aiter's buffer


def test_the_cases_reach_the_chunk_cap_and_many_chunks(aligned):
    # 37 x 8, 40 x 8, 300 x 1, 100 x 4 and 150 x 4 pairs: several programs per kernel
    # (chunks of 256 pairs), so the cross-chunk scan is exercised, with and without the EP map
    assert [r["case"] for r in aligned if r["chunks"] > 1] == [
        [37, 8, 256, 8, 64], [40, 8, 64, 1, 32], [300, 1, 16, 1, 128], [100, 4, 32, 4, 16],
        [150, 4, 32, 8, 16]]
    assert max(r["chunks"] for r in aligned) == 3


def test_a_planted_slot_swap_fails_the_comparison():
    bad = _run("plant", seed=1)
    assert not all(r["same_as_stable"] for r in bad if r["n"] > 1)


def test_align_is_a_glue_step_with_its_variants():
    ours = glue.Glue("fused", "cuda", steps=("align",))
    assert ours.used["align"] == "fused"
    assert len(ours.kernels["align"]) > 0  # all() of no kernel names passes
    assert all(n.startswith("_moe_lab_moe_align_block_size") for n in ours.kernels["align"])
    for variant, used in (("aiter", "fused"), ("naive", "naive")):
        G = glue.Glue(variant, "cuda", steps=("align",))
        assert G.used["align"] == used and G.kernels["align"] == glue.AITER_ALIGN_KERNELS
    assert glue.PHASE["align"] == "align"


ROWS = r"""
import json, torch
from moe_lab.core.problems import make_problem
from moe_lab.measuring.correctness import make_weights, make_inputs
from moe_lab.backends.torch_fp8_grouped import grouped_fp8_fn

from stand_ins import scaled_grouped_mm as mm  # torch._scaled_grouped_mm per group

res = []
for ep, tokens in ((1, 9), (2, 9), (4, 3)):
    p = make_problem("custom:H=256,I=128,E=8,k=2", tokens, "fp8-channel", ep, ep, ep - 1)
    w, inp = make_weights(p, "cpu", 11), make_inputs(p, "cpu", 5)
    naive = grouped_fp8_fn(p, w.quant, w.expert_map, mm=mm, glue="naive")(*inp.args())
    fn = grouped_fp8_fn(p, w.quant, w.expert_map, mm=mm, glue="fused")
    fn.glue.used.update(act="naive", combine_rows="naive")  # only the align is ours
    res.append([fn.glue.used["align"], bool(torch.equal(fn(*inp.args()), naive))])
print(json.dumps(res))
"""


def test_torch_fp8_grouped_with_our_align_gives_the_sorts_rows_bit_for_bit():
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1",
               PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    p = subprocess.run([sys.executable, "-c", ROWS], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res == [["fused", True]] * 3, res
