"""Issue 37: the new features as hostile-proof as the old. Each case of the issue, replayed:
the command (or API call), its one line and exit code (UsageError in the API), and the
folders around it untouched where it writes nothing. CPU, torch backend, tiny shapes; one
set of measured runs shared by the module (copied by each test that damages one), and
notebooks executed only where a check before execution cannot show the point.

1. data: merge keeps (and checks) phases; report --run <folder ending in ..>; --set-aside-corrupt
2. report -p through papermill
3. big numbers
4. notebook 01's devices figure on a CPU run beside an H200 run
5. a dying --nproc rank, Ctrl-C of the launcher
6. impossible noise files, a self-compare, --glue with --nproc, a truncated aiter CSV,
   report --runs with unreadable samples
7. the notebook API's wrong types
8. the rest
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import moe_lab as ml
from moe_lab.cli import main
from moe_lab.core.errors import UsageError
from conftest import api_refuses, cli_refused as _refused, data_copy, one_line_err as _one_line  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "custom:H=128,I=64,E=8,k=2"
SWEEP = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2", "--backends", "torch",
         "--device", "cpu", "--no-progress", "--rep-ms", "2", "--warmup-ms", "1"]
BIG = str(10 ** 30)
TIMING_COLUMNS = ("measured_us",)  # phases.parquet's measured column; the rest is the point's


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """base: the sweep of 2 points; s0, s1: the same sweep in two --shard parts."""
    d = tmp_path_factory.mktemp("runs")
    assert main(SWEEP + ["--data-dir", str(d), "--run-id", "base"]) == 0
    for i in range(2):
        assert main(SWEEP + ["--data-dir", str(d), "--run-id", f"s{i}", "--shard", f"{i}/2"]) == 0
    return d


@pytest.fixture
def data(runs, tmp_path, capsys, monkeypatch):
    """A copy of the measured runs, the data folder of the call (MOE_LAB_DATA)."""
    return data_copy(runs, tmp_path, capsys, monkeypatch)


def _point_rows(df: pd.DataFrame) -> pd.DataFrame:
    keep = [c for c in df.columns if c not in TIMING_COLUMNS]
    return df[keep].sort_values(["point_id", "phase"]).reset_index(drop=True)


# --- 1. data -----------------------------------------------------------------------------------

def test_merge_of_two_shards_gives_the_unsharded_sweeps_phases(data, capsys):
    out = data / "merged"
    assert main(["merge", str(out), str(data / "s0"), str(data / "s1")]) == 0
    merged = pd.read_parquet(out / "phases.parquet")
    whole = pd.read_parquet(data / "base" / "phases.parquet")
    assert len(merged) and merged["point_id"].nunique() == 2
    pd.testing.assert_frame_equal(_point_rows(merged), _point_rows(whole))
    # and every other file of the parts: samples per point, kernels, rows
    for name in ("samples.parquet", "kernels.parquet", "results.parquet"):
        got = pd.read_parquet(out / name)
        assert set(got["point_id"]) == set(pd.read_parquet(data / "base" / name)["point_id"])
    assert ml.open_run(out).phases["point_id"].nunique() == 2  # the ledger reads it


def test_merge_refuses_a_corrupt_phases_file_and_writes_nothing(data, capsys):
    bad = data / "s1" / "phases.parquet"
    bad.write_bytes(bad.read_bytes()[:100])
    _refused(capsys, ["merge", str(data / "merged"), str(data / "s0"), str(data / "s1")], data,
             contains=f"{bad} is unreadable or corrupt")


def test_a_merge_that_fails_while_writing_leaves_no_folder(data, capsys, monkeypatch):
    """A merge is a whole run or nothing: a write failing after the first table (a full
    disk) removes the folder it made (was: kept, holding the tables written so far)."""
    import errno
    from moe_lab.storage import merging
    real, calls = merging.atomic_write_parquet, []

    def full_after_the_first(path, df):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, df)
    monkeypatch.setattr(merging, "atomic_write_parquet", full_after_the_first)
    _refused(capsys, ["merge", str(data / "merged"), str(data / "s0"), str(data / "s1")], data,
             contains="no space left")
    assert len(calls) == 2  # it failed part-way, after a table was written


def test_report_run_of_a_folder_ending_in_dotdot(data, tmp_path, capsys):
    """`--run <run>/x/..` is the run: its pages go under OUT/<run id>/, never over a file
    beside OUT; `--run <data>/base/..` (the data folder) is no run folder."""
    nbs = _tiny_notebooks(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "index.html").write_text("mine")
    _refused(capsys, ["report", "--notebooks", str(nbs), "--run", f"{data / 'base'}/..",
                      "--out", str(reports / "o")], tmp_path,
             says=f"--run {data / 'base'}/.. is a folder of runs: only notebook 04_ takes one "
                  "(each other takes one run)")  # the data folder: 04's kind, no 04 here
    (data / "base" / "x").mkdir()
    assert main(["report", "--notebooks", str(nbs), "--run", f"{data / 'base'}/x/..",
                 "--out", str(reports / "o")]) == 0
    capsys.readouterr()
    assert (reports / "index.html").read_text() == "mine"
    assert sorted(p.name for p in (reports / "o" / "base").iterdir()) == [
        "00_tiny.html", "index.html"]


def test_set_aside_corrupt_phases_are_made_again(data, capsys):
    bad = data / "base" / "phases.parquet"
    ids = set(pd.read_parquet(bad)["point_id"])
    bad.write_bytes(bad.read_bytes()[:100])
    assert main(SWEEP + ["--data-dir", str(data), "--run-id", "base", "--set-aside-corrupt"]) == 0
    out = capsys.readouterr()
    assert "set aside" in out.err and "2 measured now" in out.out
    assert set(pd.read_parquet(bad)["point_id"]) == ids  # the file made anew, every point
    assert len(list((data / "base").glob("phases.parquet.corrupt-*"))) == 1  # kept


# --- 2. report -p through papermill -------------------------------------------------------------

def _tiny_notebooks(tmp_path) -> Path:
    """A folder with one notebook that declares `run` and `n` and prints them."""
    import nbformat
    d = tmp_path / "nbs"
    d.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("run = None  # a run\nn = 4", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print('run', run, 'n', n)")])
    nb.metadata["kernelspec"] = dict(name="python3", display_name="Python 3", language="python")
    nbformat.write(nb, d / "00_tiny.ipynb")
    return d


TAKES = "dtype, models, phase_tokens, remeasure, remeasure_tokens, run"  # notebook 01's


@pytest.mark.parametrize("name,value,says", [
    ("x;open('pwned','w').write('x')", "1", "-p \"x;open('pwned','w').write('x')\": no notebook "
     f"run here takes it (they take: {TAKES})"),
    ("", "1", f"-p '': no notebook run here takes it (they take: {TAKES})"),
    ("1abc", "1", f"-p '1abc': no notebook run here takes it (they take: {TAKES})"),
    ("rum", "base", f"-p 'rum': no notebook run here takes it (they take: {TAKES})"),
    ("dtype", "1e999", "-p dtype inf: not a finite number; give a number, a word, True, False "
     "or None"),
    ("run", "1e999", None),  # a run id as --run takes it: no such run
])
def test_report_parameters_are_checked_before_any_notebook_runs(data, tmp_path, capsys,
                                                                  monkeypatch, name, value, says):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o"
    if says is None:
        says = f"no run folder 1e999 (nor a run id under {data})"
    _refused(capsys, ["report", "--only", "01", "--run", "base", "-p", name, value, "--out",
                      str(out)] if name != "run" else
             ["report", "--only", "01", "-p", name, value, "--out", str(out)], tmp_path, says=says)
    assert not (tmp_path / "pwned").exists() and not out.exists()


def test_report_two_runs_named_are_refused(data, tmp_path, capsys):
    _refused(capsys, ["report", "--only", "01", "--run", "base", "-p", "run", "s0", "--out",
                      str(tmp_path / "o")], tmp_path,
             says="--run base and -p run s0 name two runs: give one")


def test_report_a_value_of_another_kind_than_the_default_is_refused(tmp_path, capsys):
    nbs = _tiny_notebooks(tmp_path)
    _refused(capsys, ["report", "--notebooks", str(nbs), "-p", "n", "many", "--out",
                      str(tmp_path / "o")], tmp_path,
             says="-p n 'many': 00_tiny.ipynb takes a number (its default is 4)")


@pytest.mark.parametrize("only,name,value,kind", [
    ("03", "ledger_runs", "7", "a number"),  # was: FAIL 'int' object is not iterable, exit 0
    ("01", "dtype", "5", "a number"),        # was: 'run ...: 0 points (0 ok)', as if empty
    ("04", "show", "True", "True or False"),
    ("05", "vllm_runs", "1.5", "a number"),
])
def test_report_a_parameter_defaulting_to_none_takes_a_name(tmp_path, capsys, only, name,
                                                              value, kind):
    """The notebooks' parameters whose default is None (run ids, a dtype, a device, a path, a
    status) are refused a number or a flag before any notebook runs; a name or None passes."""
    from moe_lab.commands.report import NOTEBOOKS_DIR
    from moe_lab.report import check_parameter, notebook_parameters, parse_value
    nb = next(NOTEBOOKS_DIR.glob(f"{only}_*.ipynb"))
    _refused(capsys, ["report", "--only", only, "-p", name, value, "--out", str(tmp_path / "o")],
             tmp_path, contains=f"-p {name} {parse_value(value)!r}: {nb.name} takes a name "
                                f"(run ids, a dtype, a device, a path, a status) or None, its "
                                f"default; not {kind}")
    declared = {nb.name: notebook_parameters(str(nb))}
    assert check_parameter(name, parse_value("fp8-channel"), declared) == "fp8-channel"
    assert check_parameter(name, parse_value("None"), declared) is None


def test_report_a_list_parameter_takes_a_comma_separated_list(tmp_path, capsys):
    """Notebook 03's `tokens` and 01's `phase_tokens` default to lists of token counts: `-p
    tokens 1,64` handed the notebook the string '1,64' (03 then failed on `str / float`)
    and `-p tokens abc` ran every notebook before 03 failed; the README promises a value
    unlike its default refused before any notebook runs. Now 1,64 is [1, 64], 64 is [64],
    and anything else is one line, exit 2, nothing run."""
    import nbformat
    d = tmp_path / "nbs"
    d.mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("ts = [1, 64, 1024]", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print('ts', repr(ts), sum(ts))")])
    nb.metadata["kernelspec"] = dict(name="python3", display_name="Python 3", language="python")
    nbformat.write(nb, d / "00_list.ipynb")
    for bad in ("abc", "1,x", "2.5", "True", "1,,2"):
        _refused(capsys, ["report", "--notebooks", str(d), "-p", "ts", bad, "--out",
                          str(tmp_path / "o")], tmp_path,
                 contains="00_list.ipynb takes a comma-separated list of whole numbers, e.g. "
                          "1,64,1024 (its default is [1, 64, 1024])")
    for given, want in (("1,64", "[1, 64]"), ("64", "[64]")):
        assert main(["report", "--notebooks", str(d), "-p", "ts", given, "--out",
                     str(tmp_path / given)]) == 0
        capsys.readouterr()
        assert f"ts {want}" in (tmp_path / given / "00_list.html").read_text()


def test_report_p_run_is_run_and_papermill_injects(data, tmp_path, capsys):
    nbs = _tiny_notebooks(tmp_path)
    assert main(["report", "--notebooks", str(nbs), "-p", "run", "base", "-p", "n", "7",
                 "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    page = (tmp_path / "o" / "base" / "00_tiny.html").read_text()
    assert "run base n 7" in page and "injected-parameters" in page


# --- 3. big numbers ------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,says", [
    (["--seed", BIG], f"--seed {BIG}: at most 4294967295 (give a whole number >= 0)"),
    (["--warmup-ms", "1e308"], "--warmup-ms 1e+308: at most 60000 milliseconds (give a finite "
     "number >= 0 of milliseconds)"),
    (["--rep-ms", "1e308"], "--rep-ms 1e+308: at most 60000 milliseconds (give a positive, "
     "finite number of milliseconds)"),
    (["--point-timeout", "1e308"], "--point-timeout 1e+308: at most 86400 seconds (give a "
     "positive, finite number of seconds)"),
    (["--nproc", "2", "--dist-reps", str(10 ** 12)], f"--dist-reps {10 ** 12}: at most 100000 "
     "(give a whole number >= 1)"),
    (["--models", f"custom:H={BIG},I=64,E=8,k=2"], f"custom model H={BIG} is too large: H and I "
     "at most 262144, E at most 4096, layers at most 1024"),
])
def test_sweep_refuses_huge_numbers_and_makes_no_folder(tmp_path, capsys, extra, says):
    argv = SWEEP + ["--data-dir", str(tmp_path / "d"), "--run-id", "r"]
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    _refused(capsys, argv, tmp_path, says=says)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("argv,says", [
    (["profile", "--model", MODEL, "--tokens", "1", "--tp", "1", "--device", "cpu", "--iters",
      str(10 ** 12)], f"--iters {10 ** 12}: at most 10000 (give a whole number >= 1)"),
    (["check", "--model", MODEL, "--tokens", "1", "--tp", "1", "--device", "cpu", "--backends",
      "torch", "--seed", BIG], f"--seed {BIG}: at most 4294967295 (give a whole number >= 0)"),
    (["compare", "base", "s0", "--resamples", str(10 ** 12)],
     f"--resamples {10 ** 12}: at most 100000 (give a whole number >= 1)"),
])
def test_other_verbs_refuse_huge_numbers(data, tmp_path, capsys, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, argv, tmp_path, says=says)


@pytest.mark.parametrize("noise,why", [
    (1e308, "mode 'eager' noise 1e+308"), (float("nan"), "mode 'eager' noise nan"),
    (-1.0, "mode 'eager' noise -1.0")])
def test_a_calibration_file_with_an_impossible_noise_is_refused(data, tmp_path, capsys, noise, why):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(dict(device="cpu", modes=dict(eager=dict(noise=noise)))))
    line = _refused(capsys, ["compare", str(data / "base"), str(data / "s0"), "--calibration",
                             str(cal), "--out", str(tmp_path / "cmp")], tmp_path,
                    contains=f"{cal} is not a noise calibration (ValueError: {why}")
    assert "from 0 to 5" in line


def test_the_api_refuses_huge_numbers_in_the_same_words(tmp_path):
    with pytest.raises(UsageError) as exc:
        ml.measure(MODEL, [1], backends="torch", tp=1, device="cpu", run=tmp_path / "r",
                   seed=10 ** 30)
    assert str(exc.value) == f"seed {10 ** 30}: at most 4294967295 (give a whole number >= 0)"
    with pytest.raises(UsageError) as exc:
        ml.measure(MODEL, [1], backends="torch", tp=1, device="cpu", run=tmp_path / "r",
                   rep_ms=1e308)
    assert str(exc.value) == ("rep_ms 1e+308: at most 60000 milliseconds (give a positive, "
                              "finite number of milliseconds)")
    assert not list(tmp_path.iterdir())


# --- 4. notebook 01's devices figure on a CPU run beside an H200 run ---------------------------

def test_devices_side_by_side_with_a_cpu_run_beside_an_h200_run(data, monkeypatch):
    """The cell of notebook 01 that raised `Length of values (7) does not match length of
    index`: an H200 run without a config column (h200-seed4) beside a CPU run."""
    from moe_lab.plots import devices as dv
    os.symlink(ROOT / "data" / "runs" / "h200-seed4-20261129", data / "h200-seed4-20261129")
    h200 = dv.richest_run()
    assert h200 == "h200-seed4-20261129"
    side = dv.rows_for([h200] + dv.imported_runs())
    assert len(side) and side["series"].map(lambda s: s.startswith("NVIDIA H200: ")).all()


# --- 5. a dying --nproc rank ---------------------------------------------------------------------

def _nproc_sweep(tmp_path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "moe_lab", "sweep", "--models", MODEL, "--tp", "1", "--tokens",
            "1,2,4,8,16,32,64", "--backends", "torch", "--dtype", "fp32", "--device", "cpu",
            "--no-progress", "--no-profile", "--rep-ms", "300", "--warmup-ms", "1",
            "--data-dir", str(tmp_path), "--run-id", "r", "--nproc", "2", "--parallel",
            "ep-allreduce", "--dist-reps", "2"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _rank_pids(launcher: int) -> dict[int, int]:
    """rank -> pid of the launcher's live ranks."""
    out = {}
    for d in Path("/proc").iterdir():
        try:
            if not d.name.isdigit() or int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) \
                    != launcher:
                continue
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = [e for e in env if e.startswith(b"RANK=")]
        if rank:
            out[int(rank[0][5:])] = int(d.name)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("rank,sig", [(1, signal.SIGKILL), (0, signal.SIGTERM), (None, signal.SIGINT)],
                         ids=["rank1-SIGKILL", "rank0-SIGTERM", "launcher-Ctrl-C"])
