"""What a writer checks before it resumes a run folder, so that a refused resume writes
nothing (the folder stays byte-identical) and an accepted one never mixes rows measured
differently:

    with sweep_lock(sweep): ...              Sweep.run: check, lock (moe_lab.storage.runlock),
                                             check again under the lock, then measure
    check_run_files(store)                   every file readable and of its schema
    refuse_other_settings(store, kind, config, keys)
                                             the folder's settings are this call's

Both raise a UsageError (CorruptFile for a file) whose one line names the file or the
settings; the CLI prints it and exits 2.
"""
from __future__ import annotations

import contextlib
import numbers
import sys
from pathlib import Path

from ..core.errors import CorruptFile, UsageError
from .rows import check_manifest, check_table  # noqa: F401 (the schema checks, re-exported)


def check_run_files(store, tables: dict[str, tuple[str, ...]] | None = None,
                    unreadable_ok: bool = False) -> None:
    """Every file of a run folder readable (CorruptFile otherwise, nothing written), its
    manifest of the manifest's schema, results and kernels with their point ids and
    column kinds; `tables`: more parquet files and the columns they need.
    `unreadable_ok`: a file that cannot be read at all is passed over (a resume that sets
    such files aside); one that reads but is of another schema is still refused."""
    from .store import _read
    if not unreadable_ok:
        store.check_readable()
    try:
        check_manifest(store.manifest_path, store.read_manifest())
    except CorruptFile:
        if not unreadable_ok or not _unreadable(store.manifest_path):
            raise
    need = {"results.parquet": ("point_id", "status"), "kernels.parquet": ("point_id",),
            "samples.parquet": ("point_id",), "phases.parquet": ("point_id",)}
    need.update(tables or {})
    for name, cols in need.items():
        try:
            df = _read(store.dir / name)
        except CorruptFile:
            if unreadable_ok:
                continue
            raise
        if df is not None:
            check_table(store.dir / name, df, cols)


def _unreadable(path) -> bool:
    from .store import read_json
    try:
        read_json(path)
    except CorruptFile:
        return True
    return False


def _same(a, b) -> bool:
    """Whether the setting a run recorded (`a`) is the one given now (`b`). Within a dict
    (a search plan), as at the top: a key the run does not record (a setting added since)
    is not compared."""
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) <= set(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def _show(v) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


def refuse_other_settings(store, kind: str, config: dict, keys: tuple[str, ...],
                          flags: dict[str, str] | None = None, unreadable_ok: bool = False,
                          no_manifest_ok: bool = False) -> None:
    """UsageError when the folder holds a run of another kind (sweep, tune, import), or
    one whose settings among `keys` differ from `config` (what a row means: its inputs'
    seed, dtype, timing budget...): a resume must not add rows measured otherwise, nor
    rewrite the manifest to describe rows it did not measure. A key the folder's manifest
    does not record (an older run) is not compared, nor one inside a recorded dict (a
    search plan from before its `near_keys`: the search resumes with the pass). A folder
    with rows but no manifest (absent or empty) is refused: nothing says how they were
    measured (`no_manifest_ok`: a sweep asked to set unreadable files aside, whose manifest
    may be one of them). `unreadable_ok`: a manifest that cannot be read is passed over (it
    is to be set aside)."""
    try:
        manifest = store.read_manifest()
    except CorruptFile:
        if unreadable_ok:
            return
        raise
    if not manifest:
        rows = sorted(p.name for p in Path(store.dir).glob("*.parquet"))
        if rows and not no_manifest_ok:  # was: resumed, rows kept unchecked
            raise UsageError(f"{store.dir} holds measured rows ({', '.join(rows)}) but no "
                             "manifest.json recording their settings: a resume cannot check "
                             "them; restore its manifest or write another run id")
        return
    theirs = manifest.get("kind") or ("sweep" if "config" in manifest else None)
    if theirs is not None and theirs != kind:
        raise UsageError(f"{store.dir} holds a {theirs} run, not a {kind} run: write another "
                         "run id")
    old = manifest.get("config") or {}
    diff = [k for k in keys if k in old and not _same(old[k], config.get(k))]
    if diff:
        flags = flags or {}
        said = "; ".join(f"{flags.get(k, '--' + k.replace('_', '-'))} {_show(old[k])} there, "
                         f"{_show(config.get(k))} now" for k in diff)
        raise UsageError(f"{store.dir} was measured with other settings ({said}): a resume "
                         "must use the run's settings; pass them, or write another run id")


# settings that change what a sweep's row means: a resume with others is refused
SWEEP_MEANING = ("device", "dtype", "seed", "warmup_ms", "rep_ms", "routing")
SWEEP_FLAGS = dict(device="--device", dtype="--dtype", seed="--seed", warmup_ms="--warmup-ms",
                   rep_ms="--rep-ms", routing="--routing")


def check_sweep(sweep, locked: bool) -> None:
    """Refuse (one line, nothing written) a folder `sweep` (moe_lab.measuring.sweep.Sweep) must not
    write: another writer's now (before the lock), a file unreadable or not of its
    schema, another kind of run, other settings. Unreadable files with
    set_aside_corrupt: passed over before the lock, set aside under it."""
    from ..core.errors import RunLocked
    from ..core.validate import not_inside_run
    from .runlock import busy
    not_inside_run(sweep.run_dir)  # --data-dir or MOE_LAB_DATA a run's folder (or in one)
    if not locked:
        who = busy(sweep.run_dir)
        if who:
            raise RunLocked(who)
    store = sweep.store
    if not store.dir.exists():
        return
    later = sweep.set_aside_corrupt and not locked
    if sweep.set_aside_corrupt and locked:
        moved = store.set_aside_corrupt()
        for p in moved:
            print(f"set aside {p} (unreadable); its points will be re-measured", file=sys.stderr)
        # a point's kernels, samples, phases or compile rows are made with its row: any of
        # them set aside, every point is measured again, so that the file is made anew
        # (the manifest alone is re-made by the resume's own invocation)
        if any(not p.name.startswith(("manifest.json", "results.parquet")) for p in moved):
            sweep.redo_all = True
    check_run_files(store, unreadable_ok=later)
    config = dict(sweep.grid.config(), device=sweep.device, seed=sweep.seed,
                  warmup_ms=sweep.warmup_ms, rep_ms=sweep.rep_ms)
    refuse_other_settings(store, "sweep", config, SWEEP_MEANING, SWEEP_FLAGS, unreadable_ok=later,
                          no_manifest_ok=sweep.set_aside_corrupt)


@contextlib.contextmanager
def sweep_lock(sweep):
    """Check (a refused call touches nothing), take the folder's lock, check again (a
    writer may have finished meanwhile), then let the sweep measure, holding the lock."""
    from .runlock import run_lock
    check_sweep(sweep, locked=False)
    with run_lock(sweep.run_dir, sweep.command):
        check_sweep(sweep, locked=True)
        yield
