"""The `aiter` (CK/asm) adapter cannot run here (no ROCm GPU), so it is checked against
the real installed `amd-aiter` package: its `fused_moe` signature read from the source,
its real `shuffle_weight`, and the enum names compiled into its pybind module."""
import ast
import enum
import importlib.util
import inspect
import os
import re
import sys
import types
from typing import Optional

import pytest
import torch

from moe_lab.backends.aiter_ck import (AiterCKBackend, SHUFFLE_LAYOUT, expert_mask_from_map,
                                       fused_moe_kwargs, shuffle_ok)
from moe_lab.backends import aiter_triton as at
from moe_lab.backends.aiter_triton import (FUSED_MOE_PER_CALL, AiterTritonBackend, FusedMoeCall,
                                           aiter_root, bind_fused_moe, fused_moe_calls,
                                           load_aiter_triton)
from moe_lab.measuring.correctness import make_inputs, make_weights
from moe_lab.core.problems import SEED_MODELS, make_problem

ROOT = aiter_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="amd-aiter is not installed")


def _real_fused_moe_def() -> ast.FunctionDef:
    tree = ast.parse(open(os.path.join(ROOT, "fused_moe.py")).read())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fused_moe")


def _real_enum_values(name: str) -> list[str]:
    meta = os.path.join(os.path.dirname(ROOT), "aiter_meta", "csrc", "include", "aiter_enum.h")
    src = open(meta).read()
    body = re.search(r"enum class %s[^{]*\{([^}]*)\}" % name, src).group(1)
    return [re.match(r"\s*(\w+)", item).group(1) for item in body.split(",") if item.strip()]


