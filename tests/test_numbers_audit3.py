"""Numbers the workbook stated by hand, each held to the code or data it states (audit 3).

What audit 2 left: the measured facts in module docstrings (analysis.noise's and compare's
A/A' numbers, recomputed from data/noise/nvidia-h200.json), the review export's README
(its commits, dates and compare's default resamples), the docstrings and notebook 03's
words that restate a record or a constant, and defaults typed in several places (the TP
size, the profiled calls, compare's resamples, report's cell timeout, the ranks' collective
timeout, profile --explain's CU count), now one definition each. Each docstring names the
drift it catches. No GPU, no notebook executed."""
from __future__ import annotations

import ast
import inspect
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "moe_lab"
NOISE = ROOT / "data" / "noise" / "nvidia-h200.json"
REVIEW = ROOT / "docs" / "review-h200" / "README.md"
A, B = "h200-review-a-20261201", "h200-review-b-20261201"   # the 12-01 A/A' pair
REPEAT = "h200-repeat-a-20261130"                            # the 11-30 A/A' pair


def folded(text: str) -> str:
    return " ".join(text.split())


def said(text: str, pattern: str) -> re.Match:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in: {text[:300]}"
    return m


def docstring(module: str) -> str:
    """A module's docstring, read from its source (no import), whitespace folded."""
    return folded(ast.get_docstring(ast.parse((PKG / module).read_text())) or "")


def shown(value: float, s: str) -> bool:
    """`s` is `value` to the digits `s` shows."""
    d = len(s.split(".")[1]) if "." in s else 0
    return f"{value:.{d}f}" == s


def _pair(run_a: str) -> dict:
    return next(p for p in json.loads(NOISE.read_text())["pairs"] if p["a"] == run_a)


def _ln(run_a: str, mode: str) -> np.ndarray:
    return np.array(list(_pair(run_a)["modes"][mode]["ln_ratio"].values()), dtype=float)


def _markdown(nb: str, heading: str) -> str:
    cells = json.loads((ROOT / "notebooks" / nb).read_text())["cells"]
    found = [folded("".join(c["source"])) for c in cells
             if c["cell_type"] == "markdown" and heading in "".join(c["source"])]
    assert len(found) == 1, f"{nb}: {len(found)} markdown cells hold {heading!r}"
    return found[0]


