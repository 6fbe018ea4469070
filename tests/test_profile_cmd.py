"""`moe-lab profile` on the CPU: checked first, per-kernel table, a Perfetto-readable trace."""
import gzip
import json

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
