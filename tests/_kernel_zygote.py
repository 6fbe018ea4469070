"""Notebook kernels forked from one process that imported ipykernel, IPython, numpy,
pandas, torch and matplotlib's pyplot once (the tests' `python3` kernelspec, set up by
conftest): each kernel is still a process of its own, started empty for each notebook,
with the environment, working folder, sys.path, argv and standard streams of the process
jupyter_client launched (tests/_kernel_client.py, which stands in for it: signals
forwarded, exits with the kernel's status). Nothing of moe_lab is imported before the
fork. What matplotlib reads from the environment on import is read from the kernel's:
its backend (MPLBACKEND, which ipykernel sets to the inline backend where unset, before
any code of the notebook); a kernel whose environment names another matplotlib config
(MPLCONFIGDIR, MATPLOTLIBRC, HOME, XDG_CONFIG_HOME) than this server's is started the
usual way instead (python -m ipykernel_launcher, exec'd in the forked process).

    python tests/_kernel_zygote.py SOCKET     (serves until its parent exits)
"""
import ctypes
import json
import os
import select
import signal
import socket
import sys
import time

from _forked import run_and_exit  # tests/, this script's folder


def _kernel(conn: socket.socket, req: dict, fds: list) -> None:
    """In the forked child: become the kernel jupyter_client asked for; never returns."""
    def child():
        try:  # die with this server (the kernel's own watch below covers its client)
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        for fd, new in zip((0, 1, 2), fds):
            os.dup2(new, fd)
            os.close(new)
        conn.close()
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.path[:] = req["path"]
        sys.argv = req["argv"]
        if any(os.environ.get(k) != MPL_ENV[k] for k in MPL_ENV):  # another config: fresh
            os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *req["argv"][1:]])
        # as matplotlib would have read it on import in this environment (ipykernel sets it
        # there, before the notebook's code, where it is unset)
        os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        sys.modules["matplotlib"].rcParams["backend"] = os.environ["MPLBACKEND"]
        # read from the environment when ipykernel was imported (here, before the fork)
        argv = req["argv"][1:] + [f"--IPKernelApp.parent_handle={int(req['env'].get('JPY_PARENT_PID') or 0)}"]
        client = req["client"]

        def watch():
            while True:
                time.sleep(1)
                try:
                    os.kill(client, 0)
                except ProcessLookupError:
                    os._exit(1)
        import threading
        threading.Thread(target=watch, daemon=True).start()
        from ipykernel import kernelapp
        kernelapp.launch_new_instance(argv=argv)

    run_and_exit(child)


# what matplotlib reads its configuration from on import (here, before the fork)
MPL_ENV = {k: os.environ.get(k) for k in ("MPLCONFIGDIR", "MATPLOTLIBRC", "HOME",
                                          "XDG_CONFIG_HOME")}


def serve(path: str) -> None:
    parent = os.getppid()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)  # first: a client that comes during the imports waits for them
    srv.listen(16)
    import IPython  # noqa: F401
    import ipykernel.ipkernel  # noqa: F401
    import ipykernel.kernelapp  # noqa: F401
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import torch  # noqa: F401
    os.environ.pop("MPLBACKEND", None)  # the backend: set in each kernel (_kernel)
    import matplotlib.pyplot  # noqa: F401
    import matplotlib_inline.backend_inline  # noqa: F401
    waiting = {}  # kernel pid -> the connection of its client
    while os.getppid() == parent:
        ready, _, _ = select.select([srv], [], [], 0.2)
        if ready:
            conn, _ = srv.accept()
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            buf = msg
            while not buf.endswith(b"\n"):
                more = conn.recv(1 << 20)
                if not more:
                    break
                buf += more
            req = json.loads(buf)
            pid = os.fork()
            if pid == 0:
                srv.close()
                for c in waiting.values():
                    c.close()
                _kernel(conn, req, fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            waiting[pid] = conn
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
