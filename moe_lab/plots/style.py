"""How every figure looks, in one place: backend colours and labels (declared on the backend
classes), mode line styles, phase colours, one legend per figure, and the provenance
footer.

The footer names what the plotted rows are: device, dtype(s), model(s), run id and the
commits that measured THOSE rows (`Run.commits(rows)`), never the checkout's HEAD.
"""
from __future__ import annotations

import textwrap

import pandas as pd
from matplotlib.figure import Figure

from ..storage.modes import Mode, parse_mode, row_mode
from ..storage import rows as row_schema
from ..storage.store import Run
from ..analysis.runs import describe  # noqa: F401 (what a notebook prints first)

# Colours handed to backends that declare none, or that are not registered here (a run
# made elsewhere); the colours registered backends declare are skipped.
CYCLE = ("tab:cyan", "tab:olive", "tab:pink", "tab:brown", "tab:green", "tab:purple",
         "tab:blue", "tab:orange", "tab:red", "tab:gray", "#393b79", "#637939", "#8c6d31",
         "#843c39", "#7b4173", "#3182bd", "#e6550d")  # after tab10: tab20b/c's dark shades
PHASE_COLOR = {"route": "#8c564b", "align": "#9467bd", "gemm1": "#1f77b4", "act": "#2ca02c",
               "gemm2": "#ff7f0e", "combine": "#d62728", "quant": "#e377c2", "other": "#bbbbbb"}
# line style by mode kind; a wrapped (custom-op) compile mode is dotted
MODE_STYLE = {"eager": "--", "graph": "-", "compile": "-"}
WRAPPED_STYLE = ":"
SHARDING_STYLE = ("-", "--", ":", "-.")  # first sharding solid, the next dashed...
# the same colour for a mode in every figure that colours by mode (notebook 02)
MODE_ORDER = ("eager", "graph", "compile:off") + tuple(
    f"compile:{v}{d}" for v in ("default", "max-autotune-no-cudagraphs", "reduce-overhead")
    for d in ("", ":dynamic"))
MODE_MARKER = {"eager": "o", "graph": "s", "compile:off": "x", "compile:default": "o",
               "compile:default:dynamic": "s", "compile:max-autotune-no-cudagraphs": "^",
               "compile:max-autotune-no-cudagraphs:dynamic": "v",
               "compile:reduce-overhead": "D", "compile:reduce-overhead:dynamic": "P"}
FOOTER_FONTSIZE = 7

_EXTRA_COLORS: dict[str, str] = {}  # backends given a colour from CYCLE, in order asked


def _declared(name: str):
    """The backend class of `name`, None when it is not registered here."""
    from .. import backends
    try:
        return backends.backend_class(str(name))
    except Exception:  # UsageError for an unknown name
        return None


def backend_color(name: str) -> str:
    """The colour a backend's class declares; else the next free colour of CYCLE (the
    same one for that name in every later figure of this process)."""
    cls = _declared(name)
    if cls is not None and cls.color:
        return cls.color
    if name not in _EXTRA_COLORS:
        from .. import backends
        from matplotlib.colors import to_rgba  # 'tab:cyan' and '#17becf' are one colour
        declared = {to_rgba(backends.backend_class(n).color) for n in backends.names()
                    if backends.backend_class(n).color}
        free = [c for c in CYCLE if to_rgba(c) not in declared]
        unused = [c for c in free if c not in _EXTRA_COLORS.values()]
        _EXTRA_COLORS[name] = unused[0] if unused else free[len(_EXTRA_COLORS) % len(free)]
    return _EXTRA_COLORS[name]


def backend_label(name: str) -> str:
    """The label a backend's class declares, else its name."""
    cls = _declared(name)
    return (cls.label or cls.name) if cls is not None else str(name)


def config_label(config) -> str:
    """A point's configuration as a figure prints it: default and tuned as they are; a file
    (`--config PATH`) by what it is, `published` for the published tunings that
    device_tune.sh sweep times (a folder named published), else `file <name>` (at most 24
    characters): a path in a tick label or a legend ran over its neighbours."""
    c = "default" if config is None or config != config else str(config)  # None, NaN
    if "/" not in c and "\\" not in c and not c.endswith(".json"):
        return c
    from pathlib import PureWindowsPath
    p = PureWindowsPath(c)  # reads / and \ alike
    if p.parent.name == "published":
        return "published"
    return "file " + (p.stem if len(p.stem) <= 19 else p.stem[:18] + "…")


