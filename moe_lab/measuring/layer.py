"""The MoE layer as a user compiles it: the model's router from logits, then the experts.

    layer = MoELayer(problem, "aiter-triton", weights, wrap=True)
    out = torch.compile(layer)(x, router_logits)       # out[T, H]

`wrap=False` calls the backend's prepared callable directly, so Dynamo traces into the
backend's Python (and meets whatever it cannot trace). `wrap=True` calls it through the
backend's `torch.library.custom_op` (`moe_lab.measuring.custom_ops`), which Dynamo treats as one
opaque node with a fake implementation: the fix for ROCm/aiter#244.
"""
from __future__ import annotations

import torch
from torch import nn

from . import custom_ops
from ..backends import Weights, get as get_backend
from ..core.problems import Problem
from ..core.routing import route


class MoELayer(nn.Module):
    def __init__(self, problem: Problem, backend_name: str, weights: Weights,
                 wrap: bool = False, bias: torch.Tensor | None = None):
        super().__init__()
        self.problem, self.backend_name, self.wrap = problem, backend_name, wrap
        self.spec = problem.model
        self.weight_on_input = problem.weight_on_input
        # Buffers, not parameters: inference weights, and the same tensor objects the
        # prepared callable was bound to.
        self.register_buffer("w1", weights.w1, persistent=False)
        self.register_buffer("w2", weights.w2, persistent=False)
        self.register_buffer("expert_map", weights.expert_map, persistent=False)
        self.register_buffer("bias", bias, persistent=False)  # DeepSeek correction bias
        if wrap:
            custom_ops.bind(backend_name, problem, weights)
            self.op = custom_ops.experts_op(backend_name)
        else:
            self.fn = get_backend(backend_name).prepare(problem, weights)

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = route(self.spec, router_logits, self.bias)
        if self.wrap:
            return self.op(x, self.w1, self.w2, topk_weights, topk_ids, self.expert_map,
                           self.weight_on_input)
        return self.fn(x, topk_weights, topk_ids)

    def extra_repr(self) -> str:
        return f"{self.problem.describe()}, backend={self.backend_name}, wrap={self.wrap}"
