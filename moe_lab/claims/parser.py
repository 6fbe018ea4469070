"""Parse the benchmark text that performance PRs paste: serving-benchmark result blocks,
"Metric | baseline | new | Gain" comparison tables and lm_eval result tables.

Formats (written to the formats, not to any one paste):

* Serving result blocks, as printed by vLLM `benchmarks/benchmark_serving.py`,
  `vllm bench serve` and SGLang `python -m sglang.bench_serving`: a banner line
  `==== Serving Benchmark Result ====`, then `Label (unit):   value` lines in any order,
  optionally `----Section title----` lines, and a closing line of `=` only. Fields vary
  by tool and version (SGLang adds `Backend:`, `Traffic request rate:`, `Concurrency:`,
  `Mean E2E Latency (ms):`; newer vLLM adds `Failed requests:`,
  `Peak output token throughput (tok/s):`, `Request goodput (req/s):`, ...), so every
  `label: value` line is kept; known aliases are mapped to one canonical metric name.
  Blocks pasted into pull requests are often cut: no closing `=====` line, or sections
  missing. Such a block ends at the first line that is not part of it (the next banner,
  prose, a table, the end of the text); what is there is parsed and `Block.warnings`
  says what is missing (no closing line, a missing section or field of SERVING_EXPECTED).
* Comparison tables, TAB separated or markdown pipes: a header whose first cell is
  `Metric`, one or more configuration columns and optionally a gain column
  (`Gain`, `Change`, `Speedup`, `Delta`, ...).
* lm_eval tables (`|Tasks|Version|Filter|n-shot|Metric| |Value| |Stderr|`), markdown or
  TAB separated; a continuation row leaves the Tasks (and Version) cells empty.

Each block gets a `label` (the nearest free-text line before it, e.g. "baseline") and a
`section` (the heading before that, e.g. "16E bf16 benchmark"), plus `meta`: settings
read from the commands and context lines that precede it (model, tp, concurrency, ...).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import UsageError
from .lexicon import (  # noqa: F401 (canonical_metric, parse_number: part of the parser API)
    BANNER_RE,
    END_RE,
    SECTION_RE,
    FIELD_RE,
    GAIN_RE,
    GAIN_HEADERS,
    SERVING_EXPECTED,
    canonical_metric,
    parse_number,
    _looks_numeric_field,
    _LMEVAL_HDR_RE,
    _strip_comment,
    _is_label_line,
    _meta_from_command,
    _meta_from_lmeval_header,
    _SERVE_CMD_RE,
    _ENV_LINE_RE,
    _meta_from_context_line,
    _is_section_line,
    _cells,
    _is_rule_row,
    slug)


class ParseError(UsageError):
    """Malformed benchmark text. One-line message naming the file and line."""


# ---------------------------------------------------------------------------- types
@dataclass
class Row:
    metric: str  # canonical name, e.g. "output_throughput", "mean_tpot"
    value: float  # NaN for text-valued fields
    unit: str  # "s", "ms", "tok/s", "req/s", "%", "tok", "req", ""
    name: str  # the label as printed
    line: int  # 1-based line number in the file
    column: str = ""  # comparison/lm_eval tables: which column (config) the value is from
    text: str = ""  # text-valued fields ("Backend: sglang"); gain cells as printed ("-35.3% (better)")


@dataclass
class Block:
    index: int  # 0-based position in the file
    kind: str  # "serving" | "comparison" | "lm_eval"
    label: str
    section: str
    line_start: int
    line_end: int
    rows: list[Row] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)  # comparison: config columns (+gain)
    warnings: list[str] = field(default_factory=list)  # "file:line: what is missing"

    def get(self, metric: str, column: str | None = None) -> float:
        for r in self.rows:
            if r.metric == metric and (column is None or r.column == column):
                return r.value
        raise KeyError(f"block {self.index} ({self.label!r}) has no metric {metric!r}"
                       + (f" in column {column!r}" if column else ""))

    def has(self, metric: str, column: str | None = None) -> bool:
        try:
            self.get(metric, column)
            return True
        except KeyError:
            return False

    def values(self, column: str | None = None) -> dict[str, float]:
        return {r.metric: r.value for r in self.rows if column is None or r.column == column}


# ------------------------------------------------------------------------ patterns
class _Parser:
    def __init__(self, text: str, name: str):
        self.lines = text.splitlines()
        self.name = name
        self.blocks: list[Block] = []

    def err(self, lineno: int, msg: str) -> ParseError:
        return ParseError(f"{self.name}:{lineno}: {msg}")

    # serving block -----------------------------------------------------------
    def serving(self, i: int) -> tuple[Block, int]:
        """The serving block whose banner is line i, and the index of the first line
        after it. A block without its closing '=====' line ends before the first line
        that cannot be part of it; what is missing goes to `warnings`."""
        start = i
        blk = Block(len(self.blocks), "serving", "", "", start + 1, start + 1)
        section = ""
        empty: list[str] = []  # numeric fields printed without a value (cut mid-line)
        closed, cut_by = False, "the text ends"
        last = start  # last line that belongs to the block
        members: list[int] = []  # its section and field lines
        i += 1
        while i < len(self.lines):
            line = self.lines[i]
            raw = line.strip()
            if raw.startswith("#"):  # pasted as shell comments
                raw = raw.lstrip("#").strip()
            if END_RE.match(raw) and len(raw) >= 10:
                closed, last = True, i
                i += 1
                break
            if BANNER_RE.match(raw):
                cut_by = f"the next result block starts at line {i + 1}"
                break
            if not raw:
                i += 1
                continue
            sm = SECTION_RE.match(raw)
            if sm:
                section = sm.group(1)
                last = i
                members.append(i)
                i += 1
                continue
            # tables (TAB or pipe cells) and lines without "label: value" are not fields; a
            # TAB as whitespace (around the line, between "label:" and its value) is not a cell
            fm = None if raw.startswith("|") else FIELD_RE.match(raw)
            if fm and "\t" in fm.group("label") + fm.group("value"):
                fm = None
            if not fm:
                cut_by = f"line {i + 1} is not a field ({raw[:40]!r})"
                break
            self.serving_field(blk, fm, i, section, empty)
            last = i
            members.append(i)
            i += 1
        if not closed:
            i, last, cut_by = self.give_back_text(blk, members, start, i, last, cut_by)
        blk.line_end = last + 1
        if not any(not math.isnan(r.value) for r in blk.rows):
            raise self.err(start + 1, "serving benchmark block has no numeric fields"
                           + ("" if closed else " (and no closing '=====' line)"))
        self.serving_warnings(blk, start, closed, cut_by, empty)
        return blk, i

    def serving_field(self, blk: Block, fm, i: int, section: str,
                      empty: list[str]) -> None:
        """Line i, a "label: value" field of a serving block: a row of `blk`, or a note
        in `empty` when a numeric field has no value; a ParseError when its value is not
        a number where one belongs."""
        label, val = fm.group("label"), fm.group("value")
        metric, unit = canonical_metric(label)
        try:
            value, text = parse_number(val), ""
        except ValueError:
            if _looks_numeric_field(metric, unit):
                raise self.err(i + 1, f"{label.strip()!r} has non-numeric value {val!r}") from None
            value, text = math.nan, val
        if not val and _looks_numeric_field(metric, unit):
            empty.append(f"{label.strip()!r} (line {i + 1})")
        else:
            blk.rows.append(Row(metric, value, unit, label.strip(), i + 1, section, text))

    @staticmethod
    def give_back_text(blk: Block, members: list[int], start: int, i: int, last: int,
                       cut_by: str) -> tuple[int, int, str]:
        """A block without its closing line: prose with a colon after it reads as text
        fields, so give them back; the new (next line, last line, why it ends)."""
        while blk.rows and math.isnan(blk.rows[-1].value) and blk.rows[-1].text:
            r = blk.rows.pop()
            i = r.line - 1
            last = max([j for j in members if j < i], default=start)
            cut_by = f"line {r.line} is text, not a result ({r.name!r})"
        return i, last, cut_by

    def serving_warnings(self, blk: Block, start: int, closed: bool, cut_by: str,
                         empty: list[str]) -> None:
        """What a serving block lacks, in `blk.warnings`: its closing line, values of
        numeric fields, whole sections or single metrics of SERVING_EXPECTED."""
        where = f"{self.name}:{start + 1}"
        if not closed:
            blk.warnings.append(f"{where}: serving block has no closing '=====' line; read "
                                f"up to line {blk.line_end} ({cut_by})")
        if empty:
            blk.warnings.append(f"{where}: no value for {', '.join(empty)}")
        present = {r.metric for r in blk.rows}
        for title, metrics in SERVING_EXPECTED:
            miss = [m for m in metrics if m not in present]
            if title and len(miss) == len(metrics):
                blk.warnings.append(f"{where}: no '{title}' section ({', '.join(miss)} missing)")
            elif miss:
                blk.warnings.append(f"{where}: missing {', '.join(miss)}")

    def table_body(self, i: int) -> tuple[list[tuple[int, list[str]]], int]:
        """Body rows (line index, cells) of the table whose header is line i, rule rows
        skipped, up to the first blank or non-table line; and that line's index."""
        rows = []
        i += 1
        while i < len(self.lines):
            cells = _cells(self.lines[i])
            if cells is None or not any(cells):
                break
            if not _is_rule_row(cells):
                rows.append((i, cells))
            i += 1
        return rows, i

    # comparison table --------------------------------------------------------
    def comparison(self, i: int, header: list[str]) -> tuple[Block, int]:
        start = i
        hdr = list(header)
        while hdr and not hdr[-1]:
            hdr.pop()
        gain_idx = None
        if len(hdr) >= 3 and hdr[-1].strip().lower().startswith(GAIN_HEADERS):
            gain_idx = len(hdr) - 1
        configs = hdr[1:gain_idx] if gain_idx else hdr[1:]
        blk = Block(len(self.blocks), "comparison", "", "", start + 1, start + 1,
                    columns=list(hdr[1:]))
        rows, rows_end = self.table_body(i)
        for i, cells in rows:
            if not cells[0]:
                break
            metric, unit = canonical_metric(cells[0])
            for j, col in enumerate(configs, start=1):
                cell = cells[j] if j < len(cells) else ""
                try:
                    v = parse_number(cell)
                except ValueError:
                    raise self.err(i + 1, f"{cells[0]!r} / {col!r}: non-numeric value {cell!r}") from None
                blk.rows.append(Row(metric, v, unit, cells[0], i + 1, col))
            if gain_idx is not None:
                cell = cells[gain_idx] if gain_idx < len(cells) else ""
                if cell:
                    gm = GAIN_RE.match(cell.strip())
                    if not gm:
                        raise self.err(i + 1, f"{cells[0]!r}: gain {cell!r} is not a number")
                    gunit = {"x": "x", "×": "x"}.get(gm.group("unit") or "", "%")
                    blk.rows.append(Row(metric, float(gm.group("num").replace("−", "-")), gunit,
                                        cells[0], i + 1, hdr[gain_idx], cell.strip()))
            blk.line_end = i + 1
        else:
            i = rows_end
        if not blk.rows:
            raise self.err(start + 1, "comparison table has a header but no rows")
        blk.meta["gain_column"] = hdr[gain_idx] if gain_idx else None
        blk.meta["config_columns"] = configs
        return blk, i

    # lm_eval table -----------------------------------------------------------
    def lm_eval(self, i: int, header: list[str]) -> tuple[Block, int]:
        start = i
        low = [h.strip().lower() for h in header]
        idx = {k: low.index(k) for k in ("version", "filter", "n-shot", "metric", "value")
               if k in low}
        idx["stderr"] = low.index("stderr") if "stderr" in low else None
        if "value" not in idx or "metric" not in idx:
            raise self.err(i + 1, "lm_eval table header lacks Metric/Value columns")
        blk = Block(len(self.blocks), "lm_eval", "", "", start + 1, start + 1)
        task = ""
        rows, rows_end = self.table_body(i)
        for i, cells in rows:
            cells = cells + [""] * (len(header) - len(cells))
            if cells[0]:
                task = cells[0].lstrip("- ").strip()
            if not task:
                raise self.err(i + 1, "lm_eval row without a task name")
            filt = cells[idx["filter"]] if "filter" in idx else "none"
            met = cells[idx["metric"]]
            base = f"{task}/{filt or 'none'}/{met}"
            try:
                v = parse_number(cells[idx["value"]])
                se = parse_number(cells[idx["stderr"]]) if idx["stderr"] is not None else math.nan
            except ValueError:
                raise self.err(i + 1, f"lm_eval {base}: non-numeric value/stderr "
                               f"{cells[idx['value']]!r} / {cells[idx['stderr']]!r}") from None
            nshot = cells[idx["n-shot"]] if "n-shot" in idx else ""
            blk.rows.append(Row(base, v, "", met, i + 1, nshot))
            blk.rows.append(Row(base + "_stderr", se, "", met + " stderr", i + 1, nshot))
            blk.line_end = i + 1
        if not blk.rows:
            raise self.err(start + 1, "lm_eval table has a header but no rows")
        return blk, rows_end

    # driver ------------------------------------------------------------------
    def run(self) -> list[Block]:
        i = 0
        ctx_start = 0  # first line after the previous block
        section, prev_kind = "", None
        perf_meta: dict = {}  # carried: serving commands and "Concurrency: 64" lines
        eval_meta: dict = {}  # from the latest lm_eval "vllm (pretrained=...)" line
        while i < len(self.lines):
            line = self.lines[i]
            s = line.strip()
            if s.startswith("#"):
                s = s.lstrip("#").strip()
            blk = None
            if BANNER_RE.match(s) and not END_RE.match(s):
                blk, nxt = self.serving(i)
            else:
                cells = _cells(line)
                if cells and len(cells) >= 3:
                    first = cells[0].strip().lower()
                    low = [c.lower() for c in cells]
                    if first in ("tasks", "groups") and "value" in low:
                        blk, nxt = self.lm_eval(i, cells)
                    elif first == "metric" and "value" not in low:
                        blk, nxt = self.comparison(i, cells)
            if blk is None:
                i += 1
                continue
            # label, section and settings from the text between the last block and this
            ctx = self.lines[ctx_start:i]
            for c in ctx:
                if _LMEVAL_HDR_RE.match(c.strip()):
                    eval_meta = {}
                    _meta_from_lmeval_header(c, eval_meta)
                elif _SERVE_CMD_RE.search(c):
                    _meta_from_command(c, perf_meta)
                elif _ENV_LINE_RE.match(c.strip()) and "lm_eval" not in c:
                    _meta_from_command(c, perf_meta)
                else:
                    _meta_from_context_line(c, perf_meta)
            nonempty = [_strip_comment(c) for c in ctx if _strip_comment(c)]
            labels = [c for c in nonempty if _is_label_line(c)]
            blk.label = labels[-1] if labels else ""
            recent = nonempty[-16:]
            cands = [c for c in recent[:-1] if _is_section_line(c)] if labels else []
            if blk.label in recent:
                cut = len(recent) - 1 - recent[::-1].index(blk.label)
                cands = [c for c in recent[:cut] if _is_section_line(c)]
            if cands:
                section = cands[-1]
            elif prev_kind != blk.kind:
                section = ""
            blk.section = section
            prev_kind = blk.kind
            base = eval_meta if blk.kind == "lm_eval" else perf_meta
            blk.meta = {**json.loads(json.dumps(base)), **blk.meta}
            blk.index = len(self.blocks)
            self.blocks.append(blk)
            i = ctx_start = nxt
        return self.blocks


