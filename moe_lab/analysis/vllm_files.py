"""vLLM's own tunings for a GPU that its lookup never reads there (issue 63): vLLM ships
files named for a shorter form of a device's name (`device_name=NVIDIA_H100` for Scout bf16
and Maverick FP8), while on an 'NVIDIA H100 80GB HBM3' its lookup asks for
`device_name=NVIDIA_H100_80GB_HBM3`; there vLLM as shipped runs `get_default_config`.
`device_vllm.sh sweep` times vllm with each such file (`--config FILE`: vLLM's
override_config, the file's entry nearest the token count) beside vLLM as shipped, in one
run, at the same points. Frames in, frames out.

    shorter_names(device)  the shorter forms of the device part of its files' names
    unread_files(folder, device, model, dtype, ep)  vLLM's files in `folder` for the shape
        under such a form (what device_vllm.sh sweep times beside vLLM as shipped)
    is_unread(config, device)  whether a row's --config is such a file
    unread(results) -> per run, device and point where both ran: the file (`unread_file`),
        shipped_us (vllm default: what vLLM runs), file_us (vllm with its own file) and
        shipped_over_file (> 1: what the missed name costs vLLM at that point)
    unread_summary(table) -> per device, file and shape: points, the ratio's range and
        geometric mean, and at how many points vLLM as shipped is slower than with its file
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.constants import TP_DEFAULT
from ..core.devices import file_device_name
from ..core.problems import make_problem, sharding_name
from ..storage.rows import deployed_rows, vllm_named
from .metrics import geomean
from ..storage.checked import FOLDER, TEXT, TP, columns, takes

POINT = ["run_id", "device", "model", "tp", "ep", "ep_rank", "dtype", "routing", "mode",
         "tokens"]
COLUMNS = ["run_id", "device", "model", "sharding", "dtype", "mode", "tokens", "unread_file",
           "shipped_us", "file_us", "shipped_over_file", "shipped_config_file"]


def shorter_names(device: str) -> list[str]:
    """The shorter forms, whole words of it, of the device part of `device`'s file names,
    longest first ('NVIDIA H100 80GB HBM3' -> NVIDIA_H100_80GB, NVIDIA_H100, NVIDIA): the
    names vLLM's lookup never reads on that device."""
    words = file_device_name(device).split("_")
    return ["_".join(words[:i]) for i in range(len(words) - 1, 0, -1)]


@takes(folder=FOLDER, device=TEXT, model=TEXT, dtype=TEXT, ep=TP, tp=TP)
def unread_files(folder, device: str, model: str, dtype: str, ep: int, tp: int = TP_DEFAULT
                 ) -> list[str]:
    """The files of `folder` (vLLM's shipped configs, as fetch-device-wheels.sh copies them)
    that tune this shape for this device under one of its shorter_names: there vLLM as
    shipped runs its default configuration; `device_vllm.sh sweep` times vllm with each
    such file beside it."""
    from ..backends.vllm_fused import config_file_name
    name = config_file_name(make_problem(model, 1, dtype, tp, int(ep)), device)
    full = f"device_name={file_device_name(device)}"
    found = (Path(folder) / name.replace(full, f"device_name={s}") for s in shorter_names(device))
    return [str(p) for p in found if p.is_file()]


def is_unread(config: str, device: str) -> bool:
    """Whether `config` is a vLLM-named file for one of `device`'s shorter_names (e.g.
    NVIDIA_H100 on an NVIDIA H100 80GB HBM3)."""
    name = Path(str(config)).name
    if not vllm_named(name) or "device_name=" not in name:
        return False
    return name.split("device_name=", 1)[1].split(",")[0].removesuffix(".json") in \
        shorter_names(device)


@takes(results=columns("backend", "config", "device", "model", "tp", "ep", "dtype", "mode",
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


@takes(table=columns("device", "unread_file", "model", "sharding", "dtype", "shipped_over_file"))
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
                geomean=geomean,
                slower=lambda v: int((v > 1).sum())).reset_index()
    return out[cols]
