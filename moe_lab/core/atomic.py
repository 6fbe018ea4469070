"""Atomic writes: the new content goes to a temporary file in the same folder, is synced,
then renamed over the old file (os.replace is atomic on POSIX). A process killed at any
moment leaves either the old complete file or the new one, never half of one. The file gets
the mode an ordinary open() would give it (0666 less the umask): mkstemp's 0600 would make
a shared data folder unreadable to the user's colleagues."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd


def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _stage(path: Path, write) -> str:
    """write(tmp_path) into a synced temporary file beside `path` (the mode open() would
    give it); the caller renames it over `path`. A failure removes it and raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # as open() would: mkstemp's 0600 shuts others out
        finally:
            os.close(fd)
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return tmp


def _atomic_write_bytes(path: Path, write) -> None:
    """write(tmp_path) then rename over `path`; the tmp file lives in the same folder."""
    path = Path(path)
    tmp = _stage(path, write)
    try:
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_write_files(files: dict) -> None:
    """Several text files ({path: text}), all or none: each is staged beside its path
    first, and only when every one is written and synced are they renamed over the old
    ones, so a failure while writing (a full disk, a folder in the way) leaves every old
    file as it was, never new tables beside an old provenance."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, text in files.items():
            path = Path(path)
            staged.append((_stage(path, lambda tmp, t=text: Path(tmp).write_text(t)), path))
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise


def json_text(obj: dict) -> str:
    """The text atomic_write_json writes."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def atomic_write_text(path: Path, text: str) -> None:
    def w(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    _atomic_write_bytes(path, w)


def atomic_write_json(path: Path, obj: dict) -> None:
    atomic_write_text(path, json_text(obj))


def atomic_write_parquet(path: Path, df: pd.DataFrame) -> None:
    _atomic_write_bytes(path, lambda tmp: df.to_parquet(tmp, index=False))


def read_parquet(path: Path, **kw) -> pd.DataFrame:
    """Read a parquet file that a live sweep may be replacing. The file is read in one
    open (a snapshot of one complete version): pyarrow on a path opens it more than
    once (footer, then pages), and a rename between those opens mixes the old footer
    with the new file's pages ("Couldn't deserialize thrift")."""
    import io
    with open(path, "rb") as f:
        data = f.read()
    return pd.read_parquet(io.BytesIO(data), **kw)
