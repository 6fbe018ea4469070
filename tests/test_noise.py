"""The noise model behind compare's verdicts (moe_lab.analysis.noise, issue 26): a calibration from
two runs of a real CPU sweep (an A/A' pair), a change planted above the calibrated noise is
found and one below it is not, compare without a calibration says so, a run against
itself is no change anywhere; the committed H200 calibration and the verdict counts it
gives on the committed H200 runs (circular for the pair it was made from: said so, and
checked out of sample against the other H200 pair)."""
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import moe_lab as ml
from moe_lab.cli import main
from moe_lab.analysis.compare import calibrate, compare, summary, verdict
from moe_lab.analysis.noise import QUANTILE, Calibration, load, read, slug
from moe_lab.storage.store import open_run

SWEEP = dict(models="custom:H=64,I=32,E=4,k=2", tokens=[1, 4, 16],
             backends="torch,torch-grouped", modes="eager,graph", tp=1, dtype="fp32",
             device="cpu", rep_ms=5, warmup_ms=1)
VERDICTS = {"faster", "slower"}


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    """One real CPU sweep, then three runs of it (one commit) with fixed samples: a and b
    calibrate, c is a third run. The real sweep is the timing path (what it writes is
    checked below); the verdicts are checked on fixed, seeded samples around its medians,
    so they do not depend on how busy this machine was while it timed."""
    root = tmp_path_factory.mktemp("noise")
    rows = ml.measure(run=root / "real", **SWEEP)
    real = open_run(root / "real")
    assert (rows["status"] == "ok").all() and len(rows) == len(real.samples()) == 12
    return root, [_fixed(real, root / n, seed) for n, seed in zip("abc", (1, 2, 3))]


def _fixed(run, dst, seed, shift=0.02, spread=0.01):
    """A copy of the real run `run` whose samples are fixed numbers: each point's real
    median times one seeded shift exp(N(0, shift)) (the between-process noise of an A/A'
    pair) times a seeded per-sample spread exp(N(0, spread)); median_us follows them."""
    shutil.copytree(run.path, dst)
    rng = np.random.default_rng(seed)
    s = pd.read_parquet(dst / "samples.parquet")
    fixed = {}
    for i, row in s.iterrows():
        x = np.asarray(row["samples_us"], float)
        fixed[row["point_id"]] = list(np.median(x) * math.exp(rng.normal(0, shift))
                                      * np.exp(rng.normal(0, spread, len(x))))
    s["samples_us"] = [fixed[p] for p in s["point_id"]]
    s.to_parquet(dst / "samples.parquet", index=False)
    r = pd.read_parquet(dst / "results.parquet")
    r["median_us"] = [float(np.median(fixed[p])) if p in fixed else m
                      for p, m in zip(r["point_id"], r["median_us"])]
    r.to_parquet(dst / "results.parquet", index=False)
    return open_run(dst)


def _planted(run, dst, factor):
    """A copy of `run` whose every time is `factor` times its own: a planted change."""
    shutil.copytree(run.path, dst)
    s = pd.read_parquet(dst / "samples.parquet")
    s["samples_us"] = [list(np.asarray(x, float) * factor) for x in s["samples_us"]]
    s.to_parquet(dst / "samples.parquet", index=False)
    r = pd.read_parquet(dst / "results.parquet")
    r["median_us"] = r["median_us"] * factor
    r.to_parquet(dst / "results.parquet", index=False)
    return open_run(dst)


def _ln_ratios(a, b, mode):
    """ln(median B / median A) per point of `mode`, recomputed here from the samples."""
    sa, sb = a.samples().set_index("point_id")["samples_us"], b.samples().set_index(
        "point_id")["samples_us"]
    ra = a.results[a.results["mode"] == mode].set_index("point_id")
    rb = b.results[b.results["mode"] == mode].set_index("point_id")
    both = sorted(set(ra.index) & set(rb.index))  # equal point ids: the same point, inputs
    return [math.log(np.median(sb[p]) / np.median(sa[p])) for p in both]


