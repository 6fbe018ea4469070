"""`moe-lab claims ...` end to end: exit codes, one-line errors, output formats."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
S000 = ROOT / "data" / "claims" / "sources" / "000_beee3bc92878194c.txt"


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "moe_lab", "claims", *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_missing_file_one_line_exit_2():
    r = cli("parse", "/no/such/file.txt")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no such file" in r.stderr
    assert "Traceback" not in r.stderr


def test_file_without_block_exit_2(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("nothing to see\n")
    r = cli("parse", p)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "x.txt" in r.stderr


def test_bad_args_exit_2():
    r = cli("parse")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = cli("frobnicate")
    assert r.returncode == 2


def test_parse_csv_and_json():
    r = cli("parse", S000)
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("block,kind,section,label,column,metric,value,unit")
    assert any(",duration,97.64,s," in ln for ln in lines)
    r = cli("parse", S000, "--format", "json")
    rows = json.loads(r.stdout)
    tpot = [x for x in rows if x["metric"] == "mean_tpot" and x["label"] == "baseline"]
    assert [x["value"] for x in tpot] == [49.73, 32.55]


def test_check_exit_codes_and_summary():
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


def test_implications_cli():
    r = cli("implications", "--format", "json")
    assert r.returncode == 0
    rows = json.loads(r.stdout)
    assert {x["config"] for x in rows} == {"000-scout-bf16", "000-maverick-bf16",
                                           "002-deepseek-r1", "002-scout-bf16",
                                           "002-maverick-fp8"}
