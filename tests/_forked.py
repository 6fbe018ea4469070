"""The end of a process forked to stand in for a fresh interpreter (conftest's CLI server,
tests/_kernel_zygote.py's kernels): the status the interpreter would exit with, and an
exit that loses nothing printed (a forked child's buffers die with os._exit).

    run_and_exit(body)   in the child: body(), then exit as an interpreter running it as
                         its main program would (0; SystemExit's status; a traceback and 1)
"""
import os
import sys
import traceback


def exit_status(exc: SystemExit) -> int:
    """What an interpreter exits with on `exc`: its int code, 0 for None, else 1 (its
    message printed to stderr, as the interpreter prints it)."""
    if isinstance(exc.code, int):
        return exc.code
    if exc.code is not None:
        print(exc.code, file=sys.stderr)
    return 0 if exc.code is None else 1


def finish(code: int) -> None:
    """Flush stdout and stderr, then os._exit(code)."""
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    os._exit(code)


def run_and_exit(body) -> None:
    code = 1
    try:
        body()
        code = 0
    except SystemExit as exc:
        code = exit_status(exc)
    except BaseException:
        traceback.print_exc()
    finally:
        finish(code)
