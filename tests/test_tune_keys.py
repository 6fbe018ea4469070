"""`moe-lab tune` into a configs folder that already holds a tuned file of the same shape:
the file's token counts that another run tuned and this one does not are never dropped
silently (moe_lab.measuring.tuning_files). Before: the file was replaced by this run's keys
alone, exit 0, the other run's winners gone."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import folder_tree as _tree, one_line_err as _one_line  # noqa: E402
from moe_lab.cli import main

MODEL = "custom:H=64,I=32,E=4,k=2"


@pytest.fixture(scope="module")
def chunked():
    """The tunable CPU test backend (tests/data/plugin/torch_chunked.py), registered."""
    from conftest import plugin_backend
    for _ in plugin_backend("torch_chunked.py", "torch-chunked"):
        yield "torch-chunked"


def _tune(root, run, tokens, configs="configs") -> list[str]:
    return ["tune", "--backend", "torch-chunked", "--models", MODEL, "--tp", "1", "--ep", "1",
            "--tokens", tokens, "--dtype", "fp32", "--device", "cpu", "--no-progress",
            "--rep-ms", "1", "--warmup-ms", "1", "--run-id", run,
            "--data-dir", str(root / "runs"), "--configs-dir", str(root / configs)]


def _files(root, configs="configs") -> dict:
    """{file name: its token counts} and provenance.json's {file name: run}."""
    folder = root / configs / "torch-chunked"
    prov = json.loads((folder / "provenance.json").read_text())
    return {p.name: tuple(sorted(map(int, json.loads(p.read_text()))))
            for p in folder.glob("E=*.json")}, {k: v["run"] for k, v in prov.items()}


@pytest.fixture(scope="module")
def tuned_a(chunked, tmp_path_factory):
    """A data folder where run `a` tuned MODEL at 1,2,4 tokens into configs/."""
    root = tmp_path_factory.mktemp("keys")
    assert main(_tune(root, "a", "1,2,4")) == 0
    return root


def _copy(tuned_a, tmp_path):
    import shutil
    shutil.copytree(tuned_a, tmp_path, dirs_exist_ok=True)
    return tmp_path


def test_a_run_that_would_drop_another_runs_keys_is_refused_before_any_timing(
        tuned_a, tmp_path, capsys):
    root = _copy(tuned_a, tmp_path)
    files, prov = _files(root)
    assert set(files.values()) == {(1, 2, 4)} and set(prov.values()) == {"a"}
    around = _tree(root)
    capsys.readouterr()
    assert main(_tune(root, "b", "1")) == 2
    err = _one_line(capsys)
    gemm1 = next(n for n in files if not n.endswith("_down.json"))
    assert err.startswith(f"moe-lab: error: {root / 'configs' / 'torch-chunked' / gemm1} holds "
                          "token counts 2,4 tuned by run a that this run does not tune")
    assert "and from 1 other file" in err
    assert err.endswith("tune those token counts too (--tokens 1,2,4), or give another "
                        "--configs-dir")
    assert _tree(root) == around  # no run folder b, no file replaced: no GPU time spent


def test_a_file_no_provenance_entry_names_is_refused_too(tuned_a, tmp_path, capsys):
    root = _copy(tuned_a, tmp_path)
    (root / "configs" / "torch-chunked" / "provenance.json").write_text("{}")
    capsys.readouterr()
    assert main(_tune(root, "b", "2")) == 2
    assert "holds token counts 1,4 tuned by a run provenance.json does not name" in \
        _one_line(capsys)


@pytest.mark.parametrize("run,tokens", [("b", "1,2,4,8"),  # every key of the file, and more
                                        ("a", "1")])  # the run that wrote it, resumed
def test_a_run_that_keeps_every_key_or_wrote_the_file_replaces_it(tuned_a, tmp_path, capsys,
                                                                   run, tokens):
    root = _copy(tuned_a, tmp_path)
    assert main(_tune(root, run, tokens)) == 0
    files, prov = _files(root)
    keys = sorted({1, 2, 4} | set(map(int, tokens.split(","))))
    assert set(files.values()) == {tuple(keys)} and set(prov.values()) == {run}


