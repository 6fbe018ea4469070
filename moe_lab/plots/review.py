"""The review export of `moe-lab report --runs ... --out DIR`: one self-contained HTML page
(every figure embedded as a PNG data URI, with the device, dtype, commits and commands of
the rows it draws written underneath) plus a PNG and an SVG per figure in DIR/figures/.

    sections = build([open_run("a"), open_run("b")])          # figures and tables
    write(sections, "reports/review", argv)                    # -> reports/review/index.html

What a review gets, from what the runs hold: time per call against tokens per run; where
an eager call's time goes when a run has sweep traces; the compare of two runs (or of one
split by a column, `by`/`values`) with bootstrap intervals and verdicts; the same shapes
on several devices side by side when the runs come from more than one device.
"""
from __future__ import annotations

import base64
import html
import io
import os
import re
import time
from dataclasses import dataclass, field

import pandas as pd

from ..core.errors import UsageError
from ..core.problems import sharding_name
from ..storage.store import Run

PNG_DPI = 150       # files and embedded images (2x for sharp text at the displayed width)
PAGE_PX = 900       # the width a pull request shows; wider figures are scaled down to it


@dataclass
class Section:
    title: str
    text: str = ""
    fig: object | None = None                # a matplotlib Figure
    drawn: list = field(default_factory=list)  # (Run, rows drawn) for the provenance
    table: pd.DataFrame | None = None
    details: pd.DataFrame | None = None      # long table, folded
    notes: list = field(default_factory=list)  # one line per point that needs a word
    slug: str = ""


def commands_of(run: Run) -> list[str]:
    """The commands that wrote a run: its invocations', else its own, else those of the
    runs it was merged from."""
    m = run.manifest
    cmds = [i.get("command") for i in m.get("invocations") or [] if i.get("command")]
    if not cmds and m.get("command"):
        cmds = [m["command"]]
    if not cmds:
        for src in (m.get("merged_from") or {}).values():
            if isinstance(src, dict) and src.get("command"):
                cmds.append(src["command"])
    return list(dict.fromkeys(cmds))


def provenance(run: Run, rows: pd.DataFrame | None) -> dict:
    rows = run.results if rows is None else rows
    def vals(col):
        return sorted({str(v) for v in rows[col].dropna()}) if col in rows and len(rows) else []
    return dict(run=run.run_id, device=", ".join(vals("device")) or run.device,
                dtype=", ".join(vals("dtype")) or "?", commits=", ".join(run.commits(rows))
                or "unknown", commands=commands_of(run), rows=len(rows))


def _title(fig, text: str) -> None:
    """The figure's title, kept off its legend: where the centred title would run into a
    legend at the top, it starts at the left and wraps to the width left of the legend."""
    if getattr(fig, "_suptitle", None) is not None:
        return
    import textwrap

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    title = fig.suptitle(text, fontsize=11)
    for _ in range(3):
        FigureCanvasAgg(fig).draw()
        r = fig.canvas.get_renderer()
        box = title.get_window_extent(r)
        hit = [lg.get_window_extent(r) for lg in fig.legends
               if lg.get_window_extent(r).overlaps(box)]
        if not hit:
            return
        room = max(min(b.x0 for b in hit) - 0.02 * fig.bbox.width, 80)
        chars = max(int(room / (11 * fig.dpi / 72 * 0.6)), 20)
        title = fig.suptitle(textwrap.fill(text, chars), fontsize=11, x=0.01, ha="left")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def _time_section(run: Run) -> Section:
    import dataclasses

    from . import kernel_time, style
    res = run.results
    sharded = res[res["tp"].notna() & res["ep"].notna()] if len(res) else res
    run_ = dataclasses.replace(run, results=sharded)
    fig = kernel_time.fig_time_vs_tokens(run_)
    _title(fig, f"Time per MoE call, {run.device}")
    ok = kernel_time.ok_times(sharded)
    left = len(res) - len(sharded)
    return Section(f"Time per call: {run.run_id}", fig=fig, drawn=[(run, ok)],
                   text=f"{len(ok)} ok points of {len(res)}; median per call, bars "
                        "p10-p90; " + style.mode_note(
                            ok["mode"], {"eager": "eager (host included)",
                                         "graph": "graph replay"}) + "."
                        + (f" {left} rows of shapes without a TP/EP sharding (custom) are not "
                           "drawn." if left else ""))


def _guarded(title: str, make, *args) -> Section | None:
    """A section, or one saying why it could not be drawn (the rest of the review goes on)."""
    try:
        return make(*args)
    except UsageError as exc:
        return Section(title, text=f"not drawn: {exc}")
    except Exception as exc:  # a figure that fails is a line in the review, not a crash
        why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return Section(title, text=f"not drawn: {type(exc).__name__}: {why}")