def _code(nb: str) -> str:
    cells = json.loads((ROOT / "notebooks" / nb).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


# --- the A/A' noise: analysis.noise's and analysis.compare's docstrings -----------------------

def test_the_noise_docstrings_eager_numbers_are_the_12_01_pairs():
    """noise.py: 'On the H200 eager (the 12-01 pair, |ln B/A|), the median point moves by 12%
    while a few move by 52-66% ...: a band of 2 x 1.4826 x MAD (0.28) would leave 7 of 24
    A/A' points outside it'. Recomputed from the pair's ln ratios in the noise file (the
    text said '5 of 24' and 'less than 12%', '50-66%': 7, 12.09% and 52-66% in the data)."""
    text = docstring("analysis/noise.py")
    ln = _ln(A, "eager")
    a = np.abs(ln)
    med, lo, hi = said(text, r"the median point moves by (\d+)% while a few move by (\d+)-(\d+)%").groups()
    assert round(100 * float(np.median(a))) == int(med)
    few = a[a >= int(lo) / 100 - 0.005]
    assert 1 < len(few) <= 5, few  # 'a few'
    assert (round(100 * few.min()), round(100 * few.max())) == (int(lo), int(hi))
    k, mad, out, n = said(text, r"a band of (\d+) x 1\.4826 x MAD \(([\d.]+)\) would leave (\d+) "
                                r"of (\d+) A/A' points outside it").groups()
    width = int(k) * 1.4826 * float(np.median(np.abs(ln - np.median(ln))))
    assert shown(width, mad)
    assert (int((a > width).sum()), len(a)) == (int(out), int(n))  # the band symmetric in log


def test_the_noise_docstrings_graph_numbers_are_the_pairs():
    """noise.py: 'H200 graph: 0.20% on 2026-11-30, 0.37% on 2026-12-01' are the two pairs'
    graph noise on the dates they were measured; 'pooling let the quiet pair narrow the band
    to 0.26%, which two of the 12-01 pair's own points (0.39% and 0.56%) lie outside: only
    their bootstrap intervals keep them from a verdict (with the quiet pair's band alone,
    the 0.39% point is called `slower` at 1000 resamples)' is the 0.95 quantile of both
    pairs' points pooled, the pair's points beyond it, compare against that band and against
    the 11-30 pair's alone (the text said the 0.39% point 'was called `slower`' inside the
    pooled band: compare gives it no verdict there); 'about 5% of A/A' points lie outside
    it' is 1 - QUANTILE and 'with 24 points the 0.95 quantile is about the
    second-largest' is numpy's interpolation there."""
    from moe_lab.analysis import noise
    text = docstring("analysis/noise.py")
    for pct, day in re.findall(r"([\d.]+)% on (\d{4}-\d\d-\d\d)",
                               said(text, r"\(H200 graph: ([^)]*)\)")[1]):
        pair = next(p for p in json.loads(NOISE.read_text())["pairs"]
                    if all(v.startswith(day) for v in p["measured"].values()))
        assert shown(100 * pair["modes"]["graph"]["noise"], pct), (day, pct)
    pooled_s, pts, n_res = said(text, r"narrow the band to ([\d.]+)%, which \w+ of the 12-01 "
                                      r"pair's own points \(([\d.% and]+)\) lie outside: only their "
                                      r"bootstrap intervals keep them from a verdict \(with the quiet "
                                      r"pair's band alone, the [\d.]+% point is called `slower` at "
                                      r"(\d+) resamples\)").groups()
    pooled = float(np.quantile(np.abs(np.concatenate([_ln(A, "graph"), _ln(REPEAT, "graph")])),
                               noise.QUANTILE))
    assert shown(100 * pooled, pooled_s)
    g = _ln(A, "graph")
    outside = sorted(x for x in g if abs(x) > pooled)
    named = re.findall(r"([\d.]+)%", pts)
    assert len(outside) == len(named) and all(shown(100 * abs(x), s) for x, s in zip(outside, named))
    from moe_lab.analysis.compare import compare
    from moe_lab.storage.store import open_run
    cal = noise.read(NOISE)
    fake = json.loads(json.dumps(_pair(A)))  # one pair whose graph noise is the pooled one
    fake["modes"]["graph"]["noise"] = pooled
    t = compare(open_run(A), open_run(B), calibration=noise.Calibration(cal.device, [fake]))
    t = t[t["mode"] == "graph"]
    assert len(t) == len(g) > 0  # the pair's graph points: any() of no row is False
    assert not t["verdict"].isin(["faster", "slower"]).any()  # only the intervals keep them out
    assert (np.abs(np.log(t["ratio"].astype(float))) > pooled).sum() == len(outside)
    quiet = compare(open_run(A), open_run(B), n_resamples=int(n_res),
                    calibration=noise.Calibration(cal.device, [_pair(REPEAT)]))
    called = quiet[(quiet["mode"] == "graph") & quiet["verdict"].isin(["faster", "slower"])]
    assert list(called["verdict"]) == ["slower"]
    assert shown(100 * math.log(float(called["ratio"].iloc[0])), named[0])
    assert int(said(text, r"about (\d+)% of A/A' points lie outside it")[1]) == round(
        100 * (1 - noise.QUANTILE))
    n = int(said(text, r"with (\d+) points the ([\d.]+) quantile is about the second-largest")[1])
    assert float(said(text, r"points the ([\d.]+) quantile is about")[1]) == noise.QUANTILE
    assert n == len(g)
    pos = noise.QUANTILE * (n - 1)  # 0-based, linear interpolation
    assert n - 3 < pos < n - 2 and pos - (n - 3) > 0.5  # between the 3rd and 2nd largest, nearer the 2nd


def test_the_compare_docstrings_eager_range_is_the_12_01_pairs():
    """compare.py: 'eager on an H200: a ratio of 0.52-1.68 between two processes of one
    commit' is the smallest and largest B/A of the 12-01 A/A' pair's eager points."""
    lo, hi = said(docstring("analysis/compare.py"),
                  r"eager on an H200: a ratio of ([\d.]+)-([\d.]+) between two processes").groups()
    r = np.exp(_ln(A, "eager"))
    assert shown(r.min(), lo) and shown(r.max(), hi), (r.min(), r.max())


# --- the review export's README -----------------------------------------------------------------

def test_the_review_readme_states_its_runs_commits_and_dates():
    """docs/review-h200/README.md: '(main at 8feb8f2, one H200, 2026-12-01)' is the review
    runs' git commit and start date; '(c236ad5, 2026-11-30; that pair has no samples, so its
    ratios are of the rows' medians)' the 11-30 pair's commit, date and the noise file's
    `ratio_of`; 're-exported on 2026-12-01' the committed pages' `made` date."""
    text = folded(REVIEW.read_text())
    commit, day = said(text, r"\(main at (\w+), one H200, (\d{4}-\d\d-\d\d)\)").groups()
    for rid in (A, B, "h200-review-tuned-20261201"):
        m = json.loads((ROOT / "data" / "runs" / rid / "manifest.json").read_text())
        assert m["environment"]["git_commit"].startswith(commit) and m["started"].startswith(day), rid
        assert m["environment"]["device_name"].endswith("H200")
    commit, day = said(text, r"`--calibrate h200-repeat-a-20261130 h200-repeat-b-20261130` appended "
                             r"\((\w+), (\d{4}-\d\d-\d\d); that pair has no samples").groups()
    pair = _pair(REPEAT)
    assert pair["commit"] == commit and all(v.startswith(day) for v in pair["measured"].values())
    assert {m["ratio_of"] for m in pair["modes"].values()} == {"median_us"}
    assert {m["ratio_of"] for m in _pair(A)["modes"].values()} == {"samples"}
    day = said(text, r"re-exported on (\d{4}-\d\d-\d\d)")[1]
    for page in REVIEW.parent.glob("*/index.html"):
        assert said(page.read_text(), r"made (\d{4}-\d\d-\d\d) ")[1] == day, page


def test_the_default_resamples_are_one_constant_and_the_review_readme_states_it():
    """'0 of 24 graph ones at the default 2000 resamples': compare's default n_resamples,
    typed four times (compare(), ratio_interval(), `compare --resamples` and its refusal)
    and now core.constants.BOOTSTRAP_RESAMPLES; the README's number is it."""
    import argparse

    from moe_lab.analysis import compare as cmp
    from moe_lab.commands import compare as cmd
    from moe_lab.core.constants import BOOTSTRAP_RESAMPLES
    for f in (cmp.compare, cmp.ratio_interval):
        assert inspect.signature(f).parameters["n_resamples"].default == BOOTSTRAP_RESAMPLES
    p = argparse.ArgumentParser()
    cmd.configure(p)
    assert p.get_default("resamples") == BOOTSTRAP_RESAMPLES
    for f in ("analysis/compare.py", "commands/compare.py"):
        assert not re.search(r"\b2000\b", (PKG / f).read_text()), f
    n = said(folded(REVIEW.read_text()), r"at the default (\d+) resamples")[1]
    assert int(n) == BOOTSTRAP_RESAMPLES


# --- docstrings and notebook words that restate a record or a constant -------------------------

def test_the_analysis_docstrings_state_the_records():
    """expert_parallel: 'predicted within 5% of measured' is TOLERANCE (the target's limit);
    fp8_gemm: 'The promise ...: 2x where the bf16 GEMMs are memory-bound ..., 1.7x where they
    are compute-bound' is PROMISE (the two targets'); tuned.roof: 'from 256 tokens' is
    FROM_TOKENS; tuned.files: 'the 18 keys of the published tunings for the H200, and 8192'
    is TUNE_TOKENS."""
    from moe_lab.analysis import expert_parallel, fp8_gemm
    from moe_lab.analysis.tuned import roof as tuned_roof
    from moe_lab.core.constants import PUBLISHED_H200_KEYS, TUNE_TOKENS
    pct = said(docstring("analysis/expert_parallel.py"), r"predicted within (\d+)% of measured")[1]
    assert int(pct) / 100 == expert_parallel.TOLERANCE
    mem, comp = said(docstring("analysis/fp8_gemm.py"),
                     r"([\d.]+)x where the bf16 GEMMs are memory-bound .*? ([\d.]+)x where they "
                     r"are compute-bound").groups()
    assert (float(mem), float(comp)) == (fp8_gemm.PROMISE["memory"], fp8_gemm.PROMISE["compute"])
    roof = docstring("analysis/tuned/roof.py")
    assert {int(x) for x in re.findall(r"from (\d+) tokens|tokens=(\d+)", roof) for x in x if x} \
        == {tuned_roof.FROM_TOKENS}
    files = docstring("analysis/tuned/files.py")
    n, last = said(files, r"the (\d+) keys of the published tunings for the H200, and (\d+)").groups()
    assert (int(n), int(last)) == (len(PUBLISHED_H200_KEYS), TUNE_TOKENS[-1])
    room = docstring("analysis/tuned/__init__.py")  # roof_from's line: the room's surface
    assert {int(x) for x in re.findall(r"tokens=(\d+)", room)} == {tuned_roof.FROM_TOKENS}


def test_the_timing_docstring_states_the_timers_constants(monkeypatch):
    """measuring/timing.py: '(>= 10 calls and >= 25 ms each)', 'three blocks', 'fewer than
    half the calls were steady' are EAGER_BLOCK_MIN, EAGER_BLOCK_MS, STEADY_BLOCKS and
    STEADY_MIN_FRAC (the half was a literal 0.5 in steady_summary); 'max(2 x L2, 256 MB), and
    512 MB on ROCm' is what flush_bytes returns."""
    torch = pytest.importorskip("torch")
    from moe_lab.measuring import timing_stats as tm  # the timers' constants and statistics
    text = docstring("measuring/timing.py")
    calls, ms = said(text, r"in blocks \(>= (\d+) calls and >= (\d+) ms each\)").groups()
    assert (int(calls), float(ms)) == (tm.EAGER_BLOCK_MIN, tm.EAGER_BLOCK_MS)
    words = {"two": 2, "three": 3, "four": 4, "five": 5}
    assert words[said(text, r"keeps going until (\w+) blocks agree")[1]] == tm.STEADY_BLOCKS
    assert said(text, r"fewer than (half) the calls were steady") and tm.STEADY_MIN_FRAC == 0.5
    half = tm.steady_summary([[1.0] * 10, [2.0] * 11])  # 10 of 21 calls steady: noisy
    assert half.noisy and not tm.steady_summary([[1.0] * 11, [2.0] * 10]).noisy
    k, floor, rocm = map(int, said(text, r"max\((\d+) x L2, (\d+) MB\), and (\d+) MB on ROCm").groups())
    from moe_lab.measuring import timing as tm
    mb = 1 << 20

    class Props:
        L2_cache_size = 200 * mb
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: Props())
    monkeypatch.setattr(torch.version, "hip", None)
    assert tm.flush_bytes() == max(k * 200 * mb, floor * mb)
    Props.L2_cache_size = 50 * mb
    assert tm.flush_bytes() == floor * mb
    monkeypatch.setattr(torch.version, "hip", "6.0")
    assert tm.flush_bytes() == rocm * mb


