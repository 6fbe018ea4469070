"""`moe-lab report --runs ... --out DIR`, the review export: one self-contained HTML page in
which every figure is embedded with its provenance underneath (run, device, dtype, commits,
command), a PNG and an SVG per figure, a compare section for two runs or a split column, and
bad --runs/--out as one line with exit 2. Two real CPU sweeps (with samples and traces) and
the committed H200 run with traces are the inputs."""
import base64
import os
import re
from html.parser import HTMLParser

import pytest

from moe_lab.cli import main

pytest.importorskip("matplotlib")

MODEL = "custom:H=64,I=32,E=4,k=2"


class Page(HTMLParser):
    """What a reviewer's browser would load: every tag with its attributes, and the
    figures with the text of their captions."""

    def __init__(self):
        super().__init__()
        self.tags, self.figures, self._fig = [], [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "figure":
            self._fig = dict(img=None, caption="")
        elif tag == "img" and self._fig is not None:
            self._fig["img"] = a.get("src", "")

    def handle_endtag(self, tag):
        if tag == "figure" and self._fig is not None:
            self.figures.append(self._fig)
            self._fig = None

    def handle_data(self, data):
        if self._fig is not None:
            self._fig["caption"] += data


def parse(path) -> Page:
    p = Page()
    p.feed(open(path, encoding="utf-8").read())
    return p


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    """Two real CPU sweeps of the same points (samples kept, every point traced)."""
    d = tmp_path_factory.mktemp("runs")
    for rid in ("a", "b"):
        assert main(["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,4", "--backends",
                     "torch,torch-grouped", "--dtype", "fp32", "--device", "cpu", "--data-dir",
                     str(d), "--run-id", rid, "--traces", "4", "--rep-ms", "5",
                     "--warmup-ms", "1", "--no-progress"]) == 0
    return d / "a", d / "b"


def _check_page(out, n_figures, runs):
    page = parse(out / "index.html")
    # self-contained: nothing to fetch, no script, every image a data URI
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "iframe", "object", "embed"), tag
        for k in ("src", "href", "data", "srcset"):
            v = attrs.get(k)
            assert v is None or v.startswith("data:image/png;base64,"), (tag, k, v[:60])
    assert not re.search(r"url\(|@import|https?://", open(out / "index.html").read())
    assert len(page.figures) == n_figures
    for f in page.figures:
        png = base64.b64decode(f["img"].split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        cap = " ".join(f["caption"].split())
        for word in ("run", "device", "dtype", "commit", "command"):
            assert word in cap, (word, cap)
        assert any(os.path.basename(str(r)) in cap for r in runs), cap
        assert "moe-lab" in cap  # the command that measured the rows
    files = sorted(os.listdir(out / "figures"))
    assert len([f for f in files if f.endswith(".png")]) == n_figures
    assert len([f for f in files if f.endswith(".svg")]) == n_figures
    for f in files:
        head = open(out / "figures" / f, "rb").read(200)
        assert head.startswith(b"\x89PNG") if f.endswith(".png") else b"<svg" in head
    return page


def test_two_runs_give_a_compare_section_and_every_figure_with_its_provenance(
        cpu_runs, tmp_path, capsys):
    a, b = cpu_runs
    out = tmp_path / "review"
    assert main(["report", "--runs", f"{a},{b}", "--out", str(out)]) == 0
    assert "-> " in capsys.readouterr().out
    # compare, then per run: time per call and where eager time goes
    page = _check_page(out, 5, [a, b])
    text = open(out / "index.html").read()
    from moe_lab.analysis.compare import CONFIDENCE  # the interval compare computes
    assert "Compare: b over a" in text and f"bootstrap {CONFIDENCE:.0%} interval" in text
    assert "Where eager time goes: a" in text and "Where eager time goes: b" in text
    from moe_lab.analysis.eager_split import CHECK_TOL  # the split's own limit, not a copy
    assert f"within {CHECK_TOL:.0%} of the timed eager median" in text
    assert "cpu" in page.figures[0]["caption"]
    # a second export into the same folder leaves no stale figure files behind
    assert main(["report", "--runs", str(a), "--out", str(out)]) == 0
    _check_page(out, 2, [a])


def test_one_run_split_by_a_column(cpu_runs, tmp_path):
    a, _ = cpu_runs
    out = tmp_path / "split"
    assert main(["report", "--runs", str(a), "--by", "backend", "--values",
                 "torch,torch-grouped", "--out", str(out)]) == 0
    _check_page(out, 3, [a])
    assert "Compare: backend torch-grouped over torch in a" in open(out / "index.html").read()


def test_the_committed_h200_run_with_its_traces():
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"moe-lab-review-{os.getpid()}")
    assert main(["report", "--runs", "h200-seed4-20261129", "--out", out]) == 0
    from pathlib import Path
    page = _check_page(Path(out), 2, ["h200-seed4-20261129"])
    for f in page.figures:
        assert "NVIDIA H200" in f["caption"] and "406a341" in f["caption"]
        assert "moe-lab sweep --tp 8 --ep 1,8" in f["caption"]
    text = open(os.path.join(out, "index.html")).read()
    assert text.count("llama4-scout-16e") >= 4  # the four traced points in the split table


@pytest.mark.parametrize("argv,what", [
    (["--runs", "no-such-run"], "no run folder no-such-run"),
    (["--runs", " , "], "--runs needs"),
    (["--runs", "h200-seed4-20261129", "--by", "backend", "--values", "torch"], "two values"),
    (["--runs", "a,b,c", "--by", "config"], "at most two"),
])
def test_bad_runs_are_one_line_and_exit_2(argv, what, tmp_path, capsys):
    assert main(["report", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and what in err
    assert not (tmp_path / "o" / "index.html").exists()


def test_bad_out_is_one_line_and_exit_2(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("x")
    for out, what in ((f, "is a file, not a folder"), (f / "sub", f"{f} is a file, not a folder")):
        assert main(["report", "--runs", "h200-repeat-a-20261130", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and what in err


def test_a_section_that_cannot_be_drawn_does_not_stop_the_review(tmp_path):
    """The aiter import's custom shapes have no TP/EP sharding: its time figure leaves them
    out and says how many; the H200 run and AMD's rows still meet in the devices section."""
    out = tmp_path / "devices"
    assert main(["report", "--runs", "h200-tuned-20261130,aiter-tuned-fmoe-0-1-7-post2-dev18",
                 "--out", str(out)]) == 0
    page = _check_page(out, 4, ["h200-tuned-20261130", "aiter-tuned-fmoe-0-1-7-post2-dev18"])
    text = open(out / "index.html").read()
    assert "Devices side by side" in text and "without a TP/EP sharding" in text
    assert "moe-lab import-aiter" in page.figures[-1]["caption"]
