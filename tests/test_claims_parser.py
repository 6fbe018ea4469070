"""Parser tests: every block of both seeds, real-format samples from other tools
(tests/data/claims/README.md says where each format comes from), malformed input."""
import math
from pathlib import Path

import pytest

from moe_lab.claims.parser import ParseError, canonical_metric, parse_file, parse_text, tidy
from moe_lab.core.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "data" / "claims" / "sources"
DATA = Path(__file__).resolve().parent / "data" / "claims"
S000 = SRC / "000_beee3bc92878194c.txt"
S002 = SRC / "002_68c35e7605864208.txt"


def serving(blocks):
    return [b for b in blocks if b.kind == "serving"]


def test_sources_are_the_pull_requests_as_copied():
    """The PR texts are kept byte for byte as copied into the repo (SHA256SUMS written
    when they were added): the claims registry is read from exactly these bytes."""
    import hashlib
    sums = dict(reversed(line.split()) for line in (SRC / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == {S000.name, S002.name}
    for p in (S000, S002):
        assert hashlib.sha256(p.read_bytes()).hexdigest() == sums[p.name]


def test_seed000_serving_blocks():
    blocks = parse_file(S000)
    sv = serving(blocks)
    assert [(b.section, b.label) for b in sv] == [
        ("16E bf16 benchmark", "baseline"), ("16E bf16 benchmark", "w/ the change"),
        ("128E bf16 benchmark", "baseline"), ("128E bf16 benchmark", "w/ the change")]
    base, new, mbase, mnew = sv
    assert base.get("duration") == 97.64
    assert base.get("total_output_tokens") == 41939
    assert base.get("mean_tpot") == 49.73
    assert base.get("completed") == 160 and base.get("total_input_tokens") == 160000
    assert base.get("total_token_throughput") == 2068.10
    assert base.get("p99_itl") == 85.23
    assert new.get("total_output_tokens") == 46026 and new.get("output_throughput") == 590.72
    assert new.get("mean_ttft") == 226.57
    assert mbase.get("duration") == 155.83 and mbase.get("total_output_tokens") == 132925
    assert mnew.get("mean_tpot") == 27.16 and mnew.get("p99_ttft") == 131.34
    for b in sv:
        assert len(b.rows) == 16  # every line of the block, nothing else
        assert b.meta["concurrency"] == 32 and b.meta["num_prompts"] == 160
        assert b.meta["input_len"] == b.meta["output_len"] == 1000 and b.meta["tp"] == 8
        assert "--enforce-eager" in b.meta["flags"]
        assert b.meta["env"]["VLLM_USE_V1"] == "1"
    assert base.meta["model"].endswith("Scout-17B-16E-Instruct")
    assert mbase.meta["model"].endswith("Maverick-17B-128E-Instruct")
    units = {r.metric: r.unit for r in base.rows}
    assert units["duration"] == "s" and units["mean_ttft"] == "ms"
    assert units["output_throughput"] == "tok/s" and units["request_throughput"] == "req/s"
    sections = {r.metric: r.column for r in base.rows}
    assert sections["mean_tpot"] == "Time per Output Token (excl. 1st token)"


def test_seed000_gsm8k_pipe_tables():
    ev = [b for b in parse_file(S000) if b.kind == "lm_eval"]
    assert len(ev) == 2
    scout, mav = ev
    assert "Scout" in scout.label and "Maverick" in mav.label
    assert scout.get("gsm8k/flexible-extract/exact_match") == 0.9181
    assert scout.get("gsm8k/flexible-extract/exact_match_stderr") == 0.0076
    # continuation row: empty Tasks cell inherits the task
    assert scout.get("gsm8k/strict-match/exact_match") == 0.9022
    assert scout.get("gsm8k/strict-match/exact_match_stderr") == 0.0082
    assert mav.get("gsm8k/flexible-extract/exact_match") == 0.9242
    assert mav.get("gsm8k/strict-match/exact_match") == 0.9272
    assert scout.meta["num_fewshot"] == 5 and scout.meta["tp"] == 8


def test_seed002_comparison_tables():
    cmp_ = [b for b in parse_file(S002) if b.kind == "comparison"]
    assert [b.label for b in cmp_] == ["DeepSeek-R1", "Llama-4-Scout-17B-16E-Instruct",
                                       "Llama-4-Maverick-17B-128E-Instruct-FP8"]
    ds = cmp_[0]
    assert ds.get("request_throughput", "No AITER") == 1.56
    assert ds.get("request_throughput", "AITER") == 2.90
    assert ds.get("request_throughput", "Gain") == pytest.approx(85.9)
    g = [r for r in ds.rows if r.metric == "mean_ttft" and r.column == "Gain"][0]
    assert g.value == pytest.approx(-35.3) and "(better)" in g.text and g.unit == "%"
    assert cmp_[1].get("output_throughput", "AITER") == 1605.34
    assert cmp_[2].get("mean_itl", "No AITER") == 50.05
    for b in cmp_:
        assert len(b.rows) == 18  # 6 metrics x (2 configs + gain)
        assert b.meta["concurrency"] == 64 and b.meta["num_prompts"] == 500
        assert b.meta["tp"] == 8 and b.meta["ep"] == 8
        assert b.meta["input_len"] == b.meta["output_len"] == 1000
        assert b.section == "Performance Gain"
    # the gemini "Feature\tCommand\tDescription" table is not a metric table
    assert all("Feature" not in b.label for b in parse_file(S002))


def test_seed002_gsm8k_tab_tables():
    ev = [b for b in parse_file(S002) if b.kind == "lm_eval"]
    assert len(ev) == 8
    flex = [b.get("gsm8k_cot/flexible-extract/exact_match") for b in ev]
    strict = [b.get("gsm8k_cot/strict-match/exact_match") for b in ev]
    assert flex == [0.9303, 0.9386, 0.8992, 0.9098, 0.7369, 0.7854, 0.7741, 0.7597]
    assert strict == [0.9280, 0.9272, 0.8332, 0.8302, 0.9325, 0.9333, 0.9325, 0.9295]
    assert ev[4].get("gsm8k_cot/flexible-extract/exact_match_stderr") == 0.0121
    assert ev[7].get("gsm8k_cot/strict-match/exact_match_stderr") == 0.0071
    assert ev[0].label.startswith("1. deepseek-ai/DeepSeek-R1 V0")
    assert ev[2].meta["model"] == "Qwen/Qwen3-235B-A22B-FP8" and ev[2].meta["ep"] == 8


# --------------------------------------------------------------- other tools' formats
def test_sglang_format():
    """SGLang bench_serving: Backend text field, 'inf' rate, retokenized count, E2E
    section, P95/Max ITL, trailing spaces, markdown heading labels."""
    a, b = parse_file(DATA / "sglang_bench_serving.txt")
    assert a.label == "Qwen3-30B-A3B, TP2, before"
    assert b.label == "Qwen3-30B-A3B, TP2, with the triton MoE config"
    back = [r for r in a.rows if r.metric == "backend"][0]
    assert back.text == "sglang" and math.isnan(back.value)
    assert a.get("request_rate") == math.inf
    assert a.get("max_concurrency") == 16
    assert a.get("total_output_tokens") == 102400
    assert a.get("total_output_tokens_retokenized") == 102377
    assert a.get("total_token_throughput") == 7402.41
    assert a.get("mean_e2el") == 3293.12 and a.get("p95_itl") == 7.41 and a.get("max_itl") == 88.3
    assert a.get("peak_output_throughput") == 2912.0 and not b.has("peak_output_throughput")
    assert b.get("duration") == 36.90 and b.get("mean_tpot") == 5.51


def test_new_vllm_format_with_unknown_section():
    (blk,) = parse_file(DATA / "vllm_bench_serve_v0_10.txt")
    assert blk.label == "EAGLE draft, k=3"
    assert blk.get("failed_requests") == 0
    assert blk.get("request_goodput") == 9.80
    assert blk.get("peak_concurrent_requests") == 79
    assert blk.get("total_token_throughput") == 25131.02
    assert blk.get("mean_e2el") == 5342.06 and blk.get("p99_e2el") == 6899.48
    assert blk.get("acceptance_rate") == 41.23  # unknown section, kept
    assert [r.unit for r in blk.rows if r.metric == "acceptance_rate"] == ["%"]
    assert blk.meta["concurrency"] == 64 and blk.meta["input_len"] == 2048


def test_commented_log_markdown_tables():
    sv, cmp_, ev = parse_file(DATA / "vllm_log_commented.txt")
    assert sv.kind == "serving" and sv.label.startswith("Mixtral-8x7B, TP2")
    assert sv.get("output_throughput") == 640.0 and sv.meta["tp"] == 2
    assert cmp_.kind == "comparison" and cmp_.meta["config_columns"] == ["main", "this PR"]
    assert cmp_.get("output_throughput", "this PR") == 729.6
    sp = [r for r in cmp_.rows if r.column == "Speedup"]
    assert [r.unit for r in sp] == ["x", "x"] and sp[1].value == 1.15
    assert ev.kind == "lm_eval"
    assert ev.get("mmlu/none/acc") == 0.7012
    assert ev.get("humanities/none/acc") == 0.6521
    assert math.isnan(ev.get("humanities/none/acc_stderr"))


def test_field_order_and_subset_do_not_matter():
    text = ("============ Serving Benchmark Result ============\n"
            "Mean TPOT (ms):   12.5   \n"
            "Successful requests:  10\n"
            "Some future metric (ms): 3.25\n"
            "==================================================\n")
    (b,) = parse_text(text)
    assert b.values() == {"mean_tpot": 12.5, "completed": 10, "some_future_metric": 3.25}


def test_tidy_rows_have_the_contract_columns():
    rows = tidy(parse_file(S000))
    assert {"block", "label", "metric", "value", "unit"} <= set(rows[0])
    assert len(rows) == 4 * 16 + 2 * 4


@pytest.mark.parametrize("label,metric,unit", [
    ("Total Token throughput (tok/s)", "total_token_throughput", "tok/s"),
    ("Total throughput (tok/s)", "total_token_throughput", "tok/s"),
    ("Mean E2E Latency (ms)", "mean_e2el", "ms"),
    ("Total generated tokens (retokenized)", "total_output_tokens_retokenized", "tok"),
    ("Max request concurrency", "max_concurrency", "req"),
    ("Maximum request concurrency", "max_concurrency", "req"),
    ("Mean TPOT (\u00b5s)", "mean_tpot", "us"),  # micro sign: the unit the registry knows
    ("Mean ITL (\u03bcs)", "mean_itl", "us"),    # Greek mu, as some terminals paste it
])
def test_aliases(label, metric, unit):
    assert canonical_metric(label) == (metric, unit)


# -------------------------------------------------------------------- malformed input
def test_no_block_is_a_one_line_error(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("This PR makes things faster.\nTrust me: +57%.\n")
    with pytest.raises(UsageError) as ei:
        parse_file(p)
    msg = str(ei.value)
    assert "\n" not in msg and "notes.txt" in msg and "no serving-benchmark" in msg


def test_block_without_end_is_read_with_a_warning():
    text = ("============ Serving Benchmark Result ============\n"
            "Successful requests:                     160\n"
            "Benchmark duration (s):                  97.64\n")
    (b,) = parse_text(text, "x.txt")
    assert b.values() == {"completed": 160, "duration": 97.64}
    assert (b.line_start, b.line_end) == (1, 3)
    assert any("x.txt:1: serving block has no closing '=====' line" in w and "text ends" in w
               for w in b.warnings)
    assert any("no 'Time per Output Token' section" in w for w in b.warnings)


def test_banner_without_any_field_is_still_an_error():
    with pytest.raises(ParseError, match="x.txt:1: serving benchmark block has no numeric"):
        parse_text("============ Serving Benchmark Result ============\n\nThe end.\n", "x.txt")


def test_block_running_into_the_next():
    one = ("============ Serving Benchmark Result ============\n"
           "Successful requests:                     160\n")
    a, b = parse_text(one + one + "=" * 50 + "\n", "x.txt")
    assert a.values() == b.values() == {"completed": 160}
    assert (a.line_start, a.line_end, b.line_start, b.line_end) == (1, 2, 3, 5)
    assert any("no closing" in w and "next result block starts at line 3" in w
               for w in a.warnings)
    assert not any("no closing" in w for w in b.warnings)


def test_block_followed_by_prose_without_end():
    text = ("============ Serving Benchmark Result ============\n"
            "Successful requests:                     160\n"
            "So this is clearly better\n"
            "Note: the TPOT numbers are below\n")
    (b,) = parse_text(text, "x.txt")
    assert b.values() == {"completed": 160} and b.line_end == 2
    assert any("line 3 is not a field" in w for w in b.warnings)


def test_prose_with_a_colon_after_a_cut_block_is_not_a_field():
    text = ("============ Serving Benchmark Result ============\n"
            "Successful requests:                     160\n"
            "Mean TPOT (ms):                          12.50\n"
            "\n"
            "Dataset: sharegpt\n"
            "============ Serving Benchmark Result ============\n"
            "Mean TPOT (ms):                          10.00\n"
            "==================================================\n")
    a, b = parse_text(text, "x.txt")
    assert a.values() == {"completed": 160, "mean_tpot": 12.5} and a.line_end == 3
    assert any("line 5 is text, not a result ('Dataset')" in w for w in a.warnings)
    # given back: read as the next block's context
    assert b.line_start == 6 and b.meta.get("dataset") == "sharegpt"
    assert "dataset" not in a.meta


def test_field_cut_mid_line_has_no_value_and_a_warning():
    text = ("============ Serving Benchmark Result ============\n"
            "Successful requests:                     160\n"
            "Mean TPOT (ms):\n")
    (b,) = parse_text(text, "x.txt")
    assert b.values() == {"completed": 160}
    assert any("no value for 'Mean TPOT (ms)' (line 3)" in w for w in b.warnings)


# ------------------------------------------- blocks cut as pasted into PRs (README.md)
def _values(blocks):
    return [{(r.metric, r.column): r.value for r in b.rows} for b in blocks]


def _warned(block, *parts):
    return [w for w in block.warnings if all(p in w for p in parts)]


def test_complete_blocks_have_no_warnings():
    for p in (S000, S002, DATA / "sglang_bench_serving.txt",
              DATA / "vllm_bench_serve_v0_10.txt", DATA / "vllm_log_commented.txt"):
        blocks = parse_file(p)
        assert blocks, p.name  # an empty parse would pass the loop below unchecked
        for b in blocks:
            assert b.warnings == [], (p.name, b.warnings)


def test_cut_fixture_without_closing_line_at_end_of_text():
    (full,) = parse_file(DATA / "vllm_bench_serve_v0_10.txt")
    (cut,) = parse_file(DATA / "vllm_bench_serve_v0_10_no_end.txt")
    assert _values([cut]) == _values([full])  # every field of the block is still read
    assert cut.label == full.label and cut.line_end == 44
    assert cut.warnings == ["vllm_bench_serve_v0_10_no_end.txt:10: serving block has no "
                            "closing '=====' line; read up to line 44 (the text ends)"]


def test_cut_fixture_sglang_missing_end_and_tpot_section():
    full = parse_file(DATA / "sglang_bench_serving.txt")
    a, b = parse_file(DATA / "sglang_bench_serving_cut.txt")
    assert _values([a]) == _values(full[:1])
    tpot = {"mean_tpot", "median_tpot", "p99_tpot"}
    assert {m: v for (m, c), v in _values(full[1:])[0].items() if m not in tpot} == \
        {m: v for (m, c), v in _values([b])[0].items()}
    assert not any(b.has(m) for m in tpot) and b.get("mean_itl") == 5.50
    # the heading the first block ran into is the second block's label, as in the full file
    assert b.label == full[1].label == "Qwen3-30B-A3B, TP2, with the triton MoE config"
    assert _warned(a, "sglang_bench_serving_cut.txt:9:", "no closing", "line 43 is not a field")
    assert len(a.warnings) == 1
    assert b.warnings == ["sglang_bench_serving_cut.txt:45: no 'Time per Output Token' "
                          "section (mean_tpot, median_tpot, p99_tpot missing)"]


def test_cut_fixture_commented_log_then_tables():
    sv, cmp_, ev = parse_file(DATA / "vllm_log_commented_cut.txt")
    full_sv = parse_file(DATA / "vllm_log_commented.txt")[0]
    assert sv.kind == "serving" and sv.get("mean_tpot") == 11.80
    assert {k: v for k, v in _values([full_sv])[0].items() if k in _values([sv])[0]} == \
        _values([sv])[0]
    assert not sv.has("median_tpot") and not sv.has("mean_itl")
    assert _warned(sv, ":7:", "no closing", "read up to line 20", "'Summary vs main'")
    assert _warned(sv, ":7:", "missing median_tpot, p99_tpot")
    assert _warned(sv, ":7:", "no 'Inter-token Latency' section")
    assert len(sv.warnings) == 3
    # what follows the cut block is still read, and labelled as before
    assert cmp_.kind == "comparison" and cmp_.label == "Summary vs main"
    assert cmp_.get("output_throughput", "this PR") == 729.6
    assert ev.kind == "lm_eval" and ev.get("mmlu/none/acc") == 0.7012
    assert cmp_.warnings == ev.warnings == []


def test_parse_cli_prints_the_warnings(capsys):
    from moe_lab.cli import main
    rc = main(["claims", "parse", str(DATA / "sglang_bench_serving_cut.txt")])
    out, err = capsys.readouterr()
    assert rc == 0
    lines = err.splitlines()
    assert len(lines) == 2 and all(ln.startswith("warning: sglang_bench_serving_cut.txt:")
                                   for ln in lines)
    assert "no closing '=====' line" in lines[0] and "Time per Output Token" in lines[1]
    assert out.startswith("block,kind,section,label,column,metric,value,unit")
    assert ",mean_itl,5.5,ms," in out


@pytest.mark.parametrize("bad", ["97.64s", "abc", "9 7.64", "1.2.3"])
def test_numeric_field_with_garbage(bad):
    text = ("============ Serving Benchmark Result ============\n"
            f"Benchmark duration (s):                  {bad}\n"
            "==================================================\n")
    with pytest.raises(ParseError) as ei:
        parse_text(text, "x.txt")
    assert "x.txt:2" in str(ei.value) and "Benchmark duration" in str(ei.value)
    assert "\n" not in str(ei.value)


def test_comparison_garbage_and_lmeval_garbage():
    with pytest.raises(ParseError, match="non-numeric"):
        parse_text("Metric\tA\tB\tGain\nMean TPOT (ms)\t1.0\tfast\t+5%\n", "t.txt")
    with pytest.raises(ParseError, match="not a number"):
        parse_text("Metric\tA\tB\tGain\nMean TPOT (ms)\t1.0\t2.0\tlots\n", "t.txt")
    with pytest.raises(ParseError, match="lm_eval"):
        parse_text("|Tasks|Version|Filter|n-shot|Metric| |Value| |Stderr|\n"
                   "|gsm8k|3|strict|5|exact_match|↑|high|±|0.01|\n", "t.txt")


@pytest.mark.parametrize("edit", [
    lambda ln: ln + "\t",                              # a trailing TAB on every line
    lambda ln: "\t" + ln,                              # the paste indented by a TAB
    lambda ln: ln.replace(":" + " " * 5, ":\t\t", 1),  # TABs between "label:" and the value
    lambda ln: ln + "\r",                              # Windows line endings
])
def test_serving_blocks_with_tab_or_crlf_whitespace_read_as_pasted(edit):
    """A TAB used as whitespace in a serving block (an editor's or a terminal's copy) is not a
    table cell: every line was refused as 'not a field' and the file as 'serving benchmark
    block has no numeric fields'."""
    text = S000.read_text(encoding="utf-8")
    want = [(b.label, b.values()) for b in serving(parse_text(text, S000.name))]
    edited = "\n".join(edit(ln) for ln in text.splitlines())
    got = [(b.label, b.values()) for b in serving(parse_text(edited, S000.name))]
    assert got == want and len(got) == 4


def test_a_tab_table_after_a_cut_block_still_ends_it():
    text = ("============ Serving Benchmark Result ============\n"
            "Successful requests:\t160\n"
            "Metric\tA\tB\tGain\nMean TPOT (ms):\t1.0\t2.0\t+100%\n")
    a, t = parse_text(text, "x.txt")
    assert a.values() == {"completed": 160} and t.kind == "comparison"


def test_a_folder_is_not_called_a_missing_file(tmp_path):
    with pytest.raises(UsageError) as ei:
        parse_file(tmp_path)
    assert "is a folder" in str(ei.value) and "no such file" not in str(ei.value)
