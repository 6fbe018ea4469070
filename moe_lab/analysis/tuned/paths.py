"""Where a shape's tuned files are and when they were written: the names its backend reads,
the configs folder of a device, a provenance.json read once per version. Shared by
files (the files as data) and published (the files against published tunings), so
neither imports the other for them.

    PAIR_KEY                                  the columns a default/tuned pair is keyed by
    file_names(backend, model, tp, ep, dtype, device)  {stage: file name} the backend reads
    configs_folder(configs_dir, device)         the folder (this checkout's for the device)
    _written(root, backend, model, tp, ep, dtype, device)  when the shape's file was written
    is_history(root, pair, device)              a tuned row measured before its file: history
"""
from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from ...storage.checked import TEXT, TP, takes


@functools.lru_cache(maxsize=256)
@takes(backend=TEXT, model=TEXT, tp=TP, ep=TP, dtype=TEXT, device=TEXT)
def file_names(backend, model, tp, ep, dtype, device) -> dict:
    """{stage: file name} (storage.configs.tuned_file_paths': the one composition)."""
    return {s: p.name for s, p in file_paths(backend, model, tp, ep, dtype, device, None).items()}


def file_paths(backend, model, tp, ep, dtype, device, configs_dir) -> dict:
    """{stage: path} of a shape's tuned files on a device (storage.configs.tuned_file_paths)."""
    from ...core.problems import make_problem
    from ...storage.configs import tuned_file_paths
    return tuned_file_paths(backend, make_problem(model, 1, dtype, tp, ep), device, configs_dir)


def check_folders(who: str, **given) -> None:
    """UsageError for a folder given (not None) that is not one: a typo read as an empty
    folder answered as if nothing were tuned or searched. An empty str is none (it was
    read as the current folder)."""
    import os

    from ...core.errors import UsageError
    for what, d in given.items():
        if d is not None and not isinstance(d, (str, os.PathLike)):  # was Path()'s TypeError
            from ...core.validate import shown
            raise UsageError(f"{who}: {what} {shown(d)}: give a folder (str or Path), or None for "
                             "the default")
        if d is not None and (isinstance(d, str) and not d or not Path(d).is_dir()):
            raise UsageError(f"{who}: {what} {d!s} is not a folder" if d != "" else
                             f"{who}: {what} is empty; give a folder, or None for the default")


def check_required(value, who: str) -> tuple:
    """`required` as a tuple of (issue, backend, model, tp, ep, dtype) (tuned.REQUIRED's
    form); UsageError naming `who` otherwise (was: a ValueError or TypeError unpacking it)."""
    from ...core.errors import UsageError
    from ...core.validate import shown
    items = list(value) if isinstance(value, (list, tuple)) else None
    bad = next((r for r in items or () if not (
        isinstance(r, (list, tuple)) and len(r) == 6 and all(isinstance(x, str) for x in r[1:3])
        and all(isinstance(x, int) and not isinstance(x, bool) for x in r[3:5])
        and isinstance(r[5], str))), None)
    if not items or bad is not None:
        got = f"required {shown(value)}" if bad is None else f"required holds {bad!r}"
        raise UsageError(f"{who}: {got}: give one or more (issue, backend, model, tp, ep, "
                         "dtype) tuples, e.g. tuned.REQUIRED or "
                         "[(38, 'aiter-triton', 'deepseek-r1', 8, 8, 'bf16')]")
    return tuple(tuple(r) for r in items)


def configs_folder(configs_dir, device) -> Path:
    if configs_dir is not None:
        return Path(configs_dir)
    from ...storage.configs import configs_dir_for
    return configs_dir_for(device)


@functools.lru_cache(maxsize=64)
def read_provenance(path: str, mtime_ns: int) -> dict:
    """A provenance.json, parsed once per version of the file (its mtime is in the key):
    {} when absent, CorruptFile naming it when unreadable (store.read_json)."""
    from ...storage.store import read_json
    return read_json(Path(path))


def _written(root: str, backend, model, tp, ep, dtype, device) -> pd.Timestamp | None:
    """When the tuned file this shape reads was written (its provenance), None if unknown."""
    try:
        name = file_names(backend, model, tp, ep, dtype, device)["gemm1"]
    except Exception:  # noqa: BLE001 - a backend or model this install no longer knows
        return None
    f = Path(root) / backend / "provenance.json"
    try:
        prov = read_provenance(str(f), f.stat().st_mtime_ns)
    except OSError:
        return None
    w = (prov.get(name) or {}).get("written")
    return pd.Timestamp(w) if w else None


def is_history(root: str, x: dict, device: str) -> bool:
    """Whether a pair's tuned row (`x`: backend, model, tp, ep, dtype, measured_at_t) is
    history, not evidence about the tuned file now committed: measured before the file was
    written, or the file's writing is not recorded (the one rule of current_pairs and
    published_pairs)."""
    w = _written(root, str(x["backend"]), str(x["model"]), int(x["tp"]), int(x["ep"]),
                 str(x["dtype"]), device)
    return w is None or pd.Timestamp(x["measured_at_t"]) < w


# device first: a point is one GPU's (an H100 run beside the H200 runs is its own points, never
# the newer measurement of an H200 one)
PAIR_KEY = ["device", "model", "tp", "ep", "ep_rank", "dtype", "routing", "tokens", "backend"]


def with_device(r) -> "pd.DataFrame":
    """A run's results with PAIR_KEY's device: the rows' own, else (rows written before it
    was a column, a table built by hand) the run's."""
    res = r.results
    return res if "device" in res or not len(res) else res.assign(device=r.device)
