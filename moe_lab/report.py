"""`moe-lab report`: execute every notebook headless into HTML and export its figures.

Notebooks are committed without outputs; this is how their figures are produced.
Output: <out>/<notebook>.html and <out>/figures/<notebook>_<n>.png.
"""
from __future__ import annotations

import base64
import os
import re

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


FIGURE_MIME = "text/x-moe-lab-figure"  # a figure's legend entries and texts, as JSON
# Run first in the kernel (then dropped from the notebook): every matplotlib figure the
# notebook displays carries, beside its PNG, what a reviewer reads off it (moe_lab.plots.probe:
# each legend's entries, the figure's own texts). The probe's source is sent, not imported:
# the kernel may find another moe_lab than this one.
def figure_probe() -> str:
    from pathlib import Path
    src = (Path(__file__).parent / "plots" / "probe.py").read_text()
    return src + f"""

def _moe_lab_register():
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from matplotlib.figure import Figure
    from traitlets import ObjectName, Unicode

    class Probe(BaseFormatter):
        format_type = Unicode({FIGURE_MIME!r})
        print_method = ObjectName("_repr_moe_lab_figure_")

    ip = get_ipython()
    f = Probe(parent=ip.display_formatter)
    ip.display_formatter.formatters[f.format_type] = f
    if f.format_type not in ip.display_formatter.active_types:
        ip.display_formatter.active_types.append(f.format_type)
    # a method, not for_type: `%matplotlib inline` clears every formatter's Figure entry
    Figure._repr_moe_lab_figure_ = lambda fig: json.dumps(describe_figure(fig))


_moe_lab_register()
"""


def parameter_cell_index(nb) -> int | None:
    """The index of the cell tagged `parameters` (papermill's convention), None if none."""
    return next((i for i, c in enumerate(nb.cells)
                 if "parameters" in c.get("metadata", {}).get("tags", [])), None)


def inject_parameters(nb, params: dict) -> None:
    """Papermill's injection, without papermill: a code cell tagged `injected-parameters`
    assigning `params` (Python literals) right after the cell tagged `parameters` (at the
    top where there is none), replacing one injected before."""
    import nbformat
    if not params:
        return
    nb.cells = [c for c in nb.cells
                if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    src = "# Parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items()) + "\n"
    cell = nbformat.v4.new_code_cell(src, metadata={"tags": ["injected-parameters"]})
    i = parameter_cell_index(nb)
    nb.cells.insert(0 if i is None else i + 1, cell)


def parse_value(text: str):
    """A `-p NAME VALUE` value the way papermill's command line reads it: None, True,
    False, an int, a float, else the string."""
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def execute_notebook(path: str, timeout: int = 900, edit=None, params: dict | None = None,
                     describe_figures: bool = True):
    """Run a notebook headless from its own folder; `params` are injected as papermill
    does (inject_parameters), and `edit(nb)` may change it further first. Every figure
    displayed carries its description (FIGURE_MIME; figure_descriptions reads them).
    Raises CellExecutionError on the first failing cell; the notebook executed so far is
    the exception's `.nb`."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    inject_parameters(nb, params or {})
    if edit is not None:
        edit(nb)
    probe = nbformat.v4.new_code_cell(figure_probe(), metadata={"tags": ["moe-lab-probe"]})
    if describe_figures:
        nb.cells.insert(0, probe)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={
            "metadata": {"path": os.path.dirname(os.path.abspath(path))}}).execute()
    except Exception as exc:
        exc.nb = _without(nb, probe)
        raise
    return _without(nb, probe)


def _without(nb, probe):
    nb.cells = [c for c in nb.cells if c is not probe]
    return nb


def figure_outputs(nb) -> list[dict]:
    """The outputs of `nb` that hold a PNG, in order (the figures export writes)."""
    return [o for c in nb.cells for o in c.get("outputs", [])
            if o.get("data", {}).get("image/png")]


def figure_descriptions(nb) -> list[dict | None]:
    """Per figure (figure_outputs' order): its legends and texts (figure_probe), None for
    an image that is no matplotlib figure."""
    import json
    return [json.loads(o["data"][FIGURE_MIME]) if FIGURE_MIME in o.get("data", {}) else None
            for o in figure_outputs(nb)]


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
    for o in figure_outputs(nb):
        p = os.path.join(out, "figures", f"{name}_{len(figs) + 1:02d}.png")
        with open(p, "wb") as f:
            f.write(base64.b64decode(o["data"]["image/png"]))
        if FIGURE_MIME in o["data"]:  # legends and texts beside it, for a check or a diff
            with open(p[:-4] + ".json", "w") as f:
                f.write(o["data"][FIGURE_MIME])
        figs.append(p)
    return figs


def write_index(out: str, entries: list[tuple[str, str, list[str]]], title: str) -> str:
    """OUT/index.html: per notebook (name, outcome line, figure paths) a link to its page
    and its figures inline. Returns the path."""
    import html
    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<h1>{html.escape(title)}</h1>"]
    for name, line, figs in entries:
        page = f"{name}.html"
        link = (f"<a href='{page}'>{html.escape(name)}</a>"
                if os.path.exists(os.path.join(out, page)) else html.escape(name))
        parts.append(f"<h2>{link}</h2><p>{html.escape(line)}</p>")
        parts += [f"<p><img src='{os.path.relpath(f, out)}' style='max-width:100%'></p>"
                  for f in figs]
    os.makedirs(out, exist_ok=True)  # every notebook may have failed before exporting
    path = os.path.join(out, "index.html")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")
    return path


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
