"""`moe-lab report`: execute every notebook headless into HTML and export its figures.

Notebooks are committed without outputs; this is how their figures are produced.
Output: <out>/<notebook>.html and <out>/figures/<notebook>_<n>.png.
"""
from __future__ import annotations

import base64
import contextlib
import os
import re

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


CELL_TIMEOUT_S = 900  # seconds a notebook cell may run (report --timeout, execute_notebook)
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


def _papermill():
    """papermill (the notebook extra): its parameter handling is what `-p` goes through."""
    try:
        import papermill  # noqa: F401
        from papermill.parameterize import parameterize_notebook  # noqa: F401
    except ImportError:
        from .core.errors import UsageError
        raise UsageError("report's parameters need papermill: pip install 'moe-lab[notebooks]'") \
            from None
    return papermill


def inject_parameters(nb, params: dict) -> None:
    """Papermill's injection (papermill.parameterize): a code cell tagged
    `injected-parameters` assigning `params` right after the cell tagged `parameters` (at
    the top where there is none), replacing one injected before. In place."""
    if not params:
        return
    _papermill()
    import nbformat
    from papermill.parameterize import parameterize_notebook
    if "papermill" not in nb.metadata:  # what papermill's own loader (iorw) adds
        nb.metadata["papermill"] = nbformat.from_dict({})
    for cell in nb.cells:
        cell.metadata.setdefault("tags", [])
    new = parameterize_notebook(nb, dict(params), kernel_name="python3", language="python")
    nb.cells, nb.metadata = new.cells, new.metadata


def parse_value(text: str):
    """A `-p NAME VALUE` value the way papermill's command line reads it (None, True,
    False, an int, a float, else the string)."""
    _papermill()
    from papermill.cli import _resolve_type
    return _resolve_type(text)


def notebook_parameters(path: str) -> dict:
    """NAME -> its default's source text, as papermill infers them from the cell tagged
    `parameters` (papermill.inspect_notebook). CorruptFile: not a notebook that reads."""
    _papermill()
    from papermill import inspect_notebook

    from .core.errors import CorruptFile
    try:
        with _quiet_nbformat():  # a cell without an id: a warning, not a refusal's 2nd line
            return {k: v.get("default") for k, v in inspect_notebook(str(path)).items()}
    except Exception as exc:  # nbformat's and json's errors for a truncated or foreign file
        raise CorruptFile(path, exc) from None


@contextlib.contextmanager
def _quiet_nbformat():
    """nbformat's validation warnings (MissingIDFieldWarning: a cell saved without an id,
    as notebook 05's were) silenced: they printed two lines to stderr on every `report`,
    its one-line refusals included."""
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Cell is missing an id field")
        yield


def check_parameter(name: str, value, declared: dict[str, dict]):
    """The value to inject; UsageError unless some notebook declares `name` (declared:
    notebook -> its parameters) and `value` is of its default's kind there: a number for a
    number, True or False for a flag, a comma-separated list of whole numbers for a list of
    them (03's `tokens`: `-p tokens 1,64` is [1, 64]), a name or None where the default is
    None (each such parameter takes run ids, a dtype, a device, a path or a status); never a
    non-finite number (papermill would write float('inf'))."""
    import ast
    import math

    from .core.errors import UsageError
    takes = {nb: ps[name] for nb, ps in declared.items() if name in ps}
    if not takes:
        known = sorted({n for ps in declared.values() for n in ps})
        raise UsageError(f"-p {name!r}: no notebook run here takes it (they take: "
                         f"{', '.join(known) or 'nothing'})")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"-p {name} {value}: not a finite number; give a number, a word, "
                         "True, False or None")
    for nb, default in takes.items():
        try:
            default = ast.literal_eval(default)
        except (ValueError, SyntaxError, TypeError):
            continue
        if isinstance(default, list) and all(type(x) is int for x in default):
            value = _int_list(value, nb, name, default)
            continue
        if default is None and not (value is None or isinstance(value, str)):
            # was: handed on, then `dtype = 5` showed '0 points' as if the run had none and
            # `ledger_runs = 7` failed in the notebook ('int' object is not iterable)
            raise UsageError(f"-p {name} {value!r}: {nb} takes a name (run ids, a dtype, a "
                             "device, a path, a status) or None, its default; not "
                             + ("True or False" if isinstance(value, bool) else "a number"))
        flag = isinstance(default, bool)
        number = isinstance(default, (int, float)) and not flag
        if (flag and not isinstance(value, bool)) or (
                number and not (isinstance(value, (int, float)) and not isinstance(value, bool))):
            raise UsageError(f"-p {name} {value!r}: {nb} takes {'True or False' if flag else 'a number'} "
                             f"(its default is {default!r})")
    return value


