"""The tuned files against published tunings of the same kernel (issue 38's second target,
issue 41's title): per point, the tuned row beside a row that ran a published tuning in the
same run (storage.rows.published_rows: `--config` with a file vLLM publishes, or vLLM as
shipped reading its own), and whether the two ran the same configuration there.

    published_pairs(runs, configs_dir=None, data_dir=None) per point: published (the file), published_us, tuned_us, value
                            = published_us / tuned_us, same_config (True where the tuned
                            file holds the published configuration at that token count:
                            a tie by construction, its gap the timer's; None: not known)
    published_metrics(pairs) the target's metric frame, ties by construction left out
    ties_by_run(pairs)      per run: the ties, their range, the minutes between their rows
                            and the machines the run's invocations name

Both configurations are read from the two rows' `launch_config` (what each GEMM launched
with, storage.rows), so a published file run with `--config PATH` (not committed) is told
apart too. Rows from before that column: for vLLM as shipped, its configuration from the
`default` pass of the search that wrote the tuned file (`moe-lab tune` times vLLM as
shipped first, its configuration on each row), the tuned one from the committed file
(vLLM's nearest-key rule); for a `--config PATH` row, same_config None.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pandas as pd

from ...core.errors import CorruptFile
from ...core.problems import sharding_name
from .. import ledger as lg
from ...storage.rows import deployed_rows, published_rows, vllm_named
from .. import metrics
from ..targets import METRIC_COLUMNS
from .paths import (PAIR_KEY, with_device, configs_folder, check_folders, is_history, file_paths,
                    read_provenance)
from ...storage.checked import FOLDER, RUNS, columns, takes


@takes(runs=RUNS, data_dir=FOLDER | None)
def published_pairs(runs, configs_dir=None, data_dir=None) -> pd.DataFrame:
    """Module doc (the newest run per point; the tuned files of configs_dir and the
    searches of data_dir, this checkout's by default). Once per runs inside
    ledger.shared()."""
    check_folders("published_pairs", configs_dir=configs_dir)  # was: no pair, without a word
    runs = lg.opened(runs)
    return lg.memo(("published_pairs", str(configs_dir), str(data_dir), lg.run_paths(runs)),
                   lambda: _published_pairs(runs, configs_dir, data_dir))


def _published_pairs(runs, configs_dir, data_dir) -> pd.DataFrame:
    out, seen = [], set()
    for r in runs:
        res = with_device(r)
        if "config" not in res or not len(res):
            continue
        g = deployed_rows(res)
        pub = g[published_rows(g)]
        if pub.empty:
            continue
        pub = pub.assign(config=[c if vllm_named(c) else f"{u} (shipped)" for c, u in
                                 zip(pub["config"].astype(str),
                                     pub.get("config_file", pub["config"]).astype(str))])
        machines = _machines(r)
        cols = PAIR_KEY + ["median_us", "point_id", "git_commit", "measured_at", "launch_config"]
        pub, g = (x.assign(measured_at=x.get("measured_at", ""),
                           launch_config=x.get("launch_config")) for x in (pub, g))
        j = pub[cols + ["config"]].merge(g[g["config"] == "tuned"][cols], on=PAIR_KEY,
                                          suffixes=("_p", "_t"))
        root = str(configs_folder(configs_dir, r.device))
        for x in j.to_dict("records"):
            k = tuple(x[c] for c in PAIR_KEY)
            if k in seen or is_history(root, x, r.device):
                continue
            seen.add(k)
            same = _same_launch(x["launch_config_p"], x["launch_config_t"])
            if same is None and x["config"].endswith("(shipped)"):  # rows before the column
                same = _same_config(configs_dir, data_dir, r.device, *(
                    x[c] for c in ("backend", "model", "tp", "ep", "dtype", "tokens")))
            out.append({**{c: x[c] for c in PAIR_KEY}, "published": Path(x["config"]).name,
                        "published_us": x["median_us_p"], "tuned_us": x["median_us_t"],
                        "point_id": x["point_id_t"], "git_commit": x["git_commit_t"],
                        "run_id": r.run_id, "same_config": same,
                        "apart_min": _minutes(x["measured_at_p"], x["measured_at_t"]),
                        "machines": machines})
    p = pd.DataFrame(out, columns=PAIR_KEY + ["published", "published_us", "tuned_us",
                                              "point_id", "git_commit", "run_id", "same_config",
                                              "apart_min", "machines"])
    p["sharding"] = [sharding_name(t, e) for t, e in zip(p["tp"], p["ep"])]
    return p.assign(value=p["published_us"] / p["tuned_us"], median_us=p["tuned_us"])


def _minutes(a, b) -> float:
    """Minutes between two rows' measured_at (NaN when either is unknown)."""
    try:
        return abs((pd.Timestamp(a) - pd.Timestamp(b)).total_seconds()) / 60
    except (TypeError, ValueError):
        return float("nan")


def _machines(run) -> str:
    """How many machines a run's invocations name ('not recorded' before boot_id was)."""
    ids = [i.get("boot_id") for i in run.manifest.get("invocations") or []]
    return str(len(set(ids))) if ids and all(ids) else "not recorded"


@takes("tuned.ties_by_run", pairs=columns("run_id", "same_config", "apart_min", "machines",
       "value"))
def ties_by_run(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per run, its ties by construction: how many, published/tuned lo and hi, the most
    minutes between a tie's two rows, and the machines its invocations name."""
    t = pairs[pairs["same_config"] == True] if len(pairs) else pairs  # noqa: E712
    cols = ["run_id", "ties", "lo", "hi", "apart_min", "machines"]
    if not len(t):
        return pd.DataFrame(columns=cols)
    return t.groupby("run_id").agg(ties=("value", "size"), lo=("value", "min"),
                                   hi=("value", "max"), apart_min=("apart_min", "max"),
                                   machines=("machines", "first")).reset_index()[cols]


def _same_launch(a, b) -> bool | None:
    """Whether two rows' launch_config (JSON, storage.rows) name the same configuration of
    every GEMM; None when either row has none."""
    if not (isinstance(a, str) and a and isinstance(b, str) and b):
        return None
    return json.loads(a) == json.loads(b)


def _same_config(configs_dir, runs_dir, device, backend, model, tp, ep, dtype,
                 tokens) -> bool | None:
    """Whether the committed tuned file's configuration at `tokens` (nearest key) is the
    one vLLM as shipped ran there (the default pass of the search behind the file)."""
    from ...core.config_files import nearest
    from ...storage.store import data_dir
    try:
        f1 = file_paths(backend, model, int(tp), int(ep), dtype, device,
                    configs_folder(configs_dir, device))["gemm1"]
        ours = nearest(_table(str(f1), f1.stat().st_mtime_ns), int(tokens))
        prov = f1.parent / "provenance.json"
        run = (read_provenance(str(prov), prov.stat().st_mtime_ns).get(f1.name) or {}).get("run")
    except Exception:  # noqa: BLE001 - a backend or file this checkout does not have
        return None
    f = Path(runs_dir or data_dir()) / str(run) / "candidates.parquet"
    if not run or not f.is_file():
        return None
    try:
        shipped = _defaults(str(f), f.stat().st_mtime_ns).get(int(tokens))
    except CorruptFile as exc:  # unreadable, or without a default pass: not known, said once
        from ...storage.store import _warn_once
        _warn_once(f"moe-lab: warning: passed over run {run}'s default pass: {exc}")
        return None
    return None if shipped is None else shipped == {k: int(v) for k, v in ours.items()}


@functools.lru_cache(maxsize=64)
def _table(path: str, mtime_ns: int) -> dict:
    """A tuned file's {M: config}, read once per file version (not once per point)."""
    from ...core.config_files import read_table
    return read_table(Path(path))


@functools.lru_cache(maxsize=32)
def _defaults(path: str, mtime_ns: int) -> dict:
    """{tokens: gemm1 configuration} of a search's default pass (vLLM as shipped)."""
    from ...storage.store import _read
    c = _read(Path(path), ("search_pass", "tokens", "config", "status"))
    c = c[(c["search_pass"] == "default") & (c["status"] == "ok")]
    out = {}
    for t, cfg in zip(c["tokens"], c["config"]):
        d = json.loads(cfg)
        out[int(t)] = {k: int(v) for k, v in d.get("gemm1", d).items()}
    return out


@takes("tuned.published_metrics", pairs=columns("same_config", "backend", "value"))
def published_metrics(pairs: pd.DataFrame) -> pd.DataFrame:
    """The published-tuning target's metric frame (published us / tuned us per point),
    the ties by construction (same_config True) left out."""
    p = pairs[pairs["same_config"] != True] if len(pairs) else pairs  # noqa: E712 - None stays
    if not len(p):
        return pd.DataFrame(columns=METRIC_COLUMNS)
    return metrics.metric_rows(p.assign(backend=p["backend"] + " tuned"),
                               "tuned_over_published", "value")

