"""One point, one row: a contributor adds a per-point metric the way the docs say (a
Column in moe_lab/storage/rows.py, one line in points.fill_metrics) and it appears in the rows
of every path that measures: a CPU sweep, a compile sweep, a 2-process gloo sweep and a
tune run. The edit is made to a copy of the package, as a contributor's checkout would
hold it, and every verb runs in its own process from that copy."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from moe_lab.measuring import points
from moe_lab.storage import rows
from moe_lab.storage.store import point_id
from moe_lab.measuring.timing import summarize

ROOT = Path(__file__).resolve().parent.parent
MODEL = "custom:H=64,I=32,E=8,k=2"
COMMON = ["--models", MODEL, "--tp", "1", "--tokens", "1,2", "--dtype", "fp32",
          "--device", "cpu", "--rep-ms", "2", "--warmup-ms", "1", "--no-progress"]


def _contributor_checkout(tmp: Path) -> Path:
    """A copy of the package with one metric added: spread_ratio = p90 / p10."""
    src = tmp / "src"
    shutil.copytree(ROOT / "moe_lab", src / "moe_lab",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # the test's tunable CPU backend, found by discovery like any backend file
    shutil.copy(ROOT / "tests" / "data" / "plugin" / "torch_chunked.py",
                src / "moe_lab" / "backends" / "torch_chunked.py")
    r = src / "moe_lab" / "storage" / "rows.py"
    text = r.read_text()
    anchor = '    _c("sharding", "str", doc="TP8, TP8+EP8, ..."),\n'
    assert anchor in text
    r.write_text(text.replace(anchor, anchor + '    _c("spread_ratio", "float", doc="p90 / p10"),\n'))
    p = src / "moe_lab" / "measuring" / "points.py"
    text = p.read_text()
    anchor = "        row.update(timing_fields(m.timing))\n"
    assert anchor in text
    p.write_text(text.replace(anchor, anchor +
                              '        row["spread_ratio"] = m.timing.p90_us / m.timing.p10_us\n')
                 + TRACE)
    return src


# Appended to the copy's points.py: every call of the one point function and of the gate is
# logged (pid, what, backend, tokens, whether a gate ran inside check_point) when
# MOE_LAB_POINT_LOG names a file. Callers bind the wrapped names, since they import them
# after this module body has run.
TRACE = """

import os as _os
import sys as _sys

_gate0, _check0, _inside = gate, check_point, []


def _trace(*what):
    log = _os.environ.get("MOE_LAB_POINT_LOG")
    if log:
        with open(log, "a") as f:
            f.write(" ".join(str(x) for x in (_os.getpid(), *what)) + "\\n")


def gate(backend, problem, device):
    _trace("gate", backend.name, problem.tokens, "inside" if _inside else "outside")
    if _inside:
        _inside[-1] += 1
    return _gate0(backend, problem, device)


def _caller():  # the first module outside this one on the stack (measure_point calls check_point)
    f = _sys._getframe(2)
    while f.f_globals["__name__"] == __name__:
        f = f.f_back
    spec = f.f_globals.get("__spec__")  # a rank runs as `python -m ...worker`: __main__
    return (spec.name if spec else f.f_globals["__name__"]).rsplit(".", 1)[-1]


def check_point(point, *a, **kw):
    _inside.append(0)
    try:
        c = _check0(point, *a, **kw)
    finally:
        gates = _inside.pop()
    _trace("check", resolve(point.backend).name, point.problem.tokens, point.config,
           point.routing, _caller(), gates)
    return c


# the timing: every call of the one timing loop (time_modes: by whom, for which point,
# with which modes and outcomes) and every call of a timer (inside that loop or not)
_time_modes0, _timing = time_modes, []


