"""The claims registry: every numeric claim of the two upstream PRs, with its source,
configuration, baseline, new value and stated gain.

The numbers are not typed in: `build_registry()` runs the parser over the copies of the
PR texts in data/claims/sources/ and joins them with the hand-written configuration
below (what the text says in prose: model preset, sharding, engine, flags). The
committed data/claims/registry.json is its output; tests assert the two are equal, so a
registry number is always a number the parser reads from the source.

    python -m moe_lab.claims.registry   # rewrite data/claims/registry.json
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ..core.errors import UsageError
from .parser import Block, parse_file
from .schema import registry_problem

REPO_ROOT = Path(__file__).resolve().parents[2]
CLAIMS_DIR = REPO_ROOT / "data" / "claims"
SOURCES_DIR = CLAIMS_DIR / "sources"
REGISTRY_PATH = CLAIMS_DIR / "registry.json"

SEED_000 = "000_beee3bc92878194c.txt"
SEED_002 = "002_68c35e7605864208.txt"

# Which way is better, per metric.
LOWER_IS_BETTER = re.compile(r"ttft|tpot|itl|e2el|latency|duration")

# Serving metrics of the before/after blocks that count as claims (performance numbers);
# counts such as requests and tokens describe the work and travel with each claim.
PERF_METRICS = ["duration", "request_throughput", "output_throughput", "total_token_throughput",
                "mean_ttft", "median_ttft", "p99_ttft", "mean_tpot", "median_tpot", "p99_tpot",
                "mean_itl", "median_itl", "p99_itl"]
WORK_METRICS = ["completed", "duration", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "total_token_throughput"]

# --- what the prose says (the parser supplies every number) -----------------------
_MI300X_NOTE = ("GPU not named in the PR; ROCm/aiter PRs of this period were benchmarked "
                "on MI300X (assumed)")
def _seed000(section: str, preset: str, hf_id: str) -> dict:
    """Seed 000's two serving comparisons share everything but the model."""
    return dict(
        source=SEED_000, section=section, preset=preset, hf_id=hf_id, dtype="bf16", tp=8, ep=1,
        concurrency=32, num_prompts=160, input_len=1000, output_len=1000, engine="V1",
        flags=["--enforce-eager", "--compilation-config 0", "--max-num-seqs 64",
               "--max-model-len 8192", "VLLM_ROCM_USE_AITER_MOE=1"],
        baseline_desc="before the PR (no aiter fused MoE for bf16)",
        new_desc="aiter fused MoE for bf16 (the PR)", gpu="mi300x", gpu_note=_MI300X_NOTE,
        baseline=(section, "baseline"), new=(section, "w/ the change"))


