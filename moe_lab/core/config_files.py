"""Configuration files keyed by token count, the format vLLM and aiter read for their
Triton MoE kernels: a JSON object whose keys are token counts M (strings) and whose values
are launch configurations (objects of positive integers). A caller uses the configuration
of the key nearest its own M. The file format alone (no backend knowledge), so backends
and `configs` both import it."""
from __future__ import annotations

import json
from pathlib import Path

from .atomic import atomic_write_json
from .errors import CorruptFile


def check_config(cfg: dict, where: str = "config") -> dict:
    """A launch configuration: a non-empty object of positive integers (ValueError naming
    the key)."""
    if not isinstance(cfg, dict) or not cfg:
        raise ValueError(f"{where}: a configuration must be a non-empty JSON object")
    for k, v in cfg.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{where}: {k} must be a positive integer, got {v!r}")
    return cfg


METADATA_KEYS = ("triton_version",)  # keys of vLLM's config files that are no token count


def read_table(path: str | Path) -> dict[int, dict]:
    """{M: configuration} from a config file. A file that cannot be opened: ValueError
    naming it; one that is not such a table (not JSON, a key that is not a token count or
    names one twice, a value that is not a configuration): CorruptFile (a UsageError, so
    one line on the command line) naming the file and the fault."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: not a readable JSON config file ({exc})") from None
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFile(path, f"not a JSON config file: {exc}") from None
    if not isinstance(obj, dict) or not obj:
        raise CorruptFile(path, "expected an object keyed by token count")
    table = {}
    for key, cfg in obj.items():
        if key in METADATA_KEYS:  # vLLM's tuner writes it; its loader drops it (was refused)
            continue
        if not (key.isascii() and key.isdigit()) or int(key) <= 0:
            raise CorruptFile(path, f"key {key!r} is not a token count")
        if int(key) in table:  # "1" and "01": the later would silently win
            raise CorruptFile(path, f"token count {int(key)} is a key twice")
        try:
            table[int(key)] = check_config(cfg, f"[{key}]")
        except ValueError as exc:
            raise CorruptFile(path, exc) from None
    if not table:  # only metadata
        raise CorruptFile(path, "expected an object keyed by token count")
    return table


def write_table(path: str | Path, table: dict[int, dict]) -> Path:
    """The upstream format: keys are token counts as strings, ascending."""
    atomic_write_json(Path(path), table_json(table))
    return Path(path)


def table_json(table: dict[int, dict]) -> dict:
    """{tokens: config} as the upstream file holds it (checked; keys as strings)."""
    return {str(m): {k: int(v) for k, v in check_config(table[m]).items()} for m in sorted(table)}


def nearest(table: dict[int, dict], tokens: int) -> dict:
    """vLLM's rule: the configuration of the key nearest the token count (ties: smaller)."""
    return table[min(table, key=lambda m: (abs(m - tokens), m))]
