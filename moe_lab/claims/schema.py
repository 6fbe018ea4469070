"""What a claims registry must hold before any claim is checked: `registry_problem(reg)`
names the first thing that makes `reg` no registry, or returns None.

Every key a claim of each kind may have is listed (build_registry writes them): a key
outside the list is refused, so a misspelt `stated_gain_pct` is never read as "no gain
stated" and passed. Numbers are finite; the perf numbers, stderrs, durations and
request throughputs that divide or stand for a time or a rate are positive (or, for
stderrs and counts, not negative); units, directions, decimals and kinds are the ones
the verdicts and implications know."""
from __future__ import annotations

import math

# Keys every claim has, then per kind the keys it must have and those it may have.
CLAIM_KEYS = ("id", "kind", "source", "section", "config", "metric")
KIND_NEEDS = {
    "perf": ("unit", "direction", "baseline", "new", "baseline_label", "new_label"),
    "accuracy": ("value",),
    "parity": ("baseline_config", "baseline", "new", "baseline_stderr", "new_stderr"),
}
KIND_MAY = {
    "perf": ("stated_gain_pct", "stated_gain_text", "stated_gain_decimals", "stated_note",
             "lines", "decimals", "work"),
    "accuracy": ("unit", "direction", "stderr", "n_shot", "lines", "decimals"),
    "parity": ("unit", "direction", "what", "lines", "decimals"),
}
# what the parser writes (moe_lab.claims.lexicon): the units a claim may be in
UNITS = ("s", "ms", "us", "tok/s", "req/s", "%", "tok", "req", "")
DIRECTIONS = {"perf": ("lower", "higher"), "accuracy": ("higher",), "parity": ("equal",)}
NUMBERS = ("baseline", "new", "value", "baseline_stderr", "new_stderr")
BLOCK_KEYS = ("source", "kind", "section", "label", "config", "values")
BLOCK_KINDS = ("serving", "comparison")
POSITIVE_BLOCK_VALUES = ("duration", "request_throughput")  # they divide: never 0


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(what: str, k: str, v, *, low: float | None = None, strict: bool = False,
         none: bool = False) -> str | None:
    """Why `v` is not a finite number (>= low, or > low when strict; None allowed when
    none), or None."""
    if v is None and none:
        return None
    if not is_number(v):
        return f"{what}: {k!r} is {v!r}, not a finite number"
    if low is not None and (v <= low if strict else v < low):
        return f"{what}: {k!r} is {v!r}, not {'above' if strict else 'at least'} {low:g}"
    return None


def _decimals(what: str, k: str, v) -> str | None:
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 12):
        return None
    return f"{what}: {k!r} is {v!r}, not a whole number of decimals 0..12"


def _values(what: str, vals) -> str | None:
    """A block's or a claim's work numbers: metric -> a finite number >= 0 (or null)."""
    if not isinstance(vals, dict):
        return f"{what} is not an object"
    for m, v in vals.items():
        why = _num(what, m, v, low=0, none=True, strict=m in POSITIVE_BLOCK_VALUES)
        if why:
            return why
    return None