def time_modes(c, modes, *a, **kw):
    _timing.append(1)
    try:
        out = _time_modes0(c, modes, *a, **kw)
    finally:
        _timing.pop()
    _trace("time", c.backend.name, c.point.problem.tokens, c.point.config, _caller(),
           ",".join(f"{getattr(t.mode, 'name', t.mode)}={t.status}" for t in out))
    return out


def _traced_timer(name, timer):
    def traced(*a, **kw):
        _trace("timer", name, "inside" if _timing else "outside")
        return timer(*a, **kw)
    return traced


from . import timing as _timers  # noqa: E402 - time_fn calls its timers by module name
for _name in ("time_cpu", "time_eager", "time_graph"):
    setattr(_timers, _name, _traced_timer(_name, getattr(_timers, _name)))
"""


def _run(src: Path, data: Path, *argv, timeout=400, log: Path | None = None):
    env = dict(os.environ, PYTHONPATH=str(src), MOE_LAB_DATA=str(data), OMP_NUM_THREADS="1",
               MOE_LAB_GIT_COMMIT="0000000", MOE_LAB_POINT_LOG=str(log or ""))
    p = subprocess.run([sys.executable, "-m", "moe_lab", *argv], cwd=src, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{argv[0]} failed ({p.returncode}): {p.stderr[-1500:]}"


def _has_metric(df: pd.DataFrame, where: str):
    ok = df[df["status"] == "ok"]
    assert len(ok), f"{where}: no ok rows"
    assert "spread_ratio" in df, f"{where}: the new metric is not a column"
    want = ok["p90_us"] / ok["p10_us"]
    assert ((ok["spread_ratio"] - want).abs() < 1e-9).all(), f"{where}: wrong values"


@pytest.fixture(scope="module")
def contributed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contrib")
    return _contributor_checkout(tmp), tmp / "data"


def _calls(log: Path, what=("check", "gate")) -> tuple[list[list[str]], ...]:
    """(check_point calls, gate calls) of a logged run (or the kinds in `what`): each a
    list of the logged fields."""
    lines = [ln.split() for ln in log.read_text().splitlines()]
    return tuple([x for x in lines if x[1] == w] for w in what)


def _timed_in_one_place(log: Path, where: str) -> list[list[str]]:
    """Every timer the run called ran inside the one timing loop (points.time_modes, which
    measure_point calls after the check), and that loop timed only points that passed
    check_point: nothing times a point on its own. The loop's calls."""
    loops, timers, checks = _calls(log, ("time", "timer", "check"))
    assert loops, f"{where}: the one timing loop was never called"
    assert timers and all(t[3] == "inside" for t in timers), \
        f"{where}: a timer called outside the one timing loop: {[t for t in timers if t[3] != 'inside']}"
    return loops


def _one_path(log: Path, where: str) -> list[list[str]]:
    """The run reached the one point function, and every gate it asked ran inside it, once
    per call: nothing gates, prepares or checks a point on its own."""
    checks, gates = _calls(log)
    assert checks, f"{where}: check_point was never called"
    assert gates and all(g[-1] == "inside" for g in gates), f"{where}: a gate outside check_point"
    assert all(c[-1] == "1" for c in checks), f"{where}: a point gated {[c[-1] for c in checks]} times"
    assert len(gates) == len(checks)
    return checks


