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
7. a report-like output (findings/check --out, compare/report --out, ceilings --out-dir,
   --trace, --calibration) into a run folder: `findings --out RUN/results.parquet` wrote
   markdown over a run's measured file
8. tune --configs-dir a run folder, the data folder, or the tune run's own folder
9. run ids with '..' (open_run, tune_run); compare --out an existing file ('File exists');
   band_text of inf, vllm_compare.frames of an unknown mode
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import moe_lab as ml
from moe_lab.cli import main
from moe_lab.core.errors import UsageError
from conftest import cli_refused as _refused, data_copy, folder_tree as _tree, one_line_err as _one_line  # noqa: E402

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
    d = data_copy(runs, tmp_path, capsys, monkeypatch)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return d


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
    says = (f"calibration {where}: {tmp_path / 'notes'} is a file, not a folder; give a new "
            "path or remove the file")
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
    from moe_lab.storage.modes import parse_modes
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
    from moe_lab.analysis import tuned as tf
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



# --- 7. a report-like output into a run folder ---------------------------------------------

def _in_run(name, given, run, data) -> str:
    where = "the folder of" if given == str(data / run) else "inside the folder of"
    return (f"{name}: {where} run {run} ({data / run}), whose files are measured data; give a "
            "path outside any run folder")


@pytest.mark.parametrize("argv,name,out,run", [
    (["findings", "--out", "{d}/a/results.parquet"], "--out {o}", "{d}/a/results.parquet", "a"),
    (["check", "--model", MODEL, "--tokens", "1", "--device", "cpu", "--backends", "torch",
      "--dtype", "fp32", "--out", "{d}/a/manifest.json"], "--out {o}", "{d}/a/manifest.json", "a"),
    (["compare", "a", "b", "--out", "{d}/a"], "--out {o}", "{d}/a", "a"),
    (["compare", "a", "b", "--out", "{d}/b/traces"], "--out {o}", "{d}/b/traces", "b"),
    (["report", "--runs", "a,b", "--out", "{d}/b"], "--out {o}", "{d}/b", "b"),
    (["report", "--run", "a", "--only", "01", "--out", "{d}"], "--out {o}", "{d}/a", "a"),
    (["ceilings", "--out-dir", "{d}/a"], "--out-dir {o}", "{d}/a", "a"),
    (["compare", "a", "b", "--calibrate", "--calibration", "{d}/a/cal.json"], "calibration {o}",
     "{d}/a/cal.json", "a"),
    (["profile", "--model", MODEL, "--tokens", "1", "--dtype", "fp32", "--device", "cpu",
      "--trace", "{d}/a/t.json.gz"], "--trace {o}", "{d}/a/t.json.gz", "a"),
])
def test_a_report_like_output_into_a_run_folder_is_refused(data, tmp_path, capsys, argv, name,
                                                           out, run):
    """Before: findings wrote its markdown over a/results.parquet (exit 0), compare and
    report wrote their figures among a run's files, check its text over the manifest."""
    d, o = str(data), out.format(d=data)
    _refused(capsys, [a.format(d=d) for a in argv] + (["--data-dir", d] if argv[0] == "findings"
                                                     else []), tmp_path,
             says=_in_run(name.format(o=o), o, run, data))


def test_the_writers_of_report_files_refuse_a_run_folder_themselves(data, tmp_path):
    """The last guard under the verbs: report.write_whole (compare's, report's pages) and
    the review export's write."""
    from moe_lab.plots.review import write
    from moe_lab.report import write_whole
    before = _tree(tmp_path)
    target = data / "a" / "results.parquet"
    with pytest.raises(UsageError, match=r"inside the folder of run a \("):
        write_whole([(str(tmp_path / "fine.csv"), b"x"), (str(target), b"# markdown")])
    with pytest.raises(UsageError, match=r"^out .*: the folder of run b \("):
        write([], str(data / "b"))
    assert _tree(tmp_path) == before


def test_a_manifest_json_of_another_tool_above_an_output_is_no_run(tmp_path):
    """A folder above an --out holding a web app's manifest.json (no run_id) is not a run:
    the writers go on. A folder with moe-lab's manifest (its run_id) or a tune's
    candidates.parquet is one, whatever else it lacks."""
    from moe_lab.core.validate import output, run_holding
    app = tmp_path / "webapp"
    (app / "reports").mkdir(parents=True)
    (app / "manifest.json").write_text(json.dumps({"name": "app", "start_url": "/"}))
    assert run_holding(app / "reports" / "cmp") is None
    assert output(str(app / "reports" / "cmp"), "--out", folder=True) == str(app / "reports" / "cmp")
    (app / "manifest.json").write_text(json.dumps({"run_id": "webapp", "status": "running"}))
    assert run_holding(app / "reports" / "cmp") == str(app)
    tune = tmp_path / "t"
    tune.mkdir()
    (tune / "candidates.parquet").write_bytes(b"PAR1")
    with pytest.raises(UsageError, match=r"inside the folder of run t \("):
        output(str(tune / "x.md"), "--out")


# --- 8. tune --configs-dir among the runs --------------------------------------------------------

TUNE = ["tune", "--backend", "torch-chunked", "--models", MODEL, "--tp", "1", "--ep", "1",
        "--tokens", "1", "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms", "1",
        "--warmup-ms", "1"]
OWN = ("; tuned files go in a folder of their own (default: data/configs/<device-slug>, beside "
       "the data folder's runs)")


@pytest.fixture
def chunked():
    from conftest import plugin_backend
    for _ in plugin_backend("torch_chunked.py", "torch-chunked"):
        yield "torch-chunked"


