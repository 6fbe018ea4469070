"""Every notebook is committed clean (no outputs, no execution counts: clean diffs;
figures come from `moe-lab report`) and starts with a tagged parameters cell."""
import glob
import os

import pytest

nbformat = pytest.importorskip("nbformat")

from conftest import NOTEBOOKS  # noqa: E402

PATHS = sorted(glob.glob(os.path.join(NOTEBOOKS, "*.ipynb")))


def test_the_notebooks_exist():
    assert [os.path.basename(p)[:2] for p in PATHS] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("path", PATHS, ids=os.path.basename)
def test_committed_without_outputs_with_parameters_cell(path):
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])


@pytest.mark.parametrize("path", PATHS, ids=os.path.basename)
def test_every_cell_is_saved_with_its_id(path):
    """nbformat 4.5 cells carry an id; one saved without makes nbformat warn on every read
    (papermill and `moe-lab report` printed it above their one-line refusals)."""
    import json
    with open(path) as fh:
        cells = json.load(fh)["cells"]
    ids = [c.get("id") for c in cells]
    assert ids  # all() of no cell passes
    assert all(ids) and len(set(ids)) == len(ids)


@pytest.mark.parametrize("path", PATHS, ids=os.path.basename)
def test_one_parameter_name_for_the_run(path):
    """Every notebook takes `run` (None: the newest run with data for it), nothing else
    names a run, and it prints which run it shows."""
    cells = nbformat.read(path, as_version=4).cells
    params = next(c for c in cells if c.cell_type == "code").source
    names = [ln.split("=")[0].strip() for ln in params.splitlines()
             if "=" in ln and not ln.lstrip().startswith("#")]
    assert "run" in names and "run = None" in params
    assert not {"run_dir", "RUN_DIR", "RUNS_DIR"} & set(names)
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    assert "print(" in code


@pytest.mark.parametrize("path", PATHS, ids=os.path.basename)
def test_no_stale_references(path):
    """The seeds live in data/claims/sources/; the old plot modules and claims.check are
    gone."""
    text = open(path).read()
    for stale in ("../" + "shared", "plots_compile", "plots_roofline", "from moe_lab import plots\\n",
                  "claims.check", "demo_run"):
        assert stale not in text, stale

