"""Merging run folders measured apart (the parts of a `--shard` sweep, the GPUs of one host,
other machines) into one run: `moe-lab merge`, and `sweep --gpus` after its parts.

    merge_runs("data/runs/all", ["data/runs/part-0-of-2", "data/runs/part-1-of-2"])

Every row keeps its device, commit and time; a point measured in two sources is an error,
never silently one of them. Every file of a source is carried and read (checked) before
anything is written: results, kernels, samples, phases, compile and any other table, and
its traces; a table keyed by point keeps the rows of the points its source measured (a
kill between a point's kernels and its row can leave some of a point not done). The merged
manifest lists every source's manifest and, like a sweep's, the command that made it and
when (its one invocation).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pandas as pd

from ..core.atomic import atomic_write_parquet
from ..core.errors import UsageError
from .store import Run, RunStore, data_dir, open_run

STAMP = "%Y-%m-%dT%H:%M:%S%z"  # a sweep's invocations' format


def merge_runs(dst: str | os.PathLike, sources: list, command: str | None = None) -> RunStore:
    """Combine run folders into `dst`: their rows, kernels, samples, phases, compile and
    other tables and traces, and a manifest listing every source's manifest. A point in two sources is an error
    (ValueError naming it). Holds `dst`'s lock (moe_lab.storage.runlock) for the whole write; a
    source another writer holds is refused. `command`: what the manifest says made it."""
    from .runlock import busy, run_lock
    _new_folder(dst)
    for s in sources:
        s = s.path if isinstance(s, Run) else s
        src = Path(s) if Path(s).is_dir() else data_dir() / str(s)
        who = busy(src)
        if who:
            raise UsageError(who)
    command = command or "moe-lab merge " + " ".join(map(str, [dst, *sources]))
    t0 = time.time()
    runs = [open_run(s) for s in sources]  # every check before the lock: a refusal writes nothing
    _sweeps_only(runs)
    _same_sweep(runs)
    _with_rows(runs)
    ids = pd.concat([r.results["point_id"] for r in runs])
    if ids.duplicated().any():
        raise ValueError(f"point {ids[ids.duplicated()].iloc[0]} is in more than one source")
    tables = _tables(runs)  # every file read and checked: a corrupt one is refused here
    traces = _traces(runs)
    _new_folder(dst)  # again: the sources were read meanwhile
    created = not Path(dst).exists()
    try:
        with run_lock(dst, command):
            return _merge_runs(dst, runs, tables, traces, command, t0)
    except BaseException:
        if Path(dst).is_dir():  # all of it this merge's: whole run or nothing
            if created:  # (was: kept the files written so far)
                shutil.rmtree(dst, ignore_errors=True)
            else:  # an empty folder given: emptied again, kept
                for p in Path(dst).iterdir():
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
        raise


def _new_folder(dst) -> None:
    """`dst` a new or empty folder for the merged run, or UsageError (one line, nothing
    written). Before, a file was 'File exists', and a folder of other files (the data
    folder itself, the working directory) got a run's files among them, `.` with the
    run id ''."""
    from ..core import validate
    from .runlock import LOCK_NAME, busy
    from .store import MANIFEST, RESULTS
    validate.path(dst, "OUT", optional=False)
    validate.not_inside_run(dst, "OUT")  # `merge RUN/m ...`: a run among a run's files
    p = Path(dst)
    if (p / RESULTS).exists():
        raise ValueError(f"{dst} already holds a run")
    parent = p.resolve()
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"OUT {dst}: {parent} is a file, not a folder; give a new folder "
                         "for the merged run")
    who = busy(p) if p.is_dir() else None
    if who:  # another writer's: it is named
        raise UsageError(who)
    if p.is_dir() and any(x.name != LOCK_NAME and not (x.name.startswith(".") and
                                                       x.name.endswith(".tmp"))
                          for x in p.iterdir()):  # a lock or a write a kill left: a new run's
        what = "a run without rows" if (p / MANIFEST).exists() else "other files"
        raise UsageError(f"OUT {dst} is a folder holding {what}, not a new run folder; give "
                         "a new (or empty) folder for the merged run")


def _tables(runs: list[Run]) -> dict[str, pd.DataFrame]:
    """Every parquet table of the sources but results and kernels (samples, phases,
    compile, tuning tables...), read and checked as open_run's readers check them
    (store.TABLE_NEEDS: was, a phases or samples file without point_id or phase merged
    into a run whose reader refused it), each the sources' rows together. A table with
    point ids keeps the rows of the points its source holds a row of. A column whose
    values are of one kind in a part and another in the next is refused naming both files
    (was: pyarrow's tuple, naming neither)."""
    from .rows import check_table
    from .store import KERNELS, RESULTS, TABLE_NEEDS, _read
    names = sorted({p.name for r in runs for p in r.path.glob("*.parquet")} - {RESULTS, KERNELS})
    out = {}
    for name in names:
        parts, paths = [], []
        for r in runs:
            df = _read(r.path / name)  # CorruptFile: one line naming it, nothing written
            if df is None or not len(df):
                continue
            needs = TABLE_NEEDS.get(name, ("point_id",) if "point_id" in df else None)
            if needs:
                check_table(r.path / name, df, needs)
            if "point_id" in df:
                df = df[df["point_id"].isin(set(r.results["point_id"]))]
            parts.append(df)
            paths.append(r.path / name)
        if parts:
            _same_kinds(parts, paths)
            out[name] = pd.concat(parts, ignore_index=True)
    return out


def _kind(col) -> str | None:
    """What a column's values are: number, text, bool, or another pandas name (None: all
    missing), as a parquet column must hold one."""
    from pandas.api.types import infer_dtype
    k = infer_dtype(col, skipna=True)
    if k == "empty":
        return None
    return {"integer": "numbers", "floating": "numbers", "mixed-integer-float": "numbers",
            "decimal": "numbers", "string": "text", "boolean": "bools"}.get(k, k)


def _same_kinds(parts: list, paths: list) -> None:
    """UsageError naming the part and file whose column holds values of another kind than
    the same column of an earlier part's file (the merged file could not be written)."""
    first: dict = {}
    for df, path in zip(parts, paths):
        for c in df.columns:
            k = _kind(df[c])
            if k is None:
                continue
            if c not in first:
                first[c] = (k, path)
            elif first[c][0] != k:
                raise UsageError(f"{path}: column {c!r} holds {k} where {first[c][1]} holds "
                                 f"{first[c][0]}: the parts' files are not of one sweep's "
                                 "making; merge only the parts of one sweep")


def _traces(runs: list[Run]) -> dict[str, Path]:
    """traces/<name> -> the source file; one name in two sources with other content is
    refused (ValueError) rather than one of them kept."""
    out: dict[str, Path] = {}
    for r in runs:
        for f in sorted((r.path / "traces").glob("*")) if (r.path / "traces").is_dir() else []:
            if f.is_file():
                if f.name in out and out[f.name].read_bytes() != f.read_bytes():
                    raise ValueError(f"trace {f.name} is in more than one source ({out[f.name]}, {f})")
                out[f.name] = f
    return out


def _merge_runs(dst, runs: list[Run], tables: dict, traces: dict, command: str,
                t0: float) -> RunStore:
    from ..core.atomic import _atomic_write_bytes
    out = RunStore(dst)
    if out.results_path.exists():  # again, under the lock
        raise ValueError(f"{dst} already holds a run")
    for name, f in traces.items():  # whole files (atomic), before the rows that name them
        _atomic_write_bytes(out.dir / "traces" / name, lambda tmp, f=f: shutil.copyfile(f, tmp))
    for name, df in tables.items():  # samples and phases, like kernels, before the rows
        atomic_write_parquet(out.dir / name, df)
    out.append([r for run in runs for r in run.results.to_dict("records")],
               [k for run in runs for k in run.kernels[run.kernels["point_id"].isin(
                   set(run.results["point_id"]))].to_dict("records")])
    first = runs[0].manifest
    from ..core.environment import git_commit
    status = ("complete" if all(r.manifest.get("status") == "complete" for r in runs)
              else "; ".join(f"{r.run_id}: {r.manifest.get('status')}" for r in runs))
    finished = time.strftime(STAMP)
    merge = dict(started=time.strftime(STAMP, time.localtime(t0)), finished=finished,
                 wall_s=round(time.time() - t0, 1), status="complete", kind="merge",
                 command=command, git_commit=git_commit(), sources=[r.run_id for r in runs])
    out.write_manifest(dict(
        run_id=out.dir.resolve().name, command=command, finished=finished,
        started=min(str(r.manifest.get("started", "")) for r in runs),
        started_note="the earliest source's start (when its measuring began); the merge's "
                     "own times are its invocation's",
        status=status, environment=first.get("environment"), config=first.get("config"),
        merged_from={r.run_id: r.manifest for r in runs}, invocations=[merge],
        where="merged from " + ", ".join(f"{r.run_id} ({r.device})" for r in runs)))
    return out


def _sweeps_only(runs: list) -> None:
    """A tune, verify or import run is not a part of a sweep: UsageError naming it. Before,
    two tune runs merged into a run of no kind (read as a sweep) whose candidates were all
    dropped (no result row held their point ids) and whose winners were there twice, and an
    import's rows (AMD's tuner's times) became a sweep's."""
    for r in runs:
        kind = r.manifest.get("kind") or "sweep"  # a sweep's or a merge's manifest has none
        if kind != "sweep":
            article = "an" if kind[:1] in "aeiou" else "a"
            raise UsageError(f"{r.run_id} is {article} {kind} run, not a sweep run: merge "
                             "combines the parts of one sweep")


def _with_rows(runs: list) -> None:
    """A part without a row (its sweep stopped before its first point was written) is
    refused naming it: was merged without a word, as if its points had been measured."""
    for r in runs:
        if not len(r.results):
            raise UsageError(f"{r.run_id} holds no rows (status {r.manifest.get('status') or '?'}"
                             f": its sweep stopped before its first point): resume it with its "
                             "own command, or leave it out of the merge")


def sweep_differences(a: Run, b: Run) -> list[str]:
    """The settings of a run's sweep (its manifest's config: the grid, --rep-ms,
    --warmup-ms, the seed..., which part aside) in which `b`'s differs from `a`'s, sorted;
    [] for two runs of one sweep. merge's rule for its parts, and compare --calibrate's
    for an A/A' pair."""
    def sweep_of(r):
        c = r.manifest.get("config")
        return {k: v for k, v in (c if isinstance(c, dict) else {}).items()
                if k not in ("part", "shard")}
    first, other = sweep_of(a), sweep_of(b)
    return sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))


def _same_sweep(runs: list) -> None:
    """Parts of one sweep differ only in which part they are: a folder whose sweep
    (its manifest's config, the part aside) is another is refused (ValueError)."""
    for r in runs[1:]:
        diff = sweep_differences(runs[0], r)
        if diff:
            raise ValueError(f"{r.run_id} is from another sweep than {runs[0].run_id} "
                             f"({', '.join(diff)} differ); merge only the parts of one sweep")
