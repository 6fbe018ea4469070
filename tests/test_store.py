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

from moe_lab.store import (KERNEL_COLUMNS, RESULT_COLUMNS, STATUSES, RunStore, capture_environment,
                           latest_run, load_run, point_id)

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
    out = subprocess.run([sys.executable, "-c", "from moe_lab.store import point_id;"
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
    m, res, ker = load_run(tmp_path / "run")
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


def test_latest_run_prefers_the_latest_start(tmp_path):
    assert latest_run(tmp_path / "none") is None
    for name, started in (("b", "2025-01-02"), ("a", "2025-03-01"), ("c", "2025-02-01")):
        RunStore(tmp_path / name).write_manifest({"started": started})
    assert latest_run(tmp_path).name == "a"


CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from moe_lab.store import RunStore
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
    from moe_lab.store import git_state
    monkeypatch.delenv("MOE_LAB_GIT_COMMIT", raising=False)
    here = git_state()
    assert here["commit"] and len(here["commit"]) == 40  # this checkout's own HEAD
    monkeypatch.setenv("MOE_LAB_GIT_COMMIT", "2cd3e71")
    assert git_state()["commit"] == "2cd3e71"