def test_a_dying_rank_is_one_line_and_the_manifest_is_not_left_running(tmp_path, rank, sig):
    p = _nproc_sweep(tmp_path)
    man = tmp_path / "r" / "manifest.json"
    try:
        t0 = time.time()
        while not ((tmp_path / "r" / "results.parquet").exists() and len(_rank_pids(p.pid)) == 2):
            assert p.poll() is None, p.communicate()
            assert time.time() - t0 < 120, "the sweep never started"
            time.sleep(0.05)
        os.kill(p.pid if rank is None else _rank_pids(p.pid)[rank], sig)
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
    status = json.loads(man.read_text())["status"]
    if rank is None:  # Ctrl-C: the ranks hear SIGINT too, and it is said so
        assert p.returncode == 130 and status == "interrupted: SIGINT (Ctrl-C)", (err, status)
        return
    name = signal.Signals(sig).name
    assert p.returncode == 1
    assert err.strip() == (f"moe-lab: error: rank {rank} of 2 was killed by {name}; the other "
                           "ranks were stopped, what was measured is saved; rerun the same "
                           "command to resume"), err
    assert status == f"failed: rank {rank} was killed by {name}"
    res = pd.read_parquet(tmp_path / "r" / "results.parquet")  # what was measured: whole
    assert len(res) and res["point_id"].is_unique


