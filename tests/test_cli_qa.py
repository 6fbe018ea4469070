"""What a new user trips on at the command line: help that says "(default: None)", a
compare or review that selects nothing and still exits 0, review-only options given to the
notebook report, a traceback when the reader of a pipe leaves, and a notebook export that
cannot find nbconvert's templates from a venv made with --system-site-packages."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from moe_lab.cli import build_parser, main

A, B, TUNED = "h200-repeat-a-20261130", "h200-repeat-b-20261130", "h200-tuned-20261130"


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _verb_parser(verb: str):
    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[verb]


def _verb_help(verb: str) -> str:
    return _verb_parser(verb).format_help()


@pytest.mark.parametrize("verb", ["backends", "check", "sweep", "profile", "tune", "roofline",
                                  "compare", "report", "import-aiter", "ceilings"])
def test_help_never_says_default_none_nor_twice(verb):
    assert "(default: None)" not in " ".join(_verb_help(verb).split())
    sp = _verb_parser(verb)
    fmt = sp._get_formatter()
    for action in sp._actions:
        if action.help:  # a help that states its default gets no second "(default: ...)"
            shown = fmt._get_help_string(action)
            assert shown == action.help or "default" not in action.help.lower(), shown


def test_help_still_shows_a_plain_default():
    text = " ".join(_verb_help("sweep").split())
    assert "timed repetitions, in ms (default: 50.0)" in text


def test_compare_with_a_mode_no_row_has_is_refused(capsys, tmp_path):
    assert main(["compare", A, B, "--mode", "bogus", "--out", str(tmp_path)]) == 2
    err = _one_line_error(capsys)
    assert "'bogus'" in err and "eager" in err and "graph" in err
    assert not list(tmp_path.iterdir())  # no empty figure or CSV written


def test_compare_by_a_value_no_row_has_is_refused(capsys, tmp_path):
    assert main(["compare", TUNED, "--by", "config", "--values", "default,nosuch",
                 "--out", str(tmp_path)]) == 2
    err = _one_line_error(capsys)
    assert "config='nosuch'" in err and "default" in err and "tuned" in err


def test_review_with_a_bad_mode_or_value_is_refused(capsys, tmp_path):
    assert main(["report", "--runs", f"{A},{B}", "--mode", "bogus", "--out", str(tmp_path)]) == 2
    assert "'bogus'" in _one_line_error(capsys)
    assert main(["report", "--runs", TUNED, "--by", "config", "--values", "default,x",
                 "--out", str(tmp_path)]) == 2
    assert "config='x'" in _one_line_error(capsys)
    assert not (tmp_path / "index.html").exists()


@pytest.mark.parametrize("extra", [["--mode", "graph"], ["--by", "config", "--values", "a,b"]])
def test_review_options_without_runs_are_refused_not_ignored(capsys, tmp_path, extra):
    # before: the notebooks ran (minutes) and the option was silently ignored
    assert main(["report", "--out", str(tmp_path)] + extra) == 2
    assert "--runs" in _one_line_error(capsys)


def test_report_only_matching_nothing_names_the_prefix(capsys):
    assert main(["report", "--only", "99"]) == 2
    assert "99" in _one_line_error(capsys)


def test_report_started_outside_the_checkout_finds_the_notebooks(tmp_path):
    """The default notebook folder is the checkout's, not <cwd>/notebooks (none found: exit
    2). Notebook 05 for a run it refuses in its first cells: its page is written all the
    same, in seconds (test_notebook_05 executes it in full)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "moe_lab", "report", "--only", "05",
                        "--run", "h200-seed4-20261129", "--out", str(tmp_path / "rep")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "refused 05_tuning: UsageError" in p.stdout, p.stdout[-2000:]
    assert (tmp_path / "rep" / "h200-seed4-20261129" / "05_tuning.html").is_file()


