"""notebooks/03_roofline.ipynb executes headless from a clean checkout (with or without a
committed run) and raises no error."""
from pathlib import Path

import nbformat
import pytest

nbclient = pytest.importorskip("nbclient")

NB = Path(__file__).resolve().parent.parent / "notebooks" / "03_roofline.ipynb"


def test_notebook_03_is_committed_without_outputs():
    nb = nbformat.read(NB, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_notebook_03_executes_without_error():
    nb = nbformat.read(NB, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NB.parent)}})
    client.execute()  # raises CellExecutionError on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    figures = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if "image/png" in o.get("data", {})]
    assert figures, "the predicted-floors figure should always render"
