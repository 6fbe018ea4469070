"""One writer per run folder: an exclusive lock held for the whole of a write.

    with run_lock("data/runs/x", "moe-lab sweep ..."):
        ...  # measure into data/runs/x

The lock is `fcntl.flock` on `<run>/.moe-lab.lock`, which names its holder (pid, host,
command, since). A second writer, in this process or another, gets `RunLocked` (a
UsageError: one line naming the holder, exit 2) at once; it never waits. The kernel drops
a flock when its holder dies however it dies (SIGKILL included), so a lock left by a killed
writer is free and is simply taken. A lock still held although the process it names is
gone (a child forked by the writer that outlived it holds the open file) is stale: it is
replaced, and the new writer goes on. The file is removed when the lock is released, so a
finished run folder holds only its data.

Where flock is unavailable (not POSIX) the lock is a no-op.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
from pathlib import Path

from ..core.errors import RunLocked

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None

LOCK_NAME = ".moe-lab.lock"
_HELD: dict[str, list] = {}  # realpath of a run folder -> [fd, depth] held by this process


def lock_path(run_dir) -> Path:
    return Path(run_dir) / LOCK_NAME


def holder(run_dir) -> dict | None:
    """What the lock file of a run folder says about its holder (None: no lock file,
    or one that says nothing yet)."""
    try:
        return _parse(lock_path(run_dir).read_bytes())
    except OSError:
        return None


def _parse(raw: bytes) -> dict | None:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    except (OverflowError, TypeError, ValueError, OSError):
        return False
    return True


def _stale(info: dict | None) -> bool:
    """A held lock whose named holder is a process of this host that is gone."""
    return bool(info) and info.get("host") == socket.gethostname() and not _alive(info.get("pid"))


def _describe(run_dir, info: dict | None) -> str:
    if not info:
        return f"{run_dir} is being written by another process (its lock is held; {LOCK_NAME} names no holder yet)"
    cmd = " ".join(str(info.get("command") or "?").split())
    if len(cmd) > 160:
        cmd = cmd[:157] + "..."
    return (f"{run_dir} is being written by pid {info.get('pid')} on {info.get('host')} "
            f"({cmd}) since {info.get('since')}: wait for it to finish, or write another run id")


def _read_fd(fd: int) -> dict | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return _parse(os.read(fd, 65536))
    except OSError:
        return None


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (fst.st_ino, fst.st_dev)


def _flock_soon(fd: int, tries: int = 10, pause_s: float = 0.02) -> None:
    """LOCK_EX without waiting on a writer; a few short retries ride out a reader's
    probe (`busy` holds a shared lock for a moment)."""
    for i in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) or i == tries - 1:
                raise
            time.sleep(pause_s)


def _holder_info(fd: int) -> dict:
    """What the holder of the lock file `fd` wrote there, waiting half a second for a
    holder that has only just taken it."""
    info = _read_fd(fd)
    for _wait in range(10):  # a holder that has just taken it writes its name next
        if info:
            break
        time.sleep(0.05)
        info = _read_fd(fd)
    return info


def _write_holder(fd: int, path, run_dir: Path, made: bool, command: str | None) -> None:
    """Write this process (pid, host, command, since) into the lock file just taken; on a
    write error the lock file and a folder `made` for it are removed, and it re-raises."""
    left = _read_fd(fd)
    if left and left.get("pid") != os.getpid():  # a writer killed before its release
        print(f"moe-lab: {run_dir}: the lock left by pid {left.get('pid')} on "
              f"{left.get('host')} ({left.get('command')}), which is gone, taken over",
              file=sys.stderr)
    info = dict(pid=os.getpid(), host=socket.gethostname(),
                command=" ".join(str(command or " ".join(sys.argv)).split()),
                since=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(info).encode())
    except OSError:  # a full disk: no empty lock file (nor an empty folder) left
        with contextlib.suppress(OSError):
            if _same_file(fd, path):
                os.unlink(path)
        os.close(fd)
        if made:
            with contextlib.suppress(OSError):
                run_dir.rmdir()  # only when empty
        raise


def acquire(run_dir, command: str | None = None) -> int | None:
    """Take the lock of `run_dir` (created, with its parents, if missing); returns its fd.
    RunLocked if another writer holds it. Re-entrant within one process. A folder inside
    another run's folder is refused (core.validate.not_inside_run): every writer's
    backstop, nothing made."""
    from ..core.validate import not_inside_run
    run_dir = Path(run_dir)
    not_inside_run(run_dir)
    made = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(run_dir)
    if key in _HELD:
        _HELD[key][1] += 1
        return _HELD[key][0]
    if fcntl is None:  # pragma: no cover
        _HELD[key] = [None, 1]
        return None
    path = lock_path(run_dir)
    for _ in range(20):  # each round: the file we opened was replaced under us
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            _flock_soon(fd)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            info = _holder_info(fd)
            if _stale(info):  # held by what outlived a dead writer: replace the file
                if _same_file(fd, path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                    print(f"moe-lab: {run_dir}: took over the lock of pid {info.get('pid')} "
                          f"({info.get('command')}), which is gone", file=sys.stderr)
                os.close(fd)
                continue
            os.close(fd)
            raise RunLocked(_describe(run_dir, info)) from None
        if not _same_file(fd, path):  # released (and removed) between our open and flock
            os.close(fd)
            continue
        _write_holder(fd, path, run_dir, made, command)
        _HELD[key] = [fd, 1]
        return fd
    raise RunLocked(f"{run_dir}: its lock file keeps changing under this process; another "
                    "writer is starting and stopping there")


def release(run_dir) -> None:
    key = os.path.realpath(run_dir)
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] > 0:
        return
    del _HELD[key]
    fd = held[0]
    if fd is None:  # pragma: no cover
        return
    path = lock_path(run_dir)
    try:
        if _same_file(fd, path):  # removed while held: who opens it next sees it is gone
            os.unlink(path)
    except OSError:  # the folder was renamed or removed (import --force replaced it)
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def run_lock(run_dir, command: str | None = None):
    """Hold the lock of `run_dir` while the block runs (see the module's doc)."""
    acquire(run_dir, command)
    try:
        yield
    finally:
        release(run_dir)


def busy(run_dir) -> str | None:
    """The one line naming the writer that holds `run_dir`'s lock now, None when no one
    does. Read-only: creates nothing (for readers such as merge's sources)."""
    path = lock_path(run_dir)
    if fcntl is None or os.path.realpath(run_dir) in _HELD:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            info = _read_fd(fd)
            return None if _stale(info) else _describe(run_dir, info)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
