"""A user's own runs (issue 35): ml.measure(run="mine") from notebooks/ writes into the
data folder, where ml.runs() and the notebooks' defaults look (it once wrote
notebooks/mine, which nothing reads), and the runs a user measures are git-ignored while
the committed ones stay tracked."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import moe_lab as ml

ROOT = Path(__file__).resolve().parents[1]
MODEL = "custom:H=64,I=32,E=4,k=2"
git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _measure(run, tokens=(1,)):
    return ml.measure(MODEL, list(tokens), backends="torch", tp=1, dtype="fp32", device="cpu",
                      run=run, profile=False, warmup_ms=1, rep_ms=2)


def test_a_run_id_from_notebooks_lands_in_the_data_folder(tmp_path, monkeypatch):
    data = tmp_path / "data" / "runs"
    data.mkdir(parents=True)
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    monkeypatch.setenv("MOE_LAB_DATA", str(data))
    monkeypatch.chdir(nbdir)  # where a notebook's kernel runs
    rows = _measure("mine")
    assert len(rows) == 1 and (data / "mine" / "results.parquet").is_file()
    assert not list(nbdir.iterdir())  # nothing beside the notebooks
    assert "mine" in set(ml.runs()["run_id"])
    assert ml.open_run().run_id == "mine"  # the notebooks' default: the newest run
    assert len(_measure("mine", (1, 2))) == 2  # called again: resumed, the same folder
    # a path is still the folder it names
    _measure(str(nbdir / "elsewhere"))
    assert (nbdir / "elsewhere" / "results.parquet").is_file()


@pytest.mark.parametrize("bad", ["", ".hidden"])
def test_a_run_id_that_is_no_folder_name_is_refused(bad, tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path))
    with pytest.raises(ml.UsageError):
        _measure(bad)
    assert not list(tmp_path.iterdir())


@git
def test_the_checkout_ignores_new_runs_and_keeps_committed_ones():
    tracked = subprocess.run(["git", "ls-files", "data/runs/*/manifest.json"], cwd=ROOT,
                             capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    ignored = lambda p: subprocess.run(["git", "check-ignore", "-q", p], cwd=ROOT).returncode == 0
    assert ignored("data/runs/cpu-0123abcd/results.parquet")  # main.sh's sweep
    assert ignored("data/runs/mine/manifest.json")  # ml.measure(run="mine")
    assert not any(ignored(p) for p in tracked[:5])
    assert not (ROOT / "data" / "runs" / ".gitignore").exists()  # no file there without a run
    assert ignored("data/runs/a-new-run")


@git
def test_a_sweep_beside_committed_runs_leaves_git_status_clean(tmp_path, monkeypatch):
    """A repository with the checkout's .gitignore and one committed run: a CPU sweep into
    its data folder (as main.sh's) shows nothing new; the committed run stays tracked."""
    repo = tmp_path / "repo"
    runs = repo / "data" / "runs"
    runs.mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    env = dict(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", HOME=str(tmp_path))
    sh = lambda *a: subprocess.run(["git", *a], cwd=repo, capture_output=True, text=True,
                                   env={**__import__("os").environ, **env}, check=True).stdout
    sh("init", "-q")
    monkeypatch.setenv("MOE_LAB_DATA", str(runs))
    _measure("committed")
    sh("add", "-f", "data/runs", ".gitignore")
    sh("commit", "-qm", "a committed run")
    assert "data/runs/committed/results.parquet" in sh("ls-files")
    subprocess.run([__import__("sys").executable, "-m", "moe_lab", "sweep", "--models", MODEL,
                    "--tp", "1", "--tokens", "1", "--backends", "torch", "--dtype", "fp32",
                    "--device", "cpu", "--no-profile", "--no-progress", "--warmup-ms", "1",
                    "--rep-ms", "2", "--data-dir", str(runs)], cwd=repo, check=True,
                   capture_output=True, env={**__import__("os").environ, "MOE_LAB_DATA": str(runs),
                                             "PYTHONPATH": str(ROOT)})
    assert len([d for d in runs.iterdir() if d.is_dir()]) == 2  # the sweep wrote its run
    assert sh("status", "--porcelain") == ""
    _measure("committed", (1, 2))  # a committed run resumed: its changed files show
    assert "data/runs/committed/results.parquet" in sh("status", "--porcelain")


def test_one_rule_reads_the_gpu_runs_before_a_newer_cpu_run(tmp_path, monkeypatch):
    """analysis.runs.choose: a user's CPU run (newer than every committed one) answers the
    CPU question only; the GPU questions read the committed H200 run and say they passed
    over it; a run given is read as given."""
    from conftest import RUNS_DIR
    from moe_lab.analysis import runs as choice
    gpu = "h200-rows-silu-deepseek-tp8-b-20261202"  # 4 points, phases stored
    shutil.copytree(Path(RUNS_DIR) / gpu, tmp_path / gpu)
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path))
    assert choice.choose("cpu", required=False).run is None
    _measure("mine")  # newer than the copied run
    kt = choice.choose("kernel_time")
    assert kt.run.run_id == gpu and not kt.given
    assert "on a GPU" in kt.why and "passed over newer runs: mine (CPU runs" in kt.why
    assert "\n" not in kt.why
    cpu = choice.choose("cpu")
    assert cpu.run.run_id == "mine" and "on the CPU" in cpu.why
    assert [r.run_id for r in choice.runs_with_phases(None)] == [gpu]
    given = choice.choose("kernel_time", "mine")
    assert given.given and given.run.run_id == "mine" and "the run given" in given.why
    shutil.rmtree(tmp_path / gpu)  # no GPU run left: the CPU run answers, and says so
    assert "no GPU run has any" in choice.choose("kernel_time").why
    with pytest.raises(ml.UsageError):
        choice.choose("compile")
