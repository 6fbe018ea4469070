"""Backends: one small adapter per fused-MoE implementation, one file each, found by
listing this folder (no hand-kept list).

Every backend computes, for the experts this rank holds,
    out[t] = sum_j w_tj * (silu(x_t W1g_e^T) * (x_t W1u_e^T)) W2_e^T,  e = topk_ids[t, j]
(or with w_tj applied to x_t when the model routes weight on input, Llama-4),
and contributes zero for experts that `expert_map` marks remote (-1).

Adding one: a module here with a `Backend` subclass decorated `@register` (README,
"Adding a backend"). Everything the rest of moe-lab needs to know about it is declared
on the class:

    name              contract name used on the command line and in rows
    label, color      how figures show it
    description       one line for `moe-lab backends`
    intermediates     what it writes to memory and reads back, for its roofline bytes:
                      (what, rows, width, element bytes); rows "local" = (token, slot)
                      pairs routed to this rank, "all" = T*k, "tokens" = T; width "H",
                      "I" or "2I"; element bytes a number or "act" (activation dtype).
                      None: unknown (its backend roof columns stay NaN).
    compile_both_ways measured under torch.compile both traced and through its custom op
    not_capturable    None, or why graph capture is not even tried
    quant_schemes     the fp8 schemes (moe_lab.quant.SCHEMES) it implements; () = none: a
                      point of another scheme is an `unsupported` row without asking it
    fp8_formats       the fp8 formats it takes (e4m3fn, e4m3fnuz): an fp8 point on a device
                      whose checkpoints are in another (moe_lab.measuring.points.fp8_format_refusal)
                      is `unsupported` without asking it
    fp8_only          runs fp8 schemes only: left out of the default backend list of a
                      bf16 (or fp16/fp32) check or sweep (named explicitly, it gives rows)
    tunable           has launch configurations that `moe-lab tune` searches (then it also
                      implements config_space, default_config and config files, below)
    gathers_rows      copies the activation rows into expert order before gemm1 (an index
                      select of x); the ledger counts that copy in the align phase and its
                      floor, and gemm2's rows brought back to token order in the combine's
                      (moe_lab.cost.ledger)
    glues             the glue variants it offers (moe_lab.glue.GLUES, its default first);
                      () = no glue choice. One that offers them takes prepare(..., glue=)
    available() -> (bool, reason)             can it run on this machine at all?
    supports(problem, device) -> (bool, reason)   rules about itself only: the layouts no
                                              checkpoint has (fp8 blocks split by a rank,
                                              weight on input with k > 1) are refused for
                                              every backend by moe_lab.measuring.points.gate
    prepare(problem, weights) -> fn           layout conversion etc., outside timing;
                                              fn(x, topk_weights, topk_ids) -> out[T, H]
    info() -> dict                            versions / config for the manifest

Tunable backends (moe_lab.measuring.tuning) also implement
    default_config(problem) -> {stage: config}   what the backend uses untuned
    config_space(problem) -> {stage: [config]}   candidates per stage (e.g. gemm1, gemm2),
                                                 pruned for the problem's token count
    prepare(problem, weights, config={stage: config}) uses that configuration
    config_files(problem, device_name) -> {stage: file name}   in the format the kernel's
                                                 own project reads (vLLM/aiter JSON by M)
and may declare coarse_config / fine_keys (the search's coarse pass and fine steps) and
    warm_tokens(problem, keys) -> token counts whose calls compile every kernel
                                  specialisation (moe_lab.measuring.tuning_compile; default: by
                                  num_valid_tokens alone)
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

import torch

from ..core.errors import UsageError
from ..core.problems import Problem

MoEFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Intermediate = tuple[str, str, str, object]


@dataclass
class Weights:
    """Expert weights of this rank: w1[E_local, 2I, H] (gate rows, then up), w2[E_local, H, I]."""
    w1: torch.Tensor
    w2: torch.Tensor
    expert_map: torch.Tensor | None  # int32[E] global -> local, -1 remote; None without EP
    quant: object = None  # moe_lab.quant.QuantWeights for an fp8 scheme (w1/w2 stay bf16)


class Backend:
    name = "?"
    label: str | None = None  # default: name
    color: str | None = None  # a matplotlib colour; default: one from the shared cycle
    description = ""
    intermediates: list[Intermediate] | None = None
    compile_both_ways = False
    not_capturable: str | None = None
    tunable = False
    quant_schemes: tuple[str, ...] = ()
    fp8_formats: tuple[str, ...] = ("e4m3fn", "e4m3fnuz")
    fp8_only = False
    gathers_rows = False
    glues: tuple[str, ...] = ()  # e.g. ("fused", "naive"): prepare(..., glue=) takes one

    def available(self) -> tuple[bool, str]:
        return True, ""

    def supports(self, problem: Problem, device: str) -> tuple[bool, str]:
        return True, ""

    def prepare(self, problem: Problem, weights: Weights) -> MoEFn:
        raise NotImplementedError

    def info(self) -> dict:
        return {}


_REGISTRY: dict[str, type[Backend]] = {}
_LOADED = False


def register(cls: type[Backend]) -> type[Backend]:
    _REGISTRY[cls.name] = cls
    return cls


def _load_all():
    """Import every module of this package once (each registers its backends)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


def names() -> list[str]:
    _load_all()
    return list(_REGISTRY)


def backend_class(name: str) -> type[Backend]:
    """The class of a backend (its declared facts), UsageError naming the known ones."""
    return _REGISTRY[parse_names(name)[0]]


def get(name: str) -> Backend:
    return backend_class(name)()


def parse_names(text: str) -> list[str]:
    """`torch,aiter-triton` -> names, each checked against the registry (UsageError)."""
    _load_all()
    names = list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))  # each once
    for n in names:
        if n not in _REGISTRY:
            raise UsageError(f"unknown backend {n!r}; known: {', '.join(_REGISTRY)}")
    if not names:
        raise UsageError("no backend named")
    return names


def for_dtype(names_: list[str], dtype: str) -> list[str]:
    """A default backend list for a dtype: fp8-only backends only for fp8 schemes."""
    fp8 = dtype.startswith("fp8")
    return [n for n in names_ if fp8 or not backend_class(n).fp8_only]


def all_backends() -> list[Backend]:
    _load_all()
    return [cls() for cls in _REGISTRY.values()]


def info_for_manifest(name: str) -> dict:
    """What a backend says of itself here (available, why not, versions, configs)."""
    b = get(name)
    ok, why = b.available()
    out = dict(available=ok, reason=why, description=b.description)
    if ok:
        try:
            out.update(b.info())
        except Exception as exc:
            out["info_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return out
