"""What a reviewer reads off a figure, as data: each legend's entries (label, colour, line
style, marker, marker fill, hatch) and the figure's own texts (the provenance footer is
one, moe_lab.plots.style.footer). `moe-lab report` sends this file's source into every
notebook's kernel, so each exported PNG has its description beside it
(figures/<notebook>_NN.json); `legend_clashes` and `series_problems` are the checks on one.

Imports only json, numpy and matplotlib: it runs in a kernel that may import another moe_lab.
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
        d.update(color=_colour(handle.get_color()), linestyle=_shown_style(handle),
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


def _shown_style(line) -> str:
    """The line style as the legend shows it: the on/off pattern of the handle's line on
    one side of its marker (a legend handle is a short line, the marker in its middle: a
    dashed line whose first gap the marker covers reads as solid). 'none' for no line."""
    ls = str(line.get_linestyle())
    if ls in ("None", "none", " ", ""):
        return "none"
    try:
        xs = [float(x) for x in line.get_xdata()]
        span = max(xs) - min(xs)
    except (TypeError, ValueError):
        return ls
    marker = str(line.get_marker())
    size = float(line.get_markersize() or 0) * (0 if marker in ("None", "none", "", " ", ",")
                                                  else 0.5 if marker == "." else 1.0)
    seen = (span - size) / 2 if size else span
    offset, seq = getattr(line, "_dash_pattern", (0, None))
    if not seq:
        return "solid"
    out, at, i, on = [], -float(offset or 0), 0, True
    while at < seen and i < 64:
        step = float(seq[i % len(seq)])
        lo, hi = max(at, 0.0), min(at + step, seen)
        if hi > lo:
            if out and out[-1][0] == on:
                out[-1] = (on, out[-1][1] + hi - lo)
            else:
                out.append((on, hi - lo))
        at, i, on = at + step, i + 1, not on
    if len(out) <= 1 and (not out or out[0][0]):
        return "solid"  # no gap shows: it reads as a solid line
    return ",".join(f"{'on' if o else 'off'}{round(w)}" for o, w in out)


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
    sup = getattr(fig, "_suptitle", None)
    return {"texts": texts, "legends": out, "suptitle": sup.get_text() if sup else None,
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
            "ylim": [float(v) for v in ax.get_ylim()],
            "series": _series(ax), "log_bars": _log_bars(ax), "band_overlaps": _bands(ax)}


SERIES = "_moe_lab_rows"  # on a drawn artist: {key: the values its rows hold} (style.series)


def _series(ax) -> list:
    """Each series that says what it draws (style.series): its label and, per key
    (config, glue, mode), the values of the rows under it."""
    arts = list(ax.lines) + list(ax.collections) + list(ax.patches) + list(ax.containers)
    return [{"label": str(a.get_label()), "keys": getattr(a, SERIES)}
            for a in arts if isinstance(getattr(a, SERIES, None), dict)]


def _log_bars(ax) -> int:
    """Bars whose length is read on a log axis (a bar's length from 0 means nothing
    there: the axis starts where it is cut)."""
    n = 0
    for c in ax.containers:
        if type(c).__name__ != "BarContainer" or not len(c.patches):
            continue
        value_scale = ax.get_xscale() if getattr(c, "orientation", "vertical") == \
            "horizontal" else ax.get_yscale()
        n += len(c.patches) if value_scale != "linear" else 0
    return n


def _bands(ax) -> int:
    """Pairs of translucent filled bands (fill_between) of different colours that overlap
    on the page: where they do, the blend is a colour no legend entry has."""
    import numpy as np
    from matplotlib.colors import to_rgba
    bands = []
    for c in ax.collections:
        if type(c).__name__ not in ("PolyCollection", "FillBetweenPolyCollection"):
            continue
        fc = c.get_facecolor()
        if not len(fc) or not 0 < float(fc[0][3]) < 1 or not len(c.get_paths()):
            continue
        v = c.get_paths()[0].vertices
        bands.append((tuple(np.round(to_rgba(fc[0])[:3], 3)), v))
    n = 0
    for i, (ca, va) in enumerate(bands):
        for cb, vb in bands[i + 1:]:
            if ca != cb and _overlap(va, vb):
                n += 1
    return n


def _overlap(va, vb) -> bool:
    """Two fill_between outlines (upper edge then lower edge) overlap somewhere: at an x
    both cover, one's range over the other's."""
    import numpy as np

    def edges(v):
        v = v[np.isfinite(v).all(axis=1)]
        half = len(v) // 2
        top, bot = v[1:half], v[half + 1:]  # fill_between: the start, the edge, back
        if not len(top) or not len(bot):
            return None
        xs = np.unique(v[:, 0])
        lo = np.interp(xs, *_sorted(bot))
        hi = np.interp(xs, *_sorted(top))
        return xs, np.minimum(lo, hi), np.maximum(lo, hi)
    a, b = edges(va), edges(vb)
    if a is None or b is None:
        return False
    xs = np.union1d(a[0], b[0])
    xs = xs[(xs >= max(a[0].min(), b[0].min())) & (xs <= min(a[0].max(), b[0].max()))]
    if not len(xs):
        return False
    alo, ahi = np.interp(xs, a[0], a[1]), np.interp(xs, a[0], a[2])
    blo, bhi = np.interp(xs, b[0], b[1]), np.interp(xs, b[0], b[2])
    return bool(((np.minimum(ahi, bhi) - np.maximum(alo, blo)) > 0).any())


def _sorted(v):
    import numpy as np
    order = np.argsort(v[:, 0])
    return v[order, 0], v[order, 1]


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


AGGREGATE_WORDS = ("best", "fastest", "median over", "mean over", "sum over", "aggregate")


def series_problems(description: dict) -> list[str]:
    """What the probe finds a reviewer would send back, beyond legend_clashes: a series
    drawn from rows of more than one configuration, glue or mode where neither its panel's
    title, the figure's title nor its label says it is an aggregate; bars on a log value
    axis; translucent bands of different colours that overlap."""
    out = []
    heads = (description.get("suptitle") or "").lower()
    for a in description.get("axes", []):
        where = a["title"][:40] or a["ylabel"][:40]
        for s in a.get("series", []):
            mixed = {k: v for k, v in s["keys"].items() if len(v) > 1}
            said = any(w in f"{a['title']} {heads} {s['label']}".lower() for w in AGGREGATE_WORDS)
            if mixed and not said:
                out.append(f"one series of several {', '.join(sorted(mixed))} "
                           f"({s['label'][:40]}: {mixed}) ({where})")
        if a.get("log_bars"):
            out.append(f"{a['log_bars']} bars on a log axis ({where})")
        if a.get("band_overlaps"):
            out.append(f"{a['band_overlaps']} pairs of translucent bands overlap ({where})")
    return out