def test_a_cpu_pair_calibrates_each_mode_with_its_provenance(cpu, tmp_path, capsys):
    root, (a, b, c) = cpu
    assert main(["compare", "--calibrate", str(a.path), str(b.path), "--calibration",
                 str(tmp_path / "noise")]) == 0
    out = capsys.readouterr().out
    assert "1 A/A' pair ->" in out and "eager: noise" in out and "graph: noise" in out
    files = list((tmp_path / "noise").glob("*.json"))
    assert [f.name for f in files] == [f"{slug(a.device)}.json"]
    d = json.loads(files[0].read_text())
    assert d["device"] == a.device and d["quantile"] == QUANTILE and "A/A'" in d["what"]
    pair, = d["pairs"]
    assert (pair["a"], pair["b"], pair["device"]) == ("a", "b", a.device)
    assert pair["commit"] == a.commits()[0] and pair["calibrated_at"]
    assert set(pair["measured"]) == {"a", "b"} and "--calibrate" in pair["command"]
    for mode in ("eager", "graph"):
        xs = _ln_ratios(a, b, mode)
        m = d["modes"][mode]
        assert m["pairs"] == 1 and m["points"] == len(xs) == 6
        # ln ratios are stored to 6 decimals: the noise within 1e-6 of the quantile, and
        # the band exp(+-noise) to the same relative precision (it can be large)
        assert m["noise"] == pytest.approx(np.quantile(np.abs(xs), QUANTILE), abs=2e-6)
        assert m["band"] == pytest.approx([math.exp(-m["noise"]), math.exp(m["noise"])],
                                          rel=2e-6)
        assert pair["modes"][mode]["ratio_of"] == "samples"
    # the same pair again replaces its entry; another pair is appended, the noisiest counts
    cal = calibrate(b, a, tmp_path / "noise")
    assert len(cal.pairs) == 1
    cal = calibrate(a, c, tmp_path / "noise")
    assert len(cal.pairs) == 2 and len(read(files[0]).pairs) == 2
    for mode in ("eager", "graph"):
        per = [np.quantile(np.abs(_ln_ratios(a, x, mode)), QUANTILE) for x in (b, c)]
        assert cal.noise(mode) == pytest.approx(max(per), abs=2e-6)
        assert cal.modes()[mode]["points"] == 12 and "the noisiest of 2" in cal.describe(mode)


def test_what_is_not_an_a_a_pair_is_refused(cpu, tmp_path, capsys):
    root, (a, b, _) = cpu
    assert main(["compare", "--calibrate", str(a.path), str(a.path), "--calibration",
                 str(tmp_path)]) == 2
    assert "run against itself" in capsys.readouterr().err
    other = tmp_path / "other-commit"
    shutil.copytree(b.path, other)
    r = pd.read_parquet(other / "results.parquet")
    r["git_commit"] = "0000000"
    r.to_parquet(other / "results.parquet", index=False)
    assert main(["compare", "--calibrate", str(a.path), str(other), "--calibration",
                 str(tmp_path)]) == 2
    assert "one commit" in capsys.readouterr().err
    assert main(["compare", "--calibrate", str(a.path)]) == 2
    assert not list(tmp_path.glob("*.json"))


def test_a_change_above_the_noise_is_found_and_one_below_it_is_not(cpu, tmp_path):
    root, (a, b, _) = cpu
    cal = calibrate(a, b, tmp_path / "noise")
    for mode in ("eager", "graph"):
        n = cal.noise(mode)
        assert n is not None and n > 0
    # planted on A itself: the only difference is the plant (x0.5 below the band's edge)
    above = _planted(a, tmp_path / "above", 0.5 * math.exp(-max(cal.noise("eager"),
                                                                   cal.noise("graph"))))
    t = compare(a, above, n_resamples=500, calibration=cal)
    assert len(t) == 12 and set(t["verdict"]) == {"faster"}, t[["mode", "ratio", "verdict"]]
    assert (t["high"] < t["band_low"]).all()
    t = compare(above, a, n_resamples=500, calibration=cal)
    assert set(t["verdict"]) == {"slower"}
    for mode in ("eager", "graph"):  # half the noise: inside the band, whatever the interval
        below = _planted(a, tmp_path / f"below-{mode}", math.exp(-cal.noise(mode) / 2))
        t = compare(a, below, n_resamples=500, calibration=cal)
        t = t[t["mode"] == mode]
        assert len(t) == 6 and set(t["verdict"]) == {"no detectable change"}, t
        assert (t["ratio"] > t["band_low"]).all()
    # planted on B, the A/A' run: found above its between-process noise too
    lim = max(abs(x) for m in ("eager", "graph") for x in _ln_ratios(a, b, m))
    far = _planted(b, tmp_path / "far", 0.5 * math.exp(-lim - max(cal.noise("eager"),
                                                                  cal.noise("graph"))))
    assert set(compare(a, far, n_resamples=500, calibration=cal)["verdict"]) == {"faster"}