def test_a_new_metric_reaches_a_cpu_sweep_and_a_compile_sweep(contributed):
    src, data = contributed
    log = data.parent / "sweep.log"
    _run(src, data, "sweep", *COMMON, "--ep", "1", "--backends", "torch,torch-grouped",
         "--modes", "eager,compile:off", "--routing", "uniform,zipf:1.2", "--run-id", "s", log=log)
    res = pd.read_parquet(data / "s" / "results.parquet")
    _has_metric(res[res["mode"] == "eager"], "CPU sweep")
    _has_metric(res[res["mode"] == "compile:off"], "compile sweep")
    checks = _one_path(log, "sweep")
    # one call per point of the eager sweep (backend x tokens x routing), and one per
    # backend x routing for the compile grid (its layer checked at the grid's first token)
    sweep = [(c[2], c[3], c[5]) for c in checks if c[6] == "sweep"]
    assert sorted(sweep) == sorted({(b, t, r) for b in ("torch", "torch-grouped")
                                    for t in ("1", "2") for r in ("uniform", "zipf:1.2")})
    grid = {(c[2], c[3], c[5]) for c in checks if c[6] == "compile"}
    assert grid == {(b, "1", r) for b in ("torch", "torch-grouped")
                    for r in ("uniform", "zipf:1.2")}, grid
    comp = res[res["mode"] == "compile:off"]  # per routing: a grid per backend and wrapping
    assert (comp["status"] == "ok").all(), comp["error"].tolist()
    assert sum(c[6] == "compile" for c in checks) == len(comp.drop_duplicates(
        ["backend", "wrapped", "routing"]))
    # every timing of the sweep went through the one loop: once per eager point (sweep,
    # after measure_point's check) and once per compiled token count (compile)
    loops = _timed_in_one_place(log, "sweep")
    assert sorted((x[2], x[3]) for x in loops if x[5] == "sweep") == sorted(
        (b, t) for b in ("torch", "torch-grouped") for t in ("1", "2") for _ in range(2))
    assert all(x[6] == "eager=ok" for x in loops if x[5] == "sweep")
    assert sum(x[5] == "compile" for x in loops) == len(comp)  # one per compiled row
    assert {x[5] for x in loops} == {"sweep", "compile"}


def test_a_new_metric_reaches_a_two_process_gloo_sweep(contributed):
    src, data = contributed
    log = data.parent / "gloo.log"
    _run(src, data, "sweep", *COMMON, "--nproc", "2", "--backends", "torch",
         "--dist-reps", "3", "--run-id", "d", log=log)
    res = pd.read_parquet(data / "d" / "results.parquet")
    _has_metric(res, "gloo sweep")
    checks = _one_path(log, "2-rank gloo sweep")
    ranks = {c[0] for c in checks}
    assert len(ranks) == 2  # each rank hands its own shard's point to the one function
    points_ = res.drop_duplicates(["parallel", "tokens"])  # a point: layout x token count
    assert len(points_) > 2
    for pid in ranks:  # once per point on each rank
        assert len([c for c in checks if c[0] == pid]) == len(points_)
    # each rank timed each point through the one loop, with every mode asked for
    loops = _timed_in_one_place(log, "2-rank gloo sweep")
    assert {x[5] for x in loops} == {"worker"}
    for pid in ranks:
        assert len([x for x in loops if x[0] == pid]) == len(points_)


def test_a_new_metric_reaches_a_tune_run(contributed):
    src, data = contributed
    log = data.parent / "tune.log"
    _run(src, data, "tune", "--backend", "torch-chunked", "--models", MODEL, "--tp", "1",
         "--ep", "1", "--tokens", "16", "--dtype", "fp32", "--device", "cpu", "--rep-ms", "5",
         "--warmup-ms", "1", "--no-progress", "--run-id", "t",
         "--configs-dir", str(data.parent / "configs"), log=log)
    _has_metric(pd.read_parquet(data / "t" / "candidates.parquet"), "tune run")
    checks = _one_path(log, "tune")  # its would-be winners, each checked before it is kept
    assert all(c[2] == "torch-chunked" and c[4] == "candidate" and c[6] == "tuning_search"
               for c in checks)