def mode_of(mode, wrapped=False) -> Mode:
    """A Mode from a Mode, a stored row (dict or Series) or a mode name; a name that is
    no mode moe-lab knows stays usable as an eager-like kind (never raises)."""
    if isinstance(mode, Mode):
        return mode
    if isinstance(mode, (dict, pd.Series)):
        return row_mode(mode)
    w = False if wrapped is None or wrapped is pd.NA or wrapped != wrapped else bool(wrapped)
    try:
        return parse_mode(str(mode), wrapped=w)
    except Exception:
        return Mode(str(mode))


def mode_style(mode, wrapped=False) -> str:
    """Line style: eager dashed, graph and compile solid, wrapped (custom op) dotted."""
    m = mode_of(mode, wrapped)
    return WRAPPED_STYLE if m.wrapped else MODE_STYLE.get(m.kind, "-.")


def mode_note(modes, extra: dict | None = None) -> str:
    """What the line styles mean, for the modes drawn only ('dashed eager, solid graph';
    '' for none): a footer never names a style no line has. `extra` words a mode's kind."""
    names = {"--": "dashed", "-": "solid", ":": "dotted", "-.": "dash-dot"}
    seen: dict[str, list[str]] = {}
    for m in dict.fromkeys(mode_of(x) for x in modes):
        what = (extra or {}).get(m.kind, m.kind if m.kind in ("eager", "graph") else
                                 f"compile {m.label}")
        kept = seen.setdefault(names.get(mode_style(m), "dash-dot"), [])
        if what not in kept:
            kept.append(what)
    return ", ".join(f"{k} {', '.join(v)}" for k, v in seen.items())


def mode_color(mode) -> str:
    """One colour per mode name (wrapped or not), the same in every figure."""
    name = mode_of(mode).name
    return f"C{MODE_ORDER.index(name) % 10}" if name in MODE_ORDER else "0.3"


def mode_label(mode, wrapped=False) -> str:
    """`graph`, `default`, `reduce-overhead:dynamic [op]`..."""
    return mode_of(mode, wrapped).label


def mode_labels_in_order(suffix: str = "") -> list[str]:
    """Every mode label in MODE_ORDER, each plain then wrapped ([op]), with `suffix` on
    the eager and graph ones: the order of a legend of modes."""
    out = []
    for name in MODE_ORDER:
        m = mode_of(name)
        if m.kind != "compile":
            out.append(m.label + suffix)
        else:
            out += [m.label, m.with_wrapped(True).label]
    return out


def sharding_style(i: int) -> str:
    return SHARDING_STYLE[i % len(SHARDING_STYLE)]


# --- figures ---------------------------------------------------------------------------

def new_figure(nrows: int = 1, ncols: int = 1, figsize=(8, 5), **subplots_kw):
    """(Figure, axes) outside pyplot (no global state; a notebook shows the returned
    figure once), constrained layout so that one legend can sit outside the panels."""
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots(nrows, ncols, **subplots_kw)


def panel_grid(models: list, shards: list, panel_w: float = 4.2, panel_h: float = 2.9,
               extra_w: float = 2.2, extra_h: float = 0.9):
    """(Figure, [(ax, model, shard)]) with a row per model and a column per sharding; with
    one sharding the models wrap into two columns, so the figure stays readable at the
    width a pull request shows (~900 px). Unused panels are hidden."""
    if len(shards) == 1 and len(models) > 1:
        ncols = 2
        cells = [(m, shards[0]) for m in models]
    else:
        ncols = len(shards)
        cells = [(m, s) for m in models for s in shards]
    nrows = -(-len(cells) // ncols)
    fig, axes = new_figure(nrows, ncols, squeeze=False,
                           figsize=(panel_w * ncols + extra_w, panel_h * nrows + extra_h))
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(cells):]:
        ax.set_visible(False)
    return fig, [(ax, m, s) for ax, (m, s) in zip(flat, cells)]


def wrapped_panels(n: int, ncols: int = 3, panel_w: float = 3.7, panel_h: float = 2.9,
                   extra_w: float = 2.5, extra_h: float = 0.85, **subplots_kw):
    """(Figure, axes grid, the first n panels in order) for n panels wrapped into at most
    `ncols` columns (the width a pull request shows); unused panels hidden."""
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    fig, axes = new_figure(nrows, ncols, squeeze=False,
                           figsize=(panel_w * ncols + extra_w, panel_h * nrows + extra_h),
                           **subplots_kw)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, axes, flat[:n]


