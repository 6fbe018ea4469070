"""FP8 arguments of aiter's two MoE paths, from the installed amd-aiter's code.

Triton (`aiter.ops.triton.moe_op.fused_moe`, the `aiter-triton` backend):
  * fp8-tensor: `use_fp8_w8a8=True, block_shape=None`; A is passed in bf16 and fused_moe
    quantises it itself, per tensor, dynamically (`_MOE_A_QUANT_FUNC`,
    dynamic_per_tensor_quant_fp8_i8, into B's fp8 dtype); B_scale one fp32 per expert
    ([E]: the kernel loads `b_scale_ptr + expert`); A_scale is overwritten.
  * fp8-block128: `block_shape=[128, 128]`; A is fp8 already, A_scale fp32
    [rows, ceil(K/128)] (row = token for gemm1, (token, slot) for gemm2), B_scale fp32
    [E, ceil(N/128), ceil(K/128)] (fused_moe asserts those three ceil-divisions); the
    kernel takes one A and B scale per K step, so BLOCK_SIZE_K must divide 128.
  * fp8-channel: not there. The fp8 w8a8 kernel loads ONE weight scale per expert
    (per-channel scales exist only on its int8_w8a16 path) and quantises A per tensor.
CK/asm (`aiter.fused_moe.fused_moe`, the `aiter` backend), as vLLM's
`rocm_aiter_fused_experts` calls it: hidden states in bf16 (fused_moe quantises them,
and the stage-1 output, with its own dynamic quant of the quant type), weights fp8 in the
device's format (aiter's `dtypes.fp8`: fnuz on gfx942, fn on gfx950), shuffled (16, 16);
  * fp8-tensor   quant_type=QuantType.per_Tensor, w1_scale [E, 1], w2_scale [E, 1]
  * fp8-channel  quant_type=QuantType.per_Token,  w1_scale [E, 2I, 1], w2_scale [E, H, 1]
  * fp8-block128 quant_type=QuantType.per_128x128 (fused_moe remaps it to per_1x128
                 activations), w1_scale [E, 2I/128, H/128], w2_scale [E, H/128, I/128]
  * Llama-4 (router weight on the input) with fp8-channel: vLLM calls aiter's
    `asm_moe_tkw1` (the "tkw1" kernel: the router weight applied to stage 1's output),
    fc1_scale/fc2_scale as w1_scale/w2_scale, a16=False, no smooth scales.
The scale shapes are those of aiter's own torch reference (`torch_moe_stage1/2`), which
the tests run on our tensors.
"""
from __future__ import annotations

TRITON_SCHEMES = ("fp8-tensor", "fp8-block128")
TRITON_NO_CHANNEL = ("aiter's Triton moe_op fp8 w8a8 kernel loads one weight scale per "
                     "expert (per-channel only on its int8_w8a16 path) and quantises "
                     "activations per tensor: no fp8-channel")
BLOCK_SHAPE = [128, 128]

CK_QUANT = {"fp8-tensor": "per_Tensor", "fp8-channel": "per_Token",
            "fp8-block128": "per_128x128"}


def triton_fp8_fixed(scheme: str, w1_scale, w2_scale) -> tuple[dict, dict]:
    """Fixed fused_moe arguments of gemm1 and gemm2 for an fp8 scheme."""
    if scheme not in TRITON_SCHEMES:
        raise ValueError(TRITON_NO_CHANNEL if scheme == "fp8-channel" else
                         f"no aiter Triton fp8 path for {scheme!r}")
    common = dict(use_fp8_w8a8=True, use_int8_w8a16=False, use_int4_w4a16=False, B_zp=None,
                  block_shape=list(BLOCK_SHAPE) if scheme == "fp8-block128" else None)
    return dict(common, B_scale=w1_scale), dict(common, B_scale=w2_scale)


def fit_block_k(cfg: dict, scheme: str) -> dict:
    """A launch configuration whose BLOCK_SIZE_K divides the 128 columns of a scale block
    (the block kernel reads one scale per K step); others unchanged."""
    if scheme != "fp8-block128" or 128 % cfg["BLOCK_SIZE_K"] == 0:
        return cfg
    return dict(cfg, BLOCK_SIZE_K=128)


def ck_scales(scheme: str, w1_scale, w2_scale):
    """Our weight scales (moe_lab.quant shapes) in the shapes aiter's CK fused_moe takes."""
    E = w1_scale.shape[0]
    if scheme == "fp8-tensor":
        return w1_scale.reshape(E, 1), w2_scale.reshape(E, 1)
    if scheme == "fp8-channel":
        return w1_scale.reshape(E, -1, 1), w2_scale.reshape(E, -1, 1)
    return w1_scale, w2_scale


def ck_fp8_kwargs(problem, w1_scale, w2_scale, QuantType) -> dict:
    """The quantisation keywords of aiter.fused_moe.fused_moe for an fp8 scheme."""
    s1, s2 = ck_scales(problem.dtype, w1_scale, w2_scale)
    return dict(quant_type=getattr(QuantType, CK_QUANT[problem.dtype]), w1_scale=s1,
                w2_scale=s2, a1_scale=None, a2_scale=None)


def uses_tkw1(problem) -> bool:
    """vLLM's choice: per-token fp8 with the router weight on the input -> asm_moe_tkw1."""
    return problem.dtype == "fp8-channel" and problem.weight_on_input


def tkw1_kwargs(w1_scale, w2_scale, expert_mask, ActivationType) -> dict:
    """Keywords of aiter's asm_moe_tkw1 after (hidden_states, w1, w2, topk_weight,
    topk_ids), as vLLM passes them."""
    s1, s2 = ck_scales("fp8-channel", w1_scale, w2_scale)
    return dict(fc1_scale=s1, fc2_scale=s2, fc1_smooth_scale=None, fc2_smooth_scale=None,
                a16=False, per_tensor_quant_scale=None, expert_mask=expert_mask,
                activation=ActivationType.Silu)
