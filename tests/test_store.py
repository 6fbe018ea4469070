"""Run store: ids, atomic appends that survive SIGKILL, resumption, manifest, environment."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from moe_lab.core.errors import CorruptFile, UsageError

from moe_lab.core.environment import capture_environment, git_state
from moe_lab.storage.store import (KERNEL_COLUMNS, RESULT_COLUMNS, STATUSES, RunStore, find_runs,
                           open_run, point_id)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def row(**kw):
    r = dict(model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype="bf16", backend="torch",
             mode="eager", tokens=64, routing="uniform", status="ok", error=None,
             median_us=12.5, p10_us=12.0, p90_us=13.0, n=100, noisy=False)
    r.update(kw)
    return r


def test_columns_and_statuses_are_the_contract():
    for c in ("model", "tp", "ep", "ep_rank", "dtype", "backend", "mode", "tokens", "routing",
              "status", "error", "median_us", "p10_us", "p90_us", "n", "kernel_us",
              "max_rel_err", "flops", "bytes", "roof_us", "pct_of_roof", "point_id"):
        assert c in RESULT_COLUMNS
    assert STATUSES == ("ok", "incorrect", "unsupported", "unavailable", "failed", "oom", "timeout")
    assert KERNEL_COLUMNS == ("point_id", "kernel", "phase", "calls", "total_us")


def test_point_id_is_stable_and_identifies_only_the_point():
    a = point_id(row())
    assert a == point_id(row(median_us=99.0, status="failed"))  # measurements do not matter
    assert a == point_id(row(tokens=64.0))  # numbers normalised (parquet round trip)
    assert a != point_id(row(tokens=128))
    assert a != point_id(row(mode="graph"))
    assert len(a) == 16
    # stable across processes (no hash randomisation)
    out = subprocess.run([sys.executable, "-c", "from moe_lab.storage.store import point_id;"
                          f"print(point_id({row()!r}))"], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == a


def test_append_done_ids_and_replacement(tmp_path):
    s = RunStore(tmp_path / "run")
    assert s.done_ids() == set()
    assert list(s.load_results().columns)[:len(RESULT_COLUMNS)] == list(RESULT_COLUMNS)
    s.append([row()], [dict(kernel="gemm", phase="gemm1", calls=1, total_us=5.0)])
    s.append([row(mode="graph", status="unsupported", error="graph capture failed: x",
                  median_us=None, p10_us=None, p90_us=None, n=None)], [])
    ids = {point_id(row()), point_id(row(mode="graph"))}
    assert s.done_ids() == ids
    # re-appending a point replaces its result and kernel rows
    s.append([row(median_us=11.0)], [dict(kernel="gemm2", phase="gemm2", calls=2, total_us=3.0),
                                     dict(kernel="act", phase="act", calls=1, total_us=1.0)])
    r = s.load_results()
    assert len(r) == 2 and r["point_id"].is_unique
    ok = r[r["mode"] == "eager"].iloc[0]
    assert ok["median_us"] == 11.0 and ok["status"] == "ok"
    bad = r[r["mode"] == "graph"].iloc[0]
    assert bad["status"] == "unsupported" and pd.isna(bad["median_us"])
    k = s.load_kernels()
    assert set(k["kernel"]) == {"gemm2", "act"}
    assert (k["point_id"] == point_id(row())).all()
    with pytest.raises(ValueError):
        s.append([row(status="weird")], [])
    # several points at once: kernel rows need ids
    with pytest.raises(ValueError):
        s.append([row(tokens=1), row(tokens=2)], [dict(kernel="k", phase="other", calls=1, total_us=1)])
    run = open_run(tmp_path / "run")
    m, res, ker = run.manifest, run.results, run.kernels
    assert len(res) == 2 and len(ker) == 2 and m == {}


def test_extra_columns_are_kept(tmp_path):
    s = RunStore(tmp_path)
    s.append([row(hidden=7168, config="BLOCK_M=64")], [])
    s.append([row(tokens=1)], [])
    r = s.load_results()
    assert "hidden" in r and "config" in r and len(r) == 2


def test_manifest_round_trip_and_update(tmp_path):
    s = RunStore(tmp_path / "r")
    s.write_manifest({"run_id": "r", "started": "2025-01-01T00:00:00+00:00", "argv": ["sweep"]})
    s.update_manifest(ended="2025-01-01T01:00:00+00:00", points=3)
    m = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert m["run_id"] == "r" and m["points"] == 3 and m["argv"] == ["sweep"]
    assert s.read_manifest() == m
    assert not [p for p in os.listdir(tmp_path / "r") if p.endswith(".tmp")]


def test_find_runs_newest_first_and_only_runs_with_the_data_asked_for(tmp_path):
    assert find_runs(tmp_path / "none") == []
    for name, started, mode in (("b", "2025-01-02", "graph"), ("a", "2025-03-01", "eager"),
                                ("c", "2025-02-01", "graph")):
        s = RunStore(tmp_path / name)
        s.write_manifest({"started": started})
        s.append([row(mode=mode)])
    RunStore(tmp_path / "empty").write_manifest({"started": "2026-01-01"})  # no results
    assert [r.run_id for r in find_runs(tmp_path)] == ["a", "c", "b"]
    assert [r.run_id for r in find_runs(tmp_path, has="graph")] == ["c", "b"]
    assert find_runs(tmp_path, has="compile") == []


def test_open_run_by_id_reads_one_run_type(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path))
    s = RunStore(tmp_path / "x1")
    s.write_manifest({"started": "2025-01-01", "environment": {"git_commit": "abc1234def"}})
    s.append([row(git_commit="1111111aaaa"), row(mode="graph", git_commit="2222222bbbb")],
             [dict(kernel="k", phase="gemm1", calls=1, total_us=1.0, point_id=point_id(row()))])
    run = open_run("x1")
    assert run.run_id == "x1" and len(run.results) == 2 and len(run.kernels) == 1
    assert run.commits() == ["1111111", "2222222"]
    assert run.commits(run.results[run.results["mode"] == "graph"]) == ["2222222"]
    assert open_run(None).run_id == "x1"
    with pytest.raises(UsageError, match="no run folder"):
        open_run("nope")


def test_a_crash_between_the_two_writes_of_append_loses_nothing(tmp_path, monkeypatch):
    """append writes kernels, then results. Crash after the first write: the point is not
    done (so a resume re-measures it), and the re-measure leaves only its new kernel rows.
    Writing results first would mark the point done with its kernels missing."""
    import moe_lab.storage.store as st
    s = RunStore(tmp_path / "run")
    s.append([row(tokens=1)], [dict(kernel="old", phase="gemm1", calls=1, total_us=1.0)])
    real, calls = st.atomic_write_parquet, []

    def crash_on_second(path, df):
        calls.append(path.name)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the writes")
        real(path, df)
    monkeypatch.setattr(st, "atomic_write_parquet", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        s.append([row(tokens=2)], [dict(kernel="k2", phase="gemm1", calls=1, total_us=2.0)])
    monkeypatch.setattr(st, "atomic_write_parquet", real)
    assert point_id(row(tokens=2)) not in s.done_ids()  # not done: a resume re-measures it
    assert point_id(row(tokens=1)) in s.done_ids()
    s.append([row(tokens=2)], [dict(kernel="k2new", phase="gemm1", calls=1, total_us=3.0)])
    k = s.load_kernels()
    mine = k[k["point_id"] == point_id(row(tokens=2))]
    assert list(mine["kernel"]) == ["k2new"]
    assert list(k[k["point_id"] == point_id(row(tokens=1))]["kernel"]) == ["old"]


@pytest.mark.parametrize("victim", ["results.parquet", "kernels.parquet", "manifest.json"])
def test_a_corrupt_file_is_refused_with_one_line_and_can_be_set_aside(tmp_path, victim):
    s = RunStore(tmp_path / "run")
    s.write_manifest({"started": "2025-01-01"})
    s.append([row()], [dict(kernel="k", phase="gemm1", calls=1, total_us=1.0)])
    path = tmp_path / "run" / victim
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(CorruptFile, match=victim) as e:
        s.check_readable()
    assert "\n" not in str(e.value)
    moved = s.set_aside_corrupt()
    assert [p.name.split(".corrupt-")[0] for p in moved] == [victim]
    assert moved[0].exists() and not path.exists()
    s.check_readable()


CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from moe_lab.storage.store import RunStore
    s = RunStore({run!r})
    i = 0
    while True:  # new points, and re-appends of old ones, as fast as possible
        t = i % 40
        s.append([dict(model="m", tp=1, ep=1, ep_rank=0, dtype="bf16", backend="torch",
                       mode="eager", tokens=t, routing="uniform", status="ok", median_us=float(i))],
                 [dict(kernel=f"k{{j}}", phase="gemm1", calls=1, total_us=1.0) for j in range(3)])
        i += 1
        if i == 5:
            open({flag!r}, "w").close()
""")