# --- 6. impossible inputs used as if they were fine -----------------------------------------------

def test_compare_by_one_value_twice_is_refused(data, tmp_path, capsys):
    _refused(capsys, ["compare", "base", "--by", "backend", "--values", "torch,torch", "--out",
                      str(tmp_path / "cmp")], tmp_path,
             says="--values torch,torch: one value twice compares the run with itself; give two "
                  "values")


def test_glue_with_nproc_is_refused(tmp_path, capsys):
    _refused(capsys, SWEEP + ["--data-dir", str(tmp_path / "d"), "--nproc", "2", "--glue",
                              "naive"], tmp_path,
             says="--glue naive with --nproc: a distributed sweep measures the default glue "
                  "only; leave --glue out, or measure it without --nproc")


def test_a_truncated_aiter_table_is_refused_not_blamed_on_amds_tuner(tmp_path, capsys):
    from test_aiter_tables import synthetic
    table = synthetic(tmp_path)
    text = table.read_bytes().rstrip(b"\n")
    table.write_bytes(text[:text.rindex(b",") - 3])  # cut mid-row, as a copy cut short
    lines = table.read_bytes().split(b"\n")
    _refused(capsys, ["import-aiter", "--file", str(table), "--out", str(tmp_path / "aiter")],
             tmp_path, says=f"{table} is unreadable or corrupt (truncated: its last line (line "
                            f"{len(lines)}) has {lines[-1].count(b',') + 1} of "
                            f"{lines[0].count(b',') + 1} fields and no end of line)")


