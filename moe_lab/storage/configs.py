"""Which launch configuration a point uses: `default` (the backend's own), `tuned` (the
files `moe-lab tune` wrote for this device under data/configs/<device>/) or a file. The
file format is moe_lab.config_files (re-exported here)."""
from __future__ import annotations

from pathlib import Path

from .. import backends
from ..core.config_files import check_config, nearest, read_table, write_table  # noqa: F401
from ..core.errors import UsageError
from ..core.problems import Problem


# --- which configuration a sweep or check uses ---------------------------------------

class ConfigTables(dict):
    """{stage: {M: config}} read from files, with `files` {stage: path}: the file each
    stage's table came from, so a backend whose own project looks its files up by name
    (vLLM's VLLM_TUNED_CONFIG_FOLDER) can hand it the file instead of the table."""

    def __init__(self, tables: dict, files: dict):
        super().__init__(tables)
        self.files = {k: Path(v) for k, v in files.items()}


def tuned_file_paths(backend: str, problem: Problem, dev_name: str, configs_dir=None
                     ) -> dict[str, Path]:
    """{stage: path} of the tuned files of a backend for a shard on a device: the one place
    a tuned file's path is composed, for every reader and writer (sweep --config tuned,
    tune, the inventory, the device scripts): `<configs_dir>/<backend>/<name>`, configs_dir
    by default data/configs/<device-slug> (configs_dir_for), the name the backend's own
    project reads on that device (Backend.config_files: vLLM's, e.g.
    `E=16,N=1024,device_name=NVIDIA_H100_80GB_HBM3.json` on an 'NVIDIA H100 80GB HBM3')."""
    folder = (Path(configs_dir) if configs_dir is not None else configs_dir_for(dev_name)) / backend
    return {stage: folder / name
            for stage, name in backends.get(backend).config_files(problem, dev_name).items()}


def load_tuned(backend: str, problem: Problem, dev_name: str, configs_dir=None) -> dict | None:
    """{stage: {M: config}} from the tuned files for this shard (tuned_file_paths), None
    when there are none."""
    if not backends.backend_class(backend).tunable:
        return None
    paths = tuned_file_paths(backend, problem, dev_name, configs_dir)
    if not paths["gemm1"].exists():
        return None
    tables, files = {}, {}
    for stage, p in paths.items():
        tables[stage] = read_table(p) if p.exists() else tables["gemm1"]
        files[stage] = p if p.exists() else files["gemm1"]
    return ConfigTables(tables, files)


def check_configs_dir(configs_dir, backend: str, shards=None, dev_name: str = "",
                      run_dir=None, writes=None) -> None:
    """Before a search (UsageError, one line; nothing written): the tuned files' folder
    can be one (no file along its path) and this user can write it, is no run's
    (not_runs) nor another device's (other_device), and its provenance.json, which the
    search's end merges into, is readable. `shards` (a --verify: the winners it checks):
    every shape has a committed file, and it reads. `writes` (a tune's shards): no tuned
    file's path is a folder. Before, the last two were found after the whole search."""
    import os

    from .store import read_json
    folder = Path(configs_dir) / backend
    for p in [folder, *folder.parents]:
        if p.exists() and not p.is_dir():
            raise UsageError(f"--configs-dir {configs_dir}: {p} is a file, not a folder; give "
                             "a new path or remove the file")
    not_runs(configs_dir, run_dir)
    other_device(configs_dir, dev_name)
    up = next(p for p in [folder, *folder.parents] if p.exists())
    if writes is not None and not os.access(up, os.W_OK | os.X_OK):
        raise UsageError(f"--configs-dir {configs_dir}: {up} cannot be written by this user "
                         "(read-only); the winners would be lost at the search's end: give a "
                         "folder you can write")
    paths = [folder / "provenance.json"] + [p for shard in writes or () for p in
                                            tuned_file_paths(backend, shard[0], dev_name,
                                                             configs_dir).values()]
    for p in paths:
        if p.exists() and not p.is_file():
            raise UsageError(f"--configs-dir {configs_dir}: {p} is a folder, not a file; this "
                             "run writes it at the search's end: move it away or give another "
                             "--configs-dir")
    read_json(folder / "provenance.json")  # CorruptFile naming it
    for shard in shards or ():
        if load_tuned(backend, shard[0], dev_name, configs_dir) is None:
            name = tuned_file_paths(backend, shard[0], dev_name, configs_dir)["gemm1"].name
            raise UsageError(f"--verify: no committed file {name} under {folder} for "
                             f"{shard[0].model.name} {shard[0].sharding} {shard[0].dtype}: "
                             "nothing to check (tune it first)")


def not_runs(configs_dir, run_dir=None) -> None:
    """UsageError (one line) when the tuned files' folder is a run folder or in one, a
    folder of run folders (the data folder), or the tune run's own folder or the one it
    goes in: `<backend>/` was written among the runs (was: `tune --configs-dir RUN`)."""
    from ..core.validate import is_run_folder, run_holding
    from .store import data_dir
    c, say = Path(configs_dir), f"--configs-dir {configs_dir}"
    own = ("; tuned files go in a folder of their own (default: data/configs/<device-slug>, "
           "beside the data folder's runs)")
    run = run_holding(c)
    if run is not None:
        inside = "" if Path(run).resolve() == c.resolve() else "inside "
        raise UsageError(f"{say}: {inside}the folder of run {Path(run).name} ({run}){own}")
    held = next((p.name for p in (sorted(c.iterdir()) if c.is_dir() else ())
                 if p.is_dir() and is_run_folder(p)), None)
    here = c.resolve()
    if run_dir is not None and Path(run_dir).resolve() in (here, *here.parents):
        raise UsageError(f"{say}: the folder of this tune run ({run_dir}){own}")
    parent = Path(run_dir).resolve().parent if run_dir is not None else None
    if held is not None or here in (data_dir().resolve(), parent):
        raise UsageError(f"{say}: a folder of run folders"
                         + (f" (run {held} is in it)" if held else "") + own)