def _split_section(run: Run) -> Section | None:
    from . import eager_split
    t = eager_split.table(run)
    if t.empty:
        return None
    fig = eager_split.fig_eager_split(run, t)
    names = [f"{m} {sharding_name(tp, ep)} T={n} {b}" for m, tp, ep, n, b in
             zip(t["model"], t["tp"], t["ep"], t["tokens"], t["backend"])]
    shown = pd.DataFrame({
        "point": names, "host us": t["host_us"].round(0), "gaps us": t["gap_us"].round(0),
        "kernels us": t["kernel_us"].round(0), "sum us": t["wall_us"].round(0),
        "timed eager us": t["eager_us"].round(0), "timed graph us": t["graph_us"].round(0),
        "sum / eager": t["sum_over_eager"].round(2)})
    notes = [f"{n}: {r}" for n, ok, r in zip(names, t["adds_up"], t["reason"]) if not ok]
    rows = run.results[(run.results["mode"] == "eager")
                       & run.results["backend"].isin(t["backend"])
                       & run.results["model"].isin(t["model"])
                       & run.results["tokens"].isin(t["tokens"])]
    return Section(f"Where eager time goes: {run.run_id}", fig=fig, drawn=[(run, rows)],
                   table=shown, notes=notes, text=(
                       f"{len(t)} profiled eager calls (the run's sweep traces), each cut into "
                       "Python and dispatch on the host, launch gaps (device idle between the "
                       "call's kernels) and kernel time; the parts add up to the call's window, "
                       f"which is within {eager_split.CHECK_TOL:.0%} of the timed eager median at {int(t['adds_up'].sum())}"
                       f" of {len(t)} points; the others say why."))


def _compare_section(a: Run, b: Run, by=None, values=None, mode=None) -> Section:
    from ..analysis.compare import CONFIDENCE, bands_line, compare, summary
    from .compare import fig_ratio
    t = compare(a, b, by, values)
    if mode:
        t = t[t["mode"] == mode]
    fig = fig_ratio(t, a, b, by, values)
    what = (f"{by} {values[1]} over {values[0]} in {a.run_id}" if by else
            f"{b.run_id} over {a.run_id}")
    _title(fig, f"B / A (median time), {a.device}")
    by_cols = [c for c in ("backend", "mode", "verdict") if c in t]
    counts = (t.groupby(by_cols).size().rename("points").reset_index() if len(t)
              else pd.DataFrame())
    cols = [c for c in ("model", "tp", "ep", "backend", "mode", "tokens", "a_us", "b_us",
                        "ratio", "low", "high", "band_low", "band_high", "verdict") if c in t]
    drawn = [(a, _matched(a, t))] + ([] if b is a else [(b, _matched(b, t))])
    text = (f"Per matching point, B/A ratio of medians with a bootstrap {CONFIDENCE:.0%} "
            "interval from the "
            "kept samples; a verdict needs the change to clear both that interval and the "
            f"device's between-process noise band in the mode (shaded; {bands_line(t)}): "
            f"{summary(t)}.")
    if len(t) and (t["verdict"] == "no samples").all():
        text += (" These runs were made before per-call samples were kept: ratios of medians "
                 "only, without intervals or verdicts.")
    return Section(f"Compare: {what}", fig=fig, drawn=drawn, table=counts,
                   details=t[cols].round(4), text=text)


def _matched(run: Run, t: pd.DataFrame) -> pd.DataFrame:
    r = run.results
    keys = [k for k in ("model", "backend", "mode", "tokens") if k in t and k in r]
    if not len(t) or not keys:
        return r.iloc[:0]
    return r.merge(t[keys].drop_duplicates(), on=keys, how="inner")


def _devices_section(runs: list[Run]) -> Section | None:
    from . import devices
    rows = devices.rows_for(runs)
    if rows.empty:
        return None
    fig = devices.fig_side_by_side(rows, runs)
    _title(fig, "The same shapes on " + ", ".join(sorted(rows["device"].unique())))
    return Section("Devices side by side", fig=fig,
                   drawn=[(r, rows[rows["run_id"] == r.run_id]) for r in runs
                          if (rows["run_id"] == r.run_id).any()],
                   text=devices.summary(rows))


def build(runs: list[Run], by: str | None = None, values=None, mode: str | None = None
          ) -> list[Section]:
    """The sections of a review of `runs` (see the module doc)."""
    out = []
    if len(runs) == 2 or by:
        from ..analysis.compare import check_args
        check_args(runs[0], runs[-1], by, values, mode)  # bad input: one line, exit 2
        out.append(_guarded("Compare", _compare_section, runs[0], runs[-1], by, values, mode))
    for run in {str(r.path): r for r in runs}.values():  # a run compared with itself once
        out.append(_guarded(f"Time per call: {run.run_id}", _time_section, run))
        out.append(_guarded(f"Where eager time goes: {run.run_id}", _split_section, run))
    if len({r.device for r in runs}) > 1:
        out.append(_guarded("Devices side by side", _devices_section, runs))
    return [s for s in out if s is not None]


