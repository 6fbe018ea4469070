"""Notebook kernels forked from one process that imported ipykernel, IPython, numpy,
pandas and torch once (the tests' `python3` kernelspec, set up by conftest): each kernel
is still a process of its own, started empty for each notebook, with the environment,
working folder, sys.path, argv and standard streams of the process jupyter_client
launched (tests/_kernel_client.py, which stands in for it: signals forwarded, exits with
the kernel's status). Nothing of moe_lab (or matplotlib, which reads MPLBACKEND on
import) is imported before the fork.

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
