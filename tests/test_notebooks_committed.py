"""Every notebook is committed clean (no outputs, no execution counts: clean diffs;
figures come from `moe-lab report`) and starts with a tagged parameters cell."""
import glob
import os

import pytest

nbformat = pytest.importorskip("nbformat")

from conftest import NOTEBOOKS  # noqa: E402

PATHS = sorted(glob.glob(os.path.join(NOTEBOOKS, "*.ipynb")))


def test_the_four_notebooks_exist():
    assert [os.path.basename(p)[:2] for p in PATHS] == ["01", "02", "03", "04"]


@pytest.mark.parametrize("path", PATHS, ids=os.path.basename)
def test_committed_without_outputs_with_parameters_cell(path):
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])
