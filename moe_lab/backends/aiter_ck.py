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
  * `activation=ActivationType.Silu`, `quant_type=QuantType.No`.
Runs only on ROCm: `import aiter` needs the ROCm toolchain.
"""
from __future__ import annotations

import os

import torch

from . import Backend, Weights, register
from ._aiter_dispatch import ck_supports
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

    def available(self):
        if aiter_root() is None:
            return False, "amd-aiter is not installed (pip install amd-aiter)"
        if torch.version.hip is None:
            return False, "aiter's CK/asm fused_moe needs ROCm (this torch is not a ROCm build)"
        if not torch.cuda.is_available():
            return False, "no ROCm GPU visible"
        try:
            import aiter  # noqa: F401
            from aiter.fused_moe import fused_moe  # noqa: F401
        except Exception as exc:
            return False, f"import aiter failed: {type(exc).__name__}: {exc}"
        return True, ""

    def supports(self, problem, device):
        if not str(device).startswith("cuda"):
            return False, "aiter runs on ROCm GPUs only"
        if problem.dtype not in ("bf16", "fp16"):
            return False, "aiter's unquantised fused_moe takes bf16/fp16"
        if problem.weight_on_input and problem.topk != 1:
            return False, "doweight_stage1 (weight on input) is top-1 only"
        esz = torch.tensor([], dtype=problem.torch_dtype).element_size()
        for shape in ((problem.local_experts, 2 * problem.inter, problem.hidden),
                      (problem.local_experts, problem.hidden, problem.inter)):
            ok, why = shuffle_ok(shape, esz)
            if not ok:
                return False, why
        dev = rocm_device(int(str(device).partition(":")[2] or 0))
        if dev is None:
            return False, "aiter's CK/asm fused_moe needs a ROCm GPU (this torch sees none)"
        return ck_supports(problem, *dev)

    def info(self):
        return {"aiter": aiter_version()}

    def prepare(self, problem, weights: Weights):
        from aiter import ActivationType, QuantType
        from aiter.fused_moe import fused_moe
        from aiter.ops.shuffle import shuffle_weight
        w1 = shuffle_weight(weights.w1, layout=SHUFFLE_LAYOUT)
        w2 = shuffle_weight(weights.w2, layout=SHUFFLE_LAYOUT)
        mask = expert_mask_from_map(weights.expert_map, sentinel=True)
        base = fused_moe_kwargs(problem, w1, w2, None, None, mask, (ActivationType, QuantType))

        def fn(x, topk_weights, topk_ids):
            kw = dict(base, hidden_states=x, topk_weight=topk_weights.float(),
                      topk_ids=topk_ids.to(torch.int32))
            return fused_moe(**kw)
        return fn
