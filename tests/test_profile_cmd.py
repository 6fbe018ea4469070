"""`moe-lab profile` on the CPU: checked first, per-kernel table, a Perfetto-readable trace."""
import gzip
import json

import pytest

from moe_lab.cli import main


def test_profile_prints_table_and_writes_trace(tmp_path, capsys):
    trace = tmp_path / "t.json.gz"
    rc = main(["profile", "--model", "custom:H=64,I=32,E=8,k=2", "--tokens", "8", "--tp", "1",
               "--backend", "torch", "--device", "cpu", "--iters", "2", "--trace", str(trace)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith("# ") and " ok max_rel_err=" in out
    assert "phase" in out and "aten::" in out and "gemm1" in out
    events = json.loads(gzip.open(trace).read())
    assert events.get("traceEvents"), "a Chrome trace has traceEvents"


def test_profile_refuses_a_backend_that_cannot_run_here(capsys):
    rc = main(["profile", "--model", "custom:H=64,I=32,E=8,k=2", "--tokens", "8", "--tp", "1",
               "--backend", "aiter", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "ROCm" in err


def test_profile_prints_the_ledger_after_the_kernel_table(tmp_path, capsys):
    rc = main(["profile", "--model", "custom:H=64,I=32,E=8,k=2", "--tokens", "8", "--tp", "1",
               "--backend", "torch", "--device", "cpu", "--iters", "1",
               "--trace", str(tmp_path / "t.json.gz")])
    out = capsys.readouterr().out
    assert rc == 0 and " config=default " in out
    table, ledger = out.split("# ledger", 1)
    assert "aten::" in table and "phase  measured  floor  x floor  recoverable" in ledger
    lines = [ln.split() for ln in ledger.splitlines()[2:] if ln and not ln.startswith("#")]
    assert {"quant", "act", "align", "gemm1", "gemm2", "combine"} <= {ln[0] for ln in lines}
    assert "no ceilings for cpu" in ledger  # a CPU has no floors: measured only


@pytest.mark.parametrize("backend, config, says", [
    ("aiter-triton", "tuned", "no tuned configuration"),  # a tunable backend, no tuned file
    ("torch", "tuned", "not tunable"),
    ("aiter-triton", "no/such/file.json", "neither default, tuned nor an existing"),
])
def test_profile_config_without_a_configuration_is_one_line_exit_2(backend, config, says,
                                                                   capsys):
    rc = main(["profile", "--model", "custom:H=64,I=32,E=8,k=2", "--tokens", "8", "--tp", "1",
               "--backend", backend, "--device", "cpu", "--config", config])
    cap = capsys.readouterr()
    assert rc == 2 and cap.err.count("\n") == 1 and says in cap.err and cap.out == ""
