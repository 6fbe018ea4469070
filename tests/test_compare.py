"""moe-lab compare: bootstrap intervals and verdicts on generated samples with a known
difference and with none, the interval's coverage, a run against itself, a run split by a
column, and the points that must not be compared."""
import numpy as np
import pytest

import moe_lab as ml
from moe_lab.cli import main
from moe_lab.analysis.compare import compare, ratio_interval, verdict
from moe_lab.storage.store import RunStore, open_run

RNG = np.random.default_rng(7)


def samples(median, n=300, spread=0.03):
    return median * np.exp(RNG.normal(0, spread, n))


def test_a_known_difference_is_found_with_an_interval_around_it():
    a, b = samples(100.0), samples(80.0)
    r, lo, hi = ratio_interval(a, b, n_resamples=1000)
    assert lo < 0.8 < hi and hi < 0.98 and r == pytest.approx(np.median(b) / np.median(a))
    assert verdict(lo, hi, 0.02) == "faster"
    r, lo, hi = ratio_interval(b, a, n_resamples=1000)
    assert verdict(lo, hi, 0.02) == "slower"


def test_no_difference_gives_no_detectable_change():
    a, b = samples(100.0), samples(100.0)
    r, lo, hi = ratio_interval(a, b, n_resamples=1000)
    assert lo < 1 < hi and verdict(lo, hi, 0.02) == "no detectable change"


def test_the_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    covered = 0
    for i in range(120):
        rng = np.random.default_rng(100 + i)
        a = 50 * np.exp(rng.normal(0, 0.05, 200))
        b = 55 * np.exp(rng.normal(0, 0.05, 200))
        _, lo, hi = ratio_interval(a, b, n_resamples=600, seed=i)
        covered += lo <= 1.1 <= hi
    assert 0.85 <= covered / 120 <= 1.0  # nominal 95%, percentile bootstrap, 120 trials


def _run(tmp_path, name, rows_samples):
    s = RunStore(tmp_path / name)
    s.write_manifest({"started": "2026-11-30", "status": "complete"})
    base = dict(model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype="bf16", backend="aiter-triton",
                mode="graph", routing="uniform", status="ok", git_commit="abc1234",
                device="NVIDIA H200", measured_at="2026-11-30T00:00:00+00:00")
    rows, smp = [], {}
    for kw, x in rows_samples:
        r = dict(base, **kw, median_us=float(np.median(x)))
        from moe_lab.storage.store import point_id
        r["point_id"] = point_id(r)
        rows.append(r)
        smp[r["point_id"]] = list(x)
    s.append_samples(smp)
    s.append(rows)
    return open_run(s.dir)


def test_one_run_split_by_config_and_what_is_not_compared(tmp_path):
    run = _run(tmp_path, "r", [
        (dict(tokens=1, config="default", inputs_digest="x1"), samples(100)),
        (dict(tokens=1, config="tuned", inputs_digest="x1"), samples(50)),
        (dict(tokens=64, config="default", inputs_digest="x64"), samples(200)),
        (dict(tokens=64, config="tuned", inputs_digest="OTHER"), samples(200)),
        (dict(tokens=256, config="default", inputs_digest="x256"), samples(300)),
    ])
    t = compare(run, run, by="config", values=("default", "tuned"), n_resamples=500)
    v = dict(zip(t["tokens"], t["verdict"]))
    assert v == {1: "faster", 64: "inputs differ", 256: "only in A"}
    assert t.loc[t["tokens"] == 1, "ratio"].iloc[0] == pytest.approx(0.5, rel=0.05)


def test_a_run_against_itself_has_no_detectable_change_anywhere(tmp_path, capsys):
    ml.measure("custom:H=64,I=32,E=4,k=2", tokens=[1, 4], backends="torch,torch-grouped", tp=1,
               dtype="fp32", device="cpu", run=tmp_path / "cpu", rep_ms=5, warmup_ms=1)
    run = open_run(tmp_path / "cpu")
    assert len(run.samples()) == 4 and all(len(s) >= 2 for s in run.samples()["samples_us"])
    t = compare(run, run, n_resamples=300)
    assert len(t) == 4 and set(t["verdict"]) == {"no detectable change"}
    assert (t["ratio"] == 1.0).all()
    # the command refuses it (every ratio 1.00 by construction: it says nothing of a change),
    # as it refuses --values torch,torch
    assert main(["compare", str(tmp_path / "cpu"), str(tmp_path / "cpu"), "--out",
                 str(tmp_path / "rep"), "--resamples", "200"]) == 2
    assert "comparing it with itself says nothing" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def test_committed_runs_without_samples_are_said_so(capsys):
    assert main(["compare", "h200-repeat-a-20261130", "h200-repeat-b-20261130", "--mode",
                 "graph", "--out", "/tmp/moe-lab-compare-test"]) == 0
    out = capsys.readouterr().out
    assert "no samples" in out  # made before samples were kept: ratios, no verdicts


def test_bad_use_exits_2(capsys):
    assert main(["compare", "h200-repeat-a-20261130"]) == 2
    assert main(["compare", "nope", "h200-repeat-a-20261130"]) == 2
    assert main(["compare", "h200-tuned-20261130", "--by", "config"]) == 2


@pytest.mark.parametrize("verb", [["compare", "h200-tuned-20261130"],
                                  ["report", "--runs", "h200-tuned-20261130"]])
@pytest.mark.parametrize("values,says", [
    (",", "--values ,: the values are empty"),  # was: 'one value twice compares the run...'
    (" , ", "--values  , : the values are empty"),
    ("default,", "--values default,: value 2 of 2 is empty"),  # was: no rows with config=''
    (",tuned", "--values ,tuned: value 1 of 2 is empty")])
def test_empty_values_are_said_empty(tmp_path, capsys, verb, values, says):
    """`--by config --values ,`: one line saying the values are empty (before: 'one value
    twice', which was not what was given), refused before any run is read or file written."""
    assert main(verb + ["--by", "config", "--values", values, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"moe-lab: error: {says}; give the two values of --by, A,B "
                                "(e.g. --by config --values default,tuned)"]
    assert not (tmp_path / "o").exists()
