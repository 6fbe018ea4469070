"""A hostile-input audit of the newer verbs and the notebook API (merge, import-aiter,
ceilings, profile --trace, the tuned-files readers, the targets): each bad input one line
(CLI: `moe-lab: error:` on stderr, exit 2; API: UsageError), nothing written where it was
not asked. Each test failed before its fix (the docstring or comment says what happened).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from moe_lab.cli import main
from moe_lab.core.errors import UsageError
from conftest import RUNS_DIR, folder_tree as _tree, one_line_err as _one_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNS = Path(RUNS_DIR)
TUNE_RUN = "h200-tune-vllm-qwen3-235b-a22b-tp8-bf16"
IMPORT_RUN = "aiter-tuned-fmoe-0-1-7-post2-dev18"


# --- merge: only the parts of a sweep ------------------------------------------------------------

@pytest.mark.parametrize("run,kind", [(TUNE_RUN, "a tune"), (IMPORT_RUN, "an import")])
def test_merge_refuses_a_run_that_is_not_a_sweeps(tmp_path, capsys, run, kind):
    """Before: two copies of one tune run merged (exit 0) into a run of no kind, read as a
    sweep: its candidates.parquet empty (no result row held their point ids), its
    winners.parquet holding every winner twice; an import's rows (AMD's tuner's times)
    became a sweep's."""
    src = tmp_path / "src"
    for name in ("a", "b"):
        shutil.copytree(RUNS / run, src / name)
    around = _tree(tmp_path)
    assert main(["merge", str(tmp_path / "out"), str(src / "a"), str(src / "b")]) == 2
    assert _one_line(capsys) == (f"moe-lab: error: a is {kind} run, not a sweep run: merge "
                                 "combines the parts of one sweep")
    assert _tree(tmp_path) == around  # no out folder
