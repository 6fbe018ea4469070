import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

NOTEBOOKS = os.path.join(ROOT, "notebooks")
pytest.register_assert_rewrite("_report_pages")  # its asserts explain a failure too

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread per xdist worker (scripts/test.sh runs one worker per core): torch's own
    # threads on top would only fight the other workers; notebooks' kernels inherit it
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
# Inductor compiles its C++ in this process: its default pool of compile workers (one per
# core) starts Python processes that import torch on every compiling test and notebook,
# which on a 2-core machine cost more CPU than the compiles they serve (a resumed compile
# sweep: 26 -> 14 CPU-s)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# Modules whose tests take the longest (notebook executions, spawned sweeps, Triton's
# interpreter, torch.compile on the CPU, mutation runs), most CPU time first (user+sys of
# each module in a `-n 2` run, children included): scheduled first, so that no worker
# starts one of them while the others have nothing left to do. An ordering hint only: a
# module missing here still runs, later.
HEAVY_FIRST = ("test_report_first_look", "test_bites", "test_distributed", "test_report_run",
               "test_sweep", "test_align", "test_points", "test_hostile_37", "test_findings",
               "test_glue", "test_hostile_writers", "test_notebook_02", "test_hostile_rest",
               "test_report_review", "test_device_bundle", "test_notebook_05", "test_cli_qa",
               "test_notebooks_fp8", "test_notebook_04", "test_aiter_triton_fp8_interpreted",
               "test_torch_fp8_grouped", "test_aiter_triton_interpreted", "test_notebook_06",
               "test_plots_devices", "test_adding_a_backend", "test_torch_grouped",
               "test_notebook_03", "test_notebook_01", "test_compile")