@pytest.mark.parametrize("delay", [0.3, 0.77, 1.31])
def test_append_survives_sigkill(tmp_path, delay):
    run, flag = tmp_path / "run", tmp_path / "started"
    code = CHILD.format(root=ROOT, run=str(run), flag=str(flag))
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        t0 = time.time()
        while not flag.exists():
            assert p.poll() is None, "writer died on its own"
            assert time.time() - t0 < 60
            time.sleep(0.01)
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait()
    assert p.returncode == -signal.SIGKILL
    s = RunStore(run)
    r = s.load_results()  # readable: the last complete file
    k = s.load_kernels()
    assert len(r) >= 5 and r["point_id"].is_unique
    assert set(r["status"]) == {"ok"}
    # kernel rows belong to recorded points (or to the point being written), 3 each, no dups
    assert not k.duplicated(["point_id", "kernel"]).any()
    assert (k.groupby("point_id").size() == 3).all()
    assert set(r["point_id"]) <= set(k["point_id"])
    assert len(set(k["point_id"]) - set(r["point_id"])) <= 1
    # a resumed writer continues without duplicates
    s.append([dict(model="m", tp=1, ep=1, ep_rank=0, dtype="bf16", backend="torch", mode="eager",
                   tokens=0, routing="uniform", status="ok", median_us=1.0)], [])
    assert s.load_results()["point_id"].is_unique