@pytest.mark.parametrize("configs,says", [
    ("{d}/a", "the folder of run a ({d}/a)"),
    ("{d}/a/traces", "inside the folder of run a ({d}/a)"),
    ("{d}", "a folder of run folders (run a is in it)"),
    ("{d}/t9", "the folder of this tune run ({d}/t9)"),
])
def test_tune_configs_dir_among_the_runs_is_refused(data, tmp_path, capsys, chunked, configs,
                                                    says):
    """Before: `<backend>/` and its provenance.json written into the run folder (or among
    the run folders, or into the tune run's own folder)."""
    c = configs.format(d=data)
    _refused(capsys, TUNE + ["--data-dir", str(data), "--run-id", "t9", "--configs-dir", c],
             tmp_path, says=f"--configs-dir {c}: {says.format(d=data)}{OWN}")


def test_tune_configs_dir_the_new_data_folder_itself_is_refused(tmp_path, capsys, chunked):
    """A data folder without a run yet: the tune run would be made beside `<backend>/`."""
    new = tmp_path / "new"
    _refused(capsys, TUNE + ["--data-dir", str(new), "--configs-dir", str(new)], tmp_path,
             says=f"--configs-dir {new}: a folder of run folders{OWN}")


# --- 9. run ids with '..'; compare --out a file; band_text(inf); frames(mode=?) ------------

def test_a_run_id_with_dot_dot_is_refused_and_a_path_is_a_path(data):
    """Before: open_run('a/../b') opened b, tune_run('a/../t') the tune run t (ids read as
    paths under the data folder, so '../x' reached outside it)."""
    from moe_lab.analysis import tuned as tf
    with pytest.raises(UsageError, match=r"^run 'a/\.\./b': no such folder, and a run id is one "
                                         r"folder name \(no '/' or '\.\.'\); give a run id "
                                         f"under {data} or the path of a run folder$"):
        ml.open_run("a/../b")
    with pytest.raises(UsageError, match=r"^run 'b/\.\./\.\./runs/a': no such folder"):
        ml.open_run("b/../../runs/a")  # out of the data folder and back: was run a
    with pytest.raises(UsageError, match=r"^tune_run: run_id 'a/\.\./t': a run id is one folder "
                                         f"name \\(no '/' or '\\.\\.'\\) under {data}$"):
        tf.tune_run("a/../t")
    with pytest.raises(UsageError, match=r"^tune_run: run_id '\.\.': a run id is one folder"):
        tf.tune_run("..", root=data / "a")
    # what is documented stays: an id, a path (absolute, or from the working folder)
    assert ml.open_run("b").run_id == "b" and ml.open_run(str(data / "a")).run_id == "a"
    assert ml.open_run(Path("..") / "runs" / ".." / "runs" / "b").run_id == "b"  # cwd/../runs
    assert tf.tune_run("t").manifest["kind"] == "tune"


@pytest.mark.parametrize("argv,head", [
    (["compare", "a", "a/../b"], ""),
    (["claims", "implications", "--runs", "a/../b"], "--runs: ")])
def test_a_run_id_with_dot_dot_on_the_command_line_is_one_line(data, tmp_path, capsys, argv,
                                                               head):
    """Before: compare a a/../b compared a with b; claims implications read b."""
    _refused(capsys, argv, tmp_path,
             says=f"{head}run 'a/../b': no such folder, and a run id is one folder name (no '/' "
                  f"or '..'); give a run id under {data} or the path of a run folder")


@pytest.mark.parametrize("argv,says", [
    (["compare", "a", "b", "--out", "{f}"], "--out {f}: {f} is a file, not a folder; give a new "
                                            "path or remove the file"),
    (["report", "--runs", "a,b", "--out", "{f}"], "--out {f}: {f} is a file, not a folder; give a "
                                                  "new path or remove the file"),
    (["findings", "--out", "{f}/f.md"], "--out {f}/f.md: {f} is a file, not a folder; give a new "
                                        "path or remove the file"),
    (["findings", "--out", "{o}"], "--out {o}: {o} is a folder, not a file; give a file path"),
])
def test_an_out_path_of_the_wrong_kind_says_what_to_do_alike(data, tmp_path, capsys, argv, says):
    """Before: compare said '<file>: File exists'; report '--out F is a file, not a folder'
    and findings '--out F: F is a file, not a folder', neither saying what to do."""
    f, o = tmp_path / "notes", tmp_path / "folder"
    f.write_text("mine")
    o.mkdir()
    extra = ["--data-dir", str(data)] if argv[0] == "findings" else []
    _refused(capsys, [a.format(f=f, o=o) for a in argv] + extra, tmp_path,
             says=says.format(f=f, o=o))


def test_band_text_of_no_finite_noise_and_frames_of_an_unknown_mode_are_one_line(data):
    """Before: band_text(inf) 'nan-nan'; frames(runs, mode='nosuch') two empty frames."""
    from moe_lab.analysis import noise, vllm_compare
    for bad in (float("inf"), float("nan"), 1e6):
        with pytest.raises(UsageError, match=f"^band_text: noise {bad!r}: give a noise "
                                             r"\|ln B/A\|, a finite number >= 0 \(at most 700"):
            noise.band_text(bad)
    assert noise.band_text(0.05) == "0.951-1.051"
    runs = [ml.open_run("a")]
    for bad in ("nosuch", 5, ""):
        with pytest.raises(UsageError, match=f"^frames: mode {bad!r}: give eager, graph, "
                                             r"compile:<variant>\[:dynamic\] \(variant: default, "
                                             r".*\), or None for every mode$"):
            vllm_compare.frames(runs, mode=bad)
    res, led = vllm_compare.frames(runs, mode="eager")
    assert len(res) == 2 and len(led)
    assert len(vllm_compare.frames(runs, mode=None)[0]) == 2
