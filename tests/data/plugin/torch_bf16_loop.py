"""`torch-bf16-loop`: the reference loop in the activation dtype (no fp32 upcast of the
GEMMs). The example of README's "Adding a backend": one new file in moe_lab/backends/."""
from __future__ import annotations

from . import Backend, Weights, register
from .torch_ref import torch_moe


@register
class TorchBf16LoopBackend(Backend):
    name = "torch-bf16-loop"
    label, color = "torch loop (bf16 GEMMs)", "tab:olive"
    description = "per-expert loop, GEMMs in the activation dtype"
    # the loop's [pairs, .] temporaries, written then read back (see torch_ref's list)
    intermediates = [("gathered x", "local", "H", "act"), ("gemm1 out h", "local", "2I", "act"),
                     ("act out a", "local", "I", "act"), ("gemm2 out y", "local", "H", "act"),
                     ("fp32 accumulator", "tokens", "H", 4)]
    not_capturable = "reads expert token counts on the host, like the reference loop"

    def prepare(self, problem, weights: Weights):
        def fn(x, topk_weights, topk_ids):
            return torch_moe(x, weights.w1, weights.w2, topk_weights, topk_ids,
                             weights.expert_map, problem.weight_on_input)
        return fn
