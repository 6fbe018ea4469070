"""The rest of issue 25 (nothing lost, every bad input refused), each case with its one line
and exit code, and the folders around it byte-identical where it writes nothing:

1. a SIGKILLed `sweep --nproc 2` parent takes its workers with it; their spec files go
2. SIGTERM to a sweep: exit 143, the manifest says interrupted, never "running"
3. a full disk mid-sweep: one line, exit 2, the rows written before intact
4. run files get the user's umask, not mkstemp's 0600
5. no row without a commit: no .git and no MOE_LAB_GIT_COMMIT record "unknown", warned
6. merge and import-aiter manifests carry their command and times
7. compare, merge, report --runs and roofline --annotate refuse a run of another schema
8. the notebook API refuses bad values in one UsageError line
9. CLI values that were accepted with exit 0
10. `compare <one run>` is one line and exit 2 every time (it once aborted, exit 134)
11. a resume re-measures `failed` rows (their cause may be what the rerun corrected)
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import moe_lab as ml
from moe_lab.cli import main
from moe_lab.core.errors import UsageError
from conftest import api_refuses, folder_tree as _tree, one_line_err as _one_line  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "custom:H=64,I=32,E=4,k=2"
SWEEP = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2", "--backends", "torch",
         "--dtype", "fp32", "--device", "cpu", "--no-progress", "--no-profile", "--rep-ms", "2",
         "--warmup-ms", "1"]




def _env(**extra) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One tiny measured run, copied by each test that damages or reads it."""
    d = tmp_path_factory.mktemp("measured")
    assert main(SWEEP + ["--data-dir", str(d), "--run-id", "r"]) == 0
    return d / "r"


@pytest.fixture
def run(measured, tmp_path, capsys):
    capsys.readouterr()
    shutil.copytree(measured, tmp_path / "r")
    return tmp_path / "r"


# --- 4. the user's umask ------------------------------------------------------------------------

@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_run_files_get_the_users_umask(tmp_path, capsys, umask, mode):
    old = os.umask(umask)
    try:
        assert main(SWEEP + ["--data-dir", str(tmp_path), "--run-id", "r"]) == 0
    finally:
        os.umask(old)
    files = sorted((tmp_path / "r").iterdir())
    assert {p.name for p in files} >= {"manifest.json", "results.parquet", "kernels.parquet"}
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == mode, (p.name, oct(p.stat().st_mode))


# --- 5. no row without a commit -----------------------------------------------------------------

