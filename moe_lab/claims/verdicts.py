"""Check every registry claim: pass / warn / fail, with the reason.

Checks, all respecting the rounding of the printed numbers (a value printed with d
decimals stands for the interval value +- 0.5*10^-d; a check passes when some values
inside the intervals satisfy it):

* gain: the stated gain against the gain recomputed from the stated baseline and new
  numbers, and its sign against the "(better)" note and the metric's direction.
* consistency (per serving block): total generated tokens / duration against the stated
  output throughput, requests / duration against request throughput, (input + output
  tokens) / duration against total token throughput; for comparison tables, the input
  tokens per request implied by (total - output) / request throughput against the
  stated input length. Also whether the requested output length was actually generated.
* comparability: throughputs and durations compare the same work only if both runs
  generated the same tokens per request. When they did not, say so and point to the
  honest metric: mean TPOT (time per output token, independent of how many were made).
* accuracy: an lm_eval score's stderr against the binomial stderr of GSM8K's 1319
  questions; a score with no reference configuration is unverifiable (warn).
* parity: two scores that should agree, |diff| against PARITY_SE * sqrt(se1^2 + se2^2)
  (PARITY_SE = 2: notebook 04's error bars and every verdict's text read it).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .registry import checked, load_registry
from ..storage.checked import columns, takes

ORDER = {"pass": 0, "warn": 1, "fail": 2}
GSM8K_N = 1319  # GSM8K test split; gsm8k_cot uses the same questions
WORK_DEPENDENT = {"duration", "request_throughput", "output_throughput", "total_token_throughput"}
COMPARABLE_TOL = 0.01  # relative difference in tokens per request still called equal work
PARITY_SE = 2  # parity: two scores agree within this many combined standard errors


def half_ulp(decimals: int) -> float:
    return 0.5 * 10.0 ** (-decimals)


def ratio_interval(num: float, den: float, dn: float, dd: float) -> tuple[float, float]:
    """[min, max] of num'/den' over num' in num+-dn, den' in den+-dd (positive values)."""
    return (num - dn) / (den + dd), (num + dn) / (den - dd)


def gain_interval(baseline: float, new: float, decimals: int = 2) -> tuple[float, float]:
    """Range of the percent change new/baseline - 1 over the rounding intervals."""
    h = half_ulp(decimals)
    lo, hi = ratio_interval(new, baseline, h, h)
    return (lo - 1) * 100, (hi - 1) * 100


def gain_pct(baseline: float, new: float) -> float:
    return (new / baseline - 1) * 100


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


@dataclass
class Verdict:
    status: str
    reason: str


def _worst(verdicts: list[Verdict]) -> Verdict:
    if not verdicts:
        return Verdict("pass", "")
    status = max((v.status for v in verdicts), key=ORDER.get)
    # the reasons that decide the status first
    ordered = sorted(verdicts, key=lambda v: -ORDER[v.status])
    return Verdict(status, "; ".join(v.reason for v in ordered if v.reason))


def _fmt_pct(x: float) -> str:
    return f"{x:+.1f}%"


# ------------------------------------------------------------------------- perf
_FIRST_NUMBER = re.compile(r"\d+(?:\.(\d+))?")


def stated_decimals(c: dict) -> int:
    """Decimals the stated gain was printed with: the registry's stated_gain_decimals,
    else counted in stated_gain_text ('-35.35% (better)' -> 2), else 1 (PRs print
    gains as '+85.9%')."""
    if c.get("stated_gain_decimals") is not None:
        return int(c["stated_gain_decimals"])
    m = _FIRST_NUMBER.search(c.get("stated_gain_text") or "")
    return len(m.group(1) or "") if m else 1


def check_gain(c: dict) -> Verdict:
    b, n, d = c["baseline"], c["new"], c.get("decimals", 2)
    lo, hi = gain_interval(b, n, d)
    point = gain_pct(b, n)
    better = (point > 0) == (c["direction"] == "higher") if point != 0 else None
    word = "better" if better else ("worse" if better is not None else "unchanged")
    if c.get("stated_gain_pct") is None:
        return Verdict("pass", f"no gain stated; recomputed {_fmt_pct(point)} ({word})")
    g = c["stated_gain_pct"]
    # the stated gain stands for the interval of its own rounding, no wider: "-35.3%"
    # is -35.35..-35.25, "-35.35%" is -35.355..-35.345
    stated = (g - half_ulp(stated_decimals(c)), g + half_ulp(stated_decimals(c)))
    if not overlaps((lo, hi), stated):
        return Verdict("fail", f"stated {c.get('stated_gain_text') or _fmt_pct(g)} but "
                       f"{b} -> {n} gives {_fmt_pct(point)} "
                       f"(range {lo:+.2f}..{hi:+.2f}% over the rounding)")
    note = (c.get("stated_note") or "").lower()
    if note in ("better", "worse") and better is not None and (note == "better") != better:
        return Verdict("fail", f"stated as {note} but {c['metric']} moved "
                       f"{'up' if point > 0 else 'down'} ({'lower' if c['direction'] == 'lower' else 'higher'} is better)")
    return Verdict("pass", f"stated {_fmt_pct(g)} matches recomputed {_fmt_pct(point)} ({word})")


def tokens_per_request(work: dict, decimals: int = 2) -> tuple[float, float, str] | None:
    """(lo, hi, how) generated tokens per request from a side's work numbers."""
    if work.get("total_output_tokens") is not None and work.get("completed"):
        v = work["total_output_tokens"] / work["completed"]
        return v, v, f"{work['total_output_tokens']:.0f} tokens / {work['completed']:.0f} requests"
    if work.get("output_throughput") and work.get("request_throughput"):
        h = half_ulp(decimals)
        lo, hi = ratio_interval(work["output_throughput"], work["request_throughput"], h, h)
        return lo, hi, (f"{work['output_throughput']} tok/s / {work['request_throughput']} req/s")
    return None


