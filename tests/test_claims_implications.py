"""What the claims imply per MoE layer, beside the roofline floor and measured times."""
import math

import pandas as pd
import pytest

from moe_lab.claims.implications import implications
from moe_lab.claims.registry import load_registry


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def test_per_layer_savings_without_runs(reg, tmp_path):
    df = implications(reg, runs_dir=tmp_path).set_index("config")
    s = df.loc["000-scout-bf16"]
    # (49.73 - 39.30) ms over Scout's 48 MoE layers = 217.3 us per layer
    assert s["step_saved_ms"] == pytest.approx(10.43)
    assert s["saved_per_layer_us"] == pytest.approx(10.43e3 / 48)
    assert (s["tokens"], s["tp"], s["ep"], s["moe_layers"]) == (32, 8, 1, 48)
    m = df.loc["000-maverick-bf16"]
    assert m["moe_layers"] == 24 and m["saved_per_layer_us"] == pytest.approx(5.39e3 / 24)
    d = df.loc["002-deepseek-r1"]
    assert (d["tokens"], d["ep"], d["moe_layers"]) == (64, 8, 58)
    assert "ITL" in d["note"]  # TPOT and ITL disagree there
    assert df["measured_us"].isna().all()
    assert df["note"].str.contains("no committed run yet").all()
    assert (df["gpu"] == "mi300x").all()


def test_roofline_floor_present(reg, tmp_path):
    pytest.importorskip("moe_lab.roofline")
    df = implications(reg, runs_dir=tmp_path)
    assert (df["floor_us"] > 0).all()
    assert (df["min_baseline_layer_us"] > df["saved_per_layer_us"]).all()
    assert df["saved_over_floor"].notna().all()


def test_measured_times_are_joined(reg, tmp_path):
    run = tmp_path / "r1"
    run.mkdir()
    pd.DataFrame(dict(model=["llama4-scout-16e", "llama4-scout-16e", "deepseek-r1"],
                      tp=[8, 8, 8], ep=[1, 1, 8], backend=["torch", "aiter-triton", "torch"],
                      mode=["graph", "graph", "graph"], tokens=[32, 32, 64],
                      status=["ok", "ok", "failed"], median_us=[900.0, 150.0, 1.0])
                 ).to_parquet(run / "results.parquet")
    df = implications(reg, runs_dir=tmp_path).set_index("config")
    assert df.loc["000-scout-bf16", "measured_us"] == 150.0
    assert df.loc["000-scout-bf16", "measured_backend"] == "aiter-triton/graph"
    assert df.loc["000-scout-bf16", "measured_run"] == "r1"
    assert math.isnan(df.loc["002-deepseek-r1", "measured_us"])  # failed rows ignored
    assert "no committed measurement" in df.loc["002-deepseek-r1", "note"]


def test_an_fp8_claim_is_measured_by_the_scheme_its_checkpoint_ships(reg, tmp_path):
    """Seed 002's DeepSeek-R1 claim is FP8 with 128x128 weight blocks: its measured time is
    the best fp8-block128 row, never a bf16 row or another fp8 scheme's."""
    run = tmp_path / "r1"
    run.mkdir()
    rows = [("bf16", 50.0), ("fp8-tensor", 60.0), ("fp8-block128", 300.0), ("fp8-block128", 200.0)]
    pd.DataFrame(dict(model="deepseek-r1", tp=8, ep=8, backend="aiter-triton", mode="graph",
                      tokens=64, status="ok", dtype=[d for d, _ in rows],
                      median_us=[t for _, t in rows])).to_parquet(run / "results.parquet")
    df = implications(reg, runs_dir=tmp_path).set_index("config")
    assert df.loc["002-deepseek-r1", "measured_us"] == 200.0
    # Maverick's FP8 checkpoint is per-channel: no fp8-channel row, nothing joined
    assert math.isnan(df.loc["002-maverick-fp8", "measured_us"])
    assert "fp8-channel" in df.loc["002-maverick-fp8", "note"]
