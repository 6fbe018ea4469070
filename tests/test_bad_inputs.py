"""Nothing lost, one line for every bad file: a resume on a corrupt run is refused before
anything is written; an explicit option sets the corrupt file aside and re-measures."""
import hashlib
import json
import os
from pathlib import Path

import pytest

from moe_lab.cli import main
from moe_lab.core.devices import ceilings_for
from moe_lab.core.errors import CorruptFile

SWEEP = ["sweep", "--models", "custom:H=64,I=32,E=4,k=2", "--tp", "1", "--tokens", "1,2",
         "--backends", "torch", "--dtype", "fp32", "--device", "cpu", "--no-progress",
         "--rep-ms", "2", "--warmup-ms", "1", "--run-id", "r"]


def _snapshot(folder: Path) -> dict:
    return {p.name: (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.iterdir())}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


@pytest.fixture
def run(tmp_path, capsys):
    assert main(SWEEP + ["--data-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    return tmp_path / "r"


@pytest.mark.parametrize("victim", ["results.parquet", "kernels.parquet", "manifest.json"])
def test_resume_on_a_corrupt_run_is_refused_and_the_folder_is_byte_identical(run, capsys, victim):
    p = run / victim
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 3])
    before = _snapshot(run)
    assert main(SWEEP + ["--data-dir", str(run.parent)]) == 2
    err = _one_line_error(capsys)
    assert str(p) in err and "corrupt" in err
    assert _snapshot(run) == before  # nothing rewritten, not even the manifest


def test_set_aside_corrupt_keeps_the_file_and_re_measures_what_is_missing(run, capsys):
    p = run / "results.parquet"
    p.write_bytes(b"PAR1 this is not parquet")
    assert main(SWEEP + ["--data-dir", str(run.parent), "--set-aside-corrupt"]) == 0
    out = capsys.readouterr()
    assert "set aside" in out.err and "2 measured now, 0 already there" in out.out
    kept = list(run.glob("results.parquet.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"PAR1 this is not parquet"
    man = json.loads((run / "manifest.json").read_text())
    assert man["status"] == "complete" and man["resumed"] == 1


def test_annotate_on_a_corrupt_run_is_one_line_exit_2(run, capsys):
    (run / "results.parquet").write_bytes(os.urandom(64))
    before = _snapshot(run)
    assert main(["roofline", "--annotate", str(run)]) == 2
    assert "results.parquet" in _one_line_error(capsys)
    assert _snapshot(run) == before


def test_a_corrupt_ceilings_file_names_itself(tmp_path):
    (tmp_path / "nvidia-h200.json").write_text('{"schema": "moe-lab/ceilings/v1", "device":')
    with pytest.raises(CorruptFile, match="nvidia-h200.json"):
        ceilings_for("NVIDIA H200", tmp_path)
    (tmp_path / "nvidia-h200.json").write_text('{"schema": "moe-lab/ceilings/v1"}')
    with pytest.raises(CorruptFile, match="device.name"):
        ceilings_for("NVIDIA H200", tmp_path)


@pytest.mark.parametrize("argv", [
    ["--backends", "nope"], ["--models", "nosuchmodel"], ["--routing", "zipf:x"],
    ["--modes", "compile:fast"], ["--tokens", "0"]])
def test_unknown_names_exit_2_before_anything_is_written(tmp_path, capsys, argv):
    assert main(SWEEP + ["--data-dir", str(tmp_path)] + argv) == 2  # the last value wins
    _one_line_error(capsys)
    assert not (tmp_path / "r").exists()


def test_open_run_of_a_run_id_that_does_not_exist(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path))
    assert main(["roofline", "--annotate", str(tmp_path / "nope")]) == 2
    assert "nope" in _one_line_error(capsys)


def test_report_names_the_failing_notebook_without_terminal_codes(tmp_path, capsys):
    pytest.importorskip("nbclient")
    import nbformat
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("raise ValueError('the run has no graph rows')")]
    nbformat.write(nb, nbs / "09_broken.ipynb")
    assert main(["report", "--notebooks", str(nbs), "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("FAIL"))
    assert "09_broken.ipynb" in line and "ValueError: the run has no graph rows" in line
    assert "\x1b" not in out
