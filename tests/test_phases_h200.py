"""Phase classification on kernel names captured by the profiler on the H200
(tests/data/kernel_names_h200_captured.json, distinct names per point in launch order)."""
import json
import os
import re

import pytest

from moe_lab.measuring.profiling import classify, classify_sequence

DATA = json.load(open(os.path.join(os.path.dirname(__file__), "data",
                                   "kernel_names_h200_captured.json")))
POINTS = {k: v for k, v in DATA.items() if not k.startswith("_")}
ALL = sorted({n for v in POINTS.values() for n in v})

FAMILIES = [  # (pattern on the real name, allowed phases)
    (r"^_fused_moe_kernel", {"gemm1", "gemm2"}),
    (r"^_moe_align_block_size_stage[1-4]", {"align"}),
    (r"GemmUniversal|prepare_grouped_gemm_data", {"gemm1", "gemm2"}),
    (r"^nvjet_sm90|splitKreduce", {"gemm1", "gemm2"}),
    (r"silu_kernel", {"act"}),
    (r"indexFunc(Small|Large)Index<float.*ReduceAdd", {"combine"}),  # out.index_add_(fp32 y)
    (r"indexFunc(Small|Large)Index<int,.*ReduceAdd", {"align"}),  # int32 tokens per expert
    (r"sum_functor<long, long, long>", {"align"}),  # int64 count of remote-expert pairs
    (r"sum_functor<c10::BFloat16, float, c10::BFloat16>", {"combine"}),  # c2.sum(dim=1)
    (r"radixSort", {"align"}),
]


def test_captured_file_has_every_backend():
    backends = {k.split("|")[-1] for k in POINTS}
    assert backends == {"torch", "torch-grouped", "aiter-triton"}
    assert len(ALL) > 50


@pytest.mark.parametrize("pattern,allowed", FAMILIES)
def test_kernel_families_get_their_phase(pattern, allowed):
    names = [n for n in ALL if re.search(pattern, n)]
    assert names, f"no captured kernel matches {pattern}"
    for n in names:
        assert classify(n) in allowed, n[:120]


@pytest.mark.parametrize("key", sorted(k for k in POINTS if k.endswith("aiter-triton")))
def test_aiter_triton_sequence_two_gemms_in_order(key):
    seq = POINTS[key]
    phases = classify_sequence(seq)
    fused = [p for n, p in zip(seq, phases) if n.startswith("_fused_moe_kernel")]
    # distinct names: with k>1 the two launches differ (top_k, MUL_ROUTED_WEIGHT); with k=1
    # and the weight on the input, too (MUL_ROUTED_WEIGHT 1 then 0)
    assert fused[:2] == ["gemm1", "gemm2"]
    first_gemm = phases.index("gemm1")
    assert "align" in phases[:first_gemm], "align kernels run before gemm1"
    assert "act" in phases[first_gemm:phases.index("gemm2")], "silu*mul between the gemms"


def test_no_captured_moe_kernel_falls_to_other():
    moe = [n for n in ALL if re.search(r"_fused_moe|_moe_align|GemmUniversal|nvjet|silu", n)]
    assert moe  # the captured names hold MoE kernels: all() of none passes
    assert all(classify(n) != "other" for n in moe)


@pytest.mark.parametrize("key", sorted(k for k in POINTS if k.endswith("|torch-grouped")))
def test_torch_grouped_counts_tokens_before_gemm1_and_combines_after_gemm2(key):
    """torch-grouped: counts.index_add_(int32 ones) builds the grouped GEMM's offsets
    before the first GEMM (align); out.index_add_(fp32 y) after the GEMMs is the
    combine."""
    seq = POINTS[key]
    phases = classify_sequence(seq)
    gemms = [i for i, p in enumerate(phases) if p in ("gemm1", "gemm2")]
    first_gemm, last_gemm = gemms[0], gemms[-1]  # distinct names: the 2nd GEMM may repeat the 1st
    counts = [i for i, n in enumerate(seq) if re.search(r"indexFunc\w+Index<int,", n)]
    adds = [i for i, n in enumerate(seq) if re.search(r"indexFunc\w+Index<float,", n)]
    assert counts and adds
    assert all(i < first_gemm and phases[i] == "align" for i in counts)
    assert all(i > last_gemm and phases[i] == "combine" for i in adds)


def test_every_captured_combine_adds_floats():
    combine = [n for n in ALL if classify(n) == "combine"]
    assert combine
    for n in combine:
        assert re.search(r"(Index|sum_functor|ReduceOp)<(float|c10::BFloat16|c10::Half)\b", n), n[:120]
