"""Ceilings JSON: schema, atomic write, measured-vs-vendor lookup, and the CPU refusal."""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moe_lab.measuring.ceilings import write_ceilings
from moe_lab.core.devices import (CEILINGS_SCHEMA, OPTIONAL_GROUPS, SCHEMA_ID, Ceilings, ceilings_for,
                             device_slug, validate_ceilings)
from moe_lab.cost.roofline import bound, cost, floor_us, memory_us, roof_basis
from moe_lab.core.problems import make_problem
from conftest import DROP, put  # noqa: E402

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


@pytest.mark.parametrize("field, value", [
    ("memory.tb_per_s", DROP),           # missing
    ("memory.tb_per_s", "4.1"),               # wrong type
    ("memory.tb_per_s", -1.0),                # not positive
    ("gemm_bf16.tflops", None),               # bf16 is required
    ("gemm_bf16.tflops", True),               # bools are not numbers
    ("device.multiprocessors", 1.5),
    ("manifest", DROP),
    ("manifest.git_commit", 123),
    ("schema", "moe-lab/ceilings/v0"),
    ("gemm_bf16.shape", [8192, 8192]),
])
def test_schema_rejects_bad_field_and_names_it(field, value):
    obj = copy.deepcopy(good())
    put(obj, field, value)
    with pytest.raises(ValueError, match=field.split(".")[0]):
        validate_ceilings(obj)


def test_schema_documents_every_field():
    assert all(meaning for _, meaning in CEILINGS_SCHEMA.values())
    readme = (REPO / "data" / "ceilings" / "README.md").read_text()
    for dotted in CEILINGS_SCHEMA:
        if dotted.split(".")[0] in OPTIONAL_GROUPS:
            continue  # the next test
        assert f"`{dotted}`" in readme, f"data/ceilings/README.md lacks {dotted}"


def test_readme_documents_the_optional_groups():
    readme = (REPO / "data" / "ceilings" / "README.md").read_text()
    optional = [d for d in CEILINGS_SCHEMA if d.split(".")[0] in OPTIONAL_GROUPS]
    assert optional, "no field of an optional group: nothing to look for"
    for dotted in CEILINGS_SCHEMA:
        if dotted.split(".")[0] in OPTIONAL_GROUPS:
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
    from moe_lab.core.problems import make_problem
    from moe_lab.cost.roofline import cost
    cst = cost(make_problem("mixtral-8x7b", 1, "bf16", 2))
    assert floor_us(cst, c) > floor_us(cst, ceilings_for("NVIDIA H200", tmp_path / "none"))


def test_ceilings_for_unknown_device_without_file(tmp_path):
    from moe_lab.core.errors import UsageError
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


# --- the read bandwidth (memory_read, optional) ------------------------------------------

def with_read(tb_per_s: float = 4.9) -> dict:
    obj = good()
    obj["memory_read"] = dict(tb_per_s=tb_per_s, best_tb_per_s=tb_per_s + 0.05,
                              method="torch.sum(x), x float32 randn, 2 GiB",
                              buffer_bytes=2**31, calls=50, median_us=2**31 / tb_per_s / 1e6)
    return obj


def test_memory_read_is_an_optional_group_of_the_schema():
    assert OPTIONAL_GROUPS == ("memory_read",)
    assert {d for d in CEILINGS_SCHEMA if d.startswith("memory_read.")} == {
        f"memory_read.{f}" for f in ("tb_per_s", "best_tb_per_s", "method", "buffer_bytes",
                                     "calls", "median_us")}
    validate_ceilings(good())  # absent: not measured
    validate_ceilings(with_read())


def test_the_first_h200_file_has_no_read_bandwidth_and_still_validates(tmp_path):
    old = REPO / "data" / "ceilings" / "history" / "nvidia-h200-20261129.json"
    obj = json.loads(old.read_text())
    assert "memory_read" not in obj
    validate_ceilings(obj)
    path = tmp_path / "nvidia-h200.json"
    path.write_text(old.read_text())
    c = ceilings_for("NVIDIA H200", path.parent)
    assert c.source == "measured" and c.tb_s_read is None
    assert c.bandwidth_basis == "copy" and c.roof_tb_s == c.tb_s == obj["memory"]["tb_per_s"]
    assert "roof bandwidth: copy 4.28 TB/s" in c.note and "no memory_read" in c.note
    assert roof_basis(c) == "copy 4.28 TB/s, gemm 793 TFLOP/s (measured)"


@pytest.mark.parametrize("field, value", [
    ("memory_read.tb_per_s", 0.0),
    ("memory_read.tb_per_s", -4.9),
    ("memory_read.tb_per_s", None),
    ("memory_read.tb_per_s", DROP),      # present group, missing field
    ("memory_read.best_tb_per_s", 0),
    ("memory_read.median_us", 0.0),
    ("memory_read.buffer_bytes", 0),
    ("memory_read.calls", 0),
    ("memory_read.method", None),
    ("memory_read", None),                   # null is not "absent"
    ("memory_read", 4.9),
])
def test_schema_rejects_a_bad_memory_read_group(field, value):
    obj = with_read()
    put(obj, field, value)
    with pytest.raises(ValueError, match="memory_read"):
        validate_ceilings(obj)


