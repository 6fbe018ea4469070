"""A progress bar for long sweeps that log lines do not break.

Python log records are printed above the bar (tqdm's logging redirect), and the PyTorch
profiler's own C++ logging (Kineto's "ActivityProfilerController" lines on stderr) is
turned down to errors unless the user set KINETO_LOG_LEVEL.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # read when the profiler first starts
NATIVE_NOISE = ("USDT:",)  # Kineto prints these at every profiler start/stop, whatever the level


@contextlib.contextmanager
def native_log_filter():
    """Hold what native code writes to stderr (fd 2) inside the block and print it after,
    less the profiler's start/stop lines: they would break a progress bar's line."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (a notebook kernel)
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode(errors="replace").splitlines(True)
                    if not ln.startswith(NATIVE_NOISE)]
            if kept:
                sys.stderr.write("".join(kept))


class _NoBar:
    def write(self, line):
        print(line, flush=True)

    def update(self, n=1):
        pass

    def set_description(self, s):
        pass

    def close(self):
        pass


class _Bar:
    """tqdm, with Python logging routed through it while the bar lives."""

    def __init__(self, total: int):
        from tqdm.auto import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm
        self._bar = tqdm(total=total, unit="pt", dynamic_ncols=True, smoothing=0.05)
        self._redirect = contextlib.ExitStack()
        self._redirect.enter_context(logging_redirect_tqdm())

    def write(self, line):  # above the bar
        self._bar.write(line)

    def update(self, n=1):
        self._bar.update(n)

    def set_description(self, s):
        self._bar.set_description(s)

    def close(self):
        self._redirect.close()
        self._bar.close()


def progress_bar(total: int, enabled: bool = True):
    if not enabled:
        return _NoBar()
    try:
        return _Bar(total)
    except ImportError:
        return _NoBar()