CSS = """body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:940px;
margin:1.5em auto;padding:0 12px;color:#222;line-height:1.45}h1{font-size:1.5em}
h2{font-size:1.15em;margin-top:2.2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.82em;color:#444;margin-top:.4em}figcaption code{font-size:.95em;
word-break:break-all;background:#f6f6f6;padding:0 2px}table{border-collapse:collapse;
font-size:.8em;margin:.6em 0}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
th{background:#f3f3f3}.meta{color:#555;font-size:.85em}
details summary{cursor:pointer;font-size:.9em;color:#333}ul.notes{font-size:.82em;color:#333}
td:first-child,th:first-child{text-align:left}"""


def _img(fig, path_base: str) -> tuple[str, int]:
    """Save PNG and SVG files; return the PNG as a data URI and its display width (px)."""
    fig.savefig(path_base + ".svg")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI)
    with open(path_base + ".png", "wb") as f:
        f.write(buf.getvalue())
    width = min(PAGE_PX, int(fig.get_figwidth() * 96))
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode(), width


def _caption(sec: Section, files: str) -> str:
    lines = []
    for run, rows in sec.drawn:
        p = provenance(run, rows)
        cmds = "; ".join(f"<code>{html.escape(c)}</code>" for c in p["commands"]) or "not recorded"
        lines.append(f"<b>run</b> {html.escape(p['run'])} &middot; <b>device</b> "
                     f"{html.escape(p['device'])} &middot; <b>dtype</b> {html.escape(p['dtype'])}"
                     f" &middot; <b>commits</b> {html.escape(p['commits'])} &middot; "
                     f"{p['rows']} rows &middot; <b>command</b> {cmds}")
    lines.append(f"files: {html.escape(files)}")
    return "<figcaption class=\"provenance\">" + "<br>".join(lines) + "</figcaption>"


def _table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, border=0, na_rep="", escape=True,
                      float_format=lambda v: f"{v:.0f}" if abs(v) >= 100 else f"{v:.4g}")


def write(sections: list[Section], out: str, argv: list[str] | None = None,
          title: str = "moe-lab review") -> str:
    """Write DIR/index.html and DIR/figures/<n>-<slug>.{png,svg}; return the HTML's path
    (never into a run folder: UsageError, nothing written)."""
    from ..core.validate import not_in_run
    not_in_run(out, "out")
    figdir = os.path.join(out, "figures")
    try:
        os.makedirs(figdir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    for old in os.listdir(figdir):  # an earlier export's figures would mislead
        if re.match(r"^\d\d-.*\.(png|svg)$", old):
            os.remove(os.path.join(figdir, old))
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p class=\"meta\">made {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by "
            f"<code>{html.escape(' '.join(['moe-lab'] + list(argv or [])))}</code>; every figure "
            "names the runs, devices, dtypes, commits and commands of the rows it draws.</p>"]
    body.append("<ul>" + "".join(f"<li>{html.escape(s.title)}</li>" for s in sections) + "</ul>")
    written = []  # a failed write (a full disk) removes these: the page and figures, or none
    try:
        return _write(sections, out, figdir, body, title, written)
    except BaseException:
        for f in written:
            if os.path.exists(f):
                os.remove(f)
        raise


def _write(sections, out, figdir, body, title, written) -> str:
    for i, s in enumerate(sections, 1):
        body.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.text:
            body.append(f"<p>{html.escape(s.text)}</p>")
        if s.fig is not None:
            base = os.path.join(figdir, f"{i:02d}-{s.slug or _slug(s.title)}")
            written += [base + ".png", base + ".svg"]
            uri, width = _img(s.fig, base)
            rel = os.path.relpath(base, out)
            body.append(f"<figure><img alt=\"{html.escape(s.title)}\" width=\"{width}\" "
                        f"src=\"{uri}\">{_caption(s, rel + '.png, ' + rel + '.svg')}</figure>")
        if s.table is not None and len(s.table):
            body.append(_table(s.table))
        if s.notes:
            body.append("<ul class=\"notes\">" + "".join(f"<li>{html.escape(n)}</li>"
                                                          for n in s.notes) + "</ul>")
        if s.details is not None and len(s.details):
            body.append(f"<details><summary>every point ({len(s.details)})</summary>"
                        f"{_table(s.details)}</details>")
    page = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
    path = os.path.join(out, "index.html")
    tmp = path + ".tmp"
    written.append(tmp)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, path)
    return path
