"""Values checked once, for the verbs (moe_lab.commands.options) and the notebook API
(moe_lab.api): run ids that are names, numbers in their ranges. Each raises UsageError (the
CLI: one line, exit 2) naming the option as the caller spelt it."""
from __future__ import annotations

# --- values checked once, for the verbs and the notebook API (moe_lab.api) -------------------
# Each raises UsageError (the CLI: one line, exit 2) naming the option as the caller spelt
# it (`--rep-ms` on the command line, `rep_ms` in Python) and the range it must be in.

def run_id(value, name: str = "--run-id") -> str:
    """A run id is a folder name under the data folder, never a path: no separator, not
    absolute, not `.`/`..` (nor hidden: `find_runs` skips dot folders), no NUL."""
    import os
    from .errors import UsageError
    text = value if isinstance(value, str) else None
    seps = [s for s in (os.sep, os.altsep, "/", "\\") if s]
    if (not text or text.strip() != text or text.startswith(".") or "\0" in text
            or any(s in text for s in seps) or os.path.isabs(text) or len(text) > 200
            or any(ord(c) < 32 for c in text)):
        raise UsageError(f"{name} {value!r}: a run id is a folder name (no '/', not '.', '..' "
                         "or an absolute path, not starting with '.'); the folder goes under "
                         "--data-dir")
    return text


def _number(value, name: str, what: str, ok, integer: bool = False):
    import math
    import numbers
    from .errors import UsageError
    good = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if good and integer:
        good = float(value).is_integer() and math.isfinite(value)
    if good:
        good = math.isfinite(value) and ok(value)
    if not good:
        raise UsageError(f"{name} {value!r}: give {what}")
    return int(value) if integer else float(value)


def positive(value, name: str, unit: str = "") -> float:
    """A finite number > 0 (a time budget: --rep-ms, --point-timeout)."""
    return _number(value, name, f"a positive, finite number{' of ' + unit if unit else ''}",
                   lambda v: v > 0)


def non_negative(value, name: str, unit: str = "") -> float:
    """A finite number >= 0 (--warmup-ms: 0 is no warm-up)."""
    return _number(value, name, f"a finite number >= 0{' of ' + unit if unit else ''}",
                   lambda v: v >= 0)


def count(value, name: str, least: int = 0) -> int:
    """A whole number >= least (--traces: 0 or more; --nproc: 1 or more)."""
    return _number(value, name, f"a whole number >= {least}", lambda v: v >= least, integer=True)


def timing(warmup_ms=None, rep_ms=None, point_timeout=None, traces=None, nproc=None,
           api: bool = False) -> None:
    """The numbers of a sweep (or tune), each in its range; None: not given. `api`: name
    them as Python keywords (rep_ms=) rather than flags (--rep-ms)."""
    def n(flag, kw):
        return kw if api else flag
    if warmup_ms is not None:
        non_negative(warmup_ms, n("--warmup-ms", "warmup_ms"), "milliseconds")
    if rep_ms is not None:
        positive(rep_ms, n("--rep-ms", "rep_ms"), "milliseconds")
    if point_timeout is not None:
        positive(point_timeout, n("--point-timeout", "point_timeout_s"), "seconds")
    if traces is not None:
        count(traces, n("--traces", "traces"), 0)
    if nproc is not None:
        count(nproc, n("--nproc", "nproc"), 1)


def device(value, name: str = "device") -> str | None:
    """None (cuda when torch sees a GPU, else cpu), "cpu", "cuda" or "cuda:N"."""
    import re
    from .errors import UsageError
    if value is None or (isinstance(value, str) and re.fullmatch(r"cpu|cuda(:\d+)?", value)):
        return value
    raise UsageError(f"{name} {value!r}: give cpu or cuda (cuda:N for one GPU), or leave it "
                     "out for cuda when a GPU is visible, else cpu")


def tokens(value, name: str = "tokens") -> list[int]:
    """Token counts as the API takes them: `1,16` or `1-64` (a str), a whole number, or a
    list of whole numbers, each >= 1 (and at most problems.MAX_TOKENS); never empty."""
    from .errors import UsageError
    from .problems import parse_tokens
    if isinstance(value, str):
        return parse_tokens(value)
    values = [value] if not isinstance(value, (list, tuple, range)) and not hasattr(
        value, "tolist") else list(value.tolist() if hasattr(value, "tolist") else value)
    if not values:
        raise UsageError(f"{name} {value!r}: give one or more token counts, e.g. [1, 16] or "
                         "'1-64'")
    ints = [count(v, name, 1) for v in values]
    return parse_tokens(",".join(map(str, ints)))  # its cap, and each count once


def names(value, name: str, what: str) -> list[str] | None:
    """None (the default), or one or more names: a comma string or a list of str."""
    from .errors import UsageError
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    good = isinstance(items, (list, tuple)) and all(isinstance(v, str) for v in items)
    out = [v.strip() for v in items if v.strip()] if good else []
    if not out:
        raise UsageError(f"{name} {value!r}: give one or more {what} (a comma string or a "
                         f"list of str), or None for the default")
    return out
