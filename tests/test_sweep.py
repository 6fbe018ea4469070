"""CPU tests for `moe-lab sweep` (moe_lab/measuring/sweep.py).

1. kill -9 mid-sweep, rerun: no duplicate / missing rows, readable files, earlier rows kept
2. a backend that raises, OOMs, returns wrong numbers or fails to prepare is a row, the
   sweep goes on and exits 0
3. bad arguments: exit 2, one line on stderr, no traceback
4. without --run-id the same command picks the same run id and resumes (0 measured now)
5. the manifest: command, started, finished, wall_s, environment (torch), sweep config
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import moe_lab.backends as registry
from conftest import cli_processes
from moe_lab.commands.sweep import default_run_id
from moe_lab.cli import main
from moe_lab.storage.invocations import KILLED
from moe_lab.core.atomic import read_parquet
from moe_lab.storage.store import STATUSES, point_id

ROOT = Path(__file__).resolve().parent.parent
MODEL = "custom:H=64,I=32,E=8,k=2"
TOKENS = [1, 2, 4, 8, 16, 32, 64]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # one intra-op thread: on a small shared CPU, spinning OpenMP workers of several
    # processes slow tiny ops down by orders of magnitude and the timings explode
    env["OMP_NUM_THREADS"] = "1"
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "moe_lab", *args]


def _sweep_args(data_dir, *extra, tokens=TOKENS, backends="torch,torch-grouped", run_id="r"):
    a = ["sweep", "--models", MODEL, "--tp", "1", "--ep", "1",
         "--tokens", ",".join(map(str, tokens)), "--backends", backends, "--modes", "eager",
         "--data-dir", str(data_dir), "--no-progress", "--device", "cpu", "--no-profile"]
    if run_id is not None:
        a += ["--run-id", run_id]
    return a + list(extra)


def _read_results(run_dir: Path) -> pd.DataFrame | None:
    p = run_dir / "results.parquet"
    if not p.exists():
        return None
    return read_parquet(p)


def _assert_readable(run_dir: Path) -> pd.DataFrame:
    """Every file a killed writer may have touched parses."""
    res = pd.read_parquet(run_dir / "results.parquet")
    if (run_dir / "kernels.parquet").exists():
        pd.read_parquet(run_dir / "kernels.parquet")
    with open(run_dir / "manifest.json") as f:
        json.load(f)
    return res


# --- 1. SIGKILL mid-way, rerun ------------------------------------------------------------

def _signal_midway(args, run_dir, total, sig) -> tuple[int, str]:
    """Start the sweep, send `sig` once 2 <= rows < total are on disk (every read of the
    results must parse: the writes are atomic); (return code, stderr)."""
    proc = subprocess.Popen(args, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a hang guard: a busy machine only takes longer
        while time.monotonic() < deadline and proc.poll() is None:
            df = _read_results(run_dir)
            if df is not None and 2 <= len(df) < total:
                os.kill(proc.pid, sig)
                break
            time.sleep(0.02)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


def test_sigkill_midway_then_rerun_resumes_without_duplicates(tmp_path):
    # --rep-ms/--warmup-ms make each CPU point take ~0.2 s so the kill lands mid-sweep
    args = _cli(*_sweep_args(tmp_path, "--rep-ms", "200", "--warmup-ms", "20"))
    run_dir = tmp_path / "r"
    total = len(TOKENS) * 2 * 1
    rc, _ = _signal_midway(args, run_dir, total, signal.SIGKILL)
    assert rc == -signal.SIGKILL, (
        f"sweep was not caught mid-way (rc {rc}); make its points slower")

    before = _assert_readable(run_dir)
    assert 2 <= len(before) < total
    assert before["point_id"].is_unique
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"

    time.sleep(1.1)  # measured_at has 1 s resolution: a redone point would show a new stamp
    out = subprocess.run(args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    n_before = len(before)
    assert f"{total - n_before} measured now, {n_before} already there" in out.stdout, out.stdout

    after = _assert_readable(run_dir)
    assert len(after) == total
    assert after["point_id"].is_unique
    assert set(after["status"]) == {"ok"}, after[["tokens", "backend", "status", "error"]]
    assert after["median_us"].notna().all() and (after["median_us"] > 0).all()
    expected = {(t, b, "eager") for t in TOKENS for b in ("torch", "torch-grouped")}
    got = set(zip(after["tokens"].astype(int), after["backend"], after["mode"]))
    assert got == expected
    # ids are what the sweep computes from the point's fields
    for r in after.to_dict("records"):
        assert r["point_id"] == point_id(r)
    # the points measured before the kill were kept, not redone
    kept = after.set_index("point_id").loc[before["point_id"]]
    assert list(kept["measured_at"]) == list(before["measured_at"])
    assert list(kept["median_us"]) == list(before["median_us"])
    assert list(kept["n"]) == list(before["n"])
    assert not list(run_dir.glob(".*.tmp")), "a killed writer's temp file was left behind"
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["status"] == "complete" and man["resumed"] == 1
    assert man["points_measured_this_run"] == total - n_before
    assert man["points_skipped_already_done"] == n_before
    assert man["previous_status"].startswith("killed")
    # the killed call is still listed, with its command, as killed
    assert [i["status"] for i in man["invocations"]] == [KILLED, "complete"]
    assert man["invocations"][0]["command"] == man["invocations"][1]["command"]
    # each names the machine it ran on (lent machines share a hostname; the boot tells a
    # resume on another lease apart): here both calls ran on this one
    from moe_lab.core.environment import boot_id
    assert [i["boot_id"] for i in man["invocations"]] == [boot_id()] * 2 and boot_id()


def test_sigterm_midway_records_the_interruption_then_rerun_completes(tmp_path):
    """`timeout` sends SIGTERM: the sweep stops at once, keeps every finished point,
    writes its wall time and status to the manifest, exits 143; a rerun completes."""
    args = _cli(*_sweep_args(tmp_path, "--rep-ms", "200", "--warmup-ms", "20"))
    run_dir = tmp_path / "r"
    total = len(TOKENS) * 2
    rc, err = _signal_midway(args, run_dir, total, signal.SIGTERM)
    assert rc == 143, (rc, err[-500:])
    assert "terminated" in err.splitlines()[-1]
    before = _assert_readable(run_dir)
    assert 2 <= len(before) < total and before["point_id"].is_unique
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["status"] == "interrupted: SIGTERM" and man["wall_s"] > 0
    assert man["invocations"][-1]["points_measured"] == len(before)
    # the notebooks say which planned points the interrupted run never measured
    from moe_lab.plots.compile import coverage
    from moe_lab.storage.store import open_run
    summary, missing = coverage(open_run(run_dir))
    assert summary.startswith(f"{len(before)} of {total} planned points have a row")
    n_missing = sum(len(m.split(",")) for m in missing["missing_tokens"])
    assert n_missing == total - len(before)
    assert set(missing["run_status"]) == {"interrupted: SIGTERM"}

    out = subprocess.run(args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    after = _assert_readable(run_dir)
    assert len(after) == total and after["point_id"].is_unique
    summary, missing = coverage(open_run(run_dir))
    assert summary == f"{total} of {total} planned points have a row" and missing.empty
    man = json.loads((run_dir / "manifest.json").read_text())
    assert [i["status"] for i in man["invocations"]] == ["interrupted: SIGTERM", "complete"]
    assert man["wall_s_total"] > man["wall_s"]


def test_resume_keeps_the_folder_notes_and_rebuilds_old_history(tmp_path):
    """A folder whose manifest predates `invocations` (and carries a note written by
    hand) keeps both when a later call adds points: its history is not wiped."""
    run_dir = tmp_path / "r"
    args = _cli(*_sweep_args(tmp_path, tokens=[1, 2]))
    assert subprocess.run(args, cwd=ROOT, env=_env(), capture_output=True,
                          timeout=120).returncode == 0
    man = json.loads((run_dir / "manifest.json").read_text())
    man.pop("invocations")  # as the manifests written before they were recorded
    man["provenance_note"] = "git_commit corrected by hand: see the note"
    man["environment"]["git_commit"] = "abc1234"
    (run_dir / "manifest.json").write_text(json.dumps(man))
    out = subprocess.run(_cli(*_sweep_args(tmp_path, tokens=[1, 2, 4])), cwd=ROOT,
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["provenance_note"] == "git_commit corrected by hand: see the note"
    first, second = man["invocations"]
    assert first["git_commit"] == "abc1234" and "--tokens 1,2 " in first["command"]
    assert first["points_measured"] == 4 and "rebuilt" in first["note"]
    assert second["status"] == "complete" and "--tokens 1,2,4 " in second["command"]
    assert second["points_measured"] == 2 and second["points_skipped"] == 4


# --- 2. failing backends become rows -------------------------------------------------------

def _torch_fn(prob, weights):
    return registry.get("torch").prepare(prob, weights)


class _Boom(registry.Backend):
    name = "test-boom"
    description = "test: fn raises"

    def prepare(self, problem, weights):
        def fn(x, w, ids):
            raise RuntimeError("boom\nsecond line of the message")
        return fn


class _Oom(registry.Backend):
    name = "test-oom"
    description = "test: fn raises CUDA OOM"

    def prepare(self, problem, weights):
        def fn(x, w, ids):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return fn


class _OomWhileTiming(registry.Backend):
    name = "test-oom-timing"
    description = "test: right on the first call (the check), OOM afterwards (timing)"

    def prepare(self, problem, weights):
        inner = _torch_fn(problem, weights)
        seen = set()  # prepared once per shape group: the first call per token count passes

        def fn(x, w, ids):
            if x.shape[0] in seen:
                raise RuntimeError("HIP out of memory. Tried to allocate 4.00 GiB")
            seen.add(x.shape[0])
            return inner(x, w, ids)
        return fn


class _Wrong(registry.Backend):
    name = "test-wrong"
    description = "test: returns wrong numbers"

    def prepare(self, problem, weights):
        inner = _torch_fn(problem, weights)
        return lambda x, w, ids: inner(x, w, ids) * 1.5


class _NaN(registry.Backend):
    name = "test-nan"
    description = "test: returns NaN"

    def prepare(self, problem, weights):
        return lambda x, w, ids: torch.full_like(x, float("nan"))


class _PrepareFails(registry.Backend):
    name = "test-prepare-fails"
    description = "test: prepare raises"

    def prepare(self, problem, weights):
        raise ValueError("cannot shuffle weights for this layout")


class _Unsupported(registry.Backend):
    name = "test-unsupported"
    description = "test: supports() says no"

    def supports(self, problem, device):
        return False, "needs a GPU"

    def prepare(self, problem, weights):  # never called
        raise AssertionError("prepare called for an unsupported backend")


class _Launches(registry.Backend):
    name = "test-launches"
    description = "test: says what it launches at each token count, and its library"

    def prepare(self, problem, weights):
        inner = _torch_fn(problem, weights)

        def fn(x, w, ids):
            return inner(x, w, ids)
        fn.launch_config = lambda T: {"gemm1": {"BLOCK_SIZE_M": 16 if T < 8 else 64}}
        fn.row_facts = dict(config_file="E=8,N=32,device_name=X.json", backend_version="lib 1.2")
        return fn


TEST_BACKENDS = (_Launches, _Boom, _Oom, _OomWhileTiming, _Wrong, _NaN, _PrepareFails, _Unsupported)


@pytest.fixture
def test_backends():
    registry.names()  # load the real ones first
    for cls in TEST_BACKENDS:
        assert cls.name not in registry._REGISTRY
        registry.register(cls)
    try:
        yield [cls.name for cls in TEST_BACKENDS]
    finally:
        for cls in TEST_BACKENDS:
            registry._REGISTRY.pop(cls.name, None)


def test_failing_backends_become_rows_and_the_sweep_finishes(tmp_path, test_backends, capsys):
    tokens = [1, 8, 64]
    names = ["torch", *test_backends]
    rc = main(_sweep_args(tmp_path, "--rep-ms", "5", "--warmup-ms", "1", tokens=tokens,
                          backends=",".join(names)))
    assert rc == 0
    out = capsys.readouterr().out
    assert f"{len(tokens) * len(names)} measured now, 0 already there" in out

    res = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert len(res) == len(tokens) * len(names)
    assert res["point_id"].is_unique
    assert set(res["status"]) <= set(STATUSES)
    by = {b: g for b, g in res.groupby("backend")}
    assert set(by) == set(names)
    for b, g in by.items():
        assert sorted(g["tokens"].astype(int)) == tokens, b

    def one(b, status, *texts):
        g = by[b]
        assert set(g["status"]) == {status}, (b, g[["tokens", "status", "error"]])
        for e in g["error"]:
            if status == "ok":
                assert not e, (b, e)
                continue
            assert e and "\n" not in e, (b, e)
            for t in texts:
                assert t in e, (b, e)
        return g

    ok = one("torch", "ok")
    assert ok["median_us"].notna().all() and (ok["median_us"] > 0).all()
    assert ok["launch_config"].isna().all()  # a backend with no launch configuration
    # what a prepared fn says of itself reaches each of its rows: the launch configuration
    # at the row's own token count, the file its lookup read, its library's version
    lr = one("test-launches", "ok")
    assert [json.loads(c)["gemm1"]["BLOCK_SIZE_M"] for c in lr.sort_values("tokens")[
        "launch_config"]] == [16 if t < 8 else 64 for t in tokens]
    assert set(lr["config_file"]) == {"E=8,N=32,device_name=X.json"}
    assert set(lr["backend_version"]) == {"lib 1.2"}
    assert (ok["max_rel_err"] < 2e-2).all()

    one("test-boom", "failed", "RuntimeError: boom")
    one("test-oom", "oom", "OutOfMemoryError", "CUDA out of memory")
    one("test-oom-timing", "oom", "RuntimeError: HIP out of memory")
    assert (by["test-oom-timing"]["max_rel_err"] < 2e-2).all()  # it passed the check first
    wrong = one("test-wrong", "incorrect", "max_rel_err")
    assert (wrong["max_rel_err"] > 0.1).all()
    nan = one("test-nan", "incorrect")
    assert nan["max_rel_err"].map(math.isinf).all()
    one("test-prepare-fails", "failed", "ValueError: cannot shuffle weights")
    one("test-unsupported", "unsupported", "needs a GPU")

    # no failed, incorrect or unsupported point carries a time
    bad = res[res["status"] != "ok"]
    assert bad["median_us"].isna().all() and bad["p10_us"].isna().all()
    assert bad["p90_us"].isna().all() and (bad["n"].fillna(0) == 0).all()

    # a rerun treats every one of these rows as done but the failed ones, measured again
    # (their cause may be what the rerun corrected; issue 25); the others say what a point is
    failed = int((res["status"] == "failed").sum())
    assert failed == 2 * len(tokens)  # test-boom and test-prepare-fails
    rc = main(_sweep_args(tmp_path, tokens=tokens, backends=",".join(names)))
    assert rc == 0
    assert (f"{failed} measured now, {len(res) - failed} already there"
            in capsys.readouterr().out)


# --- 3. bad arguments -----------------------------------------------------------------------

BAD = [
    ["sweep", "--models", "nosuch"],
    ["sweep", "--tokens", "0"],
    ["sweep", "--tokens", "1,x"],
    ["sweep", "--modes", "bogus"],
    ["sweep", "--modes", "compile:nosuch"],
    ["sweep", "--compile-budget", "0"],
    ["sweep", "--compile-budget", "60,nosuch=5"],
    ["sweep", "--compile-budget", "60,torch=x"],
    ["sweep", "--routing", "zipf"],
    ["sweep", "--backends", "nope"],
    ["sweep", "--tp", "8", "--ep", "4"],
    ["sweep", "--tp", "x"],
    ["sweep", "--dtype", "int3"],
    ["check", "--model", "custom:H=1"],
    ["profile", "--model", "deepseek-r1"],
    ["roofline", "--model", "x"],
    ["claims", "parse", "/nonexistent"],
]


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict:
    """Each BAD command run as `python -m moe_lab ...` in a process of its own (one
    interpreter's imports for all: conftest.cli_processes), a sweep with a data folder of
    its own: " ".join(argv) -> (process, its data folder)."""
    cases, dirs = [], []
    for argv in BAD:
        d = tmp_path_factory.mktemp("bad")
        if argv[0] == "sweep":  # never write into the checkout's data/ should one slip through
            argv = argv + ["--data-dir", str(d), "--device", "cpu", "--no-progress"]
        cases.append((argv, ROOT))
        dirs.append(d)
    return {" ".join(a): (p, d) for a, p, d in zip(BAD, cli_processes(cases, _env()), dirs)}


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a) for a in BAD])
def test_bad_arguments_exit_2_with_one_line(argv, refused):
    out, tmp_path = refused[" ".join(argv)]
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), out.stderr
    assert lines[0].startswith("moe-lab: error: ")
    assert not any(tmp_path.iterdir()), "a rejected sweep created a run folder"


# --- 4. default run id: same command resumes ----------------------------------------------------

def test_same_command_same_default_run_id_resumes(tmp_path, capsys):
    argv = _sweep_args(tmp_path, "--rep-ms", "5", "--warmup-ms", "1", tokens=[1, 4],
                       run_id=None)
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "4 measured now, 0 already there" in first
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(runs) == 1 and runs[0].name.startswith("cpu-")
    before = pd.read_parquet(runs[0] / "results.parquet")

    assert main(argv) == 0
    second = capsys.readouterr().out
    assert "0 measured now, 4 already there" in second
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == runs
    after = pd.read_parquet(runs[0] / "results.parquet")
    pd.testing.assert_frame_equal(before, after)

    # the id is the documented function of the config; another config, another folder
    config = dict(models=[MODEL], tp=[1], ep=[1], ep_rank=0, tokens=[1, 4],
                  backends=["torch", "torch-grouped"], modes=["eager"], routing=["uniform"],
                  dtype="bf16", seed=0)
    assert runs[0].name == default_run_id(config, "cpu")
    assert default_run_id(dict(config, tokens=[1, 8]), "cpu") != runs[0].name
    assert default_run_id(config, "NVIDIA H200") != runs[0].name


# --- 5. the manifest ----------------------------------------------------------------------------

def test_manifest_records_command_times_environment_and_config(tmp_path):
    argv = _sweep_args(tmp_path, "--rep-ms", "5", "--warmup-ms", "1", "--seed", "3",
                       tokens=[2, 16])
    t0 = time.time()
    out = subprocess.run(_cli(*argv), cwd=ROOT, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    m = json.loads((tmp_path / "r" / "manifest.json").read_text())

    assert m["command"] == "moe-lab sweep " + " ".join(argv[1:])
    assert m["run_id"] == "r"
    assert m["status"] == "complete"
    for k in ("started", "finished"):
        assert isinstance(m[k], str)
        stamp = time.mktime(time.strptime(m[k], "%Y-%m-%dT%H:%M:%S%z"))
        assert t0 - 120 < stamp < time.time() + 120, (k, m[k])
    assert m["started"] <= m["finished"]
    assert isinstance(m["wall_s"], (int, float)) and 0 <= m["wall_s"] < 120
    assert m["points_measured_this_run"] == 4 and m["points_skipped_already_done"] == 0

    env = m["environment"]
    assert env["torch"] == torch.__version__
    for k in ("python", "platform", "device", "device_name", "git_commit", "argv"):
        assert k in env, k

    c = m["config"]
    assert c["models"] == [MODEL]
    assert c["tokens"] == [2, 16]
    assert c["backends"] == ["torch", "torch-grouped"]
    assert c["modes"] == ["eager"]
    assert c["tp"] == [1] and c["ep"] == [1] and c["ep_rank"] == 0
    assert c["routing"] == ["uniform"] and c["dtype"] == "bf16" and c["device"] == "cpu"
    assert c["seed"] == 3 and c["rep_ms"] == 5 and c["warmup_ms"] == 1
    assert c["profile"] is False


def test_manifest_command_in_process(tmp_path):
    argv = _sweep_args(tmp_path, "--rep-ms", "5", "--warmup-ms", "1", tokens=[2])
    assert main(argv) == 0
    m = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert m["command"] == "moe-lab " + " ".join(argv)


def test_compile_rows_stream_into_the_store_as_they_finish(tmp_path, monkeypatch):
    """A compile sweep killed mid-grid keeps every point already compiled and timed:
    rows reach results.parquet one by one, not at the end of the token grid."""
    from moe_lab.measuring import compile as C
    from moe_lab.storage.store import RunStore
    seen_on_disk = []
    real = C.CompileBench.run

    def spy(self, *a, on_row=None, **kw):
        def hook(row):
            on_row(row)
            seen_on_disk.append(len(RunStore(tmp_path / "s").load_results()))
        return real(self, *a, on_row=hook, **kw)
    monkeypatch.setattr(C.CompileBench, "run", spy)
    argv = ["sweep", "--models", "custom:H=64,I=32,E=8,k=2", "--tp", "1", "--ep", "1",
            "--tokens", "1,2,4", "--backends", "torch", "--modes", "compile:off",
            "--dtype", "fp32", "--data-dir", str(tmp_path), "--run-id", "s", "--no-progress",
            "--device", "cpu", "--rep-ms", "2", "--warmup-ms", "1"]
    assert main(argv) == 0
    assert seen_on_disk[:3] == [1, 2, 3]  # each point written before the next one ran
    res = RunStore(tmp_path / "s").load_results()
    assert set(zip(res["mode"], res["wrapped"])) == {("compile:off", False), ("compile:off", True)}
    assert res["point_id"].is_unique and (res["status"] == "ok").all()


def test_resumed_compile_sweep_folds_into_one_compile_row(tmp_path):
    """A compile sweep resumed with more token counts (what a killed device command does on
    the next lease) keeps one compile row per backend x variant x wrapped, covering the
    whole grid: points add up and every graph of the second call is a recompile."""
    from moe_lab.storage.store import RunStore
    base = ["sweep", "--models", "custom:H=64,I=32,E=8,k=2", "--tp", "1", "--ep", "1",
            "--backends", "torch", "--modes", "compile:default", "--dtype", "fp32",
            "--data-dir", str(tmp_path), "--run-id", "c", "--no-progress", "--device", "cpu",
            "--rep-ms", "2", "--warmup-ms", "1"]
    assert main(base + ["--tokens", "2,4"]) == 0
    first = RunStore(tmp_path / "c").load_table("compile")
    assert main(base + ["--tokens", "2,4,8"]) == 0
    store = RunStore(tmp_path / "c")
    res, comp = store.load_results(), store.load_table("compile")
    assert len(res) == 6 and res["point_id"].is_unique  # 3 tokens x (plain, custom-op)
    assert len(comp) == 2 and set(comp["wrapped"]) == {False, True}
    for _, row in comp.iterrows():
        before = first[first["wrapped"] == row["wrapped"]].iloc[0]
        assert row["points"] == 3 and row["points_ok"] == 3 and row["status"] == "ok"
        assert row["merged_calls"] == 1 and row["tokens_first"] == 2
        assert row["compile_s"] == before["compile_s"]  # the first compile is the T=2 one
        assert row["compile_s_total"] > before["compile_s_total"]
        assert row["recompiles"] >= before["recompiles"] + 1  # T=8 compiled a new graph


def test_parse_budget_default_and_per_backend():
    from moe_lab.commands.sweep import parse_budget
    assert parse_budget("150,torch=30") == {"*": 150.0, "torch": 30.0}
    assert parse_budget("torch-grouped=20") == {"torch-grouped": 20.0}


def test_compile_resume_fills_the_custom_op_pass_a_kill_left(tmp_path, capsys):
    """Killed after the plain pass of a backend x variant and before its custom-op pass:
    the rerun measures the custom-op rows only (no duplicate plain rows)."""
    from moe_lab.storage.store import RunStore, atomic_write_parquet
    argv = ["sweep", "--models", "custom:H=64,I=32,E=8,k=2", "--tp", "1", "--ep", "1",
            "--tokens", "1,2", "--backends", "torch", "--modes", "compile:off",
            "--dtype", "fp32", "--data-dir", str(tmp_path), "--run-id", "k", "--no-progress",
            "--device", "cpu", "--rep-ms", "2", "--warmup-ms", "1"]
    assert main(argv) == 0
    store = RunStore(tmp_path / "k")
    res = store.load_results()
    plain = res[~res["wrapped"].astype(bool)]
    atomic_write_parquet(tmp_path / "k" / "results.parquet", plain)  # what the kill left
    capsys.readouterr()
    assert main(argv) == 0
    assert "2 measured now, 2 already there" in capsys.readouterr().out
    again = store.load_results()
    assert len(again) == 4 and again["point_id"].is_unique
    assert set(zip(again["mode"], again["wrapped"])) == {("compile:off", False),
                                                         ("compile:off", True)}
    kept = again.set_index("point_id").loc[plain["point_id"], "median_us"]
    assert (kept.values == plain["median_us"].values).all()  # the plain rows untouched


def test_compile_rows_recounted_from_results_after_a_kill(tmp_path):
    """A compile row written by a resumed call covers only the token counts that call ran;
    recounting from the results makes it cover every point measured for that variant."""
    from moe_lab.storage.store import RunStore
    from moe_lab.measuring.compile_table import refresh_compile_table
    argv = ["sweep", "--models", "custom:H=64,I=32,E=8,k=2", "--tp", "1", "--ep", "1",
            "--tokens", "1,2,4", "--backends", "torch", "--modes", "compile:default",
            "--dtype", "fp32", "--data-dir", str(tmp_path), "--run-id", "q", "--no-progress",
            "--device", "cpu", "--rep-ms", "2", "--warmup-ms", "1"]
    assert main(argv) == 0
    store = RunStore(tmp_path / "q")
    good = store.load_table("compile").set_index("wrapped")
    # what a kill mid-variant and a resume leave: a compile row over the last token only
    broken = store.load_table("compile")
    broken["points"], broken["points_ok"], broken["tokens_first"] = 1, 1, 4
    store.append_table("compile", broken.to_dict("records"), key=("backend", "mode", "wrapped"))
    assert refresh_compile_table(tmp_path / "q") == 2
    fixed = store.load_table("compile").set_index("wrapped")
    for w in (False, True):
        assert fixed.loc[w, "points"] == 3 and fixed.loc[w, "points_ok"] == 3
        assert fixed.loc[w, "tokens_first"] == 1 and fixed.loc[w, "status"] == "ok"
        assert abs(fixed.loc[w, "compile_s_total"] - good.loc[w, "compile_s_total"]) < 1e-9


def test_a_sweep_split_in_parts_covers_every_point_once_and_merges_into_one_run(tmp_path, capsys):
    """--shard I/N splits the points by id (the same on any machine): the parts are
    disjoint, together they are the whole sweep, and `moe-lab merge` makes them one run
    with every row's samples."""
    import pandas as pd
    base = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2,4,8", "--backends",
            "torch,torch-grouped", "--dtype", "fp32", "--device", "cpu", "--no-progress",
            "--rep-ms", "2", "--warmup-ms", "1", "--data-dir", str(tmp_path)]
    assert main(base + ["--run-id", "whole"]) == 0
    for i in range(3):
        assert main(base + ["--shard", f"{i}/3", "--run-id", f"p{i}"]) == 0
    ids = [set(pd.read_parquet(tmp_path / f"p{i}" / "results.parquet")["point_id"])
           for i in range(3)]
    whole = set(pd.read_parquet(tmp_path / "whole" / "results.parquet")["point_id"])
    assert sum(map(len, ids)) == len(whole) == 8 and set().union(*ids) == whole
    assert all(ids) and not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "all")] + [str(tmp_path / f"p{i}") for i in range(3)]) == 0
    merged = pd.read_parquet(tmp_path / "all" / "results.parquet")
    assert set(merged["point_id"]) == whole
    assert set(pd.read_parquet(tmp_path / "all" / "samples.parquet")["point_id"]) == whole
    # merging a part twice is refused: a point in two sources is never silently one
    assert main(["merge", str(tmp_path / "dup"), str(tmp_path / "p0"), str(tmp_path / "p0")]) == 2
    # one part alone is refused, one line, nothing written (was: a copy, "merged 1 runs")
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "one"), str(tmp_path / "p0")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"moe-lab: error: merge combines two or more runs (the parts of one "
                   f"sweep); {tmp_path / 'p0'} alone is a run already: use it as it is, or "
                   "give the other parts too")
    assert not (tmp_path / "one").exists()
    for bad in ("3/3", "x", "1-2", "-1/2"):
        assert main(base + [f"--shard={bad}", "--run-id", "bad"]) == 2
