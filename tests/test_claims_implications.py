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
    # the folder it was given, not 'no committed run yet in data/runs'
    assert df["note"].str.contains(f"no run in {tmp_path}: measured_us is NaN").all()
    assert (df["gpu"] == "mi300x").all()


def test_roofline_floor_present(reg, tmp_path):
    pytest.importorskip("moe_lab.cost.roofline")
    df = implications(reg, runs_dir=tmp_path)
    # a row per performance configuration (the accuracy ones have no concurrency)
    assert len(df) == sum("concurrency" in c for c in reg["configs"].values()) > 0
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


def test_aiter_vs_vllm_per_token_count_beside_the_claims_implied_gain(reg, tmp_path):
    """The seeds' comparison: vLLM's time over aiter's per token count, where a run has
    both; at a claim's own point its implied ratio, vllm / (vllm - saving per layer)."""
    from moe_lab.claims.implications import aiter_vs_vllm
    run = tmp_path / "rocm-seeds-bf16"
    run.mkdir()
    rows = [("aiter", 32, 100.0), ("vllm", 32, 400.0), ("aiter", 64, 150.0), ("vllm", 64, 300.0),
            ("vllm", 128, 500.0), ("torch", 32, 9000.0)]  # 128: no aiter row, no point
    pd.DataFrame(dict(model="llama4-scout-16e", tp=8, ep=1, dtype="bf16", mode="graph",
                      backend=[b for b, _, _ in rows], tokens=[t for _, t, _ in rows],
                      status="ok", median_us=[u for _, _, u in rows])
                 ).to_parquet(run / "results.parquet")
    imp = implications(reg, runs_dir=tmp_path)
    avv = aiter_vs_vllm(tmp_path, imp)
    assert list(avv["tokens"]) == [32, 64]
    assert list(avv["vllm_over_aiter"]) == [4.0, 2.0] and list(avv["saved_us"]) == [300.0, 150.0]
    claim = avv[avv["claim"] != ""]
    assert list(claim["claim"]) == ["000-scout-bf16"] and claim["tokens"].item() == 32
    saved = imp.set_index("config").loc["000-scout-bf16", "saved_per_layer_us"]  # 217.3 us
    assert claim["implied_vllm_over_aiter"].item() == pytest.approx(400.0 / (400.0 - saved))
    import matplotlib
    matplotlib.use("Agg")
    from moe_lab.claims.figures import plot_aiter_vs_vllm
    ax = plot_aiter_vs_vllm(avv).axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert list(lines["measured (rocm-seeds-bf16)"].get_ydata()) == [4.0, 2.0]
    assert list(lines["the claim's implied gain"].get_xdata()) == [32]
    # the guard: a run without one of the two has no comparison (notebook 04 draws nothing)
    (run / "results.parquet").unlink()
    pd.DataFrame(dict(model="llama4-scout-16e", tp=8, ep=1, dtype="bf16", mode="graph",
                      backend="vllm", tokens=32, status="ok", median_us=[400.0])
                 ).to_parquet(run / "results.parquet")
    assert aiter_vs_vllm(tmp_path, imp).empty


def test_a_latency_claim_in_seconds_is_read_in_ms(reg, tmp_path):
    """A registry whose TPOT/ITL claims are in s (a unit the parser reads from
    'Mean TPOT (s)'): the saving per layer was computed as if they were ms, 1000x small."""
    import copy
    in_s = copy.deepcopy(reg)
    restated = 0
    for c in in_s["claims"]:
        if c["kind"] == "perf" and c["unit"] == "ms":
            c.update(unit="s", baseline=c["baseline"] / 1000, new=c["new"] / 1000)
            restated += 1
    assert restated, "no perf claim in ms: the two registries would be the same"
    want = implications(reg, runs_dir=tmp_path).set_index("config")
    got = implications(in_s, runs_dir=tmp_path).set_index("config")
    assert len(want) > 0  # approx over two empty columns passes
    for col in ("tpot_base_ms", "step_saved_ms", "saved_per_layer_us", "saved_per_layer_itl_us"):
        assert got[col].to_numpy() == pytest.approx(want[col].to_numpy()), col


