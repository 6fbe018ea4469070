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


# --- import-aiter: a row no model can be, named by its line ---------------------------------------

@pytest.mark.parametrize("row,says", [
    (dict(topk=9, expert=8), "{t} is unreadable or corrupt (line 3: topk 9 is above expert 8 "
                             "(a token is routed to at most every expert))"),
    (dict(inter_dim=300000), "{t} line 3: custom model I=300000 is too large: H and I at most "
                             "262144, E at most 4096, layers at most 1024"),
])
def test_import_aiter_names_the_line_of_a_shape_no_model_can_be(tmp_path, capsys, row, says):
    """Before: `custom model needs positive H, I, E, k with k <= E` (or the cap's line),
    naming neither the table nor its line."""
    from test_aiter_tables import write_table
    table = write_table(tmp_path / "tuned_fmoe.csv", [dict(), row])
    around = _tree(tmp_path)
    assert main(["import-aiter", "--file", str(table), "--out", str(tmp_path / "run")]) == 2
    assert _one_line(capsys) == "moe-lab: error: " + says.format(t=table)
    assert _tree(tmp_path) == around


# --- ceilings: its numbers and its folder, before any GPU is asked for ---------------------------

@pytest.mark.parametrize("extra,says", [
    (["--calls", "0"], "--calls 0: give a whole number >= 1"),
    (["--calls", "-3"], "--calls -3: give a whole number >= 1"),
    (["--size-gib", "nan"], "--size-gib nan: give a positive, finite number of GiB"),
    (["--size-gib", "0"], "--size-gib 0.0: give a positive, finite number of GiB"),
    (["--size-gib", "1e9"], "--size-gib 1000000000.0: at most 1024 GiB (give a positive, finite "
                            "number of GiB)"),
    (["--out-dir", "{f}"], "--out-dir {f}: {f} is a file, not a folder; give a new path or "
                           "remove the file"),
    (["--out-dir", "{f}/c"], "--out-dir {f}/c: {f} is a file, not a folder; give a new path or "
                             "remove the file"),
])
def test_ceilings_refuses_its_numbers_and_a_file_for_its_folder(tmp_path, capsys, extra, says):
    """Before: none of them was checked. On a GPU, --calls 0 reached statistics.median([])
    and --size-gib nan int(nan) (tracebacks), and an --out-dir under a file was found only
    after the measuring; on a CPU machine each was the 'no GPU here' line."""
    f = tmp_path / "notes"
    f.write_text("mine")
    around = _tree(tmp_path)
    argv = ["ceilings", "--out-dir", str(tmp_path / "c")] + [a.format(f=f) for a in extra]
    assert main(argv) == 2
    assert _one_line(capsys) == "moe-lab: error: " + says.format(f=f)
    assert _tree(tmp_path) == around


# --- profile --trace: the file written is the file named ------------------------------------------

MODEL = "custom:H=64,I=32,E=4,k=2"
PROFILE = ["profile", "--model", MODEL, "--tp", "1", "--tokens", "1", "--dtype", "fp32",
           "--device", "cpu", "--iters", "1"]


@pytest.mark.parametrize("where,says", [
    ("folder", "--trace {p}: {p} is a folder, not a file; give a file path"),
    ("notes/t.json.gz", "--trace {p}: {t}/notes is a file, not a folder; give a new path or "
     "remove the file")])
