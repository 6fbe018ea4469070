"""notebooks/02_eager_vs_compile.ipynb executes headless, with or without a committed run
with compile rows, and with its CPU demo."""
import pytest

pytest.importorskip("nbclient")

from conftest import pngs, run_notebook  # noqa: E402

NB = "02_eager_vs_compile.ipynb"


def test_notebook_02_executes_without_error():
    run_notebook(NB, timeout=600)


def test_notebook_02_demo_renders_figures():
    def demo(nb):
        params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        assert "demo = False" in params.source
        params.source = params.source.replace("demo = False", "demo = True")
    assert len(pngs(run_notebook(NB, timeout=600, edit=demo))) >= 3  # time, gap, payback
