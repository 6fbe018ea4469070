"""notebooks/04_reproduce_claims.ipynb executes headless on CPU without errors, and is
committed without outputs."""
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NB = Path(__file__).resolve().parent.parent / "notebooks" / "04_reproduce_claims.ipynb"


def test_committed_without_outputs():
    nb = nbformat.read(NB, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is None and not c.outputs for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])


def test_executes_headless():
    nb = nbformat.read(NB, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,
                                     resources={"metadata": {"path": str(NB.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue") if errors else ""
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) >= 7  # 5 configurations + accuracy + implications
    text = "".join(str(o.get("data", {}).get("text/markdown", "")) for c in nb.cells
                   for o in c.get("outputs", []))
    assert "pass" in text and "claims" in text