def test_a_file_without_memory_read_uses_the_copy_bandwidth(tmp_path):
    write_ceilings(good(), tmp_path)
    c = ceilings_for("NVIDIA H200", tmp_path)
    assert (c.tb_s, c.tb_s_read, c.bandwidth_basis, c.roof_tb_s) == (4.1, None, "copy", 4.1)
    assert "roof bandwidth: copy 4.1 TB/s, from memory; no memory_read" in c.note
    assert roof_basis(c) == "copy 4.1 TB/s, gemm 690 TFLOP/s (measured)"


def test_a_file_with_memory_read_uses_it_and_lowers_a_memory_bound_floor(tmp_path):
    copy_dir, read_dir = tmp_path / "copy", tmp_path / "read"
    write_ceilings(good(), copy_dir)
    write_ceilings(with_read(4.9), read_dir)
    c_copy, c_read = ceilings_for("NVIDIA H200", copy_dir), ceilings_for("NVIDIA H200", read_dir)
    assert (c_read.tb_s, c_read.tb_s_read) == (4.1, 4.9)  # both kept
    assert c_read.bandwidth_basis == "read" and c_read.roof_tb_s == 4.9
    assert "roof bandwidth: read 4.9 TB/s, from memory_read" in c_read.note
    assert roof_basis(c_read) == "read 4.9 TB/s, gemm 690 TFLOP/s (measured)"
    # Mixtral TP2, one token, experts 3 and 5: 2 experts x 3 x 4096 x 7168 bf16 weights,
    # plus x in and out (2 x 4096 bf16); 2 x 3 x 4096 x 7168 x 2 FLOPs
    cst = cost(make_problem("mixtral-8x7b", 1, "bf16", 2), torch.tensor([[3, 5]]))
    nbytes = 2 * 3 * 4096 * 7168 * 2 + 2 * 4096 * 2
    assert cst.bytes == nbytes == 352_337_920 and cst.flops == 352_321_536
    assert bound(cst, c_read) == bound(cst, c_copy) == "memory"
    assert floor_us(cst, c_copy) == memory_us(cst, c_copy) == nbytes / (4.1 * 1e12) * 1e6  # in us
    assert floor_us(cst, c_read) == memory_us(cst, c_read) == nbytes / (4.9 * 1e12) * 1e6
    assert floor_us(cst, c_read) / floor_us(cst, c_copy) == pytest.approx(4.1 / 4.9, rel=1e-15)
    assert floor_us(cst, c_read) < floor_us(cst, c_copy)
    # a compute-bound point keeps its floor: the GEMM peak is the same
    big = cost(make_problem("mixtral-8x7b", 8192, "bf16", 2))
    assert bound(big, c_read) == "compute"
    assert floor_us(big, c_read) == floor_us(big, c_copy) == big.flops / (690.0 * 1e12) * 1e6


def test_a_read_kernel_slower_than_the_copy_does_not_lower_the_roof(tmp_path):
    write_ceilings(with_read(3.9), tmp_path)
    c = ceilings_for("NVIDIA H200", tmp_path)
    assert c.tb_s_read == 3.9 and c.bandwidth_basis == "copy" and c.roof_tb_s == 4.1
    assert roof_basis(c) == ("copy 4.1 TB/s (read 3.9 measured lower), "
                             "gemm 690 TFLOP/s (measured)")


def test_ceilings_built_by_hand():
    old = Ceilings("X", 800.0, None, 4.0, "measured")
    assert old.tb_s_read is None and old.bandwidth_basis == "copy" and old.roof_tb_s == 4.0
    new = Ceilings("X", 800.0, None, 4.0, "measured", "", 5.0)
    assert new.bandwidth_basis == "read" and new.roof_tb_s == 5.0
    assert Ceilings("X", 800.0, None, 4.8, "vendor").bandwidth_basis == "peak"
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="tb_s_read"):
            Ceilings("X", 800.0, None, 4.0, "measured", "", bad)


def test_summary_lines_show_the_read_bandwidth_when_measured():
    from moe_lab.measuring.ceilings import summary_lines
    lines = summary_lines(with_read(4.9))
    assert any(line.startswith("copy    4.10 TB/s (85% of vendor 4.8)") for line in lines)
    assert any(line.startswith("read    4.90 TB/s (102% of vendor 4.8)") for line in lines)
    assert any(line.startswith("read    not measured") for line in summary_lines(good()))


def test_the_current_h200_file_reads_at_the_read_bandwidth():
    path = REPO / "data" / "ceilings" / "nvidia-h200.json"
    obj = json.loads(path.read_text())
    validate_ceilings(obj)
    c = ceilings_for("NVIDIA H200", path.parent)
    assert c.tb_s_read == obj["memory_read"]["tb_per_s"] >= obj["memory"]["tb_per_s"]
    assert c.bandwidth_basis == "read" and c.roof_tb_s == c.tb_s_read
