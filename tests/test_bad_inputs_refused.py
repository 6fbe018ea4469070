"""Values that were accepted with exit 0 and then did something other than asked (issue
25): each is now one line on stderr and exit 2, with nothing written."""
from __future__ import annotations

import pytest

from moe_lab.cli import main

MODEL = "custom:H=64,I=32,E=8,k=2"


def _refused(argv, capsys, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err


def test_an_ep_rank_without_ep_is_refused(tmp_path, capsys):
    _refused(["sweep", "--models", MODEL, "--tp", "1", "--ep", "1", "--ep-rank", "3",
              "--tokens", "1", "--device", "cpu", "--data-dir", str(tmp_path),
              "--run-id", "r", "--no-progress"], capsys, ["--ep-rank 3", "--ep 1"])
    assert not any(tmp_path.iterdir())  # nothing written


def test_compare_values_without_by_is_refused(capsys):
    _refused(["compare", "h200-review-a-20261201", "h200-review-b-20261201", "--values",
              "default,tuned"], capsys, ["--values", "--by"])


@pytest.mark.parametrize("value", ["0", "-5"])
def test_report_timeout_must_be_positive(tmp_path, capsys, value):
    _refused(["report", "--timeout", value, "--out", str(tmp_path / "rep")], capsys,
             ["--timeout", value])
    assert not (tmp_path / "rep").exists()
