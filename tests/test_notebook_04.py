"""notebooks/04_reproduce_claims.ipynb executes headless on CPU without errors."""
import pytest

pytest.importorskip("nbclient")

from conftest import pngs, run_notebook  # noqa: E402


def test_executes_headless():
    outputs = run_notebook("04_reproduce_claims.ipynb")
    assert len(pngs(outputs)) >= 7  # 5 configurations + accuracy + implications
    text = "".join(str(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert "pass" in text and "claims" in text
