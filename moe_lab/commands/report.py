"""`moe-lab report`: execute every notebook headless into HTML and export its figures, with
an index.html; `--run ID` executes each with `run = ID` injected (OUT/ID/); `-p NAME VALUE`
injects a parameter through papermill (its name one the notebooks declare, its value read
as papermill's command line reads it, checked before any notebook runs). With `--runs A[,B...] --out DIR` the review
export instead: one self-contained HTML page of the runs' figures, each with its
provenance underneath, plus PNG and SVG files (moe_lab.plots.review)."""
from __future__ import annotations

import glob
import os
import time
from pathlib import Path

from ..core import validate
from ..core.errors import UsageError
from . import options
from ..report import (CELL_TIMEOUT_S, check_parameter, execute_notebook, export, failure_line,
                      notebook_parameters, parse_value, write_index)


FOLDER_OF_RUNS = ("04_",)  # notebooks whose `run` may be a folder of run folders (every run)
PATH_PARAMETERS = ("registry",)  # notebook parameters that take a file: 04's registry
NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"  # the checkout's


def configure(p):
    p.add_argument("--notebooks", default=str(NOTEBOOKS_DIR),
                   help="folder of .ipynb files (default: this checkout's notebooks/)")
    p.add_argument("--only", default=None, help="comma-separated notebook name prefixes, e.g. 01,03")
    p.add_argument("--out", default="reports", help="output folder")
    p.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell")
    p.add_argument("--run", default=None,
                   help="a run id or folder: every notebook executed for it (`run = ID` "
                        "injected after its parameters cell); writes OUT/<run id>/")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"),
                   help="inject a notebook parameter through papermill, as its -p does "
                        "(repeatable; a name the notebooks declare; `-p run X` is --run X)")
    p.add_argument("--runs", default=None,
                   help="review export: comma-separated run folders or ids (two: a compare "
                        "section, B over A); writes OUT/index.html and OUT/figures/*.png|svg")
    p.add_argument("--by", default=None,
                   help="with --runs: compare one run split by this column, e.g. config")
    p.add_argument("--values", default=None, help="with --by: the two values A,B")
    p.add_argument("--mode", default=None, help="with --runs: compare only this mode, e.g. graph")


def review(args) -> int:
    from ..plots.review import build, write
    from ..storage.store import open_run
    names = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not names:
        raise UsageError("--runs needs at least one run folder or run id")
    validate.output(args.out, "--out", folder=True)  # a file, under one, a run's: refused
    values = options.by_values(args.values)  # an empty value: one line saying so
    if args.values and not args.by:  # before: ignored, B/A compared everything (compare refuses it)
        raise UsageError(f"--values {args.values}: give the column they are values of, --by COLUMN")
    if args.by and len(names) > 2:
        raise UsageError("--by compares one run (or two): give at most two --runs")
    runs = [open_run(n) for n in names]  # a corrupt or foreign run: one line, nothing written
    seen: dict = {}
    for name, r in zip(names, runs):  # was: `a,a` drew a over a, which compare refuses
        if r.path.resolve() in seen:
            raise UsageError(f"--runs names run {r.run_id} twice ({seen[r.path.resolve()]}, "
                             f"{name}): give each run once (two runs: B over A; --by COLUMN "
                             "splits one)")
        seen[r.path.resolve()] = name
    for r in runs:  # their samples too (compare reads them): unreadable, refused the same
        r.samples()
    sections = build(runs, args.by, values, args.mode)  # in memory: a failure writes nothing
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the report to {args.out}: {exc.strerror or exc}") from None
    path = write(sections, args.out, getattr(args, "_argv", None))
    print(f"review: {len(sections)} sections, "
          f"{sum(s.fig is not None for s in sections)} figures -> {path}")
    return 0


