"""Tests that bite: each asserts a property that a plausible one-line bug breaks.

Round 1 (issue 22): properties the rest of the suite let through (a mutation check found them):

1. a backend 5-10% off is `incorrect` in bf16 (the correctness limit is tight enough);
2. a second sweep into the same folder with a new `--config` measures the new points;
3. compare's verdict keeps a ratio inside the noise band as "no detectable change";
4. a gain written with a Unicode minus (U+2212, as PR text has it) parses like "-";
5. the nearest tuned key breaks a tie the way configs.nearest's docstring says (smaller);
6. the distributed prediction is the slowest rank's expert time + the slowest collective;
7. a timed `incorrect` row is never drawn by the kernel-time or roofline figures.
Plus the same weakness found elsewhere: timing statistics on data whose mean equals its
median (summarize, the steady-block rule).

Round 2 (issue 34): the modules added since. MUTATIONS (at the end) applies each bug below
to a copy of the checkout and runs the tests named beside it there, which must fail
(tests/_bites_harness.py; the text replaced must occur exactly once; a control runs the
same tests on an unmutated copy, where they pass). Tests of this file unless named:

  ledger floors   ledger-rows-drop-k: act/align floors count T rows, not T*k
                    -> test_ledger::test_bf16_floors_are_the_hand_count
                  ledger-rows-local-pairs: under EP the glue floors count local pairs only
                    -> test_ledger::test_ep_counts_local_pairs_and_experts_but_glue_sees_every_row
  glue kernels    glue-kernel-combine-accumulates-in-16-bit: the combine's running sum
                  rounded to the activation dtype after every slot (fp32 accumulation done
                  in bf16/fp16) -> test_the_fused_combine_sums_in_fp32_and_rounds_once
  combine (glue)  glue-combine-drops-a-slot: the fused combine sums k - 1 slots -> the same
                  combine-rows-router-weights-ignored: combine_rows_fused drops the weights
                    -> test_combine_rows::test_ours_sums_the_slots_rows_and_never_reads...
  align           align-ep-map-not-applied: Glue.align does not pass the EP map to our align;
                  align-remote-blocks-not-marked: the sentinel's blocks keep its id, not -1
                    -> test_align_under_ep_maps_the_experts_and_marks_the_remote_blocks
  targets         targets-glue-without-allowance: the glue limit loses its 20 us;
                  targets-fp8-never-slower-up-to-256-only: "never slower" stops at 256;
                  targets-summary-least-miss: the summary's worst miss is the least
                    -> test_targets::test_the_ledgers_targets_on_a_hand_made_frame
                  targets-exactly-at-the-goal-misses: >= became >
                    -> test_targets::test_exactly_at_the_target_passes_and_just_below...
                  targets-mean-not-median: the target table's median is the mean
                    -> test_targets::test_the_fp8_targets_count_what_is_met_with_the_median
  noise bands     noise-band-from-the-wrong-quantile: the 0.05 quantile, not the 0.95;
                  noise-band-from-the-quietest-pair: min over the A/A' pairs, not max
                    -> test_the_devices_band_is_the_noisiest_pairs_95th_percentile
  run lock        runlock-shared-not-exclusive: writers take the flock shared
                    -> test_a_second_moe_lab_writer_is_refused_while_the_first_holds_the_folder
                  runlock-live-holder-taken-as-stale: any named holder is taken for dead
                    -> test_hostile_writers::test_a_live_holder_refuses_another_writer_and...
  resume check    resume-seed-not-checked: seed left out of SWEEP_MEANING
                    -> test_a_resume_with_any_setting_that_changes_what_a_row_means_is_refused
                  resume-kind-not-checked: a sweep resumes a tune or import run's folder
                    -> test_a_sweep_does_not_resume_another_kind_of_run
  row schema      rows-glue-default-fused: glue's default '' became 'fused';
                  rows-status-default-none: status's default 'ok' became None
                    -> test_a_row_that_leaves_an_optional_id_field_unset_has_its_default_and_id
  point path      points-roof-share-inverted: pct_of_roof = median / roof;
                  points-gpu-roof-never-computed: the NaN default taken for a roof
                    -> test_finish_gives_the_roof_share_of_the_median_and_computes_a_gpu_...
                  points-p10-p90-swapped -> test_points::test_finish_copies_every_timer_number...

Found on the way: a tune's candidate rows said routing `uniform` (the column's default)
whatever routing the tune timed (fixed in moe_lab/measuring/tuning.py;
test_a_tune_candidates_row_says_the_routing_it_was_timed_with); the fp8 and tuning target
summaries and the ledger's were checked on data whose median is its mean, or not at all.
"""
import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _bites_harness import Mutation, assert_caught, assert_control
from conftest import plugin_backend  # noqa: E402

import moe_lab as ml
from moe_lab.cli import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = "custom:H=64,I=32,E=8,k=2"


# --- 1. a backend a few percent off is incorrect ------------------------------------------

def _planted(scale: float) -> str:
    """Register the real `torch` backend with its output scaled by `scale` (a planted bug
    in a real backend), the way discovery registers one; returns its name."""
    from moe_lab import backends
    from moe_lab.backends.torch_ref import TorchBackend
    planted_name = f"torch-planted-x{scale}"

    @backends.register
    class Planted(TorchBackend):
        name = planted_name
        description = f"the torch reference loop, output x{scale} (a planted bug)"

        def prepare(self, problem, weights):
            fn = super().prepare(problem, weights)
            return lambda *args: fn(*args) * scale
    assert backends.backend_class("torch") is TorchBackend  # the real one untouched
    return planted_name


@pytest.fixture
def planted():
    made = []

    def make(scale):
        made.append(_planted(scale))
        return made[-1]
    yield make
    from moe_lab import backends
    for name in made:
        backends._REGISTRY.pop(name, None)


