"""The package's layers can be seen and point one way: few modules at the root (the face:
`__init__`, `__main__`, `api`, `cli`), no import cycle between modules nor between the
top-level folders of moe_lab, nothing imports the face back, and scripts/ stays short.
Imports are read with `ast` from every module (top of file and inside functions, relative
and absolute), so an import hidden in a function counts as much as one at the top."""
import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "moe_lab"
MAX_ROOT_MODULES = 8
MAX_SCRIPTS = 8
FACE = {"moe_lab.api", "moe_lab.cli"}  # may import everything; imported by no module...
FACE_IMPORTERS = {"moe_lab", "moe_lab.__main__"}  # ...but these


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        if "__pycache__" in p.parts:
            continue
        parts = p.relative_to(ROOT).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The moe_lab modules `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()

    def add(mod: str) -> None:
        while mod and mod not in mods:  # an attribute of a module: the module
            mod = mod.rpartition(".")[0]
        if mod and mod != name:
            out.add(mod)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "moe_lab":
                    add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base.split(".")[0] != "moe_lab":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                add(sub if sub in mods else base)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _folder(mod: str) -> str:
    """moe_lab.measuring.sweep -> measuring; a root module is its own folder (moe_lab.api -> api)."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for m, deps in graph.items():
        if m in FACE or m in FACE_IMPORTERS:
            continue  # the face imports every layer; the layers import it back nowhere (below)
        folders.setdefault(_folder(m), set()).update(
            _folder(d) for d in deps if _folder(d) != _folder(m))
    return folders


def test_the_package_root_holds_few_modules():
    root = sorted(p.name for p in PKG.glob("*.py"))
    assert {"__init__.py", "__main__.py", "api.py", "cli.py"} <= set(root)
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at moe_lab/: {root}"


def test_scripts_stay_few():
    files = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.is_file())
    assert len(files) <= MAX_SCRIPTS, f"{len(files)} files in scripts/: {files}"


def test_no_import_cycle_between_modules():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles between modules: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycle_between_folders():
    cycles = _cycles(_folder_graph(_graph()))
    assert not cycles, "import cycles between moe_lab's folders: " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_nothing_imports_the_face_back():
    back = sorted(f"{m} -> {d}" for m, deps in _graph().items() for d in deps
                  if d in FACE and m not in FACE | FACE_IMPORTERS)
    assert not back, f"modules importing api/cli: {back}"


def test_the_checks_see_what_they_must():
    """Not vacuous: the parse finds in-function and relative imports, and a cycle or a
    folder cycle planted in a copy of the graph is found."""
    graph = _graph()
    assert len(graph) > 80 and "moe_lab.measuring.sweep" in graph
    assert "moe_lab.storage.store" in graph["moe_lab.measuring.sweep"]  # relative, parent folder
    assert any(d.startswith("moe_lab.measuring") for d in graph["moe_lab.commands.sweep"])  # in run()
    planted = {m: set(d) for m, d in graph.items()}
    planted["moe_lab.core.errors"].add("moe_lab.measuring.sweep")
    assert any("moe_lab.core.errors" in c for c in _cycles(planted))
    assert any("core" in c and "measuring" in c for c in _cycles(_folder_graph(planted)))


# --- the rows' vocabulary stands under storage (issue 65) -------------------------------------

# where each folder may not reach: analysis and plots read rows, not the code that measures
# them; cost is pure functions and reads no run
FORBIDDEN = {"analysis": {"measuring", "distributed"}, "plots": {"measuring", "distributed"},
             "cost": {"storage"}}
VOCABULARY = ("GEMMS", "PHASES", "COVERAGE_RANGE", "NOISE_LIMIT", "PARTS", "PART_LABELS",
              "VARIANTS")  # the rows' names, each assigned by one module
VOCABULARY_HOME = "moe_lab.storage.vocabulary"


def _crossings(graph: dict[str, set[str]], src: str) -> list[str]:
    """`module -> import` for every import of a module under `src` into a folder FORBIDDEN
    to it (top of file or inside a function)."""
    return sorted(f"{m} -> {d}" for m, deps in graph.items() if _folder(m) == src
                  for d in deps if _folder(d) in FORBIDDEN[src])


def _assigners(name: str) -> list[str]:
    """The modules that assign `name` at their top level (`X = ...`, `X: T = ...`, or
    within a tuple target), whatever else they import."""
    out = []
    for mod, path in _modules().items():
        for node in ast.parse(path.read_text(), str(path)).body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if name in names:
                out.append(mod)
                break
    return sorted(out)


def test_analysis_and_plots_import_nothing_from_measuring_or_distributed():
    graph = _graph()
    bad = _crossings(graph, "analysis") + _crossings(graph, "plots")
    assert not bad, f"analysis/plots importing the code that measures: {bad}"


def test_cost_imports_nothing_from_storage():
    bad = _crossings(_graph(), "cost")
    assert not bad, f"cost/ (pure functions) importing storage: {bad}"


def test_one_module_defines_gemms():
    where = _assigners("GEMMS")
    assert len(where) == 1, f"GEMMS assigned at the top of {len(where)} modules: {where}"
    assert where == [VOCABULARY_HOME]


def test_the_rows_vocabulary_is_defined_once_under_storage():
    twice = {n: _assigners(n) for n in VOCABULARY if _assigners(n) != [VOCABULARY_HOME]}
    assert not twice, f"the rows' vocabulary assigned elsewhere than {VOCABULARY_HOME}: {twice}"


def test_the_vocabulary_checks_see_what_they_must():
    """Not vacuous: an import planted in a copy of the graph (a function-local one counts
    the same) is a crossing, and _assigners finds assignments of every form."""
    graph = _graph()
    assert {"moe_lab.analysis.kernel_time", "moe_lab.plots.style",
            "moe_lab.cost.ledger"} <= set(graph)
    planted = {m: set(d) for m, d in graph.items()}
    planted["moe_lab.plots.style"].add("moe_lab.measuring.timing")
    planted["moe_lab.analysis.kernel_time"].add("moe_lab.distributed")
    planted["moe_lab.cost.ledger"].add("moe_lab.storage.store")
    assert _crossings(planted, "plots") == ["moe_lab.plots.style -> moe_lab.measuring.timing"]
    assert _crossings(planted, "analysis") == [
        "moe_lab.analysis.kernel_time -> moe_lab.distributed"]
    assert _crossings(planted, "cost") == ["moe_lab.cost.ledger -> moe_lab.storage.store"]
    assert "moe_lab.storage.store" in graph["moe_lab.analysis.ledger"]  # analysis reads runs
    assert _assigners("PHASE_RANGES") == ["moe_lab.measuring.profiling"]  # plain assignment
    assert "moe_lab.cost.ledger" in _assigners("GAPS")  # within a tuple target
    assert "moe_lab.storage.vocabulary" in _assigners("NOISE_LIMIT")


# --- one run chooser (issue 65) -----------------------------------------------------------------

CHOOSER = "moe_lab.analysis.runs"  # its modules (runs/__init__, runs/lists) choose the runs
# the store defines the two (open_run(None) is its newest run); the face lists runs for a user
CHOOSER_EXEMPT = ("moe_lab.storage", "moe_lab.api", "moe_lab.cli", "moe_lab")


def _unchosen_lookups(sources: dict[str, str]) -> list[str]:
    """`module:line name(...)` for each call of find_runs (any), or of open_run with no run
    or a None run, in a module that is not the chooser's nor exempt: a run chosen there."""
    out = []
    for mod, text in sorted(sources.items()):
        if mod == CHOOSER or mod.startswith(CHOOSER + ".") or mod in CHOOSER_EXEMPT[1:] or \
                mod.startswith(CHOOSER_EXEMPT[0] + "."):
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else ""
            run = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg == "run"), None)
            none = run is None or isinstance(run, ast.Constant) and run.value is None
            if name == "find_runs" or name == "open_run" and none:
                out.append(f"{mod}:{node.lineno} {name}")
    return out


def test_only_analysis_runs_looks_runs_up_without_a_run_given():
    """Every run a figure, a notebook, the findings or a claim reads is chosen by
    analysis.runs (choose, or its lists: every_run, default_runs, newest_with), which says
    why; nowhere else calls find_runs or open_run without a run."""
    found = _unchosen_lookups({m: p.read_text() for m, p in _modules().items()})
    assert not found, f"runs chosen outside {CHOOSER}: {found}"


def test_the_lookup_check_sees_what_it_must():
    """Not vacuous: a find_runs call, open_run() and open_run(None) planted in a module are
    found; open_run(run) and the chooser's own calls are not."""
    planted = {"moe_lab.analysis.fp8": "def f(run):\n    open_run(run)\n    open_run()\n"
                                       "    store.open_run(None, has='ok')\n"
                                       "    return find_runs(defaults=True)\n",
               CHOOSER: "find_runs()\nopen_run()\n",
               "moe_lab.storage.store": "find_runs()\n"}
    assert _unchosen_lookups(planted) == ["moe_lab.analysis.fp8:3 open_run",
                                          "moe_lab.analysis.fp8:4 open_run",
                                          "moe_lab.analysis.fp8:5 find_runs"]
    mods = _modules()
    assert "moe_lab.analysis.runs.lists" in mods and "find_runs" in mods[CHOOSER].read_text()
