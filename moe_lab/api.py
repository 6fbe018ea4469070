"""The notebook API: what a session on a GPU (or a CPU) calls, and what the CLI verbs use.

    import moe_lab as ml
    ml.runs()                                    # every committed run, newest first
    run = ml.open_run("h200-seed4-20261129")     # manifest, results, kernels, compile
    ml.check("qwen3-30b-a3b", tokens=[1, 16])    # pass/fail per backend
    df = ml.measure("qwen3-30b-a3b", tokens=[1, 16], backends=["torch"])
    kernels, trace = ml.profile("deepseek-r1", 64, backend="aiter-triton")
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pandas as pd

from . import backends as registry
from .measuring.correctness import check_problem, resolve_device
from .core.constants import PROFILE_ITERS, TP_DEFAULT
from .core.errors import UsageError  # noqa: F401  (ml.UsageError)
from .storage.modes import Mode, parse_mode
from .core.problems import make_problem, split_models
from .storage import store
from .storage.store import Run  # noqa: F401  (part of the API)
from .core.validate import shown as _shown


def _list(v, parse=str) -> list:
    if isinstance(v, str):
        return [parse(s.strip()) for s in v.split(",") if s.strip()]
    if isinstance(v, (int, float)):
        return [parse(v)]
    return [parse(x) for x in v]


def _wholes(v, name: str) -> list[int]:
    """tp / ep: a whole number, a list of them or a comma string, each in its LIMITS."""
    from .core import validate
    items = v.split(",") if isinstance(v, str) else v if isinstance(v, (list, tuple)) else [v]
    items = [validate._whole_text(x, name) if isinstance(x, str) else x for x in items]
    if not items:
        raise UsageError(f"{name} {_shown(v)}: give a whole number or a list of them")
    return [validate.limit(x, name, name) for x in items]


def _routings(v) -> list[str]:
    """A routing, a comma string or a list of them (uniform, balanced, zipf:S, hot:P)."""
    from .core import validate
    from .core.routing import parse_routing
    what = "a routing (uniform, balanced, zipf:S, hot:P), a comma string or a list of them"
    items = v.split(",") if isinstance(v, str) else v if isinstance(v, (list, tuple)) else None
    if not items or not all(isinstance(x, str) and x.strip() for x in items):
        raise UsageError(f"routing {_shown(v)}: give {what}")
    out = [validate.text(x.strip(), "routing", what) for x in items]
    for r in out:
        parse_routing(r)
    return out


def _point(tp, ep, ep_rank, dtype, routing, device, seed, one: bool = True) -> str | None:
    """The values every API call shares, checked as the CLI checks them (core.validate);
    `one`: a single tp, ep and routing (check, profile), else lists too (measure).
    Returns the device."""
    from .core import validate
    from .measuring.correctness import THRESHOLDS
    if one:
        for key, v in (("tp", tp), ("ep", ep)):
            validate.limit(v, key, key)
        validate.text(routing, "routing", "one routing: uniform, balanced, zipf:S or hot:P")
    validate.api_values(tp=tp, ep=ep)
    validate.limit(ep_rank, "ep_rank", "ep_rank")
    validate.limit(seed, "seed", "seed")
    validate.choice(dtype, "dtype", sorted(THRESHOLDS))
    _routings(routing)
    return validate.device(device)


def _one_line(fn):
    """An OSError on a path (a read-only or full data folder, a trace path it cannot
    write) is the API's UsageError, one line naming the path, as the CLI says it."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from .core.errors import disk_full
        try:
            return fn(*args, **kwargs)
        except UsageError:
            raise
        except OSError as exc:
            if disk_full(exc):
                raise UsageError("no space left on the device"
                                 + (f" writing {exc.filename}" if exc.filename else "")
                                 + ": what was written before is kept whole; free some space "
                                 "and call again to resume") from None
            if exc.filename is None:
                raise
            raise UsageError(f"{exc.filename}: {exc.strerror or exc}") from None
    return wrapper


def _tokens(v) -> list[int]:
    from .core import validate
    return validate.tokens(v, "tokens")