def pytest_configure(config):
    """pytest-xdist (3.6 on) hands `--dist loadfile` modules out by their number of tests,
    most first, unless told not to: a heavy module of few tests (an executed report) then
    starts last and runs alone at the end. HEAVY_FIRST's order is kept instead."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The heavy modules first. scripts/test.sh runs pytest-xdist with `--dist loadfile`:
    a module's tests stay on one worker, so a module-scoped fixture (a notebook executed
    once, a subprocess under Triton's interpreter, a report) runs once per session."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda it: rank.get(getattr(it.module, "__name__", ""), len(rank)))


def _committed_runs():
    """The run folders git tracks (None outside a git checkout)."""
    import subprocess
    try:
        out = subprocess.run(["git", "ls-files", "data/runs/*/manifest.json"], cwd=ROOT,
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return sorted({line.split("/")[2] for line in out.stdout.split()})


def _committed_data_dir() -> str:
    """The tests read the committed runs only: a user's own runs in data/runs (the main job
    writes one) must not change which run a notebook shows by default. When data/runs holds
    more than git tracks, MOE_LAB_DATA points at a folder of links to the tracked runs."""
    import tempfile
    runs = os.path.join(ROOT, "data", "runs")
    tracked = _committed_runs()
    present = sorted(d for d in os.listdir(runs) if os.path.isdir(os.path.join(runs, d)))
    if tracked is None or present == tracked:
        return runs
    base = tempfile.mkdtemp(prefix="moe-lab-committed-")
    os.makedirs(os.path.join(base, "runs"))
    for d in tracked:
        os.symlink(os.path.join(runs, d), os.path.join(base, "runs", d))
    os.symlink(os.path.join(ROOT, "data", "configs"), os.path.join(base, "configs"))
    return os.path.join(base, "runs")


RUNS_DIR = _committed_data_dir()
os.environ["MOE_LAB_DATA"] = RUNS_DIR  # notebooks' kernels inherit it


# Executed notebooks, shared by every test of the session (all xdist workers): a notebook
# executed with the same parameters (the same notebook text, after injection and edits)
# and the same MOE_LAB_* environment is executed once; the others read the result, a
# refusal (CellExecutionError) included. Set by the session fixture below.
_NB_CACHE = None


@pytest.fixture(scope="session", autouse=True)
def _notebook_cache(tmp_path_factory):
    global _NB_CACHE
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    _NB_CACHE = base / "executed-notebooks"
    _NB_CACHE.mkdir(exist_ok=True)
    yield
    _NB_CACHE = None


@pytest.fixture(scope="session", autouse=True)
def _kernel_server(tmp_path_factory):
    """Notebook kernels forked from one process per test process that imported ipykernel,
    IPython, numpy, pandas and torch once (tests/_kernel_zygote.py): the tests' `python3`
    kernelspec (first on JUPYTER_PATH) launches tests/_kernel_client.py, which asks that
    server for a fresh kernel with its own environment, folder and streams. Each notebook
    still gets a new, empty kernel process; only the import of those libraries is shared.
    MOE_LAB_TEST_FRESH_KERNELS=1 turns it off (kernels started the usual way)."""
    import json
    import subprocess
    import tempfile
    if os.environ.get("MOE_LAB_TEST_FRESH_KERNELS"):
        yield
        return
    base = tmp_path_factory.mktemp("jupyter")
    spec = base / "kernels" / "python3"
    spec.mkdir(parents=True)
    from ipykernel.kernelspec import get_kernel_dict
    kernel = get_kernel_dict()  # ipykernel's own (its metadata: debugger, encryption)
    kernel["argv"] = [sys.executable, os.path.join(ROOT, "tests", "_kernel_client.py"), "-f",
                      "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps(kernel))
    sock = os.path.join(tempfile.mkdtemp(prefix="moe-lab-k-"), "s")  # short: AF_UNIX limit
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "_kernel_zygote.py"),
                               sock], cwd=ROOT, stdin=subprocess.DEVNULL)
    old = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "PYTEST_KERNEL_ZYGOTE")}
    os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(base), old["JUPYTER_PATH"]) if p)
    os.environ["PYTEST_KERNEL_ZYGOTE"] = sock
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.terminate()
        server.wait(timeout=30)


def execute_cached(path: str, timeout: int = 900, edit=None, params: dict | None = None):
    """moe_lab.report.execute_notebook, once per session for each notebook text and
    environment (file-locked: a second worker asking for it waits for the first). A
    CellExecutionError is replayed (its `.nb` too); other errors are not kept."""
    import fcntl
    import hashlib
    import json

    import nbformat
    from nbclient.exceptions import CellExecutionError

    from moe_lab.report import execute_notebook, inject_parameters
    if _NB_CACHE is None:
        return execute_notebook(path, timeout, edit, params)
    nb = nbformat.read(path, as_version=4)
    inject_parameters(nb, params or {})
    if edit is not None:
        edit(nb)
    env = {k: v for k, v in os.environ.items() if k.startswith("MOE_LAB")}
    cells = [[c.cell_type, c.source, c.get("metadata", {})] for c in nb.cells]  # no ids: random
    key = hashlib.sha256(json.dumps([os.path.realpath(path), cells, env],
                                    sort_keys=True).encode()).hexdigest()[:32]
    done, failed = _NB_CACHE / f"{key}.ipynb", _NB_CACHE / f"{key}.error.json"
    with open(_NB_CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            try:
                out, err = execute_notebook(path, timeout, edit, params), None
            except CellExecutionError as exc:
                out, err = exc.nb, exc
            if err is not None:
                failed.write_text(json.dumps([err.traceback, err.ename, err.evalue]))
            tmp = done.with_suffix(".part")
            nbformat.write(out, str(tmp))
            tmp.rename(done)
    nb = nbformat.read(str(done), as_version=4)
    if failed.exists():
        exc = CellExecutionError(*json.loads(failed.read_text()))
        exc.nb = nb
        raise exc
    return nb


def run_notebook(name: str, timeout: int = 300, edit=None):
    """Execute notebooks/<name> headless (moe_lab.report's runner, once per session for
    the same parameters: execute_cached); returns its outputs and fails the test on any
    error output."""
    nb = execute_cached(os.path.join(NOTEBOOKS, name), timeout, edit)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
    return outputs


def pngs(outputs):
    return [o for o in outputs if "image/png" in o.get("data", {})]


def with_params(**params):
    """Set notebook parameters the way papermill does (moe_lab.report.inject_parameters: an
    `injected-parameters` cell after the cell tagged `parameters`)."""
    def edit(nb):
        from moe_lab.report import inject_parameters
        inject_parameters(nb, params)
    return edit


def printed(outputs) -> str:
    """What the notebook printed (stream outputs), in order."""
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def plugin_backend(filename: str, backend: str):
    """A test backend from tests/data/plugin/<filename> registered the way discovery would
    (its module under moe_lab.backends); a generator for a fixture: yields the module, then
    unregisters it."""
    import importlib.util

    from moe_lab import backends
    name = "moe_lab.backends." + filename.removesuffix(".py")
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(ROOT, "tests", "data", "plugin", filename))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    yield mod
    backends._REGISTRY.pop(backend, None)
    sys.modules.pop(name, None)


def cli_refused(capsys, argv, where, says=None, contains=None) -> str:
    """moe-lab's main(argv) exits 2 with one line (equal to `says` or holding `contains`)
    and leaves `where` byte-identical; the line."""
    from moe_lab.cli import main
    before = folder_tree(where)
    assert main(argv) == 2
    line = one_line_err(capsys)
    if says is not None:
        assert line == f"moe-lab: error: {says}", line
    if contains is not None:
        assert contains in line, line
    assert folder_tree(where) == before
    return line


def data_copy(runs, tmp_path, capsys, monkeypatch):
    """A copy of a module's measured runs under tmp_path, the data folder of the call
    (MOE_LAB_DATA), with what the module's set-up printed read away."""
    import shutil
    capsys.readouterr()
    d = tmp_path / "runs"
    shutil.copytree(runs, d)
    monkeypatch.setenv("MOE_LAB_DATA", str(d))
    return d


