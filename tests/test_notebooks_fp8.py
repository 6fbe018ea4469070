"""Notebooks 01 and 03 show dtypes: the dtype table, the `dtype` filter, and FP8 against
bf16, which says plainly when no FP8 rows exist (the committed runs) and draws when they do
(a real CPU sweep with both dtypes in one folder)."""
import pytest

pytest.importorskip("nbclient")

from conftest import pngs, printed, run_notebook, with_params  # noqa: E402
from moe_lab.modes import Mode  # noqa: E402
from moe_lab.sweep import Grid, Sweep  # noqa: E402

MODEL = "custom:H=256,I=256,E=4,k=2"


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """One CPU run folder holding bf16 and fp8-channel rows (two sweeps into it)."""
    path = tmp_path_factory.mktemp("fp8nb") / "cpu-fp8-mixed"
    for dtype, backends in (("bf16", ["torch"]), ("fp8-channel", ["torch-fp8-dequant"])):
        grid = Grid(models=[MODEL], tokens=[1, 4], backends=backends, modes=[Mode("eager")],
                    tps=[1], dtype=dtype)
        Sweep(grid, "cpu", path, seed=1, profile=False, warmup_ms=1, rep_ms=5,
              progress=False).run()
    return path


def _html(outputs) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs)


@pytest.mark.parametrize("nb", ["01_kernel_time.ipynb", "03_roofline.ipynb"])
def test_committed_runs_say_none_measured_by_moe_lab_yet(nb):
    params = dict(remeasure=False) if nb.startswith("01") else {}
    outputs = run_notebook(nb, edit=with_params(**params))
    assert "fp8_format" in _html(outputs)  # the dtype table
    # none measured by moe-lab is committed yet; aiter's imported table has AMD's own
    assert "No FP8 rows measured by moe-lab" in printed(outputs)


def test_notebook_01_draws_fp8_against_bf16_and_filters_by_dtype(mixed_run):
    outputs = run_notebook("01_kernel_time.ipynb",
                           edit=with_params(run=str(mixed_run), remeasure=False))
    text = printed(outputs)
    assert "FP8 rows from cpu-fp8-mixed" in text and "2 with a bf16 point" in text
    assert "fp8-channel" in _html(outputs) and "speedup" in _html(outputs)
    n_all = len(pngs(outputs))
    only = run_notebook("01_kernel_time.ipynb", edit=with_params(
        run=str(mixed_run), remeasure=False, dtype="fp8-channel"))
    assert "torch-fp8-dequant" in _html(only) and len(pngs(only)) >= 1
    # the filtered run's time figure has no bf16 `torch` line: fewer points shown
    assert n_all >= 3
