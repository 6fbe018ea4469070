"""The notebook API's argument check, one layer for every analysis module (issue 67 item 2).

Each module ends with `checked.public(globals())`: its public functions are wrapped so that
each argument is checked where the function is called, by its name. A parameter name means
one kind across the API (KINDS: `run` a Run, a run id or a run folder; `runs` a list of
them; `device` a name; `tp` a whole number; `root` a folder that is there; `table` a
DataFrame ...), checked with core.validate's helpers. A value of the wrong kind is refused
with a UsageError of one line naming the function and the argument (never a DataFrame's
repr); the value a parameter defaults to always passes unchecked, and a valid value is
handed on as it is (a run id where a Run is taken is opened), so what a function answers
for valid arguments does not change. The columns a frame needs are validate.frames'.
A module names in `own` the arguments a function checks in its own words."""
from __future__ import annotations

import functools
import inspect
import math
import os

from ..core import validate
from ..core.errors import UsageError

RUN_WHAT = "a run (a Run, a run id or a run folder)"


def _run_like(v) -> bool:
    return hasattr(v, "results") and hasattr(v, "path")


def _open(v, name: str):
    from ..storage.store import open_run
    return open_run(v)


def run(v, name, p):
    """A Run; a run id or folder is opened (where the default is a run id or None, the
    function opens it itself: the value is handed on)."""
    if _run_like(v):
        return v
    if isinstance(v, (str, os.PathLike)) and str(v).strip():
        if p.default is None or isinstance(p.default, str):
            return v
        return _open(v, name)
    raise UsageError(f"{name} {_short(v)}: give {RUN_WHAT}")


def runs(v, name, p):
    """A list of runs (Runs, run ids or folders; one of them: a list of one)."""
    if _run_like(v) or isinstance(v, (str, os.PathLike)):
        v = [v]
    if v is None:
        raise UsageError(f"{name}: give a list of runs (Runs, run ids or folders), not None")
    if not isinstance(v, (list, tuple)):
        raise UsageError(f"{name} {_short(v)}: give a list of runs (Runs, run ids or folders)")
    if all(_run_like(r) for r in v):
        return v
    bad = [r for r in v if not _run_like(r) and not (isinstance(r, (str, os.PathLike))
                                                     and str(r).strip())]
    if bad:
        raise UsageError(f"{name} holds {_short(bad[0])}: give a list of runs (Runs, run ids "
                         "or folders)")
    return [r if _run_like(r) else _open(r, name) for r in v]


def frame(v, name, p):
    """A DataFrame (validate.frame: its words); numbers' columns holding numbers."""
    return validate.frame(v, (), name)


def text(v, name, p):
    """A str ('' too: many read it as none given)."""
    if not isinstance(v, str):
        raise UsageError(f"{name} {_short(v)}: give a name (a str)"
                         + (", or None" if _none_ok(p) else ""))
    return v


def text_or_none(v, name, p):
    if v is not None and not isinstance(v, str):
        raise UsageError(f"{name} {_short(v)}: give a name (a str), or None")
    return v


def whole(low: int, high: int):
    def check(v, name, p):
        validate._number(v, name, f"a whole number from {low} to {high}", lambda x: x >= low,
                         integer=True, high=high)
        return v
    return check


def tokens(v, name, p):
    validate.tokens(v, name)
    return v


def number(v, name, p):
    """A finite number (NaN too where the default is NaN: not measured)."""
    nan_ok = isinstance(p.default, float) and math.isnan(p.default)
    if nan_ok and isinstance(v, float) and math.isnan(v):
        return v
    validate._number(v, name, "a finite number", lambda x: True)
    return v


def folder(v, name, p):
    """A folder that is there (str or Path)."""
    validate.path(v, name, optional=False, what="a folder")
    if not os.path.isdir(os.fspath(v)) and not os.path.isfile(os.fspath(v)):
        raise UsageError(f"{name} {os.fspath(v)} is not a folder")
    return v


def path(v, name, p):
    return validate.path(v, name, optional=False)


def mapping(v, name, p):
    if not isinstance(v, dict):
        raise UsageError(f"{name} {_short(v)}: give a dict")
    return v


