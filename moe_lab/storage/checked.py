"""The notebook API's one argument check (issue 67 item 2): each public function of an
analysis module declares the kind of the arguments it checks, next to it,

    @takes(run=RUN, mode=MODE)
    def speedup_table(run, mode=None, ...): ...

and the layer checks them where the function is called, before its body runs. A value of
the wrong kind is refused with one UsageError line naming the function and the argument
(`kernel_time.speedup_table: mode 10**30: give a mode name ...`), never a DataFrame's repr.
An argument not declared is not checked here; the value a parameter defaults to always
passes; a valid value is handed on as it is, but a run given by id or folder where a kind
opens it (RUN, RUNS), which is what the functions did with it themselves. The kinds use
core.validate's helpers; a folder kind never asks that the folder be there (a function
reading a folder not yet written answers it as empty, as the device scripts call them).
A DataFrame's columns are one more kind (`columns(...)`, `frame(...)`): a frame without
rows is handed on, and a KeyError the function then raises is the line naming what it
lacks. This is the one such layer (claims.summary uses it too)."""
from __future__ import annotations

import functools
import inspect
import math
import numbers
import os

from ..core import validate
from ..core.errors import CorruptFile, UsageError

shown = validate.shown


class Kind:
    """A named check: `check(value, name)` returns the value to hand on or raises UsageError
    (its line may start with `name`); `none` lets None through (the function reads it as
    'not given', whatever the default); `late(value, name, arguments)`, where given, is
    checked once every argument has passed its `check` (columns(): the columns a frame must
    hold, which may depend on the other arguments)."""

    def __init__(self, check, none: bool = False, late=None):
        self.check, self.none, self.late = check, none, late

    def __or__(self, other):  # RUN | None: None passes too
        if other is None:
            return Kind(self.check, none=True, late=self.late)
        return NotImplemented

    def __and__(self, other):  # FRAME & columns(...): FRAME's check, then the columns late
        return Kind(self.check, none=self.none, late=other.late)


def _run_like(v) -> bool:
    return hasattr(v, "results") and hasattr(v, "manifest")  # a Run, or one built like it


def _open(v, name: str):
    from .store import open_run
    if _run_like(v):
        return v
    if not isinstance(v, (str, os.PathLike)) or not str(v).strip():
        raise UsageError(f"{name} {shown(v)}: give a run (a Run, a run id or a run folder)")
    if "\0" in str(v):
        raise UsageError(f"{name} {shown(v)}: a run id or folder has no NUL character")
    return open_run(v)


def _run(v, name):
    return _open(v, name)


def _run_named(v, name):
    """A Run, or a run id or folder handed on as given (the function opens it itself, with
    what it asks of the run: choose's `has`)."""
    if not _run_like(v) and (not isinstance(v, (str, os.PathLike)) or not str(v).strip()
                             or "\0" in str(v)):
        raise UsageError(f"{name} {shown(v)}: give a run (a Run, a run id or a run folder)")
    return v


def _runs(v, name):
    if _run_like(v) or isinstance(v, (str, os.PathLike)):
        v = [v]
    if v is None:
        raise UsageError(f"{name}: give a list of runs (Runs, run ids or folders), not None")
    if not isinstance(v, (list, tuple)):
        raise UsageError(f"{name} {shown(v)}: give a list of runs (Runs, run ids or folders)")
    return [_open(r, name) for r in v]


def _some_runs(v, name):
    out = _runs(v, name)
    if not out:
        raise UsageError(f"{name} []: give one or more runs (Runs, run ids or folders)")
    return out


class _Later(Exception):
    """A frame without rows that lacks columns: handed on (many answer it with an empty
    result); a KeyError the function then raises is this line, as a UsageError."""


def frame(*needs) -> Kind:
    """A DataFrame holding the columns `needs` (validate.frame's words), its numbers'
    columns holding numbers; one without rows is handed on whatever its columns (_Later)."""
    def check(v, name):
        why = validate._lacking(v, needs, name)
        if why and len(v):
            raise UsageError(why)
        _numbers(v, name)
        if why:
            raise _Later(why)
        return v
    return Kind(check)


