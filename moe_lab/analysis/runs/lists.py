"""The lists of runs a reader walks itself, chosen here (analysis.runs: the one place that
chooses runs), each saying which runs it holds and why; newest first (find_runs' order).

    every_run(root=None)       every run folder with results under `root` (None: the data
                               folder), runs marked running or failed too: the findings'
                               runs (each section then reads what its question chooses) and
                               the tuned-against-default points the GPU work left counts
    default_runs(root=None, device=None)  the runs that may be a default (none marked
                               running or failed, Run.may_be_default), of `device` (None:
                               every device's): the claims' measured runs, the FP8
                               comparison's, the side by side's
    newest_with(answers, device=None)  the newest default run of `device` for which
                               `answers(run)` is true, else None
"""
from __future__ import annotations

from ...storage.store import find_runs
from ...storage.checked import CALLABLE, FOLDER, TEXT, takes


@takes(root=FOLDER | None)
def every_run(root=None) -> list:
    """Every run folder with results under `root` (None: data_dir()), newest first."""
    return find_runs(root)


@takes(root=FOLDER | None, device=TEXT | None)
def default_runs(root=None, device: str | None = None) -> list:
    """The runs under `root` (None: data_dir()) not marked running or failed, of `device`
    (Run.device; None: every device's), newest first."""
    return [r for r in find_runs(root, defaults=True) if device is None or r.device == device]


@takes(answers=CALLABLE, device=TEXT | None)
def newest_with(answers, device: str | None = None):
    """The newest of default_runs(device=device) that `answers`, else None."""
    return next((r for r in default_runs(device=device) if answers(r)), None)
