import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

NOTEBOOKS = os.path.join(ROOT, "notebooks")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread per xdist worker (scripts/test.sh runs one worker per core): torch's own
    # threads on top would only fight the other workers; notebooks' kernels inherit it
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

# Modules whose tests take the longest (notebook executions, spawned sweeps, Triton's
# interpreter, torch.compile on the CPU): scheduled first, so that no worker starts one of
# them while the others have nothing left to do. An ordering hint only: a module missing
# here still runs, later.
HEAVY_FIRST = ("test_report_run", "test_glue", "test_notebook_02", "test_notebook_03",
               "test_hostile_writers", "test_align", "test_sweep", "test_distributed",
               "test_compile", "test_notebook_01", "test_notebooks_fp8", "test_notebook_04",
               "test_report_review", "test_hostile_rest", "test_notebook_05", "test_cli_qa",
               "test_notebook_06", "test_aiter_triton_fp8_interpreted",
               "test_aiter_triton_interpreted", "test_bites")


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


def run_notebook(name: str, timeout: int = 300, edit=None):
    """Execute notebooks/<name> headless (moe_lab.report's runner); returns its outputs
    and fails the test on any error output."""
    from moe_lab.report import execute_notebook
    nb = execute_notebook(os.path.join(NOTEBOOKS, name), timeout, edit)
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


def folder_tree(folder) -> dict:
    """Every path under `folder`: content hash and mtime (files), or "dir" (the
    byte-for-byte check of the hostile-input tests)."""
    import hashlib
    from pathlib import Path
    folder = Path(folder)
    return {str(p.relative_to(folder)): ("dir",) if p.is_dir() else
            (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


def one_line_err(capsys) -> str:
    """The captured stderr: exactly one line, no traceback, nothing on stdout."""
    out = capsys.readouterr()
    err = out.err.strip()
    assert err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err and not out.out, (err, out.out)
    return err

