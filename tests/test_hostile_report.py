"""`moe-lab report` against hostile input (the features added since tests/test_hostile_37.py):
each refusal one line on stderr, exit 2, nothing written."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moe_lab.cli import main
from conftest import one_line_err as _one_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _notebook_without_cell_ids(folder: Path) -> Path:
    """A notebook saved as nbformat 4.5 with cells that have no id (notebook 05 had 4)."""
    folder.mkdir(parents=True, exist_ok=True)
    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "run = None\n",
         "outputs": [], "execution_count": None},
        {"cell_type": "code", "metadata": {}, "source": "print(run)\n", "outputs": [],
         "execution_count": None}], "metadata": {"kernelspec": {
            "name": "python3", "display_name": "Python 3", "language": "python"}}}
    p = folder / "01_x.ipynb"
    p.write_text(json.dumps(nb))
    return p


def test_a_refusal_over_notebooks_without_cell_ids_is_one_line(tmp_path):
    """Before: nbformat's MissingIDFieldWarning printed two more lines on stderr before the
    refusal's one (every `report --run X` or `-p` refusal over the committed notebooks)."""
    nbs = tmp_path / "nbs"
    _notebook_without_cell_ids(nbs)
    r = subprocess.run([sys.executable, "-m", "moe_lab", "report", "--notebooks", str(nbs),
                        "-p", "nosuch", "1", "--out", str(tmp_path / "out")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONWARNINGS="default"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "moe-lab: error: -p 'nosuch': no notebook run here takes it (they take: run)"]
    assert not (tmp_path / "out").exists()


def test_review_values_without_by_is_refused_as_compare_refuses_it(tmp_path, capsys):
    """Before: `report --runs A --values x,y` ignored --values and wrote a review of the
    whole run (exit 0); `compare A --values x,y` refuses it."""
    out = tmp_path / "review"
    assert main(["report", "--runs", "h200-review-a-20261201", "--values", "default,tuned",
                 "--out", str(out)]) == 2
    assert _one_line(capsys) == ("moe-lab: error: --values default,tuned: give the column "
                                 "they are values of, --by COLUMN")
    assert not out.exists()


@pytest.mark.parametrize("name,value,says", [
    ("gpu", "bogus", "unknown GPU 'bogus'"),         # 04's roofline device key
    ("device", "bogus", "no vendor spec for 'bogus'"),  # 03's ceilings
    ("show", "maybe", "give None, a status"),          # 04's statuses
    ("dtype", "fp9", "unknown dtype 'fp9'"),           # 01's and 03's
    ("models", "llama9", "unknown model 'llama9'"),     # 01's
])
def test_a_parameter_value_no_run_could_take_is_refused_before_any_notebook_runs(
        tmp_path, capsys, name, value, says):
    """Before: the notebook refused it after its figures were drawn (a refusal page) and
    `report` exited 0; `-p models deepseek-r1` even drew an empty figure (list('deep...'))."""
    out = tmp_path / "out"
    assert main(["report", "-p", name, value, "--out", str(out)]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"moe-lab: error: -p {name} {value}: ") and says in err, err
    assert not out.exists()  # nothing written, no notebook executed


def test_models_given_as_text_pick_those_models(tmp_path):
    """`report -p models deepseek-r1` hands the notebook a str: the figure shows that model
    (before, list() split the text into letters and no model matched)."""
    from moe_lab.plots.kernel_time import fig_time_vs_tokens
    from moe_lab.storage.store import open_run
    from moe_lab.analysis.runs import richest_run
    run = open_run(richest_run())
    model = sorted(set(run.results["model"]))[0]
    fig = fig_time_vs_tokens(run, model)
    titles = " ".join(ax.get_title() for ax in fig.axes)
    assert model in titles and all(m not in titles for m in set(run.results["model"]) - {model})