def shared_legend(fig: Figure, handles=None, labels=None, title: str | None = None,
                  loc: str = "outside right upper", fontsize: float = 7, order=None):
    """ONE legend for the whole figure: the distinct labels of every panel (first handle
    of each), or the handles given; legends drawn on panels are removed. `order`: labels
    to put first, in that order. None when there is nothing to label."""
    for ax in fig.axes:
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if handles is None:
        seen: dict = {}
        for ax in fig.axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab and not lab.startswith("_") and lab not in seen:
                    seen[lab] = h
        if order is not None:
            rank = {lab: i for i, lab in enumerate(order)}
            seen = dict(sorted(seen.items(), key=lambda kv: rank.get(kv[0], len(rank))))
        handles, labels = list(seen.values()), list(seen)
    elif labels is None:
        labels = [h.get_label() for h in handles]
    for leg in list(fig.legends):
        leg.remove()
    if not handles:
        return None
    ncol = 1 if len(handles) <= 18 or "right" not in loc else 2
    if "lower" in loc or "upper center" in loc:
        ncol = min(len(handles), 6)
    # handles long enough that a dashed line shows a gap on each side of its marker (at
    # matplotlib's 2 font sizes, a marker covered the one gap: dashed read as solid)
    return fig.legend(handles, labels, loc=loc, fontsize=fontsize, ncol=ncol, title=title,
                      title_fontsize=fontsize, frameon=False, handlelength=3.5)


def panel_note(ax, text: str, fontsize: float = 6.5):
    """A panel's note (what a panel leaves out, and why) under its x label, wrapped to the
    panel's width: inside the panel it lay over the data, and a long one ran across the
    next panels (constrained layout then widened the panel's column around it)."""
    fig = ax.get_figure()
    # the panel's width before the layout, less what the layout takes for labels
    width_in = ax.get_position().width * fig.get_figwidth() * 0.8
    chars = max(int(width_in * 72 / (fontsize * 0.6)), 20)
    wrapped = textwrap.fill(text, width=chars, break_long_words=False, break_on_hyphens=False)
    return ax.annotate(wrapped, xy=(0, 0), xycoords=(ax.transAxes, ax.xaxis.label), xytext=(0, -2),
                       textcoords="offset points", ha="left", va="top", fontsize=fontsize,
                       color="0.3", annotation_clip=False)


SERIES_KEYS = ("config", "glue", "mode", "wrapped")  # what one series holds one value of


def series(drawn, rows: pd.DataFrame | None):
    """Mark what a drawn series (an artist, or the list ax.plot returns) draws: per key of
    SERIES_KEYS the values of its rows. The figure probe reports them and the figure
    check fails a series of more than one configuration, glue or mode (an aggregate its
    title does not name). Returns `drawn`."""
    keys = {}
    for k in SERIES_KEYS:
        if rows is not None and k in rows:
            dflt = row_schema.ID_DEFAULTS.get(k, "")
            keys[k] = sorted({str(dflt if pd.isna(v) else v) for v in rows[k]})
    for a in drawn if isinstance(drawn, list) else [drawn]:
        a._moe_lab_rows = keys  # probe.SERIES
    return drawn


ok_rows = row_schema.ok_rows  # every figure and table selects its rows with this one rule


def _values(rows: pd.DataFrame | None, col: str) -> list[str]:
    if rows is None or col not in rows or not len(rows):
        return []
    return sorted({str(v) for v in rows[col].dropna()})


def footer_text(run: Run | None, rows: pd.DataFrame | None = None, extra: str = "",
                device: str | None = None) -> str:
    """'device D | dtype d | model m1, m2 | run R | commit c1, c2' for the rows plotted
    (default: every row of the run). device overrides the rows' device; run None: a
    figure of predictions (no run, no commit)."""
    if rows is None and run is not None:
        rows = run.results
    devices = [device] if device else _values(rows, "device") or (
        [run.device] if run is not None else [])
    parts = [f"device {', '.join(devices) or '?'}"]
    for name, col in (("dtype", "dtype"), ("model", "model")):
        vals = _values(rows, col)
        if vals:
            parts.append(f"{name} {', '.join(vals)}")
    if run is None:
        parts.append("no run (predicted)")
    else:
        commits = run.commits(rows) if len(rows) else []
        # rows of several runs (a run_id column): name each one, the run given first
        others = [r for r in _values(rows, "run_id") if r != run.run_id]
        parts.append(f"run {run.run_id}" if not others else
                     f"runs {', '.join([run.run_id] + others)}")
        parts.append(("commit " if len(commits) == 1 else "commits ")
                     + (", ".join(commits) or ("unknown" if len(rows) else "none (no row drawn)")))
    if extra:
        parts.append(extra)
    return " | ".join(parts)


