"""Devices side by side: the H200 rows moe-lab measured beside the AMD rows imported from
aiter's tuning table, each against its own device's roof, each labelled with its source."""
import re

import pandas as pd
import pytest

from conftest import RUNS_DIR, pngs, printed, run_notebook, with_params
from moe_lab.core.devices import DEVICE_SPECS
from moe_lab.plots import devices as dv
from moe_lab.core.problems import make_problem
from moe_lab.cost.roofline import cost, floor_us
from moe_lab.storage.store import open_run

H200, AMD = "h200-tuned-20261130", "aiter-tuned-fmoe-0-1-7-post2-dev18"
MODELS = ("deepseek-r1", "qwen3-235b-a22b")


@pytest.fixture(scope="module")
def side():
    return dv.rows_for([H200, AMD])


def test_the_rows_are_the_shapes_asked_for_from_both_sources(side):
    amd = pd.read_parquet(f"{RUNS_DIR}/{AMD}/results.parquet")
    want_amd = amd[(amd["status"] == "ok") & amd["model"].isin(MODELS) & (amd["tp"] == 8)
                   & (amd["ep"] == 1) & (amd["dtype"] == "bf16")
                   & (amd["act_type"] == "ActivationType.Silu") & (amd["doweight_stage1"] == 0)]
    h200 = pd.read_parquet(f"{RUNS_DIR}/{H200}/results.parquet")
    want_h200 = h200[(h200["status"] == "ok") & h200["model"].isin(MODELS) & (h200["tp"] == 8)
                     & (h200["ep"] == 1) & (h200["mode"] == "graph")
                     & h200["backend"].isin(["aiter-triton", "torch-grouped"])]
    imported = side["series"].str.contains("aiter's tuner, imported")
    assert imported.sum() == len(want_amd) > 0
    assert (~imported).sum() == len(want_h200) > 0
    assert side.loc[~imported, "series"].str.contains("measured by moe-lab").all()
    assert "side by side: " + str(len(want_h200)) in dv.summary(side)


def test_each_amd_row_is_against_its_own_gpus_roof(side):
    t = dv.floors_against_aiter(side)
    mi355 = t[t["device"].str.startswith("AMD Instinct MI355X")]
    assert (t["device"] == "AMD GPU with 80 CUs").any()  # the rows with no roof are there
    assert len(mi355) and t[t["device"] == "AMD GPU with 80 CUs"]["roof_us"].isna().all()
    r = mi355.iloc[0]
    p = make_problem(r["model"], int(r["tokens"]), "bf16", int(r["tp"]), int(r["ep"]))
    want = floor_us(cost(p, pairs=p.tokens * p.topk), DEVICE_SPECS["mi355x"])
    assert r["roof_us"] == pytest.approx(want, rel=1e-9)
    assert r["reported_over_floor"] == pytest.approx(r["median_us"] / want, rel=1e-9)


def test_the_figure_has_one_legend_and_names_both_sources(side):
    fig = dv.fig_side_by_side(side, [open_run(H200)])
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("imported" in s for s in labels) and any("moe-lab" in s for s in labels)
    foot = fig.texts[-1].get_text()
    assert "MI355X" in foot and "NVIDIA H200" in foot


