"""moe_lab.analysis.targets: one Target record per target, in one file, and one evaluation.
On hand-made frames: a point exactly at its limit meets it and just below misses by the
difference; each target takes its own token range (the two FP8 1.5x targets are two
records, 16-256 and 4096+ tokens); the glue limit is 3x the phase's floor + 20 us; the
summary names the worst miss (by the us to remove), not the first or the least, and its
median is the median; what holds a point back is the ledger's phase with the most time
above its floor (the gaps included), one answer for every target."""
import ast
import math
import re
from pathlib import Path

import pandas as pd
import pytest

import moe_lab
from moe_lab.cost import ledger as lg
from moe_lab.analysis import ledger as aled
from moe_lab.analysis import metrics, targets as tg
from moe_lab.core.devices import Ceilings

CEIL = Ceilings("test GPU", 700.0, None, 4.0, "measured")


def test_one_target_type_and_one_file_of_targets():
    """A class or namedtuple named Target, and TARGETS, are defined once in the package;
    every record has a name, what it measures, a token range, a limit and a unit."""
    found = []
    for p in Path(moe_lab.__file__).parent.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ClassDef) and n.name == "Target":
                found.append(p.name)
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") in ("Target", "TARGETS",
                                                                          "PROMISE_X")
                                                 for t in n.targets):
                found.append(p.name)
    assert sorted(found) == ["targets.py", "targets.py"], found
    names = [t.name for t in tg.TARGETS]
    assert len(names) == len(set(names))
    for t in tg.TARGETS:
        assert t.measures and t.metric and t.unit is not None and t.lo <= t.hi
    fp8 = [t for t in tg.TARGETS if t.metric == "fp8_speedup" and t.limit == 1.5]
    assert sorted((t.lo, t.hi) for t in fp8) == [(16, 256), (4096, float("inf"))]


def roof_row(tokens, pct_of_roof=50.0, pct_of_gemm_peak=10.0, model="deepseek-r1", pid=None,
             median_us=100.0):
    return dict(model=model, sharding="TP8", tokens=tokens, dtype="bf16",
                choice="aiter-triton default", pct_of_roof=pct_of_roof,
                pct_of_gemm_peak=pct_of_gemm_peak, median_us=median_us,
                point_id=pid or f"{model}-{tokens}")


def evaluate_roof(*rows, ledger_df=None):
    return tg.evaluate(metrics.roof_metrics(pd.DataFrame(list(rows))), ledger_df)


def test_exactly_at_the_target_passes_and_just_below_misses_by_the_difference():
    t = evaluate_roof(roof_row(16, 85.0), roof_row(32, 84.9), roof_row(64, 97.0),
                      roof_row(8, 50.0), roof_row(1, 12.5), roof_row(4096, 1.0, 60.0),
                      roof_row(8192, 99.0, 59.0)).set_index("tokens")
    assert t.loc[16, "met"] and t.loc[16, "by"] == 0
    assert not t.loc[32, "met"] and t.loc[32, "by"] == pytest.approx(0.1)
    assert t.loc[64, "met"] and t.loc[8, "met"] and not t.loc[1, "met"]
    assert t.loc[1, "by"] == pytest.approx(37.5)
    assert t.loc[1, "by_us"] == pytest.approx(100 * (1 - 12.5 / 50))  # to 50%: 75 us off 100
    # >= 4096 tokens is judged on the GEMM peak, not the roof
    assert t.loc[4096, "met"] and t.loc[4096, "value"] == 60.0
    assert not t.loc[8192, "met"] and t.loc[8192, "by"] == pytest.approx(1.0)
    assert t.loc[16, "target"].startswith("16-64") and t.loc[8, "target"].startswith("<16")


def test_token_counts_outside_every_range_get_no_target():
    t = evaluate_roof(roof_row(15), roof_row(65), roof_row(128), roof_row(4095), roof_row(4096))
    assert sorted(t["tokens"]) == [15, 4096]
    assert list(t[t["tokens"] == 15]["target"]) == ["<16 tokens: >= 50% of roof"]
    assert evaluate_roof(roof_row(128)).empty