def test_report_runs_refuses_unreadable_samples_as_compare_does(data, tmp_path, capsys):
    bad = data / "s0" / "samples.parquet"
    bad.write_bytes(b"not parquet")
    says = f"{bad} is unreadable or corrupt"
    _refused(capsys, ["report", "--runs", "base,s0", "--out", str(tmp_path / "rev")], tmp_path,
             contains=says)
    _refused(capsys, ["compare", "base", "s0", "--out", str(tmp_path / "cmp")], tmp_path,
             contains=says)


# --- 7. the notebook API ---------------------------------------------------------------------------

def _measure(tmp_path, **kw):
    args = dict(models=MODEL, tokens=[1], backends="torch", tp=1, device="cpu",
                run=tmp_path / "r", rep_ms=2, warmup_ms=1, profile=False)
    args.update(kw)
    return ml.measure(**args)


def _check(**kw):
    return ml.check(**dict(dict(model=MODEL, tokens=[1], backends="torch", tp=1, device="cpu"), **kw))


def _profile(**kw):
    return ml.profile(**dict(dict(model=MODEL, tokens=1, tp=1, device="cpu"), **kw))


DTYPES = "bf16, fp16, fp32, fp8-block128, fp8-channel, fp8-tensor"
ROUTING = "a routing (uniform, balanced, zipf:S, hot:P), a comma string or a list of them"


