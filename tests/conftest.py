import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

NOTEBOOKS = os.path.join(ROOT, "notebooks")


def run_notebook(name: str, timeout: int = 300, edit=None):
    """Execute notebooks/<name> headless (moe_lab.report's runner); returns its outputs
    and fails the test on any error output."""
    from moe_lab.report import execute_notebook
    nb = execute_notebook(os.path.join(NOTEBOOKS, name), timeout, edit)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
    return outputs


def pngs(outputs):
    return [o for o in outputs if "image/png" in o.get("data", {})]


def with_params(**params):
    """Set notebook parameters the way papermill does: assignments after the defaults."""
    def edit(nb):
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        cell.source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    return edit


def printed(outputs) -> str:
    """What the notebook printed (stream outputs), in order."""
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
