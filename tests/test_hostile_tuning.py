"""The newest features (tune's search and its resume, `moe-lab findings`, the tuned-files
and published-tuning readers) against hostile input: each bad input one line (CLI: exit 2
on stderr; API: UsageError), nothing written where it was not asked, nothing measured lost.

1. findings on data folders other than the committed one: an empty folder is refused; a
   folder of CPU runs (eager rows only, no target with data) gives the document
"""
from __future__ import annotations

import shutil

import pytest

from moe_lab.cli import main
from conftest import folder_tree as _tree, one_line_err as _one_line  # noqa: E402

MODEL = "custom:H=64,I=32,E=4,k=2"
SWEEP = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2", "--backends", "torch",
         "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms", "2",
         "--warmup-ms", "1", "--run-id", "cpu"]


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    """A data folder holding one small CPU sweep run (eager rows, phases)."""
    runs = tmp_path_factory.mktemp("data") / "runs"
    assert main(SWEEP + ["--data-dir", str(runs)]) == 0
    return runs


# --- 1. findings on other data folders ----------------------------------------------------------

def test_findings_of_an_empty_data_folder_is_refused_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    out = tmp_path / "findings.md"
    for check in ([], ["--check"]):
        assert main(["findings", *check, "--data-dir", str(tmp_path / "runs"),
                     "--out", str(out)]) == 2
        assert "holds no run folder" in _one_line(capsys)
    assert not out.exists()


def test_findings_of_a_folder_of_cpu_runs_is_written(cpu_runs, tmp_path, capsys):
    """Before: a traceback (pandas' 'No objects to concatenate' when no target had data;
    then the best points of a run without graph rows, a str + float error)."""
    out = tmp_path / "findings.md"
    capsys.readouterr()
    assert main(["findings", "--data-dir", str(cpu_runs), "--out", str(out)]) == 0
    text = out.read_text()
    assert "## The runs" in text and "`cpu`" in text
    assert main(["findings", "--check", "--data-dir", str(cpu_runs), "--out", str(out)]) == 0
