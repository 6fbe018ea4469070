"""notebooks/02_eager_vs_compile.ipynb executes headless on the CPU: it prints the run it
shows, the count of planned points that have a row and its compile rows by status; the
tests recompute them from the run's manifest and parquet files."""
import json
import re
from itertools import product
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("nbclient")

from conftest import RUNS_DIR, pngs, printed, run_notebook, with_params  # noqa: E402

NB = "02_eager_vs_compile.ipynb"
RUNS = Path(RUNS_DIR)  # the committed runs (conftest)


def shown(text: str) -> dict:
    run = re.search(r"^run (\S+): (\d+) points", text, re.M)
    cov = re.search(r"^(\d+) of (\d+) planned points have a row", text, re.M)
    status = re.search(r"^compile rows: (\d+) \(([^)]*)\)", text, re.M)
    assert run and cov and status, text[:1000]
    return dict(run=run.group(1), points=int(run.group(2)),
                coverage=(int(cov.group(1)), int(cov.group(2))), compile_rows=int(status.group(1)),
                by_status=dict((s, int(n)) for s, n in
                               (p.rsplit(" ", 1) for p in status.group(2).split(", "))))


def expected(run_dir: Path) -> dict:
    """The same numbers from the folder. Planned, per shard (model, tp, ep, routing): its
    token grid times its backend x mode x wrap combinations, each the union of what the
    manifest's config asks for (config models x tp x ep x routings x tokens x backends x
    modes, compile modes twice for a backend that declares compile_both_ways) and what
    the rows have: a resume that asked for fewer (the last invocation's config) still
    counts the points the earlier ones planned."""
    from moe_lab.backends import backend_class
    cfg = json.loads((run_dir / "manifest.json").read_text())["config"]
    res = pd.read_parquet(run_dir / "results.parquet")
    grid, combos = {}, {}
    for m, tp, ep, r in product(cfg["models"], cfg["tp"], cfg["ep"], cfg["routing"]):
        sh = (m, int(tp), int(ep), r)
        grid.setdefault(sh, set()).update(int(t) for t in cfg["tokens"])
        for b, mode in product(cfg["backends"], cfg["modes"]):
            both = mode.startswith("compile:") and backend_class(b).compile_both_ways
            combos.setdefault(sh, set()).update(
                (b, mode, w) for w in ((False, True) if both else (False,)))
    wrapped = res["wrapped"].astype("boolean").fillna(False).astype(bool) \
        if "wrapped" in res else pd.Series(False, index=res.index)
    for row, w in zip(res.itertuples(index=False), wrapped):
        sh = (row.model, int(row.tp), int(row.ep), row.routing)
        grid.setdefault(sh, set()).add(int(row.tokens))
        combos.setdefault(sh, set()).add((row.backend, row.mode, bool(w)))
    planned = sum(len(grid[sh]) * len(combos.get(sh, ())) for sh in grid)
    keys = res[["model", "backend", "mode", "wrapped", "tokens"]].astype(str).agg("|".join, axis=1)
    comp = res[res["mode"].str.startswith("compile:")]
    return dict(run=run_dir.name, points=len(res), coverage=(keys.nunique(), planned),
                compile_rows=len(comp), by_status=comp["status"].value_counts().to_dict())


def newest_committed_run_with_compile_rows() -> str:
    found = []
    for d in RUNS.iterdir():
        if (d / "results.parquet").is_file():
            modes = pd.read_parquet(d / "results.parquet", columns=["mode"])["mode"]
            if (d / "compile.parquet").is_file() or modes.str.startswith("compile:").any():
                found.append((json.loads((d / "manifest.json").read_text())["started"], d.name))
    return max(found)[1]


def test_default_is_the_newest_compile_run_and_its_coverage_is_counted():
    outputs = run_notebook(NB, timeout=600)
    got = shown(printed(outputs))
    assert got["run"] == newest_committed_run_with_compile_rows()
    assert got == expected(RUNS / got["run"])
    have, planned = got["coverage"]
    assert have <= planned
    # points a lease never reached are counted and said to be listed (the table below it)
    assert (f"; {planned - have} were never measured (below)" in printed(outputs)) == (have < planned)
    assert len(pngs(outputs)) >= 3  # time, gap, payback


def test_a_compile_run_measured_on_cpu_by_ml_measure(tmp_path):
    import moe_lab as ml
    run_dir = tmp_path / "cpu-compile"
    ml.measure(["custom:H=64,I=32,E=4,k=2"], [1, 8], backends="torch", dtype="fp32", tp=1,
               modes="compile:off,compile:default", run=run_dir)
    outputs = run_notebook(NB, timeout=600, edit=with_params(run=str(run_dir)))
    got = shown(printed(outputs))
    assert got == expected(run_dir)
    # torch is measured both ways: 2 modes x 2 wraps x 2 token counts, all with a row
    assert got["run"] == "cpu-compile" and got["coverage"] == (8, 8)
    assert len(pngs(outputs)) >= 3


def test_the_cpu_demo_measures_with_ml_measure():
    """demo=True measures a tiny compile sweep into a temporary folder and shows it."""
    outputs = run_notebook(NB, timeout=600, edit=with_params(demo=True))
    got = shown(printed(outputs))
    assert got["run"] == "demo-compile-cpu"
    # torch, both ways: 2 modes x 2 wraps x 3 token counts
    assert got["coverage"] == (12, 12) and got["compile_rows"] == 12
    assert len(pngs(outputs)) >= 3
