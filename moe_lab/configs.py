"""Configuration files keyed by token count, the format vLLM and aiter read for their
Triton MoE kernels: a JSON object whose keys are token counts M (strings) and whose values
are launch configurations (objects of positive integers). A caller uses the configuration
of the key nearest its own M."""
from __future__ import annotations

import json
from pathlib import Path

from . import backends
from .atomic import atomic_write_json
from .errors import UsageError
from .problems import Problem


def check_config(cfg: dict, where: str = "config") -> dict:
    """A launch configuration: a non-empty object of positive integers (ValueError naming
    the key)."""
    if not isinstance(cfg, dict) or not cfg:
        raise ValueError(f"{where}: a configuration must be a non-empty JSON object")
    for k, v in cfg.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{where}: {k} must be a positive integer, got {v!r}")
    return cfg


def read_table(path: str | Path) -> dict[int, dict]:
    """{M: configuration} from a config file; ValueError naming the file and the fault."""
    path = Path(path)
    try:
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON config file ({exc})") from None
    if not isinstance(obj, dict) or not obj:
        raise ValueError(f"{path}: expected an object keyed by token count")
    table = {}
    for key, cfg in obj.items():
        if not str(key).isdigit() or int(key) <= 0:
            raise ValueError(f"{path}: key {key!r} is not a token count")
        table[int(key)] = check_config(cfg, f"{path} [{key}]")
    return table


def write_table(path: str | Path, table: dict[int, dict]) -> Path:
    """The upstream format: keys are token counts as strings, ascending."""
    out = {str(m): {k: int(v) for k, v in check_config(table[m]).items()} for m in sorted(table)}
    atomic_write_json(Path(path), out)
    return Path(path)


def nearest(table: dict[int, dict], tokens: int) -> dict:
    """vLLM's rule: the configuration of the key nearest the token count (ties: smaller)."""
    return table[min(table, key=lambda m: (abs(m - tokens), m))]


# --- which configuration a sweep or check uses ---------------------------------------

def load_tuned(backend: str, problem: Problem, dev_name: str, configs_dir) -> dict | None:
    """{stage: {M: config}} from the tuned files for this shard, None when there are none."""
    be = backends.backend_class(backend)
    if not be.tunable:
        return None
    names = be().config_files(problem, dev_name)
    folder = Path(configs_dir) / backend
    if not (folder / names["gemm1"]).exists():
        return None
    tables = {}
    for stage, name in names.items():
        p = folder / name
        tables[stage] = read_table(p) if p.exists() else tables["gemm1"]
    return tables


def configs_dir_for(dev_name: str) -> Path:
    """data/configs/<device-slug>: where tuned files for this device live."""
    from .devices import device_slug
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
    return {"gemm1": t1, "gemm2": read_table(down) if down.is_file() else t1}


def config_for(backend: str, config: str, problem: Problem, dev_name: str):
    """(configuration for Backend.prepare, why not) of a sweep's `--config` value:
    `default` -> (None, ""): the backend's own choice; `tuned` -> the tuned files of this
    device and shard, or a reason when there are none (the point becomes `unsupported`,
    never silently default); a path -> that file."""
    if config == "default" or not backends.backend_class(backend).tunable:
        return None, ""
    if config == "tuned":
        folder = configs_dir_for(dev_name)
        table = load_tuned(backend, problem, dev_name, folder)
        if table is None:
            names = backends.get(backend).config_files(problem, dev_name)
            return None, (f"no tuned configuration {names['gemm1']} under {folder}/{backend}: "
                          f"run `moe-lab tune --backend {backend}` for this shape first")
        return table, ""
    return read_config_path(backend, config), ""


def validate_config_arg(text: str) -> list[str]:
    """`default`, `tuned`, a config file, or several comma-separated -> the list; a file that
    is missing or malformed is a UsageError naming it (exit 2 on the command line)."""
    out = [t.strip() for t in str(text).split(",") if t.strip()]
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
    return out