def test_every_readme_section_a_docstring_points_to_exists():
    """timing.py sent readers to 'the README's Repeatability section', which the README has
    not had since its findings moved to docs/findings.md: every "the README's X section" in
    moe_lab names a `## X` heading of README.md."""
    heads = re.findall(r"^## (.+)$", (ROOT / "README.md").read_text(), re.M)
    pointer = r"README's ([A-Z][\w -]*?) section"
    # moe_lab states no such pointer today, so the loop below checks none: the scan itself
    # must still find the package's files and catch the pointer this test was written for
    files = list(PKG.rglob("*.py"))
    assert PKG / "measuring" / "timing.py" in files, PKG
    old = re.findall(pointer, folded("see the README's\n    Repeatability section"))
    assert old == ["Repeatability"] and not any(h.startswith(old[0]) for h in heads), old
    for p in files:
        for name in re.findall(pointer, folded(p.read_text())):
            assert any(h.startswith(name) for h in heads), (p, name)


def test_03_the_predicted_floors_words_are_the_functions_defaults():
    """Notebook 03: 'Predicted floors: MI300X vs H200 on the seed configurations' and 'TP8 and
    TP8+EP8 cost the same per rank (EP reads 1/8 of the experts at 8x the width)' are
    predicted_floors' default devices and SEED_SHARDINGS (the code cell's 'h200 / mi300x'
    column reads those two devices)."""
    from moe_lab.core.devices import DEVICE_SPECS
    from moe_lab.core.problems import sharding_name
    from moe_lab.cost import roofline
    text = _markdown("03_roofline.ipynb", "## Predicted floors")
    devices = inspect.signature(roofline.predicted_floors).parameters["devices"].default
    a, b = said(text, r"## Predicted floors: (\w+) vs (\w+) on the seed configurations").groups()
    assert len(devices) == 2 and all(w in DEVICE_SPECS[d].name.split() for w, d in zip((a, b), devices))
    s1, s2 = said(text, r"In expectation (\S+) and (\S+) cost the same per rank").groups()
    assert (s1, s2) == tuple(sharding_name(tp, ep) for tp, ep in roofline.SEED_SHARDINGS)
    over, x = map(int, said(text, r"EP reads 1/(\d+) of the experts at (\d+)x the width").groups())
    assert {over, x} == {ep for _, ep in roofline.SEED_SHARDINGS if ep > 1}
    assert all(f"side['{d}']" in _code("03_roofline.ipynb") for d in devices)