def test_nproc_carries_the_configuration_to_every_rank(contributed, tmp_path):
    """`sweep --nproc 2 --config default,tuned` (gloo, CPU) measures the tuned configuration
    (was dropped: every rank measured the default). The tuned file of the rank's shard asks
    for chunks of 128 rows, which the test backend cannot run: the tuned points fail on
    every rank saying so, the default ones are timed; each through the one function."""
    import json
    from moe_lab.core.devices import device_slug
    from moe_lab.core.environment import device_name
    from moe_lab.core.problems import parse_model
    from moe_lab.distributed import shards
    src, data = contributed[0], tmp_path / "data"
    name = device_name("cpu")
    folder = tmp_path / "configs" / device_slug(name) / "torch-chunked"  # `tuned`'s home
    folder.mkdir(parents=True)
    for rank in (0, 1):  # tp-allreduce: both ranks hold the same shape
        prob = shards.rank_problem(parse_model(MODEL), 1, "fp32", "tp-allreduce", 2, rank)
        stem = f"E={prob.local_experts},N={prob.inter},device_name={name.replace(' ', '_')}"
        (folder / f"{stem}.json").write_text(json.dumps({"1": {"CHUNK": 128}}))
    log = tmp_path / "config.log"
    _run(src, data, "sweep", *COMMON, "--nproc", "2", "--parallel", "tp-allreduce",
         "--backends", "torch-chunked", "--config", "default,tuned", "--dist-reps", "3",
         "--run-id", "c", log=log)
    res = pd.read_parquet(data / "c" / "results.parquet")
    assert sorted(res["config"].unique()) == ["default", "tuned"]
    tuned, default = res[res["config"] == "tuned"], res[res["config"] == "default"]
    assert len(tuned) == len(default) == 2 * 2  # 2 token counts x 2 ranks
    assert (default["status"] == "ok").all(), default["error"].tolist()
    assert (tuned["status"] == "failed").all() and tuned["error"].str.contains("CHUNK=128").all()
    assert tuned["median_us"].isna().all()
    checks = _one_path(log, "2-rank gloo sweep with --config")
    assert {(c[4], c[6]) for c in checks} == {("default", "worker"), ("tuned", "worker")}
    loops = _timed_in_one_place(log, "2-rank gloo sweep with --config")
    assert {x[4] for x in loops} == {"default"}  # the failing tuned points: never timed


def test_check_reaches_the_one_point_function(contributed):
    src, data = contributed
    log = data.parent / "check.log"
    _run(src, data, "check", "--model", MODEL, "--tp", "1", "--tokens", "1,2", "--dtype",
         "fp32", "--device", "cpu", "--backends", "torch,torch-grouped", log=log)
    checks = _one_path(log, "check")
    assert {c[6] for c in checks} == {"correctness"}
    assert sorted((c[2], c[3]) for c in checks) == [("torch", "1"), ("torch", "2"),
                                                    ("torch-grouped", "1"), ("torch-grouped", "2")]


def test_a_cpu_sweep_row_carries_the_eager_timers_steady_statistics(tmp_path):
    from moe_lab.cli import main
    assert main(["sweep", *COMMON, "--ep", "1", "--backends", "torch", "--modes", "eager",
                 "--data-dir", str(tmp_path), "--run-id", "e"]) == 0
    res = pd.read_parquet(tmp_path / "e" / "results.parquet")
    ok = res[res["status"] == "ok"]
    assert len(ok) == 2
    assert ok["median_all_us"].notna().all() and (ok["median_all_us"] > 0).all()
    assert ((ok["steady_frac"] > 0) & (ok["steady_frac"] <= 1)).all()


def test_every_row_column_is_declared_once_with_a_kind():
    names = [c.name for c in rows.COLUMNS]
    assert len(names) == len(set(names))
    assert {c.kind for c in rows.COLUMNS} <= {"int", "float", "str", "bool"}
    assert set(rows.ID_FIELDS) <= set(rows.RESULT_COLUMNS)


def test_a_row_of_the_wrong_type_or_status_is_refused_on_write():
    row = points.new_row(dict(model="m", tp=1, ep=1, dtype="bf16", backend="torch",
                              mode="eager", tokens=1))
    points.finish(dict(row))  # valid as built
    with pytest.raises(ValueError, match="median_us"):
        points.finish(dict(row, median_us="fast"))
    with pytest.raises(ValueError, match="tokens"):
        points.finish(dict(row, tokens=1.5))
    with pytest.raises(ValueError, match="status"):
        points.finish(dict(row, status="great"))


