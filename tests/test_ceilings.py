"""Ceilings JSON: schema, atomic write, measured-vs-vendor lookup, and the CPU refusal."""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moe_lab.ceilings import write_ceilings
from moe_lab.devices import CEILINGS_SCHEMA, SCHEMA_ID, ceilings_for, device_slug, validate_ceilings
from moe_lab.roofline import floor_us

REPO = Path(__file__).resolve().parent.parent


def good() -> dict:
    gemm = dict(best_tflops=700.0, method="torch.matmul", shape=[8192, 8192, 8192], calls=50,
                median_us=1600.0)
    return {
        "schema": SCHEMA_ID,
        "device": dict(name="NVIDIA H200", slug="nvidia-h200", vendor="nvidia", arch="sm_90",
                       multiprocessors=132, total_memory_bytes=150_000_000_000,
                       l2_cache_bytes=62_914_560),
        "memory": dict(tb_per_s=4.1, best_tb_per_s=4.2, method="copy_", buffer_bytes=2**31,
                       bytes_per_call=2**32, calls=50, median_us=1040.0),
        "gemm_bf16": dict(tflops=690.0, **gemm),
        "gemm_fp8": dict(tflops=None, best_tflops=None, method="torch._scaled_mm",
                         shape=[8192, 8192, 8192], fp8_dtype="float8_e4m3fn", calls=0,
                         median_us=None, error="RuntimeError: not here"),
        "vendor": dict(spec="h200-sxm", bf16_tflops=989.4, fp8_tflops=1978.9, hbm_tb_s=4.8),
        "manifest": dict(device_name="NVIDIA H200", torch="2.13.0", cuda="12.8", hip=None,
                         date="2026-01-01T00:00:00+00:00", command="moe-lab ceilings",
                         git_commit="abc", hostname="h"),
    }


def test_schema_accepts_good_object():
    validate_ceilings(good())
    obj = good()
    obj["gemm_fp8"].update(tflops=1200.0, best_tflops=1250.0, calls=50, median_us=900.0,
                           error=None)
    validate_ceilings(obj)


def _set(obj, dotted, value):
    *parents, last = dotted.split(".")
    node = obj
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value


@pytest.mark.parametrize("field, value", [
    ("memory.tb_per_s", KeyError),           # missing
    ("memory.tb_per_s", "4.1"),               # wrong type
    ("memory.tb_per_s", -1.0),                # not positive
    ("gemm_bf16.tflops", None),               # bf16 is required
    ("gemm_bf16.tflops", True),               # bools are not numbers
    ("device.multiprocessors", 1.5),
    ("manifest", KeyError),
    ("manifest.git_commit", 123),
    ("schema", "moe-lab/ceilings/v0"),
    ("gemm_bf16.shape", [8192, 8192]),
])
def test_schema_rejects_bad_field_and_names_it(field, value):
    obj = copy.deepcopy(good())
    _set(obj, field, value)
    with pytest.raises(ValueError, match=field.split(".")[0]):
        validate_ceilings(obj)


def test_schema_documents_every_field():
    assert all(meaning for _, meaning in CEILINGS_SCHEMA.values())
    readme = (REPO / "data" / "ceilings" / "README.md").read_text()
    for dotted in CEILINGS_SCHEMA:
        assert f"`{dotted}`" in readme, f"data/ceilings/README.md lacks {dotted}"


def test_write_is_atomic_and_roundtrips(tmp_path):
    path = write_ceilings(good(), tmp_path / "c")
    assert path.name == "nvidia-h200.json" == device_slug("NVIDIA H200") + ".json"
    assert os.listdir(path.parent) == [path.name]  # no temporary left behind
    validate_ceilings(json.loads(path.read_text()))
    bad = good()
    del bad["memory"]
    with pytest.raises(ValueError):
        write_ceilings(bad, tmp_path / "d")
    assert not (tmp_path / "d" / "nvidia-h200.json").exists()


def test_ceilings_for_uses_measured_file_when_present(tmp_path):
    assert ceilings_for("NVIDIA H200", tmp_path).source == "vendor"
    write_ceilings(good(), tmp_path)
    c = ceilings_for("NVIDIA H200", tmp_path)
    assert c.source == "measured"
    assert (c.tflops_bf16, c.tb_s) == (690.0, 4.1)
    assert c.tflops_fp8 == 1978.9 and "fp8 from vendor" in c.note  # not measured here
    # measured ceilings are lower than the vendor's, so the floor rises
    from moe_lab.problems import make_problem
    from moe_lab.roofline import cost
    cst = cost(make_problem("mixtral-8x7b", 1, "bf16", 2))
    assert floor_us(cst, c) > floor_us(cst, ceilings_for("NVIDIA H200", tmp_path / "none"))


def test_ceilings_for_unknown_device_without_file(tmp_path):
    from moe_lab.errors import UsageError
    with pytest.raises(UsageError, match="known specs"):
        ceilings_for("Imaginary GPU 9000", tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_ceilings_cli_without_gpu_exits_2_with_one_line():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "moe_lab", "ceilings"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no GPU" in lines[0], r.stderr
    assert r.stdout == ""