# --- defaults typed in several places, now one definition each -------------------------------

def _defaults(fn, name):
    return inspect.signature(fn).parameters[name].default


def test_the_tp_default_and_the_profiled_calls_are_one_constant_each():
    """The TP size without --tp (options.TP_DEFAULT) was typed again as `tp=8` in ml.check,
    ml.measure, ml.profile and eager_split.split_point, and notebook 01's re-measure typed
    `tp=8, ep='1,8'`; the profiled calls (`profile --iters`) were a literal 5 in the verb,
    ml.profile, split_point and profile_kernels. Each is now core.constants' (TP_DEFAULT,
    EP_DEFAULT, PROFILE_ITERS), and no signature in moe_lab types the TP default
    (make_problem's tp=1, an unsharded problem, and export_trace's iters=3, the calls a
    trace holds, are other numbers)."""
    import argparse

    from moe_lab import api
    from moe_lab.analysis import devices
    from moe_lab.commands import options
    from moe_lab.commands import profile as prof_cmd
    from moe_lab.core import constants as c
    from moe_lab.measuring import eager_split, profiling
    assert options.TP_DEFAULT == c.TP_DEFAULT
    reg = json.loads((ROOT / "data" / "claims" / "registry.json").read_text())["configs"]
    assert {x["tp"] for x in reg.values()} == {c.TP_DEFAULT}  # 'every seed claim is a TP8 deployment'
    for f in (api.check, api.measure, api.profile, eager_split.split_point, devices.claim_shapes):
        assert _defaults(f, "tp") == c.TP_DEFAULT, f
    for f in (api.profile, eager_split.split_point, profiling.profile_kernels):
        assert _defaults(f, "iters") == c.PROFILE_ITERS, f
        assert not re.search(r"\biters: int = \d", inspect.getsource(f)), f  # not a typed copy
    p = argparse.ArgumentParser()
    prof_cmd.configure(p)
    assert (p.get_default("tp"), p.get_default("iters")) == (c.TP_DEFAULT, c.PROFILE_ITERS)
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                dflt = [None] * (len(node.args.args) - len(node.args.defaults)) + \
                    list(node.args.defaults) + list(node.args.kw_defaults)
                for arg, d in zip(args, dflt):
                    if arg.arg == "tp" and isinstance(d, ast.Constant) and d.value == c.TP_DEFAULT:
                        pytest.fail(f"{path.relative_to(ROOT)}:{node.name} types {arg.arg}={d.value!r}")
    src = _code("01_kernel_time.ipynb")
    assert "tp=TP_DEFAULT, ep=EP_DEFAULT['gpu']" in src
    assert not re.search(r"\btp=\d|\bep='[\d,]+'", src)


