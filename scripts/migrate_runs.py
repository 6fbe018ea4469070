"""Bring committed run folders to the current schema and correct their provenance from
what the data itself records. Measurements are never touched. Idempotent: a second run
changes nothing. Each change is listed in the manifest's `corrections`.

    python3 scripts/migrate_runs.py data/runs/*

What it does, per folder:
  * mode names `compile:<v>:custom-op` become `compile:<v>` with `wrapped=True` (the column);
    point ids are recomputed (unchanged for unwrapped rows) and kernels.parquet follows.
  * every row gets `git_commit` and `device`: the commit of the invocation whose time
    window holds the row's `measured_at`, else the only invocation that wrote rows without
    `measured_at` (they predate that column), else the manifest's commit or the commit its
    provenance note names; the device is the manifest's device name.
  * rows without `measured_at` get the ISO 8601 interval of the invocation that measured
    them (`start/end`): the row's time is known to that window, not to the second.
  * `pairs` (local routed (token, slot) pairs, the flops' own count) from the row's flops:
    flops = 2 * pairs * 3 * H * I, as the sweep computed them with the drawn routing.
  * a manifest left at `running` by a killed lease says so (from its provenance note).
"""
from __future__ import annotations

import re
import sys
from datetime import datetime
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from moe_lab.storage.store import (RunStore, _kernels_frame, _results_frame, atomic_write_parquet,  # noqa: E402
                           point_id)

SUFFIX = ":custom-op"
TODAY = "2026-11-30"


def _ts(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S%z") if s else None


def migrate(folder: Path) -> list[str]:
    store = RunStore(folder, create=False)
    m = store.read_manifest()
    res = store.load_results()
    ker = store.load_kernels()
    env = m.get("environment") or {}
    notes = []
    old_ids = res["point_id"].astype(str).tolist()

    wrapped = res["mode"].astype(str).str.endswith(SUFFIX)
    if wrapped.any():
        res.loc[wrapped, "mode"] = res.loc[wrapped, "mode"].str[:-len(SUFFIX)]
        notes.append(f"{int(wrapped.sum())} rows: mode '...{SUFFIX}' -> wrapped=True")
    res["wrapped"] = (res["wrapped"].fillna(False).astype(bool) if "wrapped" in res
                      else False) | wrapped
    res["point_id"] = [point_id(r) for r in res.to_dict("records")]
    id_map = dict(zip(old_ids, res["point_id"]))
    if len(ker) and any(k != v for k, v in id_map.items()):
        ker["point_id"] = ker["point_id"].astype(str).map(lambda i: id_map.get(i, i))

    # provenance per row
    named = env.get("git_commit")
    if not named:
        hit = re.search(r"working tree at ([0-9a-f]{7,40})", m.get("provenance_note", ""))
        if hit:
            named = hit.group(1)
            env["git_commit"] = named
            notes.append(f"manifest git_commit null -> {named}, the commit its provenance_note "
                         "names")
    invs = [i for i in m.get("invocations") or [] if i.get("started")]
    for c in ("git_commit", "device", "measured_at"):
        if c not in res:
            res[c] = None
    need = res["git_commit"].isna()
    if need.any():
        commits = []
        no_time = [i for i in invs if _writes_without_time(i)]
        for r in res[need].to_dict("records"):
            inv = _invocation_of(r.get("measured_at"), invs, no_time)
            commits.append((inv or {}).get("git_commit") or named)
        res.loc[need, "git_commit"] = commits
        notes.append(f"{int(need.sum())} rows: git_commit from "
                     + ("the invocation that measured them" if invs else "the manifest"))
    no_dev = res["device"].isna()
    if no_dev.any():
        res.loc[no_dev, "device"] = env.get("device_name")
        notes.append(f"{int(no_dev.sum())} rows: device from the manifest "
                     f"({env.get('device_name')})")
    no_time = res["measured_at"].isna()
    if no_time.any():
        writers = [i for i in invs if _writes_without_time(i)]
        if len(writers) == 1:
            w = writers[0]
            res.loc[no_time, "measured_at"] = f"{w['started']}/{w['finished']}"
            notes.append(f"{int(no_time.sum())} rows without measured_at (written before rows "
                         f"carried it, by the invocation at {w['git_commit']}): measured_at = "
                         "that invocation's ISO 8601 interval")
    if "pairs" not in res and "flops" in res:
        res["pairs"] = res["flops"] / (6.0 * res["hidden"].astype(float) * res["inter"].astype(float))
        notes.append("pairs = flops / (6 H I) for every row with flops (the sweep's exact count)")

    if m.get("status") == "running" and "limit" in m.get("provenance_note", ""):
        m["status"] = "killed: stopped by the lease's time limit (provenance_note)"
        notes.append("status 'running' -> killed by the lease's limit, as its provenance_note says")

    if not notes:
        return []
    atomic_write_parquet(store.results_path, _results_frame(res.to_dict("records")))
    if len(ker):
        atomic_write_parquet(store.kernels_path, _kernels_frame(ker.to_dict("records")))
    table = store.load_table("compile")
    if len(table) and "git_commits" not in table:
        table["git_commits"] = [_commits_of(res, c) for c in table.to_dict("records")]
        atomic_write_parquet(folder / "compile.parquet", table)
        notes.append("compile table: git_commits of the rows each compile row sums up")
    m["environment"] = env
    m.setdefault("corrections", []).append(dict(
        date=TODAY, by="scripts/migrate_runs.py", what=notes,
        rule="measurements untouched; provenance only from what the folder records"))
    store.write_manifest(m)
    return notes


def _writes_without_time(inv: dict) -> bool:
    """Invocations at a commit older than 223feb0, which gave compile rows measured_at
    (git log: 2cd3e71 is the only such commit among the committed invocations)."""
    return inv.get("git_commit") == "2cd3e71"


def _invocation_of(measured_at, invs, no_time):
    t = _ts(measured_at) if isinstance(measured_at, str) and "/" not in measured_at else None
    if t is None:
        return no_time[0] if len(no_time) == 1 else None
    for i in invs:
        end = _ts(i.get("finished")) or t
        if _ts(i["started"]) <= t <= end:
            return i
    return None


def _commits_of(res, c) -> str:
    sel = res[(res["backend"] == c["backend"]) & (res["mode"] == c["mode"])
              & (res["wrapped"] == bool(c["wrapped"]))]
    return ",".join(sorted({str(x) for x in sel["git_commit"].dropna()}))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        folder = Path(arg)
        if (folder / "results.parquet").exists():
            for n in migrate(folder) or ["nothing to change"]:
                print(f"{folder.name}: {n}")
