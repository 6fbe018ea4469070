"""Nothing lost, whoever else writes (issue 25): one writer per run folder, and `--force`
that cannot delete what moe-lab did not write.

1. two real `moe-lab sweep --run-id X` processes at once: the second is refused in one
   line naming the first (pid, host, command, since), exit 2; every row of the first kept,
   one invocation recorded; the second, rerun afterwards, adds its points
2. a lock left by a SIGKILLed sweep is taken over; one held by what outlived a dead
   writer is stale and replaced; one held by a live process refuses tune, merge, import
3. `import-aiter --out DIR --force` replaces only an earlier import's run folder: a
   user's folder (notes.txt and a subfolder), a regular file, a sweep's run are refused
   in one line, byte-identical
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from moe_lab.cli import main
from moe_lab.core.errors import RunLocked
from moe_lab.storage.runlock import LOCK_NAME, acquire, holder, run_lock

ROOT = Path(__file__).resolve().parent.parent
MODEL = "custom:H=64,I=32,E=8,k=2"


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _sweep(data_dir, tokens, run_id="X", rep_ms="2", *extra) -> list[str]:
    return [sys.executable, "-m", "moe_lab", "sweep", "--models", MODEL, "--tp", "1",
            "--ep", "1", "--tokens", tokens, "--backends", "torch,torch-grouped",
            "--modes", "eager", "--dtype", "fp32", "--device", "cpu", "--no-progress",
            "--no-profile", "--rep-ms", rep_ms, "--warmup-ms", "1",
            "--data-dir", str(data_dir), "--run-id", run_id, *extra]


def _tree(folder: Path) -> dict:
    """Every file and folder under `folder`: content hash, size and mtime (byte-for-byte)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = ("dir" if p.is_dir() else
                                           hashlib.sha1(p.read_bytes()).hexdigest(),
                                           st.st_size if not p.is_dir() else None,
                                           st.st_mtime_ns if not p.is_dir() else None)
    return out


def _one_line(err: str) -> str:
    err = err.strip()
    assert err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def _wait_for(cond, timeout=120.0, proc=None):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            return cond()
        time.sleep(0.05)
    return False


# --- 1. two real sweeps into one run id ------------------------------------------------------

