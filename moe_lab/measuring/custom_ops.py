"""Backend experts calls as `torch.library.custom_op`s, so `torch.compile` treats them as
opaque: Dynamo does not trace into them, Inductor calls them as extern kernels.

Why: aiter's fused MoE "doesn't support torch.compile() at this moment" (ROCm/aiter#244).
Dynamo traces into the Python of an unwrapped backend and meets host syncs (`.tolist()`),
ops without fake (meta) kernels, or Triton launch code it cannot follow. Registering the
whole experts call as one op with a fake implementation (output shape and dtype only)
is the fix vLLM applies too; this module is our own version of that idea.

One op per backend, all with the same tensor-level schema:

    moe_lab::<backend>_experts(x, w1, w2, topk_weights, topk_ids,
                               expert_map=None, weight_on_input=False) -> out[T, H]

(`-` in a backend name becomes `_`: `aiter-triton` -> `moe_lab::aiter_triton_experts`).

Backends prepare weights once per problem (aiter shuffles them). The op's implementation
looks up the backend's prepared callable by the identity of the weight tensors it is
given; `bind(backend, problem, weights)` prepares and caches it ahead of time (what
`MoELayer` does). Unbound tensors (e.g. `torch.library.opcheck`'s copies) get a problem
rebuilt from their shapes and are prepared on first use.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable

import torch

from ..backends import Weights, get as get_backend
from ..core.problems import ModelSpec, Problem

_OPS: dict[str, object] = {}


def op_name(backend: str) -> str:
    return f"moe_lab::{backend.replace('-', '_')}_experts"


# --- prepared callables, cached by the identity of the weight tensors ------------------

@dataclass
class _Entry:
    refs: tuple  # weakrefs to w1, w2 (and expert_map): the entry dies with its tensors
    fn: Callable


_PREPARED: dict[tuple, _Entry] = {}


def _key(backend, w1, w2, expert_map, weight_on_input, topk):
    emap = None if expert_map is None else expert_map.data_ptr()
    return (backend, w1.data_ptr(), tuple(w1.shape), w1.dtype, str(w1.device),
            w2.data_ptr(), tuple(w2.shape), emap, bool(weight_on_input), int(topk))


def _alive(entry: _Entry) -> bool:
    """While the bound tensors live, no other tensor can own their memory: a key hit
    (same data pointers, shapes, dtype) is the same weights, even through an alias."""
    return all(r() is not None for r in entry.refs)


def problem_from_tensors(w1, w2, topk_ids, expert_map, weight_on_input, dtype) -> Problem:
    """A Problem with the shapes of these tensors (for backends' `prepare`)."""
    e_local, two_i, h = w1.shape
    inter = w2.shape[2]
    e_global = e_local if expert_map is None else expert_map.shape[0]
    ep = e_global // e_local
    rank = 0
    if expert_map is not None and ep > 1:
        local0 = (expert_map == 0).nonzero()
        rank = int(local0[0, 0]) // e_local if local0.numel() else 0
    router = "llama4" if weight_on_input else "softmax"
    spec = ModelSpec(f"custom:H={h},I={inter},E={e_global},k={topk_ids.shape[1]}", "",
                     h, inter, e_global, topk_ids.shape[1], 0, 1, router,
                     renormalize=not weight_on_input)
    name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    return Problem(spec, max(1, topk_ids.shape[0]), name, tp=ep, ep=ep, ep_rank=rank)


def bind(backend: str, problem: Problem, weights: Weights) -> Callable:
    """Prepare `backend` for these weights and cache the callable for the op to find."""
    fn = get_backend(backend).prepare(problem, weights)
    tensors = [weights.w1, weights.w2] + ([weights.expert_map] if weights.expert_map is not None else [])
    key = _key(backend, weights.w1, weights.w2, weights.expert_map, problem.weight_on_input,
               problem.topk)
    _PREPARED[key] = _Entry(tuple(weakref.ref(t) for t in tensors), fn)
    return fn


def prepared(backend, x, w1, w2, topk_ids, expert_map, weight_on_input) -> Callable:
    key = _key(backend, w1, w2, expert_map, weight_on_input, topk_ids.shape[1])
    entry = _PREPARED.get(key)
    if entry is None or not _alive(entry):
        for k in [k for k, e in _PREPARED.items() if not _alive(e)]:
            del _PREPARED[k]  # drop entries whose tensors are gone
        problem = problem_from_tensors(w1, w2, topk_ids, expert_map, weight_on_input, x.dtype)
        return bind(backend, problem, Weights(w1, w2, expert_map))
    return entry.fn


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# --- the ops ------------------------------------------------------------------------

def experts_op(backend: str):
    """The custom op for `backend` (registered on first use). Call it like a function."""
    if backend in _OPS:
        return _OPS[backend]
    get_backend(backend)  # unknown names fail here, with the list of known ones

    @torch.library.custom_op(op_name(backend), mutates_args=())
    def experts(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                expert_map: torch.Tensor | None = None,
                weight_on_input: bool = False) -> torch.Tensor:
        fn = prepared(backend, x, w1, w2, topk_ids, expert_map, weight_on_input)
        out = fn(x, topk_weights, topk_ids)
        # A custom op's output may not alias an input (mutates_args=() promises that).
        if any(_same_storage(out, t) for t in (x, w1, w2, topk_weights)):
            out = out.clone()
        return out

    @experts.register_fake
    def _(x, w1, w2, topk_weights, topk_ids, expert_map=None, weight_on_input=False):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    _OPS[backend] = experts
    return experts
