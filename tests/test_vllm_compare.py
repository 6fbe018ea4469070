"""moe_lab.analysis.vllm_compare (the workbook's best own layer over vLLM as shipped, issue 41) and
its figure, on frames built here: which rows may be the best, the ratio, the band, the
geometric mean per shape and the ledger's answer for a slower point."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from moe_lab.analysis import vllm_compare as vc
from moe_lab.plots.vllm_compare import fig_best_over_vllm

PT = dict(model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype="bf16", routing="uniform")


def _row(run, tokens, backend, config, us, mode="graph", status="ok", glue="fused", **pt):
    p = dict(PT, **pt)
    pid = f"{run}/{p['model']}/{p['ep']}/{p['dtype']}/{tokens}/{backend}/{config}/{mode}/{glue}"
    return dict(p, run_id=run, tokens=tokens, backend=backend, config=config, mode=mode,
                status=status, glue=glue, median_us=us, point_id=pid,
                config_file="E=256,N=256,device_name=NVIDIA_H200.json" if backend == "vllm" else None,
                device="NVIDIA H200", git_commit="abc1234",
                measured_at=f"2026-12-0{2 if run == 'b' else 1}T10:00:00+00:00")


def _results():
    rows = []
    # run a, 1 token: ours 8 (aiter-triton tuned) vs vllm 10 -> 0.8
    rows += [_row("a", 1, "vllm", "default", 10.0), _row("a", 1, "aiter-triton", "tuned", 8.0),
             _row("a", 1, "aiter-triton", "default", 9.0), _row("a", 1, "torch-grouped", "default", 30.0),
             # never the best: another glue, incorrect, eager, a backend not ours
             _row("a", 1, "aiter-triton", "default", 1.0, glue="naive"),
             _row("a", 1, "torch-grouped", "default", 1.0, status="incorrect"),
             _row("a", 1, "torch-grouped", "default", 1.0, mode="eager"),
             _row("a", 1, "torch", "default", 1.0)]
    # run a, 64 tokens: vllm tuned is ours: 9 vs 10 -> 0.9
    rows += [_row("a", 64, "vllm", "default", 10.0), _row("a", 64, "vllm", "tuned", 9.0),
             _row("a", 64, "aiter-triton", "default", 11.0)]
    # run a, 4096 tokens: ours 110 vs 100 -> 1.1, slower
    rows += [_row("a", 4096, "vllm", "default", 100.0),
             _row("a", 4096, "torch-grouped", "default", 110.0),
             _row("a", 4096, "aiter-triton", "default", 120.0)]
    # run a, 8192: no vLLM row -> not compared; run b: the same point, its own vllm
    rows += [_row("a", 8192, "aiter-triton", "default", 10.0)]
    rows += [_row("b", 1, "vllm", "default", 5.0), _row("b", 1, "aiter-triton", "tuned", 5.1)]
    # run a, fp8-block128 TP8: 1.02 (inside the band) and 0.9
    rows += [_row("a", 1, "vllm", "default", 100.0, dtype="fp8-block128"),
             _row("a", 1, "torch-fp8", "default", 102.0, dtype="fp8-block128"),
             _row("a", 16, "vllm", "default", 100.0, dtype="fp8-block128"),
             _row("a", 16, "aiter-triton", "tuned", 90.0, dtype="fp8-block128")]
    return pd.DataFrame(rows)


def _ledger(res):
    """Phases of run a's 4096-token points: ours loses 12 us in gemm2, gains 2 in act."""
    def ph(pid, **us):
        return [dict(run_id="a", point_id=pid, phase=k, measured_us=v) for k, v in us.items()]
    pid = {b: res[(res.run_id == "a") & (res.tokens == 4096) & (res.backend == b)
                  & (res["mode"] == "graph")]["point_id"].iloc[0] for b in ("vllm", "torch-grouped")}
    return pd.DataFrame(ph(pid["vllm"], gemm1=50, gemm2=30, act=12, align=8)
                        + ph(pid["torch-grouped"], gemm1=50, gemm2=42, act=10, align=8))


