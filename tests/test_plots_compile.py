"""moe_lab.plots.compile: one legend per figure, coverage planned from the manifest and the
backend classes, `wrapped` read from its column."""
import pandas as pd
import pytest

import moe_lab as ml
from moe_lab.plots import compile as pc
from moe_lab.storage.store import Run


@pytest.fixture(scope="module")
def compile_runs():
    return ml.find_runs(has="compile")


def legends(fig) -> int:
    return len(fig.legends) + sum(ax.get_legend() is not None for ax in fig.axes)


@pytest.mark.parametrize("draw", [pc.fig_time_vs_tokens, pc.fig_gap, pc.fig_payback],
                         ids=lambda f: f.__name__)
def test_each_compile_figure_has_exactly_one_legend(compile_runs, draw):
    fig = draw(compile_runs[0])
    assert legends(fig) == 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) == len(set(labels))


def test_the_time_figure_has_one_legend_for_all_its_panels(compile_runs):
    run = compile_runs[0]
    fig = pc.fig_time_vs_tokens(run)
    assert len(fig.axes) == run.results["backend"].nunique() >= 3
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"off", "default", "reduce-overhead", "graph (experts only)",
            "dotted: the same mode through the custom op [op]"} <= labels
    assert not any(lab.endswith(" [op]") and not lab.startswith("dotted") for lab in labels)
    assert len(labels) <= 12  # a colour per mode, one entry for every custom-op line
    assert f"run {run.run_id}" in fig.texts[-1].get_text().replace("\n", " ")


def test_committed_coverage_is_984_of_984(compile_runs):
    """The findings' count over the four committed compile runs (926 on 2026-11-29, 16
    max-autotune points of the torch reference on 2026-12-01, 32 of torch-grouped and
    aiter-triton on the morning of 2026-12-02, Maverick's last 12 that afternoon)."""
    got = [pc.coverage(r)[0] for r in compile_runs]
    have = sum(int(s.split(" of ")[0]) for s in got)
    planned = sum(int(s.split(" of ")[1].split()[0]) for s in got)
    assert (len(compile_runs), have, planned) == (4, 984, 984)


def _run(tmp_path, results: pd.DataFrame) -> Run:
    manifest = {"status": "complete", "config": dict(
        models=["m"], tp=[1], ep=[1], routing=["uniform"], tokens=[1, 2],
        backends=["torch", "torch-grouped", "not-registered"], modes=["eager", "compile:default"])}
    return Run(tmp_path, manifest, results, pd.DataFrame())


def test_a_backend_declaring_compile_both_ways_is_planned_twice(tmp_path):
    # torch declares compile_both_ways, torch-grouped does not, an unknown backend is
    # measured one way: (1 + 2) + (1 + 1) + (1 + 1) modes x 2 token counts
    summary, missing = pc.coverage(_run(tmp_path, pd.DataFrame(columns=[
        "model", "tp", "ep", "routing", "backend", "mode", "wrapped", "tokens", "status"])))
    assert summary.startswith("0 of 14 planned points have a row")
    wraps = missing[(missing["backend"] == "torch") & (missing["mode"] == "compile:default")]
    assert sorted(wraps["wrapped"]) == [False, True]


def test_the_wrapped_pass_is_read_from_the_wrapped_column(tmp_path):
    rows = [dict(model="m", tp=1, ep=1, routing="uniform", backend="torch", mode="compile:default",
                 wrapped=w, tokens=t, status="ok") for w in (False, True) for t in (1, 2)]
    summary, missing = pc.coverage(_run(tmp_path, pd.DataFrame(rows)))
    assert summary.startswith("4 of 14")
    assert len(missing) == (14 - 4) // 2  # a row per backend x mode x wrap missing both tokens
    assert not ((missing["backend"] == "torch") & (missing["mode"] == "compile:default")).any()