@pytest.mark.parametrize("call,says", [
    (lambda t: _measure(t, ep=None), "ep None: give a whole number >= 1"),
    (lambda t: _measure(t, dtype=None), f"dtype None: give one of {DTYPES}"),
    (lambda t: _measure(t, seed="x"), "seed 'x': give a whole number >= 0"),
    (lambda t: _measure(t, bogus_option=1), "measure() got an unknown option 'bogus_option'; "
     "it takes profile, warmup_ms, rep_ms, compile_budget_s, point_timeout_s, traces"),
    (lambda t: _measure(t, tp=8.5), "tp 8.5: give a whole number >= 1"),
    (lambda t: _measure(t, routing=5), f"routing 5: give {ROUTING}"),
    (lambda t: _measure(t, glue="fast"), "glue 'fast': give one or more of fused, naive, aiter"),
    (lambda t: ml.runs(data_dir=5), "data_dir=5: give a folder or file path (str or Path), or None"),
    (lambda t: ml.runs(has=["x"]), "has ['x']: give None or a kind of rows: 'ok', 'compile', "
     "'distributed' or a mode name such as 'graph'"),
    # these two were an empty table: a typo read as "no runs"
    (lambda t: ml.runs(data_dir="/nonexistent/moe-lab-runs"),
     "data_dir '/nonexistent/moe-lab-runs': no such folder"),
    (lambda t: ml.runs(has="grpah"), "has 'grpah': give None or a kind of rows: 'ok', 'compile', "
     "'distributed' or a mode name such as 'graph'"),
    # was "{cwd} is a folder but not a run folder" (Path('') is the working folder)
    (lambda t: ml.open_run(""), "run '': give a run folder (a path) or a run id (a str)"),
    (lambda t: _check(model=5), "model 5: give a model name, e.g. 'qwen3-30b-a3b' or "
     "'custom:H=4096,I=14336,E=8,k=2'"),
    (lambda t: _check(seed=None), "seed None: give a whole number >= 0"),
    (lambda t: _profile(trace=5), "trace=5: give a folder or file path (str or Path)"),
])
def test_the_api_refuses_wrong_types_in_one_line(tmp_path, call, says):
    api_refuses(call, says, tmp_path)