@pytest.mark.parametrize("scale", [1.05, 1.07, 1.10])
def test_a_bf16_backend_a_few_percent_off_is_incorrect(planted, scale):
    from moe_lab.measuring.correctness import check_problem
    from moe_lab.core.problems import make_problem
    prob = make_problem(SMALL, 8, "bf16", 1, 1)
    row, = check_problem(prob, [planted(scale)], "cpu", seed=0)
    assert row["status"] == "incorrect", row
    assert row["max_rel_err"] == pytest.approx(scale - 1, rel=0.25)
    assert "max_rel_err" in row["error"] and "bf16" in row["error"]


def test_the_same_backend_unscaled_passes_in_bf16(planted):
    """The control: the planted wrapper itself (x1.0) is correct, so the failures above
    are the 5-10% and nothing else."""
    from moe_lab.measuring.correctness import check_problem
    from moe_lab.core.problems import make_problem
    for tokens in (1, 8):
        row, = check_problem(make_problem(SMALL, tokens, "bf16", 1, 1), [planted(1.0)],
                             "cpu", seed=0)
        assert row["status"] == "ok" and row["max_rel_err"] < 0.02, row


def test_moe_lab_check_says_incorrect_for_a_backend_7_percent_off(planted, capsys):
    name = planted(1.07)
    code = main(["check", "--model", SMALL, "--tp", "1", "--tokens", "8", "--dtype", "bf16",
                 "--device", "cpu", "--backends", f"torch,{name}", "--seed", "0"])
    out = capsys.readouterr().out
    assert code == 1  # any failure: exit 1
    table = {ln.split()[3]: ln.split()[4] for ln in out.splitlines()
             if ln.startswith(SMALL)}  # model shard tokens backend status ...
    assert table == {"torch": "PASS", name: "FAIL"}, out
    assert "> 2e-02 for bf16" in out


# --- 2. a new --config into the same folder measures the new points ---------------------

TUNABLE = "custom:H=64,I=32,E=4,k=2"


@pytest.fixture
def chunked():
    """tests/data/plugin/torch_chunked.py registered the way discovery would."""
    for mod in plugin_backend("torch_chunked.py", "torch-chunked"):
        yield mod


def test_a_second_sweep_with_a_config_file_measures_the_new_points(tmp_path, chunked,
                                                                   monkeypatch):
    from moe_lab.storage.configs import write_table
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path / "runs"))
    cfg = write_table(tmp_path / "cfg" / "chunk16.json", {1: {"CHUNK": 16}})
    base = ["sweep", "--models", TUNABLE, "--tp", "1", "--tokens", "4,16", "--dtype", "fp32",
            "--device", "cpu", "--backends", "torch-chunked", "--no-progress",
            "--rep-ms", "2", "--warmup-ms", "1", "--data-dir", str(tmp_path / "runs"),
            "--run-id", "same"]
    assert main(base + ["--config", "default"]) == 0
    res = tmp_path / "runs" / "same" / "results.parquet"
    first = pd.read_parquet(res)
    assert len(first) == 2 and set(first["config"]) == {"default"}
    # what the file's points run: record the configuration each prepare is given
    seen = []
    real = chunked.TorchChunkedBackend.prepare

    def spy(self, problem, weights, config=None):
        seen.append((problem.tokens, config))
        return real(self, problem, weights, config=config)
    monkeypatch.setattr(chunked.TorchChunkedBackend, "prepare", spy)
    assert main(base + ["--config", f"default,{cfg}"]) == 0
    r = pd.read_parquet(res)
    new = r[r["config"] == str(cfg)]
    assert sorted(new["tokens"]) == [4, 16] and set(new["status"]) == {"ok"}, r
    assert (new["median_us"] > 0).all() and r["point_id"].is_unique and len(r) == 4
    # the default points were kept, not re-timed; the file's points ran with the file
    old = r[r["config"] == "default"].set_index("point_id")["measured_at"]
    assert old.to_dict() == first.set_index("point_id")["measured_at"].to_dict()
    given = [c for _, c in seen if c is not None]
    assert given and all(c["gemm1"] == c["gemm2"] == {1: {"CHUNK": 16}} for c in given)


# --- 3. compare: inside the noise band is no change --------------------------------------

def test_a_verdict_inside_the_noise_band_is_no_detectable_change():
    from moe_lab.analysis.compare import verdict
    # compare.verdict(low, high, noise): the bootstrap interval of median(B) / median(A)
    # against the band [exp(-noise), exp(noise)] (noise: the device's calibrated
    # between-process noise in the mode, moe_lab.analysis.noise). Wholly below 1 but inside: no change
    assert verdict(0.985, 0.995, 0.02) == "no detectable change"
    assert verdict(1.005, 1.015, 0.02) == "no detectable change"
    assert verdict(0.93, 0.97, 0.10) == "no detectable change"  # a 10% band
    # beyond the band, a verdict each way
    assert verdict(0.90, 0.97, 0.02) == "faster"
    assert verdict(1.03, 1.10, 0.02) == "slower"
    assert verdict(0.80, 0.88, 0.10) == "faster"
    # an interval that straddles the band's edge is not a change either
    assert verdict(0.97, 0.99, 0.02) == "no detectable change"
    # no calibration: said so for an interval that excludes 1, never a guessed band
    assert verdict(0.90, 0.97, None) == "no calibration"


def test_compare_calls_a_one_percent_graph_change_no_detectable_change(tmp_path):
    """The band through compare(): B 1% faster with a tight interval, in graph mode."""
    from moe_lab.analysis.compare import compare
    from moe_lab.analysis.noise import Calibration
    from moe_lab.storage.store import RunStore, open_run
    rng = np.random.default_rng(3)
    runs = []
    for name, median in (("a", 100.0), ("b", 99.0), ("c", 90.0)):
        st = RunStore(tmp_path / name)
        row = dict(model="m", tp=1, ep=1, ep_rank=0, dtype="bf16", backend="x", mode="graph",
                   tokens=8, routing="uniform", status="ok", median_us=median,
                   point_id="p1")
        st.append([row], [])
        st.append_samples({"p1": median * np.exp(rng.normal(0, 0.002, 400))})
        runs.append(open_run(tmp_path / name))
    a, b, c = runs
    band = Calibration.of({"graph": 0.02})  # a 2% graph band, as if calibrated
    t = compare(a, b, n_resamples=500, calibration=band)
    assert t["high"].iloc[0] < 1 and t["verdict"].iloc[0] == "no detectable change", t
    assert compare(a, c, n_resamples=500, calibration=band)["verdict"].iloc[0] == "faster"
    # without a calibration for the device and mode the verdict says so
    assert compare(a, b, n_resamples=500)["verdict"].iloc[0].startswith("no calibration for")


