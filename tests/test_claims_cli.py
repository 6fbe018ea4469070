"""`moe-lab claims ...` end to end: exit codes, one-line errors, output formats."""
import json
import os
from pathlib import Path

import pytest

from conftest import DROP, cli_processes, put

ROOT = Path(__file__).resolve().parent.parent
S000 = ROOT / "data" / "claims" / "sources" / "000_beee3bc92878194c.txt"


# every `python -m moe_lab claims ...` these tests read, each a process of its own, run
# together at one interpreter's imports (conftest.cli_processes)
CALLS = [("parse", "/no/such/file.txt"), ("parse", "{noblock}"), ("parse",), ("frobnicate",),
         ("parse", S000), ("parse", S000, "--format", "json"), ("check",), ("check", "--strict"),
         ("check", "--format", "json", "--status", "fail"), ("implications", "--format", "json")]


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """cli(*args): the finished `python -m moe_lab claims *args` (one of CALLS; "{noblock}"
    is a file with no claims block, in a folder of its own)."""
    noblock = tmp_path_factory.mktemp("noblock") / "x.txt"
    noblock.write_text("nothing to see\n")
    argvs = [[str(a).format(noblock=noblock) for a in c] for c in CALLS]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    got = dict(zip(CALLS, cli_processes([(["claims", *a], ROOT) for a in argvs], env)))
    return lambda *args: got[args]


def test_missing_file_one_line_exit_2(cli):
    r = cli("parse", "/no/such/file.txt")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no such file" in r.stderr
    assert "Traceback" not in r.stderr


