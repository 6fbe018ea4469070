"""Hostile-input audit 41: the newest verbs and the notebook API against input they took
badly. Each case: the command (or API call), its one line and exit code (UsageError in the
API), and the folders around it untouched where it writes nothing. CPU, torch backend, tiny
shapes; one set of measured runs shared by the module (copied where a test writes).

1. compare / report --runs split by a column every point is drawn by (a traceback, or a
   'Compare not drawn: KeyError' section); the API compare given run ids, a tune run or
   no resamples; a calibration file under a file
2. a value given twice (--models X,X, --tp 1,1, --backends torch,torch...): one point
   measured several times and counted each time
3. merge into a folder of other files (the data folder itself, `.`), a file, under a file
4. report --runs naming one run twice (a run compared with itself, which compare refuses)
5. claims implications --runs a tune run; the API's data folder given a run folder; a
   tuned-files folder of the wrong type
6. profile --explain of fp32 and the FP8 schemes (a KeyError), and with the options of a
   profiled point
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import moe_lab as ml
from moe_lab.cli import main
from moe_lab.core.errors import UsageError
from conftest import folder_tree as _tree, one_line_err as _one_line  # noqa: E402

MODEL = "custom:H=64,I=32,E=4,k=2"
SWEEP = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2", "--backends", "torch",
         "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms", "2",
         "--warmup-ms", "1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """a, b: two runs of one sweep; s0, s1: its two --shard parts; t: a tune run."""
    from conftest import plugin_backend
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.tuning import Tuner
    d = tmp_path_factory.mktemp("data") / "runs"
    for rid in ("a", "b"):
        assert main(SWEEP + ["--data-dir", str(d), "--run-id", rid]) == 0
    for i in range(2):
        assert main(SWEEP + ["--data-dir", str(d), "--run-id", f"s{i}", "--shard", f"{i}/2"]) == 0
    for _ in plugin_backend("torch_chunked.py", "torch-chunked"):
        Tuner("torch-chunked", "cpu", d / "t", d.parent / "configs", rep_ms=1, warmup_ms=1,
              progress=False).run([[make_problem(MODEL, 1, "fp32", 1, 1)]])
    return d


@pytest.fixture
def data(runs, tmp_path, capsys, monkeypatch):
    """A copy of the runs, the data folder of the call (MOE_LAB_DATA); cwd a scratch folder."""
    capsys.readouterr()
    d = tmp_path / "runs"
    shutil.copytree(runs, d)
    monkeypatch.setenv("MOE_LAB_DATA", str(d))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return d


def _refused(capsys, argv, where, says=None, contains=None) -> str:
    before = _tree(where)
    assert main(argv) == 2
    line = _one_line(capsys)
    if says is not None:
        assert line == f"moe-lab: error: {says}", line
    if contains is not None:
        assert contains in line, line
    assert _tree(where) == before
    return line


# --- 1. compare split by an axis; the API compare ------------------------------------------------

AXIS = ("a compared point is drawn at its model, tp, ep, mode and tokens, so none of them can "
        "split the runs; split by another column, e.g. config or backend")


@pytest.mark.parametrize("by,values", [("tokens", "1,1"), ("mode", "eager,eager"),
                                       ("tp", "1,1")])
def test_compare_by_a_column_every_point_is_drawn_by_is_one_line(data, tmp_path, capsys, by,
                                                                 values):
    """Before: KeyError 'tokens' from the figure, 'mode' from the verdict loop (tracebacks)."""
    _refused(capsys, ["compare", "a", "b", "--by", by, "--values", values,
                      "--out", str(tmp_path / "out")], tmp_path, says=f"--by {by}: {AXIS}")


def test_report_runs_by_an_axis_is_refused_before_any_figure(data, tmp_path, capsys):
    """Before: exit 0 and a page whose compare section said 'not drawn: KeyError: 'mode''."""
    _refused(capsys, ["report", "--runs", "a,b", "--by", "mode", "--values", "eager,eager",
                      "--out", str(tmp_path / "review")], tmp_path, says=f"--by mode: {AXIS}")


def test_the_api_compare_refuses_what_the_cli_refuses_and_opens_run_ids(data):
    from moe_lab.analysis.compare import calibrate, compare
    a, b = ml.open_run("a"), ml.open_run("b")
    with pytest.raises(UsageError, match=f"^--by mode: {AXIS}$"):  # was KeyError 'mode'
        compare(a, b, by="mode", values=("eager", "eager"))
    with pytest.raises(UsageError, match=r"^run t has no measured points to compare \(a tune "
                                         r"run\)$"):  # was: every point 'only in A'
        compare(a, "t")
    with pytest.raises(UsageError, match=r"^run t has no measured points"):  # was: 'an A/A'
        calibrate(a, "t", data.parent / "noise")  # pair is of one device: ... t on x86_64'
    for n in (0, float("nan")):  # was scipy's ValueError
        with pytest.raises(UsageError, match=f"^n_resamples {n!r}: give a whole number >= 1$"):
            compare(a, b, n_resamples=n)
    # run ids, as calibrate takes them (was: AttributeError 'str' object has no 'results')
    t = compare("a", str(data / "b"), n_resamples=50)
    assert len(t) == 2 and set(t["tokens"]) == {1, 2}


def test_a_calibration_file_under_a_file_is_one_line(data, tmp_path, capsys):
    """Before: CLI 'moe-lab: error: <file>: File exists'; API: FileExistsError."""
    from moe_lab.analysis.compare import calibrate
    (tmp_path / "notes").write_text("mine")
    where = tmp_path / "notes" / "cal.json"
    says = f"calibration='{where}': {tmp_path / 'notes'} is a file, not a folder"
    _refused(capsys, ["compare", "a", "b", "--calibrate", "--calibration", str(where)],
             tmp_path, says=says)
    with pytest.raises(UsageError, match=f"^{says}$"):
        calibrate("a", "b", where)
    assert (tmp_path / "notes").read_text() == "mine"


# --- 2. a value given twice ----------------------------------------------------------------------

def test_a_value_given_twice_is_one_point_measured_once(tmp_path, capsys):
    """Before: 'run ...: 8 points', then '4 measured now, 4 already there' for one point
    (measured four times, each over the one before)."""
    capsys.readouterr()
    twice = ["sweep", "--models", f"{MODEL},{MODEL}", "--tp", "1,1", "--tokens", "1,1",
             "--backends", "torch,torch", "--modes", "eager,eager", "--routing",
             "uniform,uniform", "--dtype", "fp32", "--device", "cpu", "--no-progress",
             "--rep-ms", "2", "--warmup-ms", "1", "--data-dir", str(tmp_path), "--run-id", "d"]
    assert main(twice) == 0
    out = capsys.readouterr().out
    assert ": 1 points (" in out and "done: 1 measured now, 0 already there" in out, out
    assert len(pd.read_parquet(tmp_path / "d" / "results.parquet")) == 1


def test_the_list_parsers_give_each_value_once():
    from moe_lab import backends
    from moe_lab.core.problems import parse_int_list, split_models
    from moe_lab.core.validate import names
    from moe_lab.measuring.modes import parse_modes
    from moe_lab.measuring.sweep import Grid
    assert split_models(f"{MODEL},qwen3-30b-a3b,{MODEL}") == [MODEL, "qwen3-30b-a3b"]
    assert parse_int_list("8,1,8") == [8, 1]
    assert backends.parse_names("torch,torch") == ["torch"]
    assert [m.name for m in parse_modes("eager,eager")] == ["eager"]
    assert names(["torch", "torch"], "backends", "backends") == ["torch"]
    g = Grid(models=[MODEL, MODEL], tokens=[1, 1], backends=["torch", "torch"],
             modes=parse_modes("eager") * 2, tps=[1, 1], eps=[1, 1])  # the API's lists
    assert (g.models, g.tokens, g.backends, g.tps, g.eps, len(g.modes)) == (
        [MODEL], [1], ["torch"], [1], [1], 1)


# --- 3. merge's OUT ------------------------------------------------------------------------------

def test_merge_into_a_folder_of_other_files_is_refused(data, tmp_path, capsys):
    """Before: `merge DATA s0 s1` wrote a run's files among the run folders (the data folder
    became a run), `merge . ...` into the working directory with the run id ''."""
    (tmp_path / "cwd" / "mine.txt").write_text("mine")
    for out in (str(data), "."):
        _refused(capsys, ["merge", out, "s0", "s1"], tmp_path,
                 says=f"OUT {out} is a folder holding other files, not a new run folder; "
                      "give a new (or empty) folder for the merged run")


@pytest.mark.parametrize("out", ["notes", "notes/m"])
def test_merge_into_a_file_or_under_one_is_one_line(data, tmp_path, capsys, out):
    """Before: '<OUT>: File exists' / 'Not a directory', naming no option."""
    (tmp_path / "notes").write_text("mine")
    o = tmp_path / out
    _refused(capsys, ["merge", str(o), "s0", "s1"], tmp_path,
             says=f"OUT {o}: {tmp_path / 'notes'} is a file, not a folder; give a new folder "
                  "for the merged run")


def test_merge_into_an_empty_folder_given_as_dot_names_the_run_after_it(data, tmp_path, capsys):
    """Before: the manifest's run_id was '' (Path('.').name)."""
    empty = tmp_path / "cwd" / "merged"
    empty.mkdir()
    import os
    os.chdir(empty)
    assert main(["merge", ".", "s0", "s1"]) == 0
    assert json.loads((empty / "manifest.json").read_text())["run_id"] == "merged"
    assert len(pd.read_parquet(empty / "results.parquet")) == 2


