"""Issue 67 item 2: every public function of the notebook API (moe_lab's __all__ functions,
moe_lab.api, and each module moe_lab/analysis/__init__.py exports) called with a hostile
value for each argument in turn (None, 0, -1, NaN, 10**30, '', [], {}, garbage text, an
empty DataFrame, one of the wrong columns, one of the right columns but wrong dtypes, a
folder that is not there), the other arguments at their defaults or a plausible value (a
small committed run, its frames). Each call returns, or refuses with the package's
UsageError in one line naming the argument; any other exception, a multi-line refusal or
one naming nothing the caller gave is a failure listing function, argument and value.

Bounded and fast (no GPU, no sweep): the calls read a data folder of a few committed runs
copied into a temporary folder (MOE_LAB_DATA), from a temporary working folder; the
functions that measure (check, measure, profile) are never let measure: what they would
measure with is replaced by a stand-in that stops the call, so only their up-front checks
run (a hostile value they let through reaches the stand-in: accepted)."""
from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import math
import re
import shutil
import signal
from pathlib import Path

import pytest

from moe_lab.core.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
RUN = "h200-vllm-bf16-tp8"  # the plausible run: vLLM as shipped, stored phases
RUNS = (RUN, "h200-grid-aiter-triton-deepseek-r1-tp8-bf16",
        "h200-tune-aiter-triton-silu-ep1-20261130", "h200-repeat-a-20261130",
        "h200-repeat-b-20261130", "cpu-gloo-x2-expert-parallel-20261130",
        "h200-compile-deepseek-r1-20261129", "h200-vllm-fp8-block128-tp8")
TINY = "custom:H=64,I=32,E=4,k=2"

# Not fuzzed: the findings modules write docs/findings.md (a document generator, not the
# notebook API; moe_lab/analysis/__init__.py does not export them).
NOT_API = ("findings", "findings_sections", "findings_more", "findings_tuned")

# Plausible values of arguments without a default (by name), beyond a run's frames.
NAMED = dict(device="NVIDIA H200", model="deepseek-r1", models=TINY, tp=8, ep=8, dtype="bf16",
             mode="graph", tokens=1, backend="aiter-triton", question="kernel_time",
             world_size=2, name="x", word="aiter-triton:deepseek-r1:8:8:bf16", values=[1.0, 2.0],
             wall_us=10.0, eager={}, n_ops=3, n=2, parallel="ep", seed=0, routing="uniform",
             key="k", compute=lambda: 1, cfg={}, ratio=1.0, events=[], config="x.json",
             g=None, point_ids=[], spread_run="", value="median_us", table="results.parquet")

OVERRIDES = {  # values for defaulted arguments too: a call that passes its checks is tiny
    "api.check": dict(model=TINY, tokens=[1], backends="torch", tp=1, device="cpu"),
    "api.measure": dict(tokens=[1], backends="torch", modes="eager", tp=1, device="cpu"),
    "api.profile": dict(model=TINY, tokens=1, backend="torch", tp=1, iters=1, device="cpu"),
}
CALL_LIMIT_S = 60
MEASURING = ("api.check", "api.measure", "api.profile")  # never called with plausible values


def _exported_modules() -> list[str]:
    """The submodules moe_lab/analysis/__init__.py imports (`from . import (...)`)."""
    tree = ast.parse((ROOT / "moe_lab" / "analysis" / "__init__.py").read_text())
    return sorted(a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                  and n.level == 1 and n.module is None for a in n.names)


def _functions():
    """(qualified name, function) of every public function: moe_lab's API (`import moe_lab
    as ml`: its __all__ functions) and each exported analysis module's own."""
    import moe_lab
    from moe_lab import api
    out = [(f"api.{n}", getattr(api, n)) for n in moe_lab.__all__
           if inspect.isfunction(getattr(api, n))]
    for name in _exported_modules():
        mod = importlib.import_module(f"moe_lab.analysis.{name}")
        out += [(f"{name}.{n}", f) for n, f in sorted(vars(mod).items())
                if not n.startswith("_") and inspect.isfunction(f)
                and (f.__module__ == mod.__name__  # a package (runs, tuned): its surface
                     or f.__module__.startswith(mod.__name__ + "."))]
    return out


FUNCTIONS = dict(_functions())


