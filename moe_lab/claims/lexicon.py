"""The line-level vocabulary of benchmark pastes: banners, sections, `label: value` fields,
table cells, numbers with units, metric aliases, and the settings read from command and
context lines (model, tp, concurrency, ...). moe_lab.claims.parser assembles blocks from it."""
from __future__ import annotations

import math
import re
import shlex


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
    elif unit in ("µs", "μs"):  # micro sign or Greek mu: the registry's "us"
        unit = "us"
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
