"""vLLM's own files for a GPU that its lookup never reads there (analysis.vllm_files): which
files count, and the cost of the miss paired point by point within a run."""
import math

import pandas as pd
import pytest

from moe_lab.analysis import vllm_files as vf

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("config,device,unread", [
    ("x/E=16,N=1024,device_name=NVIDIA_H100.json", H100, True),
    ("E=128,N=1024,device_name=NVIDIA_H100,dtype=fp8_w8a8.json", H100, True),
    ("E=128,N=192,device_name=NVIDIA_H100_80GB_HBM3.json", H100, False),  # the one it reads
    ("E=16,N=1024,device_name=NVIDIA_H100_PCIe.json", H100, False),  # another GPU
    ("E=16,N=1024,device_name=NVIDIA_H200.json", H100, False),
    ("E=16,N=1024,device_name=NVIDIA_H200.json", "NVIDIA H200", False),
    ("E=16,N=1024,device_name=NVIDIA_H100.json", "NVIDIA H200", False),
    ("default", H100, False), ("tuned", H100, False),
])
def test_a_file_counts_as_unread_only_for_a_shorter_form_of_the_devices_own_name(
        config, device, unread):
    assert vf.is_unread(config, device) is unread


def _row(config, tokens, us, run="r1", device=H100, **kw):
    return dict(run_id=run, device=device, model="llama4-scout-16e", tp=8, ep=1, ep_rank=0,
                dtype="bf16", routing="uniform", mode="graph", tokens=tokens, backend="vllm",
                config=config, median_us=us, status="ok", glue="fused",
                config_file="default" if config == "default" else config, **kw)


def test_the_miss_is_paired_within_a_run_at_the_same_point_and_summarised():
    f = "p/E=16,N=1024,device_name=NVIDIA_H100.json"
    rows = pd.DataFrame([_row("default", 1, 30.0), _row(f, 1, 20.0),
                         _row("default", 64, 50.0), _row(f, 64, 55.0),
                         _row(f, 256, 10.0),  # no shipped row at 256: no pair
                         _row("default", 1, 99.0, run="r2"),  # another run: never paired
                         _row("tuned", 1, 5.0)])
    t = vf.unread(rows)
    assert list(t["tokens"]) == [1, 64] and set(t["run_id"]) == {"r1"}
    assert list(t["shipped_over_file"]) == pytest.approx([1.5, 50 / 55])
    assert set(t["unread_file"]) == {"E=16,N=1024,device_name=NVIDIA_H100.json"}
    s = vf.unread_summary(t).iloc[0]
    assert (s["points"], s["slower"]) == (2, 1)
    assert s["geomean"] == pytest.approx(math.sqrt(1.5 * 50 / 55))
    assert s["min"] == pytest.approx(50 / 55) and s["max"] == pytest.approx(1.5)


def test_no_unread_file_rows_give_an_empty_table_with_its_columns():
    t = vf.unread(pd.DataFrame([_row("default", 1, 30.0), _row("tuned", 1, 20.0)]))
    assert t.empty and list(t.columns) == vf.COLUMNS
    assert vf.unread_summary(t).empty