def _models(v) -> list[str]:
    """A model name, a comma string (custom:... keeps its commas) or a list of names."""
    from .core.problems import parse_model
    out = split_models(v) if isinstance(v, str) and v.strip() else list(v) if isinstance(
        v, (list, tuple)) and v and all(isinstance(m, str) and m.strip() for m in v) else None
    if out is not None:
        for m in out:
            try:
                parse_model(m)
            except UsageError as exc:
                raise UsageError(f"models: {exc}") from None
        return out
    raise UsageError(f"models {_shown(v)}: give one or more model names, e.g. 'qwen3-30b-a3b' or "
                     "['mixtral-8x7b', 'custom:H=4096,I=14336,E=8,k=2']")


def _backends(v) -> str | None:
    """The backends asked for as one comma string for registry.parse_names (None: all)."""
    from .core import validate
    names = validate.names(v, "backends", "backend names, e.g. 'torch'")
    try:  # each known, said before anything runs
        return None if names is None else ",".join(registry.parse_names(",".join(names)))
    except UsageError as exc:
        raise UsageError(f"backends: {exc}") from None


def _has(has, name: str) -> None:
    """`has` None or a kind of rows (Run.has); UsageError naming `name` otherwise."""
    from .core import validate
    kinds = "None or a kind of rows: 'ok', 'compile', 'distributed' or a mode name such as 'graph'"
    if has is not None:
        validate.text(has, name, kinds)
        if has not in ("results", "ok", "compile", "distributed", "aiter-tuner"):
            try:  # any other is a mode name; was: an empty table for any word
                parse_mode(has)
            except UsageError:
                raise UsageError(f"{name} {_shown(has)}: give {kinds}") from None


def _data_dir(value, name: str, what: str = "a folder or file path") -> None:
    """`value` None or a folder that is there; UsageError naming `name` otherwise (was: []
    or an empty table, as if the folder held no run)."""
    from .core import validate
    validate.path(value, name, what=what)
    if value is not None and not Path(value).is_dir():
        raise UsageError(f"{name} {str(value)!r}: no such folder")
    validate.not_a_run_folder(value, f"{name} {str(value)!r}")  # was [] or an empty table


def open_run(run=None, has: str | None = None) -> Run:
    """storage.store.open_run (a run folder, a run id under the data folder, or None: the
    newest run with data of kind `has`) with `has` checked first, as find_runs checks it."""
    _has(has, "open_run: has")
    if run is not None and not isinstance(run, Run) and (
            not isinstance(run, (str, Path)) or not str(run).strip()):
        raise UsageError(f"run {_shown(run)}: give a run folder (a path) or a run id (a str)")
    return store.open_run(run, has)


def find_runs(data_dir_=None, has: str | None = None, defaults: bool = False) -> list[Run]:
    """storage.store.find_runs (every run folder under data_dir_, default the data folder,
    with data of kind `has`, newest first) with its arguments checked first: '' (read as
    the current folder), a folder not there or a `has` no run can have (each answered [],
    as if no run had it) are refused in one line."""
    _data_dir(data_dir_, "find_runs: data_dir_", what="a folder of run folders")
    _has(has, "find_runs: has")
    if not isinstance(defaults, bool):
        raise UsageError(f"find_runs: defaults {_shown(defaults)}: give True or False")
    return store.find_runs(data_dir_, has, defaults)


def runs(data_dir=None, has: str | None = None) -> pd.DataFrame:
    """One row per run folder (newest first): run_id, started, device, status, rows,
    ok rows, commits, path. has: None, 'ok', 'compile', 'distributed' or a mode name."""
    _data_dir(data_dir, "data_dir")
    _has(has, "has")
    rows = []
    for r in store.find_runs(data_dir, has=has):
        res = r.results
        rows.append(dict(run_id=r.run_id, started=r.manifest.get("started"), device=r.device,
                         status=r.manifest.get("status"), rows=len(res),
                         ok=int((res["status"] == "ok").sum()) if len(res) else 0,
                         commits=",".join(r.commits()), path=str(r.path)))
    return pd.DataFrame(rows, columns=["run_id", "started", "device", "status", "rows", "ok",
                                       "commits", "path"])