def test_the_best_own_layer_over_vllm_as_shipped():
    res = _results()
    t = vc.best_over_vllm(res, _ledger(res))
    bf = t[(t.dtype == "bf16") & (t.run_id == "a")].set_index("tokens")
    assert list(bf.index) == [1, 64, 4096]  # 8192: no vLLM row
    assert bf.at[1, "best"] == "aiter-triton tuned" and bf.at[1, "ratio"] == pytest.approx(0.8)
    assert bf.at[64, "best"] == "vllm tuned" and bf.at[64, "ratio"] == pytest.approx(0.9)
    assert bf.at[4096, "best"] == "torch-grouped default"
    assert bf.at[4096, "ratio"] == pytest.approx(1.1) and bf.at[4096, "slower"]
    assert not bf.at[1, "slower"] and not bf.at[64, "slower"]
    assert bf.at[1, "vllm_config_file"].startswith("E=256")
    # the ledger's answer for the slower point: gemm2, by 12 us; none for the others
    assert bf.at[4096, "loses_in"] == "gemm2" and bf.at[4096, "loses_us"] == pytest.approx(12)
    assert bf.at[1, "loses_in"] == "" and math.isnan(bf.at[1, "loses_us"])
    # run b's point against run b's vLLM, never run a's
    b = t[t.run_id == "b"].iloc[0]
    assert b["ratio"] == pytest.approx(5.1 / 5.0) and not b["slower"]  # inside the band
    fp8 = t[t.dtype == "fp8-block128"].set_index("tokens")
    assert fp8.at[1, "ratio"] == pytest.approx(1.02) and not fp8.at[1, "slower"]
    assert fp8.at[16, "best"] == "aiter-triton tuned"


def test_without_a_ledger_or_phases_a_slower_point_says_nothing_of_phases():
    t = vc.best_over_vllm(_results())
    slow = t[t.slower]
    assert len(slow) == 1 and slow["loses_in"].iloc[0] == "" and slow["loses_us"].isna().all()


def test_per_shape_geomean_and_the_goal():
    t = vc.best_over_vllm(_results())
    s = vc.by_shape(t[t.run_id == "a"]).set_index("dtype")
    a = s.loc["bf16"]
    assert a["points"] == 3 and a["geomean_ratio"] == pytest.approx((0.8 * 0.9 * 1.1) ** (1 / 3))
    assert a["worst_ratio"] == pytest.approx(1.1) and a["worst_tokens"] == 4096
    assert a["slower"] == 1 and not a["met"]  # geomean 0.93, but one point out of the band
    f = s.loc["fp8-block128"]
    assert f["geomean_ratio"] == pytest.approx(np.sqrt(1.02 * 0.9)) and f["met"]
    b = vc.by_shape(t[t.run_id == "b"]).iloc[0]
    assert not b["met"] and b["slower"] == 0  # within the band, geomean 1.02 > 1.00


def test_a_point_measured_again_is_read_from_its_newest_run():
    """Run b measured the 1-token bf16 point again, later: the shape reads that point from b
    (5.1 against b's own vLLM, 5.0), the others from a, and names both runs, newest first."""
    t = vc.best_over_vllm(_results())
    now = vc.newest(t)
    one = now[(now.dtype == "bf16") & (now.tokens == 1)]
    assert list(one.run_id) == ["b"] and one["ratio"].iloc[0] == pytest.approx(5.1 / 5.0)
    assert len(now) == len(t) - 1
    s = vc.by_shape(t).set_index("dtype").loc["bf16"]
    assert s["points"] == 3 and s["run_id"] == "b, a"
    assert s["geomean_ratio"] == pytest.approx((1.02 * 0.9 * 1.1) ** (1 / 3))
    # order of the frame does not matter, only when each point's vLLM row was measured
    assert vc.by_shape(t.iloc[::-1]).equals(vc.by_shape(t))