def test_two_points_at_one_x_are_two_lines_or_refused(side):
    """A series with two points at one token count (two routings of one backend here) is
    drawn as a line per routing, each named; never one of the points quietly dropped. Two
    points that nothing tells apart are refused; one point listed twice is drawn once."""
    from moe_lab.core.errors import UsageError
    from moe_lab.plots.probe import describe_figure, series_problems
    one = side[side["model"] == side["model"].iloc[0]]
    h200 = one[~one["series"].str.contains("imported")]
    twice = pd.concat([one, h200.assign(routing="zipf:1.2", point_id=h200["point_id"].astype(str)
                                        + "-zipf")], ignore_index=True)
    fig = dv.fig_side_by_side(twice, [open_run(H200)])
    ax = fig.axes[0]
    drawn = sum(len(ln.get_xdata()) for ln in ax.lines)
    assert drawn == len(twice)  # every point drawn
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("[routing zipf:1.2]" in s for s in labels), labels
    assert not series_problems(describe_figure(fig))
    again = h200.assign(point_id=h200["point_id"].astype(str) + "-again")  # a second point
    with pytest.raises(UsageError, match="no configuration, glue, routing or run tells apart"):
        dv.fig_side_by_side(pd.concat([one, again], ignore_index=True), [open_run(H200)])
    # one measurement listed twice (report --run of the imported run: it is also the context)
    fig = dv.fig_side_by_side(pd.concat([one, h200], ignore_index=True), [open_run(H200)])
    assert sum(len(ln.get_xdata()) for ln in fig.axes[0].lines) == len(one)


def test_the_claims_shape_is_not_in_aiters_table():
    shapes = dv.claim_shapes(AMD)
    assert len(shapes) and set(shapes["ep"]) == {1}  # DeepSeek-R1 TP8 EP8: no AMD rows


def test_notebook_01_prints_the_side_by_side_counts(side):
    # remeasure=False: the committed runs on a GPU box too (and notebook 01's default
    # execution, shared with test_notebook_01 and test_notebooks_fp8)
    text = printed(run_notebook("01_kernel_time.ipynb", edit=with_params(remeasure=False)))
    m = re.search(r"^(\S+): side by side: (\d+) H200 rows measured by moe-lab, (\d+) AMD rows", text,
                  re.M)
    assert m and m[1] == dv.richest_run() != H200  # H200 has a part marked running: no default
    side = dv.rows_for([m[1], AMD])
    imported = side["series"].str.contains("imported")
    assert (int(m[2]), int(m[3])) == (int((~imported).sum()), int(imported.sum()))


def test_notebook_01_draws_one_devices_figure_per_seed_shape():
    import os
    from conftest import NOTEBOOKS, execute_cached
    run_notebook("01_kernel_time.ipynb", edit=with_params(remeasure=False))  # fails on errors
    nb = execute_cached(os.path.join(NOTEBOOKS, "01_kernel_time.ipynb"),
                        edit=with_params(remeasure=False))  # the same execution, cached
    (cell,) = [c for c in nb.cells if "dv.fig_devices(" in c.source]
    table = ad.side_by_side(ad.shape_rows())
    assert ad.coverage(table) in printed(cell.outputs).splitlines()
    # every seed shape has committed rows: one figure each, in SEED_DEVICE_SHAPES' order
    assert len(pngs(cell.outputs)) == len(ad.per_shape(table)) == len(ad.SEED_DEVICE_SHAPES)


# --- the seed shapes on every device (issue 63 item 4) ---------------------------------------

import json  # noqa: E402
import shutil  # noqa: E402

import numpy as np  # noqa: E402

from moe_lab.analysis import devices as ad  # noqa: E402
from moe_lab.core.devices import ceilings_for  # noqa: E402
from moe_lab.plots.style import backend_label  # noqa: E402
from moe_lab.storage.rows import deployed_rows  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
# the H200 run relabelled as an H100's: DeepSeek-R1 TP8+EP8 fp8-block128, default and tuned
# of aiter-triton and vllm; 1.3x slower, so that its points are its own
AS_H100 = "h200-vllm-vtuned2-fp8-block128-tp8ep8"
H100_SHAPE = ("deepseek-r1", 8, 8, "fp8-block128")


