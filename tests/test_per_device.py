"""Issue 63, item 2: every device-specific default follows the data. With one GPU's data
alone (the H200's committed runs; the H100's, or H200 runs relabelled as an H100's until
H100 runs are committed), the tuned-file inventory and every section of the findings name
that device and never another: each device heading ends with its name, each `Runs:`
line of a device's section names only runs measured on it, and no GPU absent from the
data folder is named. With both, each device has its own targets, vLLM comparison and
tuned-against-shipped table, side by side. The glue before/after never spans two GPUs."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from moe_lab.analysis import tuned as rq

from conftest import ROOT, _committed_runs

H200, H100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
RUNS = Path(ROOT) / "data" / "runs"
CONFIGS = Path(ROOT) / "data" / "configs"
# a handful of small committed H200 runs that answer most sections: vLLM as shipped with
# stored phases (targets, vLLM comparison), a grid sweep with the committed file beside
# vLLM's (tuned against default and published), its tune run, a verify run, the roof
# targets' tuned run, a compile run, fused against naive glue, the A/A' noise pair
H200_RUNS = ("h200-vllm-bf16-tp8", "h200-grid-aiter-triton-deepseek-r1-tp8-fp8-block128",
             "h200-tune-aiter-triton-deepseek-r1-tp8-fp8-block128",
             "h200-verify-aiter-triton-deepseek-r1-tp8ep8-fp8-block128",
             "h200-silu-tuned-ep1-20261201", "h200-compile-deepseek-r1-20261129",
             "h200-rows-bf16-tp8-20261201", "h200-repeat-a-20261130", "h200-repeat-b-20261130")
SHARED = ("Imported: ", "The runs")  # the headings of no device of moe-lab's
_H100_RUNS = sorted(r for r in _committed_runs() or [] if r.startswith(("h100-", "nvidia-h100-")))
# the real H100 runs stand in for the relabelled set once they hold its vLLM comparison (the
# first ones, a main-job sweep and a search's first rung, are too few for the sections here)
REAL_H100 = _H100_RUNS if any(r.startswith("h100-vllm-") for r in _H100_RUNS) else []
MAX_H100_RUNS = 10  # real H100 runs: the smallest of each kind, this many at most
# the sections every device of these folders has; the relabelled H100 (and the H200's
# runs above) also the vLLM comparison and the tuned files against vLLM's shipped ones
ALWAYS = ("Targets", "Tuned files against the token grid")
FULL = ALWAYS + ("vLLM's fused MoE as shipped against the workbook's own layers",
                 "Tuned against published tunings of the same kernel")


def _full(device: str) -> bool:
    """Whether the folder of `device` is the full set above (not real H100 runs)."""
    return device == H200 or not REAL_H100


def _relabel(text: str) -> str:
    """An H200 name as the H100's: the device, its files' device part, its runs' prefix."""
    from moe_lab.core.devices import file_device_name
    return (text.replace(H200, H100).replace("NVIDIA_H200", file_device_name(H100))
            .replace("h200-", "h100-"))


def _relabelled_run(src: Path, dst_root: Path) -> None:
    """`src` (an H200 run) copied as an H100 run: folder, manifest and every text cell of
    its tables relabelled (the rows' `device`, configuration paths, run ids)."""
    dst = dst_root / _relabel(src.name)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix == ".parquet":
            t = pd.read_parquet(f)
            for c in t.columns:
                if t[c].dtype == object or pd.api.types.is_string_dtype(t[c]):
                    t[c] = t[c].map(lambda v: _relabel(v) if isinstance(v, str) else v)
            t.to_parquet(dst / f.name)
        elif f.is_file():
            (dst / f.name).write_text(_relabel(f.read_text()))


def _relabelled_configs(dst: Path) -> None:
    """The H200's tuned files under the H100's names (tuned_file_paths: the one composition)
    in `dst` (data/configs/<the H100's slug>), their provenance relabelled."""
    from moe_lab.analysis.tuned import REQUIRED, REQUIRED_63
    from moe_lab.core.problems import make_problem
    from moe_lab.storage.configs import tuned_file_paths
    src = CONFIGS / "nvidia-h200"
    prov: dict = {}
    for _, b, m, tp, ep, dt in REQUIRED + REQUIRED_63:
        prob = make_problem(m, 1, dt, tp, ep)
        old, new = (tuned_file_paths(b, prob, H200, src), tuned_file_paths(b, prob, H100, dst))
        for stage, p in old.items():
            if p.is_file():
                new[stage].parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(p, new[stage])
        entry = json.loads((src / b / "provenance.json").read_text()).get(old["gemm1"].name)
        if entry and new["gemm1"].is_file():
            prov.setdefault(b, {})[new["gemm1"].name] = json.loads(_relabel(json.dumps(entry)))
    for b, entries in prov.items():
        (dst / b / "provenance.json").write_text(json.dumps(entries, indent=1))