def test_the_goal_is_two_targets_evaluated_on_the_newest_points():
    """Issue 41's goal as targets (analysis.targets, one definition: BAND is the per-point
    target's limit): a point over the band misses by its excess, the shape whose geomean
    is above 1.00 misses even with every point inside the band."""
    from moe_lab.analysis import targets as tg
    point = tg.by_name("own layer within 1.03x of vLLM as shipped")
    shape = tg.by_name("own layer's geomean at or below vLLM's, per shape")
    assert vc.BAND == point.limit
    m = vc.target_metrics(vc.best_over_vllm(_results()))
    ev = tg.evaluate(m, None, [point, shape])
    pts = ev[ev.target == point.name]
    assert len(pts) == len(vc.newest(vc.best_over_vllm(_results())))
    miss = pts[~pts.met]
    assert list(miss.tokens) == [4096] and miss["by"].iloc[0] == pytest.approx(1.1 - 1.03)
    assert miss["backend"].iloc[0] == "torch-grouped default"
    per = ev[ev.target == shape.name].set_index("dtype")
    assert per.at["bf16", "value"] == pytest.approx((1.02 * 0.9 * 1.1) ** (1 / 3))
    assert not per.at["bf16", "met"] and per.at["bf16", "by"] == pytest.approx(
        per.at["bf16", "value"] - 1.0)  # 1.003: above parity by 0.3%
    assert per.at["fp8-block128", "met"]  # sqrt(1.02 * 0.9) = 0.958
    assert vc.target_metrics(vc.best_over_vllm(_results()).iloc[0:0]).empty


def test_nothing_to_compare_is_an_empty_frame():
    res = _results()
    assert vc.best_over_vllm(res[res.backend != "vllm"]).empty
    assert list(vc.best_over_vllm(res[res.backend == "vllm"]).columns) == vc.COLUMNS
    assert vc.by_shape(vc.best_over_vllm(res[res.backend != "vllm"])).empty


def test_the_figure_has_a_panel_per_shape_and_names_its_runs():
    res = _results()
    t = vc.best_over_vllm(res)
    fig = fig_best_over_vllm(t, None, res)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 2  # bf16 (runs b and a), fp8-block128 (a)
    titles = " ".join(ax.get_title() for ax in shown)
    assert "geomean 1.00x (b, a)" in titles and "deepseek-r1 TP8 fp8-block128" in titles
    ys = sorted(float(y) for ax in shown for c in ax.collections for _, y in c.get_offsets())
    assert ys == pytest.approx(sorted(vc.newest(t)["ratio"]))  # each point's newest, at its ratio
    empty = fig_best_over_vllm(t.iloc[:0], None, res)
    assert "no point" in " ".join(x.get_text() for x in empty.texts + empty.axes[0].texts)


def test_vllm_runs_are_those_with_vllm_as_shipped(monkeypatch):
    """The one rule of analysis.runs: runs with ok vLLM-as-shipped rows, GPU runs before a
    newer CPU one, every such run on the chosen one's device, newest first."""
    class R:
        def __init__(self, name, res, device="NVIDIA H200", started=""):
            self.run_id, self.results, self.device = name, res, device
            self.manifest = {"started": started}
    res = _results()
    runs = [R("new-cpu", res, "cpu", "2026-12-05"), R("x", res[res.backend != "vllm"]),
            R("a", res, started="2026-12-04"),
            R("b", res[(res.backend == "vllm") & (res.status == "ok")], started="2026-12-03")]
    monkeypatch.setattr("moe_lab.analysis.runs.find_runs", lambda has=None, defaults=False: runs[1:])
    assert [r.run_id for r in vc.vllm_runs()] == ["a", "b"]
    monkeypatch.setattr("moe_lab.analysis.runs.find_runs", lambda has=None, defaults=False: runs)
    assert [r.run_id for r in vc.vllm_runs()] == ["a", "b"]  # GPU runs before a newer CPU run
    monkeypatch.setattr("moe_lab.analysis.runs.find_runs", lambda has=None, defaults=False: runs[:2])
    assert [r.run_id for r in vc.vllm_runs()] == ["new-cpu"]  # only a CPU run has them
    monkeypatch.setattr("moe_lab.analysis.runs.find_runs", lambda has=None, defaults=False: runs[1:2])
    assert vc.vllm_runs() == []