def other_device(configs_dir, dev_name: str) -> None:
    """UsageError (one line) when a tune on `dev_name` would put its winners in another
    device's tuned-files folder: one named for another known device (data/configs/<slug>)
    or whose provenance.json files say another device wrote them. Before: a CPU tune wrote
    into `--configs-dir data/configs/nvidia-h200` without a word."""
    from ..core.devices import DEVICE_SPECS, device_slug, measured_device_names
    from .store import CorruptFile, read_json
    if not dev_name:
        return
    c = Path(configs_dir)
    try:
        measured = measured_device_names()
    except (CorruptFile, OSError):  # a ceilings file's own readers say what is wrong
        measured = []
    others = {device_slug(n): n for n in [s.name for s in DEVICE_SPECS.values()] + measured}
    named = others.get(c.name) if c.name != device_slug(dev_name) else None
    wrote = []
    for prov in sorted(c.glob("*/provenance.json")) if c.is_dir() and not named else ():
        try:
            entries = read_json(prov).values()
        except (CorruptFile, OSError):
            continue  # said by check_configs_dir for the backend written, else not read
        wrote += [str(e.get("device")) for e in entries if isinstance(e, dict)
                  and e.get("device") and str(e.get("device")) != dev_name]
    if named or wrote:
        raise UsageError(f"--configs-dir {configs_dir}: "
                         + (f"the tuned files' folder of {named}" if named else
                            f"holds tuned files written on {wrote[0]}")
                         + f"; this tune runs on {dev_name}: its winners go in this device's "
                           f"own folder (default {_shown(configs_dir_for(dev_name))})")


def configs_dir_for(dev_name: str) -> Path:
    """data/configs/<device-slug>: where tuned files for this device live."""
    from ..core.devices import device_slug
    from .store import data_dir
    return data_dir().parent / "configs" / device_slug(dev_name)


def read_config_path(backend: str, path) -> dict:
    """{stage: {M: config}} from a config file given by path (its `_down` sibling, when
    present, for gemm2). ValueError naming the file when it is missing or malformed."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file {p} does not exist")
    t1 = read_table(p)
    down = p.with_name(p.stem + "_down.json")
    if down.is_file():
        return ConfigTables({"gemm1": t1, "gemm2": read_table(down)}, {"gemm1": p, "gemm2": down})
    return ConfigTables({"gemm1": t1, "gemm2": t1}, {"gemm1": p, "gemm2": p})


def config_for(backend: str, config: str, problem: Problem, dev_name: str):
    """(configuration for Backend.prepare, why not) of a sweep's `--config` value:
    `default` -> (None, ""): the backend's own choice; `tuned` -> the tuned files of this
    device and shard, or a reason when there are none (the point becomes `unsupported`,
    never silently default); a path -> that file."""
    if config == "default" or not backends.backend_class(backend).tunable:
        return None, ""
    if config == "tuned":
        table = load_tuned(backend, problem, dev_name)
        if table is None:
            p = tuned_file_paths(backend, problem, dev_name)["gemm1"]
            return None, (f"no tuned configuration {p.name} under {_shown(p.parent)}: "
                          f"run `moe-lab tune --backend {backend}` for this shape first")
        return table, ""
    table = read_config_path(backend, config)
    return table, _other_shape(backend, config, problem, dev_name)


def _other_shape(backend: str, path, problem: Problem, dev_name: str) -> str:
    """Why a config file named for another shape (vLLM's naming: E=<local experts>,N=<I per
    rank>) cannot be this point's configuration, "" when its name names none or this one.
    Before: read as the point's own, and its row labelled with the file as if it were."""
    import re
    shape = re.compile(r"(?:^|,)E=(\d+),N=(\d+)(?:,|\.json$|$)")
    mine = backends.get(backend).config_files(problem, dev_name)["gemm1"]
    a, b = shape.search(Path(path).name), shape.search(mine)
    if a and b and a.groups() != b.groups():
        return (f"config file {Path(path).name} is for E={a[1]},N={a[2]}; this point's shape "
                f"is E={b[1]},N={b[2]} ({mine})")
    return ""


def validate_config_arg(text: str) -> list[str]:
    """`default`, `tuned`, a config file, or several comma-separated -> the list; a file that
    is missing or malformed is a UsageError naming it (exit 2 on the command line). A file
    name may hold commas itself (vLLM's: `E=16,N=1024,device_name=NVIDIA_H200.json`): the
    pieces are joined until they make `default`, `tuned`, a name ending in .json or an
    existing file."""
    out, buf = [], []
    for piece in str(text).split(","):
        if not buf and not piece.strip():
            continue
        buf.append(piece)
        item = ",".join(buf).strip()
        if item in ("default", "tuned") or item.endswith(".json") or Path(item).is_file():
            out.append(item)
            buf = []
    if ",".join(buf).strip():
        out.append(",".join(buf).strip())
    if not out:
        raise UsageError("--config: nothing given (default, tuned or a config file)")
    for c in out:
        if c in ("default", "tuned"):
            continue
        if not Path(c).is_file():
            raise UsageError(f"--config: {c} is neither default, tuned nor an existing config file")
        try:
            read_table(c)
        except ValueError as exc:
            raise UsageError(f"--config: {exc}") from None
    return list(dict.fromkeys(out))  # `tuned,tuned`: each configuration once


def _shown(path: Path) -> str:
    """A path as a row's error names it: relative to the checkout when under it (a row
    must not carry the measuring machine's folders), else as it is."""
    from ..core.environment import REPO_ROOT
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)