@_one_line
def check(model: str, tokens=(1, 16), backends=None, tp: int = TP_DEFAULT, ep: int = 1,
          ep_rank: int = 0, dtype: str = "bf16", routing: str = "uniform",
          device: str | None = None, seed: int = 0) -> pd.DataFrame:
    """Each backend against the reference on fresh inputs: one row per backend x tokens
    with status (ok / incorrect / unsupported / ...), max_rel_err and threshold."""
    from .core import validate
    validate.text(model, "model", "a model name, e.g. 'qwen3-30b-a3b' or "
                  "'custom:H=4096,I=14336,E=8,k=2'")
    device = _point(tp, ep, ep_rank, dtype, routing, device, seed)
    tokens, wanted = _tokens(tokens), _backends(backends)
    device = resolve_device(device)
    names = (registry.parse_names(wanted) if wanted else
             registry.for_dtype(registry.names(), dtype))
    rows = []
    for i, t in enumerate(tokens):
        prob = make_problem(model, t, dtype, tp, ep, ep_rank if ep > 1 else 0)
        rows += check_problem(prob, names, device, seed + i, routing)
    return pd.DataFrame(rows)


SWEEP_OPTIONS = ("profile", "warmup_ms", "rep_ms", "compile_budget_s", "point_timeout_s", "traces")


@_one_line
def measure(models, tokens, backends=None, modes=None, tp=TP_DEFAULT, ep=1, ep_rank: int = 0,
            routing="uniform", dtype: str = "bf16", device: str | None = None, run=None,
            seed: int = 0, progress: bool = False, glue="fused", **options) -> pd.DataFrame:
    """Check and time points; returns their rows (the results.parquet schema).

    models, tokens, backends, modes, tp, ep, routing, glue: a value, a list or a comma
    string (tokens also `1-64`). modes default to eager (CPU) or eager,graph (GPU). glue:
    fused (default), aiter or naive (`sweep --glue`). `run`: where the run is kept (and
    resumed when called again): a run id, a name such as 'mine', is the folder of that name
    in the data folder (store.data_dir(), where ml.runs() and the notebooks look, whatever
    the working directory); a path (a Path, or a str with a '/') is that folder; None
    measures into a temporary folder that is removed. options: Sweep's (profile, warmup_ms, rep_ms, compile_budget_s,
    point_timeout_s, traces). Every value is checked as the CLI checks it, before
    anything is written (UsageError, one line)."""
    from .core import validate as opts
    from .measuring.sweep import Grid, Sweep
    unknown = sorted(set(options) - set(SWEEP_OPTIONS))
    if unknown:
        raise UsageError(f"measure() got an unknown option {unknown[0]!r}; it takes "
                         f"{', '.join(SWEEP_OPTIONS)}")
    opts.timing(options.get("warmup_ms"), options.get("rep_ms"), options.get("point_timeout_s"),
                options.get("traces"), api=True)  # the CLI's ranges, the same one line
    if "compile_budget_s" in options:
        options["compile_budget_s"] = _budget(options["compile_budget_s"])
    if "profile" in options and not isinstance(options["profile"], bool):
        raise UsageError(f"profile {options['profile']!r}: give True or False")
    device = _point(tp, ep, ep_rank, dtype, routing, device, seed, one=False)
    models, tokens, wanted = _models(models), _tokens(tokens), _backends(backends)
    tps, eps, routings = _wholes(tp, "tp"), _wholes(ep, "ep"), _routings(routing)
    glues = _glues(glue)
    if run is not None:
        if not isinstance(run, (str, Path)) or not str(run):
            raise UsageError(f"run={_shown(run)}: give a folder path (str or Path), or None")
        run = _run_folder(run)
        if Path(run).exists() and not Path(run).is_dir():
            raise UsageError(f"run={str(run)!r} is a file, not a run folder")
        _resume_settings(Path(run), options)
    if modes is not None and (not isinstance(modes, (str, list, tuple)) or isinstance(
            modes, str) and not modes.strip() or not all(isinstance(m, (str, Mode)) for m in
                                                        _list(modes, lambda x: x))):
        raise UsageError(f"modes {_shown(modes)}: give eager, graph or compile:<variant>, a comma "
                         "string or a list of them")
    device = resolve_device(device)
    modes = modes or ("eager,graph" if device.startswith("cuda") else "eager")
    grid = Grid(models=models, tokens=tokens,
                backends=registry.parse_names(wanted) if wanted else
                registry.for_dtype([b.name for b in registry.all_backends()
                                    if b.available()[0]], dtype),
                modes=_modes(modes, opts),
                tps=tps, eps=eps, ep_rank=ep_rank, routings=routings, dtype=dtype, glues=glues)
    grid.shards()  # bad models or shardings fail before anything runs
    tmp = None if run is not None else tempfile.mkdtemp(prefix="moe-lab-measure-")
    path = Path(run) if run is not None else Path(tmp) / "run"
    try:
        Sweep(grid, device, path, seed=seed, progress=progress,
              command=f"moe_lab.measure({grid.config()})", **options).run()
        return open_run(path).results
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _modes(modes, opts) -> list:
    try:
        return [m if isinstance(m, Mode) else parse_mode(opts.text(m, "modes", "a mode"))
                for m in _list(modes, lambda x: x)]
    except UsageError as exc:
        raise UsageError(str(exc) if str(exc).startswith("modes") else f"modes: {exc}") from None


