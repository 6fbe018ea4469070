"""The FP8 arguments moe-lab gives aiter, checked against the installed amd-aiter wheel's
own code (no ROCm GPU here): aiter's torch reference of its CK fused_moe run on our
quantised weights and scales, the real Triton `fused_moe` binding our scale tensors and
passing its asserts up to the kernel launch, the enum names, the fp8 dtype per arch, and
the signatures of fused_moe / asm_moe_tkw1."""
import ast
import enum
import os
import re
import types

import pytest
import torch
import torch.nn.functional as F

from moe_lab.core import quant
from moe_lab.backends import _aiter_fp8 as af
from moe_lab.backends.aiter_triton import aiter_root, fused_moe_calls, load_aiter_triton
from moe_lab.backends.torch_fp8 import fp8_reference
from moe_lab.measuring.correctness import THRESHOLDS, make_inputs, make_weights, rel_err
from moe_lab.core.devices import DEVICE_SPECS
from moe_lab.core.problems import make_problem

ROOT = aiter_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="amd-aiter is not installed")


def _source(rel):
    return open(os.path.join(ROOT, rel)).read()


def _real_enum(name):
    meta = os.path.join(os.path.dirname(ROOT), "aiter_meta", "csrc", "include", "aiter_enum.h")
    body = re.search(r"enum class %s[^{]*\{([^}]*)\}" % name, open(meta).read()).group(1)
    names = [re.match(r"\s*(\w+)", i).group(1) for i in body.split(",") if i.strip()]
    return enum.Enum(name, {n: i for i, n in enumerate(names)})


def _params(rel, func):
    tree = ast.parse(_source(rel))
    f = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    return [a.arg for a in f.args.args]


def _aiter_torch_reference():
    """aiter's torch_moe_stage1/2 (fused_moe.py), executed from the wheel's source with
    the names they use: the real QuantType/ActivationType members, quant_remap."""
    tree = ast.parse(_source("fused_moe.py"))
    keep = [n for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name in
                ("get_inter_dim", "torch_moe_stage1", "torch_moe_stage2"))
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "quant_remap"
                                                  for t in n.targets))]
    import functools
    ns = dict(torch=torch, functools=functools, QuantType=_real_enum("QuantType"),
              ActivationType=_real_enum("ActivationType"),
              dtypes=types.SimpleNamespace(fp32=torch.float32, fp16=torch.float16,
                                           bf16=torch.bfloat16),
              aiter=types.SimpleNamespace(get_torch_act=lambda act: F.silu), swiglu=None)
    exec(compile(ast.Module(body=keep, type_ignores=[]), "aiter/fused_moe.py", "exec"), ns)
    assert "quant_remap" in ns
    return ns


@pytest.mark.parametrize("scheme", quant.SCHEMES)
def test_ck_scales_through_aiters_own_reference_match_ours(scheme):
    """Our weights, our CK scale shapes (ck_fp8_kwargs) and dynamic activation scales in
    aiter's torch_moe_stage1/2 give the FP8 layer our reference computes."""
    ns = _aiter_torch_reference()
    QT = ns["QuantType"]
    p = make_problem("custom:H=256,I=256,E=4,k=2", 6, scheme, 1, 1)
    w = make_weights(p, "cpu", 2)
    inp = make_inputs(p, "cpu", 9)
    qw = w.quant
    kw = af.ck_fp8_kwargs(p, qw.w1_scale, qw.w2_scale, QT)
    assert kw["quant_type"] is getattr(QT, af.CK_QUANT[scheme])
    assert kw["w1_scale"].dtype == kw["w2_scale"].dtype == torch.float32
    x = inp.x
    T, k, I = x.shape[0], p.topk, p.inter
    a1, a1_scale = quant.quantize_act(x, scheme, qw.fmt)
    h = ns["torch_moe_stage1"](a1, qw.w1, qw.w2, inp.topk_weights, inp.topk_ids,
                               dtype=torch.bfloat16, quant_type=kw["quant_type"],
                               a1_scale=a1_scale, w1_scale=kw["w1_scale"])
    a2, a2_scale = quant.quantize_act(h.reshape(T * k, I), scheme, qw.fmt)
    if scheme == "fp8-channel":
        a2_scale = a2_scale.view(T, k, 1)
    out = ns["torch_moe_stage2"](a2, qw.w1, qw.w2, inp.topk_weights, inp.topk_ids,
                                 dtype=torch.bfloat16, quant_type=kw["quant_type"],
                                 w2_scale=kw["w2_scale"], a2_scale=a2_scale)
    ref = fp8_reference(x, qw, inp.topk_weights, inp.topk_ids, None, False)
    assert rel_err(out, ref) < THRESHOLDS[scheme]


