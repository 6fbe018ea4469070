"""Run folders: one `Run` type to read them, `RunStore` to write them, one rule to find them.

A run is `data/runs/<run_id>/` with
    manifest.json      environment, command line, start/end, one entry per invocation
    results.parquet    one row per point, RESULT_COLUMNS first (extra columns allowed)
    kernels.parquet    per point and kernel: KERNEL_COLUMNS
    compile.parquet    optional: one row per backend x compile variant x wrapped
    traces/*.json.gz   optional Chrome traces

Every write goes to a temporary file in the same folder and is renamed over the old
one (os.replace is atomic on POSIX), so a process killed at any moment leaves the
previous complete file. A point id that is appended again replaces its old row (and its
old kernel rows), so a resumed sweep never duplicates points. A file that cannot be read
raises CorruptFile (one line naming it) before anything is written.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..core.atomic import atomic_write_json, atomic_write_parquet, read_parquet  # noqa: F401 (re-exported)
from ..core.errors import CorruptFile, UsageError
from .rows import (BOOL_COLUMNS, FLOAT_COLUMNS, ID_DEFAULTS as DEFAULTS, ID_FIELDS,  # noqa: F401
                   INT_COLUMNS, KERNEL_COLUMNS, OPTIONAL_ID_FIELDS, PROVENANCE as PROVENANCE_COLUMNS,
                   RESULT_COLUMNS, RETRIED, STATUSES, STR_COLUMNS, check_table, validate)
from .rows import READ_NEEDS, check_manifest
from .scope import visible
RESULTS, KERNELS, MANIFEST = "results.parquet", "kernels.parquet", "manifest.json"
NOT_A_DEFAULT = ("running", "failed")  # a manifest status with either: never a default run
LACKS = {"ok": "no ok single-process rows", "compile": "no compile rows (--modes compile:...)",
         "distributed": "no distributed rows: it is a single-process run (no world_size column)"}
SAMPLES = "samples.parquet"  # per timed point: its per-call times (point_id, samples_us list)
TABLE_NEEDS = {"phases.parquet": ("point_id", "phase"), SAMPLES: ("point_id", "samples_us")}
DATA_DIR_ENV = "MOE_LAB_DATA"


def point_id(d: dict) -> str:
    """Stable 16-hex id from the identifying fields (missing ones count as empty).
    Numbers are normalised (8 == 8.0 == "8"), so ids survive a parquet round trip."""
    parts = []
    for k in ID_FIELDS + OPTIONAL_ID_FIELDS:
        v = d.get(k, "")
        if k in OPTIONAL_ID_FIELDS and (v is None or v == DEFAULTS[k] or v == "" or v != v):
            continue
        if v is None or (isinstance(v, float) and v != v):
            v = ""
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # numpy scalars
            v = v.item()
        parts.append(f"{k}={v}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


# --- results frames --------------------------------------------------------------------

def _results_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows -> DataFrame with RESULT_COLUMNS first (missing ones as NA), extras after."""
    recs = []
    for r in rows:
        r = dict(r)
        validate(r)
        r.setdefault("point_id", point_id(r))
        recs.append(r)
    df = pd.DataFrame(recs)
    for c in RESULT_COLUMNS:
        if c not in df:
            df[c] = None
    extra = [c for c in df.columns if c not in RESULT_COLUMNS]
    return _typed(df[list(RESULT_COLUMNS) + extra])


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Fixed column types, so frames with missing values concatenate and round-trip."""
    df = df.copy()
    for c in df.columns:
        if c in INT_COLUMNS:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
        elif c in FLOAT_COLUMNS:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        elif c in BOOL_COLUMNS:
            df[c] = df[c].astype("boolean")
        elif c in STR_COLUMNS:
            df[c] = df[c].map(lambda v: None if v is None or (isinstance(v, float) and v != v)
                              or v is pd.NA else str(v)).astype(object)
    return df


def _kernels_frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=None if rows else list(KERNEL_COLUMNS))
    for c in KERNEL_COLUMNS:
        if c not in df:
            df[c] = None
    extra = [c for c in df.columns if c not in KERNEL_COLUMNS]
    return _typed(df[list(KERNEL_COLUMNS) + extra])


def _concat(old: pd.DataFrame | None, new: pd.DataFrame) -> pd.DataFrame:
    if old is None or old.empty or new.empty:  # all-NA object columns would trip pyarrow
        return (new if old is None or old.empty else old).reset_index(drop=True)
    return pd.concat([old, new], ignore_index=True, sort=False)


def _read(path: Path, needs: tuple[str, ...] | None = None) -> pd.DataFrame | None:
    """A parquet file, None when absent, CorruptFile when it cannot be read.

    Parsed frames are kept by content (the file's bytes' digest, so a file rewritten in
    place, even within one clock tick, is read again) and each caller gets its own copy:
    a notebook opens every run several times, and parsing was most of its time. `needs`:
    check the table's schema (rows.check_table) too, once per content."""
    try:
        with open(path, "rb") as f:  # one open: a snapshot of one complete version
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptFile(path, exc) from None
    key = (str(path), len(data), hashlib.blake2b(data, digest_size=16).digest())
    hit = _PARSED.get(key)
    if hit is None:
        try:
            hit = (pd.read_parquet(io.BytesIO(data)), set())
        except Exception as exc:  # pyarrow raises several types for a truncated file
            raise CorruptFile(path, exc) from None
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))  # the oldest
        _PARSED[key] = hit
    frame, checked = hit
    if needs is not None and needs not in checked:
        check_table(path, frame, needs)
        checked.add(needs)
    return frame.copy()


