"""`moe-lab report --run ID` executes every notebook for one run (its id injected after the
parameters cell, as papermill would) and exports what each shows: on committed H200 runs
given by id and on a CPU run that `moe-lab sweep` makes here, given as a folder (notebook 01;
every notebook on a CPU sweep's run given by id: tests/test_report_first_look.py). Each
notebook shows the run asked for (the numbers recomputed from its parquet files) or refuses
it in one line saying why; every exported figure is checked as a reviewer reads it
(moe_lab.plots.probe): no two entries of a legend look alike, and its own texts name each
run it draws rows from.

One report per run, shared by every test of the module (executing notebooks is slow)."""
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("nbclient")

from _report_pages import (MAX_ENTRIES, SEED, counts, expected_runs, page,  # noqa: E402
                           refusal, shown)
from conftest import RUNS_DIR, execute_cached  # noqa: E402
from moe_lab.cli import main  # noqa: E402
from moe_lab.plots.probe import describe_figure, legend_clashes, series_problems  # noqa: E402

RUNS = Path(RUNS_DIR)
COMPILE = "h200-compile-deepseek-r1-20261129"  # notebook 02's kind
TUNED = "h200-tuned-20261130"       # tuned and default, both shardings (05)
GLOO = "cpu-gloo-x2-expert-parallel-20261130"  # the committed `sweep --nproc` run (06)
AMD = "aiter-tuned-fmoe-0-1-7-post2-dev18"  # imported AMD tuner rows, custom shapes among them
MODEL = "custom:H=64,I=32,E=4,k=2"
NOTEBOOKS = ("01_kernel_time", "02_eager_vs_compile", "03_roofline", "04_reproduce_claims",
             "05_tuning", "06_expert_parallel")


def _report(argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["report", *argv])
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    """A tiny CPU run made with `moe-lab sweep` (eager only, two backends, two token counts)."""
    data = tmp_path_factory.mktemp("cpu-data")
    assert main(["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,8", "--backends",
                 "torch,torch-grouped", "--dtype", "bf16", "--device", "cpu", "--no-progress",
                 "--rep-ms", "5", "--warmup-ms", "2", "--run-id", "cpu-tiny",
                 "--data-dir", str(data)]) == 0
    return data / "cpu-tiny"


@pytest.fixture(scope="module")
def reports(tmp_path_factory, cpu_run) -> dict:
    """run name -> (exit status, printed lines, its output folder, the run as given)."""
    out = tmp_path_factory.mktemp("reports")
    got = {}
    with pytest.MonkeyPatch.context() as mp:
        # a notebook executed for the same run by another module's test (notebook 01 on
        # the seed run, 05's refusal of it) is executed once: conftest.execute_cached
        mp.setattr("moe_lab.commands.report.execute_notebook", execute_cached)
        for run, only in ((SEED, None), (COMPILE, "02"), (TUNED, "05"), (GLOO, "06"),
                          (str(cpu_run), "01"), (AMD, "01,03")):
            rc, text = _report(["--run", run, "--out", str(out)]
                               + (["--only", only] if only else []))
            got[Path(run).name] = (rc, text, out / Path(run).name, run)
    return got


