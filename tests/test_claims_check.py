"""`claims check`: every registry claim gets a verdict, and hand-verified cases get the
verdict worked out by hand."""

import pytest

from moe_lab.claims.verdicts import (binomial_n_interval, check_gain, check_parity,
                                     gain_interval, run_checks, summary)
from moe_lab.claims.registry import load_registry


@pytest.fixture(scope="module")
def reg():
    return load_registry()


@pytest.fixture(scope="module")
def df(reg):
    return run_checks(reg)


def row(df, id_):
    r = df[df["id"] == id_]
    assert len(r) == 1, id_
    return r.iloc[0]


def test_every_claim_checked(reg, df):
    assert set(c["id"] for c in reg["claims"]) <= set(df["id"])
    assert set(df["status"]) <= {"pass", "warn", "fail"}
    assert (df["reason"].str.len() > 10).all()
    assert (df["kind"] == "consistency").sum() >= 12


def test_deepseek_request_throughput_gain(df):
    r = row(df, "002-deepseek-r1/request_throughput")
    # 2.90 / 1.56 - 1 = +85.897% -> "+85.9%" as stated
    assert r["recomputed_gain_pct"] == pytest.approx(85.897, abs=1e-3)
    assert "stated +85.9% matches recomputed +85.9%" in r["reason"]
    # per-request output differs (486.26/1.56 = 312 vs 891.14/2.90 = 307 tokens): warn
    assert r["status"] == "warn" and "incomparable" in r["reason"]


def test_deepseek_latency_gains_pass(df):
    for m in ("mean_ttft", "mean_tpot", "mean_itl"):
        assert row(df, f"002-deepseek-r1/{m}")["status"] == "pass"


def test_scout_seed000_output_throughput_incomparable(df):
    r = row(df, "000-scout-bf16/output_throughput")
    assert r["status"] == "warn"
    assert "incomparable" in r["reason"] and "41939" in r["reason"] and "46026" in r["reason"]
    assert "mean TPOT" in r["reason"]  # the honest metric is named
    # TPOT itself is per-token, so it stays comparable
    assert row(df, "000-scout-bf16/mean_tpot")["status"] == "pass"
    # Maverick generated 132925 vs 132622 tokens (0.2%): same work
    assert row(df, "000-maverick-bf16/output_throughput")["status"] == "pass"


def test_internal_consistency_seed000(df):
    # 41939 / 97.64 = 429.53; printed 429.51: consistent within the rounding of 97.64
    r = row(df, "000-scout-bf16/baseline/consistency/output_throughput")
    assert r["status"] == "pass"
    assert row(df, "000-scout-bf16/baseline/consistency/request_throughput")["status"] == "pass"
    assert row(df, "000-maverick-bf16/w/ the change/consistency/total_token_throughput")["status"] == "pass"


def test_gsm8k_parity(df):
    # Scout FP8 flexible-extract: 0.7369 -> 0.7854, se = hypot(.0121, .0113) = .0166 -> 2.9 se
    r = row(df, "002-gsm8k-scout-fp8-aiter-tkw1/vs/002-gsm8k-scout-fp8-noaiter/gsm8k_cot/flexible-extract/exact_match")
    assert r["status"] == "fail" and "+2.9 se" in r["reason"]
    r = row(df, "002-gsm8k-scout-bf16-aiter/vs/002-gsm8k-scout-bf16-noaiter/gsm8k_cot/flexible-extract/exact_match")
    assert r["status"] == "pass" and "-0.9 se" in r["reason"]
    # seed 000 GSM8K has no without-AITER score: unverifiable
    r = row(df, "000-gsm8k-scout-aiter/gsm8k/flexible-extract/exact_match")
    assert r["status"] == "warn" and "unverifiable" in r["reason"]


def test_rounding_interval_logic():
    # -35.3497% rounds to -35.3: must pass even though the point estimate is at the edge
    c = dict(metric="mean_ttft", baseline=2432.53, new=1572.64, direction="lower",
             stated_gain_pct=-35.3, stated_gain_decimals=1, stated_note="better",
             stated_gain_text="-35.3% (better)")
    assert check_gain(c).status == "pass"
    lo, hi = gain_interval(1.56, 2.90)
    assert lo < 85.9 < hi
    assert check_gain({**c, "stated_gain_pct": -36.0}).status == "fail"
    assert check_gain({**c, "stated_gain_pct": 35.35, "stated_gain_decimals": 2}).status == "fail"
    # stated "better" but the latency went up
    worse = dict(c, baseline=1572.64, new=2432.53, stated_gain_pct=54.7, stated_note="better")
    v = check_gain(worse)
    assert v.status == "fail" and "better" in v.reason


# DeepSeek-R1 mean TTFT in seed 002: 2432.53 -> 1572.64 ms, printed "-35.3% (better)".
# 1572.64 / 2432.53 - 1 = -35.34962%; the printed inputs (+-0.005 each) move it by at most
# 100 * (0.005 / 2432.53 + 1572.64 * 0.005 / 2432.53**2) = 0.00034 points either way.
TTFT = dict(metric="mean_ttft", baseline=2432.53, new=1572.64, direction="lower",
            stated_note="better")


