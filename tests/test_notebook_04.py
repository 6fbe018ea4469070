"""notebooks/04_reproduce_claims.ipynb executes headless on the CPU: its pass/warn/fail
counts are moe_lab.claims.run_checks's, and the measured times of its implications come
from the runs under its `run` folder."""
import re
from pathlib import Path

import pytest

pytest.importorskip("nbclient")

from conftest import RUNS_DIR, pngs, printed, run_notebook, with_params  # noqa: E402

NB = "04_reproduce_claims.ipynb"


def shown(text: str) -> dict:
    runs = re.search(r"^runs for the measured times: (\S+): (\d+) run\(s\): (.*)$", text, re.M)
    counts = re.search(r"^(\d+) claims from .*; (\d+) checks: (\d+) pass, (\d+) warn, (\d+) fail$",
                       text, re.M)
    assert runs and counts, text[:1000]
    measured = dict(re.findall(r"^(\S+): measured_us \S+ \(\S+, run (\S+)\)$", text, re.M))
    return dict(runs_dir=runs.group(1), runs=sorted(runs.group(3).split(", ")),
                counts=tuple(map(int, counts.groups())), measured=measured)


def expected_counts():
    from moe_lab import claims
    reg = claims.load_registry()
    s = claims.summary(claims.run_checks(reg))
    return reg, (len(reg["claims"]), sum(s.values()), s["pass"], s["warn"], s["fail"])


def _single_process(results: Path) -> bool:
    """A run with a row of one process: what ml.runs lists (a `sweep --nproc` run of
    rank rows only is notebook 06's, and has no time of a claim's single layer)."""
    import pandas as pd
    r = pd.read_parquet(results)
    if "parallel" not in r:
        return len(r) > 0
    return bool((r["parallel"].isna() | (r["parallel"].astype(str) == "")).any())


def _may_be_default(run: Path) -> bool:
    """Not marked running or failed: the runs `run = None` reads."""
    import json
    status = str(json.loads((run / "manifest.json").read_text()).get("status") or "")
    return "running" not in status and "failed" not in status


def test_counts_are_run_checks_and_measured_times_come_from_data_runs():
    from moe_lab import claims
    outputs = run_notebook(NB)
    got = shown(printed(outputs))
    reg, counts = expected_counts()
    assert got["counts"] == counts
    runs = Path(RUNS_DIR)
    assert got["runs"] == sorted(p.parent.name for p in runs.glob("*/results.parquet")
                                 if _single_process(p) and _may_be_default(p.parent))
    imp = claims.implications(reg)
    assert got["measured"] == {r.config: r.measured_run or "-" for r in imp.itertuples()}
    measured = set(got["measured"].values()) - {"-"}
    assert measured and measured <= set(got["runs"])  # the best committed H200 kernel times
    assert len(pngs(outputs)) >= 7  # 5 configurations + accuracy + implications
    # aiter against vllm: drawn only where a run has both (no committed run has them yet)
    if claims.aiter_vs_vllm(None, imp).empty:
        assert "no run here has both aiter and vllm rows: no aiter-vs-vllm figure" in \
            printed(outputs)


def test_a_runs_folder_measured_on_cpu_by_ml_measure(tmp_path):
    """`run` names the folder the implications read: a CPU run of a small model has no
    shape of the claims, so no configuration gets a measured time."""
    import moe_lab as ml
    ml.measure(["custom:H=64,I=32,E=4,k=2"], [1], backends="torch", tp=1,
               run=tmp_path / "runs" / "cpu-run")
    outputs = run_notebook(NB, edit=with_params(run=str(tmp_path / "runs")))
    got = shown(printed(outputs))
    assert got["runs_dir"] == str(tmp_path / "runs") and got["runs"] == ["cpu-run"]
    assert got["counts"] == expected_counts()[1]
    assert got["measured"] and set(got["measured"].values()) == {"-"}


@pytest.mark.parametrize("show, want", [("warn", {"warn"}), (["warn", "fail"], {"warn", "fail"})])
def test_show_takes_a_status_or_a_list_of_them(show, want):
    """`show` (the parameters cell: None or a list such as ['warn', 'fail']); `moe-lab report
    -p show warn` hands it a string, which raised pandas' TypeError from `isin`."""
    outputs = run_notebook(NB, edit=with_params(show=show))
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    table = next(t for t in tables if "recomputed_gain_pct" in t)
    cells = set(re.findall(r'<td id="T_\w+_row\d+_col0" class="data row\d+ col0" >(\w+)</td>',
                           table))
    assert cells == want


def test_show_of_an_unknown_status_is_one_line():
    from nbclient.exceptions import CellExecutionError
    for bad in ("warning", ["pass", "bogus"], 3):
        with pytest.raises(CellExecutionError) as exc:
            run_notebook(NB, edit=with_params(show=bad))
        assert exc.value.ename == "UsageError", exc.value.ename
        assert "show" in exc.value.evalue and "pass, warn, fail" in exc.value.evalue
        assert "\n" not in exc.value.evalue.strip()


def test_report_p_registry_is_the_callers_path(tmp_path, monkeypatch):
    """`moe-lab report --only 04 -p registry my.json` from the folder that holds my.json:
    the notebook runs from notebooks/, where the relative path was looked up, and refused
    the page with 'no claims registry at my.json'. The path handed over is the caller's."""
    import argparse
    import os

    from moe_lab.commands.report import NOTEBOOKS_DIR, _for_run
    from moe_lab.report import notebook_parameters
    nb = NOTEBOOKS_DIR / NB
    declared = {nb.name: notebook_parameters(str(nb))}
    (tmp_path / "my.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(parameter=[("registry", "my.json"), ("show", "warn")],
                              run=None, runs=None, out=str(tmp_path / "o"))
    _, params, _ = _for_run(args, declared)
    assert params["registry"] == str(tmp_path / "my.json") and os.path.isabs(params["registry"])
    assert params["show"] == "warn"  # a parameter that is no path is handed on as given
