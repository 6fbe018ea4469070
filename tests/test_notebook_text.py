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
    from moe_lab.storage.vocabulary import COVERAGE_RANGE
    text = markdown("01_kernel_time.ipynb", "Does the profiler see every kernel?")
    lo, hi = map(float, said(text, r"should lie in \[([\d.]+), ([\d.]+)\]").groups())
    assert (lo, hi) == COVERAGE_RANGE
    assert kernel_time.COVERAGE_RANGE is COVERAGE_RANGE  # defined once
    assert profiling.check_kernel_coverage.__defaults__ == COVERAGE_RANGE  # the check's range


def _target(metric: str, lo=None, hi=None):
    """The one target record on `metric` (and that token range, where given)."""
    from moe_lab.analysis import targets as tg
    found = [t for t in tg.TARGETS if t.metric == metric
             and (lo is None or t.lo == lo) and (hi is None or t.hi == hi)]
    assert len(found) == 1, (metric, lo, hi, found)
    return found[0]


def test_01_the_fp8_line_is_the_prefill_target():
    text = markdown("01_kernel_time.ipynb", "## FP8 against bf16")
    x, lo = said(text, r"dotted line: the ([\d.]+)x target at (\d+)\+ tokens").groups()
    assert float(x) == _target("fp8_speedup", lo=int(lo), hi=math.inf).limit


def test_03_the_fp8_targets_it_lists_are_the_records():
    text = markdown("03_roofline.ipynb", "## FP8: % of the FP8 roof, and against bf16")
    hi, pct = said(text, r"below (\d+) tokens >= (\d+)% of the FP8 roof").groups()
    assert _target("fp8_pct_of_roof", lo=1, hi=int(hi) - 1).limit == float(pct)
    lo, hi, pct = said(text, r"(\d+) to (\d+) >= (\d+)%").groups()
    assert _target("fp8_pct_of_roof", lo=int(lo), hi=int(hi)).limit == float(pct)
    lo, x = said(text, r"(\d+)\+ >= ([\d.]+)x bf16").groups()
    assert _target("fp8_speedup", lo=int(lo), hi=math.inf).limit == float(x)


def test_03_the_fp8_gemms_promise_is_the_records():
    text = markdown("03_roofline.ipynb", "## FP8: is it the GEMM or the glue?")
    mem, comp = said(text, r"FP8 promises ([\d.]+)x over bf16 where bf16's GEMMs are "
                           r"memory-bound and ([\d.]+)x where they are compute-bound").groups()
    assert float(mem) == _target("fp8_speedup_memory_bound").limit
    assert float(comp) == _target("fp8_speedup_compute_bound").limit


def test_05_the_vllm_goal_is_the_records():
    text = markdown("05_tuning.ipynb", "## 5. The best own layer against vLLM as shipped")
    band = said(text, r"no point above ([\d.]+) \(the run-to-run band\)")[1]
    geo = said(text, r"geometric mean at or below (\d+(?:\.\d+)?)")[1]
    assert float(band) == _target("own_over_vllm").limit
    assert float(geo) == _target("own_over_vllm_geomean").limit


def test_06_the_expert_parallel_targets_are_the_records():
    text = markdown("06_expert_parallel.ipynb", "## 5. The targets")
    pct = said(text, r"within (\d+)% of the measured")[1]
    x = said(text, r"in at most ([\d.]+)x its one-GPU wall time")[1]
    assert float(pct) / 100 == _target("prediction_err").limit
    assert float(x) == _target("spread_ratio").limit
    # the printed line takes the limit from the record, not a typed copy
    code = json.loads((NOTEBOOKS / "06_expert_parallel.ipynb").read_text())["cells"]
    src = "".join("".join(c["source"]) for c in code if c["cell_type"] == "code")
    assert "predicted within {an.expert_parallel.TOLERANCE:.0%} of measured" in src
    assert not re.search(r"within \d+% of measured", src)


def test_04_the_claims_batches_and_ranks_are_the_registrys():
    from moe_lab.core.problems import PRESETS
    reg = json.loads((ROOT / "data" / "claims" / "registry.json").read_text())["configs"]
    text = markdown("04_reproduce_claims.ipynb", "## What the claims imply for the kernels")
    a, b = said(text, r"the benchmark's concurrency \((\d+) or (\d+) tokens per step\)").groups()
    assert {int(a), int(b)} == {c["concurrency"] for c in reg.values() if c.get("concurrency")}
    text = markdown("04_reproduce_claims.ipynb", "## AMD's own measurements of the claims' shapes")
    n = said(text, r"DeepSeek-R1 claim runs TP8 EP8 \((\d+) experts per rank\)")[1]
    ds = reg["002-deepseek-r1"]
    assert (ds["tp"], ds["ep"]) == (8, 8) and int(n) == PRESETS[ds["preset"]].experts // ds["ep"]
    # "aiter's shipped tuning table ... has DeepSeek-R1 at TP8 without EP only"
    import pandas as pd
    from moe_lab.analysis.runs import imported_runs
    rows = pd.concat(pd.read_parquet(ROOT / "data" / "runs" / r / "results.parquet")
                     for r in imported_runs())
    ds_rows = rows[rows["model"] == "deepseek-r1"]
    assert len(ds_rows) and set(ds_rows["ep"]) == {1} and 8 in set(ds_rows["tp"])


def test_06_the_committed_run_it_describes_is_the_datas():
    """'The run committed with this notebook is a CPU run (gloo, 2 processes ...)': the
    newest distributed run is that CPU run; which GPU runs with ranks exist the notebook
    prints from the data (test_notebook_06), the markdown states none."""
    text = markdown("06_expert_parallel.ipynb", "# 06 · Expert parallelism")
    backend, n = said(text, r"is a \*\*CPU run\*\* \((\w+), (\d+) processes").groups()
    assert "pending" not in text and "names the GPU runs with ranks" in text
    found = []
    for m in (ROOT / "data" / "runs").glob("*/manifest.json"):
        d = json.loads(m.read_text()).get("distributed")
        if d:
            found.append((json.loads(m.read_text())["started"], d))
    assert found
    newest = max(found, key=lambda x: x[0])[1]
    assert (newest["backend"], newest["world_size"]) == (backend, int(n))
    assert len(newest["ranks"]) == int(n)  # a rank per process: all() of none passes
    assert all(r["torch_device"] == "cpu" for r in newest["ranks"])