def test_ck_quant_types_exist_in_real_enum():
    members = set(_real_enum("QuantType").__members__)
    assert set(af.CK_QUANT.values()) <= members
    assert "per_1x128" in members  # what fused_moe remaps per_128x128 to


def test_ck_fp8_keywords_are_real_fused_moe_parameters():
    params = _params("fused_moe.py", "fused_moe")
    QT = _real_enum("QuantType")
    for scheme in quant.SCHEMES:
        p = make_problem("deepseek-r1", 4, scheme, 8, 1)
        qw = make_weights(make_problem("custom:H=256,I=256,E=2,k=1", 1, scheme), "cpu", 0).quant
        assert set(af.ck_fp8_kwargs(p, qw.w1_scale, qw.w2_scale, QT)) <= set(params)


def test_tkw1_call_matches_real_asm_moe_tkw1():
    params = _params("fused_moe_bf16_asm.py", "asm_moe_tkw1")
    assert params[:5] == ["hidden_states", "w1", "w2", "topk_weight", "topk_ids"]
    kw = af.tkw1_kwargs(torch.ones(2, 8), torch.ones(2, 4), None, _real_enum("ActivationType"))
    assert set(kw) <= set(params[5:])
    assert kw["fc1_scale"].shape == (2, 8, 1) and kw["a16"] is False  # [E, N, 1] per channel
    assert af.uses_tkw1(make_problem("llama4-scout-16e", 4, "fp8-channel", 8, 1))
    assert not af.uses_tkw1(make_problem("llama4-scout-16e", 4, "fp8-tensor", 8, 1))
    assert not af.uses_tkw1(make_problem("qwen3-235b-a22b", 4, "fp8-channel", 8, 1))


def test_fp8_format_per_arch_matches_aiter_dtypes():
    """aiter's utility/dtypes.py: gfx942 (MI300X/MI325X) fnuz, gfx950 (MI350/MI355) fn."""
    src = _source(os.path.join("utility", "dtypes.py"))
    found = dict(re.findall(r'"(gfx9\d\d)":\s*\{"fp8":\s*torch\.float8_(e4m3fnuz|e4m3fn)\}', src))
    assert found == {"gfx942": "e4m3fnuz", "gfx950": "e4m3fn"}
    arch_of = {"mi300x": "gfx942", "mi325x": "gfx942", "mi355x": "gfx950"}
    for key, gfx in arch_of.items():
        assert DEVICE_SPECS[key].fp8_format == found[gfx]


# --- Triton: the real fused_moe up to its kernel launch ------------------------------------

class _Launch:
    """Stands in for a @triton.jit kernel: records what `kernel[grid](...)` passes."""
    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kw: self.calls.append((args, kw))


def _triton_point(scheme, monkeypatch):
    import triton.language as tl
    moe_op, _ = load_aiter_triton()
    launch = _Launch()
    monkeypatch.setattr(moe_op, "_fused_moe_kernel", launch)
    quantised = []

    def a_quant(out, A, scale):  # what fused_moe's per-tensor path calls first
        quantised.append((out.dtype, tuple(A.shape)))
        return quant.quantize_act(A, "fp8-tensor", "e4m3fn")
    monkeypatch.setattr(moe_op, "_MOE_A_QUANT_FUNC", a_quant)
    p = make_problem("custom:H=256,I=256,E=4,k=2", 3, scheme, 1, 1)
    qw = make_weights(p, "cpu", 0).quant
    fixed = af.triton_fp8_fixed(scheme, qw.w1_scale, qw.w2_scale)
    gemm1, gemm2 = fused_moe_calls(moe_op.fused_moe, qw.w1, qw.w2, tl.bfloat16, False, 2,
                                   fp8=fixed)
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    A, A_scale = quant.quantize_act(x, scheme, "e4m3fn") if scheme == "fp8-block128" else (x, None)
    cfg = af.fit_block_k(dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=256, GROUP_SIZE_M=1,
                              num_warps=4, num_stages=2), scheme)
    routing = dict(topk_weights=torch.rand(3, 2), topk_ids=torch.zeros(3, 2, dtype=torch.int32),
                   sorted_token_ids=torch.arange(16, dtype=torch.int32),
                   expert_ids=torch.zeros(1, dtype=torch.int32),
                   num_tokens_post_padded=torch.tensor([16], dtype=torch.int32))
    gemm1(A=A, A_scale=A_scale, C=torch.empty(3, 2, 512, dtype=torch.bfloat16), config=cfg,
          **routing)
    return p, qw, launch.calls, quantised, gemm1


