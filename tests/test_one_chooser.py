"""One run chooser (issue 65): the findings and the notebooks read the same run for the same
question. A notebook asks analysis.runs with no device (the rule's run, a GPU's first); the
findings ask it once per device. On the committed data, the findings' section for the
device of the notebook's run reads the notebook's run(s): a test per question both ask.
Each test also checks that the notebook's cell and the findings' module still ask it so
(the question, not a run of their own)."""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _code(notebook: str) -> str:
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def _findings() -> str:
    return "\n".join(p.read_text() for p in sorted((ROOT / "moe_lab" / "findings").glob("*.py")))


@pytest.fixture(autouse=True)
def _committed(monkeypatch):
    """The committed data folder, whatever the environment names."""
    from moe_lab.storage.store import DATA_DIR_ENV
    monkeypatch.setenv(DATA_DIR_ENV, str(ROOT / "data" / "runs"))


def _ids(runs) -> list[str]:
    return [r.run_id for r in runs]


def test_tuning_notebook_05_and_the_findings_targets_read_one_run():
    from moe_lab.analysis import runs, tuning
    assert "choose('tuning', run)" in _code("05_tuning.ipynb")
    assert "tu.open_tuned_run(device=device)" in _findings()
    nb = runs.choose("tuning").run
    assert tuning.open_tuned_run(device=nb.device).run_id == nb.run_id


def test_ledger_notebook_05_and_the_findings_read_the_same_runs():
    from moe_lab.analysis import runs
    assert "ledger_choice(ledger_runs, device=run.device)" in _code("05_tuning.ipynb")
    assert "runs_with_phases(None, device)" in _findings()
    device = runs.choose("tuning").run.device  # notebook 05's run's device
    got, why = runs.ledger_choice(None, device=device)
    assert got and _ids(got) == _ids(runs.runs_with_phases(None, device)), why


def test_distributed_notebook_06_and_the_findings_read_one_run():
    from moe_lab.analysis import runs
    assert "choose('distributed', run)" in _code("06_expert_parallel.ipynb")
    assert 'choose("distributed", device=device)' in _findings()
    nb = runs.choose("distributed").run
    assert runs.choose("distributed", device=nb.device).run.run_id == nb.run_id


def test_vllm_notebook_05_and_the_findings_read_the_same_runs():
    from moe_lab.analysis import runs, vllm_compare as vc
    assert "vllm_choice(vllm_runs)" in _code("05_tuning.ipynb")
    assert "vc.vllm_runs(device=device)" in _findings()
    nb, why = runs.vllm_choice(None)
    assert nb, why
    assert _ids(vc.vllm_runs(device=nb[0].device)) == _ids(nb)