def _stated(g, decimals=None, text=None):
    return check_gain({**TTFT, "stated_gain_pct": g, "stated_gain_decimals": decimals,
                       "stated_gain_text": text if text is not None else f"{g}%"})


def test_gain_interval_is_exactly_the_rounding_of_the_inputs():
    lo, hi = gain_interval(2432.53, 1572.64)
    b, n, h = 2432.53, 1572.64, 0.005
    half_width = 100 * (h / b + n * h / b ** 2)
    assert (hi - lo) / 2 == pytest.approx(half_width, rel=0.01)  # 10x looser: 10x wider
    assert lo < 100 * (n / b - 1) < hi


@pytest.mark.parametrize("g,decimals", [
    (-35.3, 1),     # what the PR prints: -35.3496 rounds to -35.3
    (-35.35, 2),    # -35.3496 rounds to -35.35
    (-35.350, 3),   # -35.3496 is inside -35.3505..-35.3495
    (-35.0, 0),     # "-35%": -35.5..-34.5
])
def test_stated_gain_within_its_rounding_passes(g, decimals):
    v = _stated(g, decimals)
    assert v.status == "pass", v.reason


@pytest.mark.parametrize("g,decimals", [
    (-35.7, 1),     # 0.35 points off: a tolerance 10x the rounding (+-0.5) would pass it
    (-35.4, 1),     # -35.45..-35.35 misses -35.3496 (its lowest value over the input
                    # rounding is -35.34995): -35.3496 rounds to -35.3, not -35.4
    (-35.2, 1),
    (-35.34, 2),    # -35.345..-35.335
    (-35.36, 2),
    (-35.347, 3),   # 0.0022 above the recomputed range: only input rounding 10x looser
                    # (+-0.0034 points) reaches it
])
def test_stated_gain_outside_its_rounding_fails(g, decimals):
    v = _stated(g, decimals)
    assert v.status == "fail", v.reason  # fail, not pass and not warn
    assert "2432.53 -> 1572.64 gives -35.3%" in v.reason


def test_stated_gain_decimals_read_from_the_text_when_not_given():
    # "-35.34%" is two decimals even without stated_gain_decimals: read as one decimal
    # (-35.39..-35.29) it would pass
    assert _stated(-35.34, None, "-35.34% (better)").status == "fail"
    assert _stated(-35.35, None, "-35.35% (better)").status == "pass"
    assert _stated(-35.3, None, "-35.3% (better)").status == "pass"
    assert _stated(-35.7, None, "").status == "fail"  # no text: one decimal


def test_parity_and_binomial_helpers():
    v = check_parity(dict(baseline=0.90, new=0.93, baseline_stderr=0.008, new_stderr=0.007))
    assert v.status == "fail"
    v = check_parity(dict(baseline=0.90, new=0.91, baseline_stderr=0.008, new_stderr=0.007))
    assert v.status == "pass"
    lo, hi = binomial_n_interval(0.9181, 0.0076)
    assert lo <= 1319 <= hi


def test_summary_counts(df):
    s = summary(df)
    assert sum(s.values()) == len(df)
    assert s["fail"] >= 1 and s["pass"] > s["warn"]


@pytest.mark.parametrize("text", ["['warn','fail']", "['warn', 'fail']", "warn,fail",
                                  "warn, fail", "('warn', 'fail')"])
def test_show_given_as_report_p_text_of_a_list(df, text):
    """`moe-lab report --only 04 -p show ['warn','fail']` (the parameters cell's own example)
    hands the notebook the text, which was refused: "show \\"['warn','fail']\\": give None,
    a status or a list of them"."""
    from moe_lab.claims import shown
    got = shown(df, text)
    assert set(got["status"]) == {"warn", "fail"}
    assert len(got) == int(df["status"].isin(["warn", "fail"]).sum())


@pytest.mark.parametrize("text", ["['warn', 'bogus']", "[]", "warn,", "['warn'", "bogus"])
def test_show_text_naming_no_status_is_one_line(df, text):
    from moe_lab.claims import shown
    from moe_lab.core.errors import UsageError
    with pytest.raises(UsageError) as exc:
        shown(df, text)
    assert "pass, warn, fail" in str(exc.value) and "\n" not in str(exc.value)


def test_a_block_of_zero_completed_requests_fails_its_consistency(reg):
    """'Successful requests: 0' beside a positive request throughput: _cons divided by the
    0 it computed (ZeroDivisionError, a traceback from `claims check`)."""
    import copy
    from moe_lab.claims import run_checks
    bad = copy.deepcopy(reg)
    bad["blocks"][0]["values"]["completed"] = 0
    df = run_checks(bad)
    row = df[df["id"].str.endswith("/consistency/request_throughput")].iloc[0]
    assert row["status"] == "fail" and "0/" in row["reason"]
