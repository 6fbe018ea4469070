"""Issue 67: nothing lost in the new surface. Every writer writes only into folders it made
or that hold only its own earlier output, and otherwise refuses in one line (exit 2 on the
command line) with the user's files still there byte for byte:

1. the device scripts' staging (scripts/device_bundle.py stage and standins,
   scripts/device_vllm.sh stage): a VLLM_SITE that is a user's folder, a staging folder
   that is the parts folder or a user's, a stand-in name DIR already holds, a machine
   without a GPU; device_vllm.sh passes device_bundle.py's exit 2 through
2. `moe-lab merge` checks every file of a part as open_run reads it, names a part whose
   tables disagree and a part that holds no row
3. no run folder inside a run folder: sweep --data-dir, MOE_LAB_DATA, import-aiter --out,
   merge, tune --data-dir
4. `compare --calibrate` takes only two runs of one grid timed alike
5. tracebacks and wrong exits (findings --check of a binary file, ml.profile(iters='5'),
   ml.runs() on a data folder that cannot be listed)
6. tune's words up front: a configs folder that cannot be written or a tuned file's path
   that is a folder (before the search), the device a tune writes for, why 0 points were
   tuned, no empty run folder left by a refusal
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from moe_lab.cli import main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import device_bundle as db  # noqa: E402
from test_device_bundle import _call, _gpu_bin, _parts  # noqa: E402


def _tree(folder: Path) -> dict:
    """Every file and folder under `folder` (itself included): content hash, size, mtime."""
    out = {}
    for p in [folder, *sorted(folder.rglob("*"))] if folder.exists() else []:
        st = p.lstat()
        out[str(p.relative_to(folder))] = (
            "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest(),
            None if p.is_dir() else st.st_size, None if p.is_dir() else st.st_mtime_ns)
    return out


def _one_line(text: str) -> str:
    text = text.strip()
    assert text and len(text.splitlines()) == 1, text
    assert "Traceback" not in text
    return text


def _users_folder(where: Path) -> Path:
    (where / "sub").mkdir(parents=True)
    (where / "notes.txt").write_text("my notes, not vLLM\n")
    (where / "sub" / "data.bin").write_bytes(os.urandom(64))
    return where


# --- 1. the device scripts' staging -----------------------------------------------------------

def test_stage_refuses_a_vllm_site_that_is_a_users_folder(tmp_path, monkeypatch):
    """Was: exit 0, the folder replaced whole by vLLM (shutil.rmtree), its files gone."""
    parts = _parts(tmp_path, monkeypatch)
    mine = _users_folder(tmp_path / "mine")
    before = _tree(mine)
    for carried in ([], parts):  # nothing carried, and every part: the bundle would unpack
        rc, out = _call(tmp_path, carried, site="mine")
        assert rc == 2, out
        assert "stage: SITE_DIR" in out and "holds 2 files stage did not unpack" in out
        assert "device_vllm: staging vLLM failed" not in out  # exit 2, its own line only
        assert _tree(mine) == before
    assert not any((tmp_path / "stage").glob("vllm-*"))  # refused before anything was copied
    # a site stage unpacked itself is replaced as before
    rc, out = _call(tmp_path, parts)
    assert rc == 0 and "unpacked in" in out, out
    assert (tmp_path / "site" / "BUNDLE").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site.")]


def test_stage_refuses_the_parts_folder_as_its_staging_folder(tmp_path, monkeypatch, capsys):
    """`stage P P SITE`: was exit 0/1, the other bundle's parts deleted ("set aside") and
    parts that did not join deleted, from the folder they were carried in."""
    parts = _parts(tmp_path, monkeypatch)
    other = _parts(tmp_path, monkeypatch, n_wanted=2, tag="b")
    folder = tmp_path / "carried"
    folder.mkdir()
    for p in parts[:1] + other:
        shutil.copy(p, folder / p.name)
    bad = bytearray(parts[1].read_bytes())
    bad[10] ^= 0xFF
    (folder / parts[1].name).write_bytes(bytes(bad))
    before = _tree(folder)
    for stage in (folder, folder / "inside"):
        assert db.main(["stage", str(folder), str(stage), str(tmp_path / "site")]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"PARTS_DIR {folder}" in err and f"STAGE_DIR {stage}" in err
        assert "give three separate folders" in err
        assert _tree(folder) == before
    assert not (tmp_path / "site").exists()


def test_stage_never_removes_parts_from_a_staging_folder_it_did_not_make(tmp_path, monkeypatch,
                                                                         capsys):
    parts = _parts(tmp_path, monkeypatch)
    other = _parts(tmp_path, monkeypatch, n_wanted=2, tag="b")
    theirs = tmp_path / "theirs"  # a user's folder of parts: another build's
    theirs.mkdir()
    for p in other:
        shutil.copy(p, theirs / p.name)
    before = _tree(theirs)
    assert db.main(["stage", str(parts[0].parent), str(theirs), str(tmp_path / "site")]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"stage: STAGE_DIR {theirs} holds 2 files stage did not put there" in err
    assert _tree(theirs) == before
    # parts that do not join, in a staging folder stage made: its copies go, the carried
    # parts stay as they were
    carried = tmp_path / "carried"
    carried.mkdir()
    for p in parts:
        shutil.copy(p, carried / p.name)
    data = bytearray((carried / parts[1].name).read_bytes())
    data[10] ^= 0xFF
    (carried / parts[1].name).write_bytes(bytes(data))
    before = _tree(carried)
    assert db.main(["stage", str(carried), str(tmp_path / "stage"), str(tmp_path / "site")]) == 1
    assert "do not join" in capsys.readouterr().out
    assert _tree(carried) == before
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == [db.STAGE_MARK]


def test_standins_never_overwrite_a_package_they_did_not_write(tmp_path, capsys):
    """Was: exit 0, a user's DIR/foo/__init__.py replaced by the stand-in."""
    folder = tmp_path / "si"
    (folder / "foo").mkdir(parents=True)
    (folder / "foo" / "__init__.py").write_text("VALUE = 'mine'\n")
    (folder / "bar.py").write_text("x = 1\n")
    (folder / "baz-0.0.0.dist-info").mkdir()
    (folder / "baz-0.0.0.dist-info" / "METADATA").write_text("Name: baz\nVersion: 9\n")
    before = _tree(folder)
    for names, theirs in ((["moelab_none_a", "foo"], "foo/__init__.py"), (["bar"], "bar.py"),
                          (["baz"], "baz-0.0.0.dist-info/METADATA")):
        assert db.main(["standins", str(folder), *names]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"standins: {folder / theirs} is there and is not a stand-in" in err
        assert _tree(folder) == before  # none written, the first name's neither
    # its own stand-ins again: written again (the same bytes), no refusal
    assert db.main(["standins", str(folder), "moelab_none_a"]) == 0
    first = _tree(folder / "moelab_none_a")
    assert db.main(["standins", str(folder), "moelab_none_a"]) == 0
    assert {k: v[0] for k, v in _tree(folder / "moelab_none_a").items()} == \
        {k: v[0] for k, v in first.items()}


def test_device_vllm_stage_passes_a_refusal_through_as_exit_2_and_needs_a_gpu(tmp_path):
    """Was: device_bundle.py's exit 2 became `staging vLLM failed (rc=2)`, exit 1; and
    `stage` ran on any machine (no GPU check)."""
    (tmp_path / "call").mkdir()
    (tmp_path / "notes").write_text("a file where the site would go\n")
    rc, out = _call(tmp_path, [], site="notes")
    assert rc == 2, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("device_bundle: error: stage: ") and last.endswith(
        f"{tmp_path / 'notes'} is a file, not a folder")
    assert (tmp_path / "notes").read_text() == "a file where the site would go\n"
    # no GPU: one line, exit 2, nothing made
    fake = _gpu_bin(tmp_path) / "python3"
    fake.write_text(fake.read_text().replace("echo 1; exit 0", "echo 0; exit 0"))
    rc, out = _call(tmp_path, [])
    assert rc == 2 and "no GPU visible to torch here" in _one_line(out)
    assert not (tmp_path / "stage").exists() and not (tmp_path / "site").exists()


# --- 2. merge reads every file of a part as open_run does ------------------------------------

MODEL = "custom:H=64,I=32,E=4,k=2"


def _sweep(data_dir, run_id, *extra) -> list[str]:
    return ["sweep", "--models", MODEL, "--tp", "1", "--ep", "1", "--tokens", "1,2",
            "--backends", "torch,torch-grouped", "--modes", "eager", "--dtype", "fp32",
            "--device", "cpu", "--no-progress", "--rep-ms", "2", "--warmup-ms", "1",
            "--data-dir", str(data_dir), "--run-id", run_id, *extra]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Runs made once: the two parts of one sweep (p0, p1), and the same whole sweep twice
    (w1, w2: an A/A' pair) and with --rep-ms 3 and --warmup-ms 2 (r3, u2)."""
    runs = tmp_path_factory.mktemp("made")
    for run_id, extra in (("p0", ("--shard", "0/2")), ("p1", ("--shard", "1/2")), ("w1", ()),
                          ("w2", ()), ("r3", ("--rep-ms", "3")), ("u2", ("--warmup-ms", "2"))):
        argv = _sweep(runs, run_id, *extra)
        if "--rep-ms" in extra or "--warmup-ms" in extra:  # the given one replaces the default
            flag = extra[0]
            i = argv.index(flag)
            argv = argv[:i] + argv[i + 2:] + list(extra)
        assert main(argv) == 0, run_id
    return runs


def _copy(made, tmp_path, *names) -> list[Path]:
    out = []
    for n in names:
        shutil.copytree(made / n, tmp_path / "runs" / n)
        out.append(tmp_path / "runs" / n)
    return out


def _rewrite(path: Path, change) -> None:
    df = pd.read_parquet(path)
    change(df).to_parquet(path)


@pytest.mark.parametrize("name,col", [("phases.parquet", "point_id"), ("phases.parquet", "phase"),
                                      ("samples.parquet", "point_id"),
                                      ("samples.parquet", "samples_us")])
def test_merge_refuses_a_part_file_that_open_run_would_refuse(made, tmp_path, capsys, name, col):
    """Was: exit 0, and the merged run's .phases / .samples() raised CorruptFile."""
    a, b = _copy(made, tmp_path, "p0", "p1")
    _rewrite(b / name, lambda df: df.drop(columns=[col]))
    before = _tree(tmp_path)
    assert main(["merge", str(tmp_path / "runs" / "all"), str(a), str(b)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err == f"moe-lab: error: {b / name} is unreadable or corrupt (no {col} column)"
    assert _tree(tmp_path) == before
    # the part as it was merges, and the merged run reads
    shutil.copy(made / "p1" / name, b / name)
    assert main(["merge", str(tmp_path / "runs" / "all"), str(a), str(b)]) == 0
    from moe_lab.storage.store import open_run
    run = open_run(tmp_path / "runs" / "all")
    assert len(run.phases) and len(run.samples()) == len(run.results)


def test_merge_names_the_part_and_file_whose_column_is_of_another_kind(made, tmp_path, capsys):
    """A part whose phases hold text where the other's hold numbers: was pyarrow's tuple
    ("Could not convert '0.0' with type str", ...), naming neither part nor file."""
    a, b = _copy(made, tmp_path, "p0", "p1")
    _rewrite(b / "phases.parquet", lambda df: df.assign(measured_us=df["measured_us"].astype(str)))
    before = _tree(tmp_path)
    assert main(["merge", str(tmp_path / "runs" / "all"), str(a), str(b)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert (f"{b / 'phases.parquet'}: column 'measured_us' holds text where "
            f"{a / 'phases.parquet'} holds numbers") in err
    assert _tree(tmp_path) == before


def test_merge_names_a_part_killed_before_its_first_row(made, tmp_path, capsys):
    """Was: merged without a word (exit 0), as if the part's points were there."""
    a, b = _copy(made, tmp_path, "p0", "p1")
    for p in b.iterdir():
        if p.name != "manifest.json":
            p.unlink()
    man = json.loads((b / "manifest.json").read_text())
    (b / "manifest.json").write_text(json.dumps(dict(man, status="running")))
    before = _tree(tmp_path)
    assert main(["merge", str(tmp_path / "runs" / "all"), str(a), str(b)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "p1 holds no rows (status running: its sweep stopped before its first point)" in err
    assert _tree(tmp_path) == before


# --- 3. no run folder inside a run folder ------------------------------------------------------

def _table(tmp_path):
    from test_aiter_tables import synthetic
    tmp_path.mkdir(exist_ok=True)
    return synthetic(tmp_path)


@pytest.mark.parametrize("writer", ["sweep --data-dir", "MOE_LAB_DATA", "sweep --data-dir below",
                                    "import-aiter --out", "merge", "tune --data-dir"])
def test_no_writer_puts_a_run_folder_inside_a_run(made, tmp_path, capsys, monkeypatch, writer):
    """Was: exit 0, a run written among another run's measured files (tune refused it only
    as --configs-dir)."""
    run, a, b = _copy(made, tmp_path, "w1", "p0", "p1")
    table = _table(tmp_path / "t") if writer.startswith("import") else None
    if writer.startswith("tune"):
        from conftest import plugin_backend
        gen = plugin_backend("torch_chunked.py", "torch-chunked")
        next(gen)
    argv = {"sweep --data-dir": _sweep(run, "in"),
            "MOE_LAB_DATA": [a for a in _sweep(run, "in") if a not in ("--data-dir", str(run))],
            "sweep --data-dir below": _sweep(run / "sub", "in"),
            "import-aiter --out": ["import-aiter", "--file", str(table), "--out", str(run / "x")],
            "merge": ["merge", str(run / "m"), str(a), str(b)],
            "tune --data-dir": ["tune", "--backend", "torch-chunked", "--models", MODEL, "--tp",
                                "1", "--ep", "1", "--tokens", "1", "--dtype", "fp32", "--device",
                                "cpu", "--no-progress", "--data-dir", str(run), "--configs-dir",
                                str(tmp_path / "configs")]}[writer]
    if writer == "MOE_LAB_DATA":
        monkeypatch.setenv("MOE_LAB_DATA", str(run))
    before = _tree(tmp_path)
    try:
        assert main(argv) == 2
    finally:
        if writer.startswith("tune"):
            list(gen)
    err = _one_line(capsys.readouterr().err)
    assert f"inside the folder of run w1 ({run}), whose files are measured data" in err
    assert _tree(tmp_path) == before


def test_every_writers_lock_refuses_a_folder_inside_a_run(made, tmp_path):
    """The backstop under every writer (storage.runlock.acquire): nothing made."""
    from moe_lab.core.errors import UsageError
    from moe_lab.storage.runlock import run_lock
    run, = _copy(made, tmp_path, "w1")
    before = _tree(run)
    with pytest.raises(UsageError, match="inside the folder of run w1"):
        with run_lock(run / "a" / "b", "a writer"):
            pass
    assert _tree(run) == before


# --- 4. compare --calibrate: an A/A' pair is one sweep run twice -------------------------------

@pytest.mark.parametrize("other,differs", [("r3", "rep_ms differs"), ("u2", "warmup_ms differs"),
                                           ("p1", "tokens differs")])
def test_calibrate_refuses_runs_timed_otherwise_or_of_another_grid(made, tmp_path, capsys, other,
                                                                   differs):
    """Was: exit 0, and the band every later compare on the device uses written from runs
    timed with other --rep-ms or --warmup-ms (merge refused the same pair)."""
    a, b = _copy(made, tmp_path, "w1", other)
    cal = tmp_path / "noise.json"
    cal.write_text('{"a calibration": "of the user"}\n')
    if other == "p1":  # a part of a sweep of other token counts
        man = json.loads((b / "manifest.json").read_text())
        man["config"]["tokens"] = [1]
        (b / "manifest.json").write_text(json.dumps(man))
    before = _tree(tmp_path)
    assert main(["compare", "--calibrate", str(a), str(b), "--calibration", str(cal)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{other} is another sweep than w1 ({differs})" in err
    assert _tree(tmp_path) == before
    # the notebook API's calibrate holds the pair to the same rule (noise.check_pair)
    from moe_lab.analysis.compare import calibrate
    from moe_lab.core.errors import UsageError
    with pytest.raises(UsageError, match=f"{other} is another sweep than w1"):
        calibrate(str(a), str(b), str(cal))
    assert _tree(tmp_path) == before
    # the same sweep twice calibrates
    w1, w2 = _copy(made, tmp_path / "ok", "w1", "w2")
    assert main(["compare", "--calibrate", str(w1), str(w2), "--calibration",
                 str(tmp_path / "ok" / "noise.json")]) == 0
    assert json.loads((tmp_path / "ok" / "noise.json").read_text())["pairs"]


# --- 5. tracebacks and wrong exits -------------------------------------------------------------

def test_findings_check_of_a_binary_file_is_one_line(tmp_path, capsys):
    """Was: UnicodeDecodeError (a traceback)."""
    f = tmp_path / "findings.md"
    f.write_bytes(bytes(range(128, 256)) * 4)
    before = _tree(tmp_path)
    assert main(["findings", "--check", "--out", str(f)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err == (f"moe-lab: error: --check: {f} is not a findings file (not UTF-8 text); give "
                   "the markdown file `moe-lab findings` wrote")
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("iters", ["5", "5,6", [5, 6]])
def test_profile_iters_not_a_number_is_one_line(iters):
    """Was: TypeError from inside measuring/profiling.py (iters='5')."""
    import moe_lab.api as ml
    from moe_lab.core.errors import UsageError
    with pytest.raises(UsageError) as exc:
        ml.profile(MODEL, 1, "torch", tp=1, dtype="fp32", device="cpu", iters=iters)
    assert str(exc.value) == f"iters {iters!r}: give a whole number >= 1"
    from moe_lab.core import validate
    validate.api_values(tp="4,8", ep=[1, 8])  # the API's lists are still lists


def test_runs_of_a_data_folder_that_cannot_be_listed_is_one_line(tmp_path, monkeypatch):
    """Was: PermissionError (the tests run as root, where a chmod 000 folder still lists:
    the listing refuses as the kernel would)."""
    import moe_lab.api as ml
    from moe_lab.core.errors import UsageError
    folder = tmp_path / "runs"
    folder.mkdir()
    real = Path.iterdir

    def iterdir(self):
        if self == folder:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)
    monkeypatch.setattr(Path, "iterdir", iterdir)
    with pytest.raises(UsageError) as exc:
        ml.runs(folder)
    assert str(exc.value) == f"{folder}: cannot list the folder of runs (Permission denied)"
    with pytest.raises(UsageError):
        ml.find_runs(folder)


# --- 6. tune's words, up front -------------------------------------------------------------------

@pytest.fixture
def chunked():
    """The tunable CPU test backend (tests/data/plugin/torch_chunked.py), registered."""
    from conftest import plugin_backend
    for mod in plugin_backend("torch_chunked.py", "torch-chunked"):
        yield mod


def _tune(tmp_path, *extra) -> list[str]:
    return ["tune", "--backend", "torch-chunked", "--models", MODEL, "--tp", "1", "--ep", "1",
            "--tokens", "1", "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms",
            "1", "--warmup-ms", "1", "--data-dir", str(tmp_path / "runs"), "--run-id", "t",
            "--configs-dir", str(tmp_path / "configs"), *extra]


def _tuned_name(stage="gemm1") -> str:
    from moe_lab import backends
    from moe_lab.core.environment import device_name
    from moe_lab.core.problems import make_problem
    return backends.get("torch-chunked").config_files(make_problem(MODEL, 1, "fp32", 1, 1),
                                                      device_name("cpu"))[stage]


def test_tune_refuses_a_configs_folder_it_cannot_write_before_the_search(tmp_path, capsys,
                                                                           chunked, monkeypatch):
    """Was: refused only after the whole search (its winners then lost). The tests run as
    root, who may write anywhere: the check asks os.access, as a user's run would."""
    (tmp_path / "configs").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == tmp_path / "configs"
                        else real(p, mode, **k))
    before = _tree(tmp_path)
    assert main(_tune(tmp_path)) == 2
    err = _one_line(capsys.readouterr().err)
    assert err == (f"moe-lab: error: --configs-dir {tmp_path / 'configs'}: {tmp_path / 'configs'} "
                   "cannot be written by this user (read-only); the winners would be lost at "
                   "the search's end: give a folder you can write")
    assert _tree(tmp_path) == before  # no run folder: nothing was timed


@pytest.mark.parametrize("stage", ["gemm1", "gemm2"])
def test_tune_refuses_a_tuned_files_path_that_is_a_folder_before_the_search(tmp_path, capsys,
                                                                             chunked, stage):
    where = tmp_path / "configs" / "torch-chunked" / _tuned_name(stage)
    (where / "mine").mkdir(parents=True)
    (where / "mine" / "notes.txt").write_text("kept\n")
    before = _tree(tmp_path)
    assert main(_tune(tmp_path)) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{where} is a folder, not a file; this run writes it at the search's end" in err
    assert _tree(tmp_path) == before


def test_a_cpu_tune_is_refused_another_devices_configs_folder(tmp_path, capsys, chunked):
    """Was: `--configs-dir data/configs/nvidia-h200` on a CPU took the CPU's winners among
    the H200's files without a word."""
    h200 = tmp_path / "configs" / "nvidia-h200"
    (h200 / "vllm").mkdir(parents=True)
    shutil.copy(ROOT / "data" / "configs" / "nvidia-h200" / "vllm" / "provenance.json",
                h200 / "vllm" / "provenance.json")
    elsewhere = tmp_path / "mine"  # a folder of another name whose files the H200 wrote
    shutil.copytree(h200, elsewhere)
    before = _tree(tmp_path)
    for folder, says in ((h200, "the tuned files' folder of NVIDIA H200"),
                         (elsewhere, "holds tuned files written on NVIDIA H200")):
        argv = _tune(tmp_path)
        argv[argv.index("--configs-dir") + 1] = str(folder)
        assert main(argv) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"--configs-dir {folder}: {says}; this tune runs on cpu" in err
        assert _tree(tmp_path) == before


def test_a_tune_that_tunes_nothing_says_why_and_names_its_device(tmp_path, capsys, chunked,
                                                                  monkeypatch):
    """Was: "done (complete): 0 points tuned" and nothing more."""
    cls = type(chunked.TorchChunkedBackend())
    monkeypatch.setattr(cls, "default_config", lambda self, p: {"gemm1": {"CHUNK": 128},
                                                                "gemm2": {"CHUNK": 128}})
    monkeypatch.setattr(cls, "config_space", lambda self, p: {
        s: [{"CHUNK": 128}, {"CHUNK": 256}] for s in ("gemm1", "gemm2")})
    assert main(_tune(tmp_path)) == 0
    out = capsys.readouterr().out
    from moe_lab.core.environment import device_name
    assert f"tune torch-chunked on {device_name('cpu')}: 1 points -> {tmp_path / 'runs' / 't'}" in out
    done = [line for line in out.splitlines() if line.startswith("done (")]
    assert done and done[0].startswith("done (complete): 0 points tuned (no candidate, the "
                                       "default included, was correct and timed at any token "
                                       "count (failed ")
    assert not (tmp_path / "configs" / "torch-chunked").exists()


def test_a_tune_refused_for_a_full_disk_leaves_no_empty_run_folder(tmp_path, capsys, chunked,
                                                                   monkeypatch):
    import errno
    from moe_lab.measuring import tuning

    def full(store, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(store.manifest_path))
    monkeypatch.setattr(tuning, "begin_invocation", full)
    (tmp_path / "runs").mkdir()
    before = _tree(tmp_path)
    assert main(_tune(tmp_path)) == 2
    assert "no space left on the device" in _one_line(capsys.readouterr().err)
    assert _tree(tmp_path) == before  # was: an empty runs/t left behind


def test_sweep_gpus_with_a_run_as_data_folder_is_refused_before_its_parts_folder(
        made, tmp_path, capsys, monkeypatch):
    """`sweep --gpus` into a run's folder: refused in one line before `.parts/<id>` is made
    there (was: the empty parts folder left in the run, each part refusing after). Two GPUs
    stand in for the count (this machine has none); nothing is started."""
    import subprocess

    import moe_lab.distributed.launch as launch
    (run,) = _copy(made, tmp_path, "w1")
    monkeypatch.setattr(launch, "gpu_count", lambda text: 2)

    def started(*a, **k):
        raise AssertionError("a part was started")
    monkeypatch.setattr(subprocess, "Popen", started)
    before = _tree(tmp_path)
    assert main(_sweep(run, "in", "--gpus", "2")) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"inside the folder of run w1 ({run}), whose files are measured data" in err
    assert _tree(tmp_path) == before and not (run / ".parts").exists()