def _h200_folder(root: Path) -> Path:
    """root/data/runs: the H200 runs above, and data/configs/nvidia-h200 beside it."""
    for r in H200_RUNS:
        shutil.copytree(RUNS / r, root / "data" / "runs" / r)
    shutil.copytree(CONFIGS / "nvidia-h200", root / "data" / "configs" / "nvidia-h200")
    return root / "data" / "runs"


def _h100_folder(root: Path) -> Path:
    """root/data/runs with only the H100's data: the smallest committed h100-* runs and its
    configs when H100 runs are committed, else the H200 runs above relabelled."""
    runs = root / "data" / "runs"
    if REAL_H100:
        size = {r: sum(f.stat().st_size for f in (RUNS / r).rglob("*") if f.is_file())
                for r in REAL_H100}
        kinds: dict = {}  # h100-<kind>-...: the smallest of each kind first
        for r in sorted(REAL_H100, key=lambda r: (size[r], r)):
            kinds.setdefault(r.split("-")[1], r)
        rest = [r for r in sorted(REAL_H100, key=lambda r: (size[r], r)) if r not in kinds.values()]
        for r in (list(kinds.values()) + rest)[:MAX_H100_RUNS]:
            shutil.copytree(RUNS / r, runs / r)
        if (CONFIGS / "nvidia-h100-80gb-hbm3").is_dir():
            shutil.copytree(CONFIGS / "nvidia-h100-80gb-hbm3",
                            root / "data" / "configs" / "nvidia-h100-80gb-hbm3")
        return runs
    for r in H200_RUNS:
        _relabelled_run(RUNS / r, runs)
    _relabelled_configs(root / "data" / "configs" / "nvidia-h100-80gb-hbm3")
    return runs


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{device: a data folder holding only that device's data}, and "both": the two."""
    out = {H200: _h200_folder(tmp_path_factory.mktemp("h200")),
           H100: _h100_folder(tmp_path_factory.mktemp("h100"))}
    both = tmp_path_factory.mktemp("both") / "data"
    for dev in (H200, H100):
        shutil.copytree(out[dev].parent, both, dirs_exist_ok=True)
    out["both"] = both / "runs"
    return out


@pytest.fixture(scope="module")
def documents(folders):
    """{device or "both": the findings generated from that folder}."""
    from moe_lab import findings
    return {k: findings.generate(v) for k, v in folders.items()}


def _device_of(folder: Path, run_id: str) -> str:
    from moe_lab.analysis.runs import manifest_device
    return manifest_device(json.loads((folder / run_id / "manifest.json").read_text()))


def _sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of every ## and ### section."""
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)[1:]
    return list(zip(parts[::2], parts[1::2]))


def _device_part(heading: str, devices) -> str | None:
    """The device a heading ends with (one of `devices`), None for a shared heading."""
    if heading.lstrip("# ").startswith(SHARED):
        return None
    return next((d for d in devices if heading.endswith(f": {d}")), "")


@pytest.mark.parametrize("device,other", [(H200, H100), (H100, H200)])
def test_with_one_devices_data_every_section_names_it_and_never_another(
        folders, documents, device, other):
    from moe_lab.analysis.runs import data_devices
    from moe_lab.core.devices import DEVICE_SPECS, device_tag
    folder, text = folders[device], documents[device]
    assert data_devices(folder) == [device]
    sections = _sections(text)
    named = [h for h, _ in sections if _device_part(h, [device]) is not None]
    assert len(named) >= 12, [h for h, _ in sections]  # the device's sections are there
    for heading, body in sections:
        dev = _device_part(heading, [device])
        assert dev in (None, device), f"heading {heading!r} does not name {device}"
        for line in body.splitlines():
            if dev and line.startswith("Runs: "):
                if line == "Runs: none yet on this device" and not _full(device):
                    continue  # real H100 data: a section it has no runs for yet names none
                ids = re.findall(r"`([\w.-]+)` \(", line)
                assert ids and {_device_of(folder, r) for r in ids} == {device}, (heading, line)
    # the other GPU, and any GPU the data does not hold, is never named (its name, its
    # files' device part, its runs' prefix)
    absent = {other, device_tag(other)} | {
        k.split("-")[0] for k in DEVICE_SPECS if k.split("-")[0] != device_tag(device)}
    for word in absent:
        assert word.lower() not in text.lower(), word
    assert f"Left for the {device} (" in text
    for want in FULL if _full(device) else ALWAYS:
        assert any(h.endswith(f"{want}: {device}") for h in named), want


