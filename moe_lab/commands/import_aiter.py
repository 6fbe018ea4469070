"""`moe-lab import-aiter`: AMD aiter's tuned fused-MoE table as a run folder.

Default: the installed amd-aiter wheel's `aiter/configs/tuned_fmoe.csv` into
`data/runs/aiter-tuned-fmoe-<version>`; `--file` takes a table of your own tuning. The
numbers are AMD's tuner's (moe_lab.aiter_tables says what it timed), never moe-lab's.
A table that cannot be read prints one line, exits 2 and writes nothing.
"""
from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from ..aiter_tables import MAX_ERR, prepare
from ..errors import UsageError


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
                        help="replace a run folder that already exists")


def write_run(out: Path, rows: list[dict], kernels: list[dict], manifest: dict,
              force: bool = False) -> Path:
    """The folder written whole into a temporary sibling, then renamed into place (an
    existing one only with force): a failure leaves the old folder or none."""
    from ..store import RunStore
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise UsageError(f"{out} already exists: pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.importing-{os.getpid()}"
    old = out.parent / f".{out.name}.replaced-{os.getpid()}"
    try:
        store = RunStore(tmp)
        store.append(rows, kernels)
        store.write_manifest(dict(manifest, run_id=out.name))
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    finally:
        for p in (tmp, old):
            if p.is_dir():
                shutil.rmtree(p)
    return out


def run(args) -> int:
    from ..store import data_dir
    argv = list(getattr(args, "_argv", None) or ["import-aiter"])
    command = "moe-lab " + " ".join(shlex.quote(a) for a in argv)
    rows, kernels, manifest, run_id = prepare(args.file, command, args.max_err)
    out = write_run(Path(args.out) if args.out else data_dir() / run_id, rows, kernels,
                    manifest, args.force)
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
