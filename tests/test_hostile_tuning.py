"""The newest features (tune's search and its resume, `moe-lab findings`, the tuned-files
and published-tuning readers) against hostile input: each bad input one line (CLI: exit 2
on stderr; API: UsageError), nothing written where it was not asked, nothing measured lost.

1. findings on data folders other than the committed one: an empty folder is refused; a
   folder of CPU runs (eager rows only, no target with data) gives the document
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from moe_lab.analysis import tuned as rq

from moe_lab.cli import main
from moe_lab.core.errors import UsageError
from conftest import folder_tree as _tree, one_line_err as _one_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H200 = "NVIDIA H200"  # the committed tuned files' device (issue 63: left names its device)
MODEL = "custom:H=64,I=32,E=4,k=2"
SWEEP = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2", "--backends", "torch",
         "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms", "2",
         "--warmup-ms", "1", "--run-id", "cpu"]


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    """A data folder holding one small CPU sweep run (eager rows, phases)."""
    runs = tmp_path_factory.mktemp("data") / "runs"
    assert main(SWEEP + ["--data-dir", str(runs)]) == 0
    return runs


# --- 1. findings on other data folders ----------------------------------------------------------

def test_findings_of_an_empty_data_folder_is_refused_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    out = tmp_path / "findings.md"
    for check in ([], ["--check"]):
        assert main(["findings", *check, "--data-dir", str(tmp_path / "runs"),
                     "--out", str(out)]) == 2
        # --check without the file to check is refused first (nothing to compare with)
        assert ("no findings file" if check else "holds no run folder") in _one_line(capsys)
    assert not out.exists()


def test_findings_of_a_folder_of_cpu_runs_is_written(cpu_runs, tmp_path, capsys):
    """Before: a traceback (pandas' 'No objects to concatenate' when no target had data;
    then the best points of a run without graph rows, a str + float error)."""
    out = tmp_path / "findings.md"
    capsys.readouterr()
    assert main(["findings", "--data-dir", str(cpu_runs), "--out", str(out)]) == 0
    text = out.read_text()
    assert "## The runs" in text and "`cpu`" in text
    assert main(["findings", "--check", "--data-dir", str(cpu_runs), "--out", str(out)]) == 0


def test_findings_pass_over_a_run_whose_phases_cannot_be_read(cpu_runs, tmp_path, capsys):
    """One run's phases.parquet corrupt: before, `moe-lab findings` stopped on it (one line,
    nothing written) or, where the ledger's question caught it, dropped every run's phases
    and the targets made from them without a word. Now that run is named once and passed
    over; the findings are those of the other runs, and --check agrees with them."""
    only, both = tmp_path / "only", tmp_path / "both"
    shutil.copytree(cpu_runs / "cpu", only / "cpu")
    shutil.copytree(cpu_runs / "cpu", both / "cpu")
    shutil.copytree(cpu_runs / "cpu", both / "other")
    f = both / "other" / "phases.parquet"
    f.write_bytes(f.read_bytes()[:100])
    around = _tree(both)
    assert main(["findings", "--data-dir", str(only), "--out", str(tmp_path / "only.md")]) == 0
    capsys.readouterr()
    for check in ([], ["--check"]):
        out = tmp_path / ("only.md" if check else "both.md")
        assert main(["findings", *check, "--data-dir", str(both), "--out", str(out)]) == 0
        err = capsys.readouterr().err.strip().splitlines()
        assert not check or not err  # said once per process
        assert check or (len(err) == 1 and f"passed over run other: {f} is unreadable" in err[0])
    assert (tmp_path / "both.md").read_text() == (tmp_path / "only.md").read_text()
    assert "stored phases" in (tmp_path / "both.md").read_text()
    assert _tree(both) == around


# --- 2. the tuned files as data ------------------------------------------------------------------

@pytest.fixture
def configs(tmp_path):
    """A copy of the committed H200 tuned files."""
    shutil.copytree(ROOT / "data" / "configs" / "nvidia-h200", tmp_path / "configs")
    return tmp_path / "configs"


def test_a_malformed_provenance_is_said_not_read_as_no_search(configs):
    """Before: read as {} (no provenance): every vllm file without its complete search
    behind it, and left('tune') listed the shapes whose searches are complete (the
    device scripts would have searched them again)."""
    from moe_lab.analysis import tuned as tf
    (configs / "vllm" / "provenance.json").write_text('{"E=16,N=1024')
    for call in (lambda: tf.inventory(configs), lambda: tf.left("tune", H200, configs_dir=configs)):
        with pytest.raises(UsageError, match="vllm/provenance.json is unreadable or corrupt"):
            call()


def test_a_malformed_tuned_file_is_said_not_read_as_missing(configs):
    from moe_lab.analysis import tuned as tf
    f = next((configs / "vllm").glob("E=*.json"))
    f.write_text(f.read_text()[:40])
    with pytest.raises(UsageError, match=f"{f.name} is unreadable or corrupt"):
        tf.inventory(configs)


@pytest.mark.parametrize("keys,says", [
    ({"\u00b2": 1}, "key '\u00b2' is not a token count"),  # isdigit(), but int() fails
    ({"\uff11": 1}, "key '\uff11' is not a token count"),  # a full-width 1
    ({"1": 1, "01": 2}, "token count 1 is a key twice"),  # the later silently won
])
def test_a_config_file_whose_keys_are_not_token_counts_is_refused(tmp_path, capsys, keys, says):
    f = tmp_path / "E=4,N=32,device_name=x.json"
    f.write_text(json.dumps({k: {"BLOCK_SIZE_M": v} for k, v in keys.items()}))
    around = _tree(tmp_path)
    assert main(SWEEP + ["--config", str(f), "--data-dir", str(tmp_path / "runs")]) == 2
    err = _one_line(capsys)
    assert str(f) in err and says in err
    assert _tree(tmp_path) == around


# --- 3. tuned.left and published_file -------------------------------------------------------

@pytest.mark.parametrize("kw,says", [
    (dict(mode="tunes"), "left: mode is tune or sweep, not 'tunes'"),  # was ValueError
    (dict(mode="tune", backends=("aiter_triton",)),  # was [] (nothing left)
     "left: backends 'aiter_triton' not among the required shapes' (aiter-triton, "
     "aiter-triton-silu, vllm)"),
    (dict(mode="sweep", data_dir="/nonexistent/runs"),  # was [] (no run to read)
     "left: data_dir /nonexistent/runs is not a folder"),
    (dict(mode="tune", configs_dir="/nonexistent/configs"),  # was every shape
     "left: configs_dir /nonexistent/configs is not a folder"),
    (dict(mode="tune", device=""),  # issue 63: no default device (was the H200's, on any GPU)
     "left: device '': give the GPU's name as torch gives it, e.g. 'NVIDIA H200' (the device "
     "scripts pass $GPU_NAME)"),
])
def test_left_refuses_what_it_cannot_answer(kw, says):
    from moe_lab.analysis import tuned as tf
    with pytest.raises(UsageError) as exc:
        tf.left(**{"device": H200, **kw})
    assert str(exc.value) == says


def test_left_of_one_backend_given_as_a_string_is_that_backend_only(configs):
    """Before: `b in "aiter-triton-silu"` read the name as a string to search: aiter-triton's
    shapes came with the silu ones."""
    from moe_lab.analysis import tuned as tf
    for f in (configs / "aiter-triton").glob("*.json"):  # aiter-triton's searches left too
        if f.name != "provenance.json":
            f.unlink()
    # aiter-triton's shapes are left here: a filter that let them in would fail the all()
    # below (the silu ones may all be complete: `got` empty is then the answer)
    assert tf.left("tune", H200, backends=("aiter-triton",), configs_dir=configs)
    got = tf.left("tune", H200, backends="aiter-triton-silu", configs_dir=configs)
    assert got == tf.left("tune", H200, backends=("aiter-triton-silu",), configs_dir=configs)
    assert all(w.startswith("aiter-triton-silu:") for w in got)


@pytest.mark.parametrize("word", ["vllm:deepseek-r1:8:8", "vllm:deepseek-r1:eight:8:bf16", ""])
def test_published_file_of_a_word_that_is_not_a_shape_is_one_line(word):
    from moe_lab.analysis import tuned as tf
    with pytest.raises(UsageError, match="is not a shape word backend:model:tp:ep:dtype"):
        rq.published_file(word, H200)


# --- 4. tune: the configs folder and --verify, before any timing -----------------------------------

@pytest.fixture
def chunked():
    """The tunable CPU test backend (tests/data/plugin/torch_chunked.py), registered."""
    from conftest import plugin_backend
    for _ in plugin_backend("torch_chunked.py", "torch-chunked"):
        yield "torch-chunked"


TUNE = ["tune", "--backend", "torch-chunked", "--models", MODEL, "--tp", "1", "--ep", "1",
        "--tokens", "1", "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms", "1",
        "--warmup-ms", "1"]


def _committed(chunked, folder: Path) -> Path:
    """A committed winner's file of MODEL for the chunked backend under folder/<backend>."""
    from moe_lab import backends
    from moe_lab.core.config_files import write_table
    from moe_lab.core.environment import device_name
    from moe_lab.core.problems import make_problem
    name = backends.get(chunked).config_files(make_problem(MODEL, 1, "fp32", 1, 1),
                                             device_name("cpu"))["gemm1"]
    return write_table(folder / chunked / name, {1: {"CHUNK": 4}})