def test_triton_block128_scales_pass_the_real_asserts_and_reach_the_kernel(monkeypatch):
    p, qw, calls, quantised, gemm1 = _triton_point("fp8-block128", monkeypatch)
    assert gemm1.fixed["block_shape"] == [128, 128] and gemm1.fixed["use_fp8_w8a8"]
    assert not quantised  # A arrives in fp8 with its 1x128 scales
    (args, kw), = calls
    a_scale, b_scale = args[3], args[4]
    assert b_scale is qw.w1_scale and tuple(b_scale.shape) == (4, 512 // 128, 256 // 128)
    assert a_scale.shape == (3, 2) and a_scale.dtype == torch.float32
    # strides the kernel reads its scales with: (asm, ask, bse, bsk, bsn), then the groups
    assert args[19:24] == (a_scale.stride(0), a_scale.stride(1), b_scale.stride(0),
                           b_scale.stride(2), b_scale.stride(1))
    assert args[24:26] == (128, 128)
    assert kw["BLOCK_SIZE_K"] == 128 and kw["use_fp8_w8a8"] is True


def test_triton_per_tensor_quantises_A_itself_with_one_scale_per_expert(monkeypatch):
    p, qw, calls, quantised, gemm1 = _triton_point("fp8-tensor", monkeypatch)
    assert gemm1.fixed["block_shape"] is None
    assert quantised == [(torch.float8_e4m3fn, (3, 256))]  # into B's dtype, the whole A
    (args, kw), = calls
    b_scale = args[4]
    assert b_scale.shape == (4,) and b_scale.dtype == torch.float32  # b_scale_ptr + expert
    assert args[21:24] == (0, 0, 0)  # 1-D: the kernel gets no scale strides
    assert args[24:26] == (0, 0)


def test_triton_has_no_fp8_channel():
    with pytest.raises(ValueError, match="one weight scale per expert"):
        af.triton_fp8_fixed("fp8-channel", None, None)
    src = _source(os.path.join("ops", "triton", "_triton_kernels", "moe_op.py"))
    # the fp8 w8a8 non-block branch loads a single scale per expert
    assert "b_scale = tl.load(b_scale_ptr + off_experts)" in src


def test_fp8_launch_configs_and_files():
    """aiter's own FP8_W8A8 configs for fp8 points, BLOCK_SIZE_K fitted to the 128 block,
    tuned files named as vLLM names fp8 ones (never shared with bf16's)."""
    from moe_lab.backends.aiter_triton import AiterTritonBackend
    be = AiterTritonBackend()
    blk = make_problem("deepseek-r1", 64, "fp8-block128", 8, 1)
    cfg = be.default_config(blk)
    assert 128 % cfg["gemm1"]["BLOCK_SIZE_K"] == 0
    assert len(be.config_space(blk)["gemm1"]) > 0  # all() of an empty space passes
    assert all(128 % c["BLOCK_SIZE_K"] == 0 for c in be.config_space(blk)["gemm1"])
    names = {d: be.config_files(make_problem("deepseek-r1", 64, d, 8, 1), "NVIDIA H200")["gemm1"]
             for d in ("bf16", "fp8-tensor", "fp8-block128")}
    assert names == {
        "bf16": "E=256,N=256,device_name=NVIDIA_H200.json",
        "fp8-tensor": "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8.json",
        "fp8-block128": "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,"
                        "block_shape=[128,128].json"}
    assert af.fit_block_k(dict(BLOCK_SIZE_K=256), "fp8-block128")["BLOCK_SIZE_K"] == 128
    assert af.fit_block_k(dict(BLOCK_SIZE_K=256), "fp8-tensor")["BLOCK_SIZE_K"] == 256


# --- CK: prepare() and the call, with only the ROCm GPU faked (test_aiter_api's fixture) ---
from test_aiter_api import _load_real_shuffle, fake_rocm_aiter  # noqa: E402,F401


def _fake_tkw1(monkeypatch):
    """aiter's asm_moe_tkw1 with its real signature (from fused_moe_bf16_asm.py), body
    replaced by a recorder."""
    tree = ast.parse(_source("fused_moe_bf16_asm.py"))
    fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "asm_moe_tkw1")
    fdef.body = [ast.parse("return __record__(dict(locals()))").body[0]]
    fdef.decorator_list = []
    calls = []

    def record(kw):
        calls.append(kw)
        return torch.zeros_like(kw["hidden_states"])
    ns = dict(torch=torch, ActivationType=_real_enum("ActivationType"), __record__=record)
    exec(compile(ast.Module([fdef], type_ignores=[]), "aiter/fused_moe_bf16_asm.py", "exec"), ns)
    mod = types.ModuleType("aiter.fused_moe_bf16_asm")
    mod.asm_moe_tkw1 = ns["asm_moe_tkw1"]
    monkeypatch.setitem(__import__("sys").modules, "aiter.fused_moe_bf16_asm", mod)
    return calls