def _int_list(value, nb: str, name: str, default: list) -> list[int]:
    """`-p NAME 1,64` (papermill reads a str) or `-p NAME 64` (an int) as [1, 64] or [64]."""
    import re

    from .core.errors import UsageError
    if isinstance(value, list):
        return value
    text = str(value) if type(value) is int else value
    if not isinstance(text, str) or not re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", text):
        raise UsageError(f"-p {name} {value!r}: {nb} takes a comma-separated list of whole "
                         f"numbers, e.g. 1,64,1024 (its default is {default!r})")
    return [int(x) for x in text.split(",")]


def execute_notebook(path: str, timeout: int = CELL_TIMEOUT_S, edit=None, params: dict | None = None,
                     describe_figures: bool = True):
    """Run a notebook headless from its own folder; `params` are injected as papermill
    does (inject_parameters), and `edit(nb)` may change it further first. Every figure
    displayed carries its description (FIGURE_MIME; figure_descriptions reads them).
    Raises CellExecutionError on the first failing cell; the notebook executed so far is
    the exception's `.nb`."""
    import nbformat
    from nbclient import NotebookClient
    with _quiet_nbformat():
        nb = nbformat.read(path, as_version=4)
    inject_parameters(nb, params or {})
    if edit is not None:
        edit(nb)
    probe = nbformat.v4.new_code_cell(figure_probe(), metadata={"tags": ["moe-lab-probe"]})
    if describe_figures:
        nb.cells.insert(0, probe)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", config=kernel_config(),
                       resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}}
                       ).execute()
    except Exception as exc:
        exc.nb = _without(nb, probe)
        raise
    return _without(nb, probe)


def kernel_config():
    """The kernel's sockets encrypted with CurveZMQ keys the kernel manager provisions
    where jupyter_client, pyzmq and the kernelspec support it: ipykernel >= 7 otherwise
    prints "Kernel is running over TCP without encryption" on every notebook run."""
    from traitlets.config import Config
    config = Config()
    try:
        import zmq
        from jupyter_client.manager import KernelManager
    except ImportError:
        return config
    if "transport_encryption" in KernelManager.class_trait_names() and zmq.has("curve"):
        config.KernelManager.transport_encryption = "auto"  # plain TCP where unsupported
    return config


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


def write_whole(files: list[tuple[str, bytes]]) -> None:
    """Write each (path, bytes) whole (atomic: temporary file, then rename); when one
    fails (a full disk), the ones this call wrote are removed: all the files or none. A
    path in a run folder is refused first (its verb checked --out; this is the last guard)."""
    from .core.atomic import _atomic_write_bytes
    from .core.validate import not_in_run
    for path, _ in files:
        not_in_run(path, "", head=str(path))
    done, made = [], []
    for path, _ in files:  # the folders this call makes: removed again on a failure
        d = os.path.dirname(os.path.abspath(path))
        while d and not os.path.exists(d) and d not in made:
            made.append(d)
            d = os.path.dirname(d)
    try:
        for path, data in files:
            def w(tmp, data=data):
                with open(tmp, "wb") as f:
                    f.write(data)
            _atomic_write_bytes(path, w)
            done.append(path)
    except BaseException:
        for path in done:
            try:
                os.remove(path)
            except OSError:
                pass
        for d in sorted(made, key=len, reverse=True):  # deepest first, only when empty
            try:
                os.rmdir(d)
            except OSError:
                pass
        raise


def export(nb, name: str, out: str, seen: dict | None = None) -> list[str]:
    """OUT/<name>.html and OUT/figures/<name>_NN.png (with its .json description): made in
    memory, then written whole, the page last; a failed write leaves none of them. `seen`
    (PNG bytes -> the path exported, shared by one report's notebooks): a figure already
    exported under another name is not written again (two notebooks drawing one figure,
    the FP8 against bf16 of 01 and 03, gave two names to one PNG); its NN is left unused."""
    from nbconvert import HTMLExporter
    dirs = template_dirs()  # `lab` under them, and `base/null.j2` that `lab` extends
    html, _ = HTMLExporter(extra_template_basedirs=dirs,
                           extra_template_paths=dirs).from_notebook_node(nb)
    files, figs = [], []
    seen, new = ({} if seen is None else seen), {}
    for n, o in enumerate(figure_outputs(nb), 1):
        p = os.path.join(out, "figures", f"{name}_{n:02d}.png")
        png = base64.b64decode(o["data"]["image/png"])
        if png in seen or png in new:
            continue
        new[png] = p
        files.append((p, png))
        if FIGURE_MIME in o["data"]:  # legends and texts beside it, for a check or a diff
            files.append((p[:-4] + ".json", o["data"][FIGURE_MIME].encode()))
        figs.append(p)
    files.append((os.path.join(out, f"{name}.html"), html.encode()))
    write_whole(files)
    seen.update(new)  # written: a later notebook's copy is not
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
    path = os.path.join(out, "index.html")
    write_whole([(path, ("\n".join(parts) + "\n").encode())])
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