def columns(*needs) -> Kind:
    """A DataFrame holding the columns `needs`, or those one function of the call's arguments
    (defaults included) gives, `columns(lambda a: ("tokens", a["values"]))`, checked late
    (Kind), what they hold unchecked; one without rows is handed on whatever its columns
    (_Later)."""
    pick = needs[0] if len(needs) == 1 and callable(needs[0]) else None

    def late(v, name, arguments):
        why = validate._lacking(v, pick(arguments) if pick else needs, name)
        if why and len(v):
            raise UsageError(why)
        if why:
            raise _Later(why)
        return v
    return Kind(lambda v, name: v, late=late)


def _numbers(v, name):
    from pandas.api.types import is_numeric_dtype
    bad = [c for c in NUMERIC if c in v.columns and len(v) and not is_numeric_dtype(v[c].dtype)
           and not v[c].map(lambda x: isinstance(x, (numbers.Number, type(None)))).all()]
    if bad:
        raise UsageError(f"{name}: its column {bad[0]} holds non-numbers; give the rows as read")
    return v


def _text(v, name):
    if not isinstance(v, str) or not v.strip() or any(ord(c) < 32 for c in v):
        raise UsageError(f"{name} {shown(v)}: give a name (a non-empty str)")
    return v


def _mode(v, name):
    from ..storage.modes import parse_mode
    _text(v, name)
    try:
        parse_mode(v)
    except UsageError:
        raise UsageError(f"{name} {shown(v)}: give a mode name (eager, graph or "
                         "compile:<variant>)") from None
    return v


def _folder(v, name):
    """A folder path (str or Path), there or not yet (what is there is the function's to say)."""
    validate.path(v, name, optional=False, what="a folder")
    if "\0" in os.fspath(v):
        raise UsageError(f"{name} {shown(v)}: a path has no NUL character")
    return v


def _file(v, name):
    validate.path(v, name, optional=False, what="a file")
    if "\0" in os.fspath(v):
        raise UsageError(f"{name} {shown(v)}: a path has no NUL character")
    return v


def _dict(v, name):
    if not isinstance(v, dict):
        raise UsageError(f"{name} {shown(v)}: give a dict")
    return v


def _bool(v, name):
    if not isinstance(v, bool):
        raise UsageError(f"{name} {shown(v)}: give True or False")
    return v


def _seq(v, name):
    if isinstance(v, (str, bytes, dict)) or not isinstance(v, (list, tuple, set, frozenset)) \
            and not hasattr(v, "tolist"):
        raise UsageError(f"{name} {shown(v)}: give a list")
    return v


def _items(v, name, what, ok):
    if isinstance(v, (str, bytes, dict)) or not isinstance(v, (list, tuple, set, frozenset,
                                                                range)) and not hasattr(v, "tolist"):
        raise UsageError(f"{name} {shown(v)}: give a list of {what}")
    items = list(v.tolist() if hasattr(v, "tolist") else v)
    bad = [x for x in items if not ok(x)]
    if bad:
        raise UsageError(f"{name} holds {shown(bad[0])}: give a list of {what}")
    return v


def _is_text(x) -> bool:
    return isinstance(x, str) and bool(x.strip()) and "\0" not in x


def _is_whole(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool) and 0 <= x <= 2**31


def _is_number(x) -> bool:
    return x is None or isinstance(x, numbers.Real) and not isinstance(x, bool) and abs(x) < 1e300 \
        or isinstance(x, float) and math.isnan(x)


def _pair(x) -> bool:  # a (backend, config) pair
    return isinstance(x, (tuple, list)) and len(x) == 2 and all(map(_is_text, x))


def _shape(x) -> bool:  # a (model, tp, ep, dtype) shape
    return isinstance(x, (tuple, list)) and len(x) == 4 and _is_text(x[0]) and _is_text(x[3]) \
        and all(_is_whole(n) and 1 <= n <= 1024 for n in x[1:3])


def items(what: str, ok) -> Kind:
    return Kind(lambda v, name: _items(v, name, what, ok))


def _format(v, name):
    try:
        _text(v, name)
        v.format(1.0)
    except (ValueError, IndexError, KeyError, TypeError, UsageError):
        raise UsageError(f"{name} {shown(v)}: give a format of one number, e.g. "
                         "'{:.2f}'") from None
    return v


