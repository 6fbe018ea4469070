"""notebooks/06_expert_parallel.ipynb executes headless on the CPU against the newest
committed run with distributed rows: it prints the run, says plainly when it is a CPU run,
and prints the prediction target; the test recomputes that target from the parquet file
(per point: the slowest rank's expert time plus the slowest rank's collective, both timed
like the layer, against the measured layer), not through moe_lab.analysis.expert_parallel."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("nbclient")

from conftest import RUNS_DIR, pngs, printed, run_notebook  # noqa: E402
from moe_lab.analysis.targets import by_name  # noqa: E402

NB = "06_expert_parallel.ipynb"
RUNS = Path(RUNS_DIR)
# the prediction target's limit, from its record (moe_lab.analysis.targets), not a copy
LIMIT = by_name("predicted within 5% of measured").limit
KEY = ["model", "dtype", "backend", "mode", "tokens", "routing", "parallel", "world_size"]


def newest_committed_distributed_run() -> str:
    found = []
    for d in RUNS.iterdir():
        if (d / "results.parquet").is_file():
            res = pd.read_parquet(d / "results.parquet")
            if "parallel" in res and ((res["parallel"].notna()) & (res["status"] == "ok")).any():
                found.append((json.loads((d / "manifest.json").read_text())["started"], d.name))
    return max(found)[1]


def expected_target(res: pd.DataFrame) -> dict:
    ok = res[(res["status"] == "ok") & res["parallel"].notna()]
    out = {}
    for mode, g in ok.groupby("mode"):
        within = total = 0
        for _, p in g.groupby(KEY):
            pred = p["expert_sync_us"].max() + p["collective_us"].max()
            assert (p["predicted_us"] - pred).abs().max() < 1e-6 * pred
            layer = p["layer_us"].iloc[0]
            assert (p["layer_us"] == layer).all() and p["rank"].nunique() == p["world_size"].iloc[0]
            within += abs(pred / layer - 1) <= LIMIT
            total += 1
        out[mode] = (int(within), total)
    return out


def test_default_run_its_cpu_label_and_the_prediction_target():
    outputs = run_notebook(NB)
    text = printed(outputs)
    run_id = re.search(r"^run (\S+): \d+ points", text, re.M).group(1)
    assert run_id == newest_committed_distributed_run()
    res = pd.read_parquet(RUNS / run_id / "results.parquet")
    cpu = res["device"].str.startswith("cpu").all()
    if cpu:  # the committed run is a CPU run: the notebook must say so
        assert "NOT GPU results" in text
    gpu = sorted(m.parent.name for m in RUNS.glob("*/manifest.json")
                 if any(r.get("torch_device") != "cpu" for r in
                        (json.loads(m.read_text()).get("distributed") or {}).get("ranks", [])))
    if gpu:  # each named; else the line says there is none, with the command that makes one
        assert all(r in text for r in gpu)
    else:
        assert "GPU runs with ranks: none committed yet (`moe-lab sweep --nproc N`" in text
    for mode, (within, total) in expected_target(res).items():
        assert f"predicted within {LIMIT:.0%} of measured ({mode}): {within} of {total} points" in text
    assert "spread target:" in text and "estimate" in text
    assert len(pngs(outputs)) >= 5
