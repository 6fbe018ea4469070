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
        raise UsageError(f"{name} {shown(value)}: a run id is a folder name (no '/', not '.', '..' "
                         "or an absolute path, not starting with '.'); the folder goes under "
                         "--data-dir")
    return text


def run_folder(run, root):
    """Where a run given as a str or path is (store.open_run, tuned.tune_run): the
    folder it names (a path, from the working folder) when there is one, else the run id
    `run` under `root`, one folder name, as measure(run=) reads a name without a
    separator. UsageError (one line) for an id with a '..' (was: `a/../b` opened b, `../x`
    a folder outside the data folder) or a separator, and where no folder is found."""
    import os
    import re
    from pathlib import Path
    from .errors import UsageError
    text = os.fspath(run)
    if Path(text).is_dir():
        return Path(text)
    parts = re.split(r"[/\\]", text)
    if ".." in parts:
        raise UsageError(f"run {text!r}: no such folder, and a run id is one folder name (no "
                         f"'/' or '..'); give a run id under {root} or the path of a run folder")
    if len(parts) == 1 and text not in (".", "") and (Path(root) / text).is_dir():
        return Path(root) / text
    raise UsageError(f"no run folder {run} (nor a run id under {root})")


# Every number a verb or the API takes, with its range (an upper bound for each: a value
# past it never runs for minutes, allocates terabytes or overflows a float; it is refused):
# key (the argparse dest and the API keyword, where they differ: API_NAMES) ->
# (whole number?, lowest, highest, lowest allowed itself?, unit).
DAY_S = 86_400
LIMITS = {
    "seed": (True, 0, 2**32 - 1, True, ""),
    "tp": (True, 1, 1024, True, ""),
    "ep": (True, 1, 1024, True, ""),
    "ep_rank": (True, 0, 1023, True, ""),
    "tokens": (True, 1, 131072, True, ""),  # problems.MAX_TOKENS
    "warmup_ms": (False, 0, 60_000, True, "milliseconds"),
    "rep_ms": (False, 0, 60_000, False, "milliseconds"),
    "point_timeout": (False, 0, DAY_S, False, "seconds"),
    "traces": (True, 0, 10_000, True, ""),
    "nproc": (True, 1, 1024, True, ""),
    "dist_reps": (True, 1, 100_000, True, ""),
    "dist_timeout": (False, 0, DAY_S, False, "seconds"),
    "iters": (True, 1, 10_000, True, ""),
    "resamples": (True, 1, 100_000, True, ""),
    "budget": (False, 0, 7 * DAY_S, False, "seconds"),
    "compile_workers": (True, 0, 1024, True, ""),
    "verify": (True, 0, 131072, True, ""),
    "cu_num": (True, 1, 100_000, True, ""),
    "timeout": (False, 0, DAY_S, False, "seconds"),
    # ceilings' (were unchecked: on a GPU, --calls 0 reaches statistics.median([]) and
    # --size-gib nan int(nan), each a traceback; on a CPU machine the 'no GPU' line hid them)
    "size_gib": (False, 0, 1024, False, "GiB"),
    "calls": (True, 1, 100_000, True, ""),
}
API_NAMES = {"point_timeout": "point_timeout_s"}  # the API's keyword where it differs


def shown(value) -> str:
    """A value as a refusal shows it: its repr when short and one line, else its kind (was:
    a DataFrame's whole repr pasted into the message)."""
    r = repr(value)
    return r if len(r) <= 80 and "\n" not in r else f"(a {type(value).__name__})"


def flag(key: str, api: bool) -> str:
    """How the caller spells a value: `--rep-ms` (CLI) or `rep_ms` (API)."""
    return API_NAMES.get(key, key) if api else "--" + key.replace("_", "-")


def _number(value, name: str, what: str, ok, integer: bool = False, high=None, unit: str = ""):
    import math
    import numbers
    from .errors import UsageError
    good = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if good and integer:
        good = float(value).is_integer() and math.isfinite(value) if isinstance(value, float) \
            else True
    if good:
        good = (isinstance(value, numbers.Integral) or math.isfinite(value)) and ok(value)
    if not good:
        raise UsageError(f"{name} {shown(value)}: give {what}")
    if high is not None and value > high:
        raise UsageError(f"{name} {shown(value)}: at most {high}{' ' + unit if unit else ''} "
                         f"(give {what})")
    return int(value) if integer else float(value)


def limit(value, key: str, name: str | None = None, api: bool = False):
    """`value` checked against LIMITS[key]: UsageError naming it as `name` (default: the
    flag or keyword of `key`)."""
    integer, low, high, closed, unit = LIMITS[key]
    name = name or flag(key, api)
    if integer:
        return _number(value, name, f"a whole number >= {low}",
                       lambda v: v >= low, integer=True, high=high, unit=unit)
    if closed:
        return _number(value, name, f"a finite number >= {low:g}{' of ' + unit if unit else ''}",
                       lambda v: v >= low, high=high, unit=unit)
    return _number(value, name, f"a positive, finite number{' of ' + unit if unit else ''}",
                   lambda v: v > low, high=high, unit=unit)