# --- 4. a gain with a Unicode minus -------------------------------------------------------

@pytest.mark.parametrize("cell", ["\u221212%", "\u221212% (better)", "\u221212.0 %"])
def test_a_gain_with_a_unicode_minus_parses_like_an_ascii_minus(cell):
    from moe_lab.claims.parser import parse_text

    def gain(text):
        blk, = parse_text(f"Metric\tA\tB\tGain\nMean TPOT (ms)\t10.0\t8.8\t{text}\n", "t.txt")
        g, = [r for r in blk.rows if r.column == "Gain"]
        return g.value, g.unit
    assert gain(cell) == gain(cell.replace("\u2212", "-")) == (-12.0, "%")


def test_a_value_with_a_unicode_minus_parses_like_an_ascii_minus():
    from moe_lab.claims.lexicon import parse_number
    assert parse_number("\u22123.5") == parse_number("-3.5") == -3.5


# --- 5. the nearest tuned key: ties go to the smaller key ----------------------------------

@pytest.mark.parametrize("keys", [(16, 64), (64, 16)])
def test_nearest_breaks_a_tie_to_the_smaller_key_in_any_order(keys):
    from moe_lab.storage.configs import nearest
    table = {k: {"BLOCK_SIZE_M": k} for k in keys}
    assert nearest(table, 40) == {"BLOCK_SIZE_M": 16}  # 24 from each: the smaller
    assert nearest(table, 41) == {"BLOCK_SIZE_M": 64}  # not a tie: the nearer
    assert nearest(table, 39) == {"BLOCK_SIZE_M": 16}
    three = {k: {"BLOCK_SIZE_M": k} for k in (keys + (32,))[::-1]}
    assert nearest(three, 24) == {"BLOCK_SIZE_M": 16}  # 16 and 32 tie at 8


# --- 6. the distributed prediction: the slowest rank, not the mean -----------------------

def test_the_prediction_is_the_slowest_expert_rank_plus_the_slowest_collective():
    from moe_lab.distributed.worker import predict_us
    assert predict_us([100.0, 300.0], [10.0, 40.0]) == 340.0  # a mean would say 225
    # the slowest of each, even when they are different ranks
    assert predict_us([300.0, 100.0], [10.0, 40.0]) == 340.0
    assert predict_us([50.0, 50.0, 50.0, 200.0], [5.0, 7.0, 6.0, 1.0]) == 207.0
    assert predict_us([80.0], [20.0]) == 100.0


# --- 7. a timed incorrect row is never drawn ------------------------------------------------

WRONG_TOKENS, WRONG_US = 64, 9.0e6


@pytest.fixture(scope="module")
def run_with_an_incorrect_row(tmp_path_factory):
    """A real CPU run (1 and 4 tokens, ok) plus one row in the same schema that was timed
    but is `incorrect`: 64 tokens, a huge median."""
    path = tmp_path_factory.mktemp("runs") / "with-incorrect"
    ml.measure(SMALL, [1, 4], backends=["torch"], tp=1, dtype="bf16", device="cpu", run=path,
               rep_ms=2, warmup_ms=1, profile=False)
    run = ml.open_run(path)
    res = run.results
    assert list(res["status"]) == ["ok", "ok"]
    bad = res.iloc[[-1]].copy()
    bad["tokens"] = WRONG_TOKENS
    bad["status"] = "incorrect"
    bad["error"] = "max_rel_err 0.07 > 2e-02 for bf16"
    bad["max_rel_err"] = 0.07
    for c in ("median_us", "p10_us", "p90_us", "mean_us", "median_all_us"):
        if c in bad:
            bad[c] = WRONG_US
    bad["point_id"] = "f" * 16
    return dataclasses.replace(run, results=pd.concat([res, bad], ignore_index=True))


def _line_data(fig):
    """The points the lines draw; the noisy rings (label _noisy) sit on points already
    drawn, so they are left out, but each must lie on one of them."""
    xs, ys, rings = [], [], []
    for ax in fig.axes:
        for ln in ax.get_lines():
            if ln.get_label() == "_noisy":
                rings += list(zip(map(float, ln.get_xdata()), map(float, ln.get_ydata())))
                continue
            xs += [float(v) for v in ln.get_xdata()]
            ys += [float(v) for v in ln.get_ydata()]
    assert set(rings) <= set(zip(xs, ys)), "a noisy ring off every drawn point"
    return xs, ys


def _scatter_offsets(fig):
    return [tuple(map(float, o)) for ax in fig.axes for coll in ax.collections
            for o in coll.get_offsets()]


def test_ok_rows_keeps_only_correct_timed_rows():
    from moe_lab.plots import roofline, style
    df = pd.DataFrame(dict(
        status=["ok", "incorrect", "failed", "oom", "timeout", "unsupported", "ok", "ok"],
        median_us=[5.0, 9e6, 3.0, 4.0, 2.0, np.nan, np.nan, 0.0]))
    assert list(style.ok_rows(df).index) == [0]
    assert roofline.ok_rows is style.ok_rows  # one rule for every plot