def test_the_summary_counts_and_names_the_worst_miss_and_the_median():
    before = metrics.roof_metrics(pd.DataFrame([roof_row(16, 90.0), roof_row(32, 50.0),
                                                roof_row(64, 50.0, model="qwen3-235b-a22b")]))
    led = pd.DataFrame([dict(point_id="deepseek-r1-32", phase="align", over_us=9.0),
                        dict(point_id="deepseek-r1-32", phase="gemm1", over_us=3.0)])
    t = tg.evaluate(metrics.roof_metrics(pd.DataFrame([
        roof_row(16, 85.0), roof_row(32, 60.0), roof_row(64, 80.0, model="qwen3-235b-a22b")])),
        led, before=before)
    s = tg.summary(t).set_index("target").loc["16-64 tokens: >= 85% of roof"]
    assert (s["points"], s["met"], s["missed"], s["met_before"]) == (3, 1, 2, 1)
    assert s["worst_by"] == 25.0 and s["worst_at"] == "deepseek-r1 TP8 32 aiter-triton default"
    assert s["held_back_by"] == "align"
    assert s["median"] == 80.0  # of 85, 60, 80 (the mean: 75)
    q = t[t["model"] == "qwen3-235b-a22b"].iloc[0]
    assert q["held_back_by"] == tg.NO_KERNELS  # the ledger has no row of that point


def test_what_holds_a_point_back_is_the_ledgers_largest_excess_over_its_floor_or_the_gaps():
    """held_back_by reads the ledger (moe_lab.analysis.ledger, on moe_lab.cost.ledger's
    floors: the one cost model of a phase), so gemm1, the largest phase but only 50 us above
    its floor, gives way to act; a point whose kernels cover 45 of a 100 us replay is held
    back by its gaps."""
    res = pd.DataFrame([
        dict(point_id="a", model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype="bf16",
             routing="uniform", tokens=4096, backend="aiter-triton", config="default",
             mode="graph", status="ok", median_us=900.0, pairs=32768, experts_hit=256,
             device="nowhere"),
        dict(point_id="b", model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype="bf16",
             routing="uniform", tokens=1, backend="aiter-triton", config="default",
             mode="graph", status="ok", median_us=100.0, pairs=8, experts_hit=8,
             device="nowhere")])
    from moe_lab.core.problems import make_problem
    floors = lg.phase_floors(make_problem("deepseek-r1", 4096, "bf16", 8, 1), None,
                             experts_hit=256, pairs=32768, ceilings=CEIL)
    g1 = floors["gemm1"]["floor_us"]
    k = pd.DataFrame([dict(point_id=p, kernel=ph, phase=ph, calls=1.0, total_us=us)
                      for p, ph, us in (("a", "gemm1", g1 + 50), ("a", "act", 120.0),
                                        ("a", "gemm2", 150.0), ("b", "gemm1", 20.0),
                                        ("b", "align", 25.0))])
    led = aled.ledger(res, k)
    led = led.assign(floor_us=led["phase"].map({p: f["floor_us"] for p, f in floors.items()})
                     .where(led["point_id"] == "a", led["floor_us"]).fillna(0.0))
    led["over_us"] = (led["measured_us"] - led["floor_us"]).clip(lower=0)
    assert tg.held_back_by(led, "a") == "act"
    assert tg.held_back_by(led, "a", exclude=("act", lg.GAPS)) == "gemm1"  # gaps: 95 us
    assert tg.held_back_by(led, "b") == lg.GAPS  # 55 us of gaps, 25 of align
    assert tg.held_back_by(led, "c") == tg.NO_KERNELS
    # a ledger put together from frames that repeat index labels (notebook 05 with `run`
    # given concatenates that run's ledger with the ledger runs', the same run): still one
    # phase's name, not a Series' repr ("177    gaps\n177    gaps\nName: phase, ...")
    twice = pd.concat([led, led])
    assert tg.held_back_by(twice, "a") == "act" and tg.held_back_by(twice, "b") == lg.GAPS
    assert tg.held_back_by(pd.concat([led, led.iloc[::-1]]), "a") == "act"


