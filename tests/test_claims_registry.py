"""The registry lists every numeric claim of both seeds, and its numbers are the
numbers the parser reads from the sources."""
import json

import pytest

from moe_lab.claims.parser import parse_file
from moe_lab.claims.registry import SOURCES_DIR, build_registry, load_registry
from moe_lab.core.errors import UsageError


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def test_committed_registry_is_what_the_parser_builds(reg):
    assert reg == json.loads(json.dumps(build_registry(), ensure_ascii=False))


def test_registry_numbers_equal_parsed_numbers(reg):
    parsed = {name: parse_file(SOURCES_DIR / name) for name in reg["sources"]}
    by_line = {}
    for name, blocks in parsed.items():
        for b in blocks:
            for r in b.rows:
                by_line.setdefault((name, r.line), []).append(r.value)
    n = 0
    for c in reg["claims"]:
        vals = [c[k] for k in ("baseline", "new", "value", "stderr", "baseline_stderr",
                               "new_stderr", "stated_gain_pct") if c.get(k) is not None]
        found = [v for ln in c["lines"] for v in by_line.get((c["source"], ln), [])]
        for v in vals:
            assert v in found, (c["id"], v)
            n += 1
    assert n > 150


def test_every_claim_of_both_seeds(reg):
    claims = reg["claims"]
    kinds = [c["kind"] for c in claims]
    # seed 000: 2 models x 13 serving metrics, no stated gains
    s000 = [c for c in claims if c["kind"] == "perf" and c["source"].startswith("000")]
    assert len(s000) == 26 and all(c["stated_gain_pct"] is None for c in s000)
    # seed 002: 3 tables x 6 metrics, all with stated gains
    s002 = [c for c in claims if c["kind"] == "perf" and c["source"].startswith("002")]
    assert len(s002) == 18 and all(c["stated_gain_pct"] is not None for c in s002)
    # GSM8K: 2 configs x 2 filters in seed 000, 8 configs x 2 filters in seed 002
    acc = [c for c in claims if c["kind"] == "accuracy"]
    assert len([c for c in acc if c["source"].startswith("000")]) == 4
    assert len([c for c in acc if c["source"].startswith("002")]) == 16
    assert kinds.count("parity") == 8
    ids = [c["id"] for c in claims]
    assert len(ids) == len(set(ids))


def test_configurations(reg):
    cf = reg["configs"]
    s = cf["000-scout-bf16"]
    assert (s["tp"], s["ep"], s["concurrency"], s["num_prompts"], s["input_len"],
            s["output_len"], s["engine"]) == (8, 1, 32, 160, 1000, 1000, "V1")
    assert "--enforce-eager" in s["flags"] and s["gpu"] == "mi300x"
    d = cf["002-deepseek-r1"]
    assert (d["tp"], d["ep"], d["concurrency"], d["num_prompts"]) == (8, 8, 64, 500)
    assert cf["002-gsm8k-deepseek-r1-v0"]["engine"] == "V0"
    assert cf["002-gsm8k-scout-bf16-noaiter"]["aiter"] is False
    for cid, c in cf.items():
        assert c["source"] in reg["sources"]


def test_specific_claims(reg):
    by_id = {c["id"]: c for c in reg["claims"]}
    c = by_id["002-deepseek-r1/request_throughput"]
    assert (c["baseline"], c["new"], c["stated_gain_pct"]) == (1.56, 2.90, 85.9)
    c = by_id["000-scout-bf16/mean_tpot"]
    assert (c["baseline"], c["new"]) == (49.73, 39.30) and c["direction"] == "lower"
    assert c["work"]["baseline"]["total_output_tokens"] == 41939
    assert c["work"]["new"]["total_output_tokens"] == 46026
    c = by_id["002-gsm8k-scout-fp8-aiter-tkw1/gsm8k_cot/flexible-extract/exact_match"]
    assert (c["value"], c["stderr"]) == (0.7854, 0.0113)


def test_missing_registry_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no claims registry"):
        load_registry(tmp_path / "nope.json")
