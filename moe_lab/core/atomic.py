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


def _atomic_write_bytes(path: Path, write) -> None:
    """write(tmp_path) then rename over `path`; the tmp file lives in the same folder."""
    path = Path(path)
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
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    def w(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    _atomic_write_bytes(path, w)


def atomic_write_json(path: Path, obj: dict) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


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
