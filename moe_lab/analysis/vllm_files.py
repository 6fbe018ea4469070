"""vLLM's own tunings for a GPU that its lookup never reads there (issue 63): vLLM ships
files named for a shorter form of a device's name (`device_name=NVIDIA_H100` for Scout bf16
and Maverick FP8), while on an 'NVIDIA H100 80GB HBM3' its lookup asks for
`device_name=NVIDIA_H100_80GB_HBM3`; there vLLM as shipped runs `get_default_config`.
`device_vllm.sh sweep` times vllm with each such file (`--config FILE`: vLLM's
override_config, the file's entry nearest the token count) beside vLLM as shipped, in one
run, at the same points. Frames in, frames out.

    unread(results) -> per run, device and point where both ran: the file (`unread_file`),
        shipped_us (vllm default: what vLLM runs), file_us (vllm with its own file) and
        shipped_over_file (> 1: what the missed name costs vLLM at that point)
    unread_summary(table) -> per device, file and shape: points, the ratio's range and
        geometric mean, and at how many points vLLM as shipped is slower than with its file
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..core.devices import file_device_name
from ..core.problems import sharding_name
from ..core.validate import frames
from ..storage.rows import deployed_rows, vllm_named

POINT = ["run_id", "device", "model", "tp", "ep", "ep_rank", "dtype", "routing", "mode",
         "tokens"]
COLUMNS = ["run_id", "device", "model", "sharding", "dtype", "mode", "tokens", "unread_file",
           "shipped_us", "file_us", "shipped_over_file", "shipped_config_file"]


def is_unread(config: str, device: str) -> bool:
    """Whether `config` is a vLLM-named file for a shorter form of `device`'s name than the
    one vLLM's lookup asks for there (e.g. NVIDIA_H100 on an NVIDIA H100 80GB HBM3)."""
    name = Path(str(config)).name
    if not vllm_named(name) or "device_name=" not in name:
        return False
    dev = name.split("device_name=", 1)[1].split(",")[0].removesuffix(".json")
    full = file_device_name(device)
    return dev != full and full.startswith(dev + "_")


@frames(results=("backend", "config", "device", "model", "tp", "ep", "dtype", "mode",
                 "tokens", "median_us"))
def unread(results: pd.DataFrame) -> pd.DataFrame:
    """Module doc. `results`: rows of one or more runs (a run_id column, else one run)."""
    r = deployed_rows(results, None)
    r = r[r["backend"] == "vllm"].copy()
    if "run_id" not in r:
        r["run_id"] = ""
    for c, v in (("routing", "uniform"), ("ep_rank", 0), ("config_file", "")):
        if c not in r:
            r[c] = v
    r["config"] = r["config"].fillna("default").astype(str)
    files = r[[is_unread(c, d) for c, d in zip(r["config"], r["device"].astype(str))]]
    shipped = r[r["config"] == "default"]
    if files.empty or shipped.empty:
        return pd.DataFrame(columns=COLUMNS)
    j = files.merge(shipped, on=POINT, suffixes=("_f", "_s"))
    out = j.assign(sharding=[sharding_name(t, e) for t, e in zip(j["tp"], j["ep"])],
                   unread_file=[Path(c).name for c in j["config_f"]],
                   shipped_us=j["median_us_s"], file_us=j["median_us_f"],
                   shipped_config_file=j["config_file_s"].fillna("").astype(str))
    out["shipped_over_file"] = out["shipped_us"] / out["file_us"]
    return out[COLUMNS].sort_values(["device", "model", "dtype", "tokens"]).reset_index(drop=True)


@frames(table=("device", "unread_file", "model", "sharding", "dtype", "shipped_over_file"))
def unread_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per device, file and shape: points, min/max/geomean of shipped_over_file, and
    `slower`: the points where vLLM as shipped is slower than with its own file."""
    cols = ["device", "unread_file", "model", "sharding", "dtype", "points", "min", "max",
            "geomean", "slower"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    g = table.groupby(["device", "unread_file", "model", "sharding", "dtype"])[
        "shipped_over_file"]
    out = g.agg(points="size", min="min", max="max",
                geomean=lambda v: math.exp(sum(map(math.log, v)) / len(v)),
                slower=lambda v: int((v > 1).sum())).reset_index()
    return out[cols]
