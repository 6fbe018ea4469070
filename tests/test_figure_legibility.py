"""What an engineer pasting a figure into a review sees, drawn from the committed runs: no
text over the data or over another panel's text, no panel squashed by its own labels, no
two bars labelled alike, no title counting what the figure does not draw (a visual audit
of the notebooks' figures found each of these)."""
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from moe_lab import analysis as an
from moe_lab.storage.store import open_run


def _drawn(fig):
    FigureCanvasAgg(fig).draw()
    return fig.canvas.get_renderer()


def _box(artist, renderer):
    return artist.get_window_extent(renderer)


def _notes(ax):
    """The panel notes (style.panel_note and the texts panels carried before it)."""
    return [t for t in ax.texts if "ends early" in t.get_text() or "no % of roof" in t.get_text()]


def test_phase_bars_of_one_token_count_are_told_apart_by_their_configuration():
    from moe_lab.plots import kernel_time as kt
    run = open_run("h200-grid-aiter-triton-silu-qwen3-235b-a22b-tp8ep8-bf16")
    table = an.kernel_time.phase_table(run, tokens=[1, 64, 1024, 8192])
    assert {"default", "tuned"} <= set(table["config"])
    ax = kt.fig_phases(run, table).axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) == 8 and len(set(labels)) == 8, labels
    assert any(lab.endswith("\ntuned") for lab in labels)


@pytest.mark.parametrize("which", ["fig_time_vs_tokens", "fig_gap"])
def test_a_compile_panels_note_stays_under_its_own_panel(which):
    from moe_lab.plots import compile as pc
    fig = getattr(pc, which)(open_run("h200-compile-qwen3-235b-a22b-20261129"))
    r = _drawn(fig)
    noted = [ax for ax in fig.axes if _notes(ax)]
    assert noted
    for ax in noted:
        a = _box(ax, r)
        for t in _notes(ax):
            b = _box(t, r)
            assert b.x1 <= a.x1 + 2 and b.x0 >= a.x0 - 2, t.get_text()  # not into the next
            assert b.y1 <= a.y0, t.get_text()  # not over the data
    # the columns keep one width (a note in the layout had widened its column threefold)
    widths = [_box(ax, r).width for ax in fig.axes]
    assert max(widths) < 1.1 * min(widths)


def test_the_devices_no_roof_note_is_not_over_the_data():
    from moe_lab.plots import devices as dv
    h200 = open_run(an.runs.richest_run())
    fig = dv.fig_side_by_side(an.devices.rows_for([h200] + an.runs.imported_runs()), [h200])
    r = _drawn(fig)
    noted = [ax for ax in fig.axes if _notes(ax)]
    assert noted
    for ax in noted:
        a, b = _box(ax, r), _box(_notes(ax)[0], r)
        assert b.y1 <= a.y0 and b.x1 <= a.x1 + 2


def test_the_fp8_gemm_figure_wraps_its_panels_to_a_review_width():
    """The H200's runs (pinned: they hold five panels' worth of FP8 points with bf16 beside
    them; the newest device's, the H100's, fewer) drawn at a width a review page takes."""
    from moe_lab.plots import fp8_gemm
    h200 = an.runs.runs_with_phases(device="NVIDIA H200", question="fp8_ledger")
    sol = an.fp8_gemm.gemm_table([str(r.path) for r in h200])
    assert set(sol["device"]) == {"NVIDIA H200"}
    fig = fp8_gemm.fig_gemm_sol(sol, *an.fp8_gemm.sources(sol))
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 5
    assert fig.get_figwidth() <= 15  # five panels in one row were 21 inches


