"""Errors a user can fix (the CLI prints them as one line and exits 2), and the time
limit that turns a stuck point into a `timeout` row."""
from __future__ import annotations

import contextlib
import signal


class UsageError(ValueError):
    """Bad input: an unknown model, a malformed token list, a missing file."""


class PointTimeout(Exception):
    pass


class Terminated(BaseException):
    """SIGTERM (`timeout`, a job scheduler) arrived: not an Exception, so no point's
    error handling turns it into a row; the sweep's bookkeeping still runs."""


@contextlib.contextmanager
def terminate_gracefully():
    """Turn SIGTERM into `Terminated` in the main thread while the block runs."""
    if not hasattr(signal, "SIGTERM"):
        yield
        return

    def _raise(signum, frame):
        raise Terminated("terminated by SIGTERM")
    try:
        old = signal.signal(signal.SIGTERM, _raise)
    except ValueError:  # not the main thread: leave the default
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str = "point"):
    """Raise PointTimeout in the main thread after `seconds` (SIGALRM; POSIX only)."""
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def _raise(signum, frame):
        raise PointTimeout(f"{what} exceeded {seconds:.0f} s")
    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def has_timeout(exc: BaseException) -> bool:
    """True when a PointTimeout is anywhere in the exception's cause/context chain
    (Dynamo and Inductor wrap what a compile raised)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, PointTimeout):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "inner_exception", None)
    return False
