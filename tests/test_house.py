"""The package's shape: imports point one way, modules stay small, and the notebook API
does what a notebook needs (measure on this machine, then read the run back)."""
import ast
import math
from pathlib import Path

import pytest

import moe_lab as ml
from moe_lab.storage.store import RESULT_COLUMNS

PKG = Path(ml.__file__).resolve().parent
MAX_LINES = 450


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """moe_lab modules this file imports, at module level or inside functions."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("moe_lab"):
                for a in node.names:  # `from . import backends` imports a module
                    sub = f"{mod}.{a.name}"
                    where = PKG.parent / sub.replace(".", "/")
                    out.add(sub if where.with_suffix(".py").exists() or where.is_dir() else mod)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("moe_lab")}
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = {d for d in _imports(path) if d in files and d != name}
        # a package's __init__ importing its own submodules (discovery) is not a cycle
        graph[name] = {d for d in deps if not d.startswith(name + ".")}
    return graph


def test_no_import_cycle_in_the_package():
    graph, state, path = _graph(), {}, []

    def visit(n):
        state[n] = "open"
        path.append(n)
        for d in sorted(graph[n]):
            if state.get(d) == "open":
                cycle = path[path.index(d):] + [d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        path.pop()
        state[n] = "done"
    for n in sorted(graph):
        if n not in state:
            visit(n)
    assert "moe_lab.cost.roofline" not in graph["moe_lab.core.devices"]  # the old ceilings/roofline loop
    assert len(graph) > 20  # the walk saw the package


def _folder(module: str) -> str:
    """moe_lab.x.y -> moe_lab.x (a subpackage); moe_lab.x -> moe_lab (the package root)
    unless x is itself a subpackage."""
    parts = module.split(".")
    if len(parts) >= 3 or (len(parts) == 2 and (PKG / parts[1]).is_dir()):
        return ".".join(parts[:2])
    return "moe_lab"


def test_no_import_cycle_between_folders():
    """The layers show in the folders: no two folders import each other (moe_lab.core
    imports nothing else of moe_lab; backends, plots, commands, ... import downwards)."""
    edges: dict[str, set[str]] = {}
    for a, deps in _graph().items():
        for d in deps:
            if _folder(a) != _folder(d):
                edges.setdefault(_folder(a), set()).add(_folder(d))
    loops = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a in edges.get(b, ()))
    assert not loops, "folder-level import loops: " + ", ".join(loops)
    assert not edges.get("moe_lab.core"), edges.get("moe_lab.core")  # the bottom layer
    assert {"moe_lab.backends", "moe_lab.plots", "moe_lab.commands"} <= set(edges)


def test_the_walk_would_see_a_cycle(tmp_path):
    """The cycle test can fail: the same walk on two modules importing each other."""
    a, b = PKG / "cost" / "roofline.py", PKG / "core" / "devices.py"
    assert "moe_lab.core.devices" in _imports(a)
    assert "moe_lab.cost.roofline" not in _imports(b)


def test_no_module_is_over_the_size_limit():
    big = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_public_api_measure_then_open_run_as_a_notebook_would(tmp_path):
    run_dir = tmp_path / "my-run"
    df = ml.measure("custom:H=64,I=32,E=8,k=2", tokens=[1, 4], backends="torch,torch-grouped",
                    tp=1, dtype="fp32", device="cpu", run=run_dir, rep_ms=5, warmup_ms=1)
    assert len(df) == 4 and set(df["status"]) == {"ok"}
    run = ml.open_run(run_dir)
    assert isinstance(run, ml.Run) and run.run_id == "my-run"
    assert set(RESULT_COLUMNS) <= set(run.results.columns)
    r = run.results
    assert len(r) == len(df) == 4  # the rows read back: all() of none passes
    assert (r["median_us"] > 0).all() and (r["max_rel_err"] < 2e-3).all()
    assert r["git_commit"].notna().all() and r["device"].str.startswith("cpu").all()
    assert r["measured_at"].notna().all() and not r["wrapped"].any()
    assert len(run.kernels) and set(run.kernels["point_id"]) <= set(r["point_id"])
    assert run.manifest["status"] == "complete"
    listed = ml.runs(tmp_path)
    assert list(listed["run_id"]) == ["my-run"] and int(listed["ok"].iloc[0]) == 4
    # measuring again resumes: nothing is re-measured, the rows are the same
    again = ml.measure("custom:H=64,I=32,E=8,k=2", tokens=[1, 4], backends="torch,torch-grouped",
                       tp=1, dtype="fp32", device="cpu", run=run_dir)
    assert sorted(again["measured_at"]) == sorted(r["measured_at"])


def test_measure_without_a_run_leaves_nothing_and_check_flags_each_backend(tmp_path):
    df = ml.measure("custom:H=64,I=32,E=4,k=2", tokens="1-2", backends=["torch"], tp=1,
                    dtype="fp32", device="cpu", rep_ms=2, warmup_ms=1)
    assert list(df["tokens"]) == [1, 2] and (df["status"] == "ok").all()
    chk = ml.check("custom:H=64,I=32,E=4,k=2", tokens=[3], backends="torch,torch-grouped",
                   tp=1, dtype="fp32", device="cpu")
    assert set(chk["backend"]) == {"torch", "torch-grouped"}
    assert (chk["status"] == "ok").all() and all(math.isfinite(e) for e in chk["max_rel_err"])


def test_profile_gives_the_kernel_table_and_a_trace(tmp_path):
    df, trace = ml.profile("custom:H=64,I=32,E=4,k=2", 4, backend="torch", tp=1, dtype="fp32",
                           device="cpu", iters=2, trace=str(tmp_path / "t.json.gz"))
    assert {"kernel", "phase", "calls", "total_us"} <= set(df.columns) and len(df)
    assert Path(trace).stat().st_size > 0


def test_bad_names_are_usage_errors():
    with pytest.raises(ml.UsageError, match="unknown backend"):
        ml.measure("qwen3-30b-a3b", tokens=[1], backends="nope", device="cpu")
    with pytest.raises(ml.UsageError):
        ml.measure("no-such-model", tokens=[1], backends="torch", device="cpu")
    with pytest.raises(ml.UsageError, match="mode"):
        ml.measure("qwen3-30b-a3b", tokens=[1], backends="torch", modes="fast", device="cpu")


def test_plots_only_draw_what_they_are_handed():
    """No module under plots/ opens a run or reads a table (open_run, find_runs, any
    read_parquet): the analysis layer (moe_lab.analysis) reads, plots draws."""
    banned = {"open_run", "find_runs", "read_parquet", "read_json"}
    found = []
    for p in sorted((PKG / "plots").glob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) \
                else None
            if isinstance(n, ast.ImportFrom):
                found += [f"{p.name}: import {a.name}" for a in n.names if a.name in banned]
            elif name in banned:
                found.append(f"{p.name}:{n.lineno} {name}")
    assert not found, found
    assert (PKG / "analysis" / "runs" / "__init__.py").is_file()  # the one chooser of runs