def _damage_provenance(tmp_path, chunked):
    f = _committed(chunked, tmp_path / "configs")
    (f.parent / "provenance.json").write_text('{"E=4')
    return [], "provenance.json is unreadable or corrupt"


def _configs_dir_a_file(tmp_path, chunked):
    (tmp_path / "configs").write_text("mine")
    return [], f"--configs-dir {tmp_path / 'configs'}: {tmp_path / 'configs'} is a file, not a folder"


def _verify_a_malformed_file(tmp_path, chunked):
    f = _committed(chunked, tmp_path / "configs")
    f.write_text(f.read_text()[:12])
    return ["--verify", "0"], f"{f} is unreadable or corrupt"


def _verify_without_a_file(tmp_path, chunked):
    (tmp_path / "configs").mkdir()
    return ["--verify", "0"], "--verify: no committed file E=4,N=32,device_name="


@pytest.mark.parametrize("damage", [_damage_provenance, _configs_dir_a_file,
                                    _verify_a_malformed_file, _verify_without_a_file])
def test_tune_refuses_a_configs_folder_it_cannot_use_before_timing(tmp_path, capsys, chunked,
                                                                   damage):
    extra, says = damage(tmp_path, chunked)
    around = _tree(tmp_path)
    assert main(TUNE + extra + ["--data-dir", str(tmp_path / "runs"),
                                "--configs-dir", str(tmp_path / "configs")]) == 2
    assert says in _one_line(capsys)
    assert _tree(tmp_path) == around  # no run folder, no table replaced