def test_file_without_block_exit_2(cli):
    r = cli("parse", "{noblock}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "x.txt" in r.stderr


def test_bad_args_exit_2(cli):
    r = cli("parse")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = cli("frobnicate")
    assert r.returncode == 2


def test_parse_csv_and_json(cli):
    r = cli("parse", S000)
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("block,kind,section,label,column,metric,value,unit")
    assert any(",duration,97.64,s," in ln for ln in lines)
    r = cli("parse", S000, "--format", "json")
    rows = json.loads(r.stdout)
    tpot = [x for x in rows if x["metric"] == "mean_tpot" and x["label"] == "baseline"]
    assert [x["value"] for x in tpot] == [49.73, 32.55]


def test_check_exit_codes_and_summary(cli):
    r = cli("check")
    assert r.returncode == 0
    last = r.stdout.strip().splitlines()[-1]
    assert "pass" in last and "warn" in last and "fail" in last
    assert "002-deepseek-r1/request_throughput" in r.stdout
    r = cli("check", "--strict")
    assert r.returncode == 1  # the Scout FP8 GSM8K parity fails
    r = cli("check", "--format", "json", "--status", "fail")
    rows = json.loads(r.stdout)
    assert rows and all(x["status"] == "fail" for x in rows)


def test_implications_cli(cli):
    r = cli("implications", "--format", "json")
    assert r.returncode == 0
    rows = json.loads(r.stdout)
    assert {x["config"] for x in rows} == {"000-scout-bf16", "000-maverick-bf16",
                                           "002-deepseek-r1", "002-scout-bf16",
                                           "002-maverick-fp8"}


# ------------------------------------------- bad input through moe_lab.cli.main: exit 2
def run_main(capsys, *argv):
    from moe_lab.cli import main
    rc = main(["claims", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, out, err, *names):
    assert rc == 2, (rc, out, err)
    assert err.startswith("moe-lab: error: ") and err.endswith("\n")
    assert err.count("\n") == 1, err  # one line, no traceback
    assert "Traceback" not in err and out == ""
    for name in names:
        assert str(name) in err, (name, err)


def test_check_registry_binary_file(capsys, tmp_path):
    p = tmp_path / "registry.bin"
    p.write_bytes(bytes(range(256)) * 4 + os.urandom(1024))  # invalid UTF-8 at byte 0x80
    rc, out, err = run_main(capsys, "check", "--registry", p)
    assert_one_line_error(rc, out, err, p, "not a claims registry")


def test_check_registry_missing_file(capsys, tmp_path):
    p = tmp_path / "nope.json"
    rc, out, err = run_main(capsys, "check", "--registry", p)
    assert_one_line_error(rc, out, err, p)


@pytest.mark.parametrize("content,why", [
    ("[1, 2, 3]", "top level is a JSON list"),
    ('{"a": 1}', "no 'claims' list"),
    ('{"claims": [{"id": "x"}], "configs": {}}', "claims[0] (x) has no 'kind'"),
    ('{"claims": [{"id": "x", "kind": "perf", "source": "s", "section": "", "config": "c", '
     '"metric": "duration", "direction": "lower", "baseline": "12", "new": 3}], "configs": {}}',
     "'baseline' is '12', not a finite number"),
    ('{"claims": [], "configs": {}, "blocks": [{"config": "c"}]}', "blocks[0] has no 'source'"),
    ("{not json", "not valid JSON"),
])
def test_check_registry_json_that_is_not_a_registry(capsys, tmp_path, content, why):
    p = tmp_path / "reg.json"
    p.write_text(content)
    rc, out, err = run_main(capsys, "check", "--registry", p)
    assert_one_line_error(rc, out, err, p, why)
    rc, out, err = run_main(capsys, "implications", "--registry", p, "--runs", tmp_path)
    assert_one_line_error(rc, out, err, p, why)


def test_implications_unknown_gpu_exits_2_naming_the_known_ones(capsys, tmp_path):
    rc, out, err = run_main(capsys, "implications", "--gpu", "nosuchgpu", "--runs", tmp_path)
    assert_one_line_error(rc, out, err, "'nosuchgpu'", "mi300x", "h200-sxm")
    # a known GPU still works and reports a floor on that GPU for every row
    rc, out, err = run_main(capsys, "implications", "--gpu", "h200-sxm", "--runs", tmp_path,
                            "--format", "json")
    assert rc == 0 and err == ""
    rows = json.loads(out)
    assert rows and all(r["gpu"] == "h200-sxm" and r["floor_us"] > 0 for r in rows)
    assert not any("failed" in r["note"] for r in rows)


def _run_dir(root, name="r1"):
    d = root / name
    d.mkdir()
    return d


def test_implications_corrupt_results_parquet_exits_2_naming_it(capsys, tmp_path):
    import pandas as pd
    good = _run_dir(tmp_path, "a-good")
    pd.DataFrame(dict(model=["llama4-scout-16e"], tp=[8], ep=[1], backend=["torch"],
                      mode=["graph"], tokens=[32], status=["ok"], median_us=[900.0])
                 ).to_parquet(good / "results.parquet")
    bad = _run_dir(tmp_path, "b-bad") / "results.parquet"
    bad.write_bytes(b"PAR1" + os.urandom(2000))
    rc, out, err = run_main(capsys, "implications", "--runs", tmp_path)
    assert_one_line_error(rc, out, err, bad)
    bad.write_bytes((good / "results.parquet").read_bytes()[:300])  # truncated copy
    rc, out, err = run_main(capsys, "implications", "--runs", tmp_path)
    assert_one_line_error(rc, out, err, bad)
    bad.unlink()  # without the bad run the good one is read
    rc, out, err = run_main(capsys, "implications", "--runs", tmp_path, "--format", "json")
    assert rc == 0
    rows = {r["config"]: r for r in json.loads(out)}
    assert rows["000-scout-bf16"]["measured_us"] == 900.0
    assert rows["000-scout-bf16"]["measured_run"] == "a-good"


def test_implications_results_without_its_columns_or_bad_manifest_exit_2(capsys, tmp_path):
    import pandas as pd
    d = _run_dir(tmp_path)
    pd.DataFrame(dict(model=["x"], tokens=[1])).to_parquet(d / "results.parquet")
    rc, out, err = run_main(capsys, "implications", "--runs", tmp_path)
    assert_one_line_error(rc, out, err, d / "results.parquet", "median_us")
    pd.DataFrame(dict(model=["llama4-scout-16e"], tp=[8], ep=[1], backend=["torch"],
                      mode=["graph"], tokens=[32], status=["ok"], median_us=[900.0])
                 ).to_parquet(d / "results.parquet")
    (d / "manifest.json").write_bytes(b'{"environment": {"device_na')
    rc, out, err = run_main(capsys, "implications", "--runs", tmp_path)
    assert_one_line_error(rc, out, err, d / "manifest.json")
    (d / "manifest.json").write_text('{"environment": {"device_name": "NVIDIA H200"}}')
    rc, out, err = run_main(capsys, "implications", "--runs", tmp_path, "--format", "json")
    assert rc == 0
    row = {r["config"]: r for r in json.loads(out)}["000-scout-bf16"]
    assert row["measured_device"] == "NVIDIA H200"


def test_parse_json_is_json_when_a_value_is_inf(capsys):
    """SGLang and `vllm bench serve` print 'Traffic request rate: inf': --format json wrote
    the bare token Infinity, which no strict JSON reader (jq, JSON.parse) accepts."""
    src = ROOT / "tests" / "data" / "claims" / "sglang_bench_serving.txt"
    rc, out, err = run_main(capsys, "parse", src, "--format", "json")
    assert rc == 0

    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    rows = json.loads(out, parse_constant=refuse)
    rate = [r for r in rows if r["metric"] == "request_rate"]
    assert rate and all(r["value"] is None for r in rate)
    assert any(r["metric"] == "mean_tpot" and r["value"] > 0 for r in rows)


def _edit(path, value):
    """An edit of the committed registry (conftest.put), applied to the loaded one."""
    return lambda reg: put(reg, path, value)


_PERF, _TABLE, _ACC, _PAR = 0, 40, 44, 64  # a perf claim, one with a stated gain, ...


@pytest.mark.parametrize("edit,why", [
    # each was a traceback (TypeError, KeyError, ValueError, ZeroDivisionError)
    (_edit(["claims", _TABLE, "stated_gain_pct"], "x"), "'stated_gain_pct' is 'x'"),
    (_edit(["claims", _PERF, "decimals"], "two"), "'decimals' is 'two'"),
    (_edit(["claims", 1, "work"], {"baseline": {}}), "'work'"),
    (_edit(["claims", 1, "work", "baseline", "total_output_tokens"], "many"), "'many'"),
    (_edit(["claims", _ACC, "stderr"], "x"), "'stderr' is 'x'"),
    (_edit(["claims", _PAR, "baseline_config"], DROP), "no 'baseline_config'"),
    (_edit(["blocks", 0, "kind"], "weird"), "kind 'weird'"),
    (_edit(["blocks", 0, "values", "mean_itl"], "x"), "'mean_itl' is 'x'"),
    (_edit(["blocks", 4, "values", "No AITER"], 5), "values['No AITER'] is not an object"),
    (_edit(["configs", "000-scout-bf16"], 5), "configs['000-scout-bf16'] is not an object"),
    (_edit(["configs", "000-scout-bf16", "concurrency"], "lots"), "'concurrency' is 'lots'"),
    (_edit(["configs", "000-scout-bf16", "source"], DROP), "has no 'source'"),
    # each was checked and given a verdict the numbers cannot support
    (_edit(["claims", _PERF, "new"], 0), "'new' is 0, not above 0"),
    (_edit(["claims", _PERF, "new"], -5), "'new' is -5"),
    (_edit(["claims", _PERF, "direction"], "sideways"), "direction 'sideways'"),
    (_edit(["claims", _PERF, "unit"], "furlongs"), "unit 'furlongs'"),
    (_edit(["claims", _TABLE, "stated_gain_pct"], float("nan")), "'stated_gain_pct' is nan"),
    (_edit(["claims", _TABLE, "stated_gain_pcx"], -35.0), "unknown key 'stated_gain_pcx'"),
    (_edit(["claims", _PERF, "decimals"], -1), "'decimals' is -1"),
    (_edit(["claims", _PERF, "kind"], "vibes"), "kind 'vibes'"),
    (_edit(["claims", _PERF, "config"], "nope"), "config 'nope' is not in 'configs'"),
    (_edit(["claims", _ACC, "stderr"], -0.01), "'stderr' is -0.01"),
    (_edit(["claims", _PAR, "new_stderr"], -0.5), "'new_stderr' is -0.5"),
    (_edit(["blocks", 0, "values", "duration"], 0), "'duration' is 0"),
    (_edit(["blocks", 0, "config"], "nope"), "config 'nope' is not in 'configs'"),
    (_edit(["configs", "000-scout-bf16", "tp"], 0), "'tp' is 0"),
    (lambda reg: reg["claims"].append(dict(reg["claims"][0])), "given twice"),
])
def test_check_registry_with_a_bad_claim_block_or_config(capsys, tmp_path, edit, why):
    """The committed registry with one thing wrong: one line naming the file and what is
    wrong, exit 2, for check and implications; the API refuses the same dict in one line.
    Before, the first half were tracebacks and the second half were checked as given
    (a perf claim whose new value is 0 or negative, a stderr below 0, a misspelt key, a
    direction or unit no check knows, a claim of no configuration, ...)."""
    import copy
    from moe_lab import claims
    from moe_lab.core.errors import UsageError
    reg = copy.deepcopy(claims.load_registry())
    edit(reg)
    p = tmp_path / "reg.json"
    p.write_text(json.dumps(reg))
    for cmd in ("check", "implications"):
        rc, out, err = run_main(capsys, cmd, "--registry", p, "--runs", tmp_path)[:3] \
            if cmd == "implications" else run_main(capsys, cmd, "--registry", p)
        assert_one_line_error(rc, out, err, p, "not a claims registry", why)
    for api in (claims.run_checks, claims.implications):
        with pytest.raises(UsageError) as exc:
            api(reg)
        assert why in str(exc.value) and "\n" not in str(exc.value)


def test_the_committed_registry_and_a_minimal_one_are_registries():
    from moe_lab.claims.registry import build_registry, load_registry
    from moe_lab.claims.schema import registry_problem
    assert registry_problem(load_registry()) is None
    assert registry_problem(build_registry()) is None
    assert registry_problem({"claims": [], "configs": {}}) is None


def test_a_registry_with_nothing_to_check_is_refused_not_passed(tmp_path, capsys):
    """Before: '0 checks', exit 0, with --strict too: a check that checked nothing read as
    all clear. The registry itself is valid (a minimal one, above); checking it is refused."""
    reg = tmp_path / "empty.json"
    reg.write_text(json.dumps({"claims": [], "configs": {}}))
    for strict in ([], ["--strict"]):
        rc, out, err = run_main(capsys, "check", "--registry", reg, *strict)
        assert rc == 2 and not out
        assert err.strip() == ("moe-lab: error: the registry has nothing to check: no claims "
                               "and no blocks")