def honest_alternative(claim: dict, registry: dict) -> str:
    """The per-token metric of the same configuration: mean TPOT's change."""
    mine = {c["metric"]: c for c in registry["claims"]
            if c["config"] == claim["config"] and c["kind"] == "perf"}
    tpot, itl = mine.get("mean_tpot"), mine.get("mean_itl")
    pick, why = tpot, "mean TPOT"
    if tpot and itl and abs(tpot["baseline"] / itl["baseline"] - 1) > 0.2:
        pick, why = itl, "mean ITL (mean TPOT is skewed here, see tpot_vs_itl)"
    if pick is None:
        return "compare per-token metrics (TPOT/ITL) instead"
    g = gain_pct(pick["baseline"], pick["new"])
    eq = (pick["baseline"] / pick["new"] - 1) * 100
    return (f"the honest metric is {why} ({pick['baseline']} -> {pick['new']} {pick['unit']}, "
            f"{_fmt_pct(g)}, i.e. {_fmt_pct(eq)} decode throughput per sequence); "
            "request throughput compares only at equal work")


def check_comparability(c: dict, registry: dict) -> Verdict | None:
    if c["metric"] not in WORK_DEPENDENT or not c.get("work"):
        return None
    tb = tokens_per_request(c["work"]["baseline"], c.get("decimals", 2))
    tn = tokens_per_request(c["work"]["new"], c.get("decimals", 2))
    if tb is None or tn is None:
        return Verdict("warn", "cannot tell whether both runs did the same work "
                       "(no generated-token counts)")
    mid_b, mid_n = (tb[0] + tb[1]) / 2, (tn[0] + tn[1]) / 2
    rel = mid_n / mid_b - 1
    if overlaps(tb[:2], tn[:2]) or abs(rel) <= COMPARABLE_TOL:
        return Verdict("pass", f"equal work: {mid_b:.0f} vs {mid_n:.0f} generated tokens per request")
    wb, wn = c["work"]["baseline"], c["work"]["new"]
    if wb.get("total_output_tokens") is not None and wn.get("total_output_tokens") is not None:
        what = (f"baseline generated {wb['total_output_tokens']:.0f} tokens vs "
                f"{wn['total_output_tokens']:.0f} new ({_fmt_pct(rel * 100)})")
    else:
        what = (f"generated tokens per request differ: {mid_b:.0f} baseline vs {mid_n:.0f} "
                f"new ({_fmt_pct(rel * 100)}, from output/request throughput)")
    return Verdict("warn", f"incomparable: {what}; {honest_alternative(c, registry)}")