def test_no_git_and_no_commit_given_records_unknown_and_warns(tmp_path, capsys, monkeypatch):
    import moe_lab.core.environment as environment
    copy = tmp_path / "copy"  # a checkout copied without its .git
    copy.mkdir()
    monkeypatch.setattr(environment, "REPO_ROOT", copy)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git looks no higher
    monkeypatch.delenv("MOE_LAB_GIT_COMMIT", raising=False)
    assert main(SWEEP + ["--data-dir", str(tmp_path), "--run-id", "r"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["moe-lab: warning: no git commit known (no .git here and MOE_LAB_GIT_COMMIT "
                   "unset): rows record git_commit 'unknown'; set MOE_LAB_GIT_COMMIT=<sha> to "
                   "name it"]
    res = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert len(res) == 2 and (res["git_commit"] == "unknown").all()
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["environment"]["git_commit"] == "unknown"
    assert man["warnings"] == [environment.NO_COMMIT_WARNING]
    assert man["invocations"][0]["git_commit"] == "unknown"
    # a resume with a commit known keeps the warning: the earlier rows still say unknown
    monkeypatch.setenv("MOE_LAB_GIT_COMMIT", "2cd3e71")
    assert main(SWEEP + ["--data-dir", str(tmp_path), "--run-id", "r"]) == 0
    assert "warning" not in capsys.readouterr().err
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["warnings"] == [environment.NO_COMMIT_WARNING]


# --- 6. merge and import-aiter manifests: command and times --------------------------------------

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}"


def _has_times(man: dict, command: str, kind: str) -> None:
    import re
    assert man["command"] == command
    assert re.fullmatch(STAMP, man["finished"])
    [inv] = man["invocations"]
    assert inv["command"] == command and inv["status"] == "complete" and inv["kind"] == kind
    assert re.fullmatch(STAMP, inv["started"]) and re.fullmatch(STAMP, inv["finished"])
    assert inv["started"] <= inv["finished"] and inv["wall_s"] >= 0


def test_a_merge_manifest_carries_its_command_and_times(tmp_path, capsys):
    parts = [tmp_path / "p0", tmp_path / "p1"]
    for i, part in enumerate(parts):
        assert main(SWEEP + ["--data-dir", str(tmp_path), "--run-id", part.name,
                             "--shard", f"{i}/2"]) == 0
    capsys.readouterr()
    out = tmp_path / "merged"
    assert main(["merge", str(out), *map(str, parts)]) == 0
    man = json.loads((out / "manifest.json").read_text())
    _has_times(man, f"moe-lab merge {out} {parts[0]} {parts[1]}", "merge")
    assert man["invocations"][0]["sources"] == ["p0", "p1"]
    assert man["started"] == min(json.loads((p / "manifest.json").read_text())["started"]
                                 for p in parts)
    assert sorted(man["merged_from"]) == ["p0", "p1"]


def test_an_import_manifest_carries_its_command_and_times(tmp_path, capsys):
    from test_aiter_tables import synthetic
    table = synthetic(tmp_path)
    out = tmp_path / "aiter"
    assert main(["import-aiter", "--file", str(table), "--out", str(out)]) == 0
    man = json.loads((out / "manifest.json").read_text())
    _has_times(man, f"moe-lab import-aiter --file {table} --out {out}", "import")
    assert man["started"] == ""  # on purpose: AMD's tuner recorded no time (see its note)


# --- 7. readers refuse a run of another schema -----------------------------------------------------

def _drop(run, column):
    df = pd.read_parquet(run / "results.parquet").drop(columns=[column])
    df.to_parquet(run / "results.parquet", index=False)
    return f"{run / 'results.parquet'} is unreadable or corrupt (no {column} column)"


def _bad_manifest(run):
    man = json.loads((run / "manifest.json").read_text())
    man["config"] = ["not", "an", "object"]
    (run / "manifest.json").write_text(json.dumps(man))
    return (f"{run / 'manifest.json'} is unreadable or corrupt (manifest key 'config' is "
            "list, not the dict moe-lab writes)")


def _bad_samples(run):
    pd.DataFrame(dict(samples_us=[[1.0]])).to_parquet(run / "samples.parquet")
    return f"{run / 'samples.parquet'} is unreadable or corrupt (no point_id column)"


DAMAGE = {"no median_us": lambda r: _drop(r, "median_us"), "no status": lambda r: _drop(r, "status"),
          "no model": lambda r: _drop(r, "model"), "manifest": _bad_manifest}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("verb", ["compare", "merge", "report", "roofline"])
def test_every_reader_refuses_a_run_of_another_schema_in_one_line(run, tmp_path, capsys, damage, verb):
    other = tmp_path / "other"
    shutil.copytree(run, other)
    says = DAMAGE[damage](run)
    argv = {"compare": ["compare", str(other), str(run), "--out", str(tmp_path / "reports")],
            "merge": ["merge", str(tmp_path / "merged"), str(other), str(run)],
            "report": ["report", "--runs", f"{other},{run}", "--out", str(tmp_path / "review")],
            "roofline": ["roofline", "--annotate", str(run)]}[verb]
    before = _tree(tmp_path)
    assert main(argv) == 2
    assert _one_line(capsys) == f"moe-lab: error: {says}"
    assert _tree(tmp_path) == before  # no reports/, merged/ or review/figures/, run untouched


def test_compare_refuses_samples_of_another_schema(run, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(run, other)
    says = _bad_samples(run)
    before = _tree(tmp_path)
    assert main(["compare", str(other), str(run), "--out", str(tmp_path / "reports")]) == 2
    assert _one_line(capsys) == f"moe-lab: error: {says}"
    assert _tree(tmp_path) == before


def test_the_api_open_run_refuses_the_same(run):
    says = _drop(run, "median_us")
    with pytest.raises(UsageError) as exc:
        ml.open_run(run)
    assert str(exc.value) == says


# --- 8. the notebook API ---------------------------------------------------------------------------

def _measure(tmp_path, **kw):
    args = dict(models=MODEL, tokens=[1], backends="torch", tp=1, dtype="fp32", device="cpu",
                run=tmp_path / "r", rep_ms=2, warmup_ms=1, profile=False)
    args.update(kw)
    return ml.measure(**args)


@pytest.mark.parametrize("call,says", [
    (lambda t: ml.open_run(123), "run 123: give a run folder (a path) or a run id (a str)"),
    (lambda t: _measure(t, models=None), "models None: give one or more model names, e.g. "
     "'qwen3-30b-a3b' or ['mixtral-8x7b', 'custom:H=4096,I=14336,E=8,k=2']"),
    (lambda t: _measure(t, models=[]), "models []: give one or more model names, e.g. "
     "'qwen3-30b-a3b' or ['mixtral-8x7b', 'custom:H=4096,I=14336,E=8,k=2']"),
    (lambda t: _measure(t, device="tpu"), "device 'tpu': give cpu or cuda (cuda:N for one GPU), "
     "or leave it out for cuda when a GPU is visible, else cpu"),
    (lambda t: _measure(t, tokens=[1.5]), "tokens 1.5: give a whole number >= 1"),
    (lambda t: _measure(t, tokens=[0]), "tokens 0: give a whole number >= 1"),
    (lambda t: _measure(t, tokens=[]), "tokens []: give one or more token counts, e.g. [1, 16] "
     "or '1-64'"),
    (lambda t: _measure(t, tokens=[1, 200000]), "tokens '1,200000': 200000 is above the 131072 "
     "tokens a point may have (a 128k-token batch; more runs for minutes per point)"),
    (lambda t: _measure(t, backends=""), "backends '': give one or more backend names, e.g. "
     "'torch' (a comma string or a list of str), or None for the default"),
    (lambda t: _measure(t, backends=[]), "backends []: give one or more backend names, e.g. "
     "'torch' (a comma string or a list of str), or None for the default"),
    (lambda t: ml.profile(MODEL, "abc", tp=1, dtype="fp32", device="cpu"),
     "tokens 'abc': give a whole number >= 1"),
    (lambda t: ml.profile(MODEL, 1.5, tp=1, dtype="fp32", device="cpu"),
     "tokens 1.5: give a whole number >= 1"),
    (lambda t: ml.profile(MODEL, 1, tp=1, dtype="fp32", device="tpu"),
     "device 'tpu': give cpu or cuda (cuda:N for one GPU), or leave it out for cuda when a GPU "
     "is visible, else cpu"),
    (lambda t: ml.check(MODEL, [], backends="torch", tp=1, dtype="fp32", device="cpu"),
     "tokens []: give one or more token counts, e.g. [1, 16] or '1-64'"),
])
def test_the_api_refuses_bad_values_in_one_line(tmp_path, call, says):
    api_refuses(call, says, tmp_path)


def test_the_api_refuses_a_run_that_is_a_regular_file(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(UsageError) as exc:
        _measure(tmp_path, run=f)
    assert str(exc.value) == f"run={str(f)!r} is a file, not a run folder"
    assert f.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


# --- 9. CLI values that were accepted with exit 0 ---------------------------------------------------

@pytest.mark.parametrize("extra,says", [
    (["--parallel", "ep-alltoall"], "--parallel without --nproc: it shapes a distributed sweep "
     "only; add --nproc N (or leave it out)"),
    (["--dist-reps", "3", "--dist-timeout", "5"], "--dist-reps, --dist-timeout without --nproc: "
     "they shape a distributed sweep only; add --nproc N (or leave them out)"),
    (["--tokens", "1-100000000"], "tokens '1-100000000': 100000000 is above the 131072 tokens a "
     "point may have (a 128k-token batch; more runs for minutes per point)"),
    (["--tokens", "1,200000"], "tokens '1,200000': 200000 is above the 131072 tokens a point may "
     "have (a 128k-token batch; more runs for minutes per point)"),
    (["--nproc", "0"], "--nproc 0: give a whole number >= 1"),
    (["--traces", "-1"], "--traces -1: give a whole number >= 0"),
    (["--point-timeout", "0"], "--point-timeout 0.0: give a positive, finite number of seconds"),
    (["--rep-ms", "nan"], "--rep-ms nan: give a positive, finite number of milliseconds"),
    (["--warmup-ms", "inf"], "--warmup-ms inf: give a finite number >= 0 of milliseconds"),
    (["--nproc", "2", "--dist-reps", "0"], "--dist-reps 0: give a whole number >= 1"),
    (["--nproc", "2", "--dist-timeout", "nan"], "--dist-timeout nan: give a positive, finite "
     "number of seconds"),
])
def test_sweep_values_that_were_accepted_are_refused(tmp_path, capsys, extra, says):
    argv = list(SWEEP) + ["--data-dir", str(tmp_path), "--run-id", "r"]
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert main(argv) == 2
    assert _one_line(capsys) == f"moe-lab: error: {says}"
    assert not list(tmp_path.iterdir())


def test_claims_implications_refuses_a_missing_runs_folder(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["claims", "implications", "--runs", str(missing)]) == 2
    assert _one_line(capsys) == (f"moe-lab: error: --runs: no run folder, run id or folder of "
                                 f"runs {missing}")
    assert not missing.exists()


def test_claims_implications_reads_a_run_given_by_id(capsys):
    """Before: `--runs RUN_ID` was refused as 'no such folder' (only a folder was taken),
    though notebook 04 and measured_folders take a run id."""
    run = "h200-grid-aiter-triton-llama4-scout-16e-tp8ep8-bf16"  # 002-scout-bf16's shape
    assert main(["claims", "implications", "--runs", run, "--format", "json"]) == 0
    rows = {r["config"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["002-scout-bf16"]["measured_run"] == run
    assert {r["measured_run"] for r in rows.values()} == {run, ""}  # that run alone is read


def test_claims_implications_refuses_a_data_folder_that_is_a_file(tmp_path, capsys, monkeypatch):
    """Before: MOE_LAB_DATA a file was read as no run at all (every claim 'no committed run
    yet', exit 0), where every other reader refuses it."""
    f = tmp_path / "runs"
    f.write_text("not a folder")
    monkeypatch.setenv("MOE_LAB_DATA", str(f))
    assert main(["claims", "implications"]) == 2
    assert _one_line(capsys) == (f"moe-lab: error: the data folder {f} ($MOE_LAB_DATA) is a "
                                 "file, not a folder")


# --- 10. compare <one run>: one line, exit 2, every time ------------------------------------------

def test_compare_of_one_run_is_one_line_and_exit_2_every_time(measured):
    for _ in range(4):
        p = subprocess.run([sys.executable, "-m", "moe_lab", "compare", str(measured)], cwd=ROOT,
                           env=_env(), capture_output=True, text=True, timeout=120)
        assert (p.returncode, p.stdout, p.stderr) == (
            2, "", "moe-lab: error: give a second run, or --by COLUMN --values A,B to split one run\n")


# --- 11. failed rows are measured again on resume ---------------------------------------------------

def test_a_resume_re_measures_failed_rows_and_keeps_the_others(run, capsys):
    res = pd.read_parquet(run / "results.parquet")
    res.loc[0, ["status", "error", "median_us"]] = ["failed", "RuntimeError: a bad value", None]
    res.loc[1, ["status", "error", "median_us"]] = ["unsupported", "needs a GPU", None]
    res.to_parquet(run / "results.parquet", index=False)
    failed, unsupported = res.loc[0, "point_id"], res.loc[1, "point_id"]
    assert main(SWEEP + ["--data-dir", str(run.parent), "--run-id", "r"]) == 0
    assert "done: 1 measured now, 1 already there" in capsys.readouterr().out
    after = pd.read_parquet(run / "results.parquet").set_index("point_id")
    assert len(after) == 2
    assert after.loc[failed, "status"] == "ok" and after.loc[failed, "median_us"] > 0
    assert after.loc[unsupported, "status"] == "unsupported"  # what the point is: kept


# --- 3. a full disk mid-sweep ---------------------------------------------------------------------

@pytest.mark.parametrize("raised", [
    OSError(errno.ENOSPC, "No space left on device"),  # Python's own writes
    OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device"),
])  # pyarrow's: the errno only in its text
def test_a_full_disk_mid_sweep_is_one_line_and_the_rows_before_it_are_whole(
        tmp_path, capsys, monkeypatch, raised):
    import moe_lab.core.atomic as atomic
    real, results = atomic._atomic_write_bytes, []

    def full_after_the_first_row(path, write):
        if Path(path).name == "results.parquet":
            results.append(path)
        if len(results) > 1:  # the disk is full from the second row on: every write fails
            raise raised
        real(path, write)
    monkeypatch.setattr(atomic, "_atomic_write_bytes", full_after_the_first_row)
    argv = SWEEP + ["--data-dir", str(tmp_path), "--run-id", "r"]
    argv[argv.index("--tokens") + 1] = "1,2,4"
    assert main(argv) == 2
    out = capsys.readouterr()
    err = out.err.strip()
    assert err == ("moe-lab: error: no space left on the device: what was written before is "
                   "kept whole; free some space and rerun the same command to resume"), err
    monkeypatch.setattr(atomic, "_atomic_write_bytes", real)
    res = pd.read_parquet(tmp_path / "r" / "results.parquet")  # whole, readable
    assert len(res) == 1 and (res["status"] == "ok").all() and int(res["tokens"][0]) == 1
    assert not list((tmp_path / "r").glob(".*.tmp"))  # no temporary file left
    # space again: the same command resumes with the two points it had left
    assert main(argv) == 0
    assert "done: 2 measured now, 1 already there" in capsys.readouterr().out


# --- 1, 2. a killed or terminated sweep: no worker left, no manifest left "running" -----------------

def _proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a live process, None once it is gone (a zombie is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = raw.rsplit(")", 1)[1].split()[:2]
    return None if state in ("Z", "X") else (int(ppid), state)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (_proc_stat(int(d.name)) or (None,))[0] == pid:
            out.append(int(d.name))
    return out


def _slow_sweep(tmp_path, *extra) -> subprocess.Popen:
    """A sweep slow enough (0.3 s of timed calls per point) to be mid-run when signalled."""
    argv = [sys.executable, "-m", "moe_lab"] + SWEEP + ["--data-dir", str(tmp_path), "--run-id",
                                                        "r", *extra]
    argv[argv.index("--tokens") + 1] = "1,2,4,8,16,32,64"
    argv[argv.index("--rep-ms") + 1] = "300"
    (tmp_path / "tmp").mkdir()
    return subprocess.Popen(argv, cwd=ROOT, env=_env(TMPDIR=str(tmp_path / "tmp")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(cond, proc, timeout=120.0) -> None:
    t0 = time.time()
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.time() - t0 < timeout, "timed out"
        time.sleep(0.05)


def _started_writing(run: Path) -> bool:
    try:
        return json.loads((run / "manifest.json").read_text()).get("status") == "running"
    except (OSError, ValueError):
        return False


NPROC = ["--nproc", "2", "--parallel", "ep-allreduce", "--dist-reps", "2"]


def test_a_sigkilled_nproc_parent_takes_its_workers_with_it(tmp_path):
    p = _slow_sweep(tmp_path, *NPROC)
    try:
        _wait_for(lambda: _started_writing(tmp_path / "r") and len(_children(p.pid)) == 2, p)
        workers = _children(p.pid)
        p.kill()
        p.wait(timeout=10)
        t0 = time.time()  # gone at once (PDEATHSIG); a busy machine only takes longer
        while any(_proc_stat(w) for w in workers) and time.time() - t0 < 120:
            time.sleep(0.05)
        assert not [w for w in workers if _proc_stat(w)], "a worker outlived its parent"
    finally:
        for w in _children(p.pid):
            os.kill(w, signal.SIGKILL)
    # nobody writes the run any more, and the workers' spec files are gone
    before = _tree(tmp_path / "r")
    time.sleep(1.0)
    assert _tree(tmp_path / "r") == before
    assert not list((tmp_path / "tmp").glob("moe-lab-spec-*"))


def _sigterm_once(p: subprocess.Popen, ready, before=lambda: None):
    """Wait for ready(), note before(), send SIGTERM: (stdout, stderr, what before gave);
    the process is killed if it outlives the test."""
    try:
        _wait_for(ready, p)
        noted = before()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    return out, err, noted


def test_sigterm_to_a_check_keeps_the_points_it_checked_in_its_out_file(tmp_path):
    """A check stopped by `timeout` (as a device script's share of a lease runs out) has
    written every point it finished to --out, and says where it stopped; exit 143."""
    out = tmp_path / "check.txt"
    argv = [sys.executable, "-m", "moe_lab", "check", "--model", "custom:H=512,I=1024,E=16,k=4",
            "--tp", "1", "--tokens", "16,32,64,128,256,512,1024,2048,4096,8192",
            "--backends", "torch", "--device", "cpu", "--seed", "3", "--out", str(out)]
    p = subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    _, err, _ = _sigterm_once(p, lambda: out.exists() and " PASS " in out.read_text())
    assert p.returncode == 143, err
    lines = out.read_text().splitlines()
    checked = [ln for ln in lines if " PASS " in ln]
    assert lines[0].startswith("# moe-lab check") and checked
    assert re.fullmatch(rf"# interrupted \(SIGTERM\) after {len(checked)} of 10 points: .*",
                        lines[-1]), lines[-1]


@pytest.mark.parametrize("nproc", [False, True], ids=["one-process", "nproc-2"])
def test_sigterm_to_a_sweep_exits_143_and_the_manifest_says_interrupted(tmp_path, nproc):
    p = _slow_sweep(tmp_path, *(NPROC if nproc else []))
    out, err, workers = _sigterm_once(
        p, lambda: (tmp_path / "r" / "results.parquet").exists()
        and (not nproc or len(_children(p.pid)) == 2), lambda: _children(p.pid))
    assert p.returncode == 143, err
    assert err.strip().splitlines()[-1] == "moe-lab: terminated (SIGTERM); what was measured is saved"
    assert "Traceback" not in err
    assert not [w for w in workers if _proc_stat(w)]
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["status"] == "interrupted: SIGTERM"
    assert [i["status"] for i in man["invocations"]] == ["interrupted: SIGTERM"]
    res = pd.read_parquet(tmp_path / "r" / "results.parquet")  # what was measured: whole
    assert len(res) and (res["status"] == "ok").all() and res["point_id"].is_unique
    assert not list((tmp_path / "tmp").glob("moe-lab-spec-*"))