def parse_text(text: str, name: str = "<text>", require: bool = True) -> list[Block]:
    blocks = _Parser(text, name).run()
    if require and not blocks:
        raise ParseError(f"{name}: no serving-benchmark result block, comparison table "
                         "('Metric | ... | Gain') or lm_eval table found")
    return blocks


def parse_file(path: str | Path, require: bool = True) -> list[Block]:
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{p} is a folder, not a text file: give the file to parse")
    if not p.is_file():
        raise UsageError(f"no such file: {p}")
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {p}: {exc.strerror}") from None
    return parse_text(text, p.name, require)


TIDY_COLUMNS = ["block", "kind", "section", "label", "column", "metric", "value", "unit",
                "name", "text", "line"]


def tidy(blocks: list[Block]) -> list[dict]:
    """One dict per value: block, kind, section, label, column, metric, value, unit, ..."""
    out = []
    for b in blocks:
        for r in b.rows:
            out.append(dict(block=b.index, kind=b.kind, section=b.section, label=b.label,
                            column=r.column, metric=r.metric, value=r.value, unit=r.unit,
                            name=r.name, text=r.text, line=r.line))
    return out


def to_frame(blocks: list[Block]):
    import pandas as pd
    return pd.DataFrame(tidy(blocks), columns=TIDY_COLUMNS)
