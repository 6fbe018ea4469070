"""Issue 67, build item 3: the mutation check of the correctness gate, the FP8 and bf16
limits, vLLM's scale layouts and expert counts, the align paths (the sparse align under EP
among them), the tuned-files inventory, the run chooser and the ledger.

MUTATIONS (at the end) are plausible one-line bugs, each applied to a copy of the checkout
(tests/_bites_harness.py, as tests/test_bites.py does); the tests named beside each must
fail there. The text replaced must occur exactly once in its file, and a control runs the
same tests on an unmutated copy, where they pass. The mutation runs are slow (a pytest
process per mutation), so they run only when asked:

    MOE_LAB_MUTATIONS=1 python -m pytest -q tests/test_bites_67.py

The cheap checks (each mutation's text is there once, its catching tests exist, this list
names every mutation) always run. Tests of this file unless named:

  correctness gate (moe_lab/measuring/points.py)
    limit-exclusive-at-the-threshold: `err <= tol` became `err < tol`: a point exactly at
        its limit is incorrect -> test_the_limit_passes_at_the_threshold_and_never_for_nan
    limit-nan-passes: `not err > tol`: a NaN error passes -> the same
    threshold-bf16-loose: bf16's 2e-2 became 1e-1
        -> test_bites::test_a_bf16_backend_a_few_percent_off_is_incorrect
    threshold-fp16-as-bf16: fp16's 5e-3 became 2e-2;
    threshold-fp32-as-bf16: fp32's 2e-3 became 2e-2;
    threshold-fp8-loose: the fp8 schemes' 6e-2 became 2e-1
        -> test_a_backend_one_step_off_its_dtypes_limit_is_incorrect
    threshold-fp8-as-bf16: the fp8 schemes' limit became bf16's 2e-2: correct fp8 backends
        fail -> test_quant::test_fp8_backend_passes_and_a_wrong_scale_fails
    incorrect-point-timed: measure_point returns early for a refused point only, so an
        incorrect one is timed -> test_an_incorrect_point_is_never_timed
    compile-incorrect-timed: the compile path times a compiled call that failed its check
        -> test_compile::test_a_compiled_point_that_fails_the_check_is_incorrect_and_has...
    config-overrides-the-gate: the configuration step runs for a point the gate refused
        and resets its status -> test_the_configuration_step_never_overrides_the_gate
    config-missing-tuned-runs-default: a `--config tuned` point without a tuned file runs
        the backend's default under the name `tuned` -> the same
    gate-any-fp8-scheme: a backend with one fp8 scheme is let through for every one
        -> test_a_backend_is_let_through_only_for_the_fp8_schemes_it_declares
    fp8-format-not-checked: a backend is given an fp8 format it does not take
        -> test_points::test_a_backend_without_the_devices_fp8_format_is_unsupported
    checkpoint-block-rule-hidden-only: the 128-block rule checks H only
        -> test_points::test_a_rank_that_splits_a_128_block_is_unsupported_for_every_...
    checkpoint-weight-on-input-top2: the top-1 rule of the router weight on the input
        lets k=2 through -> test_points::test_router_weight_on_input_with_topk_above_1...
  vLLM's scale layouts and expert counts (moe_lab/backends/vllm_fused.py, vllm_paths.py)
    vllm-channel-scales-per-tensor: fp8-channel's per_out_ch_quant off (the Triton kernel
        reads per_act_token_quant only; CUTLASS reads it)
        -> test_vllms_quant_config_says_the_checkpoints_scale_layout
    vllm-block-shape-dropped: fp8-block128's block_shape not passed;
    vllm-tensor-scales-swapped: fp8-tensor's w1 and w2 scales swapped
        -> test_vllm_api::test_fp8_scales_reach_the_kernel_where_it_reads_them
    vllm-global-experts-local: global_num_experts is the local count;
    vllm-expert-map-dropped: the EP map not passed
        -> test_vllm_api::test_the_call_binds_to_vllms_fused_experts
    vllm-weight-on-input-dropped -> test_vllm_api::test_llama4_routes_the_weight_on_the_input
    vllm-paths-tp-under-ep: under EP the layer config still shards I by tp;
    vllm-paths-intermediate-per-rank: the layer's intermediate_size is I per rank;
    vllm-paths-local-experts-global: num_local_experts is every expert
        -> test_vllm_paths::test_the_layer_config_is_the_one_vllm_builds_for_the_sharding
    vllm-paths-channel-no-cutlass: fp8-channel checkpoints not allowed vLLM's CUTLASS;
    vllm-paths-block-act-per-token: fp8-block128's activation key per token
        -> test_vllm_paths::test_the_quant_keys_are_what_vllm_s_checkpoint_methods_pass
  align (moe_lab/core/align.py, core/glue.py)
    sparse-align-under-ep: is_sparse no longer asks for no EP map;
    glue-sparse-align-ignores-the-map: Glue.align asks is_sparse without the map
        -> test_few_pairs_under_ep_are_sorted_with_the_map_not_given_a_block_each
    sparse-align-for-many-pairs: the sparse rule's inequality upside down
        -> test_aiter_triton_interpreted::test_the_sparse_align_serves_few_pairs_without...
    align-aiter-remote-blocks-not-marked: aiter's path leaves the sentinel's id on its
        blocks -> test_bites::test_align_under_ep_maps_the_experts_and_marks_the_remote...
    align-fused-sentinel-past-the-end: our align's sentinel is n_exp, not n_exp - 1
        -> the same
  tuned files (moe_lab/analysis/tuned/files.py, storage/configs.py)
    inventory-grid-without-a-complete-run: a file holds the grid whatever its run's status;
    inventory-keys-of-any-stage: a key held by one stage's file counts
        -> test_tuned_files::test_a_shape_holds_the_grid_only_with_every_key_in_every_...
    pairs-stale-tuned-rows-kept: tuned rows measured before their file are evidence
        -> test_tuned_files::test_only_tuned_rows_measured_after_their_file_are_evidence...
    config-file-of-another-shape-accepted: a --config file named for another shape is
        used -> test_a_config_file_named_for_another_shape_is_refused_for_the_point
    tuned-gemm2-reads-gemm1: the tuned gemm2 table is the gemm1 file's
        -> test_a_tuned_down_file_is_gemm2s_configuration
  the run chooser (moe_lab/analysis/runs/__init__.py)
    choose-cpu-runs-first: the CPU runs before the GPU ones
        -> test_users_runs::test_one_rule_reads_the_gpu_runs_before_a_newer_cpu_run
    choose-ranked-question-takes-the-fewest: a ranked question's order reversed;
    tuning-question-answered-by-tuned-rows-alone: a run's tuned rows alone count
        -> test_the_tuning_question_reads_the_run_with_the_most_tuned_and_default_points
    vllm-question-answered-by-tuned-vllm: a run of vllm tuned rows answers the question
        about vLLM as shipped -> test_only_vllm_as_shipped_answers_the_vllm_question
  the ledger (moe_lab/cost/ledger.py floors, moe_lab/analysis/ledger.py)
    ledger-act-floor-without-scales: the act floor drops the activation scales
        -> test_ledger::test_fp8_block128_floors_are_the_hand_count
    ledger-combine-floor-at-k1: a k=1 layer gets a combine floor
        -> test_ledger::test_k1_has_no_combine_and_no_ceilings_means_nan
    ledger-gemm2-flops-doubled: gemm2's flops counted over 2I
        -> test_ledger::test_bf16_floors_are_the_hand_count
    ledger-floor-the-faster-bound: a phase's floor the smaller of its two bounds
        -> test_the_floor_is_the_slower_of_the_memory_and_compute_bounds
    ledger-recoverable-negative: a phase below its floor gives negative recoverable us
        -> test_a_phase_below_its_floor_has_nothing_recoverable
    ledger-gather-ignored-for-stored-phases: the stored rows of a gathering backend keep
        the ids-only align floor -> test_ledger::test_a_stored_run_gets_the_rows_in_its...
    best-point-slowest: best_points keeps the slowest row per point
        -> test_best_points_keeps_the_fastest_ok_row_of_each_point

Found on the way: nothing in moe_lab/ needed fixing. Two mutations survived the suite as it
was when run (gate-any-fp8-scheme, vllm-channel-scales-per-tensor: the kernel-launch test
cannot see per_out_ch_quant, which vLLM's Triton kernel does not read); the tests of this
file catch them. Tests written with this file catch the others it names: the exact-limit and
NaN rule, the fp16/fp32/fp8 limits through a backend, an incorrect point's timer, what the
configuration step may override, the sparse align with an EP map, a config file of another
shape, a tuned `_down` file, the tuning and vllm questions' answers, the floor as the max
of its bounds, the never-negative recoverable us, best_points' choice.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import pytest
from _bites_harness import Mutation, assert_caught, assert_control
from conftest import plugin_backend  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SMALL = "custom:H=64,I=32,E=8,k=2"
RUN_MUTATIONS = os.environ.get("MOE_LAB_MUTATIONS") == "1"
HOW = "MOE_LAB_MUTATIONS=1 python -m pytest -q tests/test_bites_67.py"


# --- the limit rule --------------------------------------------------------------------

# the limits as the docs state them (README, moe_lab.measuring.points): a test that read
# THRESHOLDS would agree with any value
LIMITS = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 2e-3, "fp8-tensor": 6e-2, "fp8-channel": 6e-2,
          "fp8-block128": 6e-2}


@pytest.mark.parametrize("dtype", sorted(LIMITS))
def test_the_limit_passes_at_the_threshold_and_never_for_nan(dtype):
    """`within` the limit: an error exactly at it passes, one just above does not; NaN
    and Inf (a kernel that wrote garbage) never pass."""
    from moe_lab.measuring.points import within_limit
    tol = LIMITS[dtype]
    assert within_limit(tol, dtype) == ("ok", "")
    assert within_limit(0.0, dtype) == ("ok", "")
    for bad in (tol * 1.001, math.nan, math.inf):
        status, why = within_limit(bad, dtype)
        assert status == "incorrect" and dtype in why, (bad, status, why)


def _planted(base: str, scale: float) -> str:
    """The real backend `base` registered again with its output scaled by `scale` (a
    planted bug in a real backend), the way discovery registers one; returns its name."""
    from moe_lab import backends
    cls = backends.backend_class(base)
    name = f"{base}-planted-x{scale}"

    def prepare(self, problem, weights, *a, **kw):
        fn = cls.prepare(self, problem, weights, *a, **kw)
        return lambda *args: fn(*args) * scale
    backends.register(type(f"Planted{len(name)}", (cls,), dict(
        name=name, description=f"{base}, output x{scale} (a planted bug)", prepare=prepare)))
    assert backends.backend_class(base) is cls  # the real one untouched
    return name


@pytest.fixture
def planted():
    from moe_lab import backends
    made = []

    def make(base, scale):
        made.append(_planted(base, scale))
        return made[-1]
    yield make
    for name in made:
        backends._REGISTRY.pop(name, None)


# (dtype, the backend planted, a scale just past the dtype's limit): the error of the
# unscaled backend there is far below each limit (the control below)
OFF = [("fp16", "torch", 1.01), ("fp32", "torch", 1.01), ("fp8-tensor", "torch-fp8-dequant", 1.1),
       ("fp8-channel", "torch-fp8-dequant", 1.1), ("fp8-block128", "torch-fp8-dequant", 1.1)]


@pytest.mark.parametrize("dtype,base,scale", OFF)
def test_a_backend_one_step_off_its_dtypes_limit_is_incorrect(planted, dtype, base, scale):
    """fp16 and fp32 held to their own limits (not bf16's 2%), the fp8 schemes to 6%: a
    backend 1% (fp16, fp32) or 10% (fp8) off is incorrect; the same backend unscaled
    passes."""
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.correctness import check_problem
    model = SMALL if not dtype.startswith("fp8") else "custom:H=256,I=256,E=8,k=2"
    prob = make_problem(model, 8, dtype, 1, 1)
    good, bad = check_problem(prob, [planted(base, 1.0), planted(base, scale)], "cpu", seed=0)
    assert good["status"] == "ok", good
    assert bad["status"] == "incorrect", bad
    assert bad["max_rel_err"] == pytest.approx(scale - 1, rel=0.3)


def test_a_backend_is_let_through_only_for_the_fp8_schemes_it_declares():
    """A backend with an fp8-tensor path is no fp8-block128 backend: the gate says which
    schemes it has; a backend with none is refused every fp8 point; the scheme it declares
    passes (a shape of whole 128 blocks, so no checkpoint rule is asked)."""
    from moe_lab import backends
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.points import gate

    class TensorOnly(backends.Backend):
        name, quant_schemes, fp8_formats = "tensor-only", ("fp8-tensor",), ("e4m3fn",)

    class NoFp8(backends.Backend):
        name, quant_schemes, fp8_formats = "no-fp8", (), ("e4m3fn",)
    shape = "custom:H=256,I=256,E=8,k=2"
    assert gate(TensorOnly(), make_problem(shape, 4, "fp8-tensor", 1, 1), "cpu") == ("ok", "")
    for scheme in ("fp8-channel", "fp8-block128"):
        status, why = gate(TensorOnly(), make_problem(shape, 4, scheme, 1, 1), "cpu")
        assert status == "unsupported" and scheme in why and "fp8-tensor" in why, why
        status, why = gate(NoFp8(), make_problem(shape, 4, scheme, 1, 1), "cpu")
        assert status == "unsupported" and scheme in why, why
    assert gate(NoFp8(), make_problem(shape, 4, "bf16", 1, 1), "cpu") == ("ok", "")


# --- an incorrect point is never timed ---------------------------------------------------

def test_an_incorrect_point_is_never_timed(planted, monkeypatch, tmp_path):
    """The one measuring function times a point only once it passed its check: a backend
    7% off in bf16 is incorrect, has no time, and the timer is never called for it; the
    correct backend beside it is timed."""
    import moe_lab as ml
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring import points, timing
    from moe_lab.measuring.correctness import make_inputs, make_weights, reference
    calls = []
    real = timing.time_fn

    def spy(kind, fn, *a, **kw):
        calls.append(kind)
        return real(kind, fn, *a, **kw)
    monkeypatch.setattr(timing, "time_fn", spy)
    p = make_problem(SMALL, 8, "bf16", 1, 1)
    w, inp = make_weights(p, "cpu", 0), make_inputs(p, "cpu", 1)
    ref = reference(p, w, inp)
    kw = dict(modes=["eager"], inputs=inp, ref=ref, timer_kw=dict(warmup_ms=1, rep_ms=2))
    bad = points.measure_point(points.Point(p, planted("torch", 1.07)), w, "cpu", **kw)
    assert bad.status == "incorrect" and bad.timed is None and calls == []
    good = points.measure_point(points.Point(p, "torch"), w, "cpu", **kw)
    assert good.ok and calls == ["eager"] and good.timed[0].timing is not None
    # and through the sweep: the incorrect row has no time
    calls.clear()
    rows = ml.measure(SMALL, [8], backends=[planted("torch", 1.07)], tp=1, dtype="bf16",
                      device="cpu", run=tmp_path / "r", rep_ms=2, warmup_ms=1, profile=False)
    assert list(rows["status"]) == ["incorrect"] and rows["median_us"].isna().all()
    assert calls == []


# --- what the configuration step may override ---------------------------------------------

TUNABLE = "custom:H=64,I=32,E=4,k=2"


@pytest.fixture
def chunked():
    """tests/data/plugin/torch_chunked.py registered the way discovery would."""
    yield from plugin_backend("torch_chunked.py", "torch-chunked")


def test_the_configuration_step_never_overrides_the_gate(chunked, tmp_path):
    """A tunable backend given a configuration file for a point the gate refuses (the
    router weight on the input is top-1 only) stays unsupported with the gate's reason;
    `--config tuned` without a tuned file is unsupported and says so (never the default
    under the name tuned); the file itself is used where the gate lets the point through."""
    import dataclasses
    from moe_lab.core.problems import Problem, make_problem
    from moe_lab.measuring import points
    from moe_lab.measuring.correctness import make_inputs, make_weights, reference
    from moe_lab.storage.configs import write_table
    cfg = str(write_table(tmp_path / "cfg" / "chunk16.json", {1: {"CHUNK": 16}}))

    def check(p, config, draw=True):
        w = make_weights(p, "cpu", 0)
        inp = make_inputs(p, "cpu", 1) if draw else None  # a refused point draws nothing
        return points.check_point(points.Point(p, "torch-chunked", config=config), w, "cpu",
                                  inputs=inp, ref=reference(p, w, inp) if draw else None,
                                  device_name="NVIDIA H200")
    plain = make_problem(TUNABLE, 4, "fp32", 1, 1)
    top2 = Problem(dataclasses.replace(plain.model, router="llama4"), 4, "fp32", 1, 1, 0)
    assert top2.weight_on_input and top2.topk == 2
    refused = check(top2, cfg, draw=False)
    assert refused.status == "unsupported" and "top-1 only" in refused.error, refused
    none = check(plain, "tuned")
    assert none.status == "unsupported" and "no tuned configuration" in none.error, none
    assert none.fn is None  # nothing was prepared
    used = check(plain, cfg)
    assert used.ok, used


# --- vLLM's quant config: the checkpoint's scale layout -----------------------------------

@pytest.mark.parametrize("dtype", ["fp8-tensor", "fp8-channel", "fp8-block128"])
def test_vllms_quant_config_says_the_checkpoints_scale_layout(monkeypatch, dtype):
    """The quant config the `vllm` backend hands vLLM (and vllm_paths' classes build theirs
    from the same arguments: CUTLASS reads per_out_ch_quant, the Triton kernel
    per_act_token_quant) describes the checkpoint: fp8-channel one weight scale per output
    channel and one activation scale per token, fp8-tensor one per expert and per tensor,
    fp8-block128 128x128 blocks."""
    import torch
    import _vllm_package
    from moe_lab.backends import Weights, get
    from moe_lab.core.problems import make_problem
    from moe_lab.core.quant import quantize_weights
    try:
        fm, _ = _vllm_package.import_vllm()
    except (ImportError, OSError) as exc:
        pytest.skip(f"the vllm {_vllm_package.VERSION} package cannot be had here: {exc}")
    monkeypatch.setattr(fm, "get_device_name_as_file_name", lambda device_id=0: "NVIDIA_H200")
    fm.get_moe_configs.cache_clear()
    p = make_problem("custom:H=256,I=256,E=8,k=2", 5, dtype, 1, 1, 0)
    g = torch.Generator().manual_seed(0)
    w1 = (torch.randn(8, 512, 256, generator=g) / 16).to(torch.bfloat16)
    w2 = (torch.randn(8, 256, 256, generator=g) / 16).to(torch.bfloat16)
    w = Weights(w1, w2, p.expert_map("cpu"), quantize_weights(w1, w2, dtype, "e4m3fn"))
    q = get("vllm").prepare(p, w).call_kwargs["quant_config"]
    channel = dtype == "fp8-channel"
    assert (q.per_out_ch_quant, q.per_act_token_quant) == (channel, channel)
    assert q.is_per_tensor is (dtype == "fp8-tensor")
    assert q.block_shape == ([128, 128] if dtype == "fp8-block128" else None)
    want = {"fp8-tensor": (8,), "fp8-channel": (8, 512, 1), "fp8-block128": (8, 4, 2)}[dtype]
    assert tuple(q.w1_scale.shape) == want


# --- the sparse align under EP ------------------------------------------------------------

SPARSE_EP = r"""
import json
import torch
from moe_lab.core import glue
out = {"interpreted": glue.interpreted()}
# EP2 of 64 experts, rank 1: experts 32..63 are local 0..31, the sentinel 32; two tokens,
# top-2: 4 pairs over 33 aligned experts (few pairs over many experts), BLOCK_M 4
emap = torch.full((64,), -1, dtype=torch.int32)
emap[32:] = torch.arange(32, dtype=torch.int32)
ids = torch.tensor([[40, 3], [5, 33]], dtype=torch.int32)
G = glue.Glue("fused", "cpu", steps=("align",))
s, e, n = G.align(ids, 33, 4, emap)
N = int(n)
out.update(n=N, sorted=s[:N].tolist(), experts=e[:N // 4].tolist())
# without a map the same few pairs may take a block each (the sparse path): each block's
# rows are its expert's
s, e, n = G.align(ids, 64, 4)
N = int(n)
flat = ids.reshape(-1).tolist()
out["plain"] = sorted((int(e[b]), [flat[i] for i in s[b * 4:(b + 1) * 4].tolist() if i < 4])
                      for b in range(N // 4))
print(json.dumps(out))
"""


def test_few_pairs_under_ep_are_sorted_with_the_map_not_given_a_block_each():
    """Under EP the remote pairs must sort last to the sentinel, whose block is -1, and
    the local ones carry their local expert: few pairs over many experts with an EP map
    still take the map (the sparse path, a block per pair with its global expert id,
    would have the GEMMs read expert 40 of a rank that holds 32)."""
    from test_bites import _interpreted
    a = _interpreted(SPARSE_EP)
    # pairs: 0 -> 40 (local 8), 1 -> 3 (remote), 2 -> 5 (remote), 3 -> 33 (local 1)
    assert (a["n"], a["sorted"], a["experts"]) == (
        12, [3, 4, 4, 4, 0, 4, 4, 4, 1, 2, 4, 4], [1, 8, -1]), a
    got = {tuple(r) for _, r in a["plain"]}
    assert got == {(40,), (3,), (5,), (33,)} or got == {(3,), (5,), (33,), (40,)}
    assert all(all(x == e for x in rows) for e, rows in a["plain"]), a["plain"]


# --- tuned files ---------------------------------------------------------------------------

def test_a_config_file_named_for_another_shape_is_refused_for_the_point(tmp_path):
    """A `--config FILE` named as vLLM names a tuned file (E=<local experts>,N=<I per
    rank>) of another shape is not this point's configuration: the point says so; a file
    of its own shape, or of no shape, is used."""
    from moe_lab.core.problems import make_problem
    from moe_lab.storage.configs import config_for, write_table
    p = make_problem("custom:H=256,I=256,E=8,k=2", 16, "bf16", 1, 1)
    entry = {16: {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64,
                  "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 2}}
    other = write_table(tmp_path / "E=16,N=1024,device_name=NVIDIA_H200.json", entry)
    mine = write_table(tmp_path / "E=8,N=256,device_name=NVIDIA_H200.json", entry)
    plain = write_table(tmp_path / "mine.json", entry)
    table, why = config_for("vllm", str(other), p, "NVIDIA H200")
    assert "E=16,N=1024" in why and "E=8,N=256" in why, why
    for f in (mine, plain):
        table, why = config_for("vllm", str(f), p, "NVIDIA H200")
        assert why == "" and table["gemm1"][16]["BLOCK_SIZE_N"] == 64


def test_a_tuned_down_file_is_gemm2s_configuration(tmp_path, chunked):
    """A backend with a file per GEMM: `--config tuned` hands gemm2 its own file's table
    (the `_down` file beside gemm1's), gemm1 the other; where only gemm1's exists, both."""
    from moe_lab.core.problems import make_problem
    from moe_lab.storage.configs import load_tuned, tuned_file_paths, write_table
    p = make_problem(TUNABLE, 16, "fp32", 1, 1)
    paths = tuned_file_paths("torch-chunked", p, "NVIDIA H200", tmp_path)
    if set(paths) != {"gemm1", "gemm2"} or paths["gemm1"] == paths["gemm2"]:
        pytest.skip(f"torch-chunked has no per-GEMM files: {paths}")
    write_table(paths["gemm1"], {16: {"CHUNK": 16}})
    only = load_tuned("torch-chunked", p, "NVIDIA H200", tmp_path)
    assert only["gemm1"] == only["gemm2"] == {16: {"CHUNK": 16}}
    write_table(paths["gemm2"], {16: {"CHUNK": 4}})
    both = load_tuned("torch-chunked", p, "NVIDIA H200", tmp_path)
    assert both["gemm1"] == {16: {"CHUNK": 16}} and both["gemm2"] == {16: {"CHUNK": 4}}
    assert both.files["gemm2"] == paths["gemm2"]


# --- the run chooser -----------------------------------------------------------------------

def _row(tokens, backend="aiter-triton", config="default", median_us=100.0, status="ok",
         **kw):
    r = dict(model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype="bf16", routing="uniform",
             tokens=tokens, backend=backend, config=config, mode="graph", status=status,
             error="" if status == "ok" else f"{status}: why", median_us=median_us,
             device="NVIDIA H200")
    r.update(kw)
    r["point_id"] = f"{backend}-{config}-{tokens}-{r['mode']}"
    return r


def _write(root, name, started, rows):
    from moe_lab.storage.store import RunStore
    st = RunStore(root / name)
    st.write_manifest(dict(run_id=name, started=started, status="complete",
                           environment=dict(device="cuda", device_name="NVIDIA H200")))
    st.append(rows)


def test_the_tuning_question_reads_the_run_with_the_most_tuned_and_default_points(
        tmp_path, monkeypatch):
    """Notebook 05's run: the one with the most points both tuned and default, not the
    newest; a newer run with many tuned rows alone (nothing to put them against) or fewer
    pairs is passed over."""
    from moe_lab.analysis import runs as choice
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path))
    _write(tmp_path, "most-pairs", "2026-01-01T00:00:00",
           [_row(t, config=c) for t in (1, 2, 4) for c in ("default", "tuned")])
    _write(tmp_path, "fewer-pairs", "2026-02-01T00:00:00",
           [_row(t, config=c) for t in (1,) for c in ("default", "tuned")])
    _write(tmp_path, "tuned-alone", "2026-03-01T00:00:00",
           [_row(t, config="tuned") for t in (1, 2, 4, 8, 16, 32, 64)])
    c = choice.choose("tuning")
    assert c.run.run_id == "most-pairs", c.why
    assert "fewer-pairs" in c.why and "tuned-alone" not in c.why.split("(fewer")[0]
    assert choice.open_tuned_run().run_id == "most-pairs"


def test_only_vllm_as_shipped_answers_the_vllm_question(tmp_path, monkeypatch):
    """The vLLM comparison's base is vLLM as shipped (backend vllm, config default): a
    newer run with vllm's tuned rows only does not answer it."""
    from moe_lab.analysis import runs as choice
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path))
    _write(tmp_path, "shipped", "2026-01-01T00:00:00", [_row(1, backend="vllm")])
    _write(tmp_path, "tuned-only", "2026-02-01T00:00:00",
           [_row(1, backend="vllm", config="tuned"), _row(1, backend="aiter-triton")])
    c = choice.choose("vllm")
    assert c.run.run_id == "shipped", c.why
    assert "1 without" in c.why


# --- the ledger ----------------------------------------------------------------------------

def test_the_floor_is_the_slower_of_the_memory_and_compute_bounds():
    """A phase cannot run faster than either its bytes at the bandwidth or its flops at the
    peak: its floor is the larger; a compute-bound GEMM (many tokens) and a memory-bound one
    (one token) each say which."""
    from moe_lab.core.devices import ceilings_for
    from moe_lab.core.problems import make_problem
    from moe_lab.cost import ledger as lg
    from moe_lab.cost.roofline import peak_tflops, roof_bandwidth
    ceil = ceilings_for("NVIDIA H200")
    _, tb_s = roof_bandwidth(ceil)
    peak = peak_tflops(ceil, "bf16")
    for tokens, bound in ((1, "memory"), (8192, "compute")):
        p = make_problem("deepseek-r1", tokens, "bf16", 8, 1)
        f = lg.phase_floors(p, None, ceilings=ceil)["gemm1"]
        mem, comp = f["bytes"] / (tb_s * 1e6), f["flops"] / (peak * 1e6)
        assert f["floor_us"] == pytest.approx(max(mem, comp)) and f["bound"] == bound, f


def test_a_phase_below_its_floor_has_nothing_recoverable():
    """over_us is what a phase could still gain, never negative: a phase measured below
    its floor (its floor from an estimate) has 0 recoverable, and x_floor below 1."""
    from moe_lab.analysis import ledger as al
    res = pd.DataFrame([dict(model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype="bf16",
                             routing="uniform", tokens=64, backend="torch", mode="graph",
                             status="ok", median_us=500.0, point_id="p", device="NVIDIA H200")])
    ph = pd.DataFrame([dict(point_id="p", phase=p, measured_us=m, calls=1.0, floor_us=f,
                            floor_bytes=0.0, floor_flops=0.0, bound="memory")
                       for p, m, f in (("gemm1", 100.0, 200.0), ("gemm2", 300.0, 100.0),
                                       ("gaps", 100.0, 0.0))])
    led = al.ledger(res, None, ph).set_index("phase")
    assert led.at["gemm1", "over_us"] == 0 and led.at["gemm1", "x_floor"] == 0.5
    assert led.at["gemm2", "over_us"] == 200
    assert al.layer_summary(led.reset_index())["recoverable_us"].iloc[0] == 300


def test_best_points_keeps_the_fastest_ok_row_of_each_point():
    from moe_lab.analysis.ledger import best_points
    rows = [_row(16, backend=b, median_us=us, status=s)
            for b, us, s in (("torch", 90.0, "ok"), ("aiter-triton", 50.0, "ok"),
                             ("vllm", 70.0, "ok"), ("aiter", 10.0, "incorrect"))]
    rows.append(_row(32, backend="torch", median_us=200.0))
    best = best_points(pd.DataFrame(rows))
    assert list(best["tokens"]) == [16, 32]
    assert list(best["backend"]) == ["aiter-triton", "torch"]
    assert list(best["choice"]) == ["aiter-triton default", "torch default"]


# ==========================================================================================
# The mutations
# ==========================================================================================

P = "moe_lab/measuring/points.py"
VF, VP = "moe_lab/backends/vllm_fused.py", "moe_lab/backends/vllm_paths.py"
B67 = "tests/test_bites_67.py::"
T_BITES = "tests/test_bites.py::"
T_POINTS = "tests/test_points.py::"
T_QUANT = "tests/test_quant.py::"
T_VAPI = "tests/test_vllm_api.py::"
T_VPATHS = "tests/test_vllm_paths.py::"
T_TUNED = "tests/test_tuned_files.py::"
T_LEDGER = "tests/test_ledger.py::"

LIMIT_TEST = B67 + "test_the_limit_passes_at_the_threshold_and_never_for_nan"
OFF_TEST = B67 + "test_a_backend_one_step_off_its_dtypes_limit_is_incorrect"
CONFIG_TEST = B67 + "test_the_configuration_step_never_overrides_the_gate"
SCALES_TEST = T_VAPI + "test_fp8_scales_reach_the_kernel_where_it_reads_them"
BINDS_TEST = T_VAPI + "test_the_call_binds_to_vllms_fused_experts"
LAYER_TEST = T_VPATHS + "test_the_layer_config_is_the_one_vllm_builds_for_the_sharding"
KEYS_TEST = T_VPATHS + "test_the_quant_keys_are_what_vllm_s_checkpoint_methods_pass"
SPARSE_EP_TEST = B67 + "test_few_pairs_under_ep_are_sorted_with_the_map_not_given_a_block_each"
ALIGN_EP_TEST = T_BITES + "test_align_under_ep_maps_the_experts_and_marks_the_remote_blocks"
GRID_TEST = (T_TUNED + "test_a_shape_holds_the_grid_only_with_every_key_in_every_stage_and_a_"
             "complete_run")
TUNING_Q = B67 + "test_the_tuning_question_reads_the_run_with_the_most_tuned_and_default_points"

MUTATIONS = (
    # the correctness gate: the limit rule and the limits
    Mutation("limit-exclusive-at-the-threshold", P, "    if err <= tol:\n",
             "    if err < tol:\n", (LIMIT_TEST,),
             "an error exactly at the dtype's limit is incorrect"),
    Mutation("limit-nan-passes", P, "    if err <= tol:\n", "    if not err > tol:\n",
             (LIMIT_TEST,), "a NaN error passes the limit"),
    Mutation("threshold-bf16-loose", P, '"bf16": 2e-2,', '"bf16": 1e-1,',
             (T_BITES + "test_a_bf16_backend_a_few_percent_off_is_incorrect",),
             "bf16's limit 10%: a backend 5-10% off passes"),
    Mutation("threshold-fp16-as-bf16", P, '"fp16": 5e-3,', '"fp16": 2e-2,', (OFF_TEST,),
             "fp16 held to bf16's limit"),
    Mutation("threshold-fp32-as-bf16", P, '"fp32": 2e-3}', '"fp32": 2e-2}', (OFF_TEST,),
             "fp32 held to bf16's limit"),
    Mutation("threshold-fp8-loose", P, "{s: 6e-2 for s in FP8_SCHEMES}",
             "{s: 2e-1 for s in FP8_SCHEMES}", (OFF_TEST,),
             "the fp8 schemes' limit 20%: a kernel 10% off passes"),
    Mutation("threshold-fp8-as-bf16", P, "{s: 6e-2 for s in FP8_SCHEMES}",
             "{s: 2e-2 for s in FP8_SCHEMES}",
             (T_QUANT + "test_fp8_backend_passes_and_a_wrong_scale_fails",),
             "the fp8 schemes held to bf16's limit: correct fp8 kernels fail"),
    # the correctness gate: what is timed, what the configuration step may override
    Mutation("incorrect-point-timed", P, "    if not c.ok:\n        return c\n    if before",
             '    if c.status in ("unsupported", "unavailable"):\n        return c\n'
             "    if before",
             (B67 + "test_an_incorrect_point_is_never_timed",),
             "measure_point skips only refused points: an incorrect one is timed"),
    Mutation("compile-incorrect-timed", "moe_lab/measuring/compile.py",
             'if status != "ok":  # incorrect: a row with its error, never a time',
             'if status not in ("ok", "incorrect"):  # incorrect: a row with its error, never a time',
             ("tests/test_compile.py::test_a_compiled_point_that_fails_the_check_is_incorrect_"
              "and_has_no_time",),
             "the compile path times a compiled call that failed its check"),
    Mutation("config-overrides-the-gate", P,
             'if status == "ok" and table is None and be.tunable',
             "if table is None and be.tunable", (CONFIG_TEST,),
             "the configuration step runs for a point the gate refused, and resets its status"),
    Mutation("config-missing-tuned-runs-default", P,
             '        status = "unsupported" if why else "ok"\n', '        status = "ok"\n',
             (CONFIG_TEST,),
             "--config tuned without a tuned file runs the default under the name tuned"),
    Mutation("gate-any-fp8-scheme", P,
             "if problem.is_fp8 and problem.dtype not in backend.quant_schemes:",
             "if problem.is_fp8 and not backend.quant_schemes:",
             (B67 + "test_a_backend_is_let_through_only_for_the_fp8_schemes_it_declares",),
             "a backend with one fp8 scheme is let through for every scheme"),
    Mutation("fp8-format-not-checked", P, "    if fmt in backend.fp8_formats:\n",
             "    if fmt or fmt in backend.fp8_formats:\n",
             (T_POINTS + "test_a_backend_without_the_devices_fp8_format_is_unsupported",),
             "a backend is given an fp8 format it does not take (MI300's e4m3fnuz)"),
    Mutation("checkpoint-block-rule-hidden-only", P,
             '(("H", problem.hidden), ("I", problem.inter))', '(("H", problem.hidden),)',
             (T_POINTS + "test_a_rank_that_splits_a_128_block_is_unsupported_for_every_backend",),
             "the 128-block rule asks H only: Qwen3 at TP8 (I = 192) runs"),
    Mutation("checkpoint-weight-on-input-top2", P,
             "if problem.weight_on_input and problem.topk != 1:",
             "if problem.weight_on_input and problem.topk > 2:",
             (T_POINTS + "test_router_weight_on_input_with_topk_above_1_is_unsupported_for_"
              "every_backend",),
             "the router weight on the input let through at k=2"),
    # vLLM's scale layouts and expert counts
    Mutation("vllm-channel-scales-per-tensor", VF,
             "per_act_token_quant=True, per_out_ch_quant=True)",
             "per_act_token_quant=True, per_out_ch_quant=False)",
             (B67 + "test_vllms_quant_config_says_the_checkpoints_scale_layout",),
             "fp8-channel's weight scales read as one per expert"),
    Mutation("vllm-block-shape-dropped", VF,
             "return dict(w1_scale=w1_scale, w2_scale=w2_scale, block_shape=list(BLOCK_SHAPE))",
             "return dict(w1_scale=w1_scale, w2_scale=w2_scale, block_shape=None)",
             (SCALES_TEST,), "fp8-block128's block shape not passed to vLLM"),
    Mutation("vllm-tensor-scales-swapped", VF,
             "        return dict(w1_scale=w1_scale, w2_scale=w2_scale)\n",
             "        return dict(w1_scale=w2_scale, w2_scale=w1_scale)\n", (SCALES_TEST,),
             "fp8-tensor's gemm1 reads gemm2's weight scales"),
    Mutation("vllm-global-experts-local", VF, "global_num_experts=problem.experts,",
             "global_num_experts=problem.local_experts,", (BINDS_TEST,),
             "under EP vLLM is told the local expert count as the global one"),
    Mutation("vllm-expert-map-dropped", VF,
             "global_num_experts=problem.experts, expert_map=expert_map,",
             "global_num_experts=problem.experts, expert_map=None,", (BINDS_TEST,),
             "under EP the expert map is not passed: every expert read as local"),
    Mutation("vllm-weight-on-input-dropped", VF,
             "apply_router_weight_on_input=bool(problem.weight_on_input),",
             "apply_router_weight_on_input=False,",
             (T_VAPI + "test_llama4_routes_the_weight_on_the_input",),
             "Llama-4's router weight applied on the output"),
    Mutation("vllm-paths-tp-under-ep", VP, "tp_size=1 if ep else problem.tp,",
             "tp_size=problem.tp,", (LAYER_TEST,),
             "under EP vLLM's layer config still shards I by tp"),
    Mutation("vllm-paths-intermediate-per-rank", VP,
             "intermediate_size=problem.inter * par.tp_size,", "intermediate_size=problem.inter,",
             (LAYER_TEST,), "the layer's full intermediate size given as the per-rank one"),
    Mutation("vllm-paths-local-experts-global", VP, "num_local_experts=problem.local_experts,",
             "num_local_experts=problem.experts,", (LAYER_TEST,),
             "under EP every expert counted as local"),
    Mutation("vllm-paths-channel-no-cutlass", VP,
             '"kFp8DynamicTokenSym", True),', '"kFp8DynamicTokenSym", False),', (KEYS_TEST,),
             "fp8-channel checkpoints not allowed vLLM's CUTLASS path"),
    Mutation("vllm-paths-block-act-per-token", VP,
             '("kFp8Static128BlockSym", "kFp8Dynamic128Sym", False)',
             '("kFp8Static128BlockSym", "kFp8DynamicTokenSym", False)', (KEYS_TEST,),
             "fp8-block128's activations keyed per token, not per 128 block"),
    # align
    Mutation("sparse-align-under-ep", "moe_lab/core/align.py",
             "return expert_map is None and 0 < numel", "return 0 < numel", (SPARSE_EP_TEST,),
             "the sparse align under EP: a block per pair with its global expert id"),
    Mutation("glue-sparse-align-ignores-the-map", "moe_lab/core/glue.py",
             "if is_sparse(topk_ids.numel(), n_exp, expert_map):",
             "if is_sparse(topk_ids.numel(), n_exp):", (SPARSE_EP_TEST,),
             "Glue.align asks for the sparse path without the EP map"),
    Mutation("sparse-align-for-many-pairs", "moe_lab/core/align.py",
             "and numel * SPARSE_FACTOR <= n_exp\n", "and numel <= n_exp * SPARSE_FACTOR\n",
             ("tests/test_aiter_triton_interpreted.py::test_the_sparse_align_serves_few_pairs_"
              "without_ep_and_matches_the_reference",),
             "the sparse rule upside down: many pairs take a block each"),
    Mutation("align-aiter-remote-blocks-not-marked", "moe_lab/core/align.py",
             "        expert_ids = torch.where(expert_ids == sentinel, -1, expert_ids)\n",
             "        pass\n", (ALIGN_EP_TEST,),
             "aiter's align under EP keeps the sentinel's id on its blocks"),
    Mutation("align-fused-sentinel-past-the-end", "moe_lab/core/align.py",
             "    sentinel = n_exp - 1\n    remote = has_map",
             "    sentinel = n_exp\n    remote = has_map", (ALIGN_EP_TEST,),
             "our align puts the remote pairs on an expert past the last"),
    # tuned files
    Mutation("inventory-grid-without-a-complete-run", "moe_lab/analysis/tuned/files.py",
             'holds_grid=bool(found and not missing and run and status == "complete"),',
             "holds_grid=bool(found and not missing and run),", (GRID_TEST,),
             "a file holds the grid whatever its search run's status"),
    Mutation("inventory-keys-of-any-stage", "moe_lab/analysis/tuned/files.py",
             "            keys &= set(read_table(p))", "            keys |= set(read_table(p))",
             (GRID_TEST,), "a key held by one stage's file counts for the shape"),
    Mutation("pairs-stale-tuned-rows-kept", "moe_lab/analysis/tuned/files.py",
             "            if is_history(root, x, r.device):",
             "            if False and is_history(root, x, r.device):",
             (T_TUNED + "test_only_tuned_rows_measured_after_their_file_are_evidence_and_the_"
              "newest_run_wins",),
             "tuned rows measured before their file was written taken as its evidence"),
    Mutation("config-file-of-another-shape-accepted", "moe_lab/storage/configs.py",
             "    return table, _other_shape(backend, config, problem, dev_name)\n",
             '    return table, ""\n',
             (B67 + "test_a_config_file_named_for_another_shape_is_refused_for_the_point",),
             "a --config file named for another shape used as this point's"),
    Mutation("tuned-gemm2-reads-gemm1", "moe_lab/storage/configs.py",
             '        tables[stage] = read_table(p) if p.exists() else tables["gemm1"]\n',
             '        tables[stage] = read_table(paths["gemm1"])\n',
             (B67 + "test_a_tuned_down_file_is_gemm2s_configuration",),
             "the tuned gemm2 table read from gemm1's file"),
    # the run chooser
    Mutation("choose-cpu-runs-first", "moe_lab/analysis/runs/__init__.py",
             "return sorted(found, key=lambda r: not on_gpu(r))",
             "return sorted(found, key=lambda r: on_gpu(r))",
             ("tests/test_users_runs.py::test_one_rule_reads_the_gpu_runs_before_a_newer_cpu_run",),
             "CPU runs answer before GPU runs"),
    Mutation("choose-ranked-question-takes-the-fewest", "moe_lab/analysis/runs/__init__.py",
             "        found.sort(key=q.rank, reverse=True)\n", "        found.sort(key=q.rank)\n",
             (TUNING_Q,), "a ranked question takes the run with the fewest such points"),
    Mutation("tuning-question-answered-by-tuned-rows-alone", "moe_lab/analysis/runs/__init__.py",
             'both = set(ok.loc[ok["config"] == TUNED, "backend"]) & set(',
             'both = set(ok.loc[ok["config"] == TUNED, "backend"]) | set(', (TUNING_Q,),
             "a run of tuned rows alone answers the tuning question"),
    Mutation("vllm-question-answered-by-tuned-vllm", "moe_lab/analysis/runs/__init__.py",
             "& (cfg == VLLM_AS_SHIPPED[1])).any())", ").any())",
             (B67 + "test_only_vllm_as_shipped_answers_the_vllm_question",),
             "a run of vLLM's tuned rows answers the question about vLLM as shipped"),
    # the ledger
    Mutation("ledger-act-floor-without-scales", "moe_lab/cost/ledger.py",
             '"act": (rows * 2 * I * a + rows * I * q + act_scale_bytes(s, rows, I), 0.0),',
             '"act": (rows * 2 * I * a + rows * I * q, 0.0),',
             (T_LEDGER + "test_fp8_block128_floors_are_the_hand_count",),
             "the act floor drops the activation scales gemm2 reads"),
    Mutation("ledger-combine-floor-at-k1", "moe_lab/cost/ledger.py",
             "0.0 if k == 1 else float(T * k * H * a + T * H * a)",
             "float(T * k * H * a + T * H * a)",
             (T_LEDGER + "test_k1_has_no_combine_and_no_ceilings_means_nan",),
             "a top-1 layer gets a combine floor"),
    Mutation("ledger-gemm2-flops-doubled", "moe_lab/cost/ledger.py",
             "2.0 * pairs * I * H),", "2.0 * pairs * 2 * I * H),",
             (T_LEDGER + "test_bf16_floors_are_the_hand_count",), "gemm2's flops counted over 2I"),
    Mutation("ledger-floor-the-faster-bound", "moe_lab/cost/ledger.py",
             "else max(mem, comp)", "else min(mem, comp)",
             (B67 + "test_the_floor_is_the_slower_of_the_memory_and_compute_bounds",),
             "a phase's floor the faster of its memory and compute bounds"),
    Mutation("ledger-recoverable-negative", "moe_lab/analysis/ledger.py",
             '(out["measured_us"] - out["floor_us"]).clip(lower=0)',
             '(out["measured_us"] - out["floor_us"])',
             (B67 + "test_a_phase_below_its_floor_has_nothing_recoverable",),
             "a phase below its floor gives negative recoverable us"),
    Mutation("ledger-gather-ignored-for-stored-phases", "moe_lab/analysis/ledger.py",
             '        gathered = gathers_rows(row.get("backend"))\n',
             "        gathered = False\n",
             (T_LEDGER + "test_a_stored_run_gets_the_rows_in_its_align_and_combine_floors",),
             "the stored rows of a row-gathering backend keep the ids-only align floor"),
    Mutation("best-point-slowest", "moe_lab/analysis/ledger.py",
             'return r.sort_values("median_us").groupby(POINT).head(1)',
             'return r.sort_values("median_us").groupby(POINT).tail(1)',
             (B67 + "test_best_points_keeps_the_fastest_ok_row_of_each_point",),
             "best_points keeps the slowest row per point"),
)


def test_the_mutations_are_distinct_and_name_their_catching_tests():
    import test_bites
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names)) and len(MUTATIONS) >= 30
    assert not set(names) & {m.name for m in test_bites.MUTATIONS}
    assert len({(m.file, m.old, m.new) for m in MUTATIONS}) == len(MUTATIONS)
    assert not {(m.file, m.old, m.new) for m in MUTATIONS} & {
        (m.file, m.old, m.new) for m in test_bites.MUTATIONS}
    for m in MUTATIONS:
        assert m.old != m.new and m.catch and m.bug, m.name
        n = m.occurrences()
        assert n == 1, (f"{m.file} holds the mutated text {n} times, not once: the bite "
                        f"{m.name!r} ({m.bug}) needs updating to the code as it is now")
        for node in m.catch:
            path, _, name = node.partition("::")
            assert (ROOT / path).is_file(), (m.name, node)
            fn = name.split("[")[0]
            assert f"def {fn}(" in (ROOT / path).read_text(), (m.name, node)


def test_the_docstring_lists_every_mutation():
    for m in MUTATIONS:
        assert m.name in __doc__, m.name


slow = pytest.mark.skipif(not RUN_MUTATIONS, reason=f"the mutation runs are slow; run them with `{HOW}`")


@slow
@pytest.mark.parametrize("m", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_each_mutation_is_caught(m, tmp_path, mutation_runs):
    assert_caught(m, tmp_path, mutation_runs)  # tests/_bites_harness.py says what is asserted


@slow
def test_the_control_passes_unmutated(tmp_path, mutation_runs):
    assert_control(MUTATIONS, tmp_path, mutation_runs)
