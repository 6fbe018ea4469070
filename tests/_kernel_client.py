"""The process jupyter_client launches for the tests' `python3` kernel: it asks the
kernel server (tests/_kernel_zygote.py, at $PYTEST_KERNEL_ZYGOTE) for a kernel forked
with this process's argv, environment, folder, sys.path and standard streams, forwards
the signals jupyter_client sends, and exits with the kernel's status. Without a server
it becomes the usual `python -m ipykernel_launcher`."""
import importlib.util
import json
import os
import signal
import socket
import sys
import time


def main() -> int:
    path = os.environ.get("PYTEST_KERNEL_ZYGOTE")
    argv = ["ipykernel_launcher", *sys.argv[1:]]
    launcher = importlib.util.find_spec("ipykernel_launcher")
    s, connected = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), False
    for _ in range(50 if path else 0):  # the server binds at once; 5 s for a slow start
        try:
            s.connect(path)
            connected = True
            break
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(0.1)
        except OSError:
            break
    if not connected:
        os.execv(sys.executable, [sys.executable, "-m", *argv])
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_KERNEL_ZYGOTE"}
    req = dict(argv=[launcher.origin if launcher else argv[0], *argv[1:]], cwd=os.getcwd(), env=env, client=os.getpid(),
               path=sys.path[1:])  # as ipykernel_launcher leaves it
    socket.send_fds(s, [json.dumps(req).encode() + b"\n"], [0, 1, 2])
    f = s.makefile("r")
    pid = int(f.readline())
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda n, _frame: os.kill(pid, n))
    line = f.readline()
    return int(line) if line.strip() else 1


if __name__ == "__main__":
    sys.exit(main())
