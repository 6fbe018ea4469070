"""What a reviewer reads off a figure, as data: each legend's entries (label, colour, line
style, marker, marker fill, hatch) and the figure's own texts (the provenance footer is
one, moe_lab.plots.style.footer). `moe-lab report` sends this file's source into every
notebook's kernel, so each exported PNG has its description beside it
(figures/<notebook>_NN.json); `legend_clashes` is the check on one.

Imports only json and matplotlib: it runs in a kernel that may import another moe_lab.
"""
import json  # noqa: F401  (the kernel's registration uses it)


def _colour(c):
    from matplotlib.colors import to_hex, to_rgba
    try:
        if isinstance(c, str) and c.lower() == "none" or to_rgba(c)[3] == 0:
            return "none"  # a hollow marker, no face
    except (ValueError, TypeError):
        pass
    try:
        return to_hex(c, keep_alpha=False)
    except (ValueError, TypeError):
        try:
            return to_hex(c[0], keep_alpha=False) if len(c) else "none"
        except (ValueError, TypeError, IndexError):
            return str(c)


def _entry(handle, label: str) -> dict:
    kind = type(handle).__name__
    if kind == "ErrorbarContainer" and len(handle) and handle[0] is not None:
        handle = handle[0]  # its data line: the marker and colour the entry shows
    elif kind == "BarContainer" and len(handle.patches):
        handle = handle.patches[0]
    d = {"label": label, "kind": kind}
    if hasattr(handle, "get_linestyle") and hasattr(handle, "get_marker"):  # a Line2D
        d.update(color=_colour(handle.get_color()), linestyle=str(handle.get_linestyle()),
                 marker=str(handle.get_marker()), fill=_colour(handle.get_markerfacecolor()),
                 edge=_colour(handle.get_markeredgecolor()))
    elif hasattr(handle, "get_facecolor"):  # a patch or a collection
        d.update(color=_colour(handle.get_facecolor()), edge=_colour(handle.get_edgecolor()),
                 hatch=str(handle.get_hatch() or ""))
        if hasattr(handle, "get_linestyle"):
            d["linestyle"] = str(handle.get_linestyle())
        paths = handle.get_paths() if hasattr(handle, "get_paths") else []
        if len(paths) and type(handle).__name__ == "PathCollection":  # a scatter's marker
            v = paths[0].vertices
            d["marker"] = f"{len(v)}:" + ",".join(f"{x:.2f}" for x in v.ravel()[:16])
    return d


def describe_figure(fig) -> dict:
    """{'texts': the figure's own texts (footer, suptitle), 'titles': the visible panels'
    titles, 'legends': [{'panel', 'entries': [...]}] for the figure's legends and each
    panel's}."""
    legends = [("figure", lg) for lg in fig.legends] + [
        (ax.get_title() or f"panel {i + 1}", ax.get_legend())
        for i, ax in enumerate(fig.axes) if ax.get_legend() is not None]
    out = []
    for where, leg in legends:
        hs = getattr(leg, "legend_handles", None) or getattr(leg, "legendHandles", [])
        out.append({"panel": where, "entries": [_entry(h, t.get_text())
                                                for h, t in zip(hs, leg.get_texts())]})
    texts = [t.get_text() for t in fig.texts]
    if getattr(fig, "_suptitle", None) is not None:
        texts.append(fig._suptitle.get_text())
    return {"texts": texts, "legends": out,
            "titles": [ax.get_title() for ax in fig.axes if ax.get_visible()],
            "provenance": getattr(fig, "_moe_lab_provenance", None),  # the footer's whole text
            "size_in": [float(x) for x in fig.get_size_inches()],
            "axes": [_axes(ax) for ax in fig.axes if ax.get_visible()]}


def _ymax(ax):
    """The largest y value drawn (lines' data, bars' tops), None when nothing is."""
    import math
    ys = [float(y) for ln in ax.lines for y in ln.get_ydata() if _num(y)]
    ys += [float(p.get_y() + p.get_height()) for c in ax.containers
           for p in getattr(c, "patches", []) if _num(p.get_height())]
    ys = [y for y in ys if math.isfinite(y)]
    return max(ys) if ys else None


def _num(v) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


def _axes(ax) -> dict:
    """What a reviewer checks on one panel: its labels, scales, whether anything is drawn
    on it, whether it is a twin (shares x with another panel, its own y), its bars
    (stacked: a bar starting above zero), and the smallest tick label font."""
    twins = [o for o in ax.get_shared_x_axes().get_siblings(ax) if o is not ax
             and o.bbox.bounds == ax.bbox.bounds]
    bars = [p for c in ax.containers for p in getattr(c, "patches", [])]
    fonts = [t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()
             if t.get_text()] + [ax.xaxis.label.get_fontsize(), ax.yaxis.label.get_fontsize()]
    drawn = len(ax.lines) + len(ax.collections) + len(ax.patches) + len(ax.images) + \
        len(ax.containers)
    return {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
            "axis_on": bool(ax.axison), "drawn": drawn, "twin": bool(twins),
            "texts": [t.get_text() for t in ax.texts],
            "ymax_data": _ymax(ax),
            "stacked_bars": sum(1 for p in bars if abs(p.get_y()) > 0 and p.get_height() > 0
                                and p.get_width() > 0),
            "min_font": min(fonts) if fonts else None,
            "ylim": [float(v) for v in ax.get_ylim()]}


def swatch(entry: dict) -> tuple:
    """What tells two legend entries apart on the page."""
    return tuple(entry.get(k) for k in ("kind", "color", "linestyle", "marker", "fill",
                                        "hatch", "edge"))


def legend_clashes(description: dict) -> list[list[str]]:
    """Labels of one legend that share their swatch (colour, line style, marker, fill,
    hatch): a reader cannot tell them apart."""
    out = []
    for leg in description["legends"]:
        seen: dict = {}
        for e in leg["entries"]:
            seen.setdefault(swatch(e), []).append(e["label"])
        out += [labels for labels in seen.values() if len(labels) > 1]
    return out
