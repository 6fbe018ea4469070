"""Devices side by side: the H200 rows moe-lab measured beside the AMD rows imported from
aiter's tuning table, each against its own device's roof, each labelled with its source."""
import re

import pandas as pd
import pytest

from conftest import RUNS_DIR, printed, run_notebook, with_params
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
