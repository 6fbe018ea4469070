"""The README's backend table states, per GPU, what ran there; its H100 column is held to
the committed H100 runs: a backend called measured there has ok rows in an H100 run the
cell names, one called failed or unsupported has rows of that status, one not yet run has
no row on that GPU, and every run id or pattern a cell names exists."""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "data" / "runs"


def _table() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| `") or ln.startswith("| backend |")]
    head = next(i for i, r in enumerate(rows) if r.startswith("| backend |"))
    split = [[c.strip() for c in re.split(r"(?<!\\)\|", r)[1:-1]] for r in rows[head:]]
    n = len(split[0])
    return [r for r in split if len(r) == n]


def _h100_rows() -> pd.DataFrame:
    frames = []
    for d in sorted(RUNS.iterdir()):
        f = d / "results.parquet"
        if f.is_file() and d.name.startswith(("h100-", "nvidia-h100")):
            r = pd.read_parquet(f, columns=["backend", "status"])
            frames.append(r.assign(run=d.name))
    return pd.concat(frames) if frames else pd.DataFrame(columns=["backend", "status", "run"])


def _cells():
    table = _table()
    col = table[0].index("NVIDIA H100 (lent machine)")
    return [(re.findall(r"`([a-z0-9-]+)`", r[0]), r[col]) for r in table[1:]]


@pytest.mark.parametrize("backends,cell", _cells(), ids=lambda v: str(v)[:40])
def test_each_h100_cell_is_what_the_h100_runs_hold(backends, cell):
    rows = _h100_rows()
    named = re.findall(r"`((?:h100|nvidia-h100)[a-z0-9*-]*)`", cell)
    runs = [d.name for d in RUNS.iterdir() if d.is_dir()]
    for pat in named:
        assert fnmatch.filter(runs, pat), f"the README names {pat}, which no run folder is"
    mine = rows[rows["backend"].isin(backends)]
    if named:
        mine = mine[mine["run"].apply(lambda r: any(fnmatch.fnmatch(r, p) for p in named))]
    # a cell may speak of one backend of its row first (`torch-fp8-grouped` checked ...)
    lead = re.match(r"`([a-z0-9-]+)` ", cell)
    if lead:
        mine = mine[mine["backend"] == lead.group(1)]
    if cell.startswith(("checked + measured", f"`{lead.group(1) if lead else ''}` checked")):
        assert (mine["status"] == "ok").any(), (backends, cell)
    elif cell.startswith("failed"):
        assert len(mine) and not (mine["status"] == "ok").any(), (backends, cell)
    elif cell.startswith("unsupported"):
        assert len(mine) and (mine["status"] == "unsupported").all(), (backends, cell)
    elif cell.startswith("not yet run"):
        assert not rows["backend"].isin(backends).any(), (backends, cell)
    else:
        assert cell.startswith("—"), f"an H100 cell the check cannot read: {cell!r}"
