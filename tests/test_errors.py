"""The sweep's two signals (SIGTERM from `timeout` or a scheduler, SIGALRM for the compile
budget and the point timeout) must stop what they interrupt even when Python swallows the
first raise: an exception raised while a weakref callback runs is printed as "Exception
ignored" and dropped, and Dynamo/Inductor run many such callbacks while they compile. On an
H200 lease both signals were lost that way and a sweep compiled on past its deadline."""
import gc
import os
import signal
import sys
import time
import weakref

import pytest

from moe_lab.core.errors import (PointTimeout, Terminated, terminate_gracefully, terminating_handled,
                                 time_limit)


class _Obj:
    pass


def _callback_that_swallows(action):
    """Run `action` inside a weakref callback, where an exception is swallowed."""
    obj = _Obj()
    ref = weakref.ref(obj, lambda r: action())  # noqa: F841 (kept alive until obj dies)
    del obj
    gc.collect()
    return ref


def _sleep_until(deadline_s):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < deadline_s:
        time.sleep(0.05)
    return time.perf_counter() - t0


def test_sigterm_swallowed_once_still_stops_the_block(monkeypatch):
    swallowed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_type))
    with pytest.raises(Terminated):
        with terminate_gracefully():
            # SIGTERM lands inside the callback: that first Terminated is swallowed
            _callback_that_swallows(lambda: (os.kill(os.getpid(), signal.SIGTERM),
                                             time.sleep(0.2)))
            # the first one really was swallowed (on a busy machine the re-signal can land
            # in the callback too: more than one swallowed, each a Terminated)
            assert swallowed and set(swallowed) == {Terminated}, swallowed
            # the old handler let this run to its end and left the block without a raise;
            # a state, not a clock, decides: a busy machine only makes the wait longer
            _sleep_until(120)


def test_swallowed_timeout_fires_again(monkeypatch):
    swallowed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_type))
    with pytest.raises(PointTimeout):
        with time_limit(0.2, "compile"):
            _callback_that_swallows(lambda: time.sleep(1.0))  # the alarm lands in here
            assert swallowed and set(swallowed) == {PointTimeout}, swallowed  # >= 1 (load)
            _sleep_until(120)  # without the re-raise, the block ends with no PointTimeout


def test_no_signal_left_after_the_blocks():
    """Once a block is left nothing fires: no stray PointTimeout, no SIGTERM re-sent."""
    with pytest.raises(Terminated):
        with terminate_gracefully():
            os.kill(os.getpid(), signal.SIGTERM)
            _sleep_until(1)
    with time_limit(0.2):
        pass
    got = []
    old = signal.signal(signal.SIGTERM, lambda *a: got.append("term"))
    try:
        _sleep_until(2.5)  # longer than the re-signal period
    finally:
        signal.signal(signal.SIGTERM, old)
    assert got == []


def test_a_sigterm_whose_raise_the_block_swallowed_is_terminated_as_the_block_ends():
    """The block caught its Terminated and ended before a re-signal: Terminated as it ends
    (was: it ended as if no SIGTERM had come, and a re-signal could then land under the
    old handler, SIG_DFL, and kill the process before the bookkeeping after the block)."""
    with pytest.raises(Terminated):
        with terminate_gracefully():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                _sleep_until(120)
            except Terminated:
                pass  # swallowed; a re-signal landing here first raises the same


def test_on_signal_runs_once_before_the_raise_and_handled_stops_the_resignals():
    """on_signal (a rank's note to its launcher) runs at the first SIGTERM, before the
    raise, never again; after terminating_handled() the bookkeeping gets no further raise,
    however long it takes, and the block still ends in Terminated."""
    calls, closed = [], []
    with pytest.raises(Terminated):
        with terminate_gracefully(lambda: calls.append("noted")):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                _sleep_until(120)
            except Terminated:
                assert calls == ["noted"]
                terminating_handled()
                _sleep_until(2.5)  # longer than the re-signal period: nothing raises in it
                closed.append(True)
                raise
    assert calls == ["noted"] and closed == [True]
