"""Which run a question reads: the one module that chooses runs (every default a notebook,
the findings or report takes), and the line that says which run a notebook shows.

    describe(run)                 'run R: N points (K ok) on DEVICE, commits C (path)'
    open_tuned_run(run=None)      notebook 05: the run with the most points both tuned and default
    runs_with_phases(runs=None)   the ledger's runs: every run with stored phases on the newest
                                  one's device, newest first
    distributed_run(run=None)     notebook 06: the newest run with ok distributed rows
    spread_pair(), runs_at(n)     a spread sweep and its one-GPU twin; the runs at n ranks
    richest_run(), imported_runs() notebooks 01/03: the measured run with the most points of
                                  the seed shapes; the imported tables
The FP8 comparison's choice (the FP8 run, bf16 beside it) is analysis.fp8.comparison_rows.
"""
from __future__ import annotations

import pandas as pd

from ..core.errors import UsageError
from ..storage.rows import ok_rows
from ..storage.store import Run, data_dir, find_runs, open_run
from . import expert_parallel as analysis

TUNED = "tuned"


def describe(run: Run) -> str:
    """'run R: N points (K ok) on DEVICE, commits C (path)': what a notebook prints first."""
    res = run.results
    ok = int((res["status"] == "ok").sum()) if len(res) else 0
    return (f"run {run.run_id}: {len(res)} points ({ok} ok) on {run.device}, commits "
            f"{', '.join(run.commits()) or 'unknown'} ({run.path})")


def _tuned_and_default(r) -> int:
    """How many ok points a run has of a backend measured both 'tuned' and 'default' (what
    the notebook compares; a run of tuned rows alone has nothing to put them against)."""
    res = r.results
    if "config" not in res:
        return 0
    ok = ok_rows(res)
    both = set(ok.loc[ok["config"] == TUNED, "backend"]) & set(ok.loc[ok["config"] == "default", "backend"])
    return int(ok["backend"].isin(both).sum())


def open_tuned_run(run=None):
    """`run`, or None: of the runs (find_runs) with ok rows of one backend both 'tuned' and
    'default', the one with the most such points (the fullest picture; ties: the newest);
    UsageError when the run given, or every run, has none."""
    runs = [open_run(run)] if run is not None else find_runs(defaults=True)
    found = sorted((r for r in runs if _tuned_and_default(r)), key=_tuned_and_default,
                   reverse=True)  # stable: among equals find_runs' newest-first order stays
    if not found:
        where = f"run {runs[0].run_id} has no" if run else f"no run under {data_dir()} has"
        raise UsageError(f"{where} ok rows of a backend both tuned and default: run "
                         "`moe-lab tune`, then `moe-lab sweep --config default,tuned`")
    return found[0]


def runs_with_phases(runs=None) -> list:
    """`runs` (ids or folders) opened, or None: every run that stored its phases
    (phases.parquet: measured with the glue timed now) on the device of the newest such
    run, newest first, so of_runs takes a point measured more than once from its latest
    run. UsageError when there is none."""
    if runs is not None:
        return [open_run(r) for r in ([runs] if isinstance(runs, str) else runs)]
    found = [r for r in find_runs(defaults=True) if len(r.phases)]
    if not found:
        raise UsageError(f"no run under {data_dir()} has stored phases (phases.parquet): "
                         "run `moe-lab sweep` on a GPU first")
    return [r for r in found if r.device == found[0].device]


def distributed_run(run=None) -> Run:
    """`run` opened, or the newest run holding distributed rows (the store's rule)."""
    return open_run(run, has="distributed")


def spread_pair() -> tuple[Run, Run] | None:
    """The newest sweep spread over GPUs (`sweep --gpus`, its manifest has `spread`) and
    the same sweep measured on one GPU (same config, no spread), if both exist."""
    runs = find_runs(defaults=True)
    for sp in (r for r in runs if r.manifest.get("spread")):
        cfg = {k: v for k, v in (sp.manifest.get("config") or {}).items() if k != "part"}
        for one in runs:
            if not one.manifest.get("spread") and one.manifest.get("status") == "complete" and \
                    {k: v for k, v in (one.manifest.get("config") or {}).items() if k != "part"} == cfg:
                return sp, one
    return None


def runs_at(world_size: int) -> list[Run]:
    """Runs with ok distributed rows at this world size, newest first (issue 18: 8)."""
    out = []
    for r in find_runs(has="distributed", defaults=True):
        d = analysis.distributed_rows(r.results)
        if (d["world_size"] == world_size).any():
            out.append(r)
    return out


def describe_distributed(run: Run) -> str:
    d = analysis.distributed_rows(run.results)
    world = sorted({int(w) for w in d["world_size"].dropna()})
    pg = sorted({str(b) for b in d.get("dist_backend", pd.Series(dtype=str)).dropna()})
    gpu = any("cpu" not in str(x) for x in d["device"].dropna())
    return (f"{describe(run)}\n{len(d)} rank rows, world size {world}, over "
            f"{', '.join(pg) or '?'}; " + ("measured on GPUs" if gpu else
                                          "a CPU run (gloo): NOT GPU results"))


def _imported(run) -> bool:
    return run.manifest.get("kind") == "import" or "aiter-tuner" in set(run.results.get("mode", []))


def richest_run(models=("deepseek-r1", "qwen3-235b-a22b"), tp=8, ep=1, mode="graph") -> str | None:
    """The measured run with the most ok rows of these shapes in `mode` (the newest on a
    tie): what to put beside AMD's tables, rather than the newest run, which may be a
    follow-up of a few points."""
    best, n_best = None, 0
    for r in find_runs(has=mode, defaults=True):  # newest first
        res = ok_rows(r.results)
        n = int(((res["mode"] == mode) & res["model"].isin(list(models))
                 & (res["tp"] == tp) & (res["ep"] == ep)).sum())
        if n > n_best:
            best, n_best = r.run_id, n
    return best


def imported_runs() -> list[str]:
    """Run ids of the tables imported from aiter (`moe-lab import-aiter`), newest first."""
    return [r.run_id for r in find_runs() if _imported(r)]