def _callable(v, name):
    if not callable(v):
        raise UsageError(f"{name} {shown(v)}: give a function")
    return v


def _tokens(v, name):
    validate.tokens(v, name)
    return v


def _number(v, name, nan: bool = False):
    if nan and isinstance(v, float) and math.isnan(v):
        return v
    validate._number(v, name, "a finite number", lambda x: True, high=1e18)
    return v


def whole(low: int, high: int) -> Kind:
    """A whole number from low to high."""
    def check(v, name):
        validate._number(v, name, f"a whole number from {low} to {high}", lambda x: x >= low,
                         integer=True, high=high)
        return v
    return Kind(check)


def positive(v, name):
    validate._number(v, name, "a positive, finite number", lambda x: x > 0, high=1e18)
    return v


NUMERIC = ("median_us", "tokens", "tp", "ep", "roof_us", "floor_us", "measured_us", "over_us",
           "total_us", "calls", "pct_of_roof")
RUN, RUNS, FRAME = Kind(_run), Kind(_runs), frame()
RUN_NAMED = Kind(_run_named)
SOME_RUNS = Kind(_some_runs)
TEXT, MODE, FOLDER, FILE = Kind(_text), Kind(_mode), Kind(_folder), Kind(_file)
DICT, BOOL, SEQ, TOKENS = Kind(_dict), Kind(_bool), Kind(_seq), Kind(_tokens)
NUMBER, NUMBER_OR_NAN, POSITIVE = Kind(_number), \
    Kind(functools.partial(_number, nan=True)), Kind(positive)
TP, SEED = whole(1, 1024), whole(0, 2**32 - 1)
NAMES = items("names (str)", _is_text)
WHOLES = items("whole numbers", _is_whole)
NUMBERS = items("numbers", _is_number)
PAIRS = items("(backend, config) pairs of str", _pair)
PAIR = Kind(lambda v, name: v if _pair(v) else _items([v], name, "(backend, config) of str", _pair))
SHAPES = items("(model, tp, ep, dtype) shapes", _shape)
FORMAT, CALLABLE = Kind(_format), Kind(_callable)
STR = Kind(lambda v, name: v if isinstance(v, str) else _text(v, name))  # '' too
LISTED = items("values", lambda x: True)  # any list (not a str, a dict or a number)


def _is_default(v, p) -> bool:
    d = p.default
    if d is p.empty:
        return False
    if v is d:
        return True
    simple = (str, int, float, bool, tuple, type(None))
    return type(v) is type(d) and isinstance(d, simple) and v == d


def takes(where: str | None = None, /, **kinds):
    """Decorator: check the arguments named in `kinds` (each a Kind) where the function is
    called; see the module's doc. Its refusals name `where` (the module and function, e.g.
    'tuned.roof_from'), else the function's module and name."""
    def deco(fn):
        sig = inspect.signature(fn)
        unknown = set(kinds) - set(sig.parameters)
        assert not unknown, f"{fn.__qualname__} has no parameter {sorted(unknown)}"
        named = where or f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"
        defaults = {a: p.default for a, p in sig.parameters.items() if p.default is not p.empty}

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)  # Python's own message for a wrong call
            later = ""
            for late in (False, True):  # every argument's check, then the columns (Kind)
                for arg, kind in kinds.items():
                    if arg not in bound.arguments or late and kind.late is None:
                        continue
                    v = bound.arguments[arg]
                    if _is_default(v, sig.parameters[arg]) or v is None and kind.none:
                        continue
                    name = f"{named}: {arg}"
                    try:
                        new = kind.late(v, name, {**defaults, **bound.arguments}) if late \
                            else kind.check(v, name)
                    except CorruptFile:
                        raise
                    except _Later as exc:
                        later, new = later or str(exc), v
                    except UsageError as exc:
                        line = (str(exc).splitlines() or [type(exc).__name__])[0]
                        raise UsageError(line if line.startswith(name) else
                                         f"{name} {shown(v)}: {line}") from None
                    bound.arguments[arg] = new
            if not later:
                return fn(*bound.args, **bound.kwargs)
            try:
                return fn(*bound.args, **bound.kwargs)
            except KeyError:
                raise UsageError(later) from None
        wrapper.__takes__ = kinds
        return wrapper
    return deco
