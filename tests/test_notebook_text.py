"""The numbers the notebooks' markdown states are the code's and the data's: each sentence
that restates a limit (a target of moe_lab.analysis.targets, the profiler's coverage
range) or a count of committed data is read from the committed .ipynb (no notebook is
executed here) and compared with the record or the files it comes from, so a limit changed
in one place and not the other fails."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def markdown(nb: str, heading: str) -> str:
    """The markdown cell of notebooks/<nb> holding `heading`, whitespace folded."""
    cells = json.loads((NOTEBOOKS / nb).read_text())["cells"]
    found = [" ".join("".join(c["source"]).split()) for c in cells
             if c["cell_type"] == "markdown" and heading in "".join(c["source"])]
    assert len(found) == 1, f"{nb}: {len(found)} markdown cells hold {heading!r}"
    return found[0]


def said(text: str, pattern: str) -> re.Match:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in: {text[:300]}"
    return m


def test_01_the_profiler_coverage_range_is_the_profilers():
    from moe_lab.analysis import kernel_time
    from moe_lab.measuring import profiling
    text = markdown("01_kernel_time.ipynb", "Does the profiler see every kernel?")
    lo, hi = map(float, said(text, r"should lie in \[([\d.]+), ([\d.]+)\]").groups())
    assert (lo, hi) == profiling.COVERAGE_RANGE
    assert kernel_time.COVERAGE_RANGE is profiling.COVERAGE_RANGE  # defined once