# --- 4. report --runs naming one run twice -------------------------------------------------------

@pytest.mark.parametrize("given", ["a,a", "a,{d}/a", "a,b,a"])
def test_report_runs_naming_a_run_twice_is_refused(data, tmp_path, capsys, given):
    """Before: `a,a` exit 0 and a page comparing a with itself ('no detectable change'
    everywhere), which `compare a a` refuses."""
    names = given.format(d=data).split(",")
    _refused(capsys, ["report", "--runs", ",".join(names), "--out", str(tmp_path / "review")],
             tmp_path, says=f"--runs names run a twice (a, {names[-1]}): give each run once "
                            "(two runs: B over A; --by COLUMN splits one)")


# --- 5. claims implications, the API's folders ---------------------------------------------------

@pytest.mark.parametrize("given", ["t", "{d}/t"])
def test_claims_implications_of_a_tune_run_is_one_line(data, tmp_path, capsys, given):
    """Before: exit 0, every claim's note 'no run in <the tune run>: measured_us is NaN'."""
    g = given.format(d=data)
    _refused(capsys, ["claims", "implications", "--runs", g], tmp_path,
             says=f"--runs: {g if g == 't' else g} is a tune run without measured points: give "
                  "a sweep run, a run id or a folder of runs")


def test_the_api_data_folder_given_a_run_folder_is_one_line(data):
    """Before: [] and an empty table, as if the folder held no run (findings refuses it)."""
    for call, name in ((ml.find_runs, "find_runs: data_dir_"), (ml.runs, "data_dir")):
        with pytest.raises(UsageError, match=f"^{name} '{data / 'a'}': a run folder; give the "
                                             f"folder of run folders that holds it \\({data}\\)$"):
            call(data / "a")
    assert set(ml.runs(data)["run_id"]) == {"a", "b", "s0", "s1"}  # the folder of runs: read