def test_finish_copies_every_timer_number_and_gives_the_id_of_the_key():
    t = summarize([10.0, 11.0, 12.0, 13.0, 30.0])
    row = points.new_row(dict(model="m", tp=1, ep=1, dtype="bf16", backend="torch",
                              mode="graph", tokens=4, glue="fused"))
    points.finish(row, timing=t)
    assert (row["median_us"], row["p10_us"], row["p90_us"], row["n"]) == \
        (t.median_us, t.p10_us, t.p90_us, t.n)
    assert row["median_all_us"] == t.median_us and row["steady_frac"] == 1.0
    assert row["point_id"] == point_id(row)
    # glue is part of the identity: the naive variant is another point
    naive = points.finish(dict(row, glue="naive"), timing=t)
    assert naive["point_id"] != row["point_id"]


def test_the_gate_says_why_a_point_cannot_run():
    from moe_lab import backends
    from moe_lab.core.problems import make_problem
    p = make_problem(MODEL, 4, "fp8-block128", 1, 1)
    status, why = points.gate(backends.get("torch-grouped"), p, "cpu")
    assert status in ("unsupported", "unavailable") and why
    assert points.gate(backends.get("torch"), make_problem(MODEL, 4, "fp32", 1, 1), "cpu") == ("ok", "")


# --- the checkpoint rules: asked once at the gate, the same for every backend ----------

def _fp8_backends():
    from moe_lab import backends
    return [b for b in backends.all_backends() if b.quant_schemes]


@pytest.mark.parametrize("model,tp,ep", [
    ("qwen3-235b-a22b", 8, 1),             # I = 1536/8 = 192
    ("custom:H=192,I=256,E=8,k=2", 1, 1),  # H = 192
    ("custom:H=256,I=512,E=8,k=2", 8, 1),  # I = 512/8 = 64
    ("custom:H=320,I=384,E=8,k=2", 2, 2),  # H = 320 and I = 384/2 = 192
])
def test_a_rank_that_splits_a_128_block_is_unsupported_for_every_backend(model, tp, ep):
    from moe_lab import backends
    from moe_lab.core.problems import make_problem
    p = make_problem(model, 4, "fp8-block128", tp, ep)
    assert p.hidden % 128 or p.inter % 128
    assert _fp8_backends(), "no backend declares an fp8 scheme"
    for b in backends.all_backends():  # fp8 ones (torch-fp8-dequant too) and the others
        status, why = points.gate(b, p, "cpu")
        assert status == "unsupported", (b.name, status, why)
        assert "multiples of 128" in why and p.sharding in why, (b.name, why)


@pytest.mark.parametrize("model,tp,ep", [("deepseek-r1", 8, 1), ("deepseek-r1", 8, 8),
                                         ("qwen3-235b-a22b", 8, 8),
                                         ("custom:H=256,I=1024,E=8,k=2", 8, 1)])
def test_ranks_of_whole_128_blocks_pass_the_checkpoint_rules(model, tp, ep):
    from moe_lab.core.problems import make_problem
    p = make_problem(model, 4, "fp8-block128", tp, ep)
    assert points.checkpoint_refusal(p) == ""
    # the same shape in another scheme has no block rule at all
    assert points.checkpoint_refusal(make_problem("qwen3-235b-a22b", 4, "fp8-channel", 8, 1)) == ""


def test_router_weight_on_input_with_topk_above_1_is_unsupported_for_every_backend():
    import dataclasses
    from moe_lab import backends
    from moe_lab.core.problems import Problem, PRESETS
    spec = dataclasses.replace(PRESETS["llama4-scout-16e"], name="llama4-top2", topk=2)
    p = Problem(spec, 4, "bf16", 1, 1, 0)
    every = backends.all_backends()  # discovered from the package's modules: never empty
    assert {"torch", "torch-grouped", "aiter", "aiter-triton", "vllm"} <= {b.name for b in every}
    for b in every:
        status, why = points.gate(b, p, "cpu")
        assert status == "unsupported" and "top-1 only" in why, (b.name, status, why)