def cli_values(args) -> None:
    """Every number a verb was given (argparse's namespace) within its LIMITS, named by
    its flag; a comma list of whole numbers (`--tp 4,8`) each. One place for every verb:
    cli.main calls it before the verb runs, so nothing is written before a refusal."""
    for key in LIMITS:
        value = getattr(args, key, None)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, str):  # a list-taking verb's `4,8`; its own parser says the rest
            if not LIMITS[key][0] or key == "tokens":  # problems.parse_tokens says its cap
                continue
            for part in value.split(","):
                try:
                    number = int(part.strip())
                except ValueError:
                    continue
                limit(number, key, flag(key, False))
            continue
        limit(value, key, flag(key, False))


API_LISTS = ("tp", "ep", "tokens")  # the API's values that may be a list, or text "4,8"


def api_values(**values) -> None:
    """The notebook API's numbers, each within its LIMITS (the CLI's), named by keyword;
    a list (tp=[4, 8]) each, for API_LISTS. None: not given. Text for any other (iters='5')
    is refused (was: passed on, a TypeError from inside)."""
    for key, value in values.items():
        if value is None:
            continue
        rule = next((k for k in LIMITS if API_NAMES.get(k, k) == key), key)
        items = value if isinstance(value, (list, tuple)) and rule in API_LISTS else [value]
        if isinstance(value, str) and LIMITS[rule][0] and rule in API_LISTS:
            items = [_whole_text(v, key) for v in value.split(",") if v.strip()] or [value]
        for v in items:
            limit(v, rule, key)


def _whole_text(text: str, name: str):
    try:
        return int(text.strip())
    except ValueError:
        return text.strip()  # refused by limit() as not a number


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
    """The numbers of a sweep (or tune), each in its range (LIMITS); None: not given.
    `api`: name them as Python keywords (rep_ms=) rather than flags (--rep-ms)."""
    for key, value in (("warmup_ms", warmup_ms), ("rep_ms", rep_ms),
                       ("point_timeout", point_timeout), ("traces", traces), ("nproc", nproc)):
        if value is not None:
            limit(value, key, api=api)


