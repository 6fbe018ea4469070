"""A run's traces (traces/*.json.gz): the name the sweep gives a point's trace, read back
by the eager split (moe_lab.analysis.eager_split), and the host range that opens around
each profiled call (moe_lab.measuring.profiling records it; the split reads it)."""
from __future__ import annotations

import os
import re

RANGE_NAME = "moe_lab.forward"
TRACE_NAME = re.compile(r"^(?P<model>.+)_TP(?P<tp>\d+)(?:\+EP(?P<ep>\d+))?_T(?P<tokens>\d+)_"
                        r"(?P<backend>[^_]+)(?:_(?P<config>[^_]+))?\.json\.gz$")


def config_tag(config) -> str:
    """What a sweep trace's name carries of its launch configuration: nothing for the
    default, else `_<name>` (a file: its base name, characters other than letters, digits,
    '.', '-' and '=' made '-')."""
    if config is None or config != config or str(config) == "default":
        return ""
    return "_" + re.sub(r"[^A-Za-z0-9.=-]+", "-", os.path.basename(str(config)))


def trace_name(prob, backend: str, config="default") -> str:
    """The file name the sweep gives a point's trace (parse_trace_name reads it back)."""
    return (f"{prob.model.name}_{prob.sharding}_T{prob.tokens}_{backend}"
            f"{config_tag(config)}.json.gz")


def parse_trace_name(name: str) -> dict | None:
    """model, tp, ep, tokens, backend, config tag from a sweep trace's file name, None if
    not one."""
    m = TRACE_NAME.match(os.path.basename(str(name)))
    if not m:
        return None
    return dict(model=m["model"], tp=int(m["tp"]), ep=int(m["ep"] or 1),
                tokens=int(m["tokens"]), backend=m["backend"],
                config=("_" + m["config"]) if m["config"] else "")