FOOTER_LINES = 3  # at most: the rest of the provenance is in the figure's probe (PROVENANCE)
PROVENANCE = "_moe_lab_provenance"  # the figure attribute holding the footer's whole text


def _summarised(text: str, width: int) -> str:
    """`text` within FOOTER_LINES lines of `width`: comma lists of runs and commits past
    three counted ('runs A, B, C and 24 more'), then the tail cut ('...')."""
    import re
    wrap = lambda t: textwrap.fill(t, width=width, break_long_words=False, break_on_hyphens=False)
    if wrap(text).count("\n") < FOOTER_LINES:
        return wrap(text)

    def short(m):
        head, body = m.group(1), m.group(2)
        items = [x.strip() for x in body.split(",") if x.strip()]
        if len(items) <= 2:
            return m.group(0)
        tail = " " if body.endswith(" ") else ""
        return f"{head}{items[0]} and {len(items) - 1} more (all in the probe){tail}"
    text = re.sub(r"((?:runs|commits|rows from) )([^|;]+)", short, text)
    out = wrap(text).split("\n")
    if len(out) > FOOTER_LINES:
        out = out[:FOOTER_LINES]
        out[-1] = out[-1][: max(width - 30, 10)] + " ... (whole text in the probe)"
    return "\n".join(out)


def footer(fig: Figure, run: Run | None, rows: pd.DataFrame | None = None, extra: str = "",
           device: str | None = None) -> str:
    """Write the provenance footer (footer_text) as the figure's last text, wrapped to its
    width and bounded to FOOTER_LINES lines (long lists of runs and commits counted; the
    whole text kept on the figure, PROVENANCE, which the probe reports), and keep room for
    it below the panels. Returns the whole text."""
    text = footer_text(run, rows, extra, device)
    width = max(int(fig.get_figwidth() * 72 / (FOOTER_FONTSIZE * 0.62)), 40)
    wrapped = _summarised(text, width)
    setattr(fig, PROVENANCE, text)
    nlines = wrapped.count("\n") + 1
    room = (nlines * FOOTER_FONTSIZE * 1.25 + 4) / (fig.get_figheight() * 72)
    engine = fig.get_layout_engine()
    if engine is not None and hasattr(engine, "set") and "rect" in engine.get():
        engine.set(rect=(0, room, 1, 1 - room))  # left, bottom, width, height
    fig.text(0.005, 0.003, wrapped, fontsize=FOOTER_FONTSIZE, color="0.35", ha="left",
             va="bottom")
    return text


def finish(fig: Figure, run: Run | None, rows: pd.DataFrame | None, extra: str = "",
           legend: bool = True, legend_title: str | None = None, device: str | None = None,
           legend_loc: str = "outside right upper", legend_order=None) -> Figure:
    """One shared legend (when asked) and the footer: how every figure ends."""
    if legend:
        shared_legend(fig, title=legend_title, loc=legend_loc, order=legend_order)
    footer(fig, run, rows, extra, device)
    return fig


class NoteFigure(Figure):
    """A figure that only says why there is nothing to draw. A notebook shows its line, not
    an image (no empty canvas is exported); as a Figure it still draws where it is saved."""
    note = ""

    def _ipython_display_(self):
        print(f"no figure: {self.note} ({getattr(self, PROVENANCE, '') or 'no rows'})")


def note_figure(text: str, run: Run | None = None, rows: pd.DataFrame | None = None,
                extra: str = "") -> Figure:
    """A figure that only says why there is nothing to draw (with its footer); in a
    notebook, one printed line instead (NoteFigure)."""
    fig = NoteFigure(figsize=(8, 1.6), layout="constrained")
    fig.note = text
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return finish(fig, run, rows, extra, legend=False)
