"""notebooks/03_roofline.ipynb executes headless on the CPU: it prints the run it shows, the
ceilings it uses and the point closest to its roof; the tests recompute that pct_of_roof
from the rows' FLOPs and bytes and the ceilings, independently of moe_lab.cost.roofline."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("nbclient")

from conftest import ROOT, RUNS_DIR, pngs, printed, run_notebook, with_params  # noqa: E402

NB = "03_roofline.ipynb"
RUNS = Path(RUNS_DIR)  # the committed runs (conftest)


def shown(text: str) -> tuple[str, float, float]:
    """(run id, highest pct_of_roof, its median_us) as printed."""
    run = re.search(r"^run (\S+): \d+ points", text, re.M)
    best = re.search(r"^highest pct_of_roof: ([0-9.e+-]+)% \(.* tokens, ([0-9.e+-]+) us against",
                     text, re.M)
    assert run and best, text[:1000]
    return run.group(1), float(best.group(1)), float(best.group(2))


def best_pct(res: pd.DataFrame, tflops: float, tb_s: float,
             fp8_tflops: float | None = None) -> tuple[float, float]:
    """max over ok rows of 100 * max(flops / peak, bytes / bandwidth) / median_us; the peak
    of a row's own dtype (fp8_tflops for the fp8 schemes)."""
    ok = res[(res["status"] == "ok") & (res["median_us"] > 0)]
    fp8 = ok["dtype"].astype(str).str.startswith("fp8")
    peak = fp8.map({True: fp8_tflops or tflops, False: tflops})
    roof_us = pd.concat([ok["flops"] / (peak * 1e12), ok["bytes"] / (tb_s * 1e12)],
                        axis=1).max(axis=1) * 1e6
    pct = 100 * roof_us / ok["median_us"]
    return float(pct.max()), float(ok.loc[pct.idxmax(), "median_us"])


def newest_committed_run_with_ok_rows() -> str:
    found = []
    for d in RUNS.iterdir():
        if (d / "results.parquet").is_file():
            res = pd.read_parquet(d / "results.parquet")
            if "parallel" in res:  # distributed rows are notebook 06's
                res = res[res["parallel"].isna()]
            if (res["status"] == "ok").any():
                found.append((json.loads((d / "manifest.json").read_text())["started"], d.name))
    return max(found)[1]


def test_default_run_against_its_devices_measured_ceilings():
    outputs = run_notebook(NB)
    text = printed(outputs)
    run_id, pct, median = shown(text)
    assert run_id == newest_committed_run_with_ok_rows()
    from moe_lab.core.devices import device_slug  # the run's own device's ceilings
    dev = json.loads((RUNS / run_id / "manifest.json").read_text())["environment"]["device_name"]
    ceil = json.loads((Path(ROOT) / "data" / "ceilings" / f"{device_slug(dev)}.json").read_text())
    assert "[measured]" in text
    want, want_median = best_pct(pd.read_parquet(RUNS / run_id / "results.parquet"),
                                 ceil["gemm_bf16"]["tflops"],
                                 # the roof reads at the read bandwidth when it is measured
                                 # (and not below the copy one), else at the copy bandwidth
                                 max(ceil["memory"]["tb_per_s"],
                                     ceil.get("memory_read", {}).get("tb_per_s", 0)),
                                 ceil["gemm_fp8"]["tflops"])
    assert pct == pytest.approx(want, rel=1e-3) and median == pytest.approx(want_median, rel=1e-3)
    assert len(pngs(outputs)) >= 3  # roofline, floor vs tokens, predicted floors


def test_a_run_measured_on_cpu_by_ml_measure_against_a_vendor_spec(tmp_path):
    """A CPU run has no ceilings of its own; `device` puts it against the H200's vendor
    peaks (989.4 TFLOP/s bf16, 4.8 TB/s). The CPU rows carry no cost, so the test counts
    it from the model: flops 2*pairs*3*I*H, bytes experts_hit*3*H*I*2 + 2*T*H*2."""
    import moe_lab as ml
    run_dir = tmp_path / "cpu-run"
    res = ml.measure(["custom:H=64,I=32,E=4,k=2"], [1, 8], backends=["torch", "torch-grouped"],
                     tp=1, run=run_dir)
    outputs = run_notebook(NB, edit=with_params(run=str(run_dir), device="h200-sxm",
                                                tokens=[1, 64], straggler_seeds=1))
    H, I = 64, 32
    res = res.assign(flops=2 * res["pairs"] * 3 * I * H,
                     bytes=res["experts_hit"] * 3 * H * I * 2 + 2 * res["tokens"] * H * 2)
    run_id, pct, median = shown(printed(outputs))
    want, want_median = best_pct(res, 989.4, 4.8)
    assert run_id == "cpu-run"
    assert pct == pytest.approx(want, rel=1e-3) and median == pytest.approx(want_median, rel=1e-3)
    assert len(pngs(outputs)) >= 2  # roofline, floor vs tokens: this run's only
    assert "predicted floors: left out (no run's rows; this page draws run cpu-run only)" \
        in printed(outputs)
    # every line and table on the page is this run's: none names, or holds rows of, another
    # run (was: the FP8 summary and target table of the newest H200 FP8 run, and the table
    # of AMD's imported rows against their floors)
    tables = "".join(o.get("data", {}).get(k, "") for o in outputs
                     for k in ("text/plain", "text/html"))
    others = {d.name for d in RUNS.iterdir() if (d / "manifest.json").is_file()}
    assert not [r for r in others if r in printed(outputs) + tables]
    assert "AMD" not in tables and "H200" not in tables  # no other device's rows
    for what in ("FP8 against bf16", "the model against AMD's own measurements",
                 "FP8 GEMM against its speed of light"):
        assert f"{what}: left out" in printed(outputs)


def test_the_fp8_gemm_section_shows_its_figure():
    """The FP8 GEMM against its speed of light: where the section displays its tables it
    shows its figure too (a Figure returned inside an if block is not displayed)."""
    import os

    from conftest import NOTEBOOKS, execute_cached
    nb = execute_cached(os.path.join(NOTEBOOKS, NB))
    cell = next(c for c in nb.cells if c.cell_type == "code" and "fig_gemm_sol(" in c.source)
    tables = [o for o in cell.outputs if "text/html" in o.get("data", {})]
    assert tables, "the committed runs have FP8 points with stored phases: the tables show"
    assert any("image/png" in o.get("data", {}) for o in cell.outputs), "no FP8 GEMM figure"