def test_kernel_time_figure_does_not_draw_an_incorrect_row(run_with_an_incorrect_row):
    from matplotlib import pyplot as plt
    from moe_lab.plots import kernel_time
    fig = kernel_time.fig_time_vs_tokens(run_with_an_incorrect_row)
    xs, ys = _line_data(fig)
    assert sorted(xs) == [1.0, 4.0] and WRONG_US not in ys
    assert max(ys) < WRONG_US
    # the band (fill_between) is drawn from the same rows
    # the band is drawn: the loop below has paths to check
    assert [p for ax in fig.axes for coll in ax.collections for p in coll.get_paths()]
    for ax in fig.axes:
        for coll in ax.collections:
            for path in coll.get_paths():
                assert (path.vertices[:, 0] <= 4.0).all() and (path.vertices[:, 1] < WRONG_US).all()
    plt.close(fig)


def test_roofline_figures_do_not_draw_an_incorrect_row(run_with_an_incorrect_row):
    from matplotlib import pyplot as plt
    from moe_lab.plots import roofline
    from moe_lab.cost.roofline import add_roofline_columns
    run = run_with_an_incorrect_row
    # notebook 03's path: measured() then the figures
    df, ceil = roofline.measured(run, "NVIDIA H200")
    assert sorted(df["tokens"]) == [1, 4] and set(df["status"]) == {"ok"}
    # and the figures' own selection, given every row with its roofline columns
    every = add_roofline_columns(run.results, "NVIDIA H200")
    assert WRONG_TOKENS in set(every["tokens"])
    for frame in (df, every):
        fig = roofline.fig_roofline(run, frame, ceil)
        pts = _scatter_offsets(fig)
        assert len(pts) == 2
        slow = every[every["tokens"] == WRONG_TOKENS].iloc[0]
        wrong_y = slow["flops"] / WRONG_US / 1e6
        assert all(not math.isclose(y, wrong_y, rel_tol=1e-9) for _, y in pts)
        plt.close(fig)
        fig = roofline.fig_floor_vs_tokens(run, frame, ceil)
        xs, ys = _line_data(fig)
        assert WRONG_TOKENS not in xs and WRONG_US not in ys
        plt.close(fig)


# --- elsewhere: statistics on data whose mean is not its median ----------------------------

def test_summarize_reports_the_median_not_the_mean():
    """1..100 (the quantile test's data) has mean == median; one slow call does not."""
    from moe_lab.measuring.timing import summarize
    t = summarize([10.0, 11.0, 12.0, 13.0, 1000.0])
    assert t.median_us == 12.0  # the mean is 209.2
    t = summarize([5.0, 1.0, 2.0, 100.0])  # even count: the middle two's midpoint
    assert t.median_us == 3.5


def test_one_slow_call_does_not_throw_out_its_block():
    """The steady rule compares block medians: one outlier call (a GC pause, an interrupt)
    leaves its block steady; a block whose typical call is slow is dropped."""
    from moe_lab.measuring.timing import steady_summary
    blocks = [[100.0] * 9 + [10_000.0], [100.0] * 10, [101.0] * 10]
    t = steady_summary(blocks)
    assert t.steady_frac == 1.0 and t.median_us == 100.0
    slow = [[100.0] * 10, [100.0] * 10, [300.0] * 9 + [100.0]]
    t = steady_summary(slow)
    assert t.steady_frac == 2 / 3 and t.median_us == 100.0
    assert t.median_all_us == 100.0  # 21 of 30 calls are 100


# ==========================================================================================
# Round 2 (issue 34): the modules added since the first mutation check. The tests below
# catch the mutations of MUTATIONS (at the end of this file) that no earlier test caught.
# ==========================================================================================

# --- the glue kernels and align: under Triton's interpreter, small and fixed -------------

COMBINE = r"""
import json
import torch
from moe_lab.core import glue
out = {"interpreted": glue.interpreted()}
# fp16: the interpreter's fp16 arithmetic and rounding are numpy's, exact (its bf16 is not:
# tests/test_glue.py). [T, k, H] -> [T, H]
T, k, H = 3, 8, 40
c2 = torch.full((T, k, H), 2.0 ** -11)   # half an fp16 step at 1.0, seven times
c2[:, 0] = 1.0
c2 = c2.to(torch.float16)
out["small"] = glue.combine_fused(c2).float().tolist()
g = torch.Generator().manual_seed(7)
r = torch.randn(5, 70, 3, generator=g).to(torch.float16).transpose(1, 2)  # a strided view
got, want = glue.combine_fused(r).double(), r.double().sum(1)
out["random"] = float((got - want).abs().max() / want.abs().max())
print(json.dumps(out))
"""

ALIGN = r"""
import json, sys
import torch
from moe_lab.core import glue
out = {"interpreted": glue.interpreted()}
# EP2, rank 1: experts 4..7 of 8 are local 0..3, the sentinel 4; tokens routed to experts
# 0..4 (remote ones, and expert 4 = local 0); BLOCK_M 4
emap = torch.full((8,), -1, dtype=torch.int32)
emap[4:] = torch.arange(4, dtype=torch.int32)
ids = torch.tensor([[4, 0], [1, 4], [2, 3], [4, 1], [0, 2]], dtype=torch.int32)
G = glue.Glue(sys.argv[1], "cpu", steps=("align",))
s, e, n = G.align(ids, 5, 4, emap)
N = int(n)
out.update(kernel=G.kernels["align"][0], n=N, sorted=s[:N].tolist(),
           experts=e[:N // 4].tolist(), after=e[N // 4:].tolist())
print(json.dumps(out))
"""


def _interpreted(script: str, *args) -> dict:
    """`script`'s JSON: our glue kernels run on the CPU by Triton's interpreter (set before
    triton is imported: a process of its own)."""
    import json
    import os
    import subprocess
    import sys
    from moe_lab.core import glue
    if glue.triton is None:
        pytest.skip("triton is not installed")
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["interpreted"]
    return out