# (path, size, digest) -> (the parsed frame, never handed out; the `needs` it passed)
_PARSED: dict = {}
_PARSED_MAX = 512


def read_json(path: Path) -> dict:
    """A JSON object, {} when absent, CorruptFile when it cannot be read."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFile(path, exc) from None
    if not isinstance(obj, dict):
        raise CorruptFile(path, "not a JSON object")
    return obj


class RunStore:
    """One run folder. Not safe for several writer processes at once: the writers (sweep,
    tune, merge, import-aiter) hold the folder's lock (moe_lab.storage.runlock) while they write."""

    def __init__(self, run_dir: str | os.PathLike, create: bool = True):
        self.dir = Path(run_dir)
        if not create:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.glob(".*.tmp"):  # left by a writer that was killed
            try:
                stale.unlink()
            except OSError:
                pass

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    def write_manifest(self, manifest: dict) -> None:
        atomic_write_json(self.manifest_path, dict(manifest))

    def read_manifest(self) -> dict:
        return read_json(self.manifest_path)

    def update_manifest(self, **fields) -> dict:
        m = self.read_manifest()
        m.update(fields)
        self.write_manifest(m)
        return m

    @property
    def results_path(self) -> Path:
        return self.dir / RESULTS

    @property
    def kernels_path(self) -> Path:
        return self.dir / KERNELS

    def load_results(self, needs: tuple[str, ...] | None = None) -> pd.DataFrame:
        df = _read(self.results_path, needs)
        return df if df is not None else _results_frame([])

    def load_kernels(self, needs: tuple[str, ...] | None = None) -> pd.DataFrame:
        df = _read(self.kernels_path, needs)
        return df if df is not None else _kernels_frame([])

    def done_ids(self, retry: tuple[str, ...] = RETRIED) -> set[str]:
        """Ids of the points a resume skips: every row's but those whose status is in
        `retry` (rows.RETRIED: `failed`, measured again; () for every recorded point)."""
        df = _read(self.results_path)
        if df is None:
            return set()
        if retry and "status" in df:
            df = df[~df["status"].astype(str).isin(retry)]
        return set(df["point_id"].astype(str))

    def append(self, rows: list[dict], kernel_rows: list[dict] | None = None) -> None:
        """Add points (and their kernel rows); an id already present is replaced.

        Kernel rows without `point_id` are an error unless exactly one point is appended
        (then they belong to it). Kernels are written first, results last: a kill in
        between leaves kernel rows for a point that is not done yet, which the rerun of
        that point replaces."""
        new = _results_frame(rows)
        ids = set(new["point_id"].astype(str))
        krows = []
        for k in kernel_rows or []:
            k = dict(k)
            if not k.get("point_id"):
                if len(ids) != 1:
                    raise ValueError("kernel rows need a point_id when several points are appended")
                k["point_id"] = next(iter(ids))
            krows.append(k)
        new = new.drop_duplicates("point_id", keep="last")

        old_k = _read(self.kernels_path)
        stale = old_k is not None and old_k["point_id"].astype(str).isin(ids).any()
        if krows or stale or old_k is None:
            keep = None if old_k is None else old_k[~old_k["point_id"].astype(str).isin(ids)]
            atomic_write_parquet(self.kernels_path, _concat(keep, _kernels_frame(krows)))

        old = _read(self.results_path)
        if old is not None:
            old = old[~old["point_id"].astype(str).isin(ids)]
        atomic_write_parquet(self.results_path, _concat(old, new))

    def append_samples(self, samples: dict[str, list[float]]) -> None:
        """Per-call times of points ({point_id: [us, ...]}); a point given again replaces
        its samples. Written before the rows that refer to them (see `append`)."""
        if not samples:
            return
        path = self.dir / SAMPLES
        new = pd.DataFrame({"point_id": list(samples),
                            "samples_us": [list(map(float, v)) for v in samples.values()]})
        old = _read(path)
        if old is not None:
            old = old[~old["point_id"].isin(set(samples))]
        atomic_write_parquet(path, new if old is None or old.empty else
                             pd.concat([old, new], ignore_index=True))

    def append_table(self, name: str, rows: list[dict], key: tuple[str, ...] | None = None) -> None:
        """Extra per-run table `<name>.parquet` (e.g. compile): rows appended atomically;
        with `key`, a row whose key columns match an existing row replaces it."""
        if not rows:
            return
        path = self.dir / f"{name}.parquet"
        new = pd.DataFrame(rows)
        old = _read(path)
        if old is not None and key:
            old_k = old[list(key)].astype(str).agg("|".join, axis=1)
            new_k = set(new[list(key)].astype(str).agg("|".join, axis=1))
            old = old[~old_k.isin(new_k)]
        atomic_write_parquet(path, new if old is None else pd.concat([old, new], ignore_index=True))

    def load_table(self, name: str) -> pd.DataFrame:
        df = _read(self.dir / f"{name}.parquet")
        return df if df is not None else pd.DataFrame()

    def files(self) -> list[Path]:
        """The files of this run that moe-lab reads."""
        return [p for p in (self.manifest_path, self.results_path, self.kernels_path,
                            *sorted(self.dir.glob("*.parquet"))) if p.exists()]

    def check_readable(self) -> None:
        """CorruptFile for the first file of the run that cannot be read (nothing written)."""
        for p in dict.fromkeys(self.files()):
            read_json(p) if p.suffix == ".json" else _read(p)

    def set_aside_corrupt(self) -> list[Path]:
        """Rename every unreadable file to `<name>.corrupt-<time>` (kept, never deleted),
        so that a resume re-measures what it held. Returns the new paths."""
        moved = []
        for p in dict.fromkeys(self.files()):
            try:
                read_json(p) if p.suffix == ".json" else _read(p)
            except CorruptFile:
                dest = p.with_name(f"{p.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
                os.replace(p, dest)
                moved.append(dest)
        return moved


# --- reading runs -------------------------------------------------------------------------

def data_dir() -> Path:
    """Where run folders live: $MOE_LAB_DATA, else the checkout's data/runs."""
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[2] / "data" / "runs"


@dataclass
class Run:
    """One run folder, read: its manifest and tables as DataFrames."""
    path: Path
    manifest: dict
    results: pd.DataFrame
    kernels: pd.DataFrame
    compile: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def run_id(self) -> str:
        """The folder's name (`runs/a/..` is `runs`, never `..`)."""
        return Path(os.path.normpath(os.path.abspath(self.path))).name

    @property
    def phases(self) -> pd.DataFrame:
        """Per timed point and phase: measured_us beside floor_us (moe_lab.cost.ledger); empty
        for runs made before phases were kept (the ledger then computes the floors)."""
        df = _read(self.path / "phases.parquet", TABLE_NEEDS["phases.parquet"])
        return pd.DataFrame() if df is None else df

    def samples(self) -> pd.DataFrame:
        """point_id -> samples_us (per-call times) of the timed points; empty for runs
        made before samples were kept."""
        df = _read(self.path / SAMPLES, TABLE_NEEDS[SAMPLES])
        return pd.DataFrame(columns=["point_id", "samples_us"]) if df is None else df

    @property
    def device(self) -> str:
        """The device the rows name (several joined by ' + '), else the manifest's."""
        if "device" in self.results and self.results["device"].notna().any():
            return " + ".join(sorted(self.results["device"].dropna().unique()))
        return str((self.manifest.get("environment") or {}).get("device_name") or "?")

    def commits(self, rows: pd.DataFrame | None = None) -> list[str]:
        """The commits that measured `rows` (default: every row), short, sorted."""
        rows = self.results if rows is None else rows
        if "git_commit" in rows and rows["git_commit"].notna().any():
            return sorted({str(c)[:7] for c in rows["git_commit"].dropna()})
        c = (self.manifest.get("environment") or {}).get("git_commit")
        return [str(c)[:7]] if c else []

    def has(self, what: str | None) -> bool:
        """Whether the run holds data of a kind: None/`results` (any row), `ok` (an ok row),
        `compile` (compile rows), or a mode name such as `graph`; all of them about
        single-process rows. `distributed`: rows of `sweep --nproc` (notebook 06's)."""
        r = self.results
        if "parallel" in r:
            dist = r["parallel"].notna() & (r["parallel"].astype(str) != "")
            if what == "distributed":
                return bool((dist & (r["status"] == "ok")).any())
            r = r[~dist]
        elif what == "distributed":
            return False
        if what in (None, "results"):
            return len(r) > 0
        if what == "ok":
            return bool((r["status"] == "ok").any()) if len(r) else False
        if what == "compile":
            return len(self.compile) > 0 or (len(r) > 0 and r["mode"].astype(str)
                                               .str.startswith("compile:").any())
        return bool(((r["mode"] == what) & (r["status"] == "ok")).any()) if len(r) else False

    def may_be_default(self) -> bool:
        """Not marked running or failed (NOT_A_DEFAULT; a merged run's status names its parts')."""
        return not any(w in str(self.manifest.get("status") or "") for w in NOT_A_DEFAULT)


def open_run(run: str | os.PathLike | Run | None = None, has: str | None = None) -> Run:
    """A run folder (a path, or a run id under data_dir()) read into a Run; None: the newest
    run with data of kind `has` (Run.has) not marked running or failed. A run given without
    such data, or none found: UsageError saying why; CorruptFile: a file cannot be read."""
    if isinstance(run, Run):
        return run
    if run is not None and (not isinstance(run, (str, os.PathLike)) or not str(run).strip()):
        raise UsageError(f"run {run!r}: give a run folder (a path) or a run id (a str)")
    if run is None:
        found = find_runs(has=has, defaults=True)
        if not found:
            raise UsageError(f"no run under {data_dir()} has {has or 'results'} (and is not "
                             "marked running or failed): run `moe-lab sweep` first")
        return found[0]
    from ..core.validate import run_folder
    path = run_folder(run, data_dir())  # a path, or one folder name under it (no '..')
    if not (path / RESULTS).exists() and not (path / MANIFEST).exists():
        raise UsageError(f"{run} is a folder but not a run folder (no {RESULTS}, no {MANIFEST})")
    s = RunStore(path, create=False)  # reading creates and cleans nothing
    # a foreign run: one line (CorruptFile), exit 2; each table checked once per content
    manifest = s.read_manifest()
    check_manifest(path / MANIFEST, manifest)
    r = Run(path, manifest, s.load_results(READ_NEEDS), s.load_kernels(("point_id",)),
            s.load_table("compile"))
    if has is not None and not r.has(has):
        raise UsageError(f"run {r.run_id} has {LACKS.get(has, f'no {has} rows')}")
    return r


def _started(path: Path) -> str:
    try:
        return str(read_json(path / MANIFEST).get("started", ""))
    except CorruptFile:
        return ""


def find_runs(data_dir_: str | os.PathLike | None = None, has: str | None = None,
              defaults: bool = False) -> list[Run]:
    """Every run folder under `data_dir_` (default data_dir()) holding data of kind `has`
    (`defaults`: and Run.may_be_default), newest first (by the manifest's `started`, then
    the folder name). The one rule for "the default run"."""
    root = Path(data_dir_) if data_dir_ is not None else data_dir()
    if not root.is_dir():
        return []
    try:  # was: PermissionError from a folder that cannot be listed
        paths = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                 and (p / RESULTS).exists() and visible(p)]
    except OSError as exc:
        raise UsageError(f"{root}: cannot list the folder of runs ({exc.strerror or exc})") from None
    paths.sort(key=lambda p: (_started(p), p.name), reverse=True)
    runs = []
    for p in paths:
        try:
            r = open_run(p)
            r.phases  # read later (the ledger): a corrupt one stopped `findings` or lost all
        except CorruptFile as exc:  # one broken run does not hide the others: said, passed
            _warn_once(f"moe-lab: warning: passed over run {p.name}: {exc}")
            continue
        if r.has(has) and (not defaults or r.may_be_default()):
            runs.append(r)
    return runs


_WARNED: set = set()


def _warn_once(line: str) -> None:
    import sys
    if line not in _WARNED:
        _WARNED.add(line)
        print(line, file=sys.stderr)
