"""Errors a user can fix (the CLI prints them as one line and exits 2), and the time
limit that turns a stuck point into a `timeout` row."""
from __future__ import annotations

import contextlib
import os
import signal
import threading


class UsageError(ValueError):
    """Bad input: an unknown model, a malformed token list, a missing file."""

    def _render_traceback_(self):  # IPython's hook: a notebook shows the one line too
        return [f"{type(self).__name__}: {self}"]


class CorruptFile(UsageError):
    """A file moe-lab reads (a run's parquet or manifest, a registry, ceilings, a trace)
    is truncated or not what it should be. One line that names the file; nothing is
    written before it is raised."""

    def __init__(self, path, reason):
        self.path = str(path)
        why = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
        super().__init__(f"{self.path} is unreadable or corrupt ({why[:200]})")


class PointTimeout(Exception):
    pass


# a process stopped by a signal exits 128 + its number, as a shell reports it (the CLI, the
# ranks, the launcher that reads them and the README's 'exit 143' take these)
EXIT_SIGTERM = 128 + int(signal.SIGTERM)  # 143
EXIT_SIGINT = 128 + int(signal.SIGINT)    # 130


class Terminated(BaseException):
    """SIGTERM (`timeout`, a job scheduler) arrived: not an Exception, so no point's
    error handling turns it into a row; the sweep's bookkeeping still runs."""


_TERMINATING = False  # set by the SIGTERM handler until its block is left, whatever catches


# An exception a signal handler raises can be lost: Python swallows (prints "Exception
# ignored in ...") what is raised while it runs a weakref callback, a __del__ or a GC
# finalizer, and Dynamo/Inductor compile in code full of those. Seen on an H200: a SIGTERM
# and a compile budget both vanished that way and the sweep compiled on past its deadline.
# So both signals repeat every RESIGNAL_S until the exception has left the block.
RESIGNAL_S = 1.0


def reraise_if_terminated(exc: BaseException) -> None:
    """Call first in an `except Exception` that turns an error into a row: once SIGTERM
    has arrived, an error caught mid-compile (Dynamo wraps what it catches) is the
    termination, not a `failed` point."""
    if _TERMINATING or _in_chain(exc, Terminated):
        raise Terminated("terminated by SIGTERM") from exc


@contextlib.contextmanager
def terminate_gracefully(on_signal=None):
    """Turn SIGTERM into `Terminated` in the main thread while the block runs.
    `on_signal()`, if given, is called once, at the first SIGTERM, before anything else
    happens (a rank tells its launcher it was signalled before it closes a connection).
    `terminating_handled()` in the block's own bookkeeping stops the re-signalling.
    A SIGTERM never outlives the block unsaid: one that came while the block was being
    left, or whose raises the block swallowed, is `Terminated` once the block is left;
    no re-signal comes after it (was: one could land under the old handler, SIG_DFL,
    and kill the process before the bookkeeping after the block ran)."""
    global _TERMINATING, _QUIET
    _TERMINATING = False
    if not hasattr(signal, "SIGTERM"):
        yield
        return

    quiet = threading.Event()  # set when the block is left, or its bookkeeping has the raise
    lock = threading.Lock()    # held by the re-signaller from its look at `quiet` to its kill

    def _resignal():  # until the block is left, in case a raise was swallowed
        while not quiet.wait(RESIGNAL_S):
            with lock:
                if quiet.is_set():
                    return
                os.kill(os.getpid(), signal.SIGTERM)

    def _raise(signum, frame):
        global _TERMINATING
        first = not _TERMINATING
        _TERMINATING = True
        if first and on_signal is not None:
            on_signal()
        if quiet.is_set():  # being left (said after the block), or already handled
            return
        if first:
            threading.Thread(target=_resignal, daemon=True, name="moe-lab-sigterm").start()
        raise Terminated("terminated by SIGTERM")
    try:
        old = signal.signal(signal.SIGTERM, _raise)
    except ValueError:  # not the main thread: leave the default
        yield
        return
    _QUIET = quiet
    try:
        yield
    finally:
        quiet.set()  # _raise raises no more: a SIGTERM from here on is said after the block
        with lock:  # a re-signal already begun has landed (under _raise): none comes later
            pass
        signal.signal(signal.SIGTERM, old)  # runs a pending handler (ours) before it swaps
        terminating, _TERMINATING, _QUIET = _TERMINATING, False, None
    if terminating:  # the block ended without its Terminated (swallowed, or came late)
        raise Terminated("terminated by SIGTERM")


_QUIET = None  # the open terminate_gracefully block's `quiet` event


def terminating_handled() -> None:
    """Call where the Terminated of a terminate_gracefully block has arrived and its
    bookkeeping begins (closing a manifest inside the block): no re-signal or further
    SIGTERM raises in it any more."""
    if _QUIET is not None and _TERMINATING:
        _QUIET.set()


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str = "point"):
    """Raise PointTimeout in the main thread after `seconds`, and again every RESIGNAL_S
    until the block is left (a raise can be swallowed, see above). SIGALRM; POSIX only."""
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def _raise(signum, frame):
        raise PointTimeout(f"{what} exceeded {seconds:g} s")
    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds, RESIGNAL_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def has_timeout(exc: BaseException) -> bool:
    """True when a PointTimeout is anywhere in the exception's cause/context chain
    (Dynamo and Inductor wrap what a compile raised)."""
    return _in_chain(exc, PointTimeout)


def _in_chain(exc: BaseException | None, cls: type) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, cls):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "inner_exception", None)
    return False


def disk_full(exc: BaseException) -> bool:
    """Whether an error (or one in its cause/context chain) is a full disk or quota:
    OSError ENOSPC/EDQUOT, or pyarrow's OSError that only says so in its text. Never a
    point's failure: the sweep stops, the CLI says it in one line (exit 2)."""
    import errno
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and (exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1))
                                         or "no space left on device" in str(exc).lower()
                                         or "disk quota exceeded" in str(exc).lower()):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters: a failure as a row says it."""
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300]


class RunLocked(UsageError):
    """Another writer (a sweep, tune, merge or import) holds the run folder's lock
    (moe_lab.storage.runlock): one line naming it; nothing was written."""