def test_a_tuned_files_folder_of_the_wrong_type_is_one_line():
    """Before: pathlib's TypeError."""
    from moe_lab.analysis import tuned_files as tf
    with pytest.raises(UsageError, match=r"^inventory: configs_dir 5: give a folder \(str or "
                                         r"Path\), or None for the default$"):
        tf.inventory(5)


# --- 6. profile --explain ------------------------------------------------------------------------

def test_profile_explain_of_fp32_is_one_line_and_fp8_is_explained(tmp_path, capsys,
                                                                  monkeypatch):
    """Before: KeyError 'fp32' / 'fp8-channel' from the dispatch key (tracebacks)."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    argv = ["profile", "--explain", "--model", "deepseek-r1", "--tokens", "16", "--tp", "8"]
    _refused(capsys, argv + ["--dtype", "fp32"], tmp_path,
             says="aiter's fused_moe has no fp32 path (bf16, fp16 and the FP8 schemes "
                  "fp8-tensor, fp8-channel, fp8-block128)")
    for dtype in ("fp8-tensor", "fp8-channel", "fp8-block128"):
        assert main(argv + ["--dtype", dtype]) == 0
        assert "deepseek-r1 TP8, 16 tokens" in capsys.readouterr().out


def test_the_aiter_key_of_an_fp8_scheme_is_bf16_with_its_quant_type():
    from moe_lab.backends._aiter_dispatch import TORCH_DTYPE, problem_key
    from moe_lab.core.problems import make_problem
    k = problem_key(make_problem("deepseek-r1", 16, "fp8-channel", 8), 304, "gfx942")
    assert k["dtype"] == TORCH_DTYPE["bf16"] and k["q_type"] == "QuantType.per_Token"
    assert k["q_dtype_a"] == k["q_dtype_w"] != TORCH_DTYPE["bf16"]
    k = problem_key(make_problem("deepseek-r1", 16, "fp8-block128", 8), 304, "gfx942")
    assert k["q_type"] == "QuantType.per_1x128"  # fused_moe's quant_remap


@pytest.mark.parametrize("extra,named", [(["--split"], "--split"),
                                         (["--config", "tuned"], "--config"),
                                         (["--trace", "t.json.gz", "--split"], "--split, --trace")])
def test_profile_explain_with_a_profiled_points_options_is_refused(tmp_path, capsys,
                                                                   monkeypatch, extra, named):
    """Before: ignored; the explanation printed as though they were not given."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    it = "them" if "," in named else "it"
    _refused(capsys, ["profile", "--explain", "--model", "deepseek-r1", "--tokens", "16",
                      *extra], tmp_path,
             says=f"--explain with {named}: --explain profiles nothing (it reads aiter's own "
                  f"dispatch and tuned table); leave {it} out, or drop --explain")