@pytest.mark.parametrize("scheme", quant.SCHEMES)
def test_ck_prepare_passes_shuffled_fp8_weights_scales_and_quant_type(fake_rocm_aiter, scheme):
    from moe_lab.backends.aiter_ck import AiterCKBackend
    calls, Act, Quant = fake_rocm_aiter
    p = make_problem("custom:H=256,I=256,E=4,k=2", 5, scheme, 1, 1)
    w, inp = make_weights(p, "cpu", 0), make_inputs(p, "cpu", 1)
    AiterCKBackend().prepare(p, w)(*inp.args())
    (kw,) = calls
    shuffle, qw = _load_real_shuffle(), w.quant
    for got, q in ((kw["w1"], qw.w1), (kw["w2"], qw.w2)):
        assert got.dtype == q.dtype  # fp8 in the device's format
        assert torch.equal(got.view(torch.uint8), shuffle(q, layout=(16, 16)).view(torch.uint8))
    assert kw["hidden_states"] is inp.x  # bf16: fused_moe quantises it (and stage 1's output)
    assert kw["quant_type"].name == af.CK_QUANT[scheme] and kw["a1_scale"] is None
    E = p.local_experts
    want = {"fp8-tensor": ((E, 1), (E, 1)), "fp8-channel": ((E, 512, 1), (E, 256, 1)),
            "fp8-block128": ((E, 4, 2), (E, 2, 2))}[scheme]
    assert (tuple(kw["w1_scale"].shape), tuple(kw["w2_scale"].shape)) == want


def test_ck_llama4_fp8_channel_goes_through_tkw1(fake_rocm_aiter, monkeypatch):
    from moe_lab.backends.aiter_ck import AiterCKBackend
    calls, Act, Quant = fake_rocm_aiter
    tkw1 = _fake_tkw1(monkeypatch)
    p = make_problem("custom:H=256,I=256,E=16,k=1,router=llama4", 5, "fp8-channel", 8, 8, 1)
    w, inp = make_weights(p, "cpu", 0), make_inputs(p, "cpu", 1)
    AiterCKBackend().prepare(p, w)(*inp.args())
    assert not calls  # not fused_moe
    (kw,) = tkw1
    assert kw["fc1_scale"].shape == (2, 512, 1) and kw["fc2_scale"].shape == (2, 256, 1)
    assert kw["a16"] is False and kw["fc1_smooth_scale"] is None
    assert kw["topk_weight"].dtype == torch.float32 and kw["topk_ids"].dtype == torch.int32
    assert torch.equal(kw["expert_mask"], torch.cat([(p.expert_map() > -1).int(),
                                                     torch.zeros(1).int()]))