def _load_real_shuffle():
    spec = importlib.util.spec_from_file_location("aiter_real_shuffle",
                                                  os.path.join(ROOT, "ops", "shuffle.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # shuffle.py imports only torch
    return mod.shuffle_weight


def test_kwargs_match_real_fused_moe_signature():
    fdef = _real_fused_moe_def()
    params = [a.arg for a in fdef.args.args]
    n_required = len(params) - len(fdef.args.defaults)
    enums = (types.SimpleNamespace(Silu="Silu"), types.SimpleNamespace(No="No"))
    prob = make_problem("llama4-scout-16e", 4, tp=8, ep=8)
    kw = fused_moe_kwargs(prob, None, None, None, None, None, enums)
    assert set(kw) <= set(params), f"not parameters of aiter fused_moe: {set(kw) - set(params)}"
    assert set(params[:n_required]) <= set(kw), "a required aiter parameter is not passed"
    assert kw["doweight_stage1"] is True  # Llama-4 routes the weight on the input
    assert fused_moe_kwargs(make_problem("deepseek-r1", 4, tp=8), None, None, None, None, None,
                            enums)["doweight_stage1"] is False


def test_enum_members_exist_in_real_aiter():
    assert "Silu" in _real_enum_values("ActivationType")
    assert "No" in _real_enum_values("QuantType")


@pytest.mark.parametrize("model", SEED_MODELS)
@pytest.mark.parametrize("ep", [1, 8])
def test_supports_agrees_with_real_shuffle_weight(model, ep):
    """Our support check says yes exactly when aiter's real shuffle_weight accepts both
    weight shapes (run on meta tensors: the real code, no memory)."""
    shuffle = _load_real_shuffle()
    prob = make_problem(model, 8, "bf16", 8, ep, 0)
    shapes = [(1, 2 * prob.inter, prob.hidden), (1, prob.hidden, prob.inter)]
    real_ok = True
    for s in shapes:
        try:
            out = shuffle(torch.empty(s, dtype=torch.bfloat16, device="meta"), layout=SHUFFLE_LAYOUT)
            assert out.shape == s
        except AssertionError:
            real_ok = False
    ours = all(shuffle_ok(s, 2)[0] for s in shapes)
    assert ours == real_ok


@pytest.mark.parametrize("shape", [(1, 48, 96), (1, 64, 40), (1, 24, 64)])
def test_shuffle_constraint_matches_real_code_on_odd_shapes(shape):
    shuffle = _load_real_shuffle()
    try:
        shuffle(torch.empty(shape, dtype=torch.bfloat16, device="meta"), layout=SHUFFLE_LAYOUT)
        real_ok = True
    except AssertionError:
        real_ok = False
    assert shuffle_ok(shape, 2)[0] == real_ok


def test_expert_mask_from_expert_map():
    prob = make_problem("deepseek-r1", 4, tp=8, ep=8, ep_rank=2)
    mask = expert_mask_from_map(prob.expert_map())
    assert mask.dtype == torch.int32 and mask.shape == (256,)
    assert mask.sum() == 32 and mask[64:96].all() and mask[:64].sum() == 0
    assert expert_mask_from_map(None) is None


@pytest.fixture
def fake_rocm_aiter(monkeypatch):
    """Only the ROCm GPU is faked: `fused_moe` is a function with the REAL signature,
    compiled from aiter's source with its body replaced by a recorder; shuffle_weight is
    aiter's real function; the enums carry the real member names and values."""
    calls = []
    fdef = _real_fused_moe_def()
    fdef.body = [ast.parse("return __record__(dict(locals()))").body[0]]
    fdef.decorator_list = []
    Act = enum.Enum("ActivationType", {n: i - 1 for i, n in enumerate(_real_enum_values("ActivationType"))})
    Quant = enum.Enum("QuantType", {n: i for i, n in enumerate(_real_enum_values("QuantType"))})

    def record(kw):
        calls.append(kw)
        return torch.zeros_like(kw["hidden_states"])
    ns = dict(torch=torch, Optional=Optional, ActivationType=Act, QuantType=Quant,
              __record__=record)
    exec(compile(ast.Module([fdef], type_ignores=[]), "aiter/fused_moe.py", "exec"), ns)
    aiter = types.ModuleType("aiter")
    aiter.ActivationType, aiter.QuantType = Act, Quant
    fm = types.ModuleType("aiter.fused_moe")
    fm.fused_moe = ns["fused_moe"]
    ops = types.ModuleType("aiter.ops")
    sh = types.ModuleType("aiter.ops.shuffle")
    sh.shuffle_weight = _load_real_shuffle()
    for name, mod in [("aiter", aiter), ("aiter.fused_moe", fm), ("aiter.ops", ops),
                      ("aiter.ops.shuffle", sh)]:
        monkeypatch.setitem(sys.modules, name, mod)
    return calls, Act, Quant


@pytest.mark.parametrize("model,ep", [("llama4-scout-16e", 8), ("qwen3-30b-a3b", 1)])
def test_prepare_and_call_bind_to_real_signature(fake_rocm_aiter, model, ep):
    calls, Act, Quant = fake_rocm_aiter
    prob = make_problem(model, 5, "bf16", 8, ep, 0)
    if model.startswith("llama4"):  # keep the test small: same code path, fewer experts
        prob = make_problem("custom:H=64,I=32,E=16,k=1,router=llama4", 5, "bf16", 8, 8, 1)
    w = make_weights(prob, "cpu", 0)
    inp = make_inputs(prob, "cpu", 1)
    fn = AiterCKBackend().prepare(prob, w)
    fn(inp.x, inp.topk_weights.half(), inp.topk_ids.long())  # adapter fixes dtypes
    (kw,) = calls
    assert kw["hidden_states"] is inp.x
    assert kw["topk_weight"].dtype == torch.float32 and kw["topk_ids"].dtype == torch.int32
    shuffle = _load_real_shuffle()
    assert torch.equal(kw["w1"], shuffle(w.w1, layout=(16, 16)))
    assert torch.equal(kw["w2"], shuffle(w.w2, layout=(16, 16)))
    assert kw["activation"] is Act.Silu and kw["quant_type"] is Quant.No
    assert kw["doweight_stage1"] == prob.weight_on_input
    if prob.ep > 1:  # vLLM's layout: 1 per local expert, then a 0 sentinel (length E+1)
        assert torch.equal(kw["expert_mask"],
                           torch.cat([(prob.expert_map() > -1).int(), torch.zeros(1).int()]))
    else:
        assert kw["expert_mask"] is None


def test_aiter_triton_loader_imports_real_modules_on_cpu():
    moe_op, align = load_aiter_triton()
    assert moe_op.__file__.startswith(ROOT) and align.__file__.startswith(ROOT)
    params = list(inspect.signature(moe_op.fused_moe).parameters)
    assert params == FUSED_MOE_PARAMS  # all 19, in order
    assert list(inspect.signature(align.moe_align_block_size_triton).parameters) == [
        "topk_ids", "num_experts", "block_size", "sorted_token_ids", "expert_ids",
        "num_tokens_post_pad"]
    assert hasattr(moe_op, "_fused_moe_kernel")


# ------------------------------- aiter-triton: the call bound to moe_op.fused_moe's signature
# amd-aiter 0.1.7.post2.dev18, aiter/ops/triton/moe_op.py
FUSED_MOE_PARAMS = ["A", "B", "C", "A_scale", "B_scale", "B_zp", "topk_weights", "topk_ids",
                    "sorted_token_ids", "expert_ids", "num_tokens_post_padded",
                    "mul_routed_weight", "top_k", "compute_type", "use_fp8_w8a8",
                    "use_int8_w8a16", "use_int4_w4a16", "block_shape", "config"]


def _real_fused_moe():
    moe_op, align = load_aiter_triton()  # the way the backend loads it
    return moe_op.fused_moe, align.moe_align_block_size_triton


def _triton_problem(kind):
    if kind == "llama4-ep":  # weight on the input, k=1, EP: the expert map path
        prob = make_problem("custom:H=64,I=32,E=16,k=1,router=llama4", 5, "bf16", 8, 8, 1)
    else:  # k>1, no EP
        prob = make_problem("custom:H=64,I=32,E=8,k=2", 5, "bf16", 8, 1, 0)
    return prob, make_weights(prob, "cpu", 0), make_inputs(prob, "cpu", 1)


@pytest.mark.parametrize("woi,k", [(True, 1), (False, 2), (False, 8)])
def test_aiter_triton_calls_pass_every_real_parameter_and_only_those(woi, k):
    import triton.language as tl
    fused_moe, _ = _real_fused_moe()
    params = inspect.signature(fused_moe).parameters
    required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
    assert list(params) == FUSED_MOE_PARAMS and len(required) == 17
    w1, w2 = torch.zeros(4, 64, 32), torch.zeros(4, 32, 32)
    gemm1, gemm2 = fused_moe_calls(fused_moe, w1, w2, tl.bfloat16, woi, k)
    for call in (gemm1, gemm2):
        assert call.names <= set(params), f"not parameters: {call.names - set(params)}"
        assert required <= call.names, f"required, not passed: {required - call.names}"
        assert call.names == set(params)  # the optional block_shape and config too
        assert call.bound.signature == inspect.signature(fused_moe)
        assert call.fixed["compute_type"] is tl.bfloat16
        assert not any(call.fixed[q] for q in ("use_fp8_w8a8", "use_int8_w8a16", "use_int4_w4a16"))
        assert all(call.fixed[n] is None for n in ("A_scale", "B_scale", "B_zp", "block_shape"))
    assert gemm1.fixed["B"] is w1 and gemm2.fixed["B"] is w2
    assert (gemm1.fixed["top_k"], gemm2.fixed["top_k"]) == (k, 1)
    assert (gemm1.fixed["mul_routed_weight"], gemm2.fixed["mul_routed_weight"]) == (woi, not woi)


@pytest.mark.parametrize("wrong,right", [("topk_weight", "topk_weights"), ("a", "A"),
                                         ("num_tokens_post_pad", "num_tokens_post_padded")])
def test_binding_rejects_a_misspelt_argument(wrong, right):
    """The mutation a signature check must catch: an argument under a wrong name."""
    import triton.language as tl
    fused_moe, _ = _real_fused_moe()
    good, _ = fused_moe_calls(fused_moe, torch.zeros(1), torch.zeros(1), tl.bfloat16, False, 2)
    per_call = tuple(wrong if n == right else n for n in FUSED_MOE_PER_CALL)
    with pytest.raises(TypeError, match=f"not parameters: '{wrong}'; required, not passed: "
                                        f"'{right}'"):
        FusedMoeCall(fused_moe, per_call, **good.fixed)
    kwargs = {**good.fixed, **dict.fromkeys(FUSED_MOE_PER_CALL)}
    kwargs[wrong] = kwargs.pop(right)
    with pytest.raises(TypeError, match=wrong) as ei:
        bind_fused_moe(fused_moe, kwargs)
    assert "topk_weights: torch.Tensor" in str(ei.value)  # the real signature is named
    assert bind_fused_moe(fused_moe, {**good.fixed, **dict.fromkeys(FUSED_MOE_PER_CALL)})


@pytest.mark.parametrize("dropped", ["top_k", "compute_type", "use_int4_w4a16", "B_zp"])
def test_binding_rejects_a_missing_required_argument(dropped):
    import triton.language as tl
    fused_moe, _ = _real_fused_moe()
    good, _ = fused_moe_calls(fused_moe, torch.zeros(1), torch.zeros(1), tl.bfloat16, False, 2)
    fixed = {n: v for n, v in good.fixed.items() if n != dropped}
    with pytest.raises(TypeError, match=f"required, not passed: '{dropped}'"):
        FusedMoeCall(fused_moe, **fixed)
    with pytest.raises(TypeError, match="both fixed and per call"):
        FusedMoeCall(fused_moe, **good.fixed, config=None)


def _stub_modules(fused_moe_sig, align_sig):
    """moe_op / align stand-ins with the given signatures that record their calls."""
    calls = []

    def fused_moe(**kw):
        calls.append(("fused_moe", fused_moe_sig.bind(**kw).arguments))

    def align(*args, **kw):
        calls.append(("align", align_sig.bind(*args, **kw).arguments))
    fused_moe.__signature__, align.__signature__ = fused_moe_sig, align_sig
    return (types.SimpleNamespace(fused_moe=fused_moe),
            types.SimpleNamespace(moe_align_block_size_triton=align)), calls


def test_prepare_fails_when_the_installed_signature_differs(monkeypatch):
    """A fused_moe whose parameter is renamed (an aiter upgrade, or the backend's
    spelling drifting) fails at prepare time, naming the argument."""
    fused_moe, align = _real_fused_moe()
    sig = inspect.signature(fused_moe)
    renamed = sig.replace(parameters=[p.replace(name="topk_weight") if p.name == "topk_weights"
                                      else p for p in sig.parameters.values()])
    mods, calls = _stub_modules(renamed, inspect.signature(align))
    monkeypatch.setattr(at, "load_aiter_triton", lambda: mods)
    prob, w, _ = _triton_problem("k2")
    with pytest.raises(TypeError, match="not parameters: 'topk_weights'; required, not "
                                        "passed: 'topk_weight'"):
        AiterTritonBackend().prepare(prob, w)
    assert calls == []


@pytest.mark.parametrize("kind", ["llama4-ep", "k2"])
def test_backend_calls_bind_to_the_real_signatures_on_cpu(monkeypatch, kind):
    """The backend's whole call sequence, run on the CPU with aiter's two kernels replaced
    by recorders that carry the REAL signatures: every call binds, and passes what the
    backend computed before the binding (same tensors, flags, config)."""
    import triton.language as tl
    fused_moe, align = _real_fused_moe()
    mods, calls = _stub_modules(inspect.signature(fused_moe), inspect.signature(align))
    monkeypatch.setattr(at, "load_aiter_triton", lambda: mods)
    prob, w, inp = _triton_problem(kind)
    be = AiterTritonBackend()
    fn = be.prepare(prob, w)
    T, k = inp.topk_ids.shape
    out = fn(inp.x, inp.topk_weights, inp.topk_ids)
    assert out.shape == inp.x.shape
    assert [c[0] for c in calls] == ["align", "fused_moe", "fused_moe"]
    al, g1, g2 = (c[1] for c in calls)
    assert set(g1) == set(g2) == set(FUSED_MOE_PARAMS)  # every parameter passed by name
    if prob.ep > 1:  # remote experts -> the extra expert E_local, int32
        emap = w.expert_map
        local = emap[inp.topk_ids.long()]
        assert torch.equal(al["topk_ids"], torch.where(local < 0, w.w1.shape[0], local).int())
        assert al["num_experts"] == w.w1.shape[0] + 1
    else:
        assert al["topk_ids"] is inp.topk_ids and al["num_experts"] == w.w1.shape[0]
    assert al["block_size"] == be.last_config["gemm1"]["BLOCK_SIZE_M"]
    for g, stage in ((g1, "gemm1"), (g2, "gemm2")):
        # the router's ids: fused_moe reads only their numel (the align took the EP map)
        assert g["topk_ids"] is inp.topk_ids and g["topk_weights"] is inp.topk_weights
        assert g["sorted_token_ids"] is al["sorted_token_ids"]  # one alignment: same BLOCK_M
        assert g["num_tokens_post_padded"] is al["num_tokens_post_pad"]
        assert g["config"] == be.last_config[stage] and g["compute_type"] is tl.bfloat16
        assert g["A_scale"] is g["B_scale"] is g["B_zp"] is g["block_shape"] is None
        assert not (g["use_fp8_w8a8"] or g["use_int8_w8a16"] or g["use_int4_w4a16"])
    assert g1["A"] is inp.x and g1["B"] is w.w1 and g2["B"] is w.w2
    assert g1["C"].shape == (T, k, 2 * prob.inter) and g2["C"].shape == (T, k, prob.hidden)
    assert g2["A"].shape == (T * k, prob.inter)
    assert (g1["top_k"], g2["top_k"]) == (k, 1)
    assert (g1["mul_routed_weight"], g2["mul_routed_weight"]) == (prob.weight_on_input,
                                                                  not prob.weight_on_input)


def test_configs_per_gemm_and_one_alignment_per_block_m(monkeypatch):
    """A configuration per GEMM reaches its own call; GEMMs with different BLOCK_SIZE_M get
    an alignment each; a table {M: config} picks the nearest M."""
    fused_moe, align = _real_fused_moe()
    mods, calls = _stub_modules(inspect.signature(fused_moe), inspect.signature(align))
    monkeypatch.setattr(at, "load_aiter_triton", lambda: mods)
    prob, w, inp = _triton_problem("k2")
    base = dict(BLOCK_SIZE_N=64, BLOCK_SIZE_K=64, GROUP_SIZE_M=1, num_warps=4, num_stages=3)
    c16, c32 = dict(base, BLOCK_SIZE_M=16), dict(base, BLOCK_SIZE_M=32)
    fn = AiterTritonBackend().prepare(prob, w, config={"gemm1": c16, "gemm2": c32})
    fn(inp.x, inp.topk_weights, inp.topk_ids)
    names = [c[0] for c in calls]
    assert names == ["align", "fused_moe", "align", "fused_moe"]
    assert [c[1]["block_size"] for c in calls if c[0] == "align"] == [16, 32]
    assert calls[1][1]["config"] == c16 and calls[3][1]["config"] == c32
    # the row's launch_config is what each GEMM was launched with
    assert fn.launch_config(inp.x.shape[0]) == {"gemm1": c16, "gemm2": c32}
    calls.clear()
    T = inp.x.shape[0]
    table = {1: c16, T + 1000: c32}
    fn = AiterTritonBackend().prepare(prob, w, config={"gemm1": table, "gemm2": table})
    fn(inp.x, inp.topk_weights, inp.topk_ids)
    assert [c[1]["block_size"] for c in calls if c[0] == "align"] == [16 if T < 500 else 32]
    want = c16 if T < 500 else c32
    assert [c[1]["config"] for c in calls if c[0] == "fused_moe"] == [want, want]
    assert fn.launch_config(T) == {"gemm1": want, "gemm2": want}
    assert fn.launch_config(T + 1000) == {"gemm1": c32, "gemm2": c32}


def test_the_fused_silu_variant_binds_gemm1_to_the_real_fused_moe_silu(monkeypatch):
    """aiter-triton-silu: gemm1 goes to aiter's real `fused_moe_silu` (its signature bound
    at prepare time) and writes the activated [T, k, I]; gemm2 is fused_moe's."""
    from moe_lab.backends.aiter_triton_silu import AiterTritonSiluBackend
    silu_mod = at.load_silu_fused()
    real_silu = silu_mod.fused_moe_silu
    fused_moe, align = _real_fused_moe()
    assert list(inspect.signature(real_silu).parameters) == list(FUSED_MOE_PARAMS)
    mods, calls = _stub_modules(inspect.signature(fused_moe), inspect.signature(align))
    monkeypatch.setattr(at, "load_aiter_triton", lambda: mods)
    seen = []

    def silu_recorder(*a, **kw):
        bound = inspect.signature(real_silu).bind(*a, **kw)
        seen.append(bound.arguments)
        C = bound.arguments["C"]
        C.zero_()
    monkeypatch.setattr(at, "load_silu_fused", lambda: type("M", (), {"fused_moe_silu": silu_recorder}))
    prob, w, inp = _triton_problem("k2")
    fn = AiterTritonSiluBackend().prepare(prob, w)
    fn(inp.x, inp.topk_weights, inp.topk_ids)
    T, k = inp.topk_ids.shape
    # 2-D: fused_moe_silu reads C.stride(0), C.stride(1) as row and column strides
    assert len(seen) == 1 and seen[0]["C"].shape == (T * k, prob.inter)
    assert seen[0]["C"].stride() == (prob.inter, 1)
    assert [c[0] for c in calls] == ["align", "fused_moe"]  # gemm2 only, from fused_moe
    assert calls[1][1]["A"].shape == (T * k, prob.inter)
    names = AiterTritonSiluBackend().config_files(prob, "NVIDIA H200")
    assert names["gemm1"].endswith(",fused=silu.json") and names["gemm2"].endswith("silu_down.json")


# ------------------------------- expert_mask: what the installed fused_moe does with it (EP)
def _real_fused_moe_inner() -> ast.FunctionDef:
    tree = ast.parse(open(os.path.join(ROOT, "fused_moe.py")).read())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fused_moe_")


def test_real_fused_moe_sorts_over_expert_mask_numel_experts():
    """fused_moe_: `global_E = expert_mask.numel()` becomes moe_sorting's num_experts, and
    the mask goes with it; no other use of the mask, no length check against E."""
    fdef = _real_fused_moe_inner()
    src = ast.unparse(fdef)
    assert "global_E = expert_mask.numel()" in src
    uses = [n for n in ast.walk(fdef) if isinstance(n, ast.Name) and n.id == "expert_mask"]
    assert len(uses) == 3  # `is not None`, .numel(), the moe_sorting argument
    call = next(n for n in ast.walk(fdef) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "moe_sorting")
    tree = ast.parse(open(os.path.join(ROOT, "fused_moe.py")).read())
    sorting = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "moe_sorting")
    params = [a.arg for a in sorting.args.args]
    passed = dict(zip(params, (ast.unparse(a) for a in call.args)))
    assert passed["num_experts"] == "global_E" and passed["expert_mask"] == "expert_mask"


def test_ck_tile_sorting_reads_the_mask_over_num_experts_and_numbers_by_prefix_sum():
    hdr = open(os.path.join(os.path.dirname(ROOT), "aiter_meta", "3rdparty", "composable_kernel",
                            "include", "ck_tile", "ops", "fused_moe", "kernel",
                            "moe_sorting_kernel.hpp")).read()
    assert "const void* p_local_expert_mask; // [experts]" in hdr
    assert "smem_cumdup(i_e + 1) = local_expert_mask[i_e];" in hdr  # prefix sum -> local ids
    assert "return local_masking ? x_ : 0;" in hdr  # a masked expert gets no padded rows
    assert "if(local_expert_mask[i_e] == 0)" in hdr  # ... and no block


def test_expert_mask_sentinel_is_vllms_layout():
    """vLLM determine_expert_map(return_expert_mask=True), no fused shared experts:
    ones(E + 1); mask[-1] = 0; mask[:E] = expert_map > -1."""
    prob = make_problem("deepseek-r1", 4, tp=8, ep=8, ep_rank=2)
    emap = prob.expert_map()
    vllm = torch.ones(prob.experts + 1, dtype=torch.int32)
    vllm[-1] = 0
    vllm[:prob.experts] = emap > -1
    mask = expert_mask_from_map(emap, sentinel=True)
    assert mask.dtype == torch.int32 and torch.equal(mask, vllm)
    assert torch.equal(mask[:-1], expert_mask_from_map(emap))


def _real_torch_moe():
    """aiter's own reference (fused_moe.py torch_moe), its code run on the CPU."""
    tree = ast.parse(open(os.path.join(ROOT, "fused_moe.py")).read())
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("torch_moe", "torch_moe_act")]
    aiter = types.SimpleNamespace(get_torch_act=lambda act: torch.nn.functional.silu)
    ns = dict(torch=torch, aiter=aiter, ActivationType=types.SimpleNamespace(Silu="Silu"),
              dtypes=types.SimpleNamespace(fp32=torch.float32, i32=torch.int32))
    exec(compile(ast.Module(body, type_ignores=[]), "aiter/fused_moe.py", "exec"), ns)
    return ns["torch_moe"]


@pytest.mark.parametrize("ep_rank", [0, 3])
def test_sentinel_mask_gives_aiters_reference_our_reference(ep_rank):
    """aiter's torch_moe maps ids through the mask's prefix sum the way its sorting kernel
    does: with the E+1 mask (what prepare passes) it equals the E mask and our reference."""
    from moe_lab.measuring.correctness import reference
    prob = make_problem("custom:H=64,I=32,E=16,k=4", 6, "bf16", 4, 4, ep_rank)
    w = make_weights(prob, "cpu", 0)
    inp = make_inputs(prob, "cpu", 2)
    torch_moe = _real_torch_moe()
    args = (inp.x, w.w1, w.w2, inp.topk_weights, inp.topk_ids)
    with_sentinel = torch_moe(*args, expert_mask=expert_mask_from_map(w.expert_map, True))
    without = torch_moe(*args, expert_mask=expert_mask_from_map(w.expert_map))
    assert torch.equal(with_sentinel, without)
    ref = reference(prob, w, inp)
    assert (with_sentinel.double() - ref).abs().max() <= 2e-2 * ref.abs().max()
