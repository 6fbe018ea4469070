"""`aiter-triton-silu`: aiter's Triton MoE with SiLU*mul fused into the first GEMM
(`aiter.ops.triton.moe_op_silu_fused.fused_moe_silu`): gemm1 writes the activated
[T, k, I] instead of [T, k, 2I], and the separate activation kernel is gone. The rest
(alignment, gemm2, the sum over k, EP's expert mask) is aiter-triton's. Its one glue step
is the combine (moe_lab.glue): `glue="fused"` (the default) sums the k slots in one kernel
of ours with fp32 accumulation (phase combine), `glue="naive"` by c2.sum(dim=1).
"""
from __future__ import annotations

from . import register
from ._triton_configs import file_names
from .aiter_triton import AiterTritonBackend


@register
class AiterTritonSiluBackend(AiterTritonBackend):
    name = "aiter-triton-silu"
    description = "aiter's Triton MoE, SiLU*mul fused into gemm1 (moe_op_silu_fused.fused_moe_silu)"
    label, color = "aiter-triton, SiLU fused", "tab:pink"
    # c1 is the activated [T, k, I]; c2 [T, k, H], then the sum over k
    intermediates = [("c1 activated", "all", "I", "act"), ("c2", "all", "H", "act")]
    fused_silu = True
    quant_schemes = ()  # fused_moe_silu is wired for bf16/fp16 here

    def config_files(self, problem, device_name: str) -> dict:
        """Its own files: the fused kernel's best tiles are not the plain one's."""
        names = file_names(problem.local_experts, problem.inter, device_name)
        return {s: n.replace(".json", ",fused=silu.json") if s == "gemm1" else n.replace(
            "_down.json", ",fused=silu_down.json") for s, n in names.items()}