def _for_run(args, declared: dict[str, dict]) -> tuple[str, dict, bool]:
    """(output folder, parameters, whether --run is a folder of runs), every one checked
    before any notebook runs: each `-p` name one a notebook declares and its value of the
    declared kind (papermill reads and injects them), `-p run X` the same as `--run X`
    (both: the same run), --run's run opened (an unknown id refused in one line), its
    folder under --out."""
    from ..storage.store import open_run
    params = {}
    for name, text in args.parameter:
        if name == "run":  # the run: as --run takes it (a folder or an id, a str)
            if args.run is not None and text != args.run:
                raise UsageError(f"--run {args.run} and -p run {text} name two runs: give one")
            args.run = text
            continue
        params[name] = check_parameter(name, parse_value(text), declared)
        _check_domain(name, params[name])
        if name in PATH_PARAMETERS and isinstance(params[name], str):
            # the caller's path: the notebooks run from notebooks/, where `-p registry
            # my.json` was looked up (and refused as 'no claims registry at my.json')
            params[name] = os.path.abspath(params[name])
    if args.run is None:
        return args.out, params, False
    if args.runs is not None:
        raise UsageError("--run ID executes the notebooks for one run; --runs is the review "
                         "export: give one of them")
    if _folder_of_runs(args.run):  # 04's: every run under it; the others take one run
        name = validate.run_id(Path(args.run).resolve().name, "--run")
        return (os.path.join(args.out, name), {"run": str(Path(args.run).resolve()), **params},
                True)
    run = open_run(args.run)  # UsageError: no run folder ID
    run_id = validate.run_id(run.run_id, "--run")  # the folder under --out: a name
    # a folder given is passed as an absolute path (notebooks run from notebooks/); an id
    # as the id, which the kernel looks up in the same data folder (MOE_LAB_DATA)
    given = str(run.path.resolve()) if os.path.isdir(args.run) else args.run
    return os.path.join(args.out, run_id), {"run": given, **params}, False


def _folder_of_runs(run: str) -> bool:
    """A folder that is no run folder itself but holds run folders (notebook 04 reads them
    all; claims.implications.measured_folders)."""
    from ..storage.store import MANIFEST, RESULTS
    p = Path(run)
    return (p.is_dir() and not (p / RESULTS).exists() and not (p / MANIFEST).exists()
            and any(p.glob(f"*/{RESULTS}")))


def _check_domain(name: str, value) -> None:
    """UsageError, one line, for a value no run could make good: a GPU, device, status,
    dtype or model moe-lab does not know. Before, the notebook refused it after its figures
    were drawn, a refusal page, and `report` exited 0."""
    if not isinstance(value, str):
        return
    try:
        if name == "gpu":  # 04: a device spec key
            from ..claims.implications import check_gpu
            check_gpu(value)
        elif name == "device":  # 03: a torch device name or a spec key with ceilings
            from ..core.devices import ceilings_for
            ceilings_for(value)
        elif name == "show":  # 04: a status or a list of them
            import pandas as pd

            from ..claims.verdicts import shown
            shown(pd.DataFrame({"status": []}), value)
        elif name == "dtype":
            from ..core.problems import DTYPES
            if value not in DTYPES:
                raise UsageError(f"unknown dtype {value!r}; moe-lab's: {', '.join(DTYPES)}")
        elif name == "models":  # 01: model names, comma-separated
            from ..core.problems import parse_model, split_models
            for m in split_models(value):
                parse_model(m)
    except UsageError as exc:
        raise UsageError(f"-p {name} {value}: {exc}") from None


def _refusal(exc) -> bool:
    """A notebook that stopped on a UsageError said why it cannot use the run: a refusal
    (its page is written), not a failure."""
    return getattr(exc, "ename", None) in ("UsageError", "CorruptFile")


def _notebook_paths(args) -> list[str]:
    """The notebooks to run (--only's prefixes), after checking that nbclient and
    nbconvert are there and --timeout is positive; a UsageError when none is found."""
    try:
        import nbclient  # noqa: F401
        import nbconvert  # noqa: F401
    except ImportError:
        raise UsageError("report needs nbclient and nbconvert: pip install 'moe-lab[notebooks]'") from None
    if not args.timeout > 0:  # before: 0 or -5 was passed to nbclient as it was
        raise UsageError(f"--timeout {args.timeout}: give a positive number of seconds per cell")
    paths = sorted(glob.glob(os.path.join(args.notebooks, "*.ipynb")))
    if args.only:
        pre = tuple(s.strip() for s in args.only.split(","))
        paths = [p for p in paths if os.path.basename(p).startswith(pre)]
    if not paths:
        raise UsageError(f"no notebooks found in {args.notebooks!r}"
                         + (f" whose name starts with {args.only}" if args.only else ""))
    return paths


