"""Which run folders the readers of a data folder see (find_runs, the tune and verify
tables, the findings): every one, or, while `only_committed(folder)` holds, the ones git
tracks there. `moe-lab findings` is written from the committed runs, so a user's own run in
the checkout's data/runs (main.sh's sweep: ignored by git) neither changes the document nor
fails `findings --check`; a folder outside a git checkout (a copy) is read whole."""
from __future__ import annotations

import contextlib
import contextvars
import subprocess
from pathlib import Path

_ONLY: contextvars.ContextVar = contextvars.ContextVar("moe_lab_committed_runs", default=None)


def visible(folder: Path) -> bool:
    """Whether a run folder is read now (its parent's tracked set, when one is in force)."""
    only = _ONLY.get()
    return only is None or Path(folder).resolve().parent != only[0] or Path(folder).name in only[1]


def tracked(folder) -> frozenset | None:
    """The names of the run folders under `folder` that git tracks (or has staged: `git add
    -f data/runs/<run>` counts); None where `folder` is not in a git checkout or git is
    not there."""
    try:
        out = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--", "."],
                             capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return frozenset(p.split("/", 1)[0] for p in out.decode().split("\0") if "/" in p)


@contextlib.contextmanager
def only_committed(folder):
    """For the duration, readers of `folder` see only its tracked run folders (all of them
    outside a git checkout); yields the names left out, sorted."""
    folder = Path(folder).resolve()
    names = tracked(folder)
    left = [] if names is None else sorted(
        p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
        and p.name not in names)
    token = _ONLY.set(None if names is None else (folder, names))
    try:
        yield left
    finally:
        _ONLY.reset(token)