def test_capture_environment_has_the_keys():
    env = capture_environment()
    for key in ("device", "device_name", "vendor", "driver", "cuda_runtime", "hip_runtime",
                "torch", "triton", "aiter", "vllm", "python", "hostname", "git_commit",
                "git_dirty", "env", "cpu_count"):
        assert key in env, key
    assert env["vendor"] in ("CUDA", "ROCm", "CPU")
    assert env["python"].count(".") == 2
    assert isinstance(env["env"], dict)
    json.dumps(env, default=str)  # goes into manifest.json


def test_capture_environment_picks_relevant_variables(monkeypatch):
    monkeypatch.setenv("VLLM_USE_TRITON_FLASH_ATTN", "0")
    monkeypatch.setenv("AITER_LOG_MORE", "1")
    monkeypatch.setenv("UNRELATED_SECRET_THING", "x")
    env = capture_environment()["env"]
    assert env["VLLM_USE_TRITON_FLASH_ATTN"] == "0" and env["AITER_LOG_MORE"] == "1"
    assert "UNRELATED_SECRET_THING" not in env


def test_commit_named_by_the_sender_wins_over_a_travelled_git(monkeypatch):
    """On the lent GPU machines a stale .git came along with the copy; the commit the
    device command names (MOE_LAB_GIT_COMMIT) is the one recorded."""
    monkeypatch.delenv("MOE_LAB_GIT_COMMIT", raising=False)
    here = git_state()
    assert here["commit"] and len(here["commit"]) == 40  # this checkout's own HEAD
    monkeypatch.setenv("MOE_LAB_GIT_COMMIT", "2cd3e71")
    assert git_state()["commit"] == "2cd3e71"


def test_a_commit_placeholder_is_refused(monkeypatch):
    """A device command once passed MOE_LAB_GIT_COMMIT=HEADSHA: rows must never name a
    commit that does not exist."""
    monkeypatch.setenv("MOE_LAB_GIT_COMMIT", "HEADSHA")
    with pytest.raises(UsageError, match="not a commit sha"):
        git_state()