PERF_CONFIGS = {
    "000-scout-bf16": _seed000("16E bf16 benchmark", "llama4-scout-16e",
                               "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
    "000-maverick-bf16": _seed000("128E bf16 benchmark", "llama4-maverick-128e",
                                  "meta-llama/Llama-4-Maverick-17B-128E-Instruct"),
    "002-deepseek-r1": dict(
        source=SEED_002, section="Performance Gain", table="DeepSeek-R1", preset="deepseek-r1",
        hf_id="deepseek-ai/DeepSeek-R1", dtype="fp8", tp=8, ep=8, concurrency=64,
        num_prompts=500, input_len=1000, output_len=1000, engine="V1",
        flags=["--enable-expert-parallel", "AITER MLA in both"],
        baseline_desc="No AITER fused MoE (AITER MLA only)",
        new_desc="AITER MLA + AITER fused MoE (+ aiter.biased_grouped_topk)",
        gpu="mi300x", gpu_note=_MI300X_NOTE),
    "002-scout-bf16": dict(
        source=SEED_002, section="Performance Gain", table="Llama-4-Scout-17B-16E-Instruct",
        preset="llama4-scout-16e", hf_id="meta-llama/Llama-4-Scout-17B-16E-Instruct",
        dtype="bf16", tp=8, ep=8, concurrency=64, num_prompts=500, input_len=1000,
        output_len=1000, engine="V1",
        flags=["--enable-expert-parallel", "VLLM_ROCM_USE_AITER_LINEAR=0",
               "VLLM_ROCM_USE_AITER_RMSNORM=0", "VLLM_ROCM_USE_AITER_MHA=0"],
        baseline_desc="No AITER", new_desc="AITER fused MoE only", gpu="mi300x",
        gpu_note=_MI300X_NOTE),
    "002-maverick-fp8": dict(
        source=SEED_002, section="Performance Gain",
        table="Llama-4-Maverick-17B-128E-Instruct-FP8", preset="llama4-maverick-128e",
        hf_id="meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", dtype="fp8", tp=8, ep=8,
        concurrency=64, num_prompts=500, input_len=1000, output_len=1000, engine="V1",
        flags=["--enable-expert-parallel", "VLLM_ROCM_USE_AITER_LINEAR=0",
               "VLLM_ROCM_USE_AITER_RMSNORM=0", "VLLM_ROCM_USE_AITER_MHA=0"],
        baseline_desc="No AITER", new_desc="AITER fused MoE only", gpu="mi300x",
        gpu_note=_MI300X_NOTE),
}

# lm_eval configurations: (source, label prefix) -> description. AITER on/off is read
# from the label where it says so; the PR's test command sets VLLM_ROCM_USE_AITER_MOE=1.
EVAL_CONFIGS = {
    "000-gsm8k-scout-aiter": dict(source=SEED_000, label="The GSM8K lmeval score of AITER kernel of meta-llama/Llama-4-Scout",
                                  preset="llama4-scout-16e", dtype="bf16", engine="V1", aiter=True),
    "000-gsm8k-maverick-aiter": dict(source=SEED_000, label="The GSM8K lmeval score of AITER kernel of meta-llama/Llama-4-Maverick",
                                     preset="llama4-maverick-128e", dtype="bf16", engine="V1", aiter=True),
    "002-gsm8k-deepseek-r1-v0": dict(source=SEED_002, label="1. ", preset="deepseek-r1", dtype="fp8", engine="V0", aiter=True),
    "002-gsm8k-deepseek-r1-v1": dict(source=SEED_002, label="2. ", preset="deepseek-r1", dtype="fp8", engine="V1", aiter=True),
    "002-gsm8k-qwen3-235b-fp8-v0": dict(source=SEED_002, label="3. ", preset="qwen3-235b-a22b", dtype="fp8", engine="V0", aiter=True),
    "002-gsm8k-qwen3-235b-fp8-v1": dict(source=SEED_002, label="4. ", preset="qwen3-235b-a22b", dtype="fp8", engine="V1", aiter=True),
    "002-gsm8k-scout-fp8-noaiter": dict(source=SEED_002, label="5. ", preset="llama4-scout-16e", dtype="fp8", engine="V1", aiter=False),
    "002-gsm8k-scout-fp8-aiter-tkw1": dict(source=SEED_002, label="6. ", preset="llama4-scout-16e", dtype="fp8", engine="V1", aiter=True),
    "002-gsm8k-scout-bf16-noaiter": dict(source=SEED_002, label="7. ", preset="llama4-scout-16e", dtype="bf16", engine="V1", aiter=False),
    "002-gsm8k-scout-bf16-aiter": dict(source=SEED_002, label="8. ", preset="llama4-scout-16e", dtype="bf16", engine="V1", aiter=True),
}
# Pairs whose accuracy should agree: (baseline config, new config, what differs).
PARITY_PAIRS = [
    ("002-gsm8k-scout-fp8-noaiter", "002-gsm8k-scout-fp8-aiter-tkw1", "AITER fused MoE (tkw1) on vs off"),
    ("002-gsm8k-scout-bf16-noaiter", "002-gsm8k-scout-bf16-aiter", "AITER fused MoE on vs off"),
    ("002-gsm8k-deepseek-r1-v0", "002-gsm8k-deepseek-r1-v1", "V0 vs V1 engine, AITER on in both"),
    ("002-gsm8k-qwen3-235b-fp8-v0", "002-gsm8k-qwen3-235b-fp8-v1", "V0 vs V1 engine, AITER on in both"),
]


def direction(metric: str) -> str:
    return "lower" if LOWER_IS_BETTER.search(metric) else "higher"


def _num(v: float):
    """JSON-safe float: NaN -> None; integral values stay floats (what the parser read)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _decimals(text: str) -> int:
    """Decimals of the first number in a printed cell: '+85.9%' -> 1, '+86%' -> 0."""
    m = re.search(r"\d+(?:\.(\d+))?", text)
    return len(m.group(1) or "") if m else 0


def _gain_note(text: str) -> str:
    """'-35.3% (better)' -> 'better'."""
    m = re.search(r"\(([^)]*)\)", text)
    return m.group(1).strip() if m else ""


def _find(blocks: list[Block], kind: str, source: str, *, section=None, label=None,
          label_prefix=None) -> Block:
    hits = [b for b in blocks if b.kind == kind
            and (section is None or b.section == section)
            and (label is None or b.label == label)
            and (label_prefix is None or b.label.startswith(label_prefix))]
    if len(hits) != 1:
        raise UsageError(f"{source}: expected one {kind} block (section={section!r}, "
                         f"label={label or label_prefix!r}), found {len(hits)}")
    return hits[0]


def _lines(b: Block, metric: str) -> list[int]:
    return sorted({r.line for r in b.rows if r.metric == metric})


def _block_ref(src, b) -> dict:
    """Where a block sits in its source: file, index, kind, section, label and lines."""
    return dict(source=src, block=b.index, kind=b.kind, section=b.section, label=b.label,
                lines=[b.line_start, b.line_end])


def _before_after(cid, cfg, blocks, configs, claims, blocks_out) -> None:
    """One config of seed 000: its baseline and new serving blocks, checked against
    the registry's command settings, and one perf claim per metric both blocks give."""
    src = cfg["source"]
    c = {k: v for k, v in cfg.items() if k not in ("baseline", "new")}
    base = _find(blocks, "serving", src, section=cfg["baseline"][0], label=cfg["baseline"][1])
    new = _find(blocks, "serving", src, section=cfg["new"][0], label=cfg["new"][1])
    for key in ("tp", "concurrency", "num_prompts", "input_len", "output_len"):
        if base.meta.get(key) != cfg[key]:
            raise UsageError(f"{cid}: {key} in the source's command is "
                             f"{base.meta.get(key)!r}, registry says {cfg[key]!r}")
    c["model_in_command"] = base.meta.get("model")
    c["env"] = base.meta.get("env", {})
    configs[cid] = c
    for b in (base, new):
        blocks_out.append({**_block_ref(src, b), "config": cid,
                           "values": {r.metric: _num(r.value) for r in b.rows
                                      if not math.isnan(r.value)}})
    work = {side: {m: _num(b.get(m)) for m in WORK_METRICS if b.has(m)}
            for side, b in (("baseline", base), ("new", new))}
    for m in PERF_METRICS:
        if not (base.has(m) and new.has(m)):
            continue
        unit = next(r.unit for r in base.rows if r.metric == m)
        claims.append(dict(
            id=f"{cid}/{m}", kind="perf", source=src,
            section=f"{cfg['section']}: {base.label} vs {new.label}", config=cid,
            metric=m, unit=unit, direction=direction(m),
            baseline=_num(base.get(m)), new=_num(new.get(m)),
            stated_gain_pct=None, stated_gain_text="", stated_gain_decimals=None,
            stated_note="",
            baseline_label=base.label, new_label=new.label,
            lines=_lines(base, m) + _lines(new, m), decimals=2, work=work))


def _comparison(cid, cfg, blocks, configs, claims, blocks_out) -> None:
    """One config of seed 002: its comparison table, checked against the registry's
    settings, and one perf claim per metric with the table's stated gain."""
    src = cfg["source"]
    c = {k: v for k, v in cfg.items() if k not in ("baseline", "new")}
    tbl = _find(blocks, "comparison", src, label=cfg["table"])
    for key in ("tp", "ep", "concurrency", "num_prompts", "input_len", "output_len"):
        if tbl.meta.get(key) != cfg[key]:
            raise UsageError(f"{cid}: {key} in the source is {tbl.meta.get(key)!r}, "
                             f"registry says {cfg[key]!r}")
    configs[cid] = c
    bcol, ncol = tbl.meta["config_columns"][0], tbl.meta["config_columns"][-1]
    gcol = tbl.meta["gain_column"]
    vals = {col: tbl.values(col) for col in (bcol, ncol)}
    blocks_out.append({**_block_ref(src, tbl), "config": cid,
                       "values": {col: {k: _num(v) for k, v in vs.items()}
                                  for col, vs in vals.items()}})
    work = {"baseline": {m: vals[bcol][m] for m in WORK_METRICS if m in vals[bcol]},
            "new": {m: vals[ncol][m] for m in WORK_METRICS if m in vals[ncol]}}
    for m in dict.fromkeys(r.metric for r in tbl.rows):
        gain = next((r for r in tbl.rows if r.metric == m and r.column == gcol), None)
        unit = next(r.unit for r in tbl.rows if r.metric == m)
        claims.append(dict(
            id=f"{cid}/{m}", kind="perf", source=src,
            section=f"{cfg['section']}: {cfg['table']}", config=cid, metric=m,
            unit=unit, direction=direction(m), baseline=_num(tbl.get(m, bcol)),
            new=_num(tbl.get(m, ncol)),
            stated_gain_pct=gain.value if gain is not None and gain.unit == "%" else None,
            stated_gain_text=gain.text if gain is not None else "",
            stated_gain_decimals=_decimals(gain.text) if gain is not None else None,
            stated_note=_gain_note(gain.text) if gain is not None else "",
            baseline_label=bcol, new_label=ncol, lines=_lines(tbl, m), decimals=2,
            work=work))


def _accuracy(parsed, configs, claims) -> dict:
    """The lm_eval tables: one config per table, one accuracy claim per score; returns
    {(config, metric): (value, stderr)} for the parity claims."""
    eval_vals = {}
    for cid, cfg in EVAL_CONFIGS.items():
        src = cfg["source"]
        b = _find(parsed[src], "lm_eval", src, label_prefix=cfg["label"])
        configs[cid] = dict(source=src, section=b.label, preset=cfg["preset"],
                            hf_id=b.meta.get("model"), dtype=cfg["dtype"],
                            tp=b.meta.get("tp"), ep=b.meta.get("ep", 1) or 1,
                            engine=cfg["engine"], aiter=cfg["aiter"],
                            num_fewshot=b.meta.get("num_fewshot"),
                            batch_size=b.meta.get("batch_size"),
                            model_args=b.meta.get("model_args", {}))
        for r in b.rows:
            if r.metric.endswith("_stderr"):
                continue
            se = b.get(r.metric + "_stderr")
            eval_vals[(cid, r.metric)] = (r.value, se)
            claims.append(dict(
                id=f"{cid}/{r.metric}", kind="accuracy", source=src, section=b.label,
                config=cid, metric=r.metric, unit="", direction="higher",
                value=_num(r.value), stderr=_num(se), n_shot=r.column, lines=[r.line],
                decimals=4))
    return eval_vals


def _parity(eval_vals, configs, claims) -> None:
    """One parity claim per score of each PARITY_PAIRS pair: two scores that should agree."""
    for base_id, new_id, what in PARITY_PAIRS:
        for (cid, metric), (v, se) in list(eval_vals.items()):
            if cid != base_id:
                continue
            v2, se2 = eval_vals[(new_id, metric)]
            claims.append(dict(
                id=f"{new_id}/vs/{base_id}/{metric}", kind="parity", source=configs[cid]["source"],
                section=f"{configs[base_id]['section']} vs {configs[new_id]['section']}",
                config=new_id, baseline_config=base_id, metric=metric, unit="",
                direction="equal", baseline=_num(v), baseline_stderr=_num(se), new=_num(v2),
                new_stderr=_num(se2), what=what, decimals=4,
                lines=sorted(set(next(c["lines"] for c in claims if c["id"] == f"{x}/{metric}")[0]
                                 for x in (base_id, new_id)))))


def build_registry(sources_dir: str | Path = SOURCES_DIR) -> dict:
    """The registry: the parser's reading of the sources joined with the configs above."""
    sources_dir = Path(sources_dir)
    parsed = {name: parse_file(sources_dir / name) for name in (SEED_000, SEED_002)}
    configs, claims, blocks_out = {}, [], []
    for cid, cfg in PERF_CONFIGS.items():  # serving blocks (seed 000), comparison tables (002)
        side = _before_after if "baseline" in cfg else _comparison
        side(cid, cfg, parsed[cfg["source"]], configs, claims, blocks_out)
    _parity(_accuracy(parsed, configs, claims), configs, claims)
    return dict(
        version=1,
        generated_by="moe_lab.claims.registry.build_registry",
        note=("Every numeric claim of the two upstream PRs in data/claims/sources/. Numbers "
              "are read by moe_lab.claims.parser from the sources; configuration comes "
              "from the PR prose. perf: baseline vs new (stated_gain_pct where the PR "
              "states one); accuracy: one lm_eval score and its stderr; parity: two "
              "scores that should agree."),
        sources={SEED_000: dict(title="[ROCM] enable aiter fused moe kernel for llama4 bf16 checkpoints"),
                 SEED_002: dict(title="[V1] [ROCm] Enable EP with AITER Fused MoE")},
        configs=configs, blocks=blocks_out, claims=claims)


def checked(reg) -> dict:
    """`reg` itself when it is a claims registry (schema.registry_problem); else a
    UsageError in one line saying what is wrong (a dict handed to the API, not a file)."""
    problem = registry_problem(reg)
    if problem:
        raise UsageError(f"not a claims registry ({' '.join(problem.split())[:300]})")
    return reg


def load_registry(path: str | Path = REGISTRY_PATH) -> dict:
    """The registry JSON; a UsageError (one line naming the file) when the file is
    missing, unreadable, not UTF-8 JSON or not a claims registry."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no claims registry at {p}; run `python -m moe_lab.claims.registry`")
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{p}: cannot read the claims registry ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{p}: not a claims registry (not UTF-8 text: byte "
                         f"{exc.object[exc.start]:#04x} at offset {exc.start})") from None
    try:
        reg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    problem = registry_problem(reg)
    if problem:
        one_line = " ".join(problem.split())
        raise UsageError(f"{p}: not a claims registry ({one_line[:300]})")
    return reg


def write_registry(path: str | Path = REGISTRY_PATH) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(build_registry(), indent=1, ensure_ascii=False) + "\n")
    tmp.replace(p)
    return p


if __name__ == "__main__":
    print(write_registry())