def claim_problem(i: int, c, configs: dict) -> str | None:
    if not isinstance(c, dict):
        return f"claims[{i}] is not an object"
    what = f"claims[{i}] ({c.get('id', 'no id')})"
    for k in CLAIM_KEYS:
        if k not in c:
            return f"{what} has no {k!r}"
        if not isinstance(c[k], str) or (k != "section" and not c[k]):
            return f"{what}: {k!r} is {c[k]!r}, not a name"
    kind = c["kind"]
    if kind not in KIND_NEEDS:
        return f"{what}: kind {kind!r} is not one of {', '.join(KIND_NEEDS)}"
    needs = sorted(KIND_NEEDS[kind], key=lambda k: k not in NUMBERS)  # its numbers first
    for k in needs:
        if k not in c:
            return f"{what} has no {k!r} (a {kind} claim needs it)"
        if k in NUMBERS and not is_number(c[k]):
            return f"{what}: {k!r} is {c[k]!r}, not a finite number"
    extra = sorted(set(c) - set(CLAIM_KEYS) - set(KIND_NEEDS[kind]) - set(KIND_MAY[kind]))
    if extra:
        return (f"{what}: unknown key {', '.join(map(repr, extra))} for a {kind} claim "
                f"(it may have {', '.join(KIND_NEEDS[kind] + KIND_MAY[kind])})")
    for k in ("config", "baseline_config"):
        if k in c and c[k] not in configs:
            return f"{what}: {k} {c[k]!r} is not in 'configs'"
    if "unit" in c and c["unit"] not in UNITS:
        return f"{what}: unit {c['unit']!r} is not one of {', '.join(repr(u) for u in UNITS)}"
    if "direction" in c and c["direction"] not in DIRECTIONS[kind]:
        return (f"{what}: direction {c['direction']!r} is not "
                f"{' or '.join(repr(d) for d in DIRECTIONS[kind])}")
    for k in ("stated_gain_text", "stated_note", "baseline_label", "new_label", "what", "n_shot"):
        if k in c and not isinstance(c[k], str):
            return f"{what}: {k!r} is {c[k]!r}, not text"
    checks = {
        "perf": lambda: (_num(what, "baseline", c["baseline"], low=0, strict=True)
                         or _num(what, "new", c["new"], low=0, strict=True)
                         or _num(what, "stated_gain_pct", c.get("stated_gain_pct"), none=True)
                         or _decimals(what, "stated_gain_decimals", c.get("stated_gain_decimals"))
                         or _work(what, c.get("work"))),
        "accuracy": lambda: (_num(what, "value", c["value"])
                             or _num(what, "stderr", c.get("stderr"), low=0, none=True)),
        "parity": lambda: (_num(what, "baseline", c["baseline"]) or _num(what, "new", c["new"])
                           or _num(what, "baseline_stderr", c["baseline_stderr"], low=0)
                           or _num(what, "new_stderr", c["new_stderr"], low=0)),
    }
    why = checks[kind]() or _decimals(what, "decimals", c.get("decimals"))
    if why:
        return why
    if "lines" in c and not (isinstance(c["lines"], list) and all(
            isinstance(n, int) and not isinstance(n, bool) for n in c["lines"])):
        return f"{what}: 'lines' is {c['lines']!r}, not a list of line numbers"
    return None


def _work(what: str, work) -> str | None:
    if work is None:
        return None
    if not isinstance(work, dict) or set(work) != {"baseline", "new"}:
        return f"{what}: 'work' is {work!r}, not an object of 'baseline' and 'new'"
    return _values(f"{what} work.baseline", work["baseline"]) or _values(
        f"{what} work.new", work["new"])


def block_problem(i: int, b, configs: dict) -> str | None:
    if not isinstance(b, dict):
        return f"blocks[{i}] is not an object"
    for k in BLOCK_KEYS:
        if k not in b:
            return f"blocks[{i}] has no {k!r}"
    if b["kind"] not in BLOCK_KINDS:
        return f"blocks[{i}]: kind {b['kind']!r} is not one of {', '.join(BLOCK_KINDS)}"
    if b["config"] not in configs:
        return f"blocks[{i}]: config {b['config']!r} is not in 'configs'"
    if not isinstance(b["values"], dict):
        return f"blocks[{i}]: 'values' is not an object"
    if b["kind"] == "serving":
        return _values(f"blocks[{i}] values", b["values"])
    for col, vals in b["values"].items():
        why = _values(f"blocks[{i}] values[{col!r}]", vals)
        if why:
            return why
    return None


def config_problem(cid: str, cfg) -> str | None:
    what = f"configs[{cid!r}]"
    if not isinstance(cfg, dict):
        return f"{what} is not an object"
    if not isinstance(cfg.get("source"), str):
        return f"{what} has no 'source'"
    for k in ("concurrency", "tp", "ep", "num_prompts", "input_len", "output_len"):
        v = cfg.get(k)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            return f"{what}: {k!r} is {v!r}, not a whole number above 0"
    if "concurrency" in cfg and not isinstance(cfg.get("tp"), int):
        return f"{what} has no 'tp' (a serving configuration needs it)"
    for k in ("preset", "dtype", "gpu"):
        if k in cfg and not isinstance(cfg[k], str):
            return f"{what}: {k!r} is {cfg[k]!r}, not a name"
    return None


def registry_problem(reg) -> str | None:
    """What makes `reg` not a claims registry (the first problem found), or None."""
    if not isinstance(reg, dict):
        return f"top level is a JSON {type(reg).__name__}, not an object"
    for key, typ in (("claims", list), ("configs", dict)):
        if not isinstance(reg.get(key), typ):
            return f"no {key!r} {typ.__name__}"
    if not isinstance(reg.get("blocks", []), list):
        return "'blocks' is not a list"
    for cid, cfg in reg["configs"].items():
        why = config_problem(cid, cfg)
        if why:
            return why
    seen = set()
    for i, c in enumerate(reg["claims"]):
        why = claim_problem(i, c, reg["configs"])
        if why:
            return why
        if c["id"] in seen:
            return f"claims[{i}]: id {c['id']!r} is given twice"
        seen.add(c["id"])
    for i, b in enumerate(reg.get("blocks", [])):
        why = block_problem(i, b, reg["configs"])
        if why:
            return why
    return None