def test_tune_into_a_data_dir_elsewhere_is_told_where_the_tuned_files_go(tmp_path, capsys,
                                                                          chunked, monkeypatch):
    """`tune --data-dir X` without --configs-dir: before, the runs went to X and the winners
    into the data folder's configs (the checkout's data/configs), a place the user had not
    named. Now: one line naming --configs-dir (and MOE_LAB_DATA), nothing written anywhere."""
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path / "default" / "runs"))
    around = _tree(tmp_path)
    assert main(TUNE + ["--data-dir", str(tmp_path / "mine" / "runs")]) == 2
    err = _one_line(capsys)
    assert "--configs-dir" in err and "MOE_LAB_DATA=" in err
    assert _tree(tmp_path) == around


def test_tuned_files_of_a_moved_data_folder_are_read_back_by_sweep(tmp_path, chunked,
                                                                    monkeypatch):
    """With MOE_LAB_DATA=X (or --data-dir X, the same folder) tune writes its winners beside
    X, in X/../configs, and `sweep --config tuned` measures with them from there."""
    import pandas as pd
    runs = tmp_path / "mine" / "runs"
    monkeypatch.setenv("MOE_LAB_DATA", str(runs))
    assert main(TUNE + ["--data-dir", str(runs), "--run-id", "t"]) == 0
    assert list((tmp_path / "mine" / "configs").glob(f"*/{chunked}/E=4,N=32,*.json"))
    argv = [a if a != "torch" else chunked for a in SWEEP[:-1]] + ["s", "--tokens", "1"]
    assert main(argv + ["--config", "tuned", "--data-dir", str(runs)]) == 0
    rows = pd.read_parquet(runs / "s" / "results.parquet")
    assert list(rows["config"]) == ["tuned"] and list(rows["status"]) == ["ok"]


