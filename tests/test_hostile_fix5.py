"""Refusals of helper-25's audit list (left unfixed there): each one line, exit 2, nothing
written."""
from __future__ import annotations

from pathlib import Path

from conftest import RUNS_DIR, one_line_err
from moe_lab.cli import main

RUN = "h200-repeat-a-20261130"


def test_import_aiter_given_a_folder_says_it_is_a_folder(tmp_path, capsys):
    """Before: '<folder>: no such file', for a folder that exists."""
    assert main(["import-aiter", "--file", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert one_line_err(capsys).endswith(f"{tmp_path}: a folder, not a CSV table file")
    assert not (tmp_path / "r").exists()


def test_findings_given_a_run_folder_names_the_folder_above(tmp_path, capsys):
    """Before: '... holds no run folder', as if the folder were empty."""
    run = Path(RUNS_DIR) / RUN
    out = tmp_path / "f.md"
    assert main(["findings", "--data-dir", str(run), "--out", str(out)]) == 2
    err = one_line_err(capsys)
    assert "a run folder; give the folder of run folders that holds it" in err
    assert str(run.resolve().parent) in err and not out.exists()


def test_findings_check_without_a_file_to_check_is_refused(tmp_path, capsys):
    """Before: exit 1 (the 'differs' verdict) and a diff against nothing."""
    out = tmp_path / "none.md"
    assert main(["findings", "--check", "--out", str(out)]) == 2
    assert f"no findings file {out} to check" in one_line_err(capsys)
    assert not out.exists()


def test_compare_a_run_with_itself_is_refused(tmp_path, capsys):
    """Before: exit 0 and every ratio 1.00, while `--values torch,torch` was refused."""
    out = tmp_path / "c"
    assert main(["compare", RUN, str(Path(RUNS_DIR) / RUN), "--out", str(out)]) == 2
    assert "are one run: comparing it with itself says nothing" in one_line_err(capsys)
    assert not out.exists()


def test_compare_calibrate_with_out_is_refused(tmp_path, capsys):
    """Before: --out was ignored without a word (--by, --values and --mode were refused)."""
    cal = tmp_path / "noise.json"
    assert main(["compare", "--calibrate", RUN, "h200-repeat-b-20261130", "--calibration",
                 str(cal), "--out", str(tmp_path / "o")]) == 2
    assert "no --by, --values, --mode or --out" in one_line_err(capsys)
    assert not cal.exists() and not (tmp_path / "o").exists()
