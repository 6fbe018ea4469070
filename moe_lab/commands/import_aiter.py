"""`moe-lab import-aiter`: AMD aiter's tuned fused-MoE table as a run folder.

Default: the installed amd-aiter wheel's `aiter/configs/tuned_fmoe.csv` into
`data/runs/aiter-tuned-fmoe-<version>`; `--file` takes a table of your own tuning. The
numbers are AMD's tuner's (moe_lab.importers.aiter_tables says what it timed), never moe-lab's.
A table that cannot be read prints one line, exits 2 and writes nothing.
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)
"""
from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path

from ..core.constants import AITER_MAX_ERR as MAX_ERR  # aiter_tables.MAX_ERR, torch-free
from ..core.errors import UsageError


def configure(parser) -> None:
    parser.add_argument("--file", default=None, metavar="CSV",
                        help="a tuned_fmoe.csv to import (default: the installed amd-aiter "
                             "wheel's aiter/configs/tuned_fmoe.csv)")
    parser.add_argument("--out", default=None, metavar="RUN_DIR",
                        help="run folder to write (default: data/runs/aiter-tuned-fmoe-"
                             "<aiter version> for the wheel's table, "
                             "data/runs/aiter-<file>-<sha> for another)")
    parser.add_argument("--max-err", type=float, default=MAX_ERR,
                        help="a row whose err1 or err2 (share of output elements off the "
                             "tuner's reference) is at least this is `incorrect`")
    parser.add_argument("--force", action="store_true",
                        help="replace the run folder of an earlier import (a folder that is "
                             "not a moe-lab import's run, or a file, is refused untouched)")


def _refuse_unless_replaceable(out: Path, force: bool) -> None:
    """UsageError (one line, nothing touched) unless `out` may be written: absent, an
    empty folder, or (with force) an earlier import's run folder, i.e. one whose
    manifest.json moe-lab wrote for an import. A regular file, a folder that is not a
    run (a user's notes), a sweep's or tune's run are never replaced."""
    from ..core.errors import CorruptFile
    from ..storage.runlock import LOCK_NAME
    from ..storage.store import MANIFEST, read_json
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir():
        raise UsageError(f"{out} is a file, not a run folder: import-aiter writes a run "
                         "folder and --force replaces only one moe-lab wrote; give another --out")
    if not any(p.name != LOCK_NAME for p in out.iterdir()):
        return
    if not force:
        raise UsageError(f"{out} already exists: pass --force to replace it")
    why = None
    try:
        manifest = read_json(out / MANIFEST)
    except CorruptFile:
        manifest, why = {}, f"its {MANIFEST} is unreadable"
    if not manifest or "run_id" not in manifest:
        raise UsageError(f"{out} is not a moe-lab run folder ({why or f'no {MANIFEST} moe-lab wrote'}): "
                         "--force replaces only a run folder; nothing in it was touched, "
                         "give another --out")
    if manifest.get("kind") != "import":
        kind = manifest.get("kind") or "sweep"
        raise UsageError(f"{out} holds a moe-lab {kind} run, not an aiter import: --force "
                         "replaces only an earlier import; nothing was touched, give another --out")


def _times(manifest: dict, command: str | None, t0: float | None) -> dict:
    """The import's own command and times, as a sweep's manifest carries them: `finished`
    and one invocation from `t0` (its top-level `started` stays empty on purpose, see
    aiter_tables.prepare)."""
    stamp = "%Y-%m-%dT%H:%M:%S%z"
    t0 = time.time() if t0 is None else t0
    finished = time.strftime(stamp)
    return dict(finished=finished, invocations=[dict(
        started=time.strftime(stamp, time.localtime(t0)), finished=finished,
        wall_s=round(time.time() - t0, 1), status="complete", kind="import",
        command=command or manifest.get("command"),
        git_commit=(manifest.get("environment") or {}).get("git_commit"))])


def write_run(out: Path, rows: list[dict], kernels: list[dict], manifest: dict,
              force: bool = False, command: str | None = None,
              started: float | None = None) -> Path:
    """The folder written whole into a temporary sibling, then renamed into place (an
    existing one only with force, and only an earlier import: see
    _refuse_unless_replaceable), holding the folder's lock (moe_lab.storage.runlock) throughout:
    a failure leaves the old folder or none."""
    from ..storage.runlock import LOCK_NAME, run_lock
    from ..storage.store import RunStore
    out = Path(out)
    from ..core.validate import not_inside_run
    not_inside_run(out, "--out")  # a run among another run's files
    _refuse_unless_replaceable(out, force)  # before the lock: a refusal touches nothing
    created = not out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.importing-{os.getpid()}"
    old = out.parent / f".{out.name}.replaced-{os.getpid()}"
    done = False
    with run_lock(out, command or manifest.get("command") or "moe-lab import-aiter"):
        try:
            _refuse_unless_replaceable(out, force)  # again: another writer may have been first
            store = RunStore(tmp)
            store.append(rows, kernels)
            store.write_manifest(dict(manifest, run_id=out.name, **_times(manifest, command, started)))
            os.replace(out, old)  # the locked folder (its lock file goes with it)
            os.replace(tmp, out)
            done = True
        finally:
            for p in (tmp, old):
                if p.is_dir():
                    shutil.rmtree(p)
    if not done and created and out.is_dir() and not any(
            p.name != LOCK_NAME for p in out.iterdir()):
        shutil.rmtree(out, ignore_errors=True)  # the empty folder the lock made
    return out


def run(args) -> int:
    from ..importers.aiter_tables import prepare
    from ..storage.store import data_dir
    argv = list(getattr(args, "_argv", None) or ["import-aiter"])
    command = "moe-lab " + " ".join(shlex.quote(a) for a in argv)
    t0 = time.time()
    rows, kernels, manifest, run_id = prepare(args.file, command, args.max_err)
    out = write_run(Path(args.out) if args.out else data_dir() / run_id, rows, kernels,
                    manifest, args.force, command, t0)
    c, src = manifest["counts"], manifest["source"]
    print(f"{src['path']} ({'amd-aiter ' + src['version'] if src['version'] else 'a user table'}"
          f", {c['table_rows']} rows, measured by aiter's tuner, not by moe-lab)")
    print(f"rows {c['rows']}: " + ", ".join(f"{k} {v}" for k, v in c["by_status"].items())
          + f"; skipped {c['skipped']}")
    for k, v in c["not_ok_by_reason"].items():
        print(f"  {v:4d} {k}")
    for cu, d in manifest["devices"].items():
        print(f"  cu_num {cu}: {d['rows']} rows, {d['device']}")
    for k, v in c["by_model_sharding"].items():
        print(f"  {v:4d} {k}")
    print(f"run {out}")
    return 0