def _run_folder(run) -> Path:
    """measure(run=...): a name without a path separator is a run id under the data folder
    (from notebooks/, run='mine' once wrote notebooks/mine, which nothing reads); a Path,
    or a str with a separator, is the folder it names."""
    import os
    from .storage.store import data_dir
    seps = [s for s in (os.sep, os.altsep, "/") if s]
    if isinstance(run, str) and not any(s in run for s in seps) and run not in (".", ".."):
        from .core.validate import run_id
        return data_dir() / run_id(run, "run")
    return Path(run)


def _glues(v) -> list[str]:
    from .core.validate import parse_glues
    from .core.glue import GLUES
    if isinstance(v, (list, tuple)) and all(isinstance(g, str) for g in v):
        v = ",".join(v)
    if not isinstance(v, str):
        raise UsageError(f"glue {_shown(v)}: give one or more of {', '.join(GLUES)}")
    return parse_glues(v, "glue")


def _budget(v) -> dict:
    """compile_budget_s: seconds (every backend) or {backend or '*': seconds}."""
    from .core import validate
    items = v.items() if isinstance(v, dict) else [("*", v)]
    return {k: validate.limit(s, "budget", "compile_budget_s") for k, s in items}


def _resume_settings(path: Path, options: dict) -> None:
    """A resumed run keeps its timing budget: warmup_ms and rep_ms not given are the
    folder's (a resume with other values is refused, moe_lab.storage.resume)."""
    from .core.errors import CorruptFile
    from .storage.store import MANIFEST, read_json
    try:
        config = read_json(path / MANIFEST).get("config")
    except CorruptFile:  # the sweep refuses it (or sets it aside) in its own words
        return
    if isinstance(config, dict):
        for k in ("warmup_ms", "rep_ms"):
            if k not in options and isinstance(config.get(k), (int, float)):
                options[k] = config[k]


@_one_line
def profile(model: str, tokens: int, backend: str = "torch", tp: int = TP_DEFAULT, ep: int = 1,
            ep_rank: int = 0, dtype: str = "bf16", routing: str = "uniform",
            device: str | None = None, iters: int = PROFILE_ITERS, trace: str | None = None,
            seed: int = 0) -> tuple[pd.DataFrame, str]:
    """One point under the profiler, after a check: (per-kernel table with phases, path of
    the Chrome trace, which opens in Perfetto). UsageError when the backend cannot run
    the point here or fails its check."""
    from .core import validate
    validate.text(model, "model", "a model name, e.g. 'qwen3-30b-a3b'")
    tokens = validate.count(tokens, "tokens", 1)
    validate.tokens(tokens)  # at most MAX_TOKENS
    validate.api_values(iters=iters)
    device = _point(tp, ep, ep_rank, dtype, routing, device, seed)
    validate.text(backend, "backend", "one backend name, e.g. 'torch'")
    if trace is not None:
        trace = validate.output(trace, "trace")
    from .measuring.profiling import profile_point
    return profile_point(model, tokens, backend, tp, ep, ep_rank, dtype, routing,
                         resolve_device(device), iters, trace, seed)