def test_a_latency_claim_in_a_unit_that_is_no_time_is_refused(reg, tmp_path):
    import copy
    from moe_lab.core.errors import UsageError
    bad = copy.deepcopy(reg)
    next(c for c in bad["claims"] if c["metric"] == "mean_tpot")["unit"] = "tok/s"
    with pytest.raises(UsageError, match="'tok/s' is not a time"):
        implications(bad, runs_dir=tmp_path)


def test_a_serving_config_of_a_model_moe_lab_does_not_know_is_refused(reg, tmp_path):
    """It was left out of the implications without a word (four rows of five)."""
    import copy
    from moe_lab.core.errors import UsageError
    bad = copy.deepcopy(reg)
    bad["configs"]["000-scout-bf16"]["preset"] = "gpt-oss-120b"
    with pytest.raises(UsageError) as exc:
        implications(bad, runs_dir=tmp_path)
    assert "000-scout-bf16" in str(exc.value) and "'gpt-oss-120b'" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_run_given_as_a_folder_elsewhere_is_credited_with_its_own_commit(reg, tmp_path):
    """Notebook 04's implications footer took each run's commit from the data folder's run
    of the same name: a run given as a folder elsewhere showed 'commits unknown', and a copy
    of a committed run measured at another commit showed the committed run's commit."""
    import json
    import shutil

    from moe_lab.claims import figures
    from moe_lab.storage.store import data_dir
    rid = "h200-glue-bf16-tp8-20261201"
    if not (data_dir() / rid / "results.parquet").is_file():
        pytest.skip(f"no committed run {rid}")
    mine = tmp_path / "runs" / rid
    shutil.copytree(data_dir() / rid, mine)
    man = json.loads((mine / "manifest.json").read_text())
    committed = man["environment"]["git_commit"][:7]
    man["environment"]["git_commit"] = "abcdef0123456789"
    (mine / "manifest.json").write_text(json.dumps(man))
    for given in (mine, mine.parent):
        imp = implications(reg, runs_dir=given)
        assert set(imp.loc[imp["measured_run"] == rid, "measured_commit"]) == {"abcdef0123456789"}
        text = figures.measured_provenance(imp) + figures.measured_provenance(imp, short=True)
        assert "abcdef0" in text and committed not in text and "unknown" not in text


def test_a_serving_config_without_a_tpot_claim_keeps_its_row_and_says_why(reg, tmp_path):
    """It was left out of the table (and notebook 04's figure) without a word. With a mean
    ITL claim the saving is ITL's; with neither, the floor stands alone and the note says so."""
    import copy
    import matplotlib.pyplot as plt
    from moe_lab.claims.figures import plot_implications
    edited = copy.deepcopy(reg)
    edited["claims"] = [c for c in edited["claims"] if not (
        c["config"] == "000-scout-bf16" and c["metric"] == "mean_tpot") and not (
        c["config"] == "000-maverick-bf16" and c["metric"] in ("mean_tpot", "mean_itl"))]
    want = implications(reg, runs_dir=tmp_path).set_index("config")
    got = implications(edited, runs_dir=tmp_path).set_index("config")
    assert list(got.index) == list(want.index)  # every serving configuration, in order
    s, m = got.loc["000-scout-bf16"], got.loc["000-maverick-bf16"]
    assert math.isnan(s["saved_per_layer_us"]) and s["saved_per_layer_itl_us"] > 0
    assert "no mean TPOT claim for this configuration: the saving is mean ITL's" in s["note"]
    assert "disagree" not in s["note"]
    assert math.isnan(m["saved_per_layer_us"]) and math.isnan(m["saved_per_layer_itl_us"])
    assert "no saving to convert" in m["note"] and m["floor_us"] == want.loc[
        "000-maverick-bf16", "floor_us"]
    fig = plot_implications(edited, got.reset_index())
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("ITL") >= 1 and "n/a" in texts
    plt.close(fig)