def test_profile_trace_a_folder_or_under_a_file_is_refused(tmp_path, capsys, where, says):
    """Before: --trace DIR profiled, wrote DIR.json.gz beside the folder and printed
    `trace: DIR`; under a file, the profiling ran and then '.../notes: File exists'."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes").write_text("mine")
    around = _tree(tmp_path)
    p = tmp_path / where
    assert main(PROFILE + ["--trace", str(p)]) == 2
    assert _one_line(capsys) == "moe-lab: error: " + says.format(p=p, t=tmp_path)
    assert _tree(tmp_path) == around


@pytest.mark.parametrize("split", [[], ["--split"]])
def test_profile_says_the_trace_it_wrote(tmp_path, capsys, split):
    """A --trace without .json.gz gets it added. Before: profile printed the path given
    (a file that is not there), and --split refused it afterwards ('no trace file', exit 2)
    with the trace written beside it."""
    assert main(PROFILE + split + ["--trace", str(tmp_path / "t.json")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"# trace: {tmp_path / 't.json.json.gz'} (open in https://ui.perfetto.dev)"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json.json.gz"]


def test_the_api_profile_returns_the_trace_it_wrote(tmp_path):
    import moe_lab as ml
    _, trace = ml.profile(MODEL, 1, tp=1, dtype="fp32", device="cpu", iters=1,
                          trace=str(tmp_path / "t"))
    assert trace == str(tmp_path / "t.json.gz") and Path(trace).is_file()  # was: .../t


# --- the tuned files' pairs: a configs folder that is not one -------------------------------------

PAIRED = ["h200-grid-aiter-triton-qwen3-235b-a22b-tp8-bf16", "h200-vllm-vtuned-bf16-tp8"]


@pytest.mark.parametrize("who", ["current_pairs", "published_pairs"])
@pytest.mark.parametrize("given,says", [("{t}/nope", "configs_dir {t}/nope is not a folder"),
                                        ("{t}/a-file", "configs_dir {t}/a-file is not a folder"),
                                        ("", "configs_dir is empty; give a folder, or None "
                                             "for the default")])
def test_pairs_refuse_a_configs_dir_that_is_not_a_folder(tmp_path, who, given, says):
    """Before: no pair at all, without a word (current_pairs counted every tuned point
    stale: no provenance said when its file was written), where inventory and left
    refuse the same folder."""
    from moe_lab.analysis import tuned
    call = getattr(tuned, who)
    assert len(call(PAIRED)[0] if who == "current_pairs" else call(PAIRED))  # the default: pairs
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UsageError) as exc:
        call(PAIRED, configs_dir=given.format(t=tmp_path))
    assert str(exc.value) == f"{who}: " + says.format(t=tmp_path)


def test_inventory_and_left_refuse_an_empty_configs_dir():
    """Before: "" read as the current folder: every shape without a file."""
    from moe_lab.analysis import tuned as tf
    for call, who in ((lambda: tf.inventory(""), "inventory"),
                      (lambda: tf.left("tune", "NVIDIA H200", configs_dir=""), "left")):
        with pytest.raises(UsageError) as exc:
            call()
        assert str(exc.value) == (f"{who}: configs_dir is empty; give a folder, or None "
                                  "for the default")


# --- targets.by_name -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["nope", "", None])
def test_a_target_name_that_is_not_one_is_one_line_naming_the_targets(name):
    """Before: KeyError: 'nope'."""
    from moe_lab.analysis import targets
    with pytest.raises(UsageError) as exc:
        targets.by_name(name)
    line = str(exc.value)
    assert line.startswith(f"by_name: no target {name!r}; the targets: ") and "\n" not in line
    assert all(t.name in line for t in targets.TARGETS)


# --- profile: an option of another mode is refused, not ignored ----------------------------------

@pytest.mark.parametrize("extra,says", [
    (["--cu-num", "80"], "--cu-num without --explain: it shapes --explain only; add --explain "
                         "(or leave it out)"),
    (["--cu-num", "80", "--gfx", "gfx942"], "--cu-num, --gfx without --explain: they shape "
                                            "--explain only; add --explain (or leave them out)"),
    (["--run", "r"], "--run without --split: it names the run whose traces --split splits; add "
                     "--split (or leave it out)"),
    (["--split", "--run", "r"], "--run with --model: --split splits one point (--model, "
                                "--tokens) or every trace of a run (--run); give one"),
])
def test_profile_refuses_an_option_of_another_mode(tmp_path, capsys, monkeypatch, extra, says):
    """Before: ignored, exit 0: the point profiled (or split) here as if it were not given."""
    monkeypatch.chdir(tmp_path)  # the default trace (out/traces/...) would go here
    assert main(PROFILE + extra) == 2
    assert _one_line(capsys) == "moe-lab: error: " + says
    assert not list(tmp_path.iterdir())