def _res(pid, tokens, dtype, backend, median, mode="graph", status="ok"):
    return dict(point_id=pid, model="m", tp=8, ep=1, ep_rank=0, dtype=dtype, routing="uniform",
                tokens=tokens, backend=backend, config="default", mode=mode, status=status,
                median_us=median)


def _led(pid, **phases):
    """Ledger rows of one point: phase=(measured, floor)."""
    return [dict(point_id=pid, phase=ph, measured_us=m, floor_us=f,
                 over_us=max(m - f, 0.0)) for ph, (m, f) in phases.items()]


def test_the_ledgers_targets_on_a_hand_made_frame():
    res = pd.DataFrame([
        _res("a", 256, "bf16", "A", 100.0), _res("b", 256, "bf16", "B", 90.0),  # b is best
        _res("c", 256, "bf16", "C", 10.0, status="incorrect"),  # never the best
        _res("e", 256, "bf16", "B", 5.0, mode="eager"),  # another mode
        _res("g", 1024, "bf16", "B", 1000.0),
        _res("h", 64, "bf16", "B", 100.0), _res("i", 64, "fp8-block128", "F", 70.0),
        _res("j", 512, "bf16", "B", 100.0), _res("k", 512, "fp8-block128", "F", 110.0),
        _res("l", 4096, "bf16", "B", 300.0), _res("n", 4096, "fp8-block128", "F", 250.0)])
    led = pd.DataFrame(
        _led("b", act=(49.0, 10.0),       # limit 3*10 + 20 = 50: met
             align=(22.0, 1.0),           # 22 > 3x1 but <= 3 + 20: met by the allowance
             combine=(25.0, 1.0),         # limit 23: missed by 2 us
             gemm1=(60.0, 50.0))
        + _led("g", gemm1=(500.0, 400.0), gemm2=(200.0, 150.0), act=(250.0, 10.0),
               align=(30.0, 10.0), gaps=(20.0, 0.0))
        + _led("i", quant=(40.0, 2.0), gemm1=(20.0, 10.0))
        + _led("k", quant=(60.0, 2.0), gemm1=(40.0, 10.0))
        + _led("n", gemm1=(200.0, 10.0))
        + _led("j", gemm1=(50.0, 40.0)) + _led("h", gemm1=(50.0, 40.0))
        + _led("l", gemm1=(50.0, 40.0)))
    t = tg.evaluate(metrics.ledger_metrics(led, res), led)
    t = t.set_index(["target", "tokens", "phase"]).sort_index()
    glue = "glue <= 3x floor + 20 us"
    assert set(t.loc[(glue, 256)].index) == {"act", "align", "combine"}
    assert t.loc[(glue, 256, "act"), "met"] and t.loc[(glue, 256, "align"), "met"]
    miss = t.loc[(glue, 256, "combine")]
    assert not miss["met"] and miss["by_us"] == pytest.approx(2.0)
    assert miss["limit"] == 23.0 and miss["held_back_by"] == "combine"
    assert miss["backend"] == "B default"  # the best ok graph row, not A, C or the eager one
    # GEMM share at 1024: 700 of 1000 us = 70% < 75%; act has the most over its floor
    g = t.loc[("gemm >= 75% of layer", 1024, "")]
    assert g["value"] == pytest.approx(70.0) and not g["met"] and g["held_back_by"] == "act"
    assert g["by"] == pytest.approx(5.0) and g["by_us"] == pytest.approx(1000 - 700 / 0.75)
    # fp8 at 64: 100/70 = 1.43x: not 1.5x faster (missed), not slower (met)
    f15 = t.loc[("fp8 >= 1.5x bf16, 16-256 tokens", 64, "")]
    assert f15["value"] == pytest.approx(100 / 70) and not f15["met"]
    assert f15["held_back_by"] == "quant" and f15["by_us"] == pytest.approx(70 - 100 / 1.5)
    assert f15["backend"] == "F default" and f15["dtype"] == "fp8-block128"
    assert t.loc[("fp8 not slower than bf16", 64, ""), "met"]
    # at 512 only "never slower" applies: 110 us against 100 is missed by 10 us
    assert ("fp8 >= 1.5x bf16, 16-256 tokens", 512, "") not in t.index
    assert ("fp8 >= 1.5x bf16, 4096+ tokens", 512, "") not in t.index
    slow = t.loc[("fp8 not slower than bf16", 512, "")]
    assert not slow["met"] and slow["by_us"] == pytest.approx(10.0)
    # 4096: the prefill target (1.2x: missed, gemm1) and never slower (met)
    pre = t.loc[("fp8 >= 1.5x bf16, 4096+ tokens", 4096, "")]
    assert pre["value"] == pytest.approx(1.2) and not pre["met"] and pre["held_back_by"] == "gemm1"
    assert t.loc[("fp8 not slower than bf16", 4096, ""), "met"]
    s = tg.summary(t.reset_index()).set_index("target")
    # 256: act, align met, combine missed; 1024: align met, act missed; 512 fp8: quant missed
    assert s.loc[glue, ["points", "met", "missed"]].tolist() == [6, 3, 3]
    # the worst of the misses (2, 200 and 34 us), not the first or the least
    assert s.loc[glue, "worst_by_us"] == 200.0 and s.loc[glue, "held_back_by"] == "act"
    assert s.loc[glue, "worst_at"] == "m TP8 1024 B default"