def test_compare_without_a_calibration_says_so(cpu, tmp_path, capsys):
    root, (a, _, _) = cpu
    planted = _planted(a, tmp_path / "planted", 0.5)
    empty = tmp_path / "no-noise"
    empty.mkdir()
    t = compare(a, planted, n_resamples=300, calibration=empty)
    want = {f"no calibration for {a.device} {m}" for m in ("eager", "graph")}
    assert set(t["verdict"]) == want and t["noise"].isna().all()
    assert main(["compare", str(a.path), str(planted.path), "--calibration", str(empty), "--out",
                 str(tmp_path / "rep"), "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert f"6 no calibration for {a.device} eager" in out
    assert f"noise bands: no calibration for {a.device}" in out
    # a calibration of another device is not borrowed
    t = compare(a, planted, n_resamples=300,
                calibration=Calibration.of({"eager": 0.1, "graph": 0.01}, "NVIDIA H200"))
    assert set(t["verdict"]) == want
    assert main(["compare", str(a.path), str(planted.path), "--calibration",
                 str(tmp_path / "nope.json")]) == 2


def test_a_run_against_itself_is_no_change_calibrated_or_not(cpu, tmp_path):
    root, (a, b, _) = cpu
    cal = calibrate(a, b, tmp_path / "noise")
    (tmp_path / "none").mkdir()
    for given in (cal, tmp_path / "none"):  # calibrated, and without a calibration
        t = compare(a, a, n_resamples=300, calibration=given)
        assert len(t) == 12 and set(t["verdict"]) == {"no detectable change"}


def test_the_calibrated_cpu_pair_itself_gets_at_most_one_verdict_per_mode(cpu, tmp_path):
    """Circular (the band is this pair's own quantile): at most the one point above the
    0.95 quantile of six can clear it, the CPU analogue of the H200 target."""
    root, (a, b, _) = cpu
    cal = calibrate(a, b, tmp_path / "noise")
    t = compare(a, b, calibration=cal, n_resamples=500)
    assert len(t) == 12  # the run's points: all() of no row passes
    for mode, g in t.groupby("mode"):
        assert g["verdict"].isin(VERDICTS).sum() <= 1, g[["ratio", "low", "high", "verdict"]]
    assert t["calibration"].str.contains("circular").all()


def test_the_figure_and_the_table_show_the_band_beside_each_interval(cpu, tmp_path):
    from moe_lab.plots.compare import fig_ratio
    from moe_lab.plots.review import build
    root, (a, b, _) = cpu
    cal = calibrate(a, b, tmp_path / "noise")
    t = compare(a, b, calibration=cal, n_resamples=300)
    assert {"low", "high", "band_low", "band_high", "noise", "calibration"} <= set(t.columns)
    fig = fig_ratio(t, a, b)
    shaded = [p for ax in fig.axes for p in ax.patches if "noise band" in str(p.get_label())]
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert len(panels) == len(shaded) == 2  # one model x (eager, graph), each one shaded
    assert all("band " in ax.get_title() for ax in panels)
    sec = build([a, b])[0]
    assert "noise band" in sec.text and {"band_low", "band_high"} <= set(sec.details.columns)


# --- the committed H200 calibration and runs -------------------------------------------

A, B = "h200-review-a-20261201", "h200-review-b-20261201"
TUNED = "h200-review-tuned-20261201"


def test_the_committed_h200_calibration():
    cal = load("NVIDIA H200")
    assert cal is not None and cal.device == "NVIDIA H200"
    assert cal.includes(A, B) and cal.includes("h200-repeat-a-20261130", "h200-repeat-b-20261130")
    m = cal.modes()
    assert m["graph"]["pairs"] == m["eager"]["pairs"] == 2
    assert (m["eager"]["points"], m["graph"]["points"]) == (72, 56)
    assert 0.002 < m["graph"]["noise"] < 0.005 and 0.4 < m["eager"]["noise"] < 0.7


def test_the_committed_h200_pair_gets_no_graph_and_at_most_one_eager_verdict():
    t = compare(open_run(A), open_run(B))
    g, e = t[t["mode"] == "graph"], t[t["mode"] == "eager"]
    assert len(g) == len(e) == 24
    assert g["verdict"].isin(VERDICTS).sum() == 0, g[["ratio", "low", "high", "verdict"]]
    assert e["verdict"].isin(VERDICTS).sum() <= 1, e[["ratio", "low", "high", "verdict"]]
    assert t["calibration"].str.contains("circular").all()  # said, not hidden


def test_out_of_sample_the_other_h200_pair_band_holds_on_the_review_pair():
    """The band from the 2026-11-30 pair alone (not the pair being compared)."""
    other = open_run("h200-repeat-a-20261130"), open_run("h200-repeat-b-20261130")
    folder = load("NVIDIA H200")
    only = Calibration("NVIDIA H200", [p for p in folder.pairs if p["a"] == other[0].run_id])
    t = compare(open_run(A), open_run(B), calibration=only)
    assert len(t) == 2 * 24  # graph and eager, 24 points each: any() of no row is False
    assert not t["calibration"].str.contains("circular").any()
    for mode, g in t.groupby("mode"):
        assert g["verdict"].isin(VERDICTS).sum() <= 1, (mode, g[["ratio", "low", "verdict"]])


def test_default_against_tuned_on_the_h200_every_5pc_graph_gain_is_faster():
    run = open_run(TUNED)
    t = compare(run, run, by="config", values=("default", "tuned"))
    g = t[(t["mode"] == "graph") & (t["ratio"] < 0.95)]
    assert len(g) == 12 and set(g["verdict"]) == {"faster"}
    assert summary(compare(run, run)) == "24 no detectable change"


def test_verdict_needs_both_the_interval_and_the_band():
    assert verdict(0.90, 0.97, 0.02) == "faster" and verdict(1.03, 1.1, 0.02) == "slower"
    assert verdict(0.97, 0.99, 0.02) == "no detectable change"  # clears 1, not the band
    assert verdict(0.5, 1.01, 0.02) == "no detectable change"   # clears the band, not 1
    assert verdict(0.5, 0.6, None, "no calibration for X eager") == "no calibration for X eager"
    assert verdict(0.9, 1.1, None) == "no detectable change"     # the interval holds 1
    # symmetric in log: swapping A and B flips the verdict
    assert verdict(1 / 0.97, 1 / 0.90, 0.02) == "slower"


@pytest.mark.parametrize("run,factor", [("h200-review-a-20261201", 1.05),
                                        ("h200-repeat-b-20261130", 1.05)])
def test_the_findings_bands_are_recomputed_from_the_pairs_runs(tmp_path, run, factor):
    """The findings' noise section states the bands computed from the A/A' runs and, per
    pair, how many points the calibration file has as the runs give them: +5% on one row
    of an A/A' run (a pair timed with samples, and one without) changes that text, so
    `findings --check` fails on it."""
    import shutil
    from moe_lab.findings import _data_dir
    from moe_lab.findings.more import noise_section
    from moe_lab.storage.store import find_runs
    data = tmp_path / "runs"
    for r in ("h200-review-a-20261201", "h200-review-b-20261201", "h200-repeat-a-20261130",
              "h200-repeat-b-20261130"):
        shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "runs" / r, data / r,
                        ignore=shutil.ignore_patterns("traces"))

    def text():
        with _data_dir(data):
            return "\n".join(noise_section(find_runs(), "NVIDIA H200"))
    before = text()
    assert "48 of 48 points as the file has them" in before
    assert "80 of 80 points as the file has them" in before
    p = data / run / "results.parquet"
    res = pd.read_parquet(p)
    i = res.index[(res["status"] == "ok") & (res["mode"] == "graph")][0]
    res.loc[i, "median_us"] *= factor
    res.to_parquet(p)
    after = text()
    assert after != before and "differ:" in after