def device(value, name: str = "device") -> str | None:
    """None (cuda when torch sees a GPU, else cpu), "cpu", "cuda" or "cuda:N"."""
    import re
    from .errors import UsageError
    if value is None or (isinstance(value, str) and re.fullmatch(r"cpu|cuda(:\d+)?", value)):
        return value
    raise UsageError(f"{name} {shown(value)}: give cpu or cuda (cuda:N for one GPU), or leave it "
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
        raise UsageError(f"{name} {shown(value)}: give one or more token counts, e.g. [1, 16] or "
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
    out = list(dict.fromkeys(v.strip() for v in items if v.strip())) if good else []
    if not out:
        raise UsageError(f"{name} {shown(value)}: give one or more {what} (a comma string or a "
                         f"list of str), or None for the default")
    return out


def text(value, name: str, what: str) -> str:
    """A non-empty str (a model name, a routing, a dtype...)."""
    from .errors import UsageError
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{name} {shown(value)}: give {what}")
    return value


def choice(value, name: str, options) -> str:
    """One of `options` (a str)."""
    from .errors import UsageError
    options = list(options)
    if not isinstance(value, str) or value not in options:
        raise UsageError(f"{name} {shown(value)}: give one of {', '.join(map(str, options))}")
    return value


def path(value, name: str, optional: bool = True, what: str = "a folder or file path"):
    """A path (str or os.PathLike), or None where `optional`."""
    import os
    from .errors import UsageError
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise UsageError(f"{name}={shown(value)}: give {what} (str or Path)"
                         + (", or None" if optional else ""))
    return value


def parse_glues(text: str, name: str = "--glue") -> list[str]:
    """`fused,naive` -> ["fused", "naive"] (UsageError naming a value that is neither)."""
    from .glue import GLUES
    from .errors import UsageError
    out = list(dict.fromkeys(g.strip() for g in str(text).split(",") if g.strip()))
    bad = [g for g in out if g not in GLUES]
    if bad or not out:
        raise UsageError(f"{name} {text!r}: give one or more of {', '.join(GLUES)}")
    return out


# --- the frames the analysis layer's public functions take (the notebooks' API) --------------

def _lacking(value, needs, name: str) -> str:
    """The one line saying which of the columns `needs` the frame `value` lacks ("" if none);
    UsageError when `value` is no DataFrame."""
    from .errors import UsageError
    cols = getattr(value, "columns", None)
    if cols is None or not hasattr(value, "index"):
        raise UsageError(f"{name}: give a DataFrame, not "
                         f"{'None' if value is None else type(value).__name__}")
    missing = [c for c in needs if c not in cols]
    if not missing:
        return ""
    has = [str(c) for c in cols]
    return (f"{name} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"(it has: {', '.join(has[:12]) + (', ...' if len(has) > 12 else '') or 'none'})")


def frame(value, needs, name: str):
    """`value` as a DataFrame holding the columns `needs`; UsageError (one line) naming
    `name` (the function and argument) and the columns it lacks."""
    from .errors import UsageError
    why = _lacking(value, needs, name)
    if why:
        raise UsageError(why)
    return value


# --- where a report-like output may go: never into a run (its files are measured data) --------

RUN_TABLES = ("results.parquet", "candidates.parquet")  # a sweep's or a tune's rows


def is_run_folder(folder) -> bool:
    """A folder holding a run's rows (a sweep's results.parquet, a tune's
    candidates.parquet) or moe-lab's manifest.json (a JSON object naming its run_id): a
    manifest.json of another tool (a web app's, an extension's) in a folder above is not a
    run."""
    import json
    import os
    f = os.fspath(folder)
    if any(os.path.isfile(os.path.join(f, t)) for t in RUN_TABLES):
        return True
    try:
        with open(os.path.join(f, "manifest.json")) as fh:
            m = json.load(fh)
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and "run_id" in m


def run_holding(where):
    """The run folder `where` is, or lies in (the nearest at or above it), as an absolute
    path; None when it is in no run."""
    import os
    p = os.path.abspath(os.fspath(where))
    while True:
        if os.path.isdir(p) and is_run_folder(p):
            return p
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent


def not_a_run_folder(value, head: str) -> None:
    """UsageError when a folder given as a folder of run folders is a run's own folder
    (is_run_folder): it was read as holding no run (findings --data-dir, ml.runs,
    ml.find_runs). `head` starts the line."""
    import os
    from pathlib import Path
    from .errors import UsageError
    if value is not None and is_run_folder(value):
        raise UsageError(f"{head}: a run folder; give the folder of run folders that holds it "
                         f"({Path(os.fspath(value)).resolve().parent})")


def not_in_run(value, name: str, head: str | None = None) -> None:
    """UsageError (one line naming the run) when the output `value` (a file or a folder
    written into) is a run folder, in one, or one of a run's files: a mistyped --out would
    replace measured data (`findings --out RUN/results.parquet` wrote markdown over it)."""
    import os
    from .errors import UsageError
    run = run_holding(value)
    if run is not None:
        where = ("the folder of" if run == os.path.abspath(os.fspath(value)) else
                 "inside the folder of")
        raise UsageError(f"{head or f'{name} {os.fspath(value)}'}: {where} run "
                         f"{os.path.basename(run)} ({run}), whose files are measured data; "
                         "give a path outside any run folder")


def not_inside_run(run_dir, name: str = "run folder") -> None:
    """UsageError (one line naming the run) when a new run folder `run_dir` would go inside
    another run's folder: a writer's run goes in a folder of run folders, never in a run
    (was: `sweep --data-dir RUN`, MOE_LAB_DATA=RUN, `import-aiter --out RUN/x`, `merge
    RUN/m` wrote a run among a run's measured files). `run_dir` itself may be a run (a
    resume, an import replaced)."""
    import os
    from .errors import UsageError
    run = run_holding(os.path.dirname(os.path.abspath(os.fspath(run_dir))))
    if run is not None:
        raise UsageError(f"{name} {os.fspath(run_dir)}: inside the folder of run "
                         f"{os.path.basename(run)} ({run}), whose files are measured data; a "
                         "run folder goes in a folder of run folders (--data-dir, MOE_LAB_DATA)")


def output(value, name: str, folder: bool = False) -> str:
    """Where a writer (findings, check, compare, report, ceilings, --trace, calibration)
    writes: a file (`folder`: a folder written into), neither under a file nor the other
    kind, nor in a run (not_in_run). One line each, the same words for every writer, said
    before anything is computed."""
    import os
    from pathlib import Path
    from .errors import UsageError
    path(value, name, optional=False)
    v = os.fspath(value)
    if not folder and os.path.isdir(v):
        raise UsageError(f"{name} {v}: {v} is a folder, not a file; give a file path")
    for p in ([Path(v)] if folder else []) + list(Path(v).parents):
        if p.exists() and not p.is_dir():
            raise UsageError(f"{name} {v}: {p} is a file, not a folder; give a new path or "
                             "remove the file")
    not_in_run(v, name)
    return v