def test_the_fp8_targets_count_what_is_met_with_the_median():
    """Three graph points per range, one exactly at its goal (met), skewed so that the
    median is not the mean; an eager row and a token count outside every range count for
    nothing."""
    cmp = pd.DataFrame(dict(dtype="fp8-block128", model="m", tp=8, ep=1,
                            mode=["graph"] * 9 + ["eager", "graph"],
                            tokens=[1, 4, 8, 16, 32, 64, 4096, 8192, 16384, 8, 2048],
                            fp8_pct_of_roof=[50, 40, 10, 85, 95, 30, 70, 70, 70, 99, 1],
                            speedup=[1, 1, 1, 1, 1, 1, 1.5, 1.6, 0.7, 1, 0.1],
                            ))
    s = tg.summary(tg.evaluate(metrics.fp8_metrics(cmp))).set_index("target")
    roof = ["below 16 tokens: >= 50% of the FP8 roof", "16 to 64 tokens: >= 85% of the FP8 roof"]
    pre = "fp8 >= 1.5x bf16, 4096+ tokens"
    assert s.loc[roof + [pre], "points"].tolist() == [3, 3, 3]
    assert s.loc[roof + [pre], "met"].tolist() == [1, 2, 2]
    assert s.loc[roof + [pre], "median"].tolist() == pytest.approx([40.0, 85.0, 1.5])
    assert s.loc[pre, "worst_by"] == pytest.approx(0.8)
    # 16-64 tokens at 1x: the decode target misses all three, never slower meets them
    assert s.loc["fp8 >= 1.5x bf16, 16-256 tokens", ["points", "met"]].tolist() == [3, 0]


def test_a_value_without_a_roof_is_not_a_point_of_the_target():
    assert evaluate_roof(roof_row(8, float("nan"))).empty
    assert tg.summary(evaluate_roof(roof_row(8, float("nan")))).empty


_NUM = r"(?<![\w.])(\d+(?:\.\d+)?)(?:x|%)?(?![\w.])"  # 1.5x, 50%, 16 (not gemm1, 2T)
_DEFINITIONAL = ("weights at 1 byte, not 2", "2x peak")  # what a measure is, not a limit


def _stated(t) -> tuple[list[float], str]:
    """The numbers a target's name and `measures` text state, and that text."""
    text = f"{t.name} | {t.measures}"
    for d in _DEFINITIONAL:
        text = text.replace(d, "")
    text = re.sub(r"issues? \d+", "issue", text)  # an issue's number is no limit
    return [float(x) for x in re.findall(_NUM, text)], text