@pytest.fixture(scope="module")
def h100_run(tmp_path_factory):
    """A run folder as an H100 would write it: the H200 run above, its device renamed in the
    manifest and in every row, its times x1.3, started after every committed run."""
    d = tmp_path_factory.mktemp("h100") / "h100-vllm-fp8-block128-tp8ep8"
    shutil.copytree(f"{RUNS_DIR}/{AS_H100}", d)
    m = json.loads((d / "manifest.json").read_text())
    m["environment"]["device_name"], m["run_id"] = H100, d.name
    m["started"] = "2099-01-01T00:00:00+0000"
    (d / "manifest.json").write_text(json.dumps(m))
    r = pd.read_parquet(d / "results.parquet")
    r["device"] = H100
    for c in ("median_us", "p10_us", "p90_us"):
        r[c] = r[c] * 1.3
    r.to_parquet(d / "results.parquet")
    return open_run(d)


@pytest.fixture(scope="module")
def with_h100(h100_run):
    """(runs, shape_rows, side_by_side table) of the committed runs of every device but an
    H100 (none of its own committed: the relabelled one is the only H100), plus h100_run."""
    runs = [r for r in ad.device_runs() if H100 not in r.device] + [h100_run]
    rows = ad.shape_rows(runs)
    return runs, rows, ad.side_by_side(rows)


def _lines(fig, panel: int) -> dict:
    """label -> (x, y) of a panel's labelled lines."""
    return {ln.get_label(): (np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float))
            for ln in fig.axes[panel].get_lines() if not ln.get_label().startswith("_")}


def _shape_of(t) -> tuple:
    r = t.iloc[0]
    return (r["model"], int(r["tp"]), int(r["ep"]), r["dtype"])


def test_every_series_is_one_device_one_configuration_and_one_run(with_h100):
    runs, rows, table = with_h100
    series = ad.newest_series(rows)
    per = table.groupby(ad.SHAPE + ["device"])[["backend", "config", "run_id"]].nunique()
    assert (per == 1).all().all()
    for t in ad.per_shape(table):
        fig = dv.fig_devices(t, runs)
        sel = series[(series[ad.SHAPE].apply(tuple, axis=1)) == _shape_of(t)]
        for panel, col in ((0, "median_us"), (1, "pct_of_roof")):
            for label, (x, y) in _lines(fig, panel).items():
                hit = [sel[(sel["tokens"] == tx) & np.isclose(sel[col], ty, rtol=1e-12)]
                       for tx, ty in zip(x, y)]
                assert all(len(h) for h in hit), label
                drawn = set().union(*[set(zip(h["device"], h["backend"], h["config"], h["run_id"]))
                                      for h in hit])
                assert len(drawn) == 1, (label, drawn)  # never default and tuned in one line
                dev, backend, config, _ = drawn.pop()
                assert label.startswith(f"{ad.short_device(dev)}: {backend_label(backend)} ")
                assert (ad.IMPORTED if "imported" in label else ad.MEASURED) in label


def test_each_pct_of_roof_is_against_its_own_devices_ceilings(with_h100):
    runs, rows, table = with_h100
    series = ad.newest_series(rows)
    t = table[table[ad.SHAPE].apply(tuple, axis=1) == H100_SHAPE]
    assert set(t["device"]) == {H100, "NVIDIA H200"}  # the same shape on both
    for dev, g in t.groupby("device"):
        ceil = ceilings_for(dev)
        assert set(g["ceiling_source"]) == {ceil.source}
        for r in g.itertuples():
            s = series[(series["device"] == dev) & (series["run_id"] == r.run_id)
                       & (series["backend"] == r.backend) & (series["config"] == r.config)
                       & (series["tokens"] == r.tokens)].iloc[0]
            p = make_problem(r.model, int(r.tokens), r.dtype, int(r.tp), int(r.ep))
            want = floor_us(cost(p, experts_hit=s["experts_hit"], pairs=s["pairs"]), ceil, r.dtype)
            assert r.roof_us == pytest.approx(want, rel=1e-9)
            assert r.pct_of_roof == pytest.approx(100 * want / r.median_us, rel=1e-9)
    # the H100's roof is not the H200's: same cost, other ceilings
    h1, h2 = (t[t["device"] == d].set_index("tokens")["roof_us"] for d in (H100, "NVIDIA H200"))
    both = h1.index.intersection(h2.index)
    assert len(both) and not np.allclose(h1[both], h2[both])


