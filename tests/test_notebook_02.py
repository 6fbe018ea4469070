"""notebooks/02_eager_vs_compile.ipynb executes headless, with or without a committed run
with compile rows, and with its CPU demo."""
from pathlib import Path

import nbformat
import pytest

nbclient = pytest.importorskip("nbclient")

NB = Path(__file__).resolve().parent.parent / "notebooks" / "02_eager_vs_compile.ipynb"


def _execute(nb):
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(NB.parent)}})
    client.execute()  # raises CellExecutionError on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "image/png" in o.get("data", {})]


def test_notebook_02_is_committed_without_outputs():
    nb = nbformat.read(NB, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_notebook_02_executes_without_error():
    _execute(nbformat.read(NB, as_version=4))


def test_notebook_02_demo_renders_figures():
    nb = nbformat.read(NB, as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert "demo = False" in params.source
    params.source = params.source.replace("demo = False", "demo = True")
    figures = _execute(nb)
    assert len(figures) >= 3  # time vs tokens, gap, payback