def test_two_concurrent_sweeps_the_second_is_refused_and_nothing_is_lost(tmp_path):
    run = tmp_path / "X"
    # the first is stopped (SIGSTOP) once it holds the folder, so it is mid-sweep however
    # long the second takes to start, on a busy machine too, and resumed once the second
    # is refused (3 s of timed calls left when it took the lock: the stop lands before
    # them); the second asks for other token counts, as in the issue
    first = subprocess.Popen(_sweep(tmp_path, "1,2,4,8,16,32,64,128", rep_ms="200"), cwd=ROOT,
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        assert _wait_for(lambda: (holder(run) or {}).get("pid") == first.pid, proc=first), \
            first.communicate()
        first.send_signal(signal.SIGSTOP)
        assert first.poll() is None
        second = subprocess.run(_sweep(tmp_path, "3,5,6", rep_ms="200"), cwd=ROOT,
                                env=_env(), capture_output=True, text=True, timeout=120)
        assert first.poll() is None, "the first sweep ended before the second was refused"
        first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
    assert second.returncode == 2, second.stderr
    line = _one_line(second.stderr)
    assert f"pid {first.pid} on {socket.gethostname()}" in line
    assert "moe-lab sweep" in line and "--tokens 1,2,4,8,16,32,64,128" in line and " since 20" in line
    assert second.stdout == ""  # refused before it printed anything
    assert first.returncode == 0, err
    assert "16 measured now, 0 already there" in out

    res = pd.read_parquet(run / "results.parquet")
    assert len(res) == 16 and res["point_id"].is_unique and (res["status"] == "ok").all()
    assert sorted(set(res["tokens"].astype(int))) == [1, 2, 4, 8, 16, 32, 64, 128]
    man = json.loads((run / "manifest.json").read_text())
    assert [i["status"] for i in man["invocations"]] == ["complete"]
    assert man["status"] == "complete" and "--tokens 1,2,4,8,16,32,64,128" in man["command"]
    assert not (run / LOCK_NAME).exists()  # released and removed: the folder holds data only

    # the refused one, rerun once the first is done, adds its points and keeps every row
    again = subprocess.run(_sweep(tmp_path, "3,5,6", rep_ms="200"), cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    after = pd.read_parquet(run / "results.parquet")
    assert len(after) == 22 and after["point_id"].is_unique
    kept = after.set_index("point_id").loc[res["point_id"], "measured_at"]
    assert list(kept) == list(res["measured_at"])
    man = json.loads((run / "manifest.json").read_text())
    assert [i["status"] for i in man["invocations"]] == ["complete", "complete"]


def test_a_lock_left_by_a_killed_sweep_is_taken_over(tmp_path):
    run = tmp_path / "X"
    proc = subprocess.Popen(_sweep(tmp_path, "1,2,4,8,16,32", rep_ms="500"), cwd=ROOT,
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for(lambda: (run / "results.parquet").exists(), proc=proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = holder(run)
    assert left and left["pid"] == proc.pid  # its name is still there, its flock is not
    out = subprocess.run(_sweep(tmp_path, "1,2,4,8,16,32", rep_ms="500"), cwd=ROOT,
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"the lock left by pid {proc.pid}" in out.stderr and "taken over" in out.stderr
    res = pd.read_parquet(run / "results.parquet")
    assert len(res) == 12 and res["point_id"].is_unique
    assert not (run / LOCK_NAME).exists()


# --- 2. the lock itself, and the other writers ------------------------------------------------

HOLD = """
import fcntl, json, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, json.dumps(dict(pid=int(sys.argv[2]) or os.getpid(), host=sys.argv[3], command="a holder",
                             since="2026-12-01T00:00:00+0000")).encode())
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def hold(tmp_path):
    """hold(run_dir, pid=None): a process that holds run_dir's lock, naming `pid` (its own
    by default) as the holder, until the test ends."""
    procs = []

    def start(run_dir: Path, pid: int | None = None) -> subprocess.Popen:
        run_dir.mkdir(parents=True, exist_ok=True)
        p = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir / LOCK_NAME),
                              str(pid or 0), socket.gethostname()], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "held"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_a_live_holder_refuses_another_writer_and_names_itself(tmp_path, hold):
    run = tmp_path / "r"
    p = hold(run)
    with pytest.raises(RunLocked) as exc:
        acquire(run, "moe-lab sweep second")
    msg = str(exc.value)
    assert len(msg.splitlines()) == 1
    assert f"pid {p.pid} on {socket.gethostname()} (a holder) since 2026-12-01" in msg


def test_a_lock_held_by_what_outlived_a_dead_writer_is_stale_and_replaced(tmp_path, hold, capsys):
    run = tmp_path / "r"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    hold(run, pid=int(dead))  # e.g. a forked child of a killed sweep keeps the open file
    with run_lock(run, "moe-lab sweep after"):
        assert holder(run)["pid"] == os.getpid()
        assert f"pid {dead}" in capsys.readouterr().err
        with run_lock(run, "nested"):  # re-entrant within one process
            pass
        assert holder(run)["pid"] == os.getpid()
    assert not (run / LOCK_NAME).exists()


def test_tune_merge_and_import_are_refused_while_another_writer_holds_the_folder(tmp_path, hold, capsys):
    # the runs to merge from, written first: the two parts of one sweep (merge refuses
    # one run alone, before any lock is looked at)
    for part in (0, 1):
        assert subprocess.run(_sweep(tmp_path, "1,2", f"src{part}", "2", "--shard", f"{part}/2"),
                              cwd=ROOT, env=_env(), capture_output=True,
                              timeout=120).returncode == 0
    src, parts = tmp_path / "src0", [str(tmp_path / "src0"), str(tmp_path / "src1")]
    before = _tree(tmp_path)

    # merge into a folder another writer holds
    dst = tmp_path / "dst"
    p = hold(dst)
    before = _tree(tmp_path)
    assert main(["merge", str(dst), *parts]) == 2
    assert f"pid {p.pid}" in _one_line(capsys.readouterr().err)
    assert _tree(tmp_path) == before

    # merge from a source another writer is writing
    q = hold(src)
    before = _tree(tmp_path)
    assert main(["merge", str(tmp_path / "other"), *parts]) == 2
    assert f"pid {q.pid}" in _one_line(capsys.readouterr().err)
    assert _tree(tmp_path) == before

    # import into a folder another writer holds (an empty one: the import would be allowed)
    from moe_lab.commands.import_aiter import write_run
    imp = tmp_path / "imp"
    r = hold(imp)
    with pytest.raises(RunLocked, match=f"pid {r.pid}"):
        write_run(imp, [], [], dict(kind="import"), force=True)
    assert sorted(x.name for x in imp.iterdir()) == [LOCK_NAME]


def test_tune_is_refused_while_another_writer_holds_its_run(tmp_path, hold):
    import importlib.util
    from moe_lab import backends
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.tuning import Tuner
    name = "moe_lab.backends.torch_chunked"
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "tests" / "data" / "plugin" / "torch_chunked.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    try:
        run = tmp_path / "runs" / "t"
        p = hold(run)
        before = _tree(tmp_path)
        tuner = Tuner("torch-chunked", "cpu", run, tmp_path / "configs", rep_ms=2,
                      warmup_ms=1, progress=False)
        with pytest.raises(RunLocked, match=f"pid {p.pid} on "):
            tuner.run([[make_problem("custom:H=64,I=32,E=4,k=2", 16, "fp32", 1, 1)]])
        assert _tree(tmp_path) == before
    finally:
        backends._REGISTRY.pop("torch-chunked", None)
        sys.modules.pop(name, None)


# --- 3. import-aiter --force ----------------------------------------------------------------------

@pytest.fixture
def table(tmp_path):
    from test_aiter_tables import synthetic
    return synthetic(tmp_path)


def _import(table, out, *extra) -> list[str]:
    return ["import-aiter", "--file", str(table), "--out", str(out), *extra]


def test_force_refuses_a_folder_that_is_not_a_run_and_leaves_it_intact(tmp_path, table, capsys):
    mine = tmp_path / "data" / "notes"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("my notes, not a run\n")
    (mine / "sub" / "draft.md").write_text("# a draft\n")
    around = _tree(tmp_path / "data")
    assert main(_import(table, mine, "--force")) == 2
    err = _one_line(capsys.readouterr().err)
    assert str(mine) in err and "not a moe-lab run folder" in err and "--force" in err
    assert _tree(tmp_path / "data") == around  # the folder, its files, its parent: identical


def test_force_refuses_a_regular_file(tmp_path, table, capsys):
    f = tmp_path / "data" / "results.csv"
    f.parent.mkdir()
    f.write_text("a,b\n1,2\n")
    around = _tree(tmp_path / "data")
    for extra in ((), ("--force",)):
        assert main(_import(table, f, *extra)) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"{f} is a file, not a run folder" in err
        assert _tree(tmp_path / "data") == around


def test_force_refuses_a_sweep_run_and_a_folder_whose_manifest_is_not_moe_labs(tmp_path, table, capsys):
    assert subprocess.run(_sweep(tmp_path / "data", "1,2", run_id="measured"), cwd=ROOT,
                          env=_env(), capture_output=True, timeout=120).returncode == 0
    odd = tmp_path / "data" / "odd"
    odd.mkdir()
    (odd / "manifest.json").write_text('{"name": "a manifest of another tool"}')
    broken = tmp_path / "data" / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text('{"run_id": ')
    around = _tree(tmp_path / "data")
    for out, says in ((tmp_path / "data" / "measured", "holds a moe-lab sweep run, not an aiter import"),
                      (odd, "not a moe-lab run folder (no manifest.json moe-lab wrote)"),
                      (broken, "not a moe-lab run folder (its manifest.json is unreadable)")):
        assert main(_import(table, out, "--force")) == 2
        assert says in _one_line(capsys.readouterr().err)
        assert _tree(tmp_path / "data") == around


def test_force_still_replaces_an_earlier_import_whole(tmp_path, table, capsys):
    out = tmp_path / "data" / "aiter"
    assert main(_import(table, out)) == 0
    assert main(_import(table, out, "--force", "--max-err", "0.5")) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["aiter"]  # no temporary folders
    assert not (out / LOCK_NAME).exists()
    man = json.loads((out / "manifest.json").read_text())
    assert man["kind"] == "import" and "--max-err 0.5" in man["command"]
    # a new folder: written, and the lock's folder is the run itself
    fresh = tmp_path / "data" / "fresh"
    assert main(_import(table, fresh)) == 0
    assert sorted(p.name for p in fresh.iterdir()) == ["kernels.parquet", "manifest.json",
                                                       "results.parquet"]


def test_a_readers_probe_does_not_turn_a_writer_away(tmp_path):
    """`busy` (merge's look at its sources, a sweep's look before it prints) holds a
    shared lock for a moment; a writer starting then still gets the folder."""
    import fcntl
    import threading
    run = tmp_path / "r"
    run.mkdir()
    fd = os.open(run / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_SH)
    threading.Timer(0.05, lambda: os.close(fd)).start()
    with run_lock(run, "the writer"):
        assert holder(run)["command"] == "the writer"
    assert not (run / LOCK_NAME).exists()