def check_perf(c: dict, registry: dict) -> Verdict:
    vs = [check_gain(c)]
    comp = check_comparability(c, registry)
    if comp is not None:
        vs.append(comp)
    return _worst(vs)


# -------------------------------------------------------------- block consistency
def _cons(name: str, stated: float, num: float, den: float, dn: float, dd: float,
          decimals: int = 2) -> Verdict:
    lo, hi = ratio_interval(num, den, dn, dd)
    h = half_ulp(decimals)
    if overlaps((lo, hi), (stated - h, stated + h)):
        return Verdict("pass", f"{name} {stated} = {num:g}/{den:g} ({(lo + hi) / 2:.2f})")
    rel = stated / ((lo + hi) / 2) - 1 if lo + hi else math.inf  # 0 requests: no rate
    status = "warn" if abs(rel) < 0.01 else "fail"
    return Verdict(status, f"{name} stated {stated} but {num:g}/{den:g} = "
                   f"{(lo + hi) / 2:.2f} ({_fmt_pct(rel * 100)})")


def check_serving_block(vals: dict, cfg: dict) -> list[tuple[str, Verdict]]:
    out = []
    dur = vals.get("duration")
    h = half_ulp(2)
    if dur:
        if vals.get("total_output_tokens") is not None and vals.get("output_throughput") is not None:
            out.append(("output_throughput", _cons("output throughput", vals["output_throughput"],
                                                   vals["total_output_tokens"], dur, 0, h)))
        if vals.get("completed") is not None and vals.get("request_throughput") is not None:
            out.append(("request_throughput", _cons("request throughput", vals["request_throughput"],
                                                    vals["completed"], dur, 0, h)))
        if None not in (vals.get("total_input_tokens"), vals.get("total_output_tokens"),
                        vals.get("total_token_throughput")):
            out.append(("total_token_throughput", _cons(
                "total token throughput", vals["total_token_throughput"],
                vals["total_input_tokens"] + vals["total_output_tokens"], dur, 0, h)))
    out += _tpot_vs_itl(vals, "")
    if cfg.get("output_len") and vals.get("total_output_tokens") and vals.get("completed"):
        per = vals["total_output_tokens"] / vals["completed"]
        out.append(("output_len", _len_verdict(per, cfg["output_len"])))
    return out


def _tpot_vs_itl(vals: dict, prefix: str) -> list[tuple[str, Verdict]]:
    """Mean TPOT (per request) and mean ITL (per token gap) both estimate the decode step;
    a large gap means a few short requests dominate the per-request mean."""
    t, i = vals.get("mean_tpot"), vals.get("mean_itl")
    if t is None or i is None or not i:
        return []
    rel = t / i - 1
    name = f"tpot_vs_itl{prefix and '[' + prefix + ']'}"
    what = f"{prefix + ': ' if prefix else ''}mean TPOT {t} ms vs mean ITL {i} ms ({_fmt_pct(rel * 100)})"
    if abs(rel) <= 0.2:
        return [(name, Verdict("pass", what))]
    return [(name, Verdict("warn", what + ": per-request TPOT is skewed (few short requests "
                           "with slow tokens); use ITL for the decode-step time"))]