def test_frames_keep_each_runs_rows_and_phases(tmp_path):
    """Two measured runs of the same points (a CPU sweep twice): both kept, each with its
    run_id and its own ledger rows."""
    import moe_lab as ml
    for run in ("r1", "r2"):
        ml.measure("custom:H=64,I=32,E=8,k=2", tokens=[1, 4], backends="torch,torch-grouped",
                   tp=1, dtype="fp32", device="cpu", run=tmp_path / run, rep_ms=2, warmup_ms=1)
    runs = [ml.open_run(tmp_path / r) for r in ("r1", "r2")]
    res, led = vc.frames(runs, mode=None)
    assert sorted(set(res["run_id"])) == ["r1", "r2"] and len(res) == 8
    assert set(led["run_id"]) == {"r1", "r2"}
    for r in ("r1", "r2"):
        assert set(led[led.run_id == r]["point_id"]) == set(res[res.run_id == r]["point_id"])


def test_fp8_over_bf16_says_whether_the_verdict_needs_vllms_kernel():
    """FP8 against bf16 per point: the fastest of each dtype (every kernel), and with vLLM
    left out of both sides; the summary counts the points FP8 wins either way."""
    rows = [  # 16 tokens: bf16 best is ours (100); FP8: vllm 60, ours 120
        _row("a", 16, "aiter-triton", "tuned", 100.0), _row("a", 16, "vllm", "default", 105.0),
        _row("a", 16, "vllm", "default", 60.0, dtype="fp8-channel"),
        _row("a", 16, "torch-fp8-grouped", "default", 120.0, dtype="fp8-channel"),
        # 64 tokens: bf16 best is vllm (80; ours 90); FP8 ours 70, vllm 75
        _row("a", 64, "aiter-triton", "tuned", 90.0), _row("a", 64, "vllm", "default", 80.0),
        _row("a", 64, "vllm", "default", 75.0, dtype="fp8-channel"),
        _row("a", 64, "torch-fp8-grouped", "default", 70.0, dtype="fp8-channel"),
        # never counted: an incorrect FP8 row, a point with no bf16 row
        _row("a", 64, "torch-fp8", "default", 1.0, dtype="fp8-channel", status="incorrect"),
        _row("a", 256, "vllm", "default", 50.0, dtype="fp8-channel")]
    t = vc.fp8_over_bf16(pd.DataFrame(rows))
    assert list(t["tokens"]) == [16, 64]
    r16, r64 = t.iloc[0], t.iloc[1]
    assert r16["speedup"] == pytest.approx(100 / 60) and r16["fp8_best"] == "vllm default"
    assert r16["speedup_own"] == pytest.approx(100 / 120)
    assert r64["speedup"] == pytest.approx(80 / 70) and r64["bf16_best"] == "vllm default"
    assert r64["speedup_own"] == pytest.approx(90 / 70)
    s = vc.fp8_summary(t).iloc[0]
    assert (s["points"], s["fp8_faster"], s["fp8_faster_own"]) == (2, 2, 1)
    assert s["speedup"] == "1.14-1.67" and s["speedup_own"] == "0.83-1.29"
    assert vc.fp8_over_bf16(pd.DataFrame(rows[:2])).empty  # no FP8 row: nothing to say


def test_each_shape_names_the_own_layers_its_points_are_read_from():
    """The verdict of a shape rests on which own layer is the best at each point: by_shape
    names them, with how many points each, most first (run a's bf16 points: aiter-triton
    tuned at 1, vllm tuned at 64, torch-grouped at 4096; run b wins the 1-token point)."""
    t = vc.best_over_vllm(_results())
    s = vc.by_shape(t[t.run_id == "a"]).set_index("dtype")
    assert s.loc["bf16", "best"] == \
        "aiter-triton tuned (1), torch-grouped default (1), vllm tuned (1)"
    assert s.loc["fp8-block128", "best"] == "aiter-triton tuned (1), torch-fp8 default (1)"
    assert vc.by_shape(t).set_index("dtype").loc["bf16", "best"] == \
        "aiter-triton tuned (1), torch-grouped default (1), vllm tuned (1)"