def test_a_closed_pipe_is_not_a_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = (f"{sys.executable} -m moe_lab compare {TUNED} --by config --values default,tuned "
           f"--resamples 10 --out {tmp_path} | head -1")
    p = subprocess.run(cmd, shell=True, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.stdout.strip(), p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr[-2000:]


def test_export_finds_nbconvert_templates_from_a_system_site_packages_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    code = ("import sys, nbformat; from moe_lab.report import export; "
            "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell('hi')]); "
            "export(nb, 'x', sys.argv[1])")
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("JUPYTER_PATH", None)
    if subprocess.run([str(py), "-c", "import nbconvert"], env=env).returncode != 0:
        pytest.skip("nbconvert is not in the base interpreter's site-packages")
    p = subprocess.run([str(py), "-c", code, str(tmp_path / "out")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-1500:]
    assert (tmp_path / "out" / "x.html").read_text().count("hi") >= 1


@pytest.mark.parametrize("argv", [
    ["compare", A, B, "--out", "{file}"],                  # --out is a file
    ["check", "--model", "custom:H=64,I=32,E=4,k=2", "--tp", "1", "--tokens", "1",
     "--backends", "torch", "--out", "{file}/x.txt"],      # --out under a file
    ["sweep", "--models", "custom:H=64,I=32,E=4,k=2", "--tp", "1", "--tokens", "1",
     "--backends", "torch", "--device", "cpu", "--no-progress", "--data-dir", "{file}"],
])
def test_an_output_path_that_cannot_be_written_is_one_line(capsys, tmp_path, argv):
    f = tmp_path / "a-file"
    f.write_text("")
    assert main([a.replace("{file}", str(f)) for a in argv]) == 2
    assert str(f) in _one_line_error(capsys)


def test_tune_of_a_backend_that_cannot_run_here_is_refused(capsys, tmp_path):
    from moe_lab.backends import get
    ok, why = get("aiter-triton").available()
    if ok:
        pytest.skip("aiter-triton runs here")
    assert main(["tune", "--models", "custom:H=64,I=32,E=4,k=2", "--tp", "1", "--ep", "1",
                 "--tokens", "1", "--device", "cpu", "--no-progress",
                 "--data-dir", str(tmp_path), "--configs-dir", str(tmp_path / "c")]) == 2
    assert why in _one_line_error(capsys)
    assert not list(tmp_path.iterdir())  # no run folder of failed candidates


def test_check_columns_line_up_with_long_backend_names(capsys):
    assert main(["check", "--model", "custom:H=64,I=32,E=4,k=2", "--tp", "1", "--tokens", "1",
                 "--device", "cpu", "--dtype", "fp32",
                 "--backends", "torch,torch-grouped-bmm,aiter-triton-silu"]) in (0, 1)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    col = lines[0].index("status")
    for ln in lines[1:]:  # every row's status starts under the header's
        assert ln[col - 1] == " " and ln[col] != " ", (lines[0], ln)


def test_a_sweep_started_elsewhere_writes_where_run_ids_are_looked_up(tmp_path, monkeypatch,
                                                                      capsys):
    elsewhere, runs = tmp_path / "elsewhere", tmp_path / "runs"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("MOE_LAB_DATA", str(runs))
    assert main(["sweep", "--models", "custom:H=64,I=32,E=4,k=2", "--tp", "1", "--tokens", "1",
                 "--backends", "torch", "--dtype", "fp32", "--device", "cpu", "--no-progress",
                 "--rep-ms", "2", "--warmup-ms", "1", "--no-profile", "--run-id", "r"]) == 0
    assert (runs / "r" / "results.parquet").exists() and not (elsewhere / "data").exists()
    capsys.readouterr()
    # found by its run id (--by with one value twice is refused since issue 37)
    assert main(["report", "--runs", "r", "--out", str(tmp_path / "review")]) == 0
    assert (tmp_path / "review" / "index.html").exists()


def test_a_token_range_without_a_power_of_two_is_refused_not_an_empty_check(capsys):
    # before: `check --tokens 5-5` checked nothing and printed "all available backends pass"
    assert main(["check", "--model", "custom:H=64,I=32,E=4,k=2", "--tp", "1", "--tokens", "5-7",
                 "--device", "cpu", "--backends", "torch"]) == 2
    assert "powers of two" in _one_line_error(capsys)


def test_repeated_token_counts_are_one_point_each():
    from moe_lab.core.problems import parse_tokens
    assert parse_tokens("1,1,2,1") == [1, 2] and parse_tokens("3-17") == [4, 8, 16]


@pytest.mark.parametrize("n", ["0", "-5"])
def test_compare_refuses_a_resample_count_below_one(capsys, tmp_path, n):
    assert main(["compare", A, B, "--resamples", n, "--out", str(tmp_path)]) == 2
    assert "--resamples" in _one_line_error(capsys)


def test_help_shows_a_default_of_zero_and_every_profile_option_has_help():
    text = " ".join(_verb_help("profile").split())
    assert "EP rank whose experts are held (default: 0)" in text
    assert all(a.help for a in _verb_parser("profile")._actions)


@pytest.mark.parametrize("argv", [["check", "--model", ""], ["sweep", "--backends", ""],
                                  ["compare", "a", "b", "--mode", ""]])
def test_an_empty_value_is_refused_not_read_as_the_default(capsys, argv):
    """`--model "$MODEL"` with MODEL unset must not check the default models instead."""
    assert main(argv) == 2
    assert "is empty" in _one_line_error(capsys)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is visible here")
@pytest.mark.parametrize("argv", [["backends", "--device", "cuda"],
                                  ["check", "--device", "cuda", "--tokens", "1"],
                                  ["sweep", "--device", "cuda", "--tokens", "1"]])
def test_asking_for_a_gpu_where_none_is_visible_is_one_line(capsys, argv):
    """`backends --device cuda` on a CPU machine listed the torch backends as available."""
    assert main(argv) == 2
    assert "no GPU is visible" in _one_line_error(capsys)