def _len_verdict(per: float, requested: int) -> Verdict:
    if per >= 0.95 * requested:
        return Verdict("pass", f"{per:.0f} of {requested} requested output tokens per request generated")
    return Verdict("warn", f"only {per:.0f} of {requested} requested output tokens per request "
                   "were generated (requests stopped at EOS: output length not controlled, "
                   "use --ignore-eos)")


def check_comparison_block(cols: dict, cfg: dict) -> list[tuple[str, Verdict]]:
    out = []
    h = half_ulp(2)
    for col, v in cols.items():
        if None in (v.get("total_token_throughput"), v.get("output_throughput"), v.get("request_throughput")):
            continue
        inp = v["total_token_throughput"] - v["output_throughput"]
        lo, hi = ratio_interval(inp, v["request_throughput"], 2 * h, h)
        if cfg.get("input_len"):
            isl = cfg["input_len"]
            ok = lo <= isl * 1.05 and hi >= isl * 0.95
            out.append((f"input_len[{col}]", Verdict(
                "pass" if ok else "warn",
                f"{col}: (total - output) / request throughput = {(lo + hi) / 2:.0f} input "
                f"tokens per request vs ISL {isl}" + ("" if ok else " (does not match)"))))
        out += _tpot_vs_itl(v, col)
        if cfg.get("output_len"):
            lo2, hi2 = ratio_interval(v["output_throughput"], v["request_throughput"], h, h)
            out.append((f"output_len[{col}]", Verdict(
                _len_verdict((lo2 + hi2) / 2, cfg["output_len"]).status,
                f"{col}: " + _len_verdict((lo2 + hi2) / 2, cfg["output_len"]).reason)))
    return out


# ----------------------------------------------------------------------- accuracy
def binomial_n_interval(p: float, se: float, decimals: int = 4) -> tuple[float, float]:
    """Sample sizes n with sqrt(p(1-p)/(n-1)) = se, over the rounding of p and se."""
    h = half_ulp(decimals)
    ps = [p - h, p, p + h]
    vs = [max(q * (1 - q), 0.0) for q in ps]
    return min(vs) / (se + h) ** 2 + 1, max(vs) / max(se - h, 1e-12) ** 2 + 1


def check_accuracy(c: dict, registry: dict) -> Verdict:
    vs = []
    p, se = c["value"], c.get("stderr")
    if not 0 <= p <= 1:
        return Verdict("fail", f"score {p} is not a fraction in [0, 1]")
    if se is not None and "gsm8k" in c["metric"]:
        lo, hi = binomial_n_interval(p, se, c.get("decimals", 4))
        if lo <= GSM8K_N <= hi:
            vs.append(Verdict("pass", f"{p} ± {se}: stderr matches {GSM8K_N} GSM8K questions"))
        else:
            vs.append(Verdict("warn", f"{p} ± {se}: stderr implies {lo:.0f}..{hi:.0f} questions, "
                              f"not GSM8K's {GSM8K_N}"))
    paired = [x for x in registry["claims"] if x["kind"] == "parity" and x["metric"] == c["metric"]
              and c["config"] in (x["config"], x["baseline_config"])]
    if paired:
        vs.append(Verdict("pass", "reference score in the source: see parity "
                          + ", ".join(x["baseline_config"] if x["config"] == c["config"] else x["config"]
                                      for x in paired)))
    else:
        vs.append(Verdict("warn", "no score without the change for this configuration in the "
                          "source: accuracy parity is unverifiable"))
    return _worst(vs)


def check_parity(c: dict) -> Verdict:
    diff = c["new"] - c["baseline"]
    se = math.hypot(c["baseline_stderr"], c["new_stderr"])
    z = diff / se if se else math.inf
    txt = (f"{c['baseline']} -> {c['new']} ({diff:+.4f}; combined se {se:.4f}, "
           f"{z:+.1f} se) [{c.get('what', '')}]")
    if abs(diff) <= PARITY_SE * se:
        return Verdict("pass", f"within {PARITY_SE:g} se: {txt}")
    return Verdict("fail", f"differs by more than {PARITY_SE:g} combined se: {txt}")