def test_the_verbs_other_defaults_are_one_definition_each():
    """report's cell timeout (900 s: `report --timeout` and execute_notebook), the ranks'
    collective timeout (the worker's fallback was a literal 120 beside the launcher's
    DIST_TIMEOUT_S) and profile --explain's CU count (its help said 'default: 304' and
    run() typed 304 again): each one constant, and the help states it."""
    import argparse
    import subprocess
    import sys

    from moe_lab import report
    from moe_lab.backends._aiter_dispatch import CU_GPU
    from moe_lab.commands import profile as prof_cmd, report as report_cmd
    from moe_lab.distributed import DIST_TIMEOUT_S
    p = argparse.ArgumentParser()
    report_cmd.configure(p)
    assert p.get_default("timeout") == report.CELL_TIMEOUT_S == _defaults(report.execute_notebook, "timeout")
    assert not re.search(r"\b900\b", (PKG / "commands" / "report.py").read_text())
    assert len(re.findall(r"\b900\b", (PKG / "report.py").read_text())) == 1  # CELL_TIMEOUT_S
    worker = (PKG / "distributed" / "worker.py").read_text()
    assert 'spec.get("timeout_s", DIST_TIMEOUT_S)' in worker and DIST_TIMEOUT_S > 0
    assert not re.search(r"\b304\b", (PKG / "commands" / "profile.py").read_text()
                         .split("def configure", 1)[1].split("def explain", 1)[1])
    assert "MI300X" in CU_GPU[prof_cmd.CU_DEFAULT]
    out = folded(subprocess.run([sys.executable, "-m", "moe_lab", "profile", "--help"],
                                capture_output=True, text=True, cwd=ROOT,
                                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}).stdout)
    assert int(said(out, r"aiter's cu_num key \(default: (\d+)\)")[1]) == prof_cmd.CU_DEFAULT
    assert math.isfinite(prof_cmd.CU_DEFAULT)
