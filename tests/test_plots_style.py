"""moe_lab.plots.style: the footer names the commits of the rows a figure draws (never the
checkout's HEAD), and every backend gets a colour, registered or not."""
import pandas as pd
import pytest
from matplotlib.colors import is_color_like, to_rgba

import moe_lab as ml
from moe_lab import backends as registry
from moe_lab.core.environment import git_commit
from moe_lab.plots import kernel_time, style
from moe_lab.storage.store import Run

SMALL, LARGER = "custom:H=64,I=32,E=4,k=2", "custom:H=64,I=32,E=8,k=2"
COMMIT_A, COMMIT_B = "aaaaaaa1111111111111", "bbbbbbb2222222222222"


@pytest.fixture(scope="module")
def two_commit_run(tmp_path_factory):
    """One folder measured twice, by two commits: SMALL under A, LARGER under B."""
    path = tmp_path_factory.mktemp("runs") / "two-commits"
    with pytest.MonkeyPatch.context() as mp:
        for model, commit in ((SMALL, COMMIT_A), (LARGER, COMMIT_B)):
            mp.setenv("MOE_LAB_GIT_COMMIT", commit)
            ml.measure([model], [1, 4], backends=["torch", "torch-grouped"], tp=1, run=path)
    return ml.open_run(path)


def footer_of(fig) -> str:
    return fig.texts[-1].get_text().replace("\n", " ")


def test_the_rows_carry_their_commits(two_commit_run):
    rows = two_commit_run.results
    assert set(rows.groupby("model")["git_commit"].unique().map(tuple)) == \
        {(COMMIT_A,), (COMMIT_B,)}


def test_footer_names_both_commits_when_the_figure_draws_both(two_commit_run):
    text = footer_of(kernel_time.fig_time_vs_tokens(two_commit_run))
    assert "commits aaaaaaa, bbbbbbb" in text
    assert "run two-commits" in text and "device cpu" in text and "dtype bf16" in text
    assert SMALL in text and LARGER in text
    head = (git_commit() or "")[:7]
    assert head not in ("aaaaaaa", "bbbbbbb") and head not in text


def test_footer_names_only_the_commit_of_a_subset(two_commit_run):
    text = footer_of(kernel_time.fig_time_vs_tokens(two_commit_run, models=[SMALL]))
    assert "commit aaaaaaa" in text and "bbbbbbb" not in text and LARGER not in text
    rows = two_commit_run.results[two_commit_run.results["model"] == LARGER]
    assert style.footer_text(two_commit_run, rows).endswith("commit bbbbbbb")


def test_registered_backends_take_their_class_colour_and_label():
    names = registry.names()  # discovered from the package's modules: never empty
    assert {"torch", "torch-grouped", "aiter", "aiter-triton", "vllm"} <= set(names), names
    assert any(registry.backend_class(n).color for n in names)  # the colour branch is taken
    for name in names:
        cls = registry.backend_class(name)
        if cls.color:
            assert style.backend_color(name) == cls.color
        assert style.backend_label(name) == (cls.label or cls.name)


def test_a_backend_not_known_here_still_gets_a_colour_of_its_own(two_commit_run):
    declared = {to_rgba(registry.backend_class(n).color) for n in registry.names() if registry.backend_class(n).color}
    a, b = style.backend_color("made-elsewhere-1"), style.backend_color("made-elsewhere-2")
    assert is_color_like(a) and is_color_like(b) and a != b
    assert to_rgba(a) not in declared and to_rgba(b) not in declared
    assert style.backend_color("made-elsewhere-1") == a  # the same in every later figure
    assert style.backend_label("made-elsewhere-1") == "made-elsewhere-1"
    # and a run whose rows name it plots, in that colour
    res = two_commit_run.results
    res = res.assign(backend=res["backend"].replace("torch", "made-elsewhere-1"))
    run = Run(two_commit_run.path, two_commit_run.manifest, res, two_commit_run.kernels)
    fig = kernel_time.fig_time_vs_tokens(run)
    colours = {line.get_label(): line.get_color() for ax in fig.axes for line in ax.get_lines()}
    assert colours["made-elsewhere-1 eager"] == a


def test_mode_styles():
    assert style.mode_style("eager") == "--" and style.mode_style("graph") == "-"
    assert style.mode_style("compile:default") == "-"
    assert style.mode_style("compile:default", wrapped=True) == ":"
    assert style.mode_style(pd.Series({"mode": "compile:default", "wrapped": True})) == ":"
    assert style.mode_label("compile:reduce-overhead", True) == "reduce-overhead [op]"
    assert style.mode_style("something-new") == "-."  # an unknown mode still draws
