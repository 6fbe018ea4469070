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


def template_dirs() -> list[str]:
    """nbconvert's own template folders where its jupyter path misses them. In a venv made
    with --system-site-packages nbconvert is the base interpreter's, and so are its
    templates (<base prefix>/share/jupyter/nbconvert/templates), but jupyter's path looks
    under the venv's prefix: without this, every export failed ("No template sub-directory
    with name 'lab'")."""
    import sys
    import sysconfig
    prefixes = [sys.base_prefix, sysconfig.get_config_var("userbase") or ""]
    try:
        import site
        prefixes.append(site.getuserbase())
    except Exception:  # noqa: BLE001 - site is optional in embedded interpreters
        pass
    out = []
    for pre in prefixes:
        d = os.path.join(pre, "share", "jupyter", "nbconvert", "templates")
        if pre and os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def export(nb, name: str, out: str) -> list[str]:
    from nbconvert import HTMLExporter
    os.makedirs(os.path.join(out, "figures"), exist_ok=True)
    dirs = template_dirs()  # `lab` under them, and `base/null.j2` that `lab` extends
    html, _ = HTMLExporter(extra_template_basedirs=dirs,
                           extra_template_paths=dirs).from_notebook_node(nb)
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