# ---------------------------------------------------------------------------- run
COLUMNS = ["id", "kind", "source", "section", "config", "metric", "baseline", "new",
           "stated_gain_pct", "recomputed_gain_pct", "status", "reason"]


def run_checks(registry: dict | None = None):
    """One row per claim and per block consistency check, as a pandas DataFrame."""
    import pandas as pd
    reg = registry if registry is not None else load_registry()
    checked(reg)
    rows = []
    for c in reg["claims"]:
        if c["kind"] == "perf":
            v = check_perf(c, reg)
            rec = gain_pct(c["baseline"], c["new"])
            base, new = c["baseline"], c["new"]
        elif c["kind"] == "accuracy":
            v, rec, base, new = check_accuracy(c, reg), math.nan, math.nan, c["value"]
        elif c["kind"] == "parity":
            v = check_parity(c)
            rec, base, new = (c["new"] - c["baseline"]) * 100, c["baseline"], c["new"]
        else:
            v, rec, base, new = Verdict("warn", f"unknown claim kind {c['kind']!r}"), math.nan, math.nan, math.nan
        rows.append(dict(id=c["id"], kind=c["kind"], source=c["source"], section=c["section"],
                         config=c["config"], metric=c["metric"], baseline=base, new=new,
                         stated_gain_pct=c.get("stated_gain_pct"), recomputed_gain_pct=rec,
                         status=v.status, reason=v.reason))
    for b in reg.get("blocks", []):
        cfg = reg["configs"].get(b["config"], {})
        checks = (check_serving_block(b["values"], cfg) if b["kind"] == "serving"
                  else check_comparison_block(b["values"], cfg))
        for name, v in checks:
            rows.append(dict(id=f"{b['config']}/{b['label']}/consistency/{name}",
                             kind="consistency", source=b["source"],
                             section=f"{b['section']}: {b['label']}" if b["section"] else b["label"],
                             config=b["config"], metric=name, baseline=math.nan, new=math.nan,
                             stated_gain_pct=None, recomputed_gain_pct=math.nan,
                             status=v.status, reason=v.reason))
    if not rows:  # before: '0 checks', exit 0 even with --strict: a check that checked nothing
        from ..core.errors import UsageError
        raise UsageError("the registry has nothing to check: no claims and no blocks")
    return pd.DataFrame(rows, columns=COLUMNS)


@takes("claims.summary", df=columns("status"))
def summary(df) -> dict[str, int]:
    return {s: int((df["status"] == s).sum()) for s in ORDER}


def shown(df, show=None):
    """The checks of the statuses in `show`: None (every check), a status or a list of them
    (notebook 04's `show`; from `moe-lab report -p show X` the text warn, warn,fail or
    ['warn','fail']); UsageError, one line, for any other."""
    import ast

    from ..core.errors import UsageError
    items = show
    if isinstance(show, str):  # `report -p show X` hands over text: 'warn', 'warn,fail' or
        # "['warn','fail']" (the parameters cell's own example, refused before as not a list)
        try:
            items = ast.literal_eval(show) if show.strip().startswith(("[", "(")) else None
        except (ValueError, SyntaxError):
            items = None
        if not isinstance(items, (list, tuple)):
            items = [x.strip() for x in show.split(",")]
    if show is not None and not (isinstance(items, (list, tuple, set)) and items and all(
            isinstance(x, str) and x in ORDER for x in items)):
        raise UsageError(f"show {show!r}: give None, a status or a list of them "
                         f"({', '.join(ORDER)})")
    return df if show is None else df[df["status"].isin(list(items))]


def format_report(df, width: int = 0) -> str:
    lines = []
    for _, r in df.iterrows():
        lines.append(f"{r['status'].upper():4s}  {r['id']}  {r['reason']}")
    s = summary(df)
    lines.append(f"{len(df)} checks: {s['pass']} pass, {s['warn']} warn, {s['fail']} fail")
    return "\n".join(lines)