def test_the_implications_legend_hides_no_bar_and_the_footer_stays_on_the_figure():
    from moe_lab import claims
    from moe_lab.claims import figures
    reg = claims.load_registry()
    fig = figures.plot_implications(reg, claims.implications(reg, runs_dir=None, gpu=None))
    r = _drawn(fig)
    ax = fig.axes[0]
    leg = _box(ax.get_legend(), r)
    for bar in ax.patches:
        assert not leg.overlaps(_box(bar, r))
    page = fig.bbox
    for t in fig.texts:
        b = _box(t, r)
        assert b.x1 <= page.x1 and b.x0 >= page.x0, t.get_text()[:60]
        assert t.get_text().count("\n") < 3  # a footer of at most three lines
    assert "h200-grid-aiter-triton-silu-llama4-scout-16e-tp8-bf16" in fig._moe_lab_provenance


@pytest.fixture(scope="module")
def best():
    lruns, _ = an.runs.ledger_choice(None, question="fp8_ledger")  # the FP8 panels' device
    lres, led = an.ledger.of_runs(lruns)
    return led[led["point_id"].isin(an.ledger.best_points(lres)["point_id"])]


def test_the_fp8_ledger_panels_are_not_squashed_by_their_upright_labels(best):
    from moe_lab.plots.ledger import fig_ledger
    fig = fig_ledger(best[(best["tokens"] >= 256) & (best["dtype"] != "bf16")], extra="fp8")
    r = _drawn(fig)
    dpi = fig.dpi
    for ax in fig.axes[:-1]:  # the panels (the last: the recoverable us)
        assert _box(ax, r).height / dpi >= 1.8, ax.get_title()  # inches of bars
    rec = fig.axes[-1]
    top = _box(rec, r).y1
    # a number over each token count's bar: all() of no text passes
    assert len(rec.texts) >= best.loc[(best["tokens"] >= 256) & (best["dtype"] != "bf16"),
                                      "tokens"].nunique() > 0
    assert all(_box(t, r).y1 <= top for t in rec.texts)  # the numbers not on the frame


def test_the_search_spread_titles_do_not_run_into_each_other():
    from moe_lab.plots import tuning as tu
    spread = an.tuned.search_spread()
    sp = spread[spread["backend"] == "aiter-triton-silu"]
    fig = tu.fig_search_spread(an.tuned.tune_run(sp["run_id"].iloc[-1]), sp)
    r = _drawn(fig)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert len(panels) == sp["model"].nunique() > 1  # a panel per model searched
    for ax in panels:  # each title over its own panel (wider, they read as one line)
        t, a = _box(ax.title, r), _box(ax, r)
        assert t.x0 >= a.x0 - 2 and t.x1 <= a.x1 + 2, ax.get_title()


def test_the_collective_share_title_counts_the_points_it_draws():
    import re
    from moe_lab.plots import expert_parallel as ep
    fig = ep.fig_collective_share(open_run("cpu-gloo-x2-expert-parallel-20261130"))
    ax = fig.axes[0]
    drawn = sum(int((line.get_ydata() > 100).sum()) for line in ax.get_lines()
                if line.get_label() and not line.get_label().startswith("_"))
    said = int(re.search(r"(\d+) point\(s\) above 100%", ax.get_title()).group(1))
    assert said == drawn > 0
    assert "median over 2 models" in fig.texts[-1].get_text()


@pytest.mark.parametrize("run_id, says, never", [
    ("h200-vllm-bf16-tp8", ["solid graph"], ["dashed", "eager"]),
    ("h200-seed4-20261129", ["dashed eager", "solid graph"], []),
])
def test_the_time_figures_footer_names_only_the_line_styles_it_draws(run_id, says, never):
    from moe_lab.plots import kernel_time as kt
    run = open_run(run_id)
    fig = kt.fig_time_vs_tokens(run)
    footer = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    for s in says:
        assert s in footer, footer
    for s in never:
        assert s not in footer.split("; ", 2)[1], footer  # the styles' clause


# --- the figure check (moe_lab.plots.probe), on fixture figures with each defect --------

def _check(fig) -> list[str]:
    from moe_lab.plots.probe import describe_figure, legend_clashes, series_problems
    FigureCanvasAgg(fig).draw()  # the legend's handles laid out as the page shows them
    d = describe_figure(fig)
    return [f"alike: {c}" for c in legend_clashes(d)] + series_problems(d)


