"""Every bad input refused in one line, exit 2, the folders around it byte-identical
(issue 25):

1. a resume with settings that change what a row means (seed, dtype, timing, routing) is
   refused naming them; no manifest rewrite, no invocation left "running"; a resume that
   leaves --warmup-ms/--rep-ms out measures as its run did
2. run ids are names, not paths (sweep and tune)
3. numbers in their ranges (sweep, tune, and ml.measure with the same one line)
4. a run whose results lack point_id, whose columns have other types, or whose manifest
   is of another schema is refused by a resume (also with --set-aside-corrupt)
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import moe_lab as ml
from moe_lab.core.atomic import atomic_write_parquet
from moe_lab.cli import main
from moe_lab.core.errors import UsageError
from conftest import folder_tree as _tree, one_line_err as _one_line  # noqa: E402

MODEL = "custom:H=64,I=32,E=4,k=2"
SWEEP = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2", "--backends", "torch",
         "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms", "2",
         "--warmup-ms", "1", "--run-id", "r"]
TUNE = ["tune", "--backend", "aiter-triton", "--models", MODEL, "--tp", "1", "--ep", "1",
        "--tokens", "1", "--dtype", "fp32", "--device", "cpu", "--no-progress"]




def _with(argv: list[str], flag: str, value: str) -> list[str]:
    """argv with `flag` set to `value` (replaced where given, else added)."""
    a = list(argv)
    if flag in a:
        a[a.index(flag) + 1] = value
    else:
        a += [flag, value]
    return a


@pytest.fixture
def run(tmp_path, capsys):
    assert main(SWEEP + ["--data-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    return tmp_path / "r"


# --- 1. a resume with other settings ----------------------------------------------------------

@pytest.mark.parametrize("flag,value,says", [
    ("--seed", "7", "--seed 0 there, 7 now"),
    ("--dtype", "bf16", "--dtype fp32 there, bf16 now"),
    ("--rep-ms", "5", "--rep-ms 2.0 there, 5.0 now"),
    ("--warmup-ms", "3", "--warmup-ms 1.0 there, 3.0 now"),
    ("--routing", "zipf:1.2", "--routing uniform there, zipf:1.2 now"),
])
def test_a_resume_with_other_settings_is_refused_and_the_folder_is_byte_identical(
        run, capsys, flag, value, says):
    around = _tree(run.parent)
    assert main(_with(SWEEP, flag, value) + ["--data-dir", str(run.parent)]) == 2
    err = _one_line(capsys)
    assert says in err and "other settings" in err and "another run id" in err
    assert _tree(run.parent) == around  # no manifest rewrite, no lock file, no new row
    man = json.loads((run / "manifest.json").read_text())
    assert [i["status"] for i in man["invocations"]] == ["complete"]


def test_two_settings_differing_are_both_named(run, capsys):
    argv = _with(_with(SWEEP, "--seed", "7"), "--rep-ms", "5") + ["--data-dir", str(run.parent)]
    around = _tree(run.parent)
    assert main(argv) == 2
    err = _one_line(capsys)
    assert "--seed 0 there, 7 now" in err and "--rep-ms 2.0 there, 5.0 now" in err
    assert _tree(run.parent) == around


def test_a_resume_that_leaves_the_timing_out_measures_as_its_run_did(run, capsys):
    bare = [a for i, a in enumerate(SWEEP) if a not in ("--rep-ms", "--warmup-ms")
            and SWEEP[i - 1] not in ("--rep-ms", "--warmup-ms")]
    assert main(_with(bare, "--tokens", "1,2,4") + ["--data-dir", str(run.parent)]) == 0
    assert "1 measured now, 2 already there" in capsys.readouterr().out
    man = json.loads((run / "manifest.json").read_text())
    assert man["config"]["rep_ms"] == 2.0 and man["config"]["warmup_ms"] == 1.0
    assert [i["status"] for i in man["invocations"]] == ["complete", "complete"]
    # the API alike: measure(run=...) without rep_ms resumes with the run's
    df = ml.measure(MODEL, [1, 2, 4], backends="torch", tp=1, dtype="fp32", device="cpu", run=run)
    assert len(df) == 3
    with pytest.raises(UsageError, match="--rep-ms 2.0 there, 9 now"):
        ml.measure(MODEL, [1, 2], backends="torch", tp=1, dtype="fp32", device="cpu", run=run,
                   rep_ms=9)


def test_a_sweep_into_a_tune_or_import_folder_is_refused(tmp_path, capsys):
    for kind in ("tune", "import"):
        folder = tmp_path / kind
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps(dict(run_id=kind, kind=kind, config={})))
        around = _tree(tmp_path)
        assert main(SWEEP[:-1] + [kind, "--data-dir", str(tmp_path)]) == 2
        assert f"holds a {kind} run, not a sweep run" in _one_line(capsys)
        assert _tree(tmp_path) == around


# --- 2. run ids are names ------------------------------------------------------------------

BAD_IDS = ["../escape", "a/b", "/tmp/abs-run", ".", "..", ".hidden", "a\\b"]


@pytest.mark.parametrize("verb", ["sweep", "tune"])
@pytest.mark.parametrize("run_id", BAD_IDS)
def test_a_run_id_that_is_a_path_is_refused(tmp_path, capsys, verb, run_id):
    data = tmp_path / "data" / "runs"
    data.mkdir(parents=True)
    argv = (SWEEP[:-1] if verb == "sweep" else TUNE + ["--run-id"]) + [run_id, "--data-dir", str(data)]
    around = _tree(tmp_path)
    assert main(argv) == 2
    err = _one_line(capsys)
    assert f"--run-id {run_id!r}: a run id is a folder name" in err
    assert _tree(tmp_path) == around  # nothing inside, beside or above the data folder
    assert not Path("/tmp/abs-run").exists()


# --- 3. numbers in their ranges -------------------------------------------------------------

@pytest.mark.parametrize("flag,value,says", [
    ("--rep-ms", "-1", "--rep-ms -1.0: give a positive, finite number of milliseconds"),
    ("--rep-ms", "0", "--rep-ms 0.0: give a positive, finite number of milliseconds"),
    ("--rep-ms", "nan", "--rep-ms nan: give a positive, finite number of milliseconds"),
    ("--warmup-ms", "inf", "--warmup-ms inf: give a finite number >= 0 of milliseconds"),
    ("--warmup-ms", "-1", "--warmup-ms -1.0: give a finite number >= 0 of milliseconds"),
    ("--point-timeout", "0", "--point-timeout 0.0: give a positive, finite number of seconds"),
    ("--point-timeout", "-3", "--point-timeout -3.0: give a positive, finite number of seconds"),
    ("--traces", "-1", "--traces -1: give a whole number >= 0"),
    ("--nproc", "0", "--nproc 0: give a whole number >= 1"),
])
def test_a_sweep_number_out_of_range_is_refused(tmp_path, capsys, flag, value, says):
    around = _tree(tmp_path)
    assert main(_with(SWEEP, flag, value) + ["--data-dir", str(tmp_path)]) == 2
    assert _one_line(capsys) == f"moe-lab: error: {says}"
    assert _tree(tmp_path) == around


@pytest.mark.parametrize("flag,value", [("--rep-ms", "0"), ("--rep-ms", "nan"),
                                        ("--warmup-ms", "inf")])
def test_a_tune_number_out_of_range_is_refused(tmp_path, capsys, flag, value):
    around = _tree(tmp_path)
    assert main(TUNE + [flag, value, "--data-dir", str(tmp_path)]) == 2
    assert f"{flag} {float(value)!r}: give" in _one_line(capsys)
    assert _tree(tmp_path) == around


@pytest.mark.parametrize("kw,says", [
    (dict(rep_ms=-1), "rep_ms -1: give a positive, finite number of milliseconds"),
    (dict(rep_ms=float("nan")), "rep_ms nan: give a positive, finite number of milliseconds"),
    (dict(warmup_ms=float("inf")), "warmup_ms inf: give a finite number >= 0 of milliseconds"),
    (dict(point_timeout_s=0), "point_timeout_s 0: give a positive, finite number of seconds"),
    (dict(traces=-1), "traces -1: give a whole number >= 0"),
    (dict(traces=1.5), "traces 1.5: give a whole number >= 0"),
    (dict(rep_ms="5"), "rep_ms '5': give a positive, finite number of milliseconds"),
])
def test_the_api_refuses_the_same_numbers_in_the_same_words(tmp_path, kw, says):
    with pytest.raises(UsageError) as exc:
        ml.measure(MODEL, [1], backends="torch", tp=1, dtype="fp32", device="cpu",
                   run=tmp_path / "r", **kw)
    assert str(exc.value) == says
    assert not list(tmp_path.iterdir())


def test_the_api_refuses_a_run_that_is_a_file_or_not_a_path(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(UsageError, match="is a file, not a run folder"):
        ml.measure(MODEL, [1], backends="torch", tp=1, dtype="fp32", device="cpu", run=f)
    with pytest.raises(UsageError, match="give a folder path"):
        ml.measure(MODEL, [1], backends="torch", tp=1, dtype="fp32", device="cpu", run=123)
    assert f.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# --- 4. files of another schema ----------------------------------------------------------------

def _results_without_point_id(run):
    df = pd.read_parquet(run / "results.parquet").drop(columns=["point_id"])
    atomic_write_parquet(run / "results.parquet", df)
    return "results.parquet", "no point_id column"


def _results_of_other_types(run):
    df = pd.read_parquet(run / "results.parquet")
    df["tokens"] = df["tokens"].astype(str) + " tokens"
    atomic_write_parquet(run / "results.parquet", df)
    return "results.parquet", "column 'tokens' is "


def _manifest_of_another_schema(run):
    m = json.loads((run / "manifest.json").read_text())
    m.update(invocations="not a list", config=["a", "list"])
    (run / "manifest.json").write_text(json.dumps(m))
    return "manifest.json", "manifest key 'config' is list"


def _manifest_invocations_of_strings(run):
    m = json.loads((run / "manifest.json").read_text())
    m["invocations"] = ["one", "two"]
    (run / "manifest.json").write_text(json.dumps(m))
    return "manifest.json", "holds a str, not an object per invocation"


def _kernels_without_point_id(run):
    df = pd.read_parquet(run / "kernels.parquet").drop(columns=["point_id"])
    atomic_write_parquet(run / "kernels.parquet", df)
    return "kernels.parquet", "no point_id column"


@pytest.mark.parametrize("set_aside", [False, True])
@pytest.mark.parametrize("damage", [_results_without_point_id, _results_of_other_types,
                                    _manifest_of_another_schema, _manifest_invocations_of_strings,
                                    _kernels_without_point_id])
def test_a_resume_of_a_run_of_another_schema_is_refused_byte_identical(run, capsys, damage, set_aside):
    name, says = damage(run)
    around = _tree(run.parent)
    argv = SWEEP + ["--data-dir", str(run.parent)] + (["--set-aside-corrupt"] if set_aside else [])
    assert main(argv) == 2
    err = _one_line(capsys)
    assert str(run / name) in err and says in err and "corrupt" in err
    assert _tree(run.parent) == around  # no manifest rewritten, no invocation left running
    man = run / "manifest.json"
    assert '"running"' not in man.read_text()


# --- the same for tune ----------------------------------------------------------------------

@pytest.fixture
def chunked():
    """The tunable CPU test backend (tests/data/plugin/torch_chunked.py), registered."""
    from conftest import plugin_backend
    for _ in plugin_backend("torch_chunked.py", "torch-chunked"):
        yield "torch-chunked"


def test_a_tune_resume_with_other_settings_or_into_a_sweep_run_is_refused(tmp_path, chunked, run):
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.tuning import Tuner
    shards = [[make_problem(MODEL, 16, "fp32", 1, 1)]]

    def tune(folder, **kw):
        kw = dict(dict(rep_ms=2, warmup_ms=1, progress=False), **kw)
        return Tuner("torch-chunked", "cpu", folder, tmp_path / "configs", **kw).run(shards)
    assert len(tune(tmp_path / "t")) == 1
    around = _tree(tmp_path)
    for kw, says in ((dict(seed=7), "--seed 0 there, 7 now"),
                     (dict(rep_ms=5), "--rep-ms 2 there, 5 now"),
                     (dict(routing="zipf:1.2"), "--routing uniform there, zipf:1.2 now")):
        with pytest.raises(UsageError, match="other settings") as exc:
            tune(tmp_path / "t", **kw)
        assert says in str(exc.value) and len(str(exc.value).splitlines()) == 1
        assert _tree(tmp_path) == around
    with pytest.raises(UsageError, match="holds a sweep run, not a tune run"):
        tune(run)  # the sweep run of the fixture
    assert _tree(tmp_path) == around
    assert len(tune(tmp_path / "t")) == 1  # the same settings resume
