"""Kernel phase classification (real ROCm/CUDA names) and the torch profiler on CPU."""
import gzip
import json
import os

import pytest
import torch

from moe_lab import backends
from moe_lab.core.problems import make_problem
from moe_lab.measuring.profiling import (check_kernel_coverage, classify, classify_sequence,
                               export_trace, kernel_table, kernel_us, phase_table,
                               profile_kernels, split_iterations)
from moe_lab.storage.vocabulary import PHASES

DATA = os.path.join(os.path.dirname(__file__), "data")


def _names(fname):
    with open(os.path.join(DATA, fname)) as f:
        return json.load(f)["names"]


ENTRIES = [(f, e) for f in ("kernel_names_rocm.json", "kernel_names_cuda.json") for e in _names(f)]


@pytest.mark.parametrize("fname,entry", ENTRIES,
                         ids=[f"{f[13:17]}-{i}" for i, (f, _) in enumerate(ENTRIES)])
def test_classify_real_kernel_names(fname, entry):
    assert entry["phase"] in PHASES
    assert entry["source"]
    assert classify(entry["name"]) == entry["phase"], entry["name"]
    if entry.get("order_dependent"):
        assert classify(entry["name"], {"gemm_index": 1}) == "gemm2"
        assert classify_sequence([entry["name"]] * 2) == ["gemm1", "gemm2"]


def test_name_files_cover_every_phase_and_the_main_rocm_paths():
    rocm = _names("kernel_names_rocm.json")
    phases = {e["phase"] for e in rocm} | {e["phase"] for e in _names("kernel_names_cuda.json")}
    assert {"route", "align", "gemm1", "gemm2", "act", "combine", "quant", "other"} <= phases
    text = " ".join(e["name"] for e in rocm)
    for marker in ("fmoe_stage1", "kernel_moe_gemm", "MoeSorting", "moe_ck2stages_gemm2",
                   "topksoftmax", "act_and_mul_kernel", "dynamic_per_token_scaled_quant"):
        assert marker in text


def test_two_fused_moe_launches_are_gemm1_then_gemm2():
    fm = "_fused_moe_kernel_group_n_NONE_BLOCK_SIZE_M_64_MUL_ROUTED_WEIGHT_0_top_k_2"
    seq = ["_moe_align_block_size_stage1_kernel_num_experts_8",
           "_moe_align_block_size_stage4_kernel_num_experts_8",
           fm,
           "void at::native::vectorized_elementwise_kernel<4, silu_kernel...>",
           fm.replace("WEIGHT_0", "WEIGHT_1"),
           "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<sum_functor>>"]
    assert classify_sequence(seq) == ["align", "align", "gemm1", "act", "gemm2", "combine"]


def test_order_rules_for_loops_splitk_and_grouped_prep():
    mm = "aten::matmul"
    assert classify_sequence([mm, "aten::silu", mm] * 2) == \
        ["gemm1", "act", "gemm2", "gemm1", "act", "gemm2"]
    seq = ["void at::cuda::detail::prepare_grouped_gemm_data<...>", "cutlass::GemmUniversal<...>",
           "act_and_mul_kernel", "void at::cuda::detail::prepare_grouped_gemm_data<...>",
           "nvjet_tst_128x256", "void cublasLt::splitKreduce_kernel<...>"]
    assert classify_sequence(seq) == ["gemm1", "gemm1", "act", "gemm2", "gemm2", "gemm2"]
    # explicit stages keep their phase and set the parity for what follows
    seq = ["_ZN5aiter48fmoe_stage1_bf16_pertokenFp8_g1u1_16x128_4tg_pf2E", "ck::kernel_moe_gemm<...>"]
    assert classify_sequence(seq) == ["gemm1", "gemm2"]
    # the router's own GEMM does not shift the order when marked
    assert classify_sequence(["cutlass_gemm", "cutlass_gemm", "cutlass_gemm"],
                             [{"router": True}, None, None]) == ["route", "gemm1", "gemm2"]


@pytest.mark.parametrize("elem,phase", [
    ("int", "align"), ("long", "align"), ("int64_t", "align"), ("unsigned char", "align"),
    ("bool", "align"), ("long long", "align"),
    ("float", "combine"), ("c10::BFloat16", "combine"), ("c10::Half", "combine"),
    ("double", "combine"),
])
def test_integer_adds_are_bookkeeping_float_adds_the_combine(elem, phase):
    """The same index_add_ / sum kernels count tokens (integer element type: align) or
    add expert outputs (floating: combine); the element type is the first template
    argument."""
    add = (f"void at::native::indexFuncSmallIndex<{elem}, long, unsigned int, 1, 1, -2, "
           "at::native::(anonymous namespace)::ReduceAdd>(...)")
    big = add.replace("SmallIndex", "LargeIndex")
    red = (f"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<{elem}, "
           f"at::native::func_wrapper_t<{elem}, at::native::sum_functor<{elem}, {elem}, "
           f"{elem}>::operator()(at::TensorIterator&)::{{lambda({elem}, {elem})#1}}>, "
           f"unsigned int, {elem}, 4, 4> >(...)")
    assert [classify(n) for n in (add, big, red)] == [phase] * 3
    # in a forward: the count before the GEMMs, the combine after them
    fm = "_fused_moe_kernel_group_n_NONE_BLOCK_SIZE_M_64"
    assert classify_sequence([add, fm, fm]) == [phase, "gemm1", "gemm2"]


