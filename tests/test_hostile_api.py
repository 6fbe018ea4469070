"""The notebook API (moe_lab.analysis, as notebooks/*.ipynb call it) against hostile input:
a run id or folder wherever runs are taken, and every bad value a UsageError in one line,
never a traceback from deep inside pandas or an empty answer that looks like a real one."""
from __future__ import annotations

from pathlib import Path

import pytest

from moe_lab.core.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
VLLM_RUN = "h200-vllm-bf16-tp8"  # a committed run with vLLM as shipped and stored phases


@pytest.fixture
def committed(monkeypatch):
    monkeypatch.setenv("MOE_LAB_DATA", str(ROOT / "data" / "runs"))


def _calls():
    from moe_lab.analysis import published, tuned_files, vllm_compare
    from moe_lab.cost import ledger
    return [ledger.of_runs, vllm_compare.compared, vllm_compare.frames,
            tuned_files.current_pairs, published.published_pairs]


@pytest.mark.parametrize("i", range(5))
def test_runs_given_as_ids_are_opened(committed, i):
    """Before: AttributeError ('str' object has no attribute 'path'), where
    runs.ledger_choice and runs.vllm_choice take ids."""
    from moe_lab.storage.store import open_run
    call = _calls()[i]
    by_id = call([VLLM_RUN])
    by_run = call([open_run(VLLM_RUN)])
    for a, b in zip(by_id if isinstance(by_id, tuple) else [by_id],
                    by_run if isinstance(by_run, tuple) else [by_run]):
        if hasattr(a, "equals"):
            assert a.equals(b)
    assert type(call(VLLM_RUN)) is type(by_id)  # one id: that run


@pytest.mark.parametrize("i", range(5))
@pytest.mark.parametrize("runs,says", [
    (["no-such-run"], "no run folder no-such-run"),
    (None, "runs: give a list of runs (Runs, run ids or folders), not None"),
    (5, "runs 5: give a list of runs (Runs, run ids or folders)"),
])
def test_runs_that_cannot_be_opened_are_one_line(committed, i, runs, says):
    with pytest.raises(UsageError) as exc:
        _calls()[i](runs)
    assert says in str(exc.value) and "\n" not in str(exc.value)
