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


@pytest.mark.parametrize("call,says", [
    # before: a table of every required shape "missing" (no file found), as if nothing were tuned
    (lambda tf, tmp: tf.inventory(tmp / "nope"), "inventory: configs_dir {tmp}/nope is not a folder"),
    (lambda tf, tmp: tf.inventory(tmp / "a-file"), "inventory: configs_dir {tmp}/a-file is not a folder"),
    # before: FileNotFoundError / NotADirectoryError from Path.iterdir
    (lambda tf, tmp: tf.search_spread(root=tmp / "nope"),
     "the winners runs: root {tmp}/nope is not a folder"),
    (lambda tf, tmp: tf.verify_points(root=tmp / "a-file"),
     "the verify runs: root {tmp}/a-file is not a folder"),
    # before: an empty Run (no manifest, no rows) that a figure's footer then read as a run
    (lambda tf, tmp: tf.tune_run("no-such-run", root=tmp),
     "tune_run: no run folder 'no-such-run' with a manifest under {tmp}"),
    (lambda tf, tmp: tf.tune_run("", root=tmp), "tune_run: no run folder '' with a manifest under {tmp}"),
])
def test_tuned_files_readers_refuse_a_folder_that_is_not_there(tmp_path, call, says):
    from moe_lab.analysis import tuned_files as tf
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UsageError) as exc:
        call(tf, tmp_path)
    assert str(exc.value) == says.format(tmp=tmp_path)


def test_tune_run_of_a_committed_search_is_read(committed):
    from moe_lab.analysis import tuned_files as tf
    r = tf.tune_run("h200-tune-vllm-qwen3-235b-a22b-tp8-bf16")
    assert r.manifest.get("kind") == "tune"


def test_choose_of_a_question_that_is_not_one_is_one_line():
    """Before: KeyError: 'kernel-time'."""
    from moe_lab.analysis import runs
    with pytest.raises(UsageError) as exc:
        runs.choose("kernel-time")
    assert str(exc.value).startswith("choose: no question 'kernel-time'; one of kernel_time, ")
