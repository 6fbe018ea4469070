"""FP8 beside bf16 (moe_lab.plots.fp8) on two real CPU sweeps of a small shape, and the
plain message when no run has FP8 rows."""
import pandas as pd
import pytest

from moe_lab.storage.modes import Mode
from moe_lab.plots import fp8
from moe_lab.storage.store import find_runs, open_run
from moe_lab.measuring.sweep import Grid, Sweep

MODEL = "custom:H=256,I=256,E=4,k=2"


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for dtype, backends in (("bf16", ["torch", "torch-grouped"]),
                            ("fp8-channel", ["torch-fp8", "torch-fp8-dequant", "torch"])):
        grid = Grid(models=[MODEL], tokens=[1, 4], backends=backends, modes=[Mode("eager")],
                    tps=[1], dtype=dtype)
        Sweep(grid, "cpu", root / dtype, seed=1, profile=False, warmup_ms=1, rep_ms=5,
              progress=False).run()
    return root


def test_fp8_rows_carry_format_and_quantisation_error(runs_dir):
    res = open_run(runs_dir / "fp8-channel").results
    ok = res[res["status"] == "ok"]
    assert set(ok["backend"]) == {"torch-fp8", "torch-fp8-dequant"}
    assert (ok["fp8_format"] == "e4m3fn").all() and (ok["quant_err"] > 0).all()
    assert (res["backend"] == "torch").sum() == 2  # torch at both token counts
    assert (res.loc[res["backend"] == "torch", "status"] == "unsupported").all()
    bf = open_run(runs_dir / "bf16").results
    assert len(bf) == 2 * 2  # two backends x two token counts: all() of no row passes
    assert (bf["fp8_format"] == "").all() and bf["quant_err"].isna().all()
    table = fp8.dtype_table(open_run(runs_dir / "fp8-channel"))
    assert set(table["dtype"]) == {"fp8-channel"} and table["ok"].sum() == 4


def test_fp8_against_bf16_from_two_runs(runs_dir):
    runs = find_runs(runs_dir)
    rows, run = fp8.comparison_rows(runs=runs)
    assert run.run_id == "fp8-channel"
    assert set(rows["run_id"]) == {"fp8-channel", "bf16"}
    cmp = fp8.fp8_vs_bf16(rows)
    assert len(cmp) == 2 and set(cmp["tokens"]) == {1, 4}
    for r in cmp.itertuples():
        f8 = rows[(rows["dtype"] == "fp8-channel") & (rows["tokens"] == r.tokens)]
        bf = rows[(rows["dtype"] == "bf16") & (rows["tokens"] == r.tokens)]
        assert r.fp8_us == f8["median_us"].min() and r.bf16_us == bf["median_us"].min()
        assert r.speedup == pytest.approx(r.bf16_us / r.fp8_us)
    t = fp8.targets(cmp, mode="eager")
    # 1 and 4 tokens: below every FP8-over-bf16 range, and a CPU run has no roof
    assert t.empty and list(t.columns)[:5] == ["target", "reading", "points", "met", "missed"]
    fig = fp8.fig_fp8_vs_bf16(cmp, run, rows)
    assert "fp8-channel" in fig.texts[-1].get_text()  # the footer names the dtype
    assert any(line.get_label().startswith("fp8-channel eager") for ax in fig.axes
               for line in ax.get_lines())
    # the dotted line and its note are the prefill target's record, not a typed copy
    from moe_lab.analysis.targets import by_name
    lim = by_name("fp8 >= 1.5x bf16, 4096+ tokens").limit
    assert f"dotted: the {lim:g}x target" in " ".join(t.get_text() for t in fig.texts)
    assert any(line.get_linestyle() == ":" and list(line.get_ydata()) == [lim, lim]
               for ax in fig.axes for line in ax.get_lines())


def test_no_fp8_rows_says_so(tmp_path, runs_dir):
    runs = [r for r in find_runs(runs_dir) if r.run_id == "bf16"]
    rows, run = fp8.comparison_rows(runs=runs)
    assert run is None and not len(rows)
    cmp = fp8.fp8_vs_bf16(rows)
    fig = fp8.fig_fp8_vs_bf16(cmp, run, rows)
    assert any("No FP8 rows" in t.get_text() for ax in fig.axes for t in ax.texts)
    assert fp8.targets(cmp)["points"].sum() == 0


def test_a_panel_without_fp8_points_says_so_instead_of_drawing_nothing(runs_dir):
    """Two models at two shardings, each measured at one: the FP8 figure's panels without
    a point hold a note, not empty axes."""
    runs = find_runs(runs_dir)
    rows, run = fp8.comparison_rows(runs=runs)
    cmp = fp8.fp8_vs_bf16(rows)
    # another model at another sharding: the grid's other two panels have no point
    both = pd.concat([cmp, cmp.iloc[:1].assign(model="other-model", tp=8, ep=8)])
    fig = fp8.fig_fp8_vs_bf16(both, run, rows)
    notes = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert sum("no FP8 point" in n for n in notes) == 2, notes
    drawn = [ax for ax in fig.axes if ax.get_lines()]
    assert drawn  # the panel with data still draws its line
