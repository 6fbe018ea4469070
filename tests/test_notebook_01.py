"""Notebook 01 executes headless on the CPU and prints the run it shows, how many points it
has and the profiler coverage of its graph points; the tests recompute each number from the
run's parquet files, so the notebook showing another run or a wrong count fails them."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("nbclient")

from conftest import RUNS_DIR, pngs, printed, run_notebook, with_params  # noqa: E402

NB = "01_kernel_time.ipynb"
RUNS = Path(RUNS_DIR)  # the committed runs (conftest)
MODEL = "custom:H=64,I=32,E=4,k=2"


def shown(text: str) -> tuple[str, int, int]:
    """(run id, points, ok points) from the line the notebook prints first."""
    m = re.search(r"^run (\S+): (\d+) points \((\d+) ok\)", text, re.M)
    assert m, text[:500]
    return m.group(1), int(m.group(2)), int(m.group(3))


def coverage_shown(text: str) -> tuple[int, int]:
    m = re.search(r"kernel sum within \[0\.7, 1\.05\] of graph time: (\d+) of (\d+)", text)
    assert m, text[-800:]
    return int(m.group(1)), int(m.group(2))


def expected_coverage(results: pd.DataFrame) -> tuple[int, int]:
    """Ok graph points, and those whose profiler kernel sum is within [0.7, 1.05] of the
    graph time."""
    g = results[(results["mode"] == "graph") & (results["status"] == "ok")
                & results["median_us"].notna()]
    ratio = g["kernel_us"] / g["median_us"]
    return int(((ratio >= 0.7) & (ratio <= 1.05)).sum()), len(g)


def newest_committed_run_with_ok_rows() -> str:
    """By the manifest's start time, then the folder name (the README's rule); never a run
    marked running or failed."""
    found = []
    for d in RUNS.iterdir():
        if (d / "results.parquet").is_file():
            res = pd.read_parquet(d / "results.parquet")
            if "parallel" in res:  # distributed rows are notebook 06's
                res = res[res["parallel"].isna()]
            manifest = json.loads((d / "manifest.json").read_text())
            status = str(manifest.get("status") or "")
            if (res["status"] == "ok").any() and not ("running" in status or "failed" in status):
                found.append((manifest["started"], d.name))
    return max(found)[1]


def test_default_is_the_newest_run_with_ok_rows_and_its_numbers_are_printed():
    outputs = run_notebook(NB, edit=with_params(remeasure=False))  # on a GPU box too
    text = printed(outputs)
    run_id, points, ok = shown(text)
    assert run_id == newest_committed_run_with_ok_rows()
    res = pd.read_parquet(RUNS / run_id / "results.parquet")
    assert (points, ok) == (len(res), int((res["status"] == "ok").sum()))
    assert coverage_shown(text) == expected_coverage(res)
    assert len(pngs(outputs)) >= 3  # time vs tokens, phases, launch overhead


def test_the_seed_dataset_shows_222_of_224_graph_points_covered():
    """The README's numbers for h200-seed4-20261129, recomputed here from its parquet."""
    outputs = run_notebook(NB, edit=with_params(run="h200-seed4-20261129", remeasure=False))
    text = printed(outputs)
    res = pd.read_parquet(RUNS / "h200-seed4-20261129" / "results.parquet")
    assert shown(text) == ("h200-seed4-20261129", len(res), int((res["status"] == "ok").sum()))
    assert shown(text)[1] == 672
    assert coverage_shown(text) == expected_coverage(res) == (222, 224)
    assert len(pngs(outputs)) >= 3


def test_a_run_measured_on_cpu_by_ml_measure(tmp_path):
    import moe_lab as ml
    run_dir = tmp_path / "cpu-run"
    rows = ml.measure([MODEL], [1, 8], backends=["torch", "torch-grouped"], tp=1, run=run_dir)
    outputs = run_notebook(NB, edit=with_params(run=str(run_dir), remeasure=False))
    text = printed(outputs)
    assert shown(text) == ("cpu-run", len(rows), int((rows["status"] == "ok").sum()))
    assert shown(text)[1] == 4
    assert coverage_shown(text) == (0, 0)  # no graph mode on a CPU
    assert len(pngs(outputs)) >= 2  # time vs tokens, phases
    # launch overhead needs eager and graph: a line on the page, not an empty canvas
    assert "no figure: no point has both an eager and a graph time" in text


def test_the_relative_table_holds_ratios_or_is_not_shown():
    """Issue 66: a table labelled as ratios to torch-grouped holds ratios (its default
    configuration's column all 1, a column per backend, configuration and glue), or is
    None with a line saying why (a run without torch-grouped: no raw times shown instead)."""
    from moe_lab.analysis import kernel_time as k
    t = k.speedup_table("h200-seed4-20261129")
    assert t is not None and list(t.columns.names) == ["backend", "config", "glue"]
    assert (t[("torch-grouped", "default", "")].dropna() == 1.0).all()
    assert t.stack(list(range(3)), future_stack=True).dropna().between(0.01, 100).all()
    amd = "aiter-tuned-fmoe-0-1-7-post2-dev18"
    assert k.speedup_table(amd) is None
    assert k.speedup_note(amd).startswith("relative to torch-grouped: not shown (run " + amd)
