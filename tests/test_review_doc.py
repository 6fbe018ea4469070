"""docs/review-h200/README.md (written by hand beside the two committed review exports)
states the calibration and the verdicts of the committed H200 runs; every number it states
is recomputed here from data/noise/nvidia-h200.json and the runs' samples (compare, at the
resamples the text names), to the digits shown, so the text fails when the data or the
rule behind it moves."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from moe_lab.analysis import noise
from moe_lab.analysis.compare import compare
from moe_lab.storage.store import open_run

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "review-h200" / "README.md"
A, B = "h200-review-a-20261201", "h200-review-b-20261201"
REPEAT = "h200-repeat-a-20261130"
TUNED = "h200-review-tuned-20261201"
VERDICTS = ("faster", "slower")


@pytest.fixture(scope="module")
def text():
    return " ".join(DOC.read_text().split())


@pytest.fixture(scope="module")
def cal():
    return noise.read(ROOT / "data" / "noise" / "nvidia-h200.json")


def _shown(value: float, s: str) -> bool:
    """`s` is `value` to the digits `s` shows."""
    d = len(s.split(".")[1]) if "." in s else 0
    return f"{value:.{d}f}" == s


def _pair(cal, run_a: str) -> dict:
    return next(p for p in cal.pairs if p["a"] == run_a)


def _n(table, mode) -> tuple[int, int]:
    g = table[table["mode"] == mode]
    return int(g["verdict"].isin(VERDICTS).sum()), len(g)


def test_the_pair_is_one_sweep_of_the_points_it_names(text):
    n = int(re.search(r"the same (\d+)-point sweep run twice", text)[1])
    assert len(open_run(A).results) == len(open_run(B).results) == n
    q = float(re.search(r"noise in a mode is the ([\d.]+) quantile", text)[1])
    assert q == noise.QUANTILE


def test_the_calibration_table_is_the_noise_file(text, cal):
    rows = re.findall(r"\| (graph|eager) \| ([\d.]+) \((\d+)(?: points)?\) \| ([\d.]+) \((\d+)\) \| "
                      r"([\d.]+-[\d.]+) \| (\d+) \|", text)
    assert {r[0] for r in rows} == {"graph", "eager"}
    modes = cal.modes()
    for mode, n12, p12, n11, p11, band, points in rows:
        for run_a, shown, pts in ((A, n12, p12), (REPEAT, n11, p11)):
            d = _pair(cal, run_a)["modes"][mode]
            assert _shown(d["noise"], shown) and d["points"] == int(pts), (mode, run_a)
        assert band == noise.band_text(modes[mode]["noise"]), mode
        assert int(points) == modes[mode]["points"], mode


def test_the_verdicts_it_states_are_compares(text, cal):
    t = compare(open_run(A), open_run(B))
    m = re.search(r"no verdict in either mode \((\d+) graph and (\d+) eager points, all "
                  r'"no detectable change"', text)
    assert _n(t, "graph") == (0, int(m[1])) and _n(t, "eager") == (0, int(m[2]))
    # the old fixed eager band: a verdict where the interval clears [1 - x, 1 + x]
    x, fast, slow = re.search(r"with the old fixed (\d+)% eager band, (\d+) eager points were "
                              r"called faster and (\d+) slower", text).groups()
    e, f = t[t["mode"] == "eager"], float(x) / 100
    assert ((e["high"] < 1 - f).sum(), (e["low"] > 1 + f).sum()) == (int(fast), int(slow))
    # out of sample: the band of the 11-30 pair alone
    only = noise.Calibration(cal.device, [_pair(cal, REPEAT)])
    m = re.search(r"still gets (\d+) of (\d+) eager verdicts, and (\d+) of (\d+) graph ones at "
                  r"the default (\d+) resamples \(the ([\d.]+)% point at (\d+) tokens is on the "
                  r"edge: (\d+) of (\d+) at (\d+) resamples\)", text)
    out = compare(open_run(A), open_run(B), calibration=only, n_resamples=int(m[5]))
    assert _n(out, "eager") == (int(m[1]), int(m[2])) and _n(out, "graph") == (int(m[3]), int(m[4]))
    fewer = compare(open_run(A), open_run(B), calibration=only, n_resamples=int(m[10]))
    assert _n(fewer, "graph") == (int(m[8]), int(m[9]))
    # the point on the edge: the one whose verdict the fewer resamples give
    edge = fewer[(fewer["mode"] == "graph") & fewer["verdict"].isin(VERDICTS)]
    assert len(edge) == 1 and int(edge["tokens"].iloc[0]) == int(m[7])
    assert _shown(100 * (float(edge["ratio"].iloc[0]) - 1), m[6])


def test_default_against_tuned(text):
    run = open_run(TUNED)
    t = compare(run, run, by="config", values=("default", "tuned"))
    m = re.search(r'Default against tuned gets (\d+) of (\d+) graph points "faster" '
                  r"\(ratios ([\d.]+)-([\d.]+)\)", text)
    g = t[t["mode"] == "graph"]
    assert (int((g["verdict"] == "faster").sum()), len(g)) == (int(m[1]), int(m[2]))
    assert _shown(g["ratio"].min(), m[3]) and _shown(g["ratio"].max(), m[4])
    assert np.isfinite(g["ratio"]).all()


def _page_text(path: Path) -> list[str]:
    """An exported page's text, line by line: tags and figure links dropped, the `made ...`
    line (when, and the command's --out) left out: every number and verdict the page
    states stays in."""
    import html
    s = re.sub(r"<img[^>]*>", "", path.read_text())
    s = html.unescape(re.sub(r"<[^>]+>", " ", s))
    return [" ".join(x.split()) for x in s.splitlines()
            if x.strip() and not x.strip().startswith("made ")]


@pytest.mark.parametrize("folder,argv", [
    ("review-a-vs-b", ["--runs", f"{A},{B}"]),
    ("default-vs-tuned", ["--runs", TUNED, "--by", "config", "--values", "default,tuned"])])
def test_the_committed_review_pages_are_what_the_export_makes_of_the_data_now(
        folder, argv, tmp_path):
    """The two committed exports are re-made from the committed runs and calibration: the
    pages state the same numbers and verdicts, figure for figure (a page whose data or rule
    moved fails here; re-export it with the command its README names)."""
    from moe_lab.cli import main
    out = tmp_path / folder
    assert main(["report", *argv, "--out", str(out)]) == 0
    committed = ROOT / "docs" / "review-h200" / folder
    assert _page_text(out / "index.html") == _page_text(committed / "index.html")
    assert sorted(p.name for p in (out / "figures").glob("*.png")) == sorted(
        p.name for p in (committed / "figures").glob("*.png"))
