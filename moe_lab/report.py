"""`moe-lab report`: execute every notebook headless into HTML and export its figures.

Notebooks are committed without outputs; this is how their figures are produced.
Output: <out>/<notebook>.html and <out>/figures/<notebook>_<n>.png.
"""
from __future__ import annotations

import base64
import glob
import os
import time

from .errors import UsageError


def configure(p):
    p.add_argument("--notebooks", default="notebooks", help="folder of .ipynb files")
    p.add_argument("--only", default=None, help="comma-separated notebook name prefixes, e.g. 01,03")
    p.add_argument("--out", default="reports", help="output folder")
    p.add_argument("--timeout", type=int, default=900, help="seconds per cell")


def execute_notebook(path: str, timeout: int = 900, edit=None):
    """Run a notebook headless from its own folder; `edit(nb)` may change it first (e.g.
    a parameter). Raises CellExecutionError on the first failing cell."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    if edit is not None:
        edit(nb)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}}).execute()
    return nb


def export(nb, name: str, out: str) -> list[str]:
    from nbconvert import HTMLExporter
    os.makedirs(os.path.join(out, "figures"), exist_ok=True)
    html, _ = HTMLExporter().from_notebook_node(nb)
    with open(os.path.join(out, f"{name}.html"), "w") as f:
        f.write(html)
    figs = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            png = o.get("data", {}).get("image/png")
            if png:
                p = os.path.join(out, "figures", f"{name}_{len(figs) + 1:02d}.png")
                with open(p, "wb") as f:
                    f.write(base64.b64decode(png))
                figs.append(p)
    return figs


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
            print(f"FAIL {name}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}")
            continue
        figs = export(nb, name, args.out)
        print(f"ok   {name}: {len(figs)} figures, {time.time() - t0:.0f} s -> "
              f"{os.path.join(args.out, name + '.html')}")
    return 1 if failed else 0
