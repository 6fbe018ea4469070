"""`aiter`: `aiter.fused_moe.fused_moe` (CK / asm kernels), the path vLLM takes on ROCm.

Written to the installed `amd-aiter` API, the way vLLM's `rocm_aiter_fused_experts`
calls it for unquantised weights:
  * weights shuffled once with `aiter.ops.shuffle.shuffle_weight(w, layout=(16, 16))`
    (needs rows % 16 == 0 and columns % 32 == 0 for 2-byte dtypes);
  * topk_weights fp32, topk_ids int32 (global ids under EP);
  * EP: `expert_mask` int32[E+1]: 1 for experts this rank holds (`expert_map > -1`),
    then a 0 sentinel, as vLLM's `determine_expert_map(return_expert_mask=True)` builds it
    (E + fused shared experts + 1; we fuse none). aiter's `fused_moe_` takes
    `global_E = expert_mask.numel()` as moe_sorting's `num_experts`, and the ck_tile
    sorting kernel reads mask[e] for e < num_experts, numbering local experts by the mask's
    prefix sum: the masked-out sentinel id E gets no block and shifts no local id, so E and
    E+1 sort alike, and with E+1 moe_sorting loops over the same E+1 experts as under vLLM;
  * supports(): the CK tile rule of the kernel aiter's dispatcher would pick on this GPU
    (moe_lab.backends._aiter_dispatch: tuned row or get_block_size_M + block_m heuristic);
  * Llama-4 weight-on-input: `doweight_stage1=True` (top-1 only);
  * `activation=ActivationType.Silu`, `quant_type=QuantType.No` (bf16/fp16);
  * fp8 schemes: weights quantised once in the device's fp8 format and shuffled, scales
    and quant_type as vLLM passes them, the Llama-4 per-channel path through
    `asm_moe_tkw1` (moe_lab.backends._aiter_fp8 has the shapes and why).
Runs only on ROCm: `import aiter` needs the ROCm toolchain.
"""
from __future__ import annotations

import os

import torch

from . import Backend, Weights, register
from ._aiter_dispatch import GFX_SUPPORTED, ck_supports
from ._aiter_fp8 import ck_fp8_kwargs, tkw1_kwargs, uses_tkw1
from .aiter_triton import aiter_root, aiter_version

SHUFFLE_LAYOUT = (16, 16)


def shuffle_ok(shape: tuple[int, ...], element_size: int, layout=SHUFFLE_LAYOUT) -> tuple[bool, str]:
    """The constraint aiter's shuffle_weight asserts: rows % IN == 0, cols % (2*IK) == 0."""
    bn, bk = layout[0], layout[1] * 2
    if shape[-2] % bn or shape[-1] % bk:
        return False, (f"aiter shuffle_weight{layout} needs rows % {bn} == 0 and cols % {bk} == 0, "
                       f"got {tuple(shape[-2:])}")
    return True, ""


def expert_mask_from_map(expert_map: torch.Tensor | None, sentinel: bool = False
                         ) -> torch.Tensor | None:
    """int32 1/0 per global expert (held here / remote); with `sentinel`, one more 0 entry
    (length E+1), vLLM's layout, which prepare() passes."""
    if expert_map is None:
        return None
    mask = (expert_map > -1).to(torch.int32)
    return torch.cat([mask, mask.new_zeros(1)]) if sentinel else mask


def rocm_device(index: int = 0) -> tuple[str, int] | None:
    """(gfx arch, CU count) of a ROCm GPU; None off ROCm. The CU count is aiter's
    get_cu_num(): the CU_NUM environment variable, else the device's compute units."""
    if torch.version.hip is None or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    gfx = getattr(props, "gcnArchName", "").split(":")[0]
    cu = int(os.environ.get("CU_NUM", 0) or 0) or int(props.multi_processor_count)
    return gfx, cu


def fused_moe_kwargs(problem, w1, w2, topk_weights, topk_ids, expert_mask, enums) -> dict:
    """Keyword arguments for aiter.fused_moe.fused_moe (checked against the installed
    package's signature by the tests)."""
    ActivationType, QuantType = enums
    return dict(
        hidden_states=None,  # filled per call
        w1=w1, w2=w2,
        topk_weight=topk_weights, topk_ids=topk_ids,
        expert_mask=expert_mask,
        activation=ActivationType.Silu,
        quant_type=QuantType.No,
        doweight_stage1=problem.weight_on_input,
    )