def _params(fn):
    return [p for p in inspect.signature(fn).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data folder of RUNS (copies: nothing a call does reaches the committed ones) beside
    the checkout's other data (noise, configs, ceilings), and an empty working folder."""
    base = tmp_path_factory.mktemp("fuzz")
    for d in (ROOT / "data").iterdir():
        if d.is_dir() and d.name != "runs":
            shutil.copytree(d, base / "data" / d.name)
    for r in RUNS:
        shutil.copytree(ROOT / "data" / "runs" / r, base / "data" / "runs" / r)
    (base / "cwd").mkdir()
    return base


class _Measured(BaseException):
    """Raised where a measuring function would start measuring: its checks let it through."""


@pytest.fixture
def where(data, monkeypatch):
    monkeypatch.setenv("MOE_LAB_DATA", str(data / "data" / "runs"))
    monkeypatch.chdir(data / "cwd")
    from moe_lab import api
    from moe_lab.measuring import profiling, sweep

    def stop(*a, **k):
        raise _Measured()
    monkeypatch.setattr(api, "check_problem", stop)
    monkeypatch.setattr(sweep.Sweep, "run", stop)
    monkeypatch.setattr(profiling, "profile_point", stop)
    return data


def _plausible(fn, run, data):
    """Keyword arguments for every parameter without a default: a plausible value."""
    runs_dir = data / "data" / "runs"
    frames = dict(kernels=run.kernels, kernels_df=run.kernels, phases_df=run.phases,
                  manifest=run.manifest, spread_manifest=run.manifest,
                  single_manifest=run.manifest, per_call=run.kernels.head(0))
    runs = dict(run=run, after_run=run, runs=[run], run_id=RUN, root=runs_dir,
                folder=runs_dir, path=data / "cwd" / "trace.json", table=run.results)
    out = {}
    for p in _params(fn):
        if p.default is not p.empty:
            continue
        text = "str" in str(p.annotation) and "DataFrame" not in str(p.annotation)
        for source in ((NAMED,) if text and p.name in NAMED else (frames, runs, NAMED)):
            if p.name in source:
                out[p.name] = source[p.name]
                break
        else:
            out[p.name] = run.results  # a frame, the most common argument: a run's rows
    return out


def _hostile(frame, data):
    """(label, value) pairs: each argument gets every one in turn."""
    import pandas as pd
    right = frame if isinstance(frame, pd.DataFrame) and len(frame.columns) else None
    wrong_dtypes = (right.head(3).astype(object).map(lambda v: "x") if right is not None
                    else pd.DataFrame({"median_us": ["x"], "tokens": ["y"], "run_id": [1.5]}))
    return [("None", None), ("0", 0), ("-1", -1), ("nan", math.nan), ("10**30", 10**30),
            ("''", ""), ("[]", []), ("{}", {}), ("garbage", "\x00#?garbage/../"),
            ("empty frame", pd.DataFrame()),
            ("wrong-column frame", pd.DataFrame({"zz_not_a_column": [1.0, 2.0]})),
            ("wrong-dtype frame", wrong_dtypes),
            ("missing folder", data / "no-such-folder" / "deeper")]


def _names(line: str, arg: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(arg)}(?![A-Za-z0-9])", line) is not None


class _TooLong(BaseException):
    pass


@contextlib.contextmanager
def _limit():
    """CALL_LIMIT_S for one call (SIGALRM): a call past it is a failure (the fuzz stays
    bounded; a hostile number that makes a function loop is a bug, not a slow machine)."""
    def _raise(*_):
        raise _TooLong(f"ran past {CALL_LIMIT_S} s")
    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, CALL_LIMIT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _refused(fn, kwargs) -> bool:
    try:
        with _limit():
            fn(**kwargs)
    except UsageError:
        return True
    return False


def failures_of(qualname: str, where) -> list[str]:
    """Every failing call of `qualname` with a hostile value for one argument."""
    from moe_lab.storage.store import open_run
    fn = FUNCTIONS[qualname]
    run = open_run(RUN)
    base = {**_plausible(fn, run, where), **OVERRIDES.get(qualname, {})}
    try:  # a plausible value refused: a refusal may then name any of its arguments
        base_refused = qualname in MEASURING or _refused(fn, base)
    except (Exception, _TooLong) as exc:  # noqa: BLE001
        return [f"{qualname} with plausible arguments: {type(exc).__name__}: {exc}"[:300]]
    failures = []
    for p in _params(fn):
        for label, value in _hostile(base.get(p.name), where):
            try:
                with _limit():
                    fn(**{**base, p.name: value})
            except _Measured:
                pass  # its checks let the value through to measuring: accepted
            except UsageError as exc:
                line = str(exc)
                if "\n" in line:
                    failures.append(f"{qualname}({p.name}={label}): a refusal of "
                                    f"{line.count(chr(10)) + 1} lines: {line[:120]!r}")
                elif not (_names(line, p.name) or base_refused and any(
                        _names(line, q.name) for q in _params(fn))
                        or len(_params(fn)) == 1 and _names(line, fn.__name__)):
                    failures.append(f"{qualname}({p.name}={label}): a refusal naming not "
                                    f"{p.name}: {line[:160]!r}")
            except (Exception, _TooLong) as exc:  # noqa: BLE001
                failures.append(f"{qualname}({p.name}={label}): {type(exc).__name__}: "
                                f"{str(exc).splitlines()[0][:160] if str(exc) else ''}")
    return failures


@pytest.mark.parametrize("qualname", sorted(FUNCTIONS))
def test_hostile_arguments_return_or_refuse_in_one_line(where, qualname):
    failures = failures_of(qualname, where)
    assert not failures, f"{len(failures)} calls failed:\n" + "\n".join(failures)


def test_every_exported_function_is_fuzzed():
    """The enumeration reaches the API and every exported analysis module, and none of the
    findings modules (NOT_API)."""
    mods = {q.split(".")[0] for q in FUNCTIONS}
    assert {"api"} | set(_exported_modules()) == mods
    assert not mods & set(NOT_API)
    assert {"api.runs", "api.open_run", "api.find_runs", *MEASURING} <= set(FUNCTIONS)
    assert len(FUNCTIONS) > 150
