"""Backend registry. One small adapter per fused-MoE implementation.

Every backend computes, for the experts this rank holds,
    out[t] = sum_j w_tj * (silu(x_t W1g_e^T) * (x_t W1u_e^T)) W2_e^T,  e = topk_ids[t, j]
(or with w_tj applied to x_t when the model routes weight on input, Llama-4),
and contributes zero for experts that `expert_map` marks remote (-1).

Protocol (a class registered with `@register`):
    name: str                                 contract name (DESIGN.md)
    available() -> (bool, reason)             can it run on this machine at all?
    supports(problem, device) -> (bool, reason)
    prepare(problem, weights) -> fn           layout conversion etc., outside timing;
                                              fn(x, topk_weights, topk_ids) -> out[T, H]
    info() -> dict                            versions / config for the manifest
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import UsageError
from ..problems import Problem

MoEFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Weights:
    """Expert weights of this rank: w1[E_local, 2I, H] (gate rows, then up), w2[E_local, H, I]."""
    w1: torch.Tensor
    w2: torch.Tensor
    expert_map: torch.Tensor | None  # int32[E] global -> local, -1 remote; None without EP


class Backend:
    name = "?"
    description = ""
    # None: try graph capture. A string: why this backend cannot be captured (not tried).
    not_capturable: str | None = None

    def available(self) -> tuple[bool, str]:
        return True, ""

    def supports(self, problem: Problem, device: str) -> tuple[bool, str]:
        return True, ""

    def prepare(self, problem: Problem, weights: Weights) -> MoEFn:
        raise NotImplementedError

    def info(self) -> dict:
        return {}


_REGISTRY: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    _REGISTRY[cls.name] = cls
    return cls


def _load_all():
    from . import torch_ref, torch_grouped, aiter_triton, aiter_ck, vllm_fused  # noqa: F401


def names() -> list[str]:
    _load_all()
    return list(_REGISTRY)


def get(name: str) -> Backend:
    return _REGISTRY[parse_names(name)[0]]()


def parse_names(text: str) -> list[str]:
    """`torch,aiter-triton` -> names, each checked against the registry (UsageError)."""
    _load_all()
    names = [s.strip() for s in text.split(",") if s.strip()]
    for n in names:
        if n not in _REGISTRY:
            raise UsageError(f"unknown backend {n!r}; known: {', '.join(_REGISTRY)}")
    if not names:
        raise UsageError("no backend named")
    return names


def all_backends() -> list[Backend]:
    _load_all()
    return [cls() for cls in _REGISTRY.values()]