def test_the_findings_name_every_own_layer_the_comparison_reads():
    """The findings' vLLM section says which layers are the workbook's own: every one of
    OWN, by the name the table's `best` gives it (it named four backends and left out
    vllm tuned, the best at every fp8-channel point of the committed runs)."""
    from moe_lab.findings import more as findings_more
    text = "\n".join(findings_more.vllm_section(None)).split("| model |")[0]
    for backend, config in vc.OWN:
        assert f"{backend} {config}" in text, (backend, config)
    # the H200's runs, where vllm tuned was measured (the newest device, the H100, has none)
    _, t = vc.compared(vc.vllm_runs(device="NVIDIA H200"))
    assert "vllm tuned" in set(vc.newest(t)["best"])  # what the sentence left out decides


def test_aiters_fused_silu_kernel_is_one_of_the_workbooks_own_layers():
    """aiter-triton-silu (aiter's Triton MoE with SiLU*mul fused into gemm1) is the
    workbook's own layer like aiter-triton: where it is the fastest, it is the best."""
    res = pd.DataFrame([_row("a", 256, "vllm", "default", 10.0),
                        _row("a", 256, "aiter-triton-silu", "tuned", 7.0),
                        _row("a", 256, "aiter-triton", "tuned", 8.0)])
    t = vc.best_over_vllm(res).set_index("tokens")
    assert t.at[256, "best"] == "aiter-triton-silu tuned"
    assert t.at[256, "ratio"] == pytest.approx(0.7)


def test_both_readings_of_the_goal_with_vllms_kernel_among_the_own_layers_and_without():
    """Issue 66: the targets read twice, one evaluation. At run a's 64 tokens vLLM's kernel
    on moe-lab's tuned file is the best own layer (9 against 10: within the band); with the
    workbook's own kernels alone the best is aiter-triton default (11: 1.1x, a miss)."""
    from moe_lab.analysis import targets as tg
    res = _results()
    tables = {tg.WITH_PEERS: vc.best_over_vllm(res), tg.OWN_KERNELS: vc.best_over_vllm(
        res, own=vc.OWN_ONLY)}
    ev = tg.evaluate(vc.readings_metrics(tables))
    pt = ev[(ev.target == vc.BAND_TARGET) & (ev.dtype == "bf16") & (ev.tokens == 64)] \
        .set_index("reading")
    assert pt.at[tg.WITH_PEERS, "met"] and pt.at[tg.WITH_PEERS, "backend"] == "vllm tuned"
    assert not pt.at[tg.OWN_KERNELS, "met"]
    assert pt.at[tg.OWN_KERNELS, "value"] == pytest.approx(11 / 10)
    s = vc.readings_targets(tables).set_index(["target", "reading"])
    w, o = s.loc[(vc.BAND_TARGET, tg.WITH_PEERS)], s.loc[(vc.BAND_TARGET, tg.OWN_KERNELS)]
    assert (w["points"], o["points"]) == (5, 5) and w["met"] == o["met"] + 1
    side = vc.by_shape_readings(tables).set_index("dtype")
    assert side.at["bf16", "slower_own_only"] == side.at["bf16", "slower"] + 1


def test_the_committed_h200_runs_read_both_ways():
    """On the committed H200 vLLM runs (known data): with vLLM's kernel on moe-lab's tuned
    files every point is within the band (64 of 64); the workbook's own kernels alone, 47 of
    64; each count is the table's (the newest measurement per point, ratio <= BAND)."""
    from moe_lab.analysis import targets as tg
    runs = vc.vllm_runs(device="NVIDIA H200")
    if not runs:
        pytest.skip("no committed H200 vLLM runs here")
    _, tables = vc.readings(runs)
    s = vc.readings_targets(tables).set_index(["target", "reading"])
    for reading, table in tables.items():
        now = vc.newest(table)
        row = s.loc[(vc.BAND_TARGET, reading)]
        assert (row["met"], row["points"]) == (int((now["ratio"] <= vc.BAND).sum()), len(now))
    met = {r: s.loc[(vc.BAND_TARGET, r), "met"] for r in tg.READINGS}
    assert (met[tg.WITH_PEERS], met[tg.OWN_KERNELS]) == (64, 47)
