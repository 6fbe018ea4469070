"""The options verbs share, declared once: one name, one default, one meaning each.

    options.shape(p, many=True)       --tp, --ep, --ep-rank
    options.dtype(p)                  --dtype (choices: the dtypes with a correctness limit)
    options.device(p)                 --device (cuda when torch sees a GPU, else cpu)
    options.data_dir(p)               --data-dir
    options.config(p, many=True)      --config default|tuned|PATH

`many`: the verb takes a list (sweep, check, tune: "1,8") or one value (profile, roofline).
"""
from __future__ import annotations

from ..correctness import THRESHOLDS

TP_DEFAULT = 8  # every seed claim is a TP8 deployment


def shape(p, many: bool = True, ep_default: str | None = None) -> None:
    if many:
        p.add_argument("--tp", default=str(TP_DEFAULT), help="tensor-parallel size(s), e.g. 8 or 4,8")
        p.add_argument("--ep", default=ep_default,
                       help="expert-parallel size(s), 1 = none, e.g. 1,8 for both"
                            + ("" if ep_default else " (default: 1,8 on a GPU, 1 on a CPU)"))
    else:
        p.add_argument("--tp", type=int, default=TP_DEFAULT, help="tensor-parallel size")
        p.add_argument("--ep", type=int, default=1,
                       help="expert-parallel size, 1 = none (== tp when > 1)")
    p.add_argument("--ep-rank", type=int, default=0, help="the EP rank whose experts are held")


def default_eps(args_ep: str | None, gpu: bool) -> str:
    """The EP sizes of a list-taking verb: as given, else 1,8 on a GPU and 1 on a CPU."""
    return args_ep or ("1,8" if gpu else "1")


def dtype(p) -> None:
    p.add_argument("--dtype", default="bf16", choices=sorted(THRESHOLDS),
                   help="bf16, fp16, fp32 or an fp8 scheme as checkpoints ship it: fp8-tensor, "
                        "fp8-channel, fp8-block128")


def device(p) -> None:
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda when torch sees a GPU, else cpu")


def data_dir(p) -> None:
    p.add_argument("--data-dir", default=None,
                   help="where run folders live (default: $MOE_LAB_DATA, else the checkout's data/runs)")


def config(p, many: bool = True) -> None:
    p.add_argument("--config", default="default",
                   metavar="default|tuned|PATH" + ("[,...]" if many else ""),
                   help="launch configurations of tunable backends (aiter-triton): their own "
                        "(default), the tuned files of this device under data/configs/<device>/ "
                        "(tuned; a shape without one is refused or an unsupported row saying so), "
                        "or a config file" + ("; several, each its own point: default,tuned"
                                              if many else ""))


# --- values checked once, for the verbs and the notebook API (moe_lab.api) -------------------
# Each raises UsageError (the CLI: one line, exit 2) naming the option as the caller spelt
# it (`--rep-ms` on the command line, `rep_ms` in Python) and the range it must be in.

def run_id(value, name: str = "--run-id") -> str:
    """A run id is a folder name under the data folder, never a path: no separator, not
    absolute, not `.`/`..` (nor hidden: `find_runs` skips dot folders), no NUL."""
    import os
    from ..errors import UsageError
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
    from ..errors import UsageError
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
