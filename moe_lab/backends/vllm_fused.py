"""`vllm`: vLLM's `fused_experts` (Triton), when vLLM is importable. Optional."""
from __future__ import annotations

import importlib.util

import torch

from . import Backend, Weights, register


@register
class VllmBackend(Backend):
    name = "vllm"
    description = "vLLM fused_experts (Triton), when vLLM is installed"
    label, color = "vllm", "tab:purple"
    # the same three caches as aiter-triton
    intermediates = [("cache1", "all", "2I", "act"), ("cache2", "all", "I", "act"),
                     ("cache3", "all", "H", "act")]

    def available(self):
        if importlib.util.find_spec("vllm") is None:
            return False, "vLLM is not installed (optional backend)"
        if not torch.cuda.is_available():
            return False, "vLLM's fused_experts needs a GPU"
        try:
            from vllm.model_executor.layers.fused_moe import fused_experts  # noqa: F401
        except Exception as exc:
            return False, f"import vllm fused_experts failed: {type(exc).__name__}: {exc}"
        return True, ""

    def supports(self, problem, device):
        if not str(device).startswith("cuda"):
            return False, "GPU only"
        return True, ""

    def info(self):
        import vllm
        return {"vllm": vllm.__version__}

    def prepare(self, problem, weights: Weights):
        from vllm.model_executor.layers.fused_moe import fused_experts
        w1, w2, emap = weights.w1, weights.w2, weights.expert_map

        def fn(x, topk_weights, topk_ids):
            return fused_experts(x, w1, w2, topk_weights, topk_ids,
                                 apply_router_weight_on_input=problem.weight_on_input,
                                 global_num_experts=problem.experts, expert_map=emap)
        return fn
