"""Notebooks 01 and 03 show dtypes: the dtype table, the `dtype` filter, and FP8 against
bf16: on the committed runs the FP8 rows moe-lab measured on a GPU (named by the run's own
rows: the H200's first, now the H100's too), and on a real CPU
sweep with both dtypes in one folder the figure and the dtype filter."""
import pytest

pytest.importorskip("nbclient")

from conftest import pngs, printed, run_notebook, with_params  # noqa: E402
from moe_lab.storage.modes import Mode  # noqa: E402
from moe_lab.measuring.sweep import Grid, Sweep  # noqa: E402

MODEL = "custom:H=256,I=256,E=4,k=2"


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """Two CPU runs of one device in one data folder: bf16 rows, and fp8-channel rows of the
    same points (a run holds one dtype: a resume with another is refused)."""
    data = tmp_path_factory.mktemp("fp8nb")
    for dtype, backends, name in (("bf16", ["torch"], "cpu-bf16-base"),
                                  ("fp8-channel", ["torch-fp8-dequant"], "cpu-fp8-mixed")):
        grid = Grid(models=[MODEL], tokens=[1, 4], backends=backends, modes=[Mode("eager")],
                    tps=[1], dtype=dtype)
        Sweep(grid, "cpu", data / name, seed=1, profile=False, warmup_ms=1, rep_ms=5,
              progress=False).run()
    return data / "cpu-fp8-mixed"


def _html(outputs) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs)


def newest_measured_fp8_run() -> tuple[str, str]:
    """From the committed files alone: the newest run moe-lab measured (not an import of
    aiter's table) with ok FP8 rows, and the device its FP8 rows name."""
    import json
    from pathlib import Path

    import pandas as pd
    from conftest import RUNS_DIR
    found = []
    for d in Path(RUNS_DIR).iterdir():
        if not (d / "results.parquet").is_file():
            continue
        m = json.loads((d / "manifest.json").read_text())
        res = pd.read_parquet(d / "results.parquet")
        if m.get("kind") == "import" or (res["mode"] == "aiter-tuner").any():
            continue
        fp8 = (res["status"] == "ok") & res["dtype"].astype(str).str.startswith("fp8")
        if fp8.any():
            devices = sorted(res.loc[fp8, "device"].dropna().astype(str).unique())
            assert len(devices) == 1, (d.name, devices)  # one run, one GPU
            found.append((m["started"], d.name, devices[0]))
    return max(found)[1:]


@pytest.mark.parametrize("nb", ["01_kernel_time.ipynb", "03_roofline.ipynb"])
def test_committed_runs_show_fp8_rows_moe_lab_measured(nb):
    params = dict(remeasure=False) if nb.startswith("01") else {}
    outputs = run_notebook(nb, edit=with_params(**params))
    assert "fp8_format" in _html(outputs)  # the dtype table
    text = printed(outputs)
    line = next((ln for ln in text.splitlines() if "FP8 rows from" in ln), "")
    # measured by moe-lab (not aiter's imported table), the newest such run, named with the
    # GPU its own rows say measured them
    run, device = newest_measured_fp8_run()
    assert device.startswith("NVIDIA ")  # a GPU moe-lab measured, never an AMD import
    assert f"FP8 rows from {run} ({device})" in line, text[-800:]
    assert "No FP8 rows measured by moe-lab" not in text and "imported" not in line


def test_notebook_01_draws_fp8_against_bf16_and_filters_by_dtype(mixed_run, monkeypatch):
    monkeypatch.setenv("MOE_LAB_DATA", str(mixed_run.parent))  # the bf16 run beside it
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
    assert n_all >= 2  # time vs tokens and FP8 against bf16; no eager/graph pair: a line
    assert "no figure: no point has both an eager and a graph time" in text