def _rows(**cols):
    import pandas as pd
    return pd.DataFrame({"tokens": [1, 8, 1, 8], "median_us": [2.0, 3.0, 4.0, 5.0], **cols})


def test_the_check_passes_a_figure_drawn_one_configuration_per_series():
    from moe_lab.plots import style
    fig, ax = style.new_figure()
    rows = _rows(config=["default", "default", "tuned", "tuned"], mode="graph", glue="")
    for i, (cfg, g) in enumerate(rows.groupby("config")):
        style.series(ax.plot(g["tokens"], g["median_us"], "-", marker="o", color=f"C{i}",
                             label=cfg), g)
    ax.bar([1, 2], [3, 4])  # bars on a linear axis
    ax.fill_between([1, 2], [1, 1], [2, 2], color="C0", alpha=0.2)
    ax.fill_between([4, 8], [1, 1], [2, 2], color="C1", alpha=0.2)  # apart: no blend
    ax.plot([1, 8], [1, 1], "--", color="k", label="dashed, no marker")
    ax.plot([1, 8], [2, 2], "-", color="k", label="solid, no marker")
    style.shared_legend(fig)
    assert _check(fig) == []


def test_the_check_fails_a_series_that_blends_two_configurations():
    from moe_lab.plots import style
    fig, ax = style.new_figure()
    rows = _rows(config=["default", "default", "tuned", "tuned"], mode="graph")
    g = rows.groupby("tokens", as_index=False)["median_us"].mean()  # a mean of the two
    style.series(ax.plot(g["tokens"], g["median_us"], label="torch"),
                 rows.assign(config=rows["config"]))
    found = _check(fig)
    assert any("one series of several config" in p for p in found), found
    ax.set_title("the best configuration per point")  # an aggregate its title names
    assert _check(fig) == []


def test_the_check_fails_bars_on_a_log_axis_either_way():
    from moe_lab.plots import style
    fig, (a, b) = style.new_figure(1, 2)
    a.bar([1, 2], [0.5, 40])
    a.set_yscale("log")
    b.barh([1, 2], [0.5, 40])
    b.set_xscale("log")
    found = _check(fig)
    assert sum("bars on a log axis" in p for p in found) == 2, found


def test_the_check_fails_legend_entries_a_reader_cannot_tell_apart():
    from moe_lab.plots import style
    # a marker over a short handle (matplotlib's default length, at the project's legend
    # font) hides its dashes: solid and dashed read alike
    fig, ax = style.new_figure()
    ax.plot([1, 2], [1, 2], "-", marker="o", color="C0", label="tp-allreduce (uniform)")
    ax.plot([1, 2], [2, 3], "--", marker="o", color="C0", label="tp-allreduce (skewed)")
    fig.legend(fontsize=7)
    assert any("alike" in p for p in _check(fig)), _check(fig)
    # the project's legend (style.shared_legend) draws handles long enough to show a gap
    fig.legends.clear()
    style.shared_legend(fig)
    assert _check(fig) == [], _check(fig)
    # marker-only handles: the line style the series has is not in the legend at all
    fig, ax = style.new_figure()
    ax.plot([1, 2], [1, 2], ls="none", marker="s", color="C1", label="a")
    ax.plot([1, 2], [2, 3], ls="none", marker="s", color="C1", label="b")
    style.shared_legend(fig)
    assert any("alike" in p for p in _check(fig)), _check(fig)


def test_the_check_fails_overlapping_translucent_bands_of_two_colours():
    from moe_lab.plots import style
    fig, ax = style.new_figure()
    ax.fill_between([1, 2, 4], [1, 1, 1], [3, 3, 3], color="C0", alpha=0.15)
    ax.fill_between([2, 4, 8], [2, 2, 2], [4, 4, 4], color="C1", alpha=0.15)
    found = _check(fig)
    assert any("translucent bands overlap" in p for p in found), found