def _renderings(t) -> set[float]:
    """Every way a record's own fields may be stated: the limit (as is, as a percentage of a
    fraction, as the margin over 1 in %), the token range (hi + 1 for `<16`) and the
    allowance."""
    lim = t.limit
    out = {lim, round(lim * 100, 6), round((lim - 1) * 100, 6), t.lo, t.allowance_us}
    if t.hi != math.inf:
        out |= {t.hi, t.hi + 1}
    return out


def test_every_number_a_targets_name_states_is_its_records():
    """A target's name is its lookup key and its label in every table (findings, notebook
    05): each number it (or its `measures` text) states is one of the record's own fields,
    and its token phrase is the record's range, so a limit changed in the record and not
    in the name fails here; a name that states no number is a `not slower` / `at or below`
    target, limit 1."""
    ranges = 0  # token phrases checked below: none would leave every range unchecked
    for t in tg.TARGETS:
        nums, text = _stated(t)
        stray = [x for x in nums if x not in _renderings(t)]
        assert not stray, f"{t.name!r} states {stray}, not its record's {_renderings(t)}"
        name_nums = [float(x) for x in re.findall(_NUM, t.name)]
        if not name_nums:
            assert t.limit == 1.0 and re.search(r"not slower|at or below", t.name), t.name
        else:
            shown = {t.limit, round(t.limit * 100, 6), round((t.limit - 1) * 100, 6)}
            assert shown & set(name_nums), f"{t.name!r} does not state its limit {t.limit}"
        if m := re.search(r"(\d+)(?:-| to )(\d+) tokens", text):
            ranges += 1
            assert (t.lo, t.hi) == (int(m[1]), int(m[2])), t.name
        if m := re.search(r"(?:<|below )(\d+) tokens", text):
            ranges += 1
            assert (t.lo, t.hi) == (1, int(m[1]) - 1), t.name
        if m := re.search(r"(?:>=(\d+)|(\d+)\+) tokens", text):
            ranges += 1
            assert (t.lo, t.hi) == (int(m[1] or m[2]), math.inf), t.name
        if m := re.search(r"from (\d+) tokens", text):
            ranges += 1
            assert t.lo == int(m[1]), t.name
    assert ranges > 0, "no target states a token range: no range was checked"


def test_a_drifted_name_would_fail():
    """Not vacuous: the record with another limit, or another range, no longer matches."""
    from dataclasses import replace
    t = tg.by_name("16-64 tokens: >= 85% of roof")
    for bad in (replace(t, limit=80.0), replace(t, hi=128)):
        nums, text = _stated(bad)
        assert [x for x in nums if x not in _renderings(bad)] or \
            (bad.lo, bad.hi) != tuple(map(int, re.search(r"(\d+)-(\d+) tokens", text).groups()))
    v = tg.by_name("a second search finds nothing 2% faster")
    assert 2.0 not in _renderings(replace(v, limit=1.05))


def test_a_target_with_a_peer_among_its_candidates_reads_twice():
    """Issue 66: where the candidates hold vLLM's kernel, targets.readings builds the metric
    frame with it and without it, and the one evaluation and summary keep the readings apart,
    side by side (with first); without a peer's row, one reading ('')."""
    def row(backend, us, tokens=64):
        return dict(model="m", sharding="TP8", tokens=tokens, dtype="bf16", backend=backend,
                    median_us=us, point_id=f"{backend}-{tokens}", pct_of_roof=1000 / us)

    def build(rows):
        best = rows.sort_values("median_us").groupby("tokens").head(1)
        return tg.metric_rows(best, "pct_of_roof", "pct_of_roof")
    rows = pd.DataFrame([row("vllm", 10.0), row("aiter-triton", 20.0), row("aiter-triton", 40.0, 1)])
    m = tg.readings(build, rows)
    assert sorted(set(m["reading"])) == sorted(tg.READINGS)
    s = tg.summary(tg.evaluate(m))
    g = s[s["target"] == "16-64 tokens: >= 85% of roof"]
    assert list(g["reading"]) == list(tg.READINGS)  # side by side, with the peer first
    assert list(g["met"]) == [1, 0]  # 100% of roof with vLLM's kernel, 50% without
    assert set(tg.readings(build, rows[rows["backend"] != "vllm"])["reading"]) == {""}