@pytest.mark.parametrize("device", [H200, H100])
def test_the_inventory_and_left_of_one_devices_data_are_that_devices(folders, device,
                                                                      monkeypatch):
    from moe_lab.analysis import tuned as tf
    from moe_lab.core.devices import file_device_name
    monkeypatch.setenv("MOE_LAB_DATA", str(folders[device]))
    inv = tf.inventory()
    assert set(inv["device"]) == {device} and len(inv) == len(rq.required_for(device))
    files = inv.loc[inv["file"] != "", "file"]
    # a file for each shape the device's configs folder holds: none where the folder has no
    # tuned files of this device (the real H100 runs came before any H100 tuned file)
    has_files = any((folders[device].parent / "configs").rglob(
        f"*device_name={file_device_name(device)}*.json"))
    assert bool(len(files)) == has_files and (has_files or not _full(device)), inv
    assert all(f"device_name={file_device_name(device)}" in f for f in files)
    assert inv["holds_grid"].any() or not _full(device)  # the files hold the grid
    assert tf.inventory(device=device).equals(inv)
    for mode in ("tune", "sweep"):  # the device scripts' words: of this device's shapes
        words = tf.left(mode, device)
        assert set(words) <= {rq.shape_word(*r[1:]) for r in rq.required_for(device)}


def test_with_both_devices_each_has_its_own_sections_side_by_side(folders, documents):
    """The H100's targets, vLLM comparison and tuned-against-shipped table beside the
    H200's: each section once per device, each reading only its device's runs; the
    inventory one block per device; search_spread and verify_points per device."""
    from moe_lab.analysis import tuned as tf
    from moe_lab.analysis.runs import gpu_devices
    folder, text = folders["both"], documents["both"]
    assert gpu_devices(folder) == [H100, H200]
    sections = _sections(text)
    for heading, body in sections:
        dev = _device_part(heading, [H100, H200])
        assert dev is not None and dev != "" or heading.lstrip("# ").startswith(SHARED), heading
        for line in body.splitlines():
            if dev and line.startswith("Runs: ") and line != "Runs: none yet on this device":
                ids = re.findall(r"`([\w.-]+)` \(", line)
                assert {_device_of(folder, r) for r in ids} == {dev}, (heading, line)
    heads = [h for h, _ in sections]
    full = _full(H100)
    for want in FULL[:3] if full else ALWAYS:
        at = [heads.index(f"## {want}: {d}") for d in (H100, H200)]
        # side by side: between the two, only the H100's own subsections of it
        assert at[0] < at[1] and all(h.endswith(f": {H100}") for h in heads[at[0] + 1:at[1]])
    for d in (H100, H200) if full else ():
        assert f"### {FULL[3]}: {d}" in heads
    inv = tf.inventory(data_dir=folder)
    assert list(dict.fromkeys(inv["device"])) == [H100, H200]
    assert inv.groupby("device").size().to_dict() == {d: len(rq.required_for(d))
                                                      for d in (H100, H200)}
    for d in (H100, H200):
        assert set(tf.search_spread(root=folder, device=d)["device"]) <= {d}
        ver = set(tf.verify_points(root=folder, device=d)["device"])
        assert ver == {d} if _full(d) else ver <= {d}


def test_the_glue_after_run_is_on_the_before_runs_device(tmp_path, monkeypatch):
    """tuning.glue_after_run: the before run (GLUE_BEFORE_RUN) is the H200's; an H100 run
    with the glue point, newer, is never its `after` (the GPUs' difference would read as the
    glue's); the H100 run given is left out, saying so; a folder without the before run:
    left out, saying so."""
    from moe_lab.analysis import tuning as tn
    runs = tmp_path / "data" / "runs"
    after = "h200-rows-bf16-tp8-20261201"  # has the glue point with its kernels
    for r in (tn.GLUE_BEFORE_RUN, after):
        shutil.copytree(RUNS / r, runs / r)
    _relabelled_run(RUNS / after, runs)
    h100 = _relabel(after)
    m = json.loads((runs / h100 / "manifest.json").read_text())
    (runs / h100 / "manifest.json").write_text(json.dumps(dict(m, started="2027-01-01T00:00:00")))
    monkeypatch.setenv("MOE_LAB_DATA", str(runs))
    got, why = tn.glue_after_run(h100)
    assert got.run_id == after and f"on {H200} (the before run's device; run {h100} is on " \
        f"{H100}, not {H200})" in why, why
    got, why = tn.glue_after_run(h100, given=True)
    assert got is None and f"left out (run {h100} is on {H100}, not {H200}, the device of " \
        f"the before run {tn.GLUE_BEFORE_RUN})" in why, why
    assert tn.glue_after_run(after)[0].run_id == after
    shutil.rmtree(runs / tn.GLUE_BEFORE_RUN)
    got, why = tn.glue_after_run(after)
    assert got is None and f"no before run {tn.GLUE_BEFORE_RUN} under" in why, why
