"""notebooks/03_roofline.ipynb executes headless from a clean checkout (with or without a
committed run) and raises no error."""
import pytest

pytest.importorskip("nbclient")

from conftest import pngs, run_notebook  # noqa: E402


def test_notebook_03_executes_without_error():
    assert pngs(run_notebook("03_roofline.ipynb")), "the predicted-floors figure should always render"
