"""How a point is timed, as one structured value.

    eager                          one call from Python, host and launches included
    graph                          the call captured in a CUDA/HIP graph and replayed
    compile:<variant>[:dynamic]    the MoE layer (router + experts) under torch.compile;
                                   variant `off` is the same layer uncompiled (the baseline)

`wrapped` is separate: the experts call made through its torch.library custom op (opaque to
Dynamo) rather than traced. Rows store `mode` (the name above) and `wrapped` (a bool
column); `Mode.label` is what figures print.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import UsageError

BASE = ("eager", "graph")
COMPILE_VARIANTS = ("default", "max-autotune-no-cudagraphs", "reduce-overhead", "off")
BASELINE = "off"  # compile:off: the same layer (router + experts), not compiled
WRAPPED_SUFFIX = ":custom-op"  # how rows written before `wrapped` was a column said it


@dataclass(frozen=True)
class Mode:
    kind: str                   # "eager" | "graph" | "compile"
    variant: str | None = None  # compile only: a torch.compile mode, or "off"
    dynamic: bool = False       # compile only: dynamic=True
    wrapped: bool = False       # compile only: experts through the custom op

    @property
    def name(self) -> str:
        """The `mode` column: eager, graph, compile:<variant>[:dynamic]."""
        if self.kind != "compile":
            return self.kind
        return f"compile:{self.variant}" + (":dynamic" if self.dynamic else "")

    @property
    def compiled(self) -> bool:
        """torch.compile is applied (every compile mode but `off`)."""
        return self.kind == "compile" and self.variant != BASELINE

    @property
    def label(self) -> str:
        return self.name.removeprefix("compile:") + (" [op]" if self.wrapped else "")

    def with_wrapped(self, wrapped: bool) -> "Mode":
        return Mode(self.kind, self.variant, self.dynamic, bool(wrapped))


def parse_mode(text: str, wrapped: bool = False) -> Mode:
    """`graph`, `compile:reduce-overhead:dynamic`, `compile:off` -> Mode (UsageError)."""
    text = str(text).strip()
    if text in BASE:
        return Mode(text)
    parts = text.split(":")
    if parts[0] != "compile" or len(parts) not in (2, 3) or parts[1] not in COMPILE_VARIANTS \
            or (len(parts) == 3 and parts[2] != "dynamic") \
            or (parts[1] == BASELINE and len(parts) == 3):
        raise UsageError(f"mode {text!r} is not eager, graph or compile:<variant>[:dynamic] "
                         f"with variant in {', '.join(COMPILE_VARIANTS)} (off takes no :dynamic)")
    return Mode("compile", parts[1], len(parts) == 3, wrapped)


def parse_modes(text: str) -> list[Mode]:
    modes = list(dict.fromkeys(parse_mode(m) for m in text.split(",") if m.strip()))  # each once
    if not modes:
        raise UsageError("no modes given")
    return modes


def row_mode(row) -> Mode:
    """The Mode of a stored row (reads the old `...:custom-op` names too)."""
    name, wrapped = str(row["mode"]), row.get("wrapped")
    if name.endswith(WRAPPED_SUFFIX):
        name, wrapped = name[:-len(WRAPPED_SUFFIX)], True
    return parse_mode(name, wrapped=bool(wrapped) if wrapped == wrapped else False)