def test_the_fused_combine_sums_in_fp32_and_rounds_once():
    """Each slot adds half an fp16 step of the running sum (1.0): an fp32 sum keeps all
    seven, 1 + 7/2048, and rounds once to fp16 (1.00390625); a sum kept in fp16 rounds
    each one away (1.0). A strided [T, k, H] view of random values: the plain sum."""
    out = _interpreted(COMBINE)
    small = np.array(out["small"])
    assert small.shape == (3, 40)
    assert (small == 1.00390625).all(), small[0, :4]
    assert out["random"] < 2e-3  # a lost slot: ~0.5


def _stable_align(ids, emap, n_exp, bm):
    """The reference: the (token, slot) pairs' indices sorted stably by local expert
    (remote: the sentinel n_exp - 1), each expert padded to bm with numel; per block its
    expert, -1 for the sentinel's."""
    flat = [int(emap[i]) if emap[i] >= 0 else n_exp - 1 for i in np.asarray(ids).reshape(-1)]
    srt, experts = [], []
    for e in range(n_exp):
        sel = [i for i, x in enumerate(flat) if x == e]
        if sel:
            sel += [len(flat)] * (-len(sel) % bm)
            srt += sel
            experts += [-1 if e == n_exp - 1 else e] * (len(sel) // bm)
    return srt, experts


@pytest.mark.parametrize("variant", ["fused", "aiter"])
def test_align_under_ep_maps_the_experts_and_marks_the_remote_blocks(variant):
    """EP2, rank 1: experts 4..7 are local 0..3. Expert 4's pairs (0, 3, 6) are local
    expert 0's block; the seven remote pairs go to the sentinel, whose blocks are -1 (the
    GEMMs skip them), as is every block past the end. Without the map they would be
    experts 0..4's, with no -1 block."""
    if variant == "aiter":  # aiter's moe_align_block_size_triton, the map applied around it
        from moe_lab.backends.aiter_triton import aiter_root
        if aiter_root() is None:
            pytest.skip("amd-aiter is not installed")
    a = _interpreted(ALIGN, variant)
    emap = np.full(8, -1)
    emap[4:] = np.arange(4)
    ids = [[4, 0], [1, 4], [2, 3], [4, 1], [0, 2]]
    want_sorted, want_experts = _stable_align(ids, emap, 5, 4)
    assert want_sorted == [0, 3, 6, 10, 1, 2, 4, 5, 7, 8, 9, 10] and want_experts == [0, -1, -1]
    assert (a["n"], a["sorted"], a["experts"]) == (12, want_sorted, want_experts), a
    assert a["after"] and set(a["after"]) == {-1}
    assert a["kernel"].startswith("_moe_lab" if variant == "fused" else "_moe_align")


# --- noise bands: the statistic on fixed log ratios ---------------------------------------

# |ln B/A| of a noisy session (20 points; half of them B faster): sorted 0.01 .. 0.19 and
# 1.0. Its 0.95 quantile (numpy's linear rule: 0.19 + 0.05 * (1.0 - 0.19)) is 0.2305; the
# 0.05 quantile 0.0195, the 0.9 quantile 0.181, the median 0.105, the mean 0.145, the signed
# values' 0.95 quantile 0.161: each statistic a one-line slip would give is another number.
NOISY = [(-1) ** i * 0.01 * i for i in range(1, 20)] + [-1.0]
# a quieter session: 0.005 .. 0.1, its 0.95 quantile 0.09525 (both pooled: 0.1805)
QUIET = [0.005 * i for i in range(1, 21)]


def _pair_entry(a, b, ln):
    return dict(a=a, b=b, modes={"eager": dict(ln_ratio={f"p{i}": v for i, v in enumerate(ln)})})


def test_a_pairs_noise_is_the_95th_percentile_of_its_absolute_log_ratios():
    from types import SimpleNamespace
    from moe_lab.analysis.noise import pair_of

    def run(name):
        return SimpleNamespace(path=Path("/nonexistent") / name, run_id=name, device="cpu",
                               commits=lambda: ["c0ffee1"], manifest={},
                               results=pd.DataFrame(dict(measured_at=["2026-12-01T00:00:00"])))
    points = [(dict(model="m", tp=1, ep=1, dtype="bf16", backend="torch", tokens=t,
                    routing="uniform", mode="eager"), math.exp(v), "sample medians")
              for t, v in enumerate(NOISY, start=1)]
    pair = pair_of(run("a"), run("b"), points, skipped={})
    assert pair["modes"]["eager"]["points"] == 20
    assert pair["modes"]["eager"]["noise"] == pytest.approx(0.2305, abs=1e-6)


def test_the_devices_band_is_the_noisiest_pairs_95th_percentile():
    from moe_lab.analysis.noise import Calibration
    quiet = Calibration("cpu", [_pair_entry("q", "q2", QUIET)]).modes()["eager"]
    assert quiet["noise"] == pytest.approx(0.09525, abs=1e-6)
    cal = Calibration("cpu", [_pair_entry("q", "q2", QUIET), _pair_entry("n", "n2", NOISY)])
    m = cal.modes()["eager"]
    assert m["noise"] == pytest.approx(0.2305, abs=1e-6)  # the noisier pair's, not pooled
    assert (m["pairs"], m["points"]) == (2, 40)
    assert m["band"] == pytest.approx([math.exp(-0.2305), math.exp(0.2305)], abs=1e-6)
    assert cal.noise("eager") == pytest.approx(0.2305, abs=1e-6) and cal.noise("graph") is None


# --- the run lock: two moe-lab writers ----------------------------------------------------

FIRST_WRITER = """
import sys
from moe_lab.storage.runlock import acquire
acquire(sys.argv[1], "moe-lab sweep (the first writer)")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def first_writer(tmp_path):
    """A moe-lab writer in another process holding tmp_path/r's lock (moe_lab.storage.runlock),
    until its stdin closes."""
    import os
    import subprocess
    import sys
    run = tmp_path / "r"
    p = subprocess.Popen([sys.executable, "-c", FIRST_WRITER, str(run)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert p.stdout.readline().strip() == "held"
        yield run, p
    finally:
        p.kill()
        p.wait()


def test_a_second_moe_lab_writer_is_refused_while_the_first_holds_the_folder(first_writer):
    from moe_lab.core.errors import RunLocked
    from moe_lab.storage.runlock import acquire, busy, holder, release
    run, p = first_writer
    with pytest.raises(RunLocked) as exc:
        acquire(run, "moe-lab sweep (the second writer)")
    assert f"pid {p.pid}" in str(exc.value) and "the first writer" in str(exc.value)
    said = busy(run)  # what a reader (merge's sources, a sweep before it starts) is told
    assert said is not None and f"pid {p.pid}" in said
    p.stdin.close()  # the first writer ends (its flock goes with it)
    assert p.wait() == 0
    assert busy(run) is None
    acquire(run, "moe-lab sweep (the second writer)")
    try:
        assert holder(run)["command"] == "moe-lab sweep (the second writer)"
    finally:
        release(run)


# --- resume's settings check ---------------------------------------------------------------

# what a sweep row means besides its key: the issue-25 list, written out here (a test that
# read resume.SWEEP_MEANING would agree with any list)
SWEEP_SETTINGS = dict(device="cpu", dtype="fp32", seed=0, warmup_ms=1.0, rep_ms=2.0,
                      routing=["uniform"])
OTHER = dict(device="cuda", dtype="bf16", seed=7, warmup_ms=3.0, rep_ms=5.0,
             routing=["zipf:1.2"])


def _folder(manifest):
    from types import SimpleNamespace
    return SimpleNamespace(dir=Path("/nonexistent/run"), read_manifest=lambda: manifest)


@pytest.mark.parametrize("setting", sorted(SWEEP_SETTINGS))
def test_a_resume_with_any_setting_that_changes_what_a_row_means_is_refused(setting):
    from moe_lab.core.errors import UsageError
    from moe_lab.storage.resume import SWEEP_FLAGS, SWEEP_MEANING, refuse_other_settings
    folder = _folder(dict(kind="sweep", config=dict(SWEEP_SETTINGS, tokens=[1, 2])))
    now = dict(SWEEP_SETTINGS, tokens=[1, 2, 4])  # more points: a resume may add them
    refuse_other_settings(folder, "sweep", now, SWEEP_MEANING, SWEEP_FLAGS)
    with pytest.raises(UsageError, match="other settings") as exc:
        refuse_other_settings(folder, "sweep", dict(now, **{setting: OTHER[setting]}),
                              SWEEP_MEANING, SWEEP_FLAGS)
    assert f"--{setting.replace('_', '-')} " in str(exc.value)


def test_a_sweep_does_not_resume_another_kind_of_run():
    from moe_lab.core.errors import UsageError
    from moe_lab.storage.resume import SWEEP_FLAGS, SWEEP_MEANING, refuse_other_settings
    for kind in ("tune", "import"):
        with pytest.raises(UsageError, match=f"holds a {kind} run, not a sweep run"):
            refuse_other_settings(_folder(dict(kind=kind, config=dict(SWEEP_SETTINGS))),
                                  "sweep", dict(SWEEP_SETTINGS), SWEEP_MEANING, SWEEP_FLAGS)
    # an older sweep's manifest names no kind: its config says what it is
    refuse_other_settings(_folder(dict(config=dict(SWEEP_SETTINGS))), "sweep",
                          dict(SWEEP_SETTINGS), SWEEP_MEANING, SWEEP_FLAGS)


# --- the row schema and the point path -----------------------------------------------------

KEY = dict(model="m", tp=1, ep=1, ep_rank=0, dtype="bf16", backend="torch", mode="eager",
           tokens=4, routing="uniform")


def test_a_row_that_leaves_an_optional_id_field_unset_has_its_default_and_id():
    """A writer that does not set glue, config or wrapped (a backend with no glue choice, an
    imported table, a tune candidate) gets the declared defaults, and the point id of the
    same key written before those columns existed (rows.py: ids stay what they were); one
    that sets no status is ok."""
    from moe_lab.measuring import points
    from moe_lab.storage import rows
    from moe_lab.storage.store import point_id
    row = points.new_row(dict(KEY))
    assert (row["glue"], row["config"], row["wrapped"]) == ("", "default", False)
    # what the sweep relies on: a timed row it sets no status on (nothing failed) is ok
    assert (row["status"], row["error"]) == ("ok", "")
    assert {f: row[f] for f in rows.OPTIONAL_ID_FIELDS if f in row} == \
        {f: rows.ID_DEFAULTS[f] for f in rows.OPTIONAL_ID_FIELDS if f in row}
    assert point_id(points.finish(row)) == point_id(KEY)
    assert point_id(dict(KEY, glue="fused")) != point_id(KEY)  # a set glue is another point


def test_finish_gives_the_roof_share_of_the_median_and_computes_a_gpu_rows_roof_once(
        monkeypatch):
    """pct_of_roof = 100 * roof_us / median_us, of the median (12 us here; the mean is
    15.2). A GPU row's roof is computed by finish when the row has none (its default is
    NaN), and kept when the writer gave one."""
    from moe_lab.measuring import points
    from moe_lab.measuring.timing import summarize
    t = summarize([10.0, 11.0, 12.0, 13.0, 30.0])
    row = points.finish(points.new_row(dict(KEY), roof_us=3.0), timing=t)
    assert row["pct_of_roof"] == pytest.approx(25.0)
    cpu = points.finish(points.new_row(dict(KEY)), timing=t, problem=object(), device="cpu")
    assert math.isnan(cpu["roof_us"]) and math.isnan(cpu["pct_of_roof"])
    calls = []

    def roof(problem, topk_ids, device):
        calls.append(device)
        return dict(flops=1.0, bytes=2.0, roof_us=6.0, ceiling_source="test")
    monkeypatch.setattr(points, "roofline_fields", roof)
    gpu = points.finish(points.new_row(dict(KEY)), timing=t, problem=object(), device="cuda:0")
    assert calls == ["cuda:0"] and gpu["roof_us"] == 6.0
    assert gpu["pct_of_roof"] == pytest.approx(50.0)
    given = points.finish(points.new_row(dict(KEY), roof_us=3.0), timing=t, problem=object(),
                          device="cuda:0")
    assert calls == ["cuda:0"] and given["pct_of_roof"] == pytest.approx(25.0)


def test_a_tune_candidates_row_says_the_routing_it_was_timed_with(tmp_path, chunked):
    """A candidate of a zipf tune was timed on zipf routing (tuning: make_inputs with the
    tune's routing); its row must not say `uniform`, the column's default."""
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.tuning import Tuner
    shards = [[make_problem(TUNABLE, 16, "fp32", 1, 1)]]
    Tuner("torch-chunked", "cpu", tmp_path / "t", tmp_path / "configs", routing="zipf:1.2",
          rep_ms=2, warmup_ms=1, progress=False).run(shards)
    cand = pd.read_parquet(tmp_path / "t" / "candidates.parquet")
    assert len(cand) and set(cand["routing"]) == {"zipf:1.2"}, cand["routing"].value_counts()


# ==========================================================================================
# The mutations (issue 34): each a plausible one-line bug in a module added since the first
# mutation check, applied to a copy of the checkout; the tests named must fail there
# (tests/_bites_harness.py). Fast catching tests only: no notebook, no torch.compile.
# ==========================================================================================

T_LEDGER = "tests/test_ledger.py::"
T_BITES = "tests/test_bites.py::"
T_TARGETS = "tests/test_targets.py::"

MUTATIONS = (
    # the ledger's floors
    Mutation("ledger-rows-drop-k", "moe_lab/cost/ledger.py",
             "    rows = T * k\n", "    rows = T\n",
             (T_LEDGER + "test_bf16_floors_are_the_hand_count",),
             "a byte count that drops k: the act and align floors count T rows, not T*k"),
    Mutation("ledger-rows-local-pairs", "moe_lab/cost/ledger.py",
             "    rows = T * k\n", "    rows = pairs\n",
             (T_LEDGER + "test_ep_counts_local_pairs_and_experts_but_glue_sees_every_row",),
             "under EP the glue floors count the local pairs, not every (token, slot) row "
             "the glue kernels read"),
    # the glue kernels, the combine in glue
    Mutation("glue-kernel-combine-accumulates-in-16-bit", "moe_lab/core/glue_kernels.py",
             "            acc += tl.load(src + j * stride_ck, mask=mask, other=0.0)"
             ".to(tl.float32)\n",
             "            acc = (acc + tl.load(src + j * stride_ck, mask=mask, other=0.0)).to("
             "out_ptr.dtype.element_ty)\n",
             (T_BITES + "test_the_fused_combine_sums_in_fp32_and_rounds_once",),
             "fp32 accumulation done in the activation dtype: the combine's running sum is "
             "rounded to bf16/fp16 after every slot", says="1.00390625"),
    Mutation("glue-combine-drops-a-slot", "moe_lab/core/glue.py",
             "            K=k, BLOCK_H=block_h, num_warps=4)\n",
             "            K=k - 1, BLOCK_H=block_h, num_warps=4)\n",
             (T_BITES + "test_the_fused_combine_sums_in_fp32_and_rounds_once",),
             "the combine sums k - 1 of a token's k slots"),
    Mutation("combine-rows-router-weights-ignored", "moe_lab/core/combine_rows.py",
             "K=k, HAS_W=weights is not None,", "K=k, HAS_W=False,",
             ("tests/test_combine_rows.py::"
              "test_ours_sums_the_slots_rows_and_never_reads_the_pad_row",),
             "the sorted-rows backends' fused combine sums the slots' rows without the "
             "router's weights"),
    # align
    Mutation("align-ep-map-not-applied", "moe_lab/core/glue.py",
             "            return align_fused(topk_ids, n_exp, block_m, expert_map)\n",
             "            return align_fused(topk_ids, n_exp, block_m)\n",
             (T_BITES + "test_align_under_ep_maps_the_experts_and_marks_the_remote_blocks",),
             "the EP map not applied: Glue.align does not pass it on to our align"),
    Mutation("align-remote-blocks-not-marked", "moe_lab/core/align.py",
             "    remote = has_map  #", "    remote = False  #",
             (T_BITES + "test_align_under_ep_maps_the_experts_and_marks_the_remote_blocks",),
             "under EP the sentinel's blocks keep its expert id, not -1: the GEMMs compute "
             "the remote pairs"),
    # targets (moe_lab/analysis/targets.py: the records and the one evaluation)
    Mutation("targets-glue-without-allowance", "moe_lab/analysis/targets.py",
             "self.limit * float(floor_us) + self.allowance_us if",
             "self.limit * float(floor_us) if",
             (T_TARGETS + "test_the_ledgers_targets_on_a_hand_made_frame",),
             "the glue target's limit loses its 20 us allowance"),
    Mutation("targets-fp8-never-slower-up-to-256-only", "moe_lab/analysis/targets.py",
             '"fp8_speedup", 16, INF, 1.0, "x")', '"fp8_speedup", 16, 256, 1.0, "x")',
             (T_TARGETS + "test_the_ledgers_targets_on_a_hand_made_frame",),
             "the fp8 'never slower' target stops at 256 tokens, like the 1.5x one"),
    Mutation("targets-summary-least-miss", "moe_lab/analysis/targets.py",
             'w = miss.loc[miss["by"].idxmax()]', 'w = miss.loc[miss["by"].idxmin()]',
             (T_TARGETS + "test_the_ledgers_targets_on_a_hand_made_frame",),
             "the targets summary names the least miss as the worst"),
    Mutation("targets-exactly-at-the-goal-misses", "moe_lab/analysis/targets.py",
             "met = bool(v >= lim) if t.at_least", "met = bool(v > lim) if t.at_least",
             (T_TARGETS + "test_exactly_at_the_target_passes_and_just_below_misses_by_the_"
              "difference",),
             "a point exactly at a target's limit counted as a miss"),
    Mutation("targets-mean-not-median", "moe_lab/analysis/targets.py",
             'median=round(float(g["value"].median()), 2)',
             'median=round(float(g["value"].mean()), 2)',
             (T_TARGETS + "test_the_fp8_targets_count_what_is_met_with_the_median",),
             "the target table's median is the mean"),
    # noise bands
    Mutation("noise-band-from-the-wrong-quantile", "moe_lab/analysis/noise.py",
             "np.quantile(xs, QUANTILE)), len(xs)", "np.quantile(xs, 1 - QUANTILE)), len(xs)",
             (T_BITES + "test_the_devices_band_is_the_noisiest_pairs_95th_percentile",),
             "a band from the wrong quantile: the 0.05 quantile of |ln B/A|, not the 0.95"),
    Mutation("noise-band-from-the-quietest-pair", "moe_lab/analysis/noise.py",
             "            v = max(q for q, _ in qs)\n", "            v = min(q for q, _ in qs)\n",
             (T_BITES + "test_the_devices_band_is_the_noisiest_pairs_95th_percentile",),
             "the device's band from its quietest A/A' pair, not its noisiest"),
    # the run lock
    Mutation("runlock-shared-not-exclusive", "moe_lab/storage/runlock.py",
             "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
             "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)",
             (T_BITES + "test_a_second_moe_lab_writer_is_refused_while_the_first_holds_the_"
              "folder",),
             "a lock that excludes no one: writers take it shared, so two hold it at once"),
    Mutation("runlock-live-holder-taken-as-stale", "moe_lab/storage/runlock.py",
             "            if _stale(info):  # held by", "            if info:  # held by",
             ("tests/test_hostile_writers.py::"
              "test_a_live_holder_refuses_another_writer_and_names_itself",),
             "a lock that is not checked: any named holder is taken for a dead one and its "
             "lock replaced"),
    # resume's settings check
    Mutation("resume-seed-not-checked", "moe_lab/storage/resume.py",
             'SWEEP_MEANING = ("device", "dtype", "seed", ', 'SWEEP_MEANING = ("device", "dtype", ',
             (T_BITES + "test_a_resume_with_any_setting_that_changes_what_a_row_means_is_"
              "refused[seed]",),
             "a setting left out of the resume check: a resume with another --seed adds rows "
             "of other inputs"),
    Mutation("resume-kind-not-checked", "moe_lab/storage/resume.py",
             "if theirs is not None and theirs != kind:", "if theirs is None and theirs != kind:",
             (T_BITES + "test_a_sweep_does_not_resume_another_kind_of_run",),
             "a sweep resumes into a tune or import run's folder"),
    # the row schema
    Mutation("rows-glue-default-fused", "moe_lab/storage/rows.py",
             '_c("glue", "str", "", core=True,', '_c("glue", "str", "fused", core=True,',
             (T_BITES + "test_a_row_that_leaves_an_optional_id_field_unset_has_its_default_"
              "and_id",),
             "a column's default changed: glue defaults to 'fused' (glue.DEFAULT), so a row "
             "of a backend with no glue choice says fused and gets another point id"),
    Mutation("rows-status-default-none", "moe_lab/storage/rows.py",
             '_c("status", "str", "ok", core=True,', '_c("status", "str", None, core=True,',
             (T_BITES + "test_a_row_that_leaves_an_optional_id_field_unset_has_its_default_"
              "and_id",),
             "a column's default changed: status None until set, so every timed row (the "
             "sweep sets no status when nothing failed) is not ok"),
    # the point path
    Mutation("points-roof-share-inverted", "moe_lab/measuring/points.py",
             '        row["pct_of_roof"] = 100.0 * roof / med\n',
             '        row["pct_of_roof"] = 100.0 * med / roof\n',
             (T_BITES + "test_finish_gives_the_roof_share_of_the_median_and_computes_a_gpu_"
              "rows_roof_once",),
             "pct_of_roof upside down: median / roof"),
    Mutation("points-gpu-roof-never-computed", "moe_lab/measuring/points.py",
             '"roof_us" not in _set(row)', '"roof_us" not in row',
             (T_BITES + "test_finish_gives_the_roof_share_of_the_median_and_computes_a_gpu_"
              "rows_roof_once",),
             "the column's NaN default taken for a value: a GPU row's roof is never computed"),
    Mutation("points-p10-p90-swapped", "moe_lab/measuring/points.py",
             "p10_us=t.p10_us, p90_us=t.p90_us,", "p10_us=t.p90_us, p90_us=t.p10_us,",
             ("tests/test_points.py::"
              "test_finish_copies_every_timer_number_and_gives_the_id_of_the_key",),
             "the point path copies the timer's p10 and p90 into each other's columns"),
)


def test_the_mutations_are_distinct_and_name_their_catching_tests():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))
    assert len({(m.file, m.old, m.new) for m in MUTATIONS}) == len(MUTATIONS)
    for m in MUTATIONS:
        assert m.old != m.new and m.catch and m.bug, m.name
        for node in m.catch:
            assert (ROOT / node.split("::")[0]).is_file(), (m.name, node)


@pytest.mark.parametrize("m", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_the_mutation_is_caught(m, tmp_path, mutation_runs):
    """Apply `m` to a copy of the checkout; the tests it names must fail there, and only
    they are run (tests/_bites_harness.assert_caught)."""
    assert_caught(m, tmp_path, mutation_runs)


def test_the_catching_tests_pass_on_the_copy_without_a_mutation(tmp_path, mutation_runs):
    """The control (tests/_bites_harness.assert_control)."""
    assert_control(MUTATIONS, tmp_path, mutation_runs)


def test_the_docstring_lists_every_mutation():
    for m in MUTATIONS:
        assert m.name in __doc__, m.name