def _takers_of_a_folder(args, paths: list[str]) -> list[str]:
    """--run is a folder of runs: the notebooks that take one (FOLDER_OF_RUNS), each
    other one skipped with a line; a UsageError when none of `paths` takes one."""
    takes = [p for p in paths if os.path.basename(p).startswith(FOLDER_OF_RUNS)]
    if not takes:
        raise UsageError(f"--run {args.run} is a folder of runs: only notebook "
                         f"{', '.join(FOLDER_OF_RUNS)} takes one (each other takes one run)")
    for p in sorted(set(paths) - set(takes)):
        print(f"skipped {os.path.splitext(os.path.basename(p))[0]}: takes one run; "
              f"{args.run} is a folder of runs")
    return takes


def _run_notebook(args, path: str, takes, params: dict, out: str, exported: dict,
                  entries: list) -> int:
    """Execute one notebook with the parameters it `takes` and export its page; prints
    its line (ok, refused or FAIL) and adds its index entry; 1 when it failed, else 0."""
    name = os.path.splitext(os.path.basename(path))[0]
    t0 = time.time()
    # a notebook's own parameters only where it has them (remeasure: not on --run)
    mine = {k: v for k, v in params.items() if k in takes}
    if args.run is not None and "remeasure" not in mine and "remeasure" in takes:
        mine["remeasure"] = False  # show the run asked for, never a new measurement
    refused = None
    try:
        nb = execute_notebook(path, args.timeout, params=mine)
    except Exception as exc:
        if not (_refusal(exc) and getattr(exc, "nb", None) is not None):
            print(f"FAIL {failure_line(path, exc)}")
            entries.append((name, f"FAIL {failure_line(path, exc)}", []))
            return 1
        nb, refused = exc.nb, failure_line(name, exc)
    try:
        figs = export(nb, name, out, exported)
    except Exception as exc:  # nbconvert's templates or a write: a line, not a traceback
        from ..core.errors import disk_full
        if disk_full(exc):  # the CLI's one line; no partial page was left (export)
            raise
        why = (str(exc).strip().splitlines() or [""])[0][:300]
        print(f"FAIL {path}: exporting to HTML: {type(exc).__name__}: {why}")
        return 1
    line = (f"refused {refused}" if refused else
            f"ok   {name}: {len(figs)} figures, {time.time() - t0:.0f} s -> "
            f"{os.path.join(out, name + '.html')}")
    print(line)
    entries.append((name, line.replace("ok   ", "ok ", 1), figs))
    return 0


def run(args) -> int:
    if args.runs is not None and args.run is None:
        return review(args)
    given = [f"--{k}" for k in ("by", "values", "mode") if getattr(args, k, None) is not None]
    if given:  # they shape the review export only: ignored, they would mislead
        raise UsageError(f"{', '.join(given)} go with --runs A[,B] (the review export)")
    paths = _notebook_paths(args)
    validate.output(args.out, "--out", folder=True)  # a file, under one, a run's: refused
    declared = {os.path.basename(p): notebook_parameters(p) for p in paths}  # each read
    out, params, folder_of_runs = _for_run(args, declared)  # the folder looked at once
    if folder_of_runs:
        paths = _takers_of_a_folder(args, paths)
    validate.output(out, "--out", folder=True)  # OUT/<run id>: not a file, nor a run's folder
    failed, entries, exported = 0, [], {}  # exported: PNG bytes -> path (export)
    for path in paths:
        failed += _run_notebook(args, path, declared[os.path.basename(path)], params, out,
                                exported, entries)
    index = write_index(out, entries, f"moe-lab report: {args.run}" if args.run else "moe-lab report")
    print(f"index: {index}")
    return 1 if failed else 0