def test_cpu_aten_names():
    assert classify("aten::index_add_") == "combine"
    assert classify("aten::argsort") == "align"
    assert classify("aten::bincount") == "align"
    assert classify("aten::silu") == "act"
    assert classify("aten::mul") == "act"
    assert classify("aten::mm") == "gemm1"
    assert classify("aten::topk") == "route"
    assert classify("aten::zeros") == "other"
    assert classify("something_unknown") == "other"


def test_split_iterations_by_ranges_then_fallbacks():
    ranges = [(0, 10), (20, 30)]
    ev = [(1, "a", 1.0), (5, "b", 2.0), (21, "a", 1.0), (25, "b", 2.0)]
    seqs, how = split_iterations(ranges, ev, 2)
    assert how == "ranges" and seqs == [[("a", 1.0), ("b", 2.0)]] * 2
    skewed = [(t + 100, n, d) for t, n, d in ev]  # device clock far off the host's
    seqs, how = split_iterations(ranges, skewed, 2)
    assert how == "chunks" and seqs == [[("a", 1.0), ("b", 2.0)]] * 2
    seqs, how = split_iterations(ranges, skewed[:3], 2)
    assert how == "single" and len(seqs) == 1


def test_kernel_table_is_per_forward():
    seq = [("k_gemm", 10.0), ("silu", 1.0), ("k_gemm", 20.0)]
    df = kernel_table([seq, seq], iters=2)
    assert list(df.columns) == ["kernel", "phase", "calls", "total_us"]
    rows = {(r.kernel, r.phase): (r.calls, r.total_us) for r in df.itertuples()}
    assert rows[("k_gemm", "gemm1")] == (1.0, 10.0)
    assert rows[("k_gemm", "gemm2")] == (1.0, 20.0)
    assert kernel_us(df) == pytest.approx(31.0)


def _tiny_moe():
    p = make_problem("custom:H=64,I=32,E=4,k=2", 8, dtype="fp32")
    g = torch.Generator().manual_seed(0)
    w1 = torch.randn(4, 64, 64, generator=g) / 8
    w2 = torch.randn(4, 64, 32, generator=g) / 8
    fn = backends.get("torch").prepare(p, backends.Weights(w1, w2, None))
    x = torch.randn(8, 64, generator=g)
    ids = torch.stack([torch.randperm(4, generator=g)[:2] for _ in range(8)]).to(torch.int32)
    w = torch.rand(8, 2, generator=g)
    return fn, (x, w / w.sum(1, keepdim=True), ids)


def test_profile_kernels_on_cpu_with_the_real_profiler():
    fn, args = _tiny_moe()
    df = profile_kernels(fn, args, iters=3, device="cpu")
    assert list(df.columns) == ["kernel", "phase", "calls", "total_us"]
    phases = set(df["phase"])
    assert {"gemm1", "gemm2", "combine", "act", "align"} <= phases
    assert set(phases) <= set(PHASES)
    # every expert hit runs one up- and one down-projection per forward
    experts_hit = len(torch.unique(args[2]))
    g = df.groupby("phase")["calls"].sum()
    assert g["gemm1"] == g["gemm2"] == experts_hit
    assert (df["total_us"] > 0).all()
    assert df.attrs["split"] == "ranges"
    pt = phase_table(df)
    assert list(pt["phase"]) == [p for p in PHASES if p in phases]


def test_check_kernel_coverage_boundaries():
    assert check_kernel_coverage(70.0, 100.0) == (True, "")
    assert check_kernel_coverage(105.0, 100.0) == (True, "")
    ok, msg = check_kernel_coverage(69.0, 100.0)
    assert not ok and "lost" in msg
    ok, msg = check_kernel_coverage(106.0, 100.0)
    assert not ok and "overlap" in msg
    assert not check_kernel_coverage(10.0, 0.0)[0]
    assert not check_kernel_coverage(float("nan"), 100.0)[0]
    assert not check_kernel_coverage(10.0, float("nan"))[0]


def test_export_trace_writes_gzipped_chrome_trace(tmp_path):
    fn, args = _tiny_moe()
    path = export_trace(fn, args, str(tmp_path / "t" / "point"), iters=2, device="cpu")
    assert path.endswith(".json.gz") and os.path.exists(path)
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "moe_lab.forward" in names
    assert not [p for p in os.listdir(tmp_path / "t") if p.endswith(".tmp")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_profile_kernels_on_gpu_torch_grouped_or_reference():
    fn, (x, w, ids) = _tiny_moe()
    args = (x.cuda(), w.cuda(), ids.cuda())
    p = make_problem("custom:H=64,I=32,E=4,k=2", 8, dtype="fp32")
    g = torch.Generator().manual_seed(0)
    w1 = (torch.randn(4, 64, 64, generator=g) / 8).cuda()
    w2 = (torch.randn(4, 64, 32, generator=g) / 8).cuda()
    fn = backends.get("torch").prepare(p, backends.Weights(w1, w2, None))
    df = profile_kernels(fn, args, iters=3, device="cuda")
    assert {"gemm1", "gemm2", "combine"} <= set(df["phase"])
    assert kernel_us(df) > 0
