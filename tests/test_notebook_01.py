"""Notebook 01 executes headless on the CPU against the committed H200 run."""
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_notebook_01_renders_from_committed_run():
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "01_kernel_time.ipynb"), as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": os.path.join(ROOT, "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 3  # time vs tokens, phases, launch overhead
    text = "".join(o.get("text", "") for o in outputs)
    assert "h200-seed4-20261129" in text