def test_a_resumed_run_keeps_its_earlier_commands_keys(tuned_a, tmp_path, capsys):
    """Run b tuned 1,2,4 (and wrote the files); run a, whose winners are 1,2,4 too, resumed
    with --tokens 1 writes 1,2,4 again: b's keys are all within a's, nothing dropped."""
    root = _copy(tuned_a, tmp_path)
    assert main(_tune(root, "b", "1,2,4")) == 0
    assert set(_files(root)[1].values()) == {"b"}
    assert main(_tune(root, "a", "1")) == 0
    files, prov = _files(root)
    assert set(files.values()) == {(1, 2, 4)} and set(prov.values()) == {"a"}


def test_a_file_written_during_the_search_is_refused_at_its_end_and_nothing_is_lost(
        chunked, tmp_path, capsys, monkeypatch):
    """Another run writes the shape's file (with a key this run does not tune) while this
    one searches: refused where the files are written, one line saying where the winners
    and candidates are; the other run's file stays; the same command with another
    --configs-dir writes the files from the rows, timing nothing again."""
    from moe_lab import backends
    from moe_lab.core.config_files import write_table
    from moe_lab.core.environment import device_name
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring import tuning
    folder = tmp_path / "configs" / "torch-chunked"
    names = backends.get(chunked).config_files(make_problem(MODEL, 1, "fp32", 1, 1),
                                               device_name("cpu"))
    real, calls = tuning.time_fn, []

    def other_run_finishes(*a, **kw):
        if not calls:
            for name in names.values():
                write_table(folder / name, {1: {"CHUNK": 4}, 8: {"CHUNK": 16}})
            (folder / "provenance.json").write_text(json.dumps(
                {n: {"run": "other"} for n in names.values()}))
        calls.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(tuning, "time_fn", other_run_finishes)
    capsys.readouterr()
    assert main(_tune(tmp_path, "b", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    run = tmp_path / "runs" / "b"
    assert err.startswith(f"moe-lab: error: {folder / names['gemm1']} holds token counts 8 "
                          "tuned by run other that this run has no winner for")
    assert (f"nothing was written to {folder}; this run's winners are in "
            f"{run / 'winners.parquet'} and its candidates in {run / 'candidates.parquet'}") in err
    assert _files(tmp_path)[0] == {n: (1, 8) for n in names.values()}  # the other run's
    winners = pd.read_parquet(run / "winners.parquet")
    assert list(winners["tokens"]) == [1]
    rows, timed = pd.read_parquet(run / "candidates.parquet"), len(calls)
    assert len(rows) and timed
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    # the hint: the same command, another configs folder: the files, no timing again
    assert main(_tune(tmp_path, "b", "1", configs="mine")) == 0
    assert len(calls) == timed and len(pd.read_parquet(run / "candidates.parquet")) == len(rows)
    files, prov = _files(tmp_path, "mine")
    assert set(files.values()) == {(1,)} and set(prov.values()) == {"b"}
    mine = json.loads((tmp_path / "mine" / "torch-chunked" / names["gemm1"]).read_text())
    assert mine["1"] == json.loads(winners["config"].iloc[0])["gemm1"]


def test_a_tuned_file_that_cannot_be_read_is_refused_not_replaced(tuned_a, tmp_path, capsys):
    """Before: an unreadable file of another run was replaced by this run's keys without a
    word (what it held, unknown, gone)."""
    root = _copy(tuned_a, tmp_path)
    folder = root / "configs" / "torch-chunked"
    broken = sorted(folder.glob("E=*.json"))[0]
    broken.write_text('{"1": {"BLOCK')
    around = _tree(root / "configs")
    assert main(_tune(root, "b", "1,2,4")) == 2
    line = _one_line(capsys)
    assert str(broken) in line and "unreadable or corrupt" in line
    assert "move it away or repair it first, or give another --configs-dir" in line
    assert _tree(root / "configs") == around  # nothing replaced
