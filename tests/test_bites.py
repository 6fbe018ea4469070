"""Tests that bite (issue 22): each asserts a property that a plausible one-line bug breaks
and that the rest of the suite let through (a mutation check found them):

1. a backend 5-10% off is `incorrect` in bf16 (the correctness limit is tight enough);
2. a second sweep into the same folder with a new `--config` measures the new points;
3. compare's verdict keeps a ratio inside the noise band as "no detectable change";
4. a gain written with a Unicode minus (U+2212, as PR text has it) parses like "-";
5. the nearest tuned key breaks a tie the way configs.nearest's docstring says (smaller);
6. the distributed prediction is the slowest rank's expert time + the slowest collective;
7. a timed `incorrect` row is never drawn by the kernel-time or roofline figures.
Plus the same weakness found elsewhere: timing statistics on data whose mean equals its
median (summarize, the steady-block rule)."""
import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import plugin_backend  # noqa: E402

import moe_lab as ml
from moe_lab import backends
from moe_lab.backends.torch_ref import TorchBackend
from moe_lab.cli import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = "custom:H=64,I=32,E=8,k=2"


# --- 1. a backend a few percent off is incorrect ------------------------------------------

def _planted(scale: float) -> str:
    """Register the real `torch` backend with its output scaled by `scale` (a planted bug
    in a real backend), the way discovery registers one; returns its name."""
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
    for name in made:
        backends._REGISTRY.pop(name, None)


@pytest.mark.parametrize("scale", [1.05, 1.07, 1.10])
def test_a_bf16_backend_a_few_percent_off_is_incorrect(planted, scale):
    from moe_lab.correctness import check_problem
    from moe_lab.core.problems import make_problem
    prob = make_problem(SMALL, 8, "bf16", 1, 1)
    row, = check_problem(prob, [planted(scale)], "cpu", seed=0)
    assert row["status"] == "incorrect", row
    assert row["max_rel_err"] == pytest.approx(scale - 1, rel=0.25)
    assert "max_rel_err" in row["error"] and "bf16" in row["error"]


def test_the_same_backend_unscaled_passes_in_bf16(planted):
    """The control: the planted wrapper itself (x1.0) is correct, so the failures above
    are the 5-10% and nothing else."""
    from moe_lab.correctness import check_problem
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
    from moe_lab.configs import write_table
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
    from moe_lab.compare import verdict
    # compare.verdict(low, high, noise): the bootstrap interval of median(B) / median(A)
    # against the band [exp(-noise), exp(noise)] (noise: the device's calibrated
    # between-process noise in the mode, moe_lab.noise). Wholly below 1 but inside: no change
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
    from moe_lab.compare import compare
    from moe_lab.noise import Calibration
    from moe_lab.store import RunStore, open_run
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
    from moe_lab.configs import nearest
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
    for ax in fig.axes:
        for coll in ax.collections:
            for path in coll.get_paths():
                assert (path.vertices[:, 0] <= 4.0).all() and (path.vertices[:, 1] < WRONG_US).all()
    plt.close(fig)


def test_roofline_figures_do_not_draw_an_incorrect_row(run_with_an_incorrect_row):
    from matplotlib import pyplot as plt
    from moe_lab.plots import roofline
    from moe_lab.roofline import add_roofline_columns
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
    from moe_lab.timing import summarize
    t = summarize([10.0, 11.0, 12.0, 13.0, 1000.0])
    assert t.median_us == 12.0  # the mean is 209.2
    t = summarize([5.0, 1.0, 2.0, 100.0])  # even count: the middle two's midpoint
    assert t.median_us == 3.5


def test_one_slow_call_does_not_throw_out_its_block():
    """The steady rule compares block medians: one outlier call (a GC pause, an interrupt)
    leaves its block steady; a block whose typical call is slow is dropped."""
    from moe_lab.timing import steady_summary
    blocks = [[100.0] * 9 + [10_000.0], [100.0] * 10, [101.0] * 10]
    t = steady_summary(blocks)
    assert t.steady_frac == 1.0 and t.median_us == 100.0
    slow = [[100.0] * 10, [100.0] * 10, [300.0] * 9 + [100.0]]
    t = steady_summary(slow)
    assert t.steady_frac == 2 / 3 and t.median_us == 100.0
    assert t.median_all_us == 100.0  # 21 of 30 calls are 100