FRAMES = ("table", "rows", "res", "results", "results_df", "df", "pairs", "pts", "est", "cmp",
          "best", "kernels", "kernels_df", "ledger_df", "evaluation", "metrics", "phases_df",
          "ledger", "points")
KINDS = {
    **dict.fromkeys(FRAMES, frame),
    **dict.fromkeys(("run", "after_run", "before_run"), run),
    "runs": runs,
    **dict.fromkeys(("device", "mode"), text_or_none),
    **dict.fromkeys(("model", "dtype", "backend", "question", "name", "title", "prefer", "word",
                     "routing", "parallel", "fmt", "what", "range_name", "metric", "point_id",
                     "sharding", "shipped", "missing", "run_id", "command", "uncalibrated"),
                    text),
    **dict.fromkeys(("tp", "ep", "n", "world_size"), whole(1, 1024)),
    "seed": whole(0, 2**32 - 1), "level": whole(1, 6), "n_resamples": whole(1, 100_000),
    "elem_bytes": whole(1, 16), "tokens": tokens,
    **dict.fromkeys(("lo", "hi", "wall_us", "eager", "profiled_us", "tol", "band",
                     "ratio", "n_ops"), number),
    **dict.fromkeys(("root", "folder", "where", "data_dir", "configs_dir"), folder),
    "path": path,
    **dict.fromkeys(("manifest", "spread_manifest", "single_manifest", "cfg"), mapping),
}


def _none_ok(p) -> bool:
    return p.default is None or "None" in str(p.annotation)


ANNOTATED = {frame: "DataFrame", text: "str", number: "float", run: "Run", runs: "Run"}


def _annotated_as(p, kind) -> bool:
    """False where the parameter's annotation says it is of another kind (a table's name
    `table: str`, not a frame): that function's name means something else."""
    return (p.annotation is p.empty or kind not in ANNOTATED
            or ANNOTATED[kind] in str(p.annotation))


def _short(v) -> str:
    """A value as a refusal shows it: never a frame's (or any long) repr."""
    if hasattr(v, "columns") and hasattr(v, "index"):
        return f"(a DataFrame of {len(v)} rows)"
    r = repr(v)
    return r if len(r) <= 80 and "\n" not in r else f"(a {type(v).__name__})"


def _is_default(v, p) -> bool:
    d = p.default
    if d is p.empty:
        return False
    if v is d:
        return True
    simple = (str, int, float, bool, tuple, type(None))
    return type(v) is type(d) and isinstance(d, simple) and v == d


def _checked(fn, where: str, skip: set):
    sig = inspect.signature(fn)
    kinds = {a: KINDS[a] for a, p in sig.parameters.items()
             if a in KINDS and a not in skip and _annotated_as(p, KINDS[a])}
    if not kinds:
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return fn(*args, **kwargs)  # Python's own message for a wrong call
        for arg, kind in kinds.items():
            if arg not in bound.arguments:
                continue
            p = sig.parameters[arg]
            v = bound.arguments[arg]
            if _is_default(v, p) or (v is None and _none_ok(p)):
                continue
            name = f"{where}: {arg}"
            try:
                new = kind(v, name, p)
            except UsageError as exc:
                line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if not line.startswith(name):
                    line = f"{name}: {line}"
                raise UsageError(line) from None
            if new is not v:
                bound.arguments[arg] = new
        return fn(*bound.args, **bound.kwargs)
    wrapper.__checked__ = kinds
    return wrapper


def public(ns: dict, own: dict | None = None) -> None:
    """Wrap every public function defined in the module whose globals are `ns` (_checked);
    own: {function name: the arguments it checks itself (or "*": all of them)}."""
    mod = ns["__name__"]
    own = own or {}
    for n, f in list(ns.items()):
        if n.startswith("_") or not inspect.isfunction(f) or f.__module__ != mod:
            continue
        skip = set(own.get(n, ()))
        if "*" in skip:
            continue
        ns[n] = _checked(f, f"{mod.rsplit('.', 1)[-1]}.{n}", skip)