# --- 5. findings over tune runs ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def tune_runs(tmp_path_factory):
    """A data folder holding one small tune run of the chunked backend (winners, candidates)."""
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.tuning import Tuner
    from conftest import plugin_backend
    root = tmp_path_factory.mktemp("tune")
    for _ in plugin_backend("torch_chunked.py", "torch-chunked"):
        Tuner("torch-chunked", "cpu", root / "runs" / "t", root / "configs", rep_ms=1, warmup_ms=1,
              progress=False).run([[make_problem(MODEL, 1, "fp32", 1, 1)]])
    return root / "runs"


def test_findings_of_a_folder_of_tune_runs_only(tune_runs, tmp_path, capsys):
    """Before: runs_section's IndexError (no run with results, so none dated)."""
    assert main(["findings", "--data-dir", str(tune_runs), "--out", str(tmp_path / "f.md")]) == 0
    assert "`t`" in (tmp_path / "f.md").read_text()


@pytest.mark.parametrize("victim", ["candidates.parquet", "winners.parquet", "manifest.json"])
def test_findings_pass_over_a_tune_run_that_cannot_be_read(tune_runs, cpu_runs, tmp_path,
                                                           capsys, victim):
    runs = tmp_path / "runs"
    shutil.copytree(cpu_runs, runs)
    shutil.copytree(tune_runs / "t", runs / "t")
    f = runs / "t" / victim
    f.write_bytes(f.read_bytes()[:100])
    around = _tree(runs)
    capsys.readouterr()
    assert main(["findings", "--data-dir", str(runs), "--out", str(tmp_path / "f.md")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"passed over run t: {f} is unreadable or corrupt" in err[0]
    assert "`t`" not in (tmp_path / "f.md").read_text() and "`cpu`" in (tmp_path / "f.md").read_text()
    assert _tree(runs) == around



@pytest.mark.parametrize("check", [[], ["--check"]])
@pytest.mark.parametrize("where,says", [
    ("out", "--out {o}: {o} is a folder, not a file; give a file path"),
    ("notes/f.md", "--out {o}: {t}/notes is a file, not a folder; give a new path or remove the "
                   "file")])
def test_findings_out_a_folder_or_under_a_file_is_refused(cpu_runs, tmp_path, capsys, check,
                                                          where, says):
    """Before: an error naming a hidden .tmp file (or 'File exists'); --check: exit 1 and a
    diff against nothing."""
    (tmp_path / "out").mkdir()
    (tmp_path / "notes").write_text("mine")
    around = _tree(tmp_path)
    o = tmp_path / where
    assert main(["findings", *check, "--data-dir", str(cpu_runs), "--out", str(o)]) == 2
    assert _one_line(capsys) == "moe-lab: error: " + says.format(o=o, t=tmp_path)
    assert _tree(tmp_path) == around


# --- 6. compare with a run of no points ------------------------------------------------------------

def test_compare_with_a_tune_run_is_refused(tune_runs, cpu_runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # compare's reports/ would go here
    assert main(["compare", str(cpu_runs / "cpu"), str(tune_runs / "t")]) == 2
    assert _one_line(capsys) == "moe-lab: error: run t has no measured points to compare (a tune run)"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("manifest", [None, "{}"])
def test_a_resume_into_rows_without_a_manifest_is_refused(tune_runs, cpu_runs, tmp_path, capsys,
                                                          chunked, manifest):
    """A tune or sweep folder holding rows but no manifest (gone, or `{}`) records no
    settings to check a resume against. Before: resumed, and the old rows kept beside new
    ones measured with whatever settings the command had. Now: one line, nothing written."""
    runs = tmp_path / "runs"
    shutil.copytree(tune_runs / "t", runs / "t")
    shutil.copytree(cpu_runs / "cpu", runs / "cpu")
    for run in ("t", "cpu"):
        f = runs / run / "manifest.json"
        f.unlink() if manifest is None else f.write_text(manifest)
    around = _tree(tmp_path)
    for argv in (TUNE + ["--run-id", "t", "--configs-dir", str(tmp_path / "configs")], SWEEP):
        assert main(argv + ["--data-dir", str(runs)]) == 2
        assert "no manifest.json recording their settings" in _one_line(capsys)
    assert _tree(tmp_path) == around


def test_a_tune_that_cannot_write_its_provenance_replaces_no_table(tmp_path, chunked,
                                                                     monkeypatch):
    """The winners' tables and provenance.json are one set: a write failing at the
    provenance (a full disk) leaves the old tables and provenance as they were (was: new
    tables beside the old provenance, whose `written` then vouched for rows timed before
    them)."""
    import errno
    import moe_lab.core.atomic as atomic
    from moe_lab.core.problems import make_problem
    from moe_lab.measuring.tuning import Tuner
    configs = tmp_path / "configs"

    def tune(run):
        Tuner(chunked, "cpu", tmp_path / "runs" / run, configs, rep_ms=1, warmup_ms=1,
              progress=False).run([[make_problem(MODEL, t, "fp32", 1, 1) for t in (1, 2)]])
    tune("a")
    before = _tree(configs)
    assert any(n.endswith("provenance.json") for n in before) and len(before) > 2
    real = atomic._stage

    def full_at_the_provenance(path, write):
        if Path(path).name == "provenance.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, write)
    monkeypatch.setattr(atomic, "_stage", full_at_the_provenance)
    with pytest.raises((OSError, UsageError)):
        tune("b")
    assert _tree(configs) == before  # no table replaced, no temporary file left


def test_a_config_file_named_for_another_shape_is_an_unsupported_row(tmp_path, capsys, chunked):
    """`sweep --config PATH` with a file vLLM's naming says is another shape's (E, N): the
    point is an `unsupported` row saying so. Before: measured with it, its row labelled
    with the file as if it were the shape's own (exit 0, status ok)."""
    import pandas as pd
    mine = _committed(chunked, tmp_path / "configs")  # E=4,N=32: MODEL's own name
    other = mine.with_name(mine.name.replace("E=4,N=32", "E=8,N=64"))
    other.write_text(mine.read_text())
    sweep = ["sweep", "--backends", chunked, "--models", MODEL, "--tp", "1", "--tokens", "1",
             "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms", "1",
             "--warmup-ms", "1", "--no-profile", "--data-dir", str(tmp_path / "runs")]
    assert main(sweep + ["--run-id", "other", "--config", str(other)]) == 0
    row = pd.read_parquet(tmp_path / "runs" / "other" / "results.parquet").iloc[0]
    assert row["status"] == "unsupported"
    assert row["error"].startswith(f"config file {other.name} is for E=8,N=64; this point's "
                                   "shape is E=4,N=32")
    assert main(sweep + ["--run-id", "own", "--config", str(mine)]) == 0
    assert pd.read_parquet(tmp_path / "runs" / "own" / "results.parquet").iloc[0]["status"] == "ok"
