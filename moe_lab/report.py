"""`moe-lab report`: execute every notebook headless into HTML and export its figures.

Notebooks are committed without outputs; this is how their figures are produced.
Output: <out>/<notebook>.html and <out>/figures/<notebook>_<n>.png.
"""
from __future__ import annotations

import base64
import os
import re

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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


def failure_line(path: str, exc: BaseException) -> str:
    """`<notebook>: <ExceptionName: message>` without terminal colour codes: the error a
    failing cell raised (nbclient puts it last in its message), else the exception."""
    text = ANSI.sub("", str(exc))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    ename = getattr(exc, "ename", None)
    evalue = getattr(exc, "evalue", None)
    if ename:
        what = f"{ename}: {ANSI.sub('', str(evalue or ''))}".strip()
    else:
        what = lines[-1] if lines else type(exc).__name__
    return f"{path}: {what[:300]}"
