"""moe_lab.cost.roofline.predicted_floors (moved from the plots): the same table as before, and
the slowest EP rank is the MAX over the ranks; its figure has one legend and a footer that
names no run or commit (predictions)."""
import pytest

from moe_lab.core.devices import DEVICE_SPECS
from moe_lab.core.problems import make_problem
from moe_lab.cost.roofline import cost, floor_us, predicted_floors
from moe_lab.core.routing import make_routing

COLUMNS = ["model", "sharding", "tp", "ep", "tokens", "device", "experts_hit", "flops", "bytes",
           "intensity", "floor_us", "bound", "tokens_per_s"]


def test_the_table_and_one_floor_counted_by_hand():
    t = predicted_floors(models=["llama4-scout-16e"], tokens=[1, 64])
    assert list(t.columns) == COLUMNS
    assert set(t["sharding"]) == {"TP8", "TP8+EP8"} and set(t["device"]) == {"mi300x", "h200-sxm"}
    # scout TP8, 1 token on the H200 spec: 1 expert of 3*5120*1024 bf16 weights + x and out
    row = t[(t.sharding == "TP8") & (t.tokens == 1) & (t.device == "h200-sxm")].iloc[0]
    assert row["bytes"] == 3 * 5120 * 1024 * 2 + 2 * 5120 * 2
    assert row["floor_us"] == pytest.approx(row["bytes"] / 4.8e12 * 1e6)
    assert row["bound"] == "memory"


@pytest.mark.parametrize("model,tokens", [("deepseek-r1", 1), ("deepseek-r1", 16),
                                          ("llama4-maverick-128e", 4)])
def test_the_slowest_ep_rank_is_the_max_over_ranks(model, tokens):
    spec = DEVICE_SPECS["h200-sxm"]
    t = predicted_floors(models=[model], shardings=((8, 8),), tokens=[tokens],
                         devices=("h200-sxm",), straggler_seeds=1)
    slowest = t[t["sharding"] == "TP8+EP8 slowest rank"]["floor_us"].item()
    ranks = [make_problem(model, tokens, "bf16", 8, 8, r) for r in range(8)]
    _, ids, _ = make_routing(ranks[0].model, tokens, "uniform", 0)
    floors = [floor_us(cost(p, ids), spec) for p in ranks]
    assert max(floors) > min(floors)  # the ranks differ, so max and min tell apart
    assert slowest == pytest.approx(max(floors))


def test_the_slowest_rank_averages_the_per_draw_maxima():
    spec = DEVICE_SPECS["h200-sxm"]
    t = predicted_floors(models=["deepseek-r1"], shardings=((8, 8),), tokens=[8],
                         devices=("h200-sxm",), straggler_seeds=3)
    got = t[t["sharding"] == "TP8+EP8 slowest rank"].iloc[0]
    ranks = [make_problem("deepseek-r1", 8, "bf16", 8, 8, r) for r in range(8)]
    worst = []
    for seed in range(3):
        _, ids, _ = make_routing(ranks[0].model, 8, "uniform", seed)
        worst.append(max((cost(p, ids) for p in ranks), key=lambda c: floor_us(c, spec)))
    assert got["bytes"] == pytest.approx(sum(c.bytes for c in worst) / 3)
    assert got["flops"] == pytest.approx(sum(c.flops for c in worst) / 3)


def test_predicted_floor_figure_has_one_legend_and_names_no_run():
    from moe_lab.plots import roofline as pr
    fig = pr.fig_predicted_floors(predicted_floors(models=["qwen3-235b-a22b"], tokens=[1, 64],
                                                   straggler_seeds=1))
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    text = fig.texts[-1].get_text().replace("\n", " ")
    assert "no run (predicted)" in text and "commit" not in text


def test_measured_figures_name_the_commit_of_their_rows():
    import moe_lab as ml
    from moe_lab.plots import roofline as pr
    run = ml.open_run("h200-seed4-20261129")
    df, ceil = pr.measured(run)
    assert ceil.source == "measured"
    for fig in (pr.fig_roofline(run, df, ceil), pr.fig_floor_vs_tokens(run, df, ceil)):
        text = fig.texts[-1].get_text().replace("\n", " ")
        assert "run h200-seed4-20261129" in text and "commit 406a341" in text
        assert "NVIDIA H200 [measured]" in text
        assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)


def _drawn_values(fig):
    """Every y value a figure draws as a measured series (lines with markers, scatters)."""
    import numpy as np
    out = []
    for ax in fig.axes:
        for ln in ax.get_lines():
            if ln.get_marker() not in (None, "None", ""):
                out += list(np.asarray(ln.get_ydata(), float))
        for col in ax.collections:
            off = col.get_offsets()
            if len(off):
                out += list(np.asarray(off)[:, 1])
    return out


def test_a_series_is_one_configuration_never_a_blend():
    """Issue 66: with one backend measured at two configurations (tuned at half the default's
    time) and two modes, every value the roofline figures draw is a measured row's value
    (us for the floor-vs-tokens lines, TFLOP/s for the roofline), never a median across
    configurations or modes (was: ~76 us drawn where 102.1 and 49.8 were measured)."""
    import numpy as np
    import pandas as pd
    import moe_lab as ml
    from moe_lab.plots import roofline as pr
    run = ml.open_run("h200-seed4-20261129")
    df, ceil = pr.measured(run)
    ok = df[df["status"] == "ok"]
    tuned = ok.assign(config="tuned", median_us=ok["median_us"] / 2,
                      point_id=ok["point_id"].astype(str) + "-t")
    both = pd.concat([ok.assign(config="default"), tuned], ignore_index=True)
    fig = pr.fig_floor_vs_tokens(run, both, ceil)
    graph = both[both["mode"] == "graph"]
    assert "graph" in fig.axes[0].get_ylabel()
    measured_us = set(np.round(graph["median_us"].astype(float), 6))
    drawn = _drawn_values(fig)
    assert drawn and all(round(v, 6) in measured_us for v in drawn)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(" tuned " in f" {x} " for x in labels)  # the tuned series is its own entry
    fig = pr.fig_roofline(run, both, ceil)
    tflops = set(np.round((both["flops"] / both["median_us"] / 1e6).astype(float), 6))
    drawn = _drawn_values(fig)
    assert drawn and all(round(v, 6) in tflops for v in drawn)