def test_a_backend_without_the_devices_fp8_format_is_unsupported(monkeypatch):
    from moe_lab import backends
    from moe_lab.core import devices
    from moe_lab.core.problems import make_problem
    p = make_problem(MODEL, 4, "fp8-tensor", 1, 1)

    class FnOnly(backends.Backend):
        name, quant_schemes, fp8_formats = "fn-only", ("fp8-tensor",), ("e4m3fn",)
    assert points.gate(FnOnly(), p, "cpu") == ("ok", "")
    monkeypatch.setattr(devices, "fp8_format_for", lambda name: "e4m3fnuz")  # an MI300
    status, why = points.gate(FnOnly(), p, "cpu")
    assert status == "unsupported" and "e4m3fnuz" in why and "fn-only" in why
    FnOnly.fp8_formats = ("e4m3fn", "e4m3fnuz")
    assert points.gate(FnOnly(), p, "cpu") == ("ok", "")
    # a bf16 point has no fp8 format to take
    FnOnly.fp8_formats = ("e4m3fn",)
    assert points.gate(FnOnly(), make_problem(MODEL, 4, "bf16", 1, 1), "cpu") == ("ok", "")


def test_check_says_unsupported_with_the_block_reason_for_every_fp8_backend(capsys):
    """The acceptance command: `moe-lab check --dtype fp8-block128 --tp 8 --model
    qwen3-235b-a22b`: every fp8 backend, torch-fp8-dequant included, is unsupported with
    the block reason (none pads I = 192 up to 256)."""
    from moe_lab.cli import main
    rc = main(["check", "--dtype", "fp8-block128", "--tp", "8", "--model", "qwen3-235b-a22b",
               "--tokens", "1", "--seed", "1"])
    out = capsys.readouterr().out
    lines = {ln.split()[3]: ln for ln in out.splitlines()
             if ln.startswith("qwen3-235b-a22b") and len(ln.split()) > 4}
    names = [b.name for b in _fp8_backends()]
    assert "torch-fp8-dequant" in names and "vllm" in names
    for n in names:
        assert n in lines, (n, out)
        assert lines[n].split()[4] == "unsupported" and "multiples of 128" in lines[n], lines[n]
    assert "all available backends pass" not in out  # nothing ran: the summary says so
    assert out.strip().splitlines()[-1].startswith("# no backend ran"), out
    assert rc == 0


def test_a_backends_config_file_and_version_reach_its_row():
    """What a prepared fn says of itself (`row_facts`: the config file its own lookup used,
    its library's version) is on the point's check row, which the sweep's rows copy."""
    from moe_lab import backends
    from moe_lab.backends.torch_ref import TorchBackend as TorchRefBackend
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.correctness import check_backend, make_inputs, make_weights, reference
    p = make_problem(MODEL, 4, "fp32", 1, 1)
    w, inp = make_weights(p, "cpu", 0), make_inputs(p, "cpu", 1)

    class Named(TorchRefBackend):
        def prepare(self, problem, weights):
            fn = super().prepare(problem, weights)

            def named(*a):
                return fn(*a)
            named.row_facts = dict(config_file="E=8,N=32,device_name=X.json",
                                   backend_version="lib 1.2")
            return named
    row = check_backend(Named(), p, w, inp, reference(p, w, inp), "cpu")
    assert row["status"] == "ok"
    assert (row["config_file"], row["backend_version"]) == ("E=8,N=32,device_name=X.json",
                                                            "lib 1.2")
    assert "config_file" not in check_backend(backends.get("torch"), p, w, inp,
                                              reference(p, w, inp), "cpu")