def test_an_unknown_run_id_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    assert main(["report", "--run", "no-such-run-20990101", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no run folder no-such-run-20990101" in err
    assert not (tmp_path / "o").exists()


def test_the_h200_run_every_notebook_shows_it_or_says_why_not(reports):
    rc, text, folder, _ = reports[SEED]
    assert rc == 0, text
    assert sorted(p.stem for p in folder.glob("*.html")) == sorted(NOTEBOOKS + ("index",))
    n, ok = counts(RUNS / SEED)
    assert n == 672
    p01 = page(folder, "01_kernel_time")
    assert shown(p01) == (SEED, n, ok)
    assert "graph points with kernel sum within [0.7, 1.05] of graph time: 222 of 224" in p01
    p03 = page(folder, "03_roofline")
    assert shown(p03) == (SEED, n, ok) and "ceilings: NVIDIA H200" in p03
    p04 = page(folder, "04_reproduce_claims")  # given a run id, the measured times are its own
    assert re.search(rf"^runs for the measured times: \S+{SEED}: 1 run\(s\): {SEED}$", p04, re.M)
    measured = re.findall(r"^\S+: measured_us \S+ \(\S+, run (\S+)\)$", p04, re.M)
    assert measured and set(measured) <= {SEED, "-"} and SEED in measured
    assert "has no compile rows" in refusal(text, "02_eager_vs_compile")
    assert "both tuned and default" in refusal(text, "05_tuning")
    assert "single-process run (no world_size column)" in refusal(text, "06_expert_parallel")
    assert "KeyError" not in page(folder, "06_expert_parallel")
    index = (folder / "index.html").read_text()
    assert all(f"href='{nb}.html'" in index for nb in NOTEBOOKS)
    # time, phases, launch overhead, AMD beside this run; FP8 left out: the run has none
    assert len(list((folder / "figures").glob("01_kernel_time_*.png"))) == 4
    assert f"FP8 against bf16: left out (run {SEED} has no FP8 rows" in p01


def test_each_notebook_on_an_h200_run_of_its_kind(reports):
    for run, name in ((COMPILE, "02_eager_vs_compile"), (TUNED, "05_tuning"),
                      (GLOO, "06_expert_parallel")):
        rc, text, folder, _ = reports[run]
        assert rc == 0 and f"ok   {name}:" in text, text
        assert shown(page(folder, name)) == (run, *counts(RUNS / run))
    p06 = page(reports[GLOO][2], "06_expert_parallel")  # a CPU run, said so
    assert "NOT GPU results" in p06 and "predicted within 5% of measured" in p06


def test_the_imported_amd_run_kernel_time_and_roofline(reports):
    """aiter's tuner table as imported: 13 rows are shapes no seed model has (their model is
    the shape one rank holds, tp and ep empty) and one is int8, which has no roof here;
    notebooks 01 and 03 show every row, those with a 'rank shape' sharding, the int8 row
    without a roof (they raised int() of NA and a TypeError on an empty error)."""
    rc, text, folder, _ = reports[AMD]
    assert rc == 0 and "ok   01_kernel_time:" in text and "ok   03_roofline:" in text, text
    n, ok = counts(RUNS / AMD)
    for name in ("01_kernel_time", "03_roofline"):
        assert shown(page(folder, name)) == (AMD, n, ok)
    from moe_lab.analysis import roofline_tables
    df, _ = roofline_tables.measured(AMD)
    rank = df[df["tp"].isna()]
    assert (rank["dtype"] == "int8-tensor").sum() == 1  # 'one is int8'; the other 12 not
    assert len(rank) == 13 and rank[rank["dtype"] == "int8-tensor"]["roof_us"].isna().all()
    assert rank[rank["dtype"] != "int8-tensor"]["pct_of_roof"].between(1, 100).all()
    table = roofline_tables.pct_of_roof_table(df)
    assert "rank shape" in set(table.index.get_level_values("sharding"))


def test_a_cpu_run_made_by_sweep(reports, cpu_run):
    rc, text, folder, _ = reports["cpu-tiny"]
    assert rc == 0, text
    n, ok = counts(cpu_run)
    assert (n, ok) == (4, 4)
    p01 = page(folder, "01_kernel_time")
    assert shown(p01) == ("cpu-tiny", n, ok)
    assert "of graph time: 0 of 0 (no graph point)" in p01
    # notebooks 03 to 06 on a CPU sweep's run (roof, claims, refusals): test_report_first_look


def _descriptions(reports) -> list[tuple[str, str, dict]]:
    out = []
    for run, (_, _, folder, _) in reports.items():
        for j in sorted((folder / "figures").glob("*.json")):
            out.append((run, j.stem, json.loads(j.read_text())))
    return out


def test_no_two_legend_entries_look_alike(reports):
    descs = _descriptions(reports)
    pngs = [p for _, (_, _, folder, _) in reports.items() for p in (folder / "figures").glob("*.png")]
    assert len(descs) == len(pngs) >= 15  # every exported figure has its description
    bad = [(run, name, c) for run, name, d in descs for c in legend_clashes(d) + series_problems(d)]
    assert not bad, bad
    crowded = [(run, name, len(leg["entries"])) for run, name, d in descs
               for leg in d["legends"] if len(leg["entries"]) > MAX_ENTRIES]
    assert not crowded, crowded


def test_every_figure_names_each_run_it_draws_rows_from(reports):
    missing = []
    for run, name, d in _descriptions(reports):
        folder, given = reports[run][2:]
        text = page(folder, name.rsplit("_", 1)[0])
        words = set(re.split(r"[\s,;|()]+", " ".join(d["texts"] + [d.get("provenance") or ""])))
        lost = {r for r in expected_runs(run, given, name, d, text) if r not in words}
        if lost:
            missing.append((run, name, sorted(lost)))
    assert not missing, missing


def test_the_review_export_figures_too():
    """`report --runs` (the review page) on the committed pairs: the same two checks, each
    figure against the runs its section says it draws."""
    from moe_lab.plots.review import build
    from moe_lab.storage.store import open_run
    bad = []
    for runs, by, values in (([
            "h200-review-a-20261201", "h200-review-b-20261201"], None, None),
            (["h200-review-tuned-20261201"], "config", ["default", "tuned"]),
            ([TUNED, "aiter-tuned-fmoe-0-1-7-post2-dev18"], None, None)):
        for s in build([open_run(r) for r in runs], by, values):
            if s.fig is None:
                continue
            d = describe_figure(s.fig)
            words = set(re.split(r"[\s,;|()]+", " ".join(d["texts"] + [d.get("provenance") or ""])))
            lost = [r.run_id for r, rows in s.drawn if len(rows) and r.run_id not in words]
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            FigureCanvasAgg(s.fig).draw()
            r = s.fig.canvas.get_renderer()
            sup = getattr(s.fig, "_suptitle", None)  # the title never over the legend
            over = [sup is not None and sup.get_window_extent(r).overlaps(lg.get_window_extent(r))
                    for lg in s.fig.legends]
            if legend_clashes(d) or series_problems(d) or lost or any(over):
                bad.append((s.title, legend_clashes(d), series_problems(d), lost, over))
    assert not bad, bad


def test_parameters_are_injected_by_papermill():
    """Papermill's own injection: an `injected-parameters` cell right after the cell tagged `parameters` (replacing an
    earlier one; at the top where no cell is tagged), values as Python literals; `-p`
    values read as papermill's command line reads them."""
    import nbformat

    from moe_lab.report import inject_parameters, parse_value
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# title"),
        nbformat.v4.new_code_cell("run = None", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print(run)")])
    inject_parameters(nb, {"run": "h200-x", "tokens": [1, 2], "remeasure": False})
    inject_parameters(nb, {"run": "h200-y"})
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert tags == [[], ["parameters"], ["injected-parameters"], []]
    from papermill.translators import translate_parameters
    assert nb.cells[2].source == translate_parameters("python3", "python", {"run": "h200-y"},
                                                      "Parameters")
    bare = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    inject_parameters(bare, {"x": 2})
    assert bare.cells[0].metadata["tags"] == ["injected-parameters"]
    assert [parse_value(v) for v in ("None", "True", "3", "2.5", "h200-seed4")] == [
        None, True, 3, 2.5, "h200-seed4"]


def test_noisy_points_are_ringed_with_one_legend_entry():
    """Notebook 01's figures: a point whose p10-p90 spread is above 10% of its median is
    drawn hollow-ringed, one grey legend entry says what the rings are, the footer counts
    them."""
    from moe_lab.storage import rows
    from moe_lab.plots import kernel_time as kt
    from moe_lab.storage.store import open_run
    run = open_run("h200-repeat-a-20261130")
    ok = kt.ok_times(run.results)
    want = int(ok["noisy"].sum())
    spread = (ok["p90_us"] - ok["p10_us"]) / ok["median_us"]
    assert want == int(((spread > 0.1) | ok["noisy"]).sum()) > 0
    assert (rows.spread(ok) == spread).all()
    fig = kt.fig_time_vs_tokens(run)
    rings = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == "_noisy"]
    assert sum(len(ln.get_xdata()) for ln in rings) == want
    assert all(ln.get_markerfacecolor() == "none" for ln in rings)
    entries = [e for leg in describe_figure(fig)["legends"] for e in leg["entries"]
               if e["label"] == "noisy (spread > 10%)"]
    assert len(entries) == 1 and entries[0]["fill"] == "none"
    assert f"ringed: {want} noisy points" in " ".join(" ".join(t.get_text().split())
                                                      for t in fig.texts)


def test_a_run_marked_running_or_failed_is_never_a_default():
    """h200-tuned-20261130 (a part still marked running) and h200-smoke-config-20261130
    (failed) are committed: no notebook's default is either, though each opens by id."""
    from moe_lab.analysis.runs import runs_with_phases
    from moe_lab.plots import devices as dv
    from moe_lab.plots import tuning as tu
    from moe_lab.storage.store import find_runs, open_run
    marked = {"h200-tuned-20261130", "h200-smoke-config-20261130"}
    everything = {r.run_id for r in find_runs()}
    assert marked <= everything
    assert not marked & {r.run_id for r in find_runs(defaults=True)}
    defaults = {open_run(None, has=h).run_id for h in ("ok", "graph", "compile", "distributed")}
    defaults |= {tu.open_tuned_run().run_id, dv.richest_run()}
    defaults |= {r.run_id for r in runs_with_phases(None)}
    assert not defaults & marked
    assert open_run("h200-tuned-20261130").run_id == "h200-tuned-20261130"


def test_a_folder_of_runs_is_notebook_04s_and_the_others_say_so(tmp_path, cpu_run, capsys):
    """The README: 04's `run` may be a folder of runs. Before, `report --run FOLDER` opened it
    as one run and refused it ('is a folder but not a run folder'), exit 2, 04 never ran."""
    import shutil
    folder = tmp_path / "mine"
    shutil.copytree(cpu_run, folder / cpu_run.name)
    out = tmp_path / "o"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("moe_lab.commands.report.execute_notebook", execute_cached)
        rc, text = _report(["--run", str(folder), "--out", str(out)])
    assert rc == 0, text
    lines = text.splitlines()
    assert [ln.split(":")[0] for ln in lines if ln.startswith("skipped")] == [
        f"skipped {n}" for n in NOTEBOOKS if n != "04_reproduce_claims"]
    assert any(ln.startswith("ok   04_reproduce_claims") for ln in lines), text
    html = (out / "mine" / "04_reproduce_claims.html").read_text()
    assert str(folder) in html  # the claims' measured times were read from that folder
    capsys.readouterr()
    assert main(["report", "--run", str(folder), "--only", "01", "--out", str(tmp_path / "p")]) == 2
    assert "is a folder of runs: only notebook 04_ takes one" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
