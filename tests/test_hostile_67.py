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