@register
class AiterCKBackend(Backend):
    name = "aiter"
    description = "aiter.fused_moe.fused_moe (CK/asm), as vLLM calls it on ROCm"
    label, color = "aiter (CK/asm)", "tab:orange"
    # 2-stage: stage 1 writes the activated [T*k, I], stage 2 reads it
    intermediates = [("stage1 out a", "all", "I", "act")]
    compile_both_ways = True
    quant_schemes = ("fp8-tensor", "fp8-channel", "fp8-block128")

    def available(self):
        # the GPU first: installing amd-aiter is no use on a machine without a ROCm GPU
        if torch.version.hip is None:
            return False, "aiter's CK/asm fused_moe needs a ROCm GPU (this torch is not a ROCm build)"
        if not torch.cuda.is_available():
            return False, "aiter's CK/asm fused_moe needs a ROCm GPU (none visible)"
        if aiter_root() is None:
            return False, "amd-aiter is not installed (pip install amd-aiter)"
        try:
            import aiter  # noqa: F401
            from aiter.fused_moe import fused_moe  # noqa: F401
        except Exception as exc:
            return False, f"import aiter failed: {type(exc).__name__}: {exc}"
        return True, ""

    def supports(self, problem, device):
        if not str(device).startswith("cuda"):
            return False, "aiter runs on ROCm GPUs only"
        if problem.dtype not in ("bf16", "fp16") + self.quant_schemes:
            return False, f"aiter's fused_moe has no {problem.dtype} path here"
        if problem.dtype == "fp8-block128" and problem.weight_on_input:
            return False, ("vLLM refuses the router weight on the input for block-scaled "
                           "fp8 MoE on aiter")
        esz = 1 if problem.is_fp8 else torch.tensor([], dtype=problem.torch_dtype).element_size()
        for shape in ((problem.local_experts, 2 * problem.inter, problem.hidden),
                      (problem.local_experts, problem.hidden, problem.inter)):
            ok, why = shuffle_ok(shape, esz)
            if not ok:
                return False, why
        dev = rocm_device(int(str(device).partition(":")[2] or 0))
        if dev is None:
            return False, "aiter's CK/asm fused_moe needs a ROCm GPU (this torch sees none)"
        if problem.is_fp8:  # the CK tile rule (ck_supports) is worked out for bf16 only
            ok = dev[0] in GFX_SUPPORTED
            return ok, "" if ok else f"{dev[0]}: aiter's fused_moe has no entry for this arch"
        return ck_supports(problem, *dev)

    def info(self):
        return {"aiter": aiter_version()}

    def prepare(self, problem, weights: Weights):
        from aiter import ActivationType, QuantType
        from aiter.fused_moe import fused_moe
        from aiter.ops.shuffle import shuffle_weight
        qw = weights.quant if problem.is_fp8 else None
        w1 = shuffle_weight(qw.w1 if qw else weights.w1, layout=SHUFFLE_LAYOUT)
        w2 = shuffle_weight(qw.w2 if qw else weights.w2, layout=SHUFFLE_LAYOUT)
        mask = expert_mask_from_map(weights.expert_map, sentinel=True)
        if qw is not None and uses_tkw1(problem):  # vLLM: Llama-4 fp8 per-channel
            from aiter.fused_moe_bf16_asm import asm_moe_tkw1
            tkw = tkw1_kwargs(qw.w1_scale, qw.w2_scale, mask, ActivationType)

            def fn_tkw1(x, topk_weights, topk_ids):
                return asm_moe_tkw1(x, w1, w2, topk_weights.float(), topk_ids.to(torch.int32),
                                    **tkw)
            return fn_tkw1
        base = fused_moe_kwargs(problem, w1, w2, None, None, mask, (ActivationType, QuantType))
        if qw is not None:
            base.update(ck_fp8_kwargs(problem, qw.w1_scale, qw.w2_scale, QuantType))

        def fn(x, topk_weights, topk_ids):
            kw = dict(base, hidden_states=x, topk_weight=topk_weights.float(),
                      topk_ids=topk_ids.to(torch.int32))
            return fused_moe(**kw)
        return fn