def test_merge_runs_keeps_every_row_and_refuses_a_point_twice(tmp_path):
    from moe_lab.storage.merging import merge_runs
    a, b = RunStore(tmp_path / "a"), RunStore(tmp_path / "b")
    a.write_manifest({"started": "2026-01-02", "status": "complete"})
    b.write_manifest({"started": "2026-01-01", "status": "complete"})
    a.append([row(tokens=1, device="GPU0")], [dict(kernel="k", phase="gemm1", calls=1, total_us=1.0)])
    b.append([row(tokens=2, device="GPU1"), row(tokens=4, device="GPU1")])
    m = merge_runs(tmp_path / "m", [tmp_path / "a", tmp_path / "b"])
    run = open_run(m.dir)
    assert sorted(run.results["tokens"]) == [1, 2, 4] and len(run.kernels) == 1
    assert set(run.results["device"]) == {"GPU0", "GPU1"}
    assert run.manifest["started"] == "2026-01-01" and set(run.manifest["merged_from"]) == {"a", "b"}
    with pytest.raises(ValueError, match="already holds"):
        merge_runs(tmp_path / "m", [tmp_path / "a"])
    with pytest.raises(ValueError, match="more than one source"):
        merge_runs(tmp_path / "m2", [tmp_path / "a", tmp_path / "a"])


def test_a_reader_never_sees_a_file_being_replaced_as_corrupt(tmp_path):
    """A notebook or `compare` reading a run while a sweep appends to it: every read
    gets one complete version (pyarrow on a path opens it twice, and a rename between
    the two opens used to read as a corrupt file)."""
    import threading

    import pandas as pd

    from moe_lab.core.atomic import atomic_write_parquet, read_parquet

    path = tmp_path / "results.parquet"
    atomic_write_parquet(path, pd.DataFrame({"x": range(10)}))
    stop = threading.Event()

    def writer():
        n = 10
        while not stop.is_set():
            n += 1
            atomic_write_parquet(path, pd.DataFrame({"x": range(n), "y": [str(i) for i in range(n)]}))

    t = threading.Thread(target=writer)
    t.start()
    try:
        lengths = [len(read_parquet(path)) for _ in range(300)]
    finally:
        stop.set()
        t.join()
    assert min(lengths) >= 10 and len(set(lengths)) > 1, "the writer did not run during the reads"


def test_a_manifest_says_whether_the_code_that_ran_was_its_commits(tmp_path, monkeypatch):
    """source_digest (recorded in every manifest, on a machine without git too) is the
    commit's own digest while the package and scripts are as committed, and not once a
    file changes: code_state reads it as `as committed` / `changed` (issue 66)."""
    import subprocess
    from moe_lab.core import environment as envm
    repo = tmp_path / "repo"
    (repo / "moe_lab" / "sub").mkdir(parents=True)
    (repo / "scripts").mkdir()
    (repo / "moe_lab" / "a.py").write_text("A = 1\n")
    (repo / "moe_lab" / "sub" / "b.py").write_text("B = 2\n")
    (repo / "scripts" / "run.sh").write_text("echo hi\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["-C", str(repo), "add", "."], check=True)
    subprocess.run(git + ["-C", str(repo), "commit", "-q", "-m", "c"], check=True)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()
    here = envm.source_digest(repo)
    assert here == envm.commit_source_digest(sha, repo)
    (repo / "moe_lab" / "sub" / "__pycache__").mkdir()
    (repo / "moe_lab" / "sub" / "__pycache__" / "b.pyc").write_bytes(b"x")
    (repo / "moe_lab" / "notes.txt").write_text("not code\n")
    assert envm.source_digest(repo) == here  # caches and non-code files are not the code
    env = {"git_commit": sha, "source_digest": here}
    assert envm.code_state(env, repo) == "as committed"
    (repo / "scripts" / "run.sh").write_text("echo changed\n")
    changed = envm.source_digest(repo)
    assert changed != here
    assert envm.code_state({"git_commit": sha, "source_digest": changed}, repo) == "changed"
    assert envm.code_state({"git_commit": "0" * 40, "source_digest": here}, repo) == "commit not here"
    assert envm.code_state({"git_commit": sha, "git_dirty": "unknown"}, repo) == "not recorded"
    assert envm.code_state({"git_commit": sha, "git_dirty": False}, repo) == "clean"