def test_the_api_refuses_a_trace_path_under_a_file(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(UsageError) as exc:
        _profile(trace=str(f / "t.json.gz"))
    assert str(exc.value) == (f"trace {f / 't.json.gz'}: {f} is a file, not a folder; give a "
                              "new path or remove the file")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("raised,says", [
    (PermissionError(errno.EACCES, "Permission denied"), "Permission denied"),
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on the device"),
], ids=["read-only", "full"])
def test_the_api_says_a_read_only_or_full_data_folder_in_one_line(tmp_path, monkeypatch, raised,
                                                                 says):
    import moe_lab.core.atomic as atomic

    def refuse(path, write):
        raised.filename = str(path)
        raise raised
    monkeypatch.setattr(atomic, "_atomic_write_bytes", refuse)
    with pytest.raises(UsageError) as exc:
        _measure(tmp_path)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_the_api_measures_a_glue_as_the_cli_does(tmp_path):
    rows = _measure(tmp_path, glue=["naive"], dtype="fp32")
    assert len(rows) == 1 and rows["status"].iloc[0] == "ok"


# --- 8. the rest -----------------------------------------------------------------------------------

def test_report_on_corrupt_notebooks_is_one_line_and_exit_2(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    (nbs / "01_x.ipynb").write_text('{"cells": [')
    _refused(capsys, ["report", "--notebooks", str(nbs), "--out", str(tmp_path / "o")], tmp_path,
             contains=f"{nbs / '01_x.ipynb'} is unreadable or corrupt (")


def test_roofline_annotate_with_a_model_or_tokens_is_refused(data, capsys):
    _refused(capsys, ["roofline", "--annotate", str(data / "base"), "--model", "deepseek-r1",
                      "--tokens", "64"], data,
             says="--annotate recomputes a run's own points on its own device: --model, --tokens "
                  "would be ignored; leave them out")


def test_a_point_stopped_by_its_time_limit_is_a_timeout_row_that_says_the_limit(tmp_path, capsys):
    argv = SWEEP + ["--data-dir", str(tmp_path), "--run-id", "r", "--no-profile",
                    "--point-timeout", "0.05"]
    argv[argv.index("--rep-ms") + 1] = "500"
    assert main(argv) == 0
    res = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert len(res) == 2  # SWEEP's two token counts: all() of no row passes
    assert (res["status"] == "timeout").all(), res[["status", "error"]]
    assert res["error"].str.contains("exceeded 0.05 s").all(), res["error"].tolist()


def test_a_full_disk_leaves_no_partial_compare(data, tmp_path, capsys, monkeypatch):
    import moe_lab.core.atomic as atomic
    real = atomic._atomic_write_bytes

    def full_at_the_png(path, write):
        if str(path).endswith(".png"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, write)
    monkeypatch.setattr(atomic, "_atomic_write_bytes", full_at_the_png)
    _refused(capsys, ["compare", "base", "s0", "--out", str(tmp_path / "cmp")], tmp_path,
             contains="no space left on the device")


def test_a_full_disk_leaves_no_review_figures_without_their_page(data, tmp_path, capsys,
                                                                monkeypatch):
    real = os.replace

    def full_at_the_page(src, dst, *a, **kw):
        if str(dst).endswith("index.html"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real(src, dst, *a, **kw)
    monkeypatch.setattr(os, "replace", full_at_the_page)
    assert main(["report", "--runs", "base", "--out", str(tmp_path / "rev")]) == 2
    assert "no space left on the device" in _one_line(capsys)
    assert not [p for p in (tmp_path / "rev").rglob("*") if p.is_file()]


def test_a_full_disk_leaves_no_empty_lock_file(tmp_path, capsys, monkeypatch):
    from moe_lab.storage import runlock
    real = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        runlock.acquire(tmp_path / "r", "test")
    monkeypatch.setattr(os, "write", real)
    assert not (tmp_path / "r").exists()


def test_report_run_into_an_out_that_is_a_file_is_refused_before_any_notebook(data, tmp_path,
                                                                              capsys):
    f = tmp_path / "out.txt"
    f.write_text("mine")
    _refused(capsys, ["report", "--run", "base", "--out", str(f)], tmp_path,
             says=f"--out {f}: {f} is a file, not a folder; give a new path or remove the file")


def test_merge_of_an_empty_source_is_refused(data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(data)
    _refused(capsys, ["merge", str(tmp_path / "m"), "s0", ""], tmp_path,
             says="a value of RUNS is empty")


def test_one_corrupt_run_does_not_block_the_default_run(data, capsys):
    bad = data / "s1" / "results.parquet"
    bad.write_bytes(b"not parquet")
    found = ml.runs()
    assert "s1" not in set(found["run_id"]) and {"base", "s0"} <= set(found["run_id"])
    assert ml.open_run().run_id in {"base", "s0"}
    err = capsys.readouterr().err
    assert f"passed over run s1: {bad} is unreadable or corrupt" in err


def test_one_corrupt_calibration_file_is_said_and_compare_goes_on(data, tmp_path, capsys,
                                                                  monkeypatch):
    from moe_lab.analysis import noise
    folder = tmp_path / "noise"
    folder.mkdir()
    device = ml.open_run(data / "base").device
    (folder / f"{noise.slug(device)}.json").write_text("{not json")
    monkeypatch.setattr(noise, "noise_dirs", lambda: [folder])
    assert main(["compare", "base", "s0", "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr()
    assert f"{folder / (noise.slug(device) + '.json')} is not a noise calibration" in out.err
    assert f"no calibration for {device} eager" in out.out
