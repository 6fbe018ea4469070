"""`moe-lab report`: execute every notebook headless into HTML and export its figures; with
`--runs A[,B...] --out DIR` the review export instead: one self-contained HTML page of the
runs' figures, each with its provenance underneath, plus PNG and SVG files (moe_lab.plots.review)."""
from __future__ import annotations

import glob
import os
import time
from pathlib import Path

from ..core.errors import UsageError
from ..report import execute_notebook, export, failure_line


NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"  # the checkout's


def configure(p):
    p.add_argument("--notebooks", default=str(NOTEBOOKS_DIR),
                   help="folder of .ipynb files (default: this checkout's notebooks/)")
    p.add_argument("--only", default=None, help="comma-separated notebook name prefixes, e.g. 01,03")
    p.add_argument("--out", default="reports", help="output folder")
    p.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    p.add_argument("--runs", default=None,
                   help="review export: comma-separated run folders or ids (two: a compare "
                        "section, B over A); writes OUT/index.html and OUT/figures/*.png|svg")
    p.add_argument("--by", default=None,
                   help="with --runs: compare one run split by this column, e.g. config")
    p.add_argument("--values", default=None, help="with --by: the two values A,B")
    p.add_argument("--mode", default=None, help="with --runs: compare only this mode, e.g. graph")


def review(args) -> int:
    from ..plots.review import build, write
    from ..store import open_run
    names = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not names:
        raise UsageError("--runs needs at least one run folder or run id")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out} is a file, not a folder")
    if args.by and len(names) > 2:
        raise UsageError("--by compares one run (or two): give at most two --runs")
    values = [v.strip() for v in args.values.split(",")] if args.values else None
    runs = [open_run(n) for n in names]  # a corrupt or foreign run: one line, nothing written
    sections = build(runs, args.by, values, args.mode)  # in memory: a failure writes nothing
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the report to {args.out}: {exc.strerror or exc}") from None
    path = write(sections, args.out, getattr(args, "_argv", None))
    print(f"review: {len(sections)} sections, "
          f"{sum(s.fig is not None for s in sections)} figures -> {path}")
    return 0


def run(args) -> int:
    if args.runs is not None:
        return review(args)
    given = [f"--{k}" for k in ("by", "values", "mode") if getattr(args, k, None) is not None]
    if given:  # they shape the review export only: ignored, they would mislead
        raise UsageError(f"{', '.join(given)} go with --runs A[,B] (the review export)")
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
    failed = 0
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        t0 = time.time()
        try:
            nb = execute_notebook(path, args.timeout)
        except Exception as exc:
            failed += 1
            print(f"FAIL {failure_line(path, exc)}")
            continue
        try:
            figs = export(nb, name, args.out)
        except Exception as exc:  # nbconvert's templates or a write: a line, not a traceback
            failed += 1
            why = (str(exc).strip().splitlines() or [""])[0][:300]
            print(f"FAIL {path}: exporting to HTML: {type(exc).__name__}: {why}")
            continue
        print(f"ok   {name}: {len(figs)} figures, {time.time() - t0:.0f} s -> "
              f"{os.path.join(args.out, name + '.html')}")
    return 1 if failed else 0
