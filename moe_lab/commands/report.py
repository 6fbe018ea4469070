"""`moe-lab report`: execute every notebook headless into HTML and export its figures."""
from __future__ import annotations

import glob
import os
import time

from ..errors import UsageError
from ..report import execute_notebook, export, failure_line


def configure(p):
    p.add_argument("--notebooks", default="notebooks", help="folder of .ipynb files")
    p.add_argument("--only", default=None, help="comma-separated notebook name prefixes, e.g. 01,03")
    p.add_argument("--out", default="reports", help="output folder")
    p.add_argument("--timeout", type=int, default=900, help="seconds per cell")


def run(args) -> int:
    try:
        import nbclient  # noqa: F401
        import nbconvert  # noqa: F401
    except ImportError:
        raise UsageError("report needs nbclient and nbconvert: pip install 'moe-lab[notebooks]'") from None
    paths = sorted(glob.glob(os.path.join(args.notebooks, "*.ipynb")))
    if args.only:
        pre = tuple(s.strip() for s in args.only.split(","))
        paths = [p for p in paths if os.path.basename(p).startswith(pre)]
    if not paths:
        raise UsageError(f"no notebooks found in {args.notebooks!r}")
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
        figs = export(nb, name, args.out)
        print(f"ok   {name}: {len(figs)} figures, {time.time() - t0:.0f} s -> "
              f"{os.path.join(args.out, name + '.html')}")
    return 1 if failed else 0