def test_a_device_with_no_rows_has_no_series(with_h100):
    runs, rows, table = with_h100
    for t in ad.per_shape(table):
        shape = _shape_of(t)
        have = set(rows.loc[rows[ad.SHAPE].apply(tuple, axis=1) == shape, "device"])
        fig = dv.fig_devices(t, runs)
        labels = [x.get_text() for x in fig.legends[0].get_texts()]
        named = {d for d in have if any(lab.startswith(ad.short_device(d) + ":") for lab in labels)}
        assert named == have == set(t["device"]), shape
        # the relabelled H100 run holds one shape: no H100 series elsewhere
        assert any(lab.startswith("H100") for lab in labels) == (shape == H100_SHAPE)
    assert {_shape_of(t) for t in ad.per_shape(table)} <= set(ad.SEED_DEVICE_SHAPES)


def test_tuned_over_default_is_default_over_tuned_of_one_run_and_point(with_h100):
    runs, rows, table = with_h100
    by_id = {r.run_id: r for r in runs}
    t = table.dropna(subset=["tuned_over_default"])
    assert len(t) and {H100, "NVIDIA H200"} <= set(t["device"])
    for r in t.itertuples():
        res = deployed_rows(by_id[r.pair_run_id].results, "graph")
        at = res[(res["model"] == r.model) & (res["tp"] == r.tp) & (res["ep"] == r.ep)
                 & (res["dtype"] == r.dtype) & (res["device"] == r.device)
                 & (res["tokens"] == r.tokens) & (res["backend"] == r.tuned_backend)]
        (d,), (tu,) = (at.loc[at["config"] == c, "median_us"].tolist()
                       for c in ("default", "tuned"))
        assert (r.default_us, r.tuned_us) == (d, tu)
        assert r.tuned_over_default == pytest.approx(d / tu, rel=1e-12)
        if r.backend == r.tuned_backend and r.config == "tuned" and r.run_id == r.pair_run_id:
            assert r.median_us == tu  # the best series' own tuned point


def test_the_figure_and_its_footer_name_the_devices_and_runs(with_h100):
    runs, rows, table = with_h100
    (t,) = [t for t in ad.per_shape(table) if _shape_of(t) == H100_SHAPE]
    fig = dv.fig_devices(t, runs)
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    from moe_lab.plots.style import PROVENANCE
    foot = getattr(fig, PROVENANCE)
    assert H100 in foot and "NVIDIA H200" in foot
    assert all(r in foot for r in set(t["run_id"]) | set(t["pair_run_id"].dropna()))
    labels = [x.get_text() for x in fig.legends[0].get_texts()]
    assert sum("tuned over default" in lab for lab in labels) == 2  # one per device
    with pytest.raises(Exception, match="one shape"):
        dv.fig_devices(table, runs)


def test_the_committed_data_alone_draws_each_device_it_has():
    """Without the relabelled run: the devices are those of the committed runs (the H200,
    AMD's imported GPUs where aiter's table has the shape), never one named in the code."""
    rows = ad.shape_rows()
    table = ad.side_by_side(rows)
    measured = {r.device for r in ad.device_runs() if not ad._imported(r)}
    got = set(table.loc[table["source"] == ad.MEASURED, "device"])
    assert got and got <= measured
    amd = table[table["source"] == ad.IMPORTED]
    assert set(zip(amd["model"], amd["tp"], amd["ep"], amd["dtype"])) == {
        ("qwen3-235b-a22b", 8, 1, "bf16")}  # aiter's table: Qwen3 TP8 bf16 of the seed shapes
    assert "8 seed shapes" in ad.coverage(table)
