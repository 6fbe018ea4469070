"""Notebook 01 executes headless on the CPU against the committed H200 run."""
import pytest

pytest.importorskip("nbclient")

from conftest import pngs, run_notebook  # noqa: E402


def test_notebook_01_renders_from_committed_run():
    outputs = run_notebook("01_kernel_time.ipynb")
    assert len(pngs(outputs)) >= 3  # time vs tokens, phases, launch overhead
    text = "".join(o.get("text", "") for o in outputs)
    assert "h200-seed4-20261129" in text
