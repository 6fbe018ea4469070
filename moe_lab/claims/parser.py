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
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError


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
BANNER_RE = re.compile(r"^=+\s*(.*?(?:Benchmark|Bench)\b.*?)\s*=+\s*$", re.I)
END_RE = re.compile(r"^=+\s*$")
SECTION_RE = re.compile(r"^-{3,}\s*(.*?)\s*-{3,}\s*$")
FIELD_RE = re.compile(r"^(?P<label>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")
UNIT_RE = re.compile(r"\(([^()]*)\)\s*$")
NUM_RE = re.compile(r"^[+-]?(?:\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
GAIN_RE = re.compile(r"^(?P<num>[+\-−]?\d+(?:\.\d+)?)\s*(?P<unit>%|x|×)?\s*(?P<note>.*)$")
GAIN_HEADERS = ("gain", "change", "speedup", "delta", "δ", "diff", "improvement", "ratio")

# Printed label (lower case, unit stripped) -> canonical metric. Everything else is
# slugged: "Mean TTFT (ms)" -> "mean_ttft".
ALIASES = {
    "successful requests": "completed",
    "total throughput": "total_token_throughput",  # older SGLang
    "total token throughput": "total_token_throughput",
    "output token throughput": "output_throughput",
    "input token throughput": "input_throughput",
    "peak output token throughput": "peak_output_throughput",
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "total input tokens": "total_input_tokens",
    "benchmark duration": "duration",
    "traffic request rate": "request_rate",
    "request rate configured": "request_rate",
    "max request concurrency": "max_concurrency",
    "maximum request concurrency": "max_concurrency",
}
E2E_RE = re.compile(r"\be2e latency\b|\be2el\b")

# Fields whose value must be a number; a garbage value there is an error, not text.
_COUNT_UNITS = {
    "completed": "req", "failed_requests": "req", "total_input_tokens": "tok",
    "total_output_tokens": "tok", "total_output_tokens_retokenized": "tok",
    "max_concurrency": "req", "peak_concurrent_requests": "req",
}
_NUMERIC_UNITS = {"s", "ms", "us", "tok/s", "req/s", "%", "rps", "tok"}

# What every serving result block prints (vLLM benchmark_serving.py / `vllm bench serve`
# with the default --percentile-metrics, SGLang bench_serving): the header fields, then
# one section per latency metric. A block lacking some was cut (or run with other
# settings): parsed anyway, with a warning naming what is missing.
SERVING_EXPECTED: list[tuple[str, tuple[str, ...]]] = [
    ("", ("completed", "duration", "total_input_tokens", "total_output_tokens",
          "request_throughput", "output_throughput", "total_token_throughput")),
    ("Time to First Token", ("mean_ttft", "median_ttft", "p99_ttft")),
    ("Time per Output Token", ("mean_tpot", "median_tpot", "p99_tpot")),
    ("Inter-token Latency", ("mean_itl", "median_itl", "p99_itl")),
]


def slug(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


def canonical_metric(label: str) -> tuple[str, str]:
    """Printed label -> (canonical metric name, unit)."""
    label = label.strip()
    m = UNIT_RE.search(label)
    unit = ""
    base = label
    if m and not label.lower().endswith("(retokenized)"):
        unit = m.group(1).strip()
        base = label[:m.start()].strip()
    low = base.lower()
    if unit.lower() == "rps":
        unit = "req/s"
    if low in ALIASES:
        name = ALIASES[low]
    elif label.lower() in ALIASES:
        name = ALIASES[label.lower()]
    else:
        name = slug(E2E_RE.sub("e2el", low))
    if not unit:
        unit = _COUNT_UNITS.get(name, "")
    return name, unit


def parse_number(text: str) -> float:
    """'1,234.5' / 'inf' / 'N/A' -> float; ValueError otherwise."""
    t = text.strip().replace("−", "-")
    if t.lower() in ("inf", "+inf", "infinity"):
        return math.inf
    if t.lower() in ("n/a", "na", "nan", "-", ""):
        return math.nan
    if not NUM_RE.match(t):
        raise ValueError(text)
    return float(t.replace(",", ""))


def _looks_numeric_field(metric: str, unit: str) -> bool:
    return unit in _NUMERIC_UNITS or metric in _COUNT_UNITS or "throughput" in metric \
        or any(metric.startswith(p) for p in ("mean_", "median_", "p9", "p5", "std_", "max_"))


# ---------------------------------------------------------------------- context
_CMD_RE = re.compile(r"(?:^|\s)(?:python3?\s|vllm\s+(?:serve|bench)|lm_eval\s|sglang\.|"
                     r"[A-Z_][A-Z0-9_]*=\S+\s)")
_AUTHOR_RE = re.compile(r"^\[[^\]\s]+\]$")
_LMEVAL_HDR_RE = re.compile(r"^\w+\s*\((?P<args>[^)]*)\),\s*gen_kwargs:.*$")


_NOISE_RE = re.compile(r"\d+%\||it/s\]|s/it\]|^(?:INFO|WARNING|DEBUG|ERROR)\b|^\$ |^Namespace\(")


def _strip_comment(line: str) -> str:
    """'## Heading' / '# pasted output' -> the text; '#!/bin/bash' stays (noise)."""
    s = line.strip()
    if s.startswith("#") and not s.startswith("#!"):
        s = s.lstrip("#").strip()
    return s


def _is_label_line(line: str) -> bool:
    s = line.strip()
    if not s or len(s) > 100 or _AUTHOR_RE.match(s) or _CMD_RE.search(s):
        return False
    if _LMEVAL_HDR_RE.match(s) or s.startswith(("|", "#!", "```")) or _NOISE_RE.search(s):
        return False
    if "\t" in line or s.endswith("...") or _KV_LINE_RE.match(s):
        return False
    if BANNER_RE.match(s) or END_RE.match(s) or SECTION_RE.match(s):
        return False
    return True


def _meta_from_command(line: str, meta: dict) -> None:
    """Settings a reader wants next to a number: model, tp, ep, concurrency, lengths."""
    try:
        toks = shlex.split(line)
    except ValueError:
        toks = line.split()
    opts = {
        "--model": "model", "--max-concurrency": "concurrency", "--num-prompts": "num_prompts",
        "--random-input-len": "input_len", "--random-output-len": "output_len",
        "--random-input": "input_len", "--random-output": "output_len",
        "--request-rate": "request_rate", "--dataset-name": "dataset", "--backend": "backend",
        "-tp": "tp", "--tensor-parallel-size": "tp", "--tp": "tp", "--tp-size": "tp",
        "--max-num-seqs": "max_num_seqs", "--max-model-len": "max_model_len",
    }
    for i, tok in enumerate(toks):
        key, _, val = tok.partition("=")
        if key in opts and (val or i + 1 < len(toks)):
            v = val or toks[i + 1]
            meta[opts[key]] = int(v) if v.isdigit() else v
        elif tok in ("--enforce-eager", "--enable-expert-parallel"):
            meta.setdefault("flags", [])
            if tok not in meta["flags"]:
                meta["flags"].append(tok)
        elif re.match(r"^VLLM_[A-Z0-9_]+=", tok):
            k, _, v = tok.partition("=")
            meta.setdefault("env", {})[k] = v
    if "vllm" in toks and "serve" in toks:
        j = toks.index("serve")
        if j + 1 < len(toks) and not toks[j + 1].startswith("-"):
            meta["model"] = toks[j + 1]


def _meta_from_lmeval_header(line: str, meta: dict) -> None:
    m = _LMEVAL_HDR_RE.match(line.strip())
    if not m:
        return
    for part in m.group("args").split(","):
        k, _, v = part.partition("=")
        k = k.strip()
        if k == "pretrained":
            meta["model"] = v
        elif k == "tensor_parallel_size":
            meta["tp"] = int(v)
        elif k == "enable_expert_parallel" and v.strip().lower() == "true":
            meta["ep"] = meta.get("tp", True)
        elif k:
            meta.setdefault("model_args", {})[k] = v
    for k, pat in (("num_fewshot", r"num_fewshot:\s*(\d+)"), ("batch_size", r"batch_size:\s*(\w+)")):
        mm = re.search(pat, line)
        if mm:
            meta[k] = int(mm.group(1)) if mm.group(1).isdigit() else mm.group(1)
    if meta.get("ep") is True:
        meta["ep"] = meta.get("tp")


_SERVE_CMD_RE = re.compile(r"benchmark_serving|bench\s+serve|bench_serving|vllm\s+serve|"
                           r"sglang\.launch_server|launch_server")
_ENV_LINE_RE = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s*\\?\s*)+$")
_KV_LINE_RE = re.compile(r"^(?P<k>[A-Za-z][\w .:/()-]{1,40}?)\s*[:=]\s*(?P<v>\S.{0,60})$")
_CONTEXT_KEYS = {
    "number of prompts": "num_prompts", "num prompts": "num_prompts", "prompts": "num_prompts",
    "concurrency": "concurrency", "max concurrency": "concurrency",
    "tensor parallelism": "tp", "tp": "tp", "expert parallelism": "ep", "ep": "ep",
    "dataset": "dataset", "vllm engine version": "engine", "engine": "engine",
    "input length": "input_len", "output length": "output_len",
}


def _meta_from_context_line(line: str, meta: dict) -> None:
    """`Concurrency: 64`, `ISL:OSL= 1000:1000`, `Tensor Parallelism: 8` above a table."""
    s = line.strip().lstrip("-*• ").strip()
    m = re.match(r"^ISL\s*:\s*OSL\s*=?\s*(\d+)\s*:\s*(\d+)", s, re.I)
    if m:
        meta["input_len"], meta["output_len"] = int(m.group(1)), int(m.group(2))
        return
    m = _KV_LINE_RE.match(s)
    if not m:
        return
    key = m.group("k").strip().lower()
    if key in _CONTEXT_KEYS:
        v = m.group("v").strip()
        meta[_CONTEXT_KEYS[key]] = int(v) if v.isdigit() else v


def _is_section_line(line: str) -> bool:
    s = line.strip()
    return (_is_label_line(s) and len(s) <= 60 and not s.endswith((":", ".", "?", "!"))
            and not s.startswith(("•", "-", "*", "@")) and not _KV_LINE_RE.match(s)
            and len(re.findall(r"[A-Za-z]", s)) >= 3)


# ------------------------------------------------------------------------- tables
def _cells(line: str) -> list[str] | None:
    """Split a markdown pipe row or a TAB row into cells; None if it is neither."""
    s = line.rstrip("\n").rstrip()
    if s.lstrip().startswith("|"):
        s = s.strip()
        if s.endswith("|"):
            s = s[:-1]
        return [c.strip() for c in s[1:].split("|")]
    if "\t" in s:
        return [c.strip() for c in s.split("\t")]
    return None


def _is_rule_row(cells: list[str]) -> bool:
    return bool(cells) and all(re.fullmatch(r":?-{2,}:?", c) or c == "" for c in cells) \
        and any(c for c in cells)


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
            # tables (TAB or pipe cells) and lines without "label: value" are not fields
            fm = None if "\t" in line or raw.startswith("|") else FIELD_RE.match(raw)
            if not fm:
                cut_by = f"line {i + 1} is not a field ({raw[:40]!r})"
                break
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
            last = i
            members.append(i)
            i += 1
        if not closed:
            # prose with a colon after a cut block reads as text fields: give them back
            while blk.rows and math.isnan(blk.rows[-1].value) and blk.rows[-1].text:
                r = blk.rows.pop()
                i = r.line - 1
                last = max([j for j in members if j < i], default=start)
                cut_by = f"line {r.line} is text, not a result ({r.name!r})"
        blk.line_end = last + 1
        if not any(not math.isnan(r.value) for r in blk.rows):
            raise self.err(start + 1, "serving benchmark block has no numeric fields"
                           + ("" if closed else " (and no closing '=====' line)"))
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
        return blk, i

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