def folder_tree(folder) -> dict:
    """Every path under `folder`: content hash and mtime (files), or "dir" (the
    byte-for-byte check of the hostile-input tests)."""
    import hashlib
    from pathlib import Path
    folder = Path(folder)
    return {str(p.relative_to(folder)): ("dir",) if p.is_dir() else
            (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


def api_refuses(call, says: str, folder) -> None:
    """`call(folder)` (a notebook API call) raises UsageError whose one line is `says`, and
    writes nothing into `folder`."""
    import pytest
    from moe_lab.core.errors import UsageError
    with pytest.raises(UsageError) as exc:
        call(folder)
    assert str(exc.value) == says
    assert not list(folder.iterdir())  # nothing written


def one_line_err(capsys) -> str:
    """The captured stderr: exactly one line, no traceback, nothing on stdout."""
    out = capsys.readouterr()
    err = out.err.strip()
    assert err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err and not out.out, (err, out.out)
    return err



# `python -m moe_lab ARGS` for many ARGS at the cost of one interpreter's imports: one
# process imports torch, pandas and moe_lab's commands once, then forks a child per ARGS
# that runs the console entry point (moe_lab.cli.entry) with its own cwd, stdout and
# stderr, and exits as the real command does (os._exit after entry's own exit path; a
# traceback printed and exit 1 for an uncaught error, as the interpreter would).
_CLI_SERVER = r"""
import importlib, json, os, pkgutil, sys
import pandas, torch
import moe_lab.commands
from moe_lab.cli import entry
sys.path.insert(0, "tests")  # the server starts in the checkout
from _forked import run_and_exit
for m in pkgutil.iter_modules(moe_lab.commands.__path__):
    importlib.import_module("moe_lab.commands." + m.name)
codes = []
for argv, cwd, out, err, extra in json.loads(sys.stdin.read()):
    pid = os.fork()
    if pid == 0:
        def child():
            os.environ.update(extra)
            os.chdir(cwd)
            for fd, path in ((1, out), (2, err)):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            sys.argv = ["moe-lab", *argv]
            entry()
        run_and_exit(child)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(codes))
"""


def cli_processes(cases, env=None, timeout=600):
    """Run `python -m moe_lab *argv` for each (argv, cwd) or (argv, cwd, {VAR: value} added
    to its environment) in `cases`, one after the other, each in a process of its own
    (forked from one that imported moe_lab once); returns a CompletedProcess per case
    (returncode, stdout, stderr), in order."""
    import json
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="moe-lab-cli-") as d:
        jobs = [[list(map(str, argv)), str(case[1]), os.path.join(d, f"{i}.out"),
                 os.path.join(d, f"{i}.err"), dict(case[2] if len(case) > 2 else {})]
                for i, case in enumerate(cases) for argv in [case[0]]]
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        p = subprocess.run([sys.executable, "-c", _CLI_SERVER], input=json.dumps(jobs), cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, p.stderr[-3000:]
        codes = json.loads(p.stdout.strip().splitlines()[-1])
        return [subprocess.CompletedProcess(["moe-lab", *argv], rc, open(out).read(),
                                            open(err).read())
                for (argv, _, out, err, _), rc in zip(jobs, codes)]


DROP = object()  # put(): remove the key


def put(obj, path, value) -> None:
    """An edit of a nested object in place (a registry, a ceilings file): the value at
    `path` (keys and indices, or a dotted str of keys) set, or removed when it is DROP."""
    *head, last = path.split(".") if isinstance(path, str) else path
    node = obj
    for k in head:
        node = node[k]
    if value is DROP:
        del node[last]
    else:
        node[last] = value


@pytest.fixture(scope="module")
def mutation_runs():
    """The mutation checks' runner (tests/test_bites*.py): pytest on a copy of the checkout,
    as _bites_harness.run_pytest runs it, each run a process forked from one that imported
    torch, pandas and the like once (PytestServer)."""
    from _bites_harness import PytestServer
    server = PytestServer()
    yield server.run
    server.close()
