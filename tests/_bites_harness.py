"""The mutation harness of tests/test_bites.py: a plausible one-line bug applied to a copy
of the checkout, and the tests named to catch it run there in their own pytest process.

    m = Mutation("ledger-rows-drop-k", "moe_lab/cost/ledger.py", "    rows = T * k\\n",
                 "    rows = T\\n", ("tests/test_ledger.py::test_bf16_floors_are_the_hand_count",),
                 "the act and align floors count T rows, not T*k")
    m.occurrences()                     # the old text must occur exactly once in the file
    copy = checkout(tmp_path / "co")    # moe_lab/ and tests/ copied, the rest linked
    m.apply(copy)
    rc, out = run_pytest(copy, m.catch, tmp_path / "bt")
    failed_lines(out)                   # the tests pytest reports FAILED

The copy holds moe_lab/, tests/ and pyproject.toml (copied: a mutation edits them; a test
resolving its own path finds the copy, so its subprocesses run the copy too) and links to
what the tests only read (data/, notebooks/, docs/, scripts/, README.md, ...). pytest runs
with cwd and PYTHONPATH at the copy (the venv's editable install comes after PYTHONPATH),
-x, its own --basetemp, no cache, the ini's addopts cleared (no xdist inside a case).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("moe_lab", "tests", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str               # relative to the checkout's root
    old: str                # must occur exactly once in the file
    new: str
    catch: tuple[str, ...]  # node ids (or their parametrised prefixes) of which one must fail
    bug: str                # the bug, in words
    says: str = ""          # text the failing run's output must hold (the right failure)

    def occurrences(self, root: Path = ROOT) -> int:
        return (root / self.file).read_text().count(self.old)

    def apply(self, copy: Path) -> None:
        path = copy / self.file
        text = path.read_text()
        assert text.count(self.old) == 1, f"{self.file}: the old text is not there exactly once"
        path.write_text(text.replace(self.old, self.new))


def checkout(dest: Path, root: Path = ROOT) -> Path:
    """A copy of the checkout at `dest`: COPIED copied, every other top-level entry but
    .git linked."""
    dest.mkdir(parents=True)
    for entry in sorted(root.iterdir()):
        if entry.name == ".git" or entry.name.startswith(".venv"):
            continue
        if entry.name in COPIED:
            if entry.is_dir():
                shutil.copytree(entry, dest / entry.name, ignore=IGNORED)
            else:
                shutil.copy2(entry, dest / entry.name)
        elif not entry.name.startswith("."):
            os.symlink(entry, dest / entry.name)
    return dest


def run_pytest(copy: Path, nodes, basetemp: Path, timeout: float = 600) -> tuple[int, str]:
    """(returncode, stdout + stderr) of `pytest -x` on `nodes` in the copy."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(copy), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           "-o", "addopts=", "-rfE", "--basetemp", str(basetemp), *nodes]
    p = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


# The same runs, each forked from one process that imported the third-party libraries the
# copies' tests import (torch, pandas, ...) once: a child runs pytest.main in its copy (cwd,
# sys.path and PYTHONPATH at the copy, moe_lab imported there, never in the parent) with
# stdout and stderr to a file, and exits with pytest's status (SIGALRM past its timeout).
_SERVER = r"""
import json, os, signal, sys
import matplotlib, numpy, pandas, pyarrow.parquet, pytest, torch  # noqa: F401
for line in sys.stdin:
    copy, args, out, timeout = json.loads(line)
    pid = os.fork()
    if pid == 0:
        rc = 3
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(copy)
            os.environ["PYTHONPATH"] = copy
            sys.path[:0] = [copy]
            signal.alarm(int(timeout))
            rc = int(pytest.main(args))
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            for f in (sys.stdout, sys.stderr):
                f.flush()
            os._exit(rc)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class PytestServer:
    """run_pytest's runs at one interpreter's imports of torch, pandas and the like: a
    process that forks a child per run (see _SERVER). Close it when done."""

    def __init__(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env.pop("PYTHONPATH", None)  # moe_lab is imported by each child, from its copy
        env.update(OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, copy: Path, nodes, basetemp: Path, timeout: float = 600) -> tuple[int, str]:
        """(returncode, stdout + stderr) of `pytest -x` on `nodes` in the copy, as
        run_pytest gives them."""
        out = Path(str(basetemp) + ".out")
        args = ["-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-rfE",
                "--basetemp", str(basetemp), *nodes]
        import json
        self.proc.stdin.write(json.dumps([str(copy), args, str(out), timeout]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the pytest server died (rc {self.proc.poll()})"
        return int(line), out.read_text()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def failed_lines(output: str) -> list[str]:
    """What follows FAILED in pytest's short summary: a node id, then " - " and the error."""
    return [ln[len("FAILED "):] for ln in output.splitlines() if ln.startswith("FAILED ")]


def within(line: str, named: str) -> bool:
    """Whether a FAILED line is of the `named` node, one of its parametrisations, or a test
    of the named file (node ids may hold spaces: a parametrisation's id)."""
    rest = line[len(named):] if line.startswith(named) else None
    return rest is not None and (rest == "" or rest.startswith((" - ", "[", "::")))


def assert_caught(m: Mutation, tmp_path: Path, runs) -> None:
    """The verdict on one mutation (tests/test_bites*.py): its old text is in the checkout
    exactly once (a refactor that removes or repeats the line fails here, never passes
    silently); applied to a copy, the tests it names fail there, only they, for the bug
    (not a slip in the mutation's own text) and saying m.says; skipped when those tests
    skip here. `runs`: run_pytest or a PytestServer's run."""
    import pytest
    n = m.occurrences()
    assert n == 1, (f"{m.file} holds the mutated text {n} times, not once: the bite "
                    f"{m.name!r} ({m.bug}) needs updating to the code as it is now")
    copy = checkout(tmp_path / "checkout")
    m.apply(copy)
    rc, out = runs(copy, m.catch, tmp_path / "basetemp")
    if rc == 0 and " skipped" in out and " passed" not in out:
        pytest.skip(f"the tests that catch {m.name} skip here: {out.strip().splitlines()[-1]}")
    failed = failed_lines(out)
    assert rc == 1 and failed, f"{m.name} ({m.bug}) was not caught (pytest rc {rc}):\n{out[-3000:]}"
    assert all(any(within(f, node) for node in m.catch) for f in failed), failed
    assert not any(f" - {e}" in f for f in failed
                   for e in ("NameError", "SyntaxError", "ImportError", "AttributeError")), failed
    assert m.says in out, f"{m.name}: the failure does not say {m.says!r}:\n{out[-3000:]}"


def assert_control(mutations, tmp_path: Path, runs) -> None:
    """The control: every test the mutations name passes in an unmutated copy, run the
    same way, so each failure of assert_caught is the mutation's."""
    nodes = list(dict.fromkeys(n for m in mutations for n in m.catch))
    copy = checkout(tmp_path / "checkout")
    rc, out = runs(copy, nodes, tmp_path / "basetemp")
    assert rc == 0, out[-3000:]
